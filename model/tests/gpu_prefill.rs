//! Prefill on a GPU (`model::prefill`: the `dot` kernels on tensor cores): on the committed
//! checkpoints against the interpreter, the token-by-token path and transformers' greedy
//! tokens; with `TESSERA_HF_CKPT=DIR` (a checkpoint written by `hf_reference.py` at a real
//! Qwen3 shape) against its fp32 oracle, with transformers' own bf16 inference as the bar.
//! Run on the device: `cargo test -p model --test gpu_prefill -- --ignored`
//! (`scripts/device_prefill.sh` does, at the 0.6B and 4B shapes).
//!
//! Tolerances: prefill and decode are two bf16 paths (prefill also rounds the normed rows
//! and the softmax probabilities to bf16, and its tensor cores sum in their own order), each
//! within ~1.5e-2 of the f32 reference on the committed checkpoints (`prefill_engine.rs`),
//! so they are compared within 3e-2 of max |logit|. At a real shape the bar is
//! transformers' bf16 error against the fp32 oracle (`bf16_mean_first_logits_rel_err`).
mod common;
use common::*;
use dsl_runtime::Device;
use model::kernels::prefill::PrefillTiles;
use model::kernels_engine::{KernelOptions, KernelsEngine, Output};
use model::megakernel_engine::{MegakernelEngine, MegakernelOptions};
use model::sampling::{argmax, Sampler};
use model::{Checkpoint, Engine};
use std::time::Instant;

const TOL: f32 = 3e-2;

fn kernels(ck: &Checkpoint, dev: Device, max_seq: usize) -> KernelsEngine {
    let opts = KernelOptions {
        output: Output::Logits,
        max_seq: Some(max_seq),
        ..Default::default()
    };
    KernelsEngine::new(ck.config.clone(), &ck.weights, dev, opts).unwrap()
}

fn mega(ck: &Checkpoint, output: Output, max_seq: usize) -> MegakernelEngine {
    let opts = MegakernelOptions {
        output,
        max_seq: Some(max_seq),
        ..Default::default()
    };
    MegakernelEngine::new(ck.config.clone(), &ck.weights, gpu(), opts).unwrap()
}

/// GPU prefill = interpreter prefill (within the `dot` contract's tolerance, compounded over
/// the layers) and = the GPU's token-by-token path, on every committed checkpoint; chunked
/// = unchunked; decode continues from the prefilled cache.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_prefill_matches_interpreter_and_token_by_token() {
    for name in CHECKPOINTS {
        let ck = Checkpoint::load(&data_dir(name), false).unwrap();
        let exp = expected(name);
        let (prompt, greedy) = (ids(&exp["prompt_ids"]), ids(&exp["greedy_ids"]));
        let mut g = kernels(&ck, gpu(), 256);
        let got = logits(g.prefill(&prompt, 0).unwrap());
        assert_eq!(
            g.next_token().unwrap(),
            argmax(&got),
            "{name}: fused argmax"
        );

        let mut i = kernels(&ck, Device::interpreter(), 256);
        let e_interp = rel_err(&got, &logits(i.prefill(&prompt, 0).unwrap()));

        let mut tok = kernels(&ck, gpu(), 256);
        let mut want = vec![];
        for (p, &t) in prompt.iter().enumerate() {
            want = logits(tok.step(t, p).unwrap());
        }
        let e_tok = rel_err(&got, &want);
        let e_hf = rel_err(&got, &floats(&exp["first_logits"]));

        let mut c = kernels(&ck, gpu(), 256);
        c.set_prefill_tiles(PrefillTiles {
            chunk: 5,
            ..*c.prefill_tiles()
        })
        .unwrap();
        let e_chunk = rel_err(&logits(c.prefill(&prompt, 0).unwrap()), &got);

        // Decode after prefill, teacher-forced, against the token-by-token engine.
        let mut e_decode = 0f32;
        for (s, &t) in greedy.iter().take(8).enumerate() {
            let pos = prompt.len() + s;
            let a = logits(g.step(t, pos).unwrap());
            let b = logits(tok.step(t, pos).unwrap());
            e_decode = e_decode.max(rel_err(&a, &b));
        }
        eprintln!(
            "{name}: GPU prefill of {} tokens vs the interpreter {e_interp:.2e}, vs token by token {e_tok:.2e}, vs transformers {e_hf:.2e}; chunks of 5 vs one {e_chunk:.2e}; decode after it vs token by token {e_decode:.2e}",
            prompt.len()
        );
        assert!(e_interp < TOL, "{name}: vs the interpreter {e_interp}");
        assert!(e_tok < TOL, "{name}: vs token by token {e_tok}");
        assert!(e_hf < TOL, "{name}: vs transformers {e_hf}");
        assert!(e_chunk < 1e-2, "{name}: chunked vs one chunk {e_chunk}");
        assert!(e_decode < TOL, "{name}: decode after prefill {e_decode}");
    }
}

/// `generate` prefills the prompt, then the megakernel decodes from the prefilled cache:
/// transformers' greedy tokens on the decisive prefix, with no megakernel launch and no
/// token copied in for the prompt.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_greedy_after_prefill_matches_transformers() {
    for name in CHECKPOINTS {
        let ck = Checkpoint::load(&data_dir(name), false).unwrap();
        let exp = expected(name);
        let (prompt, want) = (ids(&exp["prompt_ids"]), ids(&exp["greedy_ids"]));
        let decisive = decisive_prefix(&exp);
        let mut m = mega(&ck, Output::Token, 256);
        let g = model::generate::generate(
            &mut m,
            &prompt,
            decisive,
            &mut Sampler::new(Default::default()),
            &[],
            &mut |_| Ok(()),
        )
        .unwrap();
        assert_eq!(g.generated_ids, want[..decisive], "{name}: greedy ids");
        assert_eq!(m.launches() as usize, decisive - 1, "{name}: launches");
        assert_eq!(m.steps_copied_in(), 0, "{name}: tokens copied in");
        eprintln!(
            "{name}: {decisive} greedy tokens after prefill equal transformers' (prefill {:.2} ms)",
            g.timings.prompt_ms
        );
    }
}

/// A real Qwen3 shape from hf_reference.py: over every recorded prompt, the mean error of
/// the logits after prefill against the fp32 oracle is at most transformers' bf16 mean, and
/// the mean number of greedy steps (prefill, then the megakernel) that agree with the oracle
/// is at least transformers' bf16 mean. Then a long random prompt (1000 tokens) prefilled
/// in one chunk, in chunks of 256, and token by token: logits within 2x transformers' bf16
/// error of each other. Skipped (passes, with a note) when TESSERA_HF_CKPT is not set.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_prefill_matches_transformers_at_real_shape() {
    let Ok(dir) = std::env::var("TESSERA_HF_CKPT") else {
        eprintln!("TESSERA_HF_CKPT is not set: skipped (point it at a hf_reference.py output)");
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let exp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let prompts = exp["prompts"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: expected.json has no `prompts`", dir.display()));
    let ck = Checkpoint::load(&dir, false).unwrap();
    let long = 1000usize;
    let max_seq = long + 80;

    let mut m = mega(&ck, Output::Logits, max_seq);
    let mut errs = vec![];
    let mut ttft = vec![];
    for p in prompts {
        let prompt = ids(&p["prompt_ids"]);
        let t = Instant::now();
        let z = logits(m.prefill(&prompt, 0).unwrap());
        ttft.push(t.elapsed().as_secs_f64() * 1e3);
        errs.push(rel_err(&z, &floats(&p["first_logits"])) as f64);
    }
    drop(m);

    let mut m = mega(&ck, Output::Token, max_seq);
    let mut agrees = vec![];
    for p in prompts {
        let (prompt, want) = (ids(&p["prompt_ids"]), ids(&p["greedy_ids"]));
        let g = model::generate::generate(
            &mut m,
            &prompt,
            want.len(),
            &mut Sampler::new(Default::default()),
            &[],
            &mut |_| Ok(()),
        )
        .unwrap();
        agrees.push(
            g.generated_ids
                .iter()
                .zip(&want)
                .take_while(|(a, b)| a == b)
                .count() as f64,
        );
    }
    drop(m);

    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let hf_err = exp["bf16_mean_first_logits_rel_err"].as_f64().unwrap();
    let hf_agree = exp["bf16_mean_greedy_agree"].as_f64().unwrap();
    eprintln!(
        "{}: over {} prompts, logits after prefill vs the fp32 oracle: tessera mean {:.2e} {:?}, transformers bf16 mean {hf_err:.2e}; greedy steps agreeing with the oracle: tessera mean {:.2} {agrees:?}, transformers bf16 mean {hf_agree:.2}; prefill ms {:?}",
        dir.display(),
        prompts.len(),
        mean(&errs),
        errs.iter().map(|e| format!("{e:.2e}")).collect::<Vec<_>>(),
        mean(&agrees),
        ttft.iter().map(|t| format!("{t:.1}")).collect::<Vec<_>>(),
    );

    // A long prompt: one chunk, chunks of 256 (start_pos > 0, earlier keys from the cache),
    // and the megakernel token by token.
    let prompt: Vec<u32> = {
        let (mut rng, vocab) = (model::sampling::SplitMix64::new(7), ck.config.vocab_size);
        (0..long)
            .map(|_| (rng.next_f64() * vocab as f64) as u32 % vocab as u32)
            .collect()
    };
    let mut m = mega(&ck, Output::Logits, max_seq);
    let t = Instant::now();
    let whole = logits(m.prefill(&prompt, 0).unwrap());
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let again = logits(m.prefill(&prompt, 0).unwrap());
    let warm_ms = t.elapsed().as_secs_f64() * 1e3;
    m.set_prefill_tiles(PrefillTiles {
        chunk: 256,
        ..*m.prefill_tiles()
    })
    .unwrap();
    let chunked = logits(m.prefill(&prompt, 0).unwrap());
    let mut stepped = vec![];
    for (p, &tk) in prompt.iter().enumerate() {
        stepped = logits(m.step(tk, p).unwrap());
    }
    let (e_again, e_chunk, e_step) = (
        rel_err(&again, &whole),
        rel_err(&chunked, &whole),
        rel_err(&whole, &stepped),
    );
    let bar = 2.0 * hf_err.max(1e-2) as f32;
    eprintln!(
        "{long}-token prompt: prefill {first_ms:.1} ms cold, {warm_ms:.1} ms warm; repeat vs first {e_again:.2e}, chunks of 256 vs one {e_chunk:.2e}, one chunk vs token by token {e_step:.2e} (bar {bar:.2e})"
    );
    assert_eq!(e_again, 0.0, "the same prefill twice differs");
    assert!(e_chunk < bar, "chunked vs one chunk {e_chunk}");
    assert!(e_step < bar, "prefill vs token by token {e_step}");
    assert!(
        mean(&errs) <= hf_err,
        "logit error after prefill {:.3e} is above transformers' bf16 {hf_err:.3e}",
        mean(&errs)
    );
    assert!(
        mean(&agrees) >= hf_agree,
        "greedy agreement {:.2} is below transformers' bf16 {hf_agree:.2}",
        mean(&agrees)
    );
}
