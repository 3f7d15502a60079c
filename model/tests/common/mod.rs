//! Helpers shared by the model tests: the committed goldens, throwaway copies of them,
//! and ways to break a copy.
#![allow(dead_code)]
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

pub const CHECKPOINTS: [&str; 3] = ["tied_gqa2_v4", "untied_gqa4_v5", "mha_tok_v5"];

pub fn data_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

pub fn expected(name: &str) -> Value {
    let text = std::fs::read_to_string(data_dir(name).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// A fresh copy of a committed checkpoint in a unique temp directory.
pub fn fresh_copy(name: &str, tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tessera-model-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(data_dir(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    dir
}

pub fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// One tensor as raw parts, for rewriting a safetensors file.
pub struct RawTensor {
    pub name: String,
    pub dtype: safetensors::Dtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

pub fn read_tensors(path: &Path) -> Vec<RawTensor> {
    let buf = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&buf).unwrap();
    let mut out: Vec<RawTensor> = st
        .tensors()
        .into_iter()
        .map(|(name, v)| RawTensor {
            name,
            dtype: v.dtype(),
            shape: v.shape().to_vec(),
            bytes: v.data().to_vec(),
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

pub fn write_tensors(path: &Path, tensors: &[RawTensor]) {
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                safetensors::tensor::TensorView::new(t.dtype, t.shape.clone(), &t.bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// Reads `dir/model.safetensors`, lets `f` change the tensors, writes it back.
pub fn rewrite_weights(dir: &Path, f: impl FnOnce(&mut Vec<RawTensor>)) {
    let path = dir.join("model.safetensors");
    let mut t = read_tensors(&path);
    f(&mut t);
    write_tensors(&path, &t);
}

/// bf16 bytes → f32 bytes (little-endian), exact.
pub fn bf16_bytes_to_f32(bytes: &[u8]) -> Vec<u8> {
    bytes
        .chunks_exact(2)
        .flat_map(|b| {
            half::bf16::from_le_bytes([b[0], b[1]])
                .to_f32()
                .to_le_bytes()
        })
        .collect()
}

/// A greedy step counts as decisive when transformers' top-2 logit margin exceeds this.
pub const DECISIVE: f64 = 0.05;

/// The top-2 logit margins of transformers' greedy steps (expected.json).
pub fn margins(exp: &Value) -> Vec<f64> {
    exp["margins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_f64().unwrap())
        .collect()
}

/// How many greedy steps lead before the first one that is not decisive.
pub fn decisive_prefix(exp: &Value) -> usize {
    let m = margins(exp);
    m.iter().position(|&x| x <= DECISIVE).unwrap_or(m.len())
}

/// max |got - want| over max |want|; infinite when a value is NaN or infinite (`f32::max`
/// ignores NaN, so a NaN output would otherwise pass as error 0).
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "logit count");
    let max_ref = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    got.iter().zip(want).fold(0f32, |m, (a, b)| {
        let d = (a - b).abs();
        if d.is_finite() {
            m.max(d)
        } else {
            f32::INFINITY
        }
    }) / max_ref
}

/// The logits of a step that was asked for them.
pub fn logits(out: model::StepOutput) -> Vec<f32> {
    match out {
        model::StepOutput::Logits(l) => l,
        model::StepOutput::Token(_) => panic!("asked for logits"),
    }
}

/// The GPU, for the `#[ignore]`d GPU tests.
pub fn gpu() -> dsl_runtime::Device {
    dsl_runtime::Device::cuda(0).unwrap_or_else(|e| panic!("these tests need a CUDA GPU: {e}"))
}

/// Steps `decode` has launched when its caller stops at step `i` of `n`, `per` tokens a
/// readback (`MegakernelOptions::tokens_per_readback`): the batch of step `i` and the one
/// queued after it, where the first step is a batch alone and then every `per` steps are
/// one (one token a readback: the step and the one after it).
pub fn launched_when_stopped(per: usize, n: usize, i: usize) -> usize {
    let batch_end = if i == 0 {
        1
    } else {
        1 + ((i - 1) / per + 1) * per
    };
    (batch_end + per).min(n)
}

/// Decoding ahead (`MegakernelOptions::run_ahead`: each step queued before the previous
/// one's token is read back; with `tokens_per_readback` 1 and 4) chooses the tokens one
/// step at a time chooses, on every committed checkpoint: greedy through `generate`
/// (transformers' decisive prefix, one launch per token but the last), and stopped at an
/// EOS: then exactly the steps queued ahead of it ran ([`launched_when_stopped`]), and
/// decoding resumes where the caller stopped as if it had not; a caller that fails gets its
/// error back, and decoding resumes after the last token it saw.
pub fn decode_ahead_check(dev: &dsl_runtime::Device) {
    use model::kernels_engine::Output;
    use model::megakernel_engine::{MegakernelEngine, MegakernelOptions};
    use model::{Checkpoint, Engine, StepOutput};
    for name in CHECKPOINTS {
        let exp = expected(name);
        let prompt = ids(&exp["prompt_ids"]);
        let want = ids(&exp["greedy_ids"]);
        let decisive = decisive_prefix(&exp);
        assert!(decisive >= 6, "{name}: decisive prefix {decisive}");
        // Stop at the second generated token's id, wherever it first appears.
        let eos = want[1];
        let at = want.iter().position(|&t| t == eos).unwrap();
        for (run_ahead, per) in [(false, 1), (true, 1), (true, 4)] {
            let ck = Checkpoint::load(&data_dir(name), false).unwrap();
            let opts = MegakernelOptions {
                run_ahead,
                tokens_per_readback: per,
                output: Output::Token,
                ..Default::default()
            };
            let mut m = MegakernelEngine::new(ck.config, &ck.weights, dev.clone(), opts).unwrap();
            let run = |m: &mut MegakernelEngine, eos: &[u32]| {
                let mut sampler = model::sampling::Sampler::new(Default::default());
                model::generate::generate(m, &prompt, decisive, &mut sampler, eos, &mut |_| Ok(()))
                    .unwrap()
            };
            let g = run(&mut m, &[]);
            assert_eq!(
                g.generated_ids,
                want[..decisive],
                "{name} ahead={run_ahead}/{per}"
            );
            assert_eq!(
                m.launches(),
                decisive as u64 - 1,
                "{name} ahead={run_ahead}/{per}"
            );

            let before = m.launches();
            let g = run(&mut m, &[eos]);
            assert_eq!(
                g.generated_ids,
                want[..=at],
                "{name} ahead={run_ahead}/{per}: EOS"
            );
            assert_eq!(g.stop, model::generate::StopReason::Eos);
            // The EOS is generated token `at`: decode step at - 1 of decisive - 1 (the
            // prompt's step chose token 0).
            let launched = match (run_ahead, at) {
                (_, 0) => 0,
                (false, _) => at,
                (true, _) => launched_when_stopped(per, decisive - 1, at - 1),
            };
            assert_eq!(
                m.launches() - before,
                launched as u64,
                "{name} ahead={run_ahead}, {per} a readback: launches to the EOS"
            );
            // Resume after the EOS: the next token is the one greedy decoding gives there.
            let next = m.step(eos, prompt.len() + at).unwrap();
            assert_eq!(
                next,
                StepOutput::Token(want[at + 1]),
                "{name} ahead={run_ahead}/{per}: resumed"
            );
            // A caller that fails at its second token gets the error back, and decoding
            // resumes after the last token it saw.
            let p = prompt.len() + at + 1;
            let mut seen = vec![];
            let r = m.decode(want[at + 1], p, 4, &mut |t| {
                seen.push(t);
                match seen.len() {
                    2 => Err(model::ModelError::Prompt("the caller failed".into())),
                    _ => Ok(true),
                }
            });
            assert!(
                r.is_err(),
                "{name} ahead={run_ahead}/{per}: the error comes back"
            );
            assert_eq!(seen, want[at + 2..at + 4], "{name} ahead={run_ahead}/{per}");
            let next = m.step(want[at + 3], p + 2).unwrap();
            assert_eq!(
                next,
                StepOutput::Token(want[at + 4]),
                "{name} ahead={run_ahead}/{per}: resumed after the error"
            );
        }
    }
}
