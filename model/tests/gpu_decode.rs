//! The megakernel engine on a GPU: one cooperative launch per token gives what the kernels
//! engine gives (one launch per op) on the same GPU, decodes transformers' greedy tokens on
//! the committed checkpoints and, with `TESSERA_HF_CKPT=DIR` (a checkpoint written by
//! `hf_reference.py` at a real Qwen3 shape, with its expected.json), at a real shape.
//! Run on the device: `cargo test -p model --test gpu_decode -- --ignored`.
//!
//! At a real shape the bar is transformers' own bf16 inference: expected.json (from
//! hf_reference.py) holds an fp32 oracle (fp32 math and rope on the bf16 weights) and how far
//! transformers' bf16 path lands from it, per prompt; tessera must land at least as close.
//! On the committed checkpoints greedy tokens are compared on the decisive prefix (top-1
//! margin > 0.05).
mod common;
use common::*;
use model::kernels_engine::{KernelOptions, KernelsEngine, Output};
use model::megakernel_engine::{MegakernelEngine, MegakernelOptions};
use model::sampling::{argmax, gumbel_max, gumbel_uniform, Sampler, SamplingParams};
use model::{Checkpoint, Engine, StepOutput};

fn mega_opts(output: Output, max_seq: Option<usize>) -> MegakernelOptions {
    MegakernelOptions {
        output,
        max_seq,
        ..Default::default()
    }
}

/// Greedy decode with the megakernel; returns the generated ids and the launch count.
fn greedy(
    m: &mut MegakernelEngine,
    prompt: &[u32],
    n: usize,
) -> (Vec<u32>, u64, model::generate::Timings) {
    let g = model::generate::generate(
        m,
        prompt,
        n,
        &mut Sampler::new(Default::default()),
        &[],
        &mut |_| Ok(()),
    )
    .unwrap();
    (g.generated_ids, m.launches(), g.timings)
}

/// Same kernels, same bytes: the one-launch step equals the one-launch-per-op step on the
/// GPU, logits within 1e-3 of max |logit| with the MLP as gate/up then down, within 1e-2
/// with it fused (the default: its atomics sum down in whatever order they land), and its
/// lm_head's argmax is its logits' at every step.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_megakernel_equals_kernels_engine() {
    for (name, fused_mlp) in CHECKPOINTS.iter().flat_map(|n| [(n, false), (n, true)]) {
        let ck = Checkpoint::load(&data_dir(name), false).unwrap();
        let exp = expected(name);
        let mut m = MegakernelEngine::new(
            ck.config.clone(),
            &ck.weights,
            gpu(),
            MegakernelOptions {
                fused_mlp,
                ..mega_opts(Output::Logits, Some(256))
            },
        )
        .unwrap();
        let tol = if fused_mlp { 1e-2 } else { 1e-3 };
        let kopts = KernelOptions {
            output: Output::Logits,
            max_seq: Some(256),
            ..Default::default()
        };
        let mut k = KernelsEngine::new(ck.config.clone(), &ck.weights, gpu(), kopts).unwrap();
        let mut worst = 0f32;
        for (pos, &t) in ids(&exp["prompt_ids"])
            .iter()
            .chain(&ids(&exp["greedy_ids"]))
            .enumerate()
        {
            let (a, b) = (
                logits(m.step(t, pos).unwrap()),
                logits(k.step(t, pos).unwrap()),
            );
            let e = rel_err(&a, &b);
            worst = worst.max(e);
            assert!(
                e < tol,
                "{name} (fused MLP {fused_mlp}) pos {pos}: megakernel vs kernels {e}"
            );
            assert_eq!(m.next_token().unwrap(), argmax(&a), "{name} pos {pos}");
        }
        eprintln!("{name} (fused MLP {fused_mlp}): megakernel vs kernels engine on the GPU, worst relative logit difference {worst:.2e}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_megakernel_greedy_matches_transformers_one_launch_per_token() {
    for name in CHECKPOINTS {
        let ck = Checkpoint::load(&data_dir(name), false).unwrap();
        let exp = expected(name);
        let (prompt, want) = (ids(&exp["prompt_ids"]), ids(&exp["greedy_ids"]));
        let decisive = decisive_prefix(&exp);
        let mut m = MegakernelEngine::new(
            ck.config,
            &ck.weights,
            gpu(),
            mega_opts(Output::Token, None),
        )
        .unwrap();
        let (got, launches, _) = greedy(&mut m, &prompt, decisive);
        assert_eq!(got, want[..decisive], "{name}: greedy ids on the GPU");
        // The prompt goes through prefill (no megakernel launch).
        assert_eq!(
            launches as usize,
            decisive - 1,
            "{name}: one launch per step"
        );
        eprintln!("{name}: {decisive} greedy tokens equal transformers', {launches} launches");
    }
}

/// The decode step whose attention loads its tiles ahead (`MegakernelOptions::attn_ahead`)
/// on the GPU: the logits of the step that loads them in turn, within the fused MLP's 1e-2
/// (its atomics land in any order), on every committed checkpoint, with tiles of one
/// position and 3 splits so each split streams several.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_attention_tiles_loaded_ahead_compute_the_same_logits() {
    for name in CHECKPOINTS {
        let ck = Checkpoint::load(&data_dir(name), false).unwrap();
        let with = |attn_ahead| MegakernelOptions {
            tiles: Some(model::kernels::Tiles {
                attn_block_n: 1,
                attn_splits: 3,
                ..model::kernels::Tiles::for_config(&ck.config)
            }),
            attn_ahead,
            // The split attention at every position (no step attends inside o_proj).
            attn_in_o: Some(0),
            ..mega_opts(Output::Logits, Some(256))
        };
        let mut a = MegakernelEngine::new(ck.config.clone(), &ck.weights, gpu(), with(Some(false)))
            .unwrap();
        let mut b =
            MegakernelEngine::new(ck.config.clone(), &ck.weights, gpu(), with(Some(true))).unwrap();
        let exp = expected(name);
        for (pos, &t) in ids(&exp["prompt_ids"]).iter().enumerate() {
            let e = rel_err(
                &logits(b.step(t, pos).unwrap()),
                &logits(a.step(t, pos).unwrap()),
            );
            assert!(e < 1e-2, "{name} pos {pos}: ahead vs in turn {e}");
        }
        assert!(b.ahead_launches() > 0 && a.ahead_launches() == 0, "{name}");
    }
}

/// The decode step whose o_proj programs compute the attention (`MegakernelOptions::
/// attn_in_o`, `attn_head_residual`) on the GPU: the logits of the plain step within the
/// fused MLP's 1e-2, on every committed checkpoint, at every prompt position, with tiles of
/// 4 positions (so the later positions take several) and 3 splits; every step launches it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_attention_inside_o_proj_computes_the_same_logits() {
    for name in CHECKPOINTS {
        let ck = Checkpoint::load(&data_dir(name), false).unwrap();
        let with = |attn_in_o, attn_rope| MegakernelOptions {
            tiles: Some(model::kernels::Tiles {
                attn_block_n: 4,
                attn_splits: 3,
                ..model::kernels::Tiles::for_config(&ck.config)
            }),
            attn_in_o,
            attn_rope: Some(attn_rope),
            attn_ahead: Some(false),
            ..mega_opts(Output::Logits, Some(256))
        };
        let engine = |o| MegakernelEngine::new(ck.config.clone(), &ck.weights, gpu(), o).unwrap();
        let mut a = engine(with(Some(0), false));
        // Inside o_proj at every position, and with the heads normed and roped there too.
        let mut b = engine(with(Some(256), false));
        let mut c = engine(with(Some(256), true));
        let exp = expected(name);
        let prompt = ids(&exp["prompt_ids"]);
        for (pos, &t) in prompt.iter().enumerate() {
            let want = logits(a.step(t, pos).unwrap());
            for (what, e) in [("inside o_proj", &mut b), ("with the rope", &mut c)] {
                let err = rel_err(&logits(e.step(t, pos).unwrap()), &want);
                assert!(err < 1e-2, "{name} pos {pos}: {what} vs split {err}");
            }
        }
        assert_eq!(b.attn_in_o_launches(), prompt.len() as u64, "{name}");
        assert_eq!(c.attn_in_o_launches(), prompt.len() as u64, "{name}");
        assert_eq!(a.attn_in_o_launches(), 0, "{name}");
    }
}

/// Decoding one step ahead on the GPU (`common::decode_ahead_check`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_decoding_one_step_ahead_chooses_the_same_tokens() {
    decode_ahead_check(&gpu());
}

/// Gumbel-max sampling on the GPU picks what the host mirror of its hash picks from the
/// same logits (up to near-ties: the GPU's log differs from the host's in the last bits).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_device_sampling_is_gumbel_max() {
    let name = "untied_gqa4_v5";
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let exp = expected(name);
    let mut m = MegakernelEngine::new(ck.config, &ck.weights, gpu(), Default::default()).unwrap();
    let (temperature, seed) = (0.8f32, 77u64);
    assert!(m
        .device_sampling(&SamplingParams {
            temperature,
            seed,
            ..Default::default()
        })
        .unwrap());
    for (pos, &t) in ids(&exp["prompt_ids"])
        .iter()
        .chain(&ids(&exp["greedy_ids"]))
        .enumerate()
    {
        let StepOutput::Token(got) = m.step(t, pos).unwrap() else {
            panic!("tokens")
        };
        let z = m.logits().unwrap();
        let want = gumbel_max(&z, temperature, seed as u32, pos as u32);
        if got != want {
            let score = |i: u32| {
                z[i as usize] / temperature
                    - (-gumbel_uniform(seed as u32, pos as u32, i).ln()).ln()
            };
            let gap = (score(got) - score(want)).abs();
            assert!(
                gap < 1e-4,
                "pos {pos}: sampled {got}, host mirror {want} (gap {gap})"
            );
        }
    }
}

/// A real Qwen3 shape (0.6B, 1.7B, 4B, 8B) from hf_reference.py, against its fp32 oracle
/// and with transformers' own bf16 inference as the bar, over every prompt it recorded:
/// the mean first-logit error (max |z - z_fp32| / max |z_fp32|) is at most transformers'
/// bf16 mean, and the mean number of greedy steps that agree with the oracle from the first
/// is at least transformers' bf16 mean (one prompt's agreement hinges on one small margin,
/// so means are compared). One launch per token throughout. Skipped (passes, with a note)
/// when TESSERA_HF_CKPT is not set.
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_megakernel_matches_transformers_at_real_shape() {
    let Ok(dir) = std::env::var("TESSERA_HF_CKPT") else {
        eprintln!("TESSERA_HF_CKPT is not set: skipped (point it at a hf_reference.py output)");
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let exp: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let prompts = exp["prompts"].as_array().unwrap_or_else(|| {
        panic!(
            "{}: expected.json has no `prompts` (rewrite it with shared/gpu/hf_reference.py)",
            dir.display()
        )
    });
    let ck = Checkpoint::load(&dir, false).unwrap();
    let steps = prompts
        .iter()
        .map(|p| ids(&p["greedy_ids"]).len())
        .max()
        .unwrap();
    let longest = prompts
        .iter()
        .map(|p| ids(&p["prompt_ids"]).len())
        .max()
        .unwrap();
    let max_seq = Some(longest + steps + 8);

    // Logits after each prompt against the oracle's first_logits (step(.., 0) rewinds).
    let mut m = MegakernelEngine::new(
        ck.config.clone(),
        &ck.weights,
        gpu(),
        mega_opts(Output::Logits, max_seq),
    )
    .unwrap();
    let mut errs = vec![];
    for p in prompts {
        let mut z = vec![];
        for (pos, &t) in ids(&p["prompt_ids"]).iter().enumerate() {
            z = logits(m.step(t, pos).unwrap());
        }
        errs.push(rel_err(&z, &floats(&p["first_logits"])) as f64);
    }
    drop(m);

    // Greedy agreement with the oracle, from the first step, one launch per token.
    let mut m = MegakernelEngine::new(
        ck.config.clone(),
        &ck.weights,
        gpu(),
        mega_opts(Output::Token, max_seq),
    )
    .unwrap();
    m.compile().unwrap();
    let mut agrees = vec![];
    let mut ms_per_token = vec![];
    for p in prompts {
        let (prompt, want) = (ids(&p["prompt_ids"]), ids(&p["greedy_ids"]));
        let before = m.launches();
        let (got, launches, t) = greedy(&mut m, &prompt, want.len());
        // The prompt goes through prefill (no megakernel launch).
        assert_eq!(
            (launches - before) as usize,
            want.len() - 1,
            "one launch per generated token"
        );
        agrees.push(got.iter().zip(&want).take_while(|(a, b)| a == b).count() as f64);
        ms_per_token.push(t.decode_ms / t.decode_tokens.max(1) as f64);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let hf_err = exp["bf16_mean_first_logits_rel_err"].as_f64().unwrap();
    let hf_agree = exp["bf16_mean_greedy_agree"].as_f64().unwrap();
    eprintln!(
        "{}: over {} prompts, first-logit error vs the fp32 oracle: tessera mean {:.2e} {:?}, transformers bf16 mean {hf_err:.2e}; greedy steps agreeing with the oracle (of {steps}): tessera mean {:.2} {agrees:?}, transformers bf16 mean {hf_agree:.2}; decode {:.3} ms/token",
        dir.display(),
        prompts.len(),
        mean(&errs),
        errs.iter().map(|e| format!("{e:.2e}")).collect::<Vec<_>>(),
        mean(&agrees),
        mean(&ms_per_token),
    );
    assert!(
        mean(&errs) <= hf_err,
        "first-logit error {:.3e} is above transformers' bf16 {hf_err:.3e}",
        mean(&errs)
    );
    assert!(
        mean(&agrees) >= hf_agree,
        "greedy agreement {:.2} is below transformers' bf16 {hf_agree:.2}",
        mean(&agrees)
    );
}

/// The norm-once kernels with several row tiles per program (`Tiles::gate_up_tiles`,
/// `Tiles::lm_head_tiles`; spread over the CTAs by default) give one tile per program's
/// logits on the GPU (within 1e-3 of max |logit|) and its token at every step: the
/// committed checkpoints, and two layers at Qwen3-0.6B's shape (the real tiles: 3 gate/up
/// tiles per program, as the default picks on 132 SMs).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_norm_once_tiles_equal_the_default() {
    use model::kernels::Tiles;
    let shaped = model::Config {
        num_hidden_layers: 2,
        vocab_size: 2048,
        max_position_embeddings: 64,
        tie_word_embeddings: false,
        ..model::kernels::qwen3_0_6b()
    };
    let mut cases: Vec<(String, model::Config, model::Weights, Vec<u32>)> = CHECKPOINTS
        .iter()
        .map(|name| {
            let ck = Checkpoint::load(&data_dir(name), false).unwrap();
            let exp = expected(name);
            let ids: Vec<u32> = ids(&exp["prompt_ids"])
                .into_iter()
                .chain(ids(&exp["greedy_ids"]))
                .collect();
            (name.to_string(), ck.config, ck.weights, ids)
        })
        .collect();
    let w = model::embedded::weights(&shaped);
    cases.push(("0.6B-shaped".into(), shaped, w, vec![17, 900, 3, 5, 1000]));
    for (name, cfg, weights, steps) in cases {
        let one = Tiles::for_config(&cfg)
            .with_gate_up_tiles(&cfg, 1)
            .with_lm_head_tiles(&cfg, 1);
        let many = one
            .clone()
            .with_gate_up_tiles(&cfg, 3)
            .with_lm_head_tiles(&cfg, 4);
        assert_eq!((many.gate_up_tiles, many.lm_head_tiles), (3, 4), "{name}");
        // The MLP as two stages: the stage whose kernel these tiles choose.
        let engine = |t: &Tiles| {
            let opts = MegakernelOptions {
                tiles: Some(t.clone()),
                fused_mlp: false,
                ..mega_opts(Output::Logits, Some(64))
            };
            MegakernelEngine::new(cfg.clone(), &weights, gpu(), opts).unwrap()
        };
        let (mut a, mut b) = (engine(&one), engine(&many));
        for (pos, &t) in steps.iter().enumerate() {
            let (x, y) = (
                logits(a.step(t, pos).unwrap()),
                logits(b.step(t, pos).unwrap()),
            );
            let e = rel_err(&x, &y);
            assert!(e < 1e-3, "{name} pos {pos}: norm-once tiles vs default {e}");
            assert_eq!(
                a.next_token().unwrap(),
                b.next_token().unwrap(),
                "{name} pos {pos}"
            );
        }
    }
}
