//! Bad checkpoints and bad prompts: each is a one-line error naming the problem.
mod common;
use common::*;
use model::generate::check_prompt;
use model::{Checkpoint, Reference};
use safetensors::Dtype;
use std::sync::Arc;

fn load_err(dir: &std::path::Path) -> String {
    match Checkpoint::load(dir, false) {
        Ok(_) => panic!("{} should not load", dir.display()),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "error must be one line: {msg:?}");
            msg
        }
    }
}

fn assert_has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "error {msg:?} should mention {p:?}");
    }
}

#[test]
fn malformed_config_json() {
    let dir = fresh_copy("tied_gqa2_v4", "malformed");
    std::fs::write(dir.join("config.json"), "{\"model_type\": \"qwen3\", ").unwrap();
    assert_has(&load_err(&dir), &["config.json", "malformed JSON"]);
}

#[test]
fn config_with_wrong_field_type() {
    let dir = fresh_copy("tied_gqa2_v4", "fieldtype");
    edit_json(&dir.join("config.json"), |c| {
        c["hidden_size"] = "sixty-four".into()
    });
    assert_has(&load_err(&dir), &["config.json", "hidden_size"]);
}

#[test]
fn missing_files() {
    let dir = fresh_copy("tied_gqa2_v4", "nosafetensors");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    assert_has(&load_err(&dir), &["model.safetensors"]);
    let dir = fresh_copy("tied_gqa2_v4", "noconfig");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    assert_has(&load_err(&dir), &["config.json"]);
    assert_has(&load_err(&dir.join("nope")), &["nope"]);
}

#[test]
fn missing_tensor() {
    let dir = fresh_copy("untied_gqa4_v5", "missing");
    rewrite_weights(&dir, |t| {
        t.retain(|t| t.name != "model.layers.1.self_attn.k_norm.weight")
    });
    assert_has(
        &load_err(&dir),
        &["model.layers.1.self_attn.k_norm.weight", "missing", "[16]"],
    );
    // Untied checkpoints need lm_head.
    let dir = fresh_copy("untied_gqa4_v5", "nohead");
    rewrite_weights(&dir, |t| t.retain(|t| t.name != "lm_head.weight"));
    assert_has(&load_err(&dir), &["lm_head.weight", "missing"]);
}

#[test]
fn wrong_shape() {
    let dir = fresh_copy("untied_gqa4_v5", "shape");
    rewrite_weights(&dir, |ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name == "model.layers.0.mlp.up_proj.weight")
            .unwrap();
        t.shape = vec![t.shape[1], t.shape[0]]; // transposed: same bytes, wrong shape
    });
    assert_has(
        &load_err(&dir),
        &[
            "model.layers.0.mlp.up_proj.weight",
            "[128, 64]",
            "[64, 128]",
        ],
    );
    // A config that disagrees with the weights is reported the same way.
    let dir = fresh_copy("untied_gqa4_v5", "cfgshape");
    edit_json(&dir.join("config.json"), |c| {
        c["intermediate_size"] = 100.into()
    });
    assert_has(&load_err(&dir), &["gate_proj", "[100, 64]", "[128, 64]"]);
}

#[test]
fn wrong_dtype() {
    let dir = fresh_copy("tied_gqa2_v4", "dtype");
    rewrite_weights(&dir, |ts| {
        let t = ts
            .iter_mut()
            .find(|t| t.name == "model.norm.weight")
            .unwrap();
        t.dtype = Dtype::I16; // same width, so the file stays valid
    });
    assert_has(&load_err(&dir), &["model.norm.weight", "dtype", "I16"]);
}

#[test]
fn truncated_safetensors() {
    let dir = fresh_copy("tied_gqa2_v4", "truncated");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert_has(
        &load_err(&dir),
        &["model.safetensors", "not a valid safetensors"],
    );
    std::fs::write(&path, &bytes[..5]).unwrap();
    assert_has(&load_err(&dir), &["model.safetensors"]);
}

#[test]
fn unsupported_architectures_and_features() {
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit); 6] = [
        ("qwen3_moe", |c| c["model_type"] = "qwen3_moe".into()),
        ("llama", |c| c["model_type"] = "llama".into()),
        ("use_sliding_window", |c| {
            c["use_sliding_window"] = true.into()
        }),
        ("attention_bias", |c| c["attention_bias"] = true.into()),
        ("yarn", |c| {
            c["rope_parameters"]["rope_type"] = "yarn".into()
        }),
        ("gelu", |c| c["hidden_act"] = "gelu".into()),
    ];
    for (what, f) in cases {
        let dir = fresh_copy("untied_gqa4_v5", what);
        edit_json(&dir.join("config.json"), f);
        let msg = load_err(&dir);
        assert_has(&msg, &["unsupported", what]);
    }
    // 4.x spelling of rope scaling.
    let dir = fresh_copy("tied_gqa2_v4", "linear");
    edit_json(&dir.join("config.json"), |c| {
        c["rope_scaling"] = serde_json::json!({"type": "linear", "factor": 2.0})
    });
    assert_has(&load_err(&dir), &["unsupported", "rope_scaling", "linear"]);
}

#[test]
fn gqa_must_divide() {
    let dir = fresh_copy("untied_gqa4_v5", "gqa");
    edit_json(&dir.join("config.json"), |c| {
        c["num_key_value_heads"] = 3.into()
    });
    assert_has(
        &load_err(&dir),
        &["num_key_value_heads 3", "num_attention_heads 8"],
    );
}

fn engine() -> Reference {
    let ck = Checkpoint::load(&data_dir("tied_gqa2_v4"), false).unwrap();
    Reference::new(ck.config, Arc::new(ck.weights))
}

#[test]
fn bad_prompts() {
    let r = engine();
    let e = check_prompt(&r, &[]).unwrap_err().to_string();
    assert_has(&e, &["empty"]);
    let e = check_prompt(&r, &[1, 997]).unwrap_err().to_string();
    assert_has(&e, &["997", "vocab_size 997"]);
    assert!(check_prompt(&r, &[0, 996]).is_ok());
    let long = vec![1u32; 4097];
    let e = check_prompt(&r, &long).unwrap_err().to_string();
    assert_has(&e, &["4097", "context", "4096"]);
}
