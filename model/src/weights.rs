//! Qwen3 weights from `model.safetensors` or a sharded `model.safetensors.index.json`.
//!
//! Files are mmapped; every tensor the config implies is checked for presence, shape
//! and dtype. A bf16 tensor stays in the mapped file (no copy: an 8B checkpoint costs page
//! cache, not 16 GB of process memory); f16/f32 are converted to bf16 (with a note). Each
//! matrix keeps PyTorch's `nn.Linear` layout: row-major `[out_features, in_features]`.
use crate::config::{read_json, Config};
use crate::error::ModelError;
use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One bf16 tensor, row-major.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Data,
}

/// A tensor's elements: in memory, or in place in a mapped safetensors file.
#[derive(Debug, Clone)]
pub enum Data {
    Owned(Vec<bf16>),
    /// `len` elements from byte `offset` of the mapping (2-byte aligned: checked when made).
    Mapped {
        map: Arc<Mmap>,
        offset: usize,
        len: usize,
    },
}

impl Data {
    /// The bf16 elements of `bytes` (a tensor's data inside `map`) in place, when they are
    /// 2-byte aligned; else None (the caller copies them).
    fn mapped(map: &Arc<Mmap>, bytes: &[u8]) -> Option<Data> {
        let offset = bytes.as_ptr() as usize - map.as_ptr() as usize;
        bytemuck::try_cast_slice::<u8, bf16>(bytes).ok()?;
        Some(Data::Mapped {
            map: map.clone(),
            offset,
            len: bytes.len() / 2,
        })
    }
}

impl std::ops::Deref for Data {
    type Target = [bf16];
    fn deref(&self) -> &[bf16] {
        match self {
            Data::Owned(v) => v,
            Data::Mapped { map, offset, len } => {
                bytemuck::cast_slice(&map[*offset..*offset + 2 * len])
            }
        }
    }
}

/// Equal elements, wherever they live.
impl PartialEq for Data {
    fn eq(&self, other: &Data) -> bool {
        **self == **other
    }
}

impl From<Vec<bf16>> for Data {
    fn from(v: Vec<bf16>) -> Data {
        Data::Owned(v)
    }
}

impl Tensor {
    /// Row `r` of a 2-D tensor.
    pub fn row(&self, r: usize) -> &[bf16] {
        let cols = self.shape[1];
        &self.data[r * cols..(r + 1) * cols]
    }
}

/// The tensors of one decoder layer (`model.layers.{i}.*`).
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub input_layernorm: Tensor,          // [hidden]
    pub q_proj: Tensor,                   // [heads*head_dim, hidden]
    pub k_proj: Tensor,                   // [kv_heads*head_dim, hidden]
    pub v_proj: Tensor,                   // [kv_heads*head_dim, hidden]
    pub q_norm: Tensor,                   // [head_dim]
    pub k_norm: Tensor,                   // [head_dim]
    pub o_proj: Tensor,                   // [hidden, heads*head_dim]
    pub post_attention_layernorm: Tensor, // [hidden]
    pub gate_proj: Tensor,                // [intermediate, hidden]
    pub up_proj: Tensor,                  // [intermediate, hidden]
    pub down_proj: Tensor,                // [hidden, intermediate]
}

impl LayerWeights {
    /// Fused QKV for one matvec: rows `[q (heads*head_dim); k (kv*head_dim); v (kv*head_dim)]`,
    /// each row `hidden` long, row-major. Output element `r` of `W x` is q[r] for
    /// r < q_dim, then k, then v.
    pub fn fused_qkv(&self) -> Vec<bf16> {
        self.qkv_parts().concat()
    }

    /// [`LayerWeights::fused_qkv`]'s parts, in order, to copy without concatenating.
    pub fn qkv_parts(&self) -> [&[bf16]; 3] {
        [&self.q_proj.data, &self.k_proj.data, &self.v_proj.data]
    }

    /// Fused gate/up: rows `[gate (intermediate); up (intermediate)]`, each `hidden` long,
    /// row-major; the MLP is `down(silu(y[..I]) * y[I..])` with `y = W x`.
    pub fn fused_gate_up(&self) -> Vec<bf16> {
        self.gate_up_parts().concat()
    }

    /// [`LayerWeights::fused_gate_up`]'s parts, in order.
    pub fn gate_up_parts(&self) -> [&[bf16]; 2] {
        [&self.gate_proj.data, &self.up_proj.data]
    }
}

#[derive(Debug, Clone)]
pub struct Weights {
    pub embed_tokens: Tensor, // [vocab, hidden]
    pub layers: Vec<LayerWeights>,
    pub norm: Tensor, // [hidden]
    /// None when `tie_word_embeddings`: the head is `embed_tokens`.
    pub lm_head: Option<Tensor>,
}

impl Weights {
    /// The output projection `[vocab, hidden]` (tied → embed_tokens).
    pub fn lm_head(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Every expected tensor name with its shape, in file order; the single source of
    /// truth for what a checkpoint must contain.
    pub fn expected(cfg: &Config) -> Vec<(String, Vec<usize>)> {
        let (h, i, hd) = (cfg.hidden_size, cfg.intermediate_size, cfg.head_dim);
        let mut v = vec![(
            "model.embed_tokens.weight".to_string(),
            vec![cfg.vocab_size, h],
        )];
        for l in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{l}");
            v.extend([
                (format!("{p}.input_layernorm.weight"), vec![h]),
                (format!("{p}.self_attn.q_proj.weight"), vec![cfg.q_dim(), h]),
                (
                    format!("{p}.self_attn.k_proj.weight"),
                    vec![cfg.kv_dim(), h],
                ),
                (
                    format!("{p}.self_attn.v_proj.weight"),
                    vec![cfg.kv_dim(), h],
                ),
                (format!("{p}.self_attn.q_norm.weight"), vec![hd]),
                (format!("{p}.self_attn.k_norm.weight"), vec![hd]),
                (format!("{p}.self_attn.o_proj.weight"), vec![h, cfg.q_dim()]),
                (format!("{p}.post_attention_layernorm.weight"), vec![h]),
                (format!("{p}.mlp.gate_proj.weight"), vec![i, h]),
                (format!("{p}.mlp.up_proj.weight"), vec![i, h]),
                (format!("{p}.mlp.down_proj.weight"), vec![h, i]),
            ]);
        }
        v.push(("model.norm.weight".to_string(), vec![h]));
        if !cfg.tie_word_embeddings {
            v.push(("lm_head.weight".to_string(), vec![cfg.vocab_size, h]));
        }
        v
    }

    /// Assembles the structured weights from tensors in `expected` order.
    pub fn from_tensors(cfg: &Config, tensors: Vec<Tensor>) -> Result<Weights, ModelError> {
        let expected = Weights::expected(cfg);
        if tensors.len() != expected.len() {
            return Err(ModelError::Tensor {
                name: "(all)".into(),
                msg: format!("expected {} tensors, got {}", expected.len(), tensors.len()),
            });
        }
        for (t, (name, shape)) in tensors.iter().zip(&expected) {
            if &t.name != name
                || &t.shape != shape
                || t.data.len() != shape.iter().product::<usize>()
            {
                return Err(ModelError::Tensor {
                    name: t.name.clone(),
                    msg: format!(
                        "expected {name} with shape {shape:?}, got shape {:?}",
                        t.shape
                    ),
                });
            }
        }
        let mut it = tensors.into_iter();
        let mut next = || it.next().expect("length checked above");
        let embed_tokens = next();
        let layers = (0..cfg.num_hidden_layers)
            .map(|_| LayerWeights {
                input_layernorm: next(),
                q_proj: next(),
                k_proj: next(),
                v_proj: next(),
                q_norm: next(),
                k_norm: next(),
                o_proj: next(),
                post_attention_layernorm: next(),
                gate_proj: next(),
                up_proj: next(),
                down_proj: next(),
            })
            .collect();
        let norm = next();
        let lm_head = (!cfg.tie_word_embeddings).then(&mut next);
        Ok(Weights {
            embed_tokens,
            layers,
            norm,
            lm_head,
        })
    }

    /// Loads and checks the weights of the checkpoint in `dir`. Returns the weights and
    /// notes for the user (conversions, unexpected tensors). `progress` draws a bar on
    /// stderr; the caller decides (terminal, not --json).
    pub fn load(
        dir: &Path,
        cfg: &Config,
        progress: bool,
    ) -> Result<(Weights, Vec<String>), ModelError> {
        let files = weight_files(dir)?;
        let maps = files
            .iter()
            .map(|p| {
                let f = std::fs::File::open(p).map_err(|e| ModelError::io(p, e))?;
                // SAFETY: the file is opened read-only and only read while mapped (for as
                // long as a tensor points into it); a concurrent writer is outside what a
                // checkpoint loader can defend against.
                let m = unsafe { Mmap::map(&f) }.map_err(|e| ModelError::io(p, e))?;
                Ok((p.clone(), Arc::new(m)))
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let parsed = maps
            .iter()
            .map(|(p, m)| {
                SafeTensors::deserialize(m).map_err(|e| ModelError::Safetensors {
                    path: p.clone(),
                    msg: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        // Which file holds each tensor.
        let mut location: BTreeMap<String, usize> = BTreeMap::new();
        for (fi, st) in parsed.iter().enumerate() {
            for name in st.names() {
                location.insert(name.to_string(), fi);
            }
        }

        let expected = Weights::expected(cfg);
        let bar = if progress {
            let b = indicatif::ProgressBar::new(expected.len() as u64);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "loading weights {bar:40} {pos}/{len} tensors {elapsed}",
            ) {
                b.set_style(style);
            }
            b
        } else {
            indicatif::ProgressBar::hidden()
        };

        let mut notes = Vec::new();
        let mut converted: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut tensors = Vec::with_capacity(expected.len());
        for (name, shape) in &expected {
            let fi = *location.get(name).ok_or_else(|| ModelError::Tensor {
                name: name.clone(),
                msg: format!("missing from the checkpoint (expected shape {shape:?})"),
            })?;
            let view = parsed[fi].tensor(name).map_err(|e| ModelError::Tensor {
                name: name.clone(),
                msg: e.to_string(),
            })?;
            if view.shape() != shape.as_slice() {
                return Err(ModelError::Tensor {
                    name: name.clone(),
                    msg: format!("expected shape {shape:?}, got {:?}", view.shape()),
                });
            }
            let in_place = match view.dtype() {
                Dtype::BF16 => Data::mapped(&maps[fi].1, view.data()),
                _ => None,
            };
            let data = match in_place {
                Some(d) => d,
                None => to_bf16(view.dtype(), view.data())
                    .ok_or_else(|| ModelError::Tensor {
                        name: name.clone(),
                        msg: format!("expected dtype BF16 (or F16/F32), got {:?}", view.dtype()),
                    })?
                    .into(),
            };
            if view.dtype() != Dtype::BF16 {
                *converted
                    .entry(if view.dtype() == Dtype::F16 {
                        "F16"
                    } else {
                        "F32"
                    })
                    .or_default() += 1;
            }
            tensors.push(Tensor {
                name: name.clone(),
                shape: shape.clone(),
                data,
            });
            bar.inc(1);
        }
        bar.finish_and_clear();

        for (dtype, n) in converted {
            notes.push(format!("converted {n} {dtype} tensors to bf16"));
        }
        let wanted: BTreeSet<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
        let extra: Vec<&str> = location
            .keys()
            .map(String::as_str)
            .filter(|n| !wanted.contains(n))
            .collect();
        if !extra.is_empty() {
            let shown: Vec<&str> = extra.iter().take(5).copied().collect();
            let more = if extra.len() > 5 {
                format!(" and {} more", extra.len() - 5)
            } else {
                String::new()
            };
            notes.push(format!(
                "ignoring {} unexpected tensors: {}{more}",
                extra.len(),
                shown.join(", ")
            ));
        }
        Ok((Weights::from_tensors(cfg, tensors)?, notes))
    }
}

/// The safetensors files of a checkpoint: the shards of the index, or model.safetensors.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let v = read_json(&index)?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| ModelError::Config {
                path: index.clone(),
                msg: "missing \"weight_map\" object".into(),
            })?;
        let mut files = BTreeSet::new();
        for (tensor, file) in map {
            let file = file.as_str().ok_or_else(|| ModelError::Config {
                path: index.clone(),
                msg: format!("weight_map entry for {tensor} is not a file name"),
            })?;
            files.insert(file.to_string());
        }
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if !single.exists() {
        return Err(ModelError::io(
            single,
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such file (nor model.safetensors.index.json)",
            ),
        ));
    }
    Ok(vec![single])
}

/// Little-endian raw bytes to bf16; None for dtypes other than BF16/F16/F32.
fn to_bf16(dtype: Dtype, bytes: &[u8]) -> Option<Vec<bf16>> {
    Some(match dtype {
        // One copy out of the mapped file (safetensors is little-endian, as the host).
        Dtype::BF16 => bytemuck::pod_collect_to_vec(bytes),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| bf16::from_f32(f16::from_le_bytes([b[0], b[1]]).to_f32()))
            .collect(),
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| bf16::from_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        _ => return None,
    })
}
