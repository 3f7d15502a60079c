//! Prefill in both device engines (`Engine::prefill`, `model::prefill`), through the
//! interpreter, on every committed checkpoint.
//!
//! - The logits after prefilling transformers' prompt are within PREFILL_LOGIT_TOL of the
//!   reference decoder's and of transformers' `first_logits`. Prefill stores what decode
//!   stores in bf16 and, beyond that, the normed rows and the softmax probabilities (P·V
//!   on tensor cores takes bf16): measured ≤ 1.5e-2 of max |logit| on the three
//!   checkpoints, against decode's ≤ 1.4e-2; 3e-2 (decode's tolerance,
//!   `kernels_engine.rs`) keeps 2x headroom, and a wrong mask, position or GQA mapping
//!   costs 1e-1 and more.
//! - Greedy continuations after prefill equal transformers' on the decisive prefix (top-1
//!   margin > 0.05), through `generate` (which prefills every prompt).
//! - Decode continues from the prefilled cache: teacher-forced steps after a prefill track
//!   the token-by-token engine and the reference.
//! - Chunking changes nothing: prefill in chunks of 5 (and 1) tokens gives the same logits
//!   and the same KV cache, bit for bit, as one chunk (each row's math does not depend on
//!   the chunk it is in; attention walks the same key blocks in the same order). So does
//!   a prompt fed as two prefills (start_pos > 0).
//! - The megakernel engine's prefill is the kernels engine's, bit for bit (same kernels,
//!   same bytes), and hands the next token and position to the decode step on the device.
//! - Mistakes are errors: past --max-context, skipping ahead, an empty prompt, a bad id.
mod common;
use common::*;
use dsl_runtime::Device;
use model::kernels::prefill::PrefillTiles;
use model::kernels_engine::{KernelOptions, KernelsEngine, Output};
use model::megakernel_engine::{MegakernelEngine, MegakernelOptions};
use model::sampling::{argmax, Sampler};
use model::{Checkpoint, Engine, Reference, StepOutput};
use std::sync::Arc;

const PREFILL_LOGIT_TOL: f32 = 3e-2;

fn kernels(name: &str, output: Output) -> KernelsEngine {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let opts = KernelOptions {
        output,
        max_seq: Some(128),
        ..Default::default()
    };
    KernelsEngine::new(ck.config, &ck.weights, Device::interpreter(), opts).unwrap()
}

fn mega(name: &str, output: Output) -> MegakernelEngine {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let opts = MegakernelOptions {
        output,
        max_seq: Some(128),
        ..Default::default()
    };
    MegakernelEngine::new(ck.config, &ck.weights, Device::interpreter(), opts).unwrap()
}

fn reference(name: &str) -> Reference {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    Reference::new(ck.config, Arc::new(ck.weights))
}

fn with_chunk(k: &mut KernelsEngine, chunk: usize) {
    let t = PrefillTiles {
        chunk,
        ..*k.prefill_tiles()
    };
    k.set_prefill_tiles(t).unwrap();
}

#[test]
fn prefill_logits_match_reference_and_transformers() {
    for name in CHECKPOINTS {
        let exp = expected(name);
        let prompt = ids(&exp["prompt_ids"]);
        let mut k = kernels(name, Output::Logits);
        let got = logits(k.prefill(&prompt, 0).unwrap());
        let mut r = reference(name);
        let want = logits(r.prefill(&prompt, 0).unwrap());
        let e_ref = rel_err(&got, &want);
        let e_hf = rel_err(&got, &floats(&exp["first_logits"]));
        eprintln!("{name}: prefill of {} tokens: relative logit error vs the reference {e_ref:.2e}, vs transformers {e_hf:.2e}", prompt.len());
        assert!(
            e_ref < PREFILL_LOGIT_TOL,
            "{name}: vs the reference {e_ref}"
        );
        assert!(e_hf < PREFILL_LOGIT_TOL, "{name}: vs transformers {e_hf}");
        assert_eq!(
            k.next_token().unwrap(),
            argmax(&got),
            "{name}: fused argmax"
        );
    }
}

/// The reference engine prefills through the trait's default (one step per token): the
/// same logits as stepping by hand.
#[test]
fn default_prefill_is_one_step_per_token() {
    let name = "untied_gqa4_v5";
    let prompt = ids(&expected(name)["prompt_ids"]);
    let mut r = reference(name);
    let got = logits(r.prefill(&prompt, 0).unwrap());
    let mut r2 = reference(name);
    let mut want = vec![];
    for (p, &t) in prompt.iter().enumerate() {
        want = r2.forward(t, p).unwrap();
    }
    assert_eq!(got, want);
    assert!(r.prefill(&[], 0).is_err());
}

#[test]
fn greedy_after_prefill_matches_transformers_in_both_engines() {
    for name in CHECKPOINTS {
        let exp = expected(name);
        let prompt = ids(&exp["prompt_ids"]);
        let want = ids(&exp["greedy_ids"]);
        let decisive = decisive_prefix(&exp);
        let run = |e: &mut dyn Engine| {
            model::generate::generate(
                e,
                &prompt,
                decisive,
                &mut Sampler::new(Default::default()),
                &[],
                &mut |_| Ok(()),
            )
            .unwrap()
            .generated_ids
        };
        let mut k = kernels(name, Output::Token);
        assert_eq!(run(&mut k), want[..decisive], "{name}: kernels engine");
        let mut m = mega(name, Output::Token);
        assert_eq!(run(&mut m), want[..decisive], "{name}: megakernel engine");
        // The prompt went through prefill: only generated tokens launched the megakernel,
        // and none had to be copied in.
        assert_eq!(m.launches() as usize, decisive - 1, "{name}: launches");
        assert_eq!(m.steps_copied_in(), 0, "{name}: tokens copied in");
        eprintln!("{name}: {decisive} greedy tokens after prefill equal transformers'");
    }
}

/// Teacher-forced decode after a prefill: every step's logits within tolerance of the
/// token-by-token engine's and the reference's, and the greedy token equal to the
/// token-by-token engine's wherever transformers' margin is decisive.
#[test]
fn decode_continues_from_the_prefilled_cache() {
    for name in CHECKPOINTS {
        let exp = expected(name);
        let prompt = ids(&exp["prompt_ids"]);
        let greedy = ids(&exp["greedy_ids"]);
        let (mut k, mut tok, mut r) = (
            kernels(name, Output::Logits),
            kernels(name, Output::Logits),
            reference(name),
        );
        k.prefill(&prompt, 0).unwrap();
        for (p, &t) in prompt.iter().enumerate() {
            tok.step(t, p).unwrap();
            r.step(t, p).unwrap();
        }
        let mut worst = 0f32;
        for (i, &t) in greedy.iter().take(8).enumerate() {
            let pos = prompt.len() + i;
            let got = logits(k.step(t, pos).unwrap());
            let e_tok = rel_err(&got, &logits(tok.step(t, pos).unwrap()));
            let e_ref = rel_err(&got, &logits(r.step(t, pos).unwrap()));
            assert!(
                e_tok < PREFILL_LOGIT_TOL,
                "{name} pos {pos}: vs token by token {e_tok}"
            );
            assert!(
                e_ref < PREFILL_LOGIT_TOL,
                "{name} pos {pos}: vs the reference {e_ref}"
            );
            worst = worst.max(e_tok);
        }
        eprintln!("{name}: decode after prefill vs token by token: worst relative logit difference {worst:.2e}");
    }
}

#[test]
fn chunked_prefill_equals_one_chunk_bit_for_bit() {
    let name = "mha_tok_v5"; // the longest committed prompt (31 tokens)
    let prompt = ids(&expected(name)["prompt_ids"]);
    let mut whole = kernels(name, Output::Logits);
    let want = logits(whole.prefill(&prompt, 0).unwrap());
    let want_cache = whole.kv_cache().unwrap();
    for chunk in [5, 1] {
        let mut k = kernels(name, Output::Logits);
        with_chunk(&mut k, chunk);
        assert_eq!(
            logits(k.prefill(&prompt, 0).unwrap()),
            want,
            "chunk {chunk}"
        );
        assert!(
            k.kv_cache().unwrap() == want_cache,
            "chunk {chunk}: KV cache"
        );
    }
    // Two prefills, the second at start_pos > 0, are one.
    let mut k = kernels(name, Output::Logits);
    let split = 13;
    k.prefill(&prompt[..split], 0).unwrap();
    assert_eq!(logits(k.prefill(&prompt[split..], split).unwrap()), want);
    assert!(
        k.kv_cache().unwrap() == want_cache,
        "two prefills: KV cache"
    );
    // Re-prefilling from 0 after a longer run rewinds.
    assert_eq!(logits(k.prefill(&prompt, 0).unwrap()), want, "rewound");
}

/// Same kernels, same bytes: the megakernel engine's prefill equals the kernels engine's, bit
/// for bit, though it multiplies by down stored transposed (`gemm_nn_residual`, for its
/// fused MLP): both sum k in the same order.
#[test]
fn megakernel_prefill_equals_kernels_prefill() {
    for name in CHECKPOINTS {
        let prompt = ids(&expected(name)["prompt_ids"]);
        let (mut k, mut m) = (kernels(name, Output::Logits), mega(name, Output::Logits));
        assert_eq!(
            logits(m.prefill(&prompt, 0).unwrap()),
            logits(k.prefill(&prompt, 0).unwrap()),
            "{name}"
        );
        assert!(
            m.kv_cache().unwrap() == k.kv_cache().unwrap(),
            "{name}: KV cache"
        );
    }
}

#[test]
fn bad_prefills_fail_cleanly() {
    let name = "untied_gqa4_v5";
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let opts = KernelOptions {
        max_seq: Some(8),
        ..Default::default()
    };
    let mut k =
        KernelsEngine::new(ck.config.clone(), &ck.weights, Device::interpreter(), opts).unwrap();
    let msg = |r: Result<StepOutput, model::ModelError>| r.unwrap_err().to_string();
    let e = msg(k.prefill(&[1; 9], 0));
    assert!(
        e.contains("beyond the KV cache") && e.contains("--max-context"),
        "{e}"
    );
    assert!(msg(k.prefill(&[1, 2], 3)).contains("skips ahead"));
    assert!(msg(k.prefill(&[], 0)).contains("no tokens"));
    assert!(msg(k.prefill(&[1, ck.config.vocab_size as u32], 0)).contains("vocab_size"));
    let zero = PrefillTiles {
        gemm_bn: 0,
        ..*k.prefill_tiles()
    };
    let e = k.set_prefill_tiles(zero).unwrap_err().to_string();
    assert!(e.contains("at least 1"), "{e}");
    let zero = PrefillTiles {
        chunk: 0,
        ..*k.prefill_tiles()
    };
    assert!(k.set_prefill_tiles(zero).is_err());
    // The whole cache is fine, and so is a later part of it.
    k.prefill(&[1; 5], 0).unwrap();
    k.prefill(&[2; 3], 5).unwrap();
    assert!(msg(k.prefill(&[2; 2], 7)).contains("beyond the KV cache"));
    // generate says the prompt does not fit before anything runs.
    let e = model::generate::generate(
        &mut k,
        &[1; 9],
        2,
        &mut Sampler::new(Default::default()),
        &[],
        &mut |_| Ok(()),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("longer than the model's context"),
        "{e}"
    );
}

/// Qwen3-0.6B's layer shape (hidden 1024, 16 / 8 heads of 128, intermediate 3072) with one
/// random layer and a small vocab: the real widths through every prefill kernel against
/// the reference, at a prompt that is not a multiple of any tile.
#[test]
fn qwen3_0_6b_shaped_prefill_tracks_the_reference() {
    let cfg = model::Config {
        num_hidden_layers: 1,
        vocab_size: 512,
        max_position_embeddings: 64,
        tie_word_embeddings: false,
        ..model::kernels::qwen3_0_6b()
    };
    let w = model::embedded::weights(&cfg);
    let mut k = KernelsEngine::new(
        cfg.clone(),
        &w,
        Device::interpreter(),
        KernelOptions {
            output: Output::Logits,
            ..Default::default()
        },
    )
    .unwrap();
    let prompt = [17u32, 500, 3, 211, 64];
    let got = logits(k.prefill(&prompt, 0).unwrap());
    let mut r = Reference::new(cfg, Arc::new(w));
    let want = logits(r.prefill(&prompt, 0).unwrap());
    let e = rel_err(&got, &want);
    eprintln!("0.6B-shaped prefill of 5 tokens: relative logit error {e:.2e}");
    assert!(e < PREFILL_LOGIT_TOL, "relative error {e}");
}
