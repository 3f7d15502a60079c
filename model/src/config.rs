//! `config.json` (and the EOS ids of `generation_config.json`) for Qwen3 dense models.
//!
//! Both transformers spellings of the rope base are accepted: top-level `rope_theta`
//! (4.x) and `rope_parameters.rope_theta` (5.x). Features this decoder does not
//! implement (MoE, sliding windows, rope scaling, attention bias) are refused up front
//! rather than silently ignored.
use crate::error::ModelError;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

/// The Qwen3 hyper-parameters the decoder needs, with defaults resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// Independent of hidden_size / heads (Qwen3-0.6B: 16 × 128 = 2048 ≠ 1024).
    pub head_dim: usize,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub tie_word_embeddings: bool,
    pub bos_token_id: Option<u32>,
    /// From generation_config.json when present, else config.json.
    pub eos_token_ids: Vec<u32>,
}

/// An id or a list of ids: both appear in shipped configs.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Ids {
    One(u32),
    Many(Vec<u32>),
}

impl Ids {
    fn into_vec(self) -> Vec<u32> {
        match self {
            Ids::One(x) => vec![x],
            Ids::Many(v) => v,
        }
    }
}

/// config.json as written by transformers; unknown fields are ignored.
#[derive(Debug, Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    max_position_embeddings: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_parameters: Option<Value>,
    rope_scaling: Option<Value>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    use_sliding_window: Option<bool>,
    hidden_act: Option<String>,
    bos_token_id: Option<u32>,
    eos_token_id: Option<Ids>,
}

#[derive(Debug, Deserialize)]
struct RawGenerationConfig {
    eos_token_id: Option<Ids>,
}

/// transformers' Qwen3Config defaults, used when a field is absent.
const DEFAULT_ROPE_THETA: f64 = 10000.0;
const DEFAULT_RMS_EPS: f64 = 1e-6;
const DEFAULT_MAX_POSITIONS: usize = 32768;

pub(crate) fn read_json(path: &Path) -> Result<Value, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| ModelError::Json {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })
}

/// serde_json's type errors do not name the field; check the common ones first so the
/// message does.
fn check_field_types(v: &Value) -> Result<(), String> {
    let ints = [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
    ];
    let floats = ["rms_norm_eps", "rope_theta"];
    let bools = [
        "tie_word_embeddings",
        "attention_bias",
        "use_sliding_window",
    ];
    let got = |x: &Value| x.to_string().chars().take(40).collect::<String>();
    for k in ints {
        match v.get(k) {
            Some(x) if !x.is_null() && x.as_u64().is_none() => {
                return Err(format!(
                    "\"{k}\" must be a non-negative integer, got {}",
                    got(x)
                ))
            }
            _ => {}
        }
    }
    for k in floats {
        match v.get(k) {
            Some(x) if !x.is_null() && !x.is_number() => {
                return Err(format!("\"{k}\" must be a number, got {}", got(x)))
            }
            _ => {}
        }
    }
    for k in bools {
        match v.get(k) {
            Some(x) if !x.is_null() && !x.is_boolean() => {
                return Err(format!("\"{k}\" must be true or false, got {}", got(x)))
            }
            _ => {}
        }
    }
    Ok(())
}

impl Config {
    /// Reads `dir/config.json` and, if present, `dir/generation_config.json`.
    pub fn from_dir(dir: &Path) -> Result<Config, ModelError> {
        let path = dir.join("config.json");
        let mut cfg = Config::from_json(&read_json(&path)?, &path)?;
        let gen_path = dir.join("generation_config.json");
        if gen_path.exists() {
            let raw: RawGenerationConfig =
                serde_json::from_value(read_json(&gen_path)?).map_err(|e| ModelError::Json {
                    path: gen_path.clone(),
                    msg: e.to_string(),
                })?;
            if let Some(ids) = raw.eos_token_id {
                cfg.eos_token_ids = ids.into_vec();
            }
        }
        Ok(cfg)
    }

    /// Parses config.json contents; `path` is only used in error messages.
    pub fn from_json(value: &Value, path: &Path) -> Result<Config, ModelError> {
        let bad = |msg: String| ModelError::Config {
            path: path.to_path_buf(),
            msg,
        };
        // Check the architecture before the fields, so that e.g. a MoE config is
        // reported as unsupported rather than as a shape mismatch.
        let model_type = value.get("model_type").and_then(Value::as_str);
        match model_type {
            Some("qwen3") => {}
            Some(other) => {
                return Err(ModelError::Unsupported(format!(
                    "model_type \"{other}\" in {} (only dense \"qwen3\" is supported)",
                    path.display()
                )))
            }
            None => return Err(bad("missing \"model_type\" (expected \"qwen3\")".into())),
        }
        check_field_types(value).map_err(bad)?;
        let raw: RawConfig = serde_json::from_value(value.clone())
            .map_err(|e| bad(format!("invalid field: {e}")))?;
        debug_assert_eq!(raw.model_type.as_deref(), Some("qwen3"));

        let unsupported = |what: String| {
            Err(ModelError::Unsupported(format!(
                "{what} in {}",
                path.display()
            )))
        };
        if raw.use_sliding_window == Some(true) {
            return unsupported("use_sliding_window is true (sliding-window attention)".into());
        }
        if raw.attention_bias == Some(true) {
            return unsupported("attention_bias is true".into());
        }
        if let Some(act) = &raw.hidden_act {
            if act != "silu" {
                return unsupported(format!("hidden_act \"{act}\" (expected \"silu\")"));
            }
        }
        // 4.x: rope_scaling (null or {"rope_type"|"type": ...}); 5.x: rope_parameters.
        for (field, v) in [
            ("rope_scaling", &raw.rope_scaling),
            ("rope_parameters", &raw.rope_parameters),
        ] {
            if let Some(v) = v.as_ref().filter(|v| !v.is_null()) {
                let kind = v
                    .get("rope_type")
                    .or_else(|| v.get("type"))
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                if kind != "default" {
                    return unsupported(format!("{field} type \"{kind}\" (only default rope)"));
                }
            }
        }
        let nested_theta = match raw
            .rope_parameters
            .as_ref()
            .and_then(|p| p.get("rope_theta"))
        {
            None => None,
            Some(t) => Some(
                t.as_f64()
                    .ok_or_else(|| bad("rope_parameters.rope_theta is not a number".into()))?,
            ),
        };
        let rope_theta = raw
            .rope_theta
            .or(nested_theta)
            .unwrap_or(DEFAULT_ROPE_THETA);

        let heads = raw.num_attention_heads;
        let kv_heads = raw.num_key_value_heads.unwrap_or(heads);
        let positive = [
            ("vocab_size", raw.vocab_size),
            ("hidden_size", raw.hidden_size),
            ("intermediate_size", raw.intermediate_size),
            ("num_hidden_layers", raw.num_hidden_layers),
            ("num_attention_heads", heads),
            ("num_key_value_heads", kv_heads),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(bad(format!("{name} must be positive")));
            }
        }
        if !heads.is_multiple_of(kv_heads) {
            return Err(bad(format!(
                "num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}"
            )));
        }
        let head_dim = match raw.head_dim {
            Some(d) => d,
            None if raw.hidden_size.is_multiple_of(heads) => raw.hidden_size / heads,
            None => {
                return Err(bad(
                    "head_dim absent and hidden_size not divisible by heads".into(),
                ))
            }
        };
        if head_dim == 0 || head_dim % 2 != 0 {
            return Err(bad(format!(
                "head_dim {head_dim} must be positive and even (rotary)"
            )));
        }
        if rope_theta.is_nan() || rope_theta <= 0.0 {
            return Err(bad(format!("rope_theta {rope_theta} must be positive")));
        }
        Ok(Config {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(DEFAULT_MAX_POSITIONS),
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(DEFAULT_RMS_EPS),
            rope_theta,
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            bos_token_id: raw.bos_token_id,
            eos_token_ids: raw.eos_token_id.map(Ids::into_vec).unwrap_or_default(),
        })
    }

    /// Attention heads that share one KV head.
    pub fn gqa_group(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads
    }
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }
}
