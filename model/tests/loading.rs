//! What a checkpoint may legitimately vary in: rope spellings, EOS forms, dtypes,
//! sharding, extra tensors; and the fused layouts handed to the GPU engine.
mod common;
use common::*;
use model::{Checkpoint, Config};

fn load(dir: &std::path::Path) -> Checkpoint {
    Checkpoint::load(dir, false).unwrap()
}

#[test]
fn both_rope_spellings_and_head_dim() {
    let v4 = load(&data_dir("tied_gqa2_v4")).config;
    assert_eq!(v4.rope_theta, 1e6);
    assert!(v4.tie_word_embeddings);
    assert_eq!((v4.head_dim, v4.hidden_size, v4.gqa_group()), (32, 64, 2));
    let v5 = load(&data_dir("untied_gqa4_v5")).config;
    assert_eq!(v5.rope_theta, 5e5);
    assert!(!v5.tie_word_embeddings);
    assert_eq!((v5.head_dim, v5.q_dim(), v5.gqa_group()), (16, 128, 4));
    // The same config in the other spelling gives the same Config.
    let dir = fresh_copy("untied_gqa4_v5", "respell");
    edit_json(&dir.join("config.json"), |c| {
        let o = c.as_object_mut().unwrap();
        o.remove("rope_parameters");
        o.insert("rope_theta".into(), 5e5.into());
    });
    assert_eq!(load(&dir).config, v5);
}

#[test]
fn eos_ids_int_or_list_with_fallback() {
    let dir = fresh_copy("tied_gqa2_v4", "eos");
    assert_eq!(load(&dir).config.eos_token_ids, vec![995, 996]);
    edit_json(&dir.join("generation_config.json"), |g| {
        g["eos_token_id"] = 7.into()
    });
    assert_eq!(load(&dir).config.eos_token_ids, vec![7]);
    std::fs::remove_file(dir.join("generation_config.json")).unwrap();
    edit_json(&dir.join("config.json"), |c| c["eos_token_id"] = 9.into());
    assert_eq!(Config::from_dir(&dir).unwrap().eos_token_ids, vec![9]);
}

#[test]
fn f32_weights_are_converted_and_extras_reported() {
    let base = load(&data_dir("untied_gqa4_v5"));
    let dir = fresh_copy("untied_gqa4_v5", "f32");
    rewrite_weights(&dir, |ts| {
        for t in ts.iter_mut().filter(|t| t.name.contains("layers.2")) {
            t.bytes = bf16_bytes_to_f32(&t.bytes);
            t.dtype = safetensors::Dtype::F32;
        }
        ts.push(RawTensor {
            name: "model.rotary_emb.inv_freq".into(),
            dtype: safetensors::Dtype::F32,
            shape: vec![2],
            bytes: vec![0; 8],
        });
    });
    let ck = load(&dir);
    assert!(
        ck.notes
            .iter()
            .any(|n| n.contains("converted 11 F32 tensors to bf16")),
        "{:?}",
        ck.notes
    );
    assert!(
        ck.notes
            .iter()
            .any(|n| n.contains("model.rotary_emb.inv_freq")),
        "{:?}",
        ck.notes
    );
    // bf16 → f32 → bf16 is exact.
    assert_eq!(
        ck.weights.layers[2].down_proj.data,
        base.weights.layers[2].down_proj.data
    );
}

#[test]
fn sharded_checkpoint_loads_the_same() {
    let base = load(&data_dir("untied_gqa4_v5"));
    let dir = fresh_copy("untied_gqa4_v5", "sharded");
    let all = read_tensors(&dir.join("model.safetensors"));
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let (a, b): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|t| t.name.contains("layers.0") || t.name.contains("embed"));
    let mut map = serde_json::Map::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", &a),
        ("model-00002-of-00002.safetensors", &b),
    ] {
        write_tensors(&dir.join(file), part);
        for t in part.iter() {
            map.insert(t.name.clone(), file.into());
        }
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let ck = load(&dir);
    assert_eq!(ck.weights.embed_tokens.data, base.weights.embed_tokens.data);
    assert_eq!(ck.weights.lm_head().data, base.weights.lm_head().data);
    assert!(ck.notes.is_empty(), "{:?}", ck.notes);
}

/// bf16 tensors stay in the mapped file; a file whose data section starts at an odd byte
/// (an unpadded header, legal JSON with one trailing space) can't be viewed as bf16 in
/// place, so its tensors are copied out: the same weights either way.
#[test]
fn bf16_tensors_in_place_or_copied_when_misaligned() {
    use model::weights::Data;
    let base = load(&data_dir("untied_gqa4_v5"));
    let mapped = |d: &Data| matches!(d, Data::Mapped { .. });
    assert!(mapped(&base.weights.embed_tokens.data));
    assert!(mapped(&base.weights.layers[1].down_proj.data));

    let dir = fresh_copy("untied_gqa4_v5", "odd-header");
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap().trim_end();
    let header = if header.len().is_multiple_of(2) {
        format!("{header} ")
    } else {
        header.to_string()
    };
    let mut odd = (header.len() as u64).to_le_bytes().to_vec();
    odd.extend_from_slice(header.as_bytes());
    odd.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(&path, odd).unwrap();

    let ck = load(&dir);
    assert!(!mapped(&ck.weights.embed_tokens.data));
    assert_eq!(ck.weights.embed_tokens.data, base.weights.embed_tokens.data);
    assert_eq!(
        ck.weights.layers[1].down_proj.data,
        base.weights.layers[1].down_proj.data
    );
    assert_eq!(ck.weights.lm_head().data, base.weights.lm_head().data);
}

#[test]
fn tied_head_is_the_embedding() {
    let ck = load(&data_dir("tied_gqa2_v4"));
    assert!(ck.weights.lm_head.is_none());
    assert!(std::ptr::eq(ck.weights.lm_head(), &ck.weights.embed_tokens));
}

#[test]
fn fused_layouts() {
    let ck = load(&data_dir("untied_gqa4_v5"));
    let (cfg, l) = (&ck.config, &ck.weights.layers[1]);
    let h = cfg.hidden_size;
    let qkv = l.fused_qkv();
    assert_eq!(qkv.len(), (cfg.q_dim() + 2 * cfg.kv_dim()) * h);
    // Row r of the fused matrix: q rows, then k rows, then v rows.
    assert_eq!(&qkv[..h], l.q_proj.row(0));
    assert_eq!(
        &qkv[cfg.q_dim() * h..(cfg.q_dim() + 1) * h],
        l.k_proj.row(0)
    );
    let last_v = cfg.q_dim() + 2 * cfg.kv_dim() - 1;
    assert_eq!(&qkv[last_v * h..], l.v_proj.row(cfg.kv_dim() - 1));
    let gu = l.fused_gate_up();
    let i = cfg.intermediate_size;
    assert_eq!(gu.len(), 2 * i * h);
    assert_eq!(&gu[(i - 1) * h..i * h], l.gate_proj.row(i - 1));
    assert_eq!(&gu[i * h..(i + 1) * h], l.up_proj.row(0));
}
