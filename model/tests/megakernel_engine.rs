//! The megakernel engine (the whole decode step as ONE `#[megakernel]` launch) through the
//! interpreter, on every committed checkpoint: stage by stage, and in the adversarial mode
//! (CTAs interleaved as hostilely as the syncs allow, so a missing sync is a wrong answer).
//!
//! - Its logits equal the kernels engine's bit for bit (the same kernels on the same
//!   bytes), and are within the kernels engine's tolerance of the reference decoder and of
//!   transformers (see `kernels_engine.rs` for why 3e-2).
//! - Greedy tokens equal transformers' on the decisive prefix (top-1 margin > 0.05).
//! - Exactly one launch per step (the prompt goes through prefill: `prefill_engine.rs`).
//! - Temperature sampling on the device (Gumbel-max) picks what the host mirror of its
//!   hash picks, and the hash's draws follow softmax(z / T).
mod common;
use common::*;
use dsl_runtime::mega::Policy;
use dsl_runtime::Device;
use model::kernels_engine::{KernelOptions, KernelsEngine, Output};
use model::megakernel_engine::{MegakernelEngine, MegakernelOptions, Variant};
use model::sampling::{argmax, gumbel_max, Sampler, SamplingParams};
use model::{Checkpoint, Engine, Reference, StepOutput};
use std::sync::Arc;

const ENGINE_LOGIT_TOL: f32 = 3e-2;

/// Stage by stage, and two adversarial interleavings.
fn modes() -> Vec<(&'static str, MegakernelOptions)> {
    let base = MegakernelOptions::default();
    let adv = |ctas, policy| MegakernelOptions {
        mega: base.mega.clone().adversarial(ctas, policy),
        ..base.clone()
    };
    vec![
        ("sequential", base.clone()),
        // CTA counts that do not divide the head count spread a head's splits over CTAs.
        ("adversarial run-ahead", adv(3, Policy::RunAhead)),
        ("adversarial shuffled", adv(5, Policy::Shuffled(7))),
    ]
}

fn mega(name: &str, output: Output, opts: &MegakernelOptions) -> MegakernelEngine {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let opts = MegakernelOptions {
        output,
        ..opts.clone()
    };
    MegakernelEngine::new(ck.config, &ck.weights, Device::interpreter(), opts).unwrap()
}

fn kernels(name: &str) -> KernelsEngine {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let opts = KernelOptions {
        output: Output::Logits,
        ..Default::default()
    };
    KernelsEngine::new(ck.config, &ck.weights, Device::interpreter(), opts).unwrap()
}

fn reference(name: &str) -> Reference {
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    Reference::new(ck.config, Arc::new(ck.weights))
}

#[test]
fn greedy_matches_transformers_while_decisive_one_launch_per_token() {
    for (mode, opts) in modes() {
        for name in CHECKPOINTS {
            let exp = expected(name);
            let prompt = ids(&exp["prompt_ids"]);
            let want = ids(&exp["greedy_ids"]);
            let decisive = decisive_prefix(&exp);
            let mut m = mega(name, Output::Logits, &opts);
            let mut sampler = Sampler::new(Default::default());
            let g = model::generate::generate(
                &mut m,
                &prompt,
                decisive,
                &mut sampler,
                &[],
                &mut |_| Ok(()),
            )
            .unwrap();
            assert_eq!(
                g.generated_ids,
                want[..decisive],
                "{name} ({mode}): greedy ids differ"
            );
            // The prompt goes through prefill (its own kernels, no megakernel launch), then
            // one step per generated token but the last.
            let steps = decisive - 1;
            assert_eq!(
                m.launches(),
                steps as u64,
                "{name} ({mode}): launches per step"
            );
            // No token id goes in: prefill leaves the first generated token and its position
            // on the device, and each step hands its own to the next (argmax_merge).
            assert_eq!(
                m.steps_copied_in(),
                0,
                "{name} ({mode}): steps that copied a token in"
            );
            eprintln!(
                "{name} ({mode}): {decisive} greedy tokens equal transformers', {steps} steps = {} launches",
                m.launches()
            );
        }
    }
}

/// Teacher-forced on transformers' greedy ids: every step's logits are within tolerance of
/// the reference and transformers, and equal the kernels engine's: exactly with the MLP as
/// gate/up then down (the same kernels on the same bytes), within 1e-2 with it fused (the
/// default: its atomics sum down in another order; `fused_mlp_computes_the_two_stage_logits`).
#[test]
fn logits_equal_kernels_engine_and_track_reference_and_transformers() {
    for ((mode, opts), fused_mlp) in modes()
        .into_iter()
        .flat_map(|m| [(m.clone(), false), (m, true)])
    {
        for name in CHECKPOINTS {
            let exp = expected(name);
            let opts = MegakernelOptions {
                fused_mlp,
                ..opts.clone()
            };
            let mut m = mega(name, Output::Logits, &opts);
            let (mut k, mut r) = (kernels(name), reference(name));
            let prompt = ids(&exp["prompt_ids"]);
            let greedy = ids(&exp["greedy_ids"]);
            let golden = exp["logits"].as_array().unwrap();
            let mut worst = 0f32;
            for (pos, &t) in prompt.iter().chain(&greedy).enumerate() {
                let got = logits(m.step(t, pos).unwrap());
                let want = logits(k.step(t, pos).unwrap());
                if fused_mlp {
                    let e = rel_err(&got, &want);
                    assert!(e < 1e-2, "{name} ({mode}, fused MLP) pos {pos}: {e}");
                } else {
                    assert_eq!(
                        got, want,
                        "{name} ({mode}) pos {pos}: megakernel != kernels engine"
                    );
                }
                let e = rel_err(&got, &r.forward(t, pos).unwrap());
                assert!(
                    e < ENGINE_LOGIT_TOL,
                    "{name} ({mode}) pos {pos}: relative error {e} vs the reference"
                );
                worst = worst.max(e);
                assert_eq!(m.next_token().unwrap(), argmax(&got), "fused argmax");
                if let Some(want) = (pos + 1)
                    .checked_sub(prompt.len())
                    .and_then(|s| golden.get(s))
                {
                    let e = rel_err(&got, &floats(want));
                    assert!(
                        e < ENGINE_LOGIT_TOL,
                        "{name} ({mode}) pos {pos}: relative error {e} vs transformers"
                    );
                }
            }
            assert_eq!(
                m.launches() as usize,
                prompt.len() + greedy.len(),
                "one launch per step"
            );
            eprintln!("{name} ({mode}, fused MLP {fused_mlp}): worst relative logit error vs the reference {worst:.2e}");
        }
    }
}

/// Temperature sampling in the lm_head: each step's token is the Gumbel-max choice the
/// host computes from the same logits, seed and position (one int read back per step).
#[test]
fn device_sampling_is_gumbel_max_of_the_logits() {
    let name = "untied_gqa4_v5";
    let exp = expected(name);
    for (mode, opts) in modes().into_iter().take(2) {
        let mut m = mega(name, Output::Token, &opts);
        let (temperature, seed) = (0.8, 1234);
        let on_device = m
            .device_sampling(&SamplingParams {
                temperature,
                seed,
                ..Default::default()
            })
            .unwrap();
        assert!(on_device, "plain temperature sampling runs on the device");
        let mut differs_from_greedy = 0;
        for (pos, &t) in ids(&exp["prompt_ids"])
            .iter()
            .chain(&ids(&exp["greedy_ids"]))
            .enumerate()
        {
            let StepOutput::Token(got) = m.step(t, pos).unwrap() else {
                panic!("sampling on the device returns tokens")
            };
            let z = m.logits().unwrap();
            let want = gumbel_max(&z, temperature, seed as u32, pos as u32);
            assert_eq!(got, want, "{mode} pos {pos}: sampled token");
            differs_from_greedy += usize::from(got != argmax(&z));
        }
        assert!(differs_from_greedy > 0, "{mode}: T = 0.8 never left greedy");
    }
}

/// The device's hash draws from softmax(z / T): a chi-square test of the host mirror over
/// many positions (the device computes the same bits: see the test above).
#[test]
fn gumbel_draws_follow_the_softmax() {
    let z = [1.0f32, 0.5, 0.0, -0.5, 2.0, 1.5, 0.2, -1.0];
    let t = 0.8;
    let p: Vec<f64> = {
        let e: Vec<f64> = z.iter().map(|&x| ((x / t) as f64).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    };
    for seed in [0u32, 99] {
        let n = 40_000;
        let mut count = [0f64; 8];
        for pos in 0..n {
            count[gumbel_max(&z, t, seed, pos) as usize] += 1.0;
        }
        let chi2: f64 = (0..8)
            .map(|i| (count[i] - n as f64 * p[i]).powi(2) / (n as f64 * p[i]))
            .sum();
        // 7 degrees of freedom: P(chi2 > 24.3) = 0.001.
        assert!(
            chi2 < 24.3,
            "seed {seed}: chi2 {chi2} for {count:?} vs {p:?}"
        );
    }
}

/// Top-k / top-p need the whole distribution: the engine returns logits and the host
/// samples, as with the reference.
#[test]
fn top_k_sampling_reads_logits_back() {
    let name = "tied_gqa2_v4";
    let mut m = mega(name, Output::Token, &MegakernelOptions::default());
    let params = SamplingParams {
        temperature: 0.7,
        top_k: 5,
        seed: 3,
        ..Default::default()
    };
    assert!(!m.device_sampling(&params).unwrap());
    assert!(matches!(m.step(1, 0).unwrap(), StepOutput::Logits(_)));
    let g = model::generate::generate(
        &mut m,
        &[1, 2, 3],
        4,
        &mut Sampler::new(params),
        &[],
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(g.generated_ids.len(), 4);
}

#[test]
fn rewinding_and_bad_steps() {
    let name = "untied_gqa4_v5";
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let opts = MegakernelOptions {
        max_seq: Some(4),
        output: Output::Logits,
        ..Default::default()
    };
    let mut m =
        MegakernelEngine::new(ck.config.clone(), &ck.weights, Device::interpreter(), opts).unwrap();
    assert_eq!(m.max_context(), 4);
    let msg = |r: Result<StepOutput, model::ModelError>| r.unwrap_err().to_string();
    assert!(msg(m.step(ck.config.vocab_size as u32, 0)).contains("vocab_size"));
    assert!(msg(m.step(1, 1)).contains("skips ahead"));
    let first = logits(m.step(7, 0).unwrap());
    let _ = m.step(5, 1).unwrap();
    assert_eq!(logits(m.step(7, 0).unwrap()), first, "rewinding to 0");
    for pos in 1..4 {
        m.step(1, pos).unwrap();
    }
    assert!(msg(m.step(1, 4)).contains("beyond the KV cache"));
    // Failed steps launch nothing.
    assert_eq!(m.launches(), 6);

    let too_long = MegakernelOptions {
        max_seq: Some(ck.config.max_position_embeddings + 1),
        ..Default::default()
    };
    let e = MegakernelEngine::new(
        ck.config.clone(),
        &ck.weights,
        Device::interpreter(),
        too_long,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("max_position_embeddings"), "{e}");
    // Without --max-context: the model's whole context.
    let m = MegakernelEngine::new(
        ck.config.clone(),
        &ck.weights,
        Device::interpreter(),
        Default::default(),
    )
    .unwrap();
    assert_eq!(m.max_context(), ck.config.max_position_embeddings);
}

/// The schedule of a real decode step: counter waits only (no grid barrier), one before
/// every stage that reads what the previous one wrote.
#[test]
fn schedule_uses_counter_waits_only() {
    let m = mega("tied_gqa2_v4", Output::Token, &MegakernelOptions::default());
    let text = m.explain().unwrap();
    eprintln!("{text}");
    let plan = model::megakernel_engine::decode_step::MEGAKERNEL
        .plan(m.constexprs(), m.mega_options())
        .unwrap();
    assert!(plan
        .schedule
        .syncs
        .iter()
        .all(|s| s.kind == dsl_runtime::mega::SyncKind::Counter));
    // embedding, 4 stages per layer (the MLP fused: the default), lm_head, argmax merge;
    // each but the first waits.
    assert_eq!(plan.resolved.stages.len(), 7);
    assert_eq!(plan.schedule.syncs.len(), 6);
}

/// Qwen3-0.6B's layer shape (two layers, small vocab): the real tile sizes (BM 4..16,
/// BK 512, 16 splits; the fused MLP's 3 row tiles of 8 per program, hidden 1024 in one k
/// step) through the megakernel, the MLP fused (the default) and as two stages, against the
/// reference.
#[test]
fn qwen3_0_6b_shaped_megakernel_tracks_the_reference() {
    for fused_mlp in [true, false] {
        qwen3_0_6b_shaped_tracks_the_reference(fused_mlp);
    }
}

fn qwen3_0_6b_shaped_tracks_the_reference(fused_mlp: bool) {
    let cfg = model::Config {
        num_hidden_layers: 2,
        vocab_size: 2048,
        max_position_embeddings: 64,
        tie_word_embeddings: false,
        ..model::kernels::qwen3_0_6b()
    };
    let w = model::embedded::weights(&cfg);
    let opts = MegakernelOptions {
        output: Output::Logits,
        fused_mlp,
        ..Default::default()
    };
    let mut m = MegakernelEngine::new(cfg.clone(), &w, Device::interpreter(), opts).unwrap();
    assert_eq!(m.tiles().fused_mlp, fused_mlp);
    assert_eq!((m.tiles().mlp.bm, m.tiles().mlp_tiles), (8, 3));
    // Hidden 1024: the waits stay before the programs (`wait_in_body_rule`), but o_proj per
    // head's (the fused MLP's default, `o_heads_rule`).
    assert_eq!(m.tiles().o_heads, fused_mlp);
    let o = m.mega_options();
    assert_eq!(
        o.wait_in_body && o.waits_in_body("gemv_head_residual"),
        fused_mlp
    );
    assert!(!o.waits_in_body("rmsnorm_qkv_rope") && !o.waits_in_body("rmsnorm_mlp_tiles"));
    let mut r = Reference::new(cfg, Arc::new(w));
    for (pos, t) in [17u32, 900, 3].into_iter().enumerate() {
        let want = r.forward(t, pos).unwrap();
        let got = logits(m.step(t, pos).unwrap());
        let e = rel_err(&got, &want);
        eprintln!("0.6B-shaped megakernel (fused MLP {fused_mlp}) pos {pos}: relative logit error {e:.2e}");
        assert!(e < ENGINE_LOGIT_TOL, "pos {pos}: relative error {e}");
        assert_eq!(m.next_token().unwrap(), argmax(&got));
    }
    assert_eq!(m.launches(), 3);
}

/// The wait inside the bodies (`MegaOptions::wait_in_body`) by the engine's rule: in every
/// stage above hidden 2048 (Qwen3-4B and 8B), in QKV's and o_proj's at 1.7B, nowhere at
/// 0.6B; `MegakernelOptions::wait_in_body` overrides it (in every stage), and a retune
/// keeps it.
#[test]
fn the_wait_goes_inside_the_bodies_above_hidden_1024() {
    use model::megakernel_engine::{wait_in_body_rule, with_wait_in_body};
    let base = model::kernels::qwen3_0_6b();
    // (hidden, waits in bodies, in the MLP's too)
    for (hidden, want, mlp) in [
        (1024, false, false),
        (2048, true, false),
        (2560, true, true),
        (4096, true, true),
    ] {
        let cfg = model::Config {
            hidden_size: hidden,
            ..base.clone()
        };
        assert_eq!(wait_in_body_rule(&cfg, false), want, "hidden {hidden}");
        // o_proj per head waits in its body at every size.
        assert!(wait_in_body_rule(&cfg, true), "hidden {hidden}");
        let heads = MegakernelOptions {
            wait_in_body: None,
            o_heads: Some(true),
            ..Default::default()
        };
        let (th, mh) = model::megakernel_engine::with_options(
            &cfg,
            model::kernels::Tiles::for_config(&cfg),
            &heads,
        );
        assert!(th.o_heads && mh.waits_in_body("gemv_head_residual"));
        assert_eq!(
            mh.waits_in_body("rmsnorm_mlp_tiles"),
            mlp,
            "hidden {hidden}"
        );
        let o = MegakernelOptions {
            wait_in_body: None,
            ..Default::default()
        };
        let t = model::kernels::Tiles::for_config(&cfg);
        let (t1, m1) = with_wait_in_body(&cfg, t.clone(), &o);
        assert_eq!(
            (t1.o_weights_first, m1.wait_in_body),
            (want, want),
            "hidden {hidden}"
        );
        assert_eq!(
            m1.waits_in_body("rmsnorm_qkv_rope"),
            want,
            "hidden {hidden}"
        );
        assert_eq!(
            m1.waits_in_body("rmsnorm_mlp_tiles"),
            mlp,
            "hidden {hidden}"
        );
        let forced = MegakernelOptions {
            wait_in_body: Some(!want),
            ..o
        };
        let (t2, m2) = with_wait_in_body(&cfg, t, &forced);
        assert_eq!((t2.o_weights_first, m2.wait_in_body), (!want, !want));
        assert_eq!(
            m2.waits_in_body("rmsnorm_mlp_tiles"),
            !want,
            "forced, hidden {hidden}"
        );
    }
    // Only some stages (`MegaOptions::wait_in_body_only`): o_proj's weights come first
    // where o_proj waits in its body.
    let cfg = model::kernels::qwen3_0_6b();
    for (only, first) in [("rmsnorm_qkv_rope", false), ("gemv_residual_copy", true)] {
        let mut o = MegakernelOptions {
            wait_in_body: Some(true),
            ..Default::default()
        };
        o.mega.wait_in_body_only = vec![only.to_string()];
        let (t, m) = with_wait_in_body(&cfg, model::kernels::Tiles::for_config(&cfg), &o);
        assert_eq!(t.o_weights_first, first, "{only}");
        assert!(m.waits_in_body(only) && !m.waits_in_body("rmsnorm_mlp_tiles"));
    }
    let mut m = mega(
        "tied_gqa2_v4",
        Output::Logits,
        &MegakernelOptions {
            wait_in_body: Some(true),
            ..Default::default()
        },
    );
    assert!(m.mega_options().wait_in_body && m.tiles().o_weights_first);
    let tiles = model::kernels::Tiles::for_config(m.config());
    m.retune(tiles, &model::megakernel_engine::RetuneOptions::default())
        .unwrap();
    assert!(
        m.mega_options().wait_in_body && m.tiles().o_weights_first,
        "a retune keeps the wait in the bodies"
    );
}

/// Every sync of the schedule is needed: with any one left out, one of a few adversarial
/// interleavings (CTAs running ahead as far as the remaining syncs allow, or picked at
/// random) computes different logits, or reports the hazard, within a few steps.
#[test]
fn every_sync_is_needed() {
    every_sync_is_needed_with(false, false);
}

/// With the MLP as one stage (`MegakernelOptions::fused_mlp`, the default): its o_proj leaves a copy
/// of x for the MLP's norm, and the MLP adds into x with atomics. Those land in the order
/// the programs run, so an interleaving changes the logits' last bits: "wrong" here is a
/// relative error over 1e-3 or another token, which a missing sync gives by far.
#[test]
fn every_sync_is_needed_with_the_fused_mlp() {
    every_sync_is_needed_with(true, false);
}

/// With o_proj per head (`MegakernelOptions::o_heads`): attention writes partials only,
/// o_proj merges its head's and adds into x and x_mlp with atomics, QKV leaves x_mlp
/// holding the residual.
#[test]
fn every_sync_is_needed_with_o_proj_per_head() {
    every_sync_is_needed_with(true, true);
}

fn every_sync_is_needed_with(fused_mlp: bool, o_heads: bool) {
    let name = "tied_gqa2_v4";
    let prompt = ids(&expected(name)["prompt_ids"]);
    // A prompt token, then the step's own tokens: those reach the next step on the device
    // (`advance`), with nothing copied in.
    // Per step: the logits, the token, and the inputs it leaves for the next step.
    type Steps = Vec<(Vec<f32>, u32, (u32, usize))>;
    let run = |opts: &MegakernelOptions| -> Result<Steps, String> {
        let mut m = mega(name, Output::Token, opts);
        let mut out = vec![];
        let mut t = prompt[0];
        for pos in 0..4 {
            t = match m.step(t, pos).map_err(|e| e.to_string())? {
                StepOutput::Token(n) => n,
                StepOutput::Logits(_) => unreachable!("Output::Token"),
            };
            out.push((m.logits().unwrap(), t, m.next_inputs().unwrap()));
        }
        Ok(out)
    };
    // Tiny attention tiles, so that several splits hold positions within a few steps (with
    // every position in split 0, each merge runs on the CTA that ran the split it reads).
    let cfg = Checkpoint::load(&data_dir(name), false).unwrap().config;
    let tiles = model::kernels::Tiles {
        attn_block_n: 1,
        ..model::kernels::Tiles::for_config(&cfg)
    };
    // Fused, the MLP adds into 3 copies of the residual (`Tiles::resid_copies`): the
    // embedding zeroes them, QKV and the lm_head sum them, o_proj folds them.
    let base = MegakernelOptions {
        tiles: Some(tiles),
        fused_mlp,
        resid_copies: Some(if fused_mlp { 3 } else { 1 }),
        o_heads: Some(o_heads),
        ..Default::default()
    };
    assert_eq!(mega(name, Output::Token, &base).tiles().o_heads, o_heads);
    let want = run(&base).unwrap();
    let plan = model::megakernel_engine::decode_step::MEGAKERNEL
        .plan(mega(name, Output::Token, &base).constexprs(), &base.mega)
        .unwrap();
    // CTA counts that do not divide the 4 heads: a head's splits then spread over CTAs.
    let interleavings = [
        (3, Policy::RunAhead),
        (5, Policy::RunAhead),
        (3, Policy::Shuffled(1)),
        (5, Policy::Shuffled(2)),
        // One lm_head block per CTA: the argmax merge (CTA 0) can overtake most of them.
        (600, Policy::Shuffled(3)),
    ];
    let same = |got: &Steps| {
        if !fused_mlp {
            return *got == want;
        }
        got.iter()
            .zip(&want)
            .all(|((l, t, n), (wl, wt, wn))| rel_err(l, wl) < 1e-3 && (t, n) == (wt, wn))
    };
    // With every sync, every interleaving is "the same" (so a catch below is the sync's).
    for &(ctas, policy) in &interleavings {
        let got = run(&MegakernelOptions {
            mega: base.mega.clone().adversarial(ctas, policy),
            ..base.clone()
        })
        .unwrap();
        assert!(same(&got), "{ctas} CTAs, {policy:?}, with every sync");
    }
    for sync in &plan.schedule.syncs {
        let caught = interleavings.iter().find_map(|&(ctas, policy)| {
            let mut mega_opts = base.mega.clone().adversarial(ctas, policy);
            mega_opts.drop_syncs = vec![sync.id];
            match run(&MegakernelOptions {
                mega: mega_opts,
                ..base.clone()
            }) {
                Ok(got) if same(&got) => None,
                Ok(_) => Some(format!("wrong logits or token ({ctas} CTAs, {policy:?})")),
                Err(e) => Some(e),
            }
        });
        let Some(how) = caught else {
            panic!(
                "sync {} left out: every adversarial interleaving still got the right logits",
                sync.id
            )
        };
        eprintln!("sync {} left out: {how}", sync.id);
    }
}

/// The norm-once kernels of gate/up and the lm_head (`Tiles::gate_up_tiles`,
/// `Tiles::lm_head_tiles`: several row tiles per program, the norm once, the next tile's
/// weights loaded while one reduces; spread over the CTAs by default): the same logits and
/// tokens, bit for bit, with one tile per program as with several, stage by stage and
/// under adversarial interleavings, at every committed checkpoint. (Against the k-looped
/// `rmsnorm_gate_up_silu` and `lm_head_argmax`, the kernels engine's, bit for bit too:
/// `logits_equal_kernels_engine_and_track_reference_and_transformers`.)
#[test]
fn norm_once_tiles_compute_the_same_logits() {
    for name in CHECKPOINTS {
        let cfg = Checkpoint::load(&data_dir(name), false).unwrap().config;
        let one = model::kernels::Tiles::for_config(&cfg)
            .with_gate_up_tiles(&cfg, 1)
            .with_lm_head_tiles(&cfg, 1);
        let many = one
            .clone()
            .with_gate_up_tiles(&cfg, 3)
            .with_lm_head_tiles(&cfg, 5);
        assert_eq!((one.gate_up_tiles, many.gate_up_tiles), (1, 3), "{name}");
        assert_eq!((one.lm_head_tiles, many.lm_head_tiles), (1, 5), "{name}");
        let prompt = ids(&expected(name)["prompt_ids"]);
        for (mode, opts) in modes() {
            // gate/up's kernel: the MLP as two stages.
            let with = |t: &model::kernels::Tiles| MegakernelOptions {
                tiles: Some(t.clone()),
                fused_mlp: false,
                ..opts.clone()
            };
            let (mut a, mut b) = (
                mega(name, Output::Logits, &with(&one)),
                mega(name, Output::Logits, &with(&many)),
            );
            // The same kernels on other grids.
            let (ea, eb) = (a.explain().unwrap(), b.explain().unwrap());
            for k in ["rmsnorm_gate_up_silu_tiles", "lm_head_argmax_tiles"] {
                assert!(ea.contains(k) && eb.contains(k), "{k}");
            }
            assert_ne!(ea, eb);
            for (pos, &t) in prompt.iter().enumerate() {
                assert_eq!(
                    logits(a.step(t, pos).unwrap()),
                    logits(b.step(t, pos).unwrap()),
                    "{name} ({mode}) pos {pos}"
                );
                assert_eq!(a.next_token().unwrap(), b.next_token().unwrap());
            }
        }
    }
}

/// QKV, o_proj and down with several row tiles per program (`rmsnorm_qkv_rope_tiles`,
/// `gemv_residual_tiles`; `Tiles::with_qkv_tiles`, `Tiles::with_gemv_tiles`: x once per
/// program, the next tile's weights loaded while one reduces): the same logits and tokens, bit for bit, as one tile per
/// program, stage by stage and under adversarial interleavings, at every committed
/// checkpoint.
#[test]
fn gemv_tiles_compute_the_same_logits() {
    for name in CHECKPOINTS {
        gemv_tiles_same_logits_at(name);
    }
}

fn gemv_tiles_same_logits_at(name: &str) {
    let cfg = Checkpoint::load(&data_dir(name), false).unwrap().config;
    let one = model::kernels::Tiles::for_config(&cfg);
    assert_eq!(
        (one.qkv_tiles, one.o_proj_tiles, one.down_tiles),
        (1, 1, 1),
        "one tile per program in the rule"
    );
    // 3 tiles of QKV's, o_proj's and down's rows per program: the last program's tiles run
    // past the hidden size unless BM * 3 divides it (and QKV's tiles cross heads).
    let many = one.clone().with_gemv_tiles(&cfg, 3).with_qkv_tiles(&cfg, 3);
    assert_eq!(
        (many.qkv_tiles, many.o_proj_tiles, many.down_tiles),
        (3, 3, 3)
    );
    assert_eq!(
        (many.qkv, many.o_proj, many.down),
        (one.qkv, one.o_proj, one.down)
    );
    assert!(
        !cfg.hidden_size.is_multiple_of(3 * many.down.bm),
        "{:?}",
        many.down
    );
    let prompt = ids(&expected(name)["prompt_ids"]);
    for (mode, opts) in modes() {
        // down's kernel: the MLP as two stages.
        let with = |t: &model::kernels::Tiles| MegakernelOptions {
            tiles: Some(t.clone()),
            fused_mlp: false,
            ..opts.clone()
        };
        let (mut a, mut b) = (
            mega(name, Output::Logits, &with(&one)),
            mega(name, Output::Logits, &with(&many)),
        );
        let (ea, eb) = (a.explain().unwrap(), b.explain().unwrap());
        assert!(!ea.contains("gemv_residual_tiles") && !ea.contains("rmsnorm_qkv_rope_tiles"));
        // o_proj and down on the tiles' grids (a stage's name takes its constexprs where
        // the two differ).
        for (stage, grid) in [
            (
                "stage 2 rmsnorm_qkv_rope_tiles",
                "grid (cdiv((HEADS + 2 * KV_HEADS) * HEAD_DIM, QKV_BM * QKV_TILES)",
            ),
            (
                "stage 4 gemv_residual_tiles",
                "grid (cdiv(HIDDEN, O_BM * O_TILES)",
            ),
            (
                "stage 6 gemv_residual_tiles",
                "grid (cdiv(HIDDEN, DOWN_BM * DOWN_TILES)",
            ),
        ] {
            let heads = eb
                .lines()
                .filter(|l| l.trim_start().starts_with(stage) && l.contains(grid))
                .count();
            assert_eq!(heads, 1, "{stage}:\n{eb}");
        }
        for (pos, &t) in prompt.iter().enumerate() {
            assert_eq!(
                logits(a.step(t, pos).unwrap()),
                logits(b.step(t, pos).unwrap()),
                "{name} ({mode}) pos {pos}"
            );
            assert_eq!(a.next_token().unwrap(), b.next_token().unwrap());
        }
    }
}

/// `a` and `b` stepped through `name`'s prompt beside the reference decoder: at every
/// position `b`'s logits within 1e-2 of `a`'s (a bf16 rounding that flips moves a logit by
/// 2^-9) and within the engines' tolerance of the reference.
fn same_logits_step_by_step(
    name: &str,
    what: &str,
    a: &mut MegakernelEngine,
    b: &mut MegakernelEngine,
) {
    let mut r = reference(name);
    for (pos, &t) in ids(&expected(name)["prompt_ids"]).iter().enumerate() {
        let (la, lb) = (
            logits(a.step(t, pos).unwrap()),
            logits(b.step(t, pos).unwrap()),
        );
        let want = r.forward(t, pos).unwrap();
        let (e2, er) = (rel_err(&lb, &la), rel_err(&lb, &want));
        eprintln!("{name} ({what}) pos {pos}: {e2:.2e}, against the reference {er:.2e}");
        assert!(e2 < 1e-2, "{name} ({what}) pos {pos}: {e2}");
        assert!(er < ENGINE_LOGIT_TOL, "{name} ({what}) pos {pos}: {er}");
    }
}

/// The MLP as one stage (`MegakernelOptions::fused_mlp`: `rmsnorm_mlp_tiles` adds each program's
/// share of down into x with atomics, o_proj leaves it a copy of x) computes what gate/up
/// then down compute, up to the order of the sums: at every committed checkpoint, stage
/// by stage and under adversarial interleavings, within 1e-2 of the two-stage logits (a bf16 rounding that flips moves a logit by 2^-9) and
/// within the engines' tolerance of the reference decoder, with one stage fewer per layer.
#[test]
fn fused_mlp_computes_the_two_stage_logits() {
    for name in CHECKPOINTS {
        // The fused MLP adding into 1 or 3 copies of the residual (`Tiles::resid_copies`).
        for ((mode, opts), copies) in modes().into_iter().flat_map(|m| [(m.clone(), 1), (m, 3)]) {
            let with = |fused_mlp| MegakernelOptions {
                fused_mlp,
                resid_copies: Some(copies),
                ..opts.clone()
            };
            let (mut a, mut b) = (
                mega(name, Output::Logits, &with(false)),
                mega(name, Output::Logits, &with(true)),
            );
            assert_eq!(b.tiles().resid_copies, copies);
            let (ea, eb) = (a.explain().unwrap(), b.explain().unwrap());
            assert!(!ea.contains("rmsnorm_mlp_tiles"), "{ea}");
            // Fused, o_proj runs per head by default (`o_heads_rule`).
            for k in ["gemv_head_residual", "rmsnorm_mlp_tiles"] {
                assert!(eb.contains(k), "{k}:\n{eb}");
            }
            let stages = |p: &MegakernelEngine| {
                model::megakernel_engine::decode_step::MEGAKERNEL
                    .plan(p.constexprs(), p.mega_options())
                    .unwrap()
                    .resolved
                    .stages
                    .len()
            };
            assert_eq!((stages(&a), stages(&b)), (8, 7), "{name}");
            let what = format!("{mode}, {copies} copies: fused against two stages");
            same_logits_step_by_step(name, &what, &mut a, &mut b);
        }
    }
}

/// o_proj per head (`MegakernelOptions::o_heads`: attention writes its split partials, each
/// o_proj program merges one head's and adds its rows into the residual and the fused MLP's
/// input with atomics; QKV leaves that input holding the residual) computes the logits of
/// o_proj by rows (the attention's last split merging each head, `gemv_residual_copy`)
/// within 1e-2 (the head's output reaches o_proj in f32, not rounded to bf16), and the
/// reference's: at every committed checkpoint, stage by stage and under adversarial
/// interleavings, with 1 and 3 residual copies and attention tiles of one position (so
/// several splits hold positions).
#[test]
fn o_proj_per_head_computes_the_logits_of_o_proj_by_rows() {
    for name in CHECKPOINTS {
        let cfg = Checkpoint::load(&data_dir(name), false).unwrap().config;
        // 1 and 3 residual copies; one row block a program, or two (`o_heads_tiles`).
        let cases = [(1, 1), (3, 1), (1, 2)];
        for ((mode, opts), (copies, blocks)) in modes()
            .into_iter()
            .flat_map(|m| cases.map(|c| (m.clone(), c)))
        {
            let with = |o_heads| MegakernelOptions {
                tiles: Some(model::kernels::Tiles {
                    attn_block_n: 1,
                    ..model::kernels::Tiles::for_config(&cfg)
                }),
                resid_copies: Some(copies),
                o_heads: Some(o_heads),
                o_heads_tiles: Some(blocks),
                ..opts.clone()
            };
            let (mut a, mut b) = (
                mega(name, Output::Logits, &with(false)),
                mega(name, Output::Logits, &with(true)),
            );
            assert!(!a.tiles().o_heads && b.tiles().o_heads);
            let eb = b.explain().unwrap();
            let kernel = match blocks {
                1 => "gemv_head_residual(",
                _ => "gemv_head_residual_tiles(",
            };
            assert!(
                eb.contains(kernel) && !eb.contains("attn_split_merge"),
                "{eb}"
            );
            let what = format!(
                "{mode}, {copies} copies, {blocks} blocks a program: o_proj per head against by rows"
            );
            same_logits_step_by_step(name, &what, &mut a, &mut b);
        }
    }
}

/// o_proj per head is the default up to hidden 2560 (`o_heads_rule`), needs the fused MLP,
/// can be turned off, and a retune keeps it.
#[test]
fn o_proj_per_head_is_the_default_with_the_fused_mlp() {
    use model::megakernel_engine::o_heads_rule;
    for (hidden, want) in [(1024, true), (2048, true), (2560, true), (4096, false)] {
        let cfg = model::Config {
            hidden_size: hidden,
            ..model::kernels::qwen3_0_6b()
        };
        assert_eq!(o_heads_rule(&cfg), want, "hidden {hidden}");
    }
    let has = |o: &MegakernelOptions| mega("tied_gqa2_v4", Output::Logits, o).tiles().o_heads;
    let with = |o_heads, fused_mlp| MegakernelOptions {
        o_heads,
        fused_mlp,
        ..Default::default()
    };
    assert!(has(&with(None, true)), "the default");
    assert!(!has(&with(Some(false), true)), "turned off");
    assert!(!has(&with(Some(true), false)), "it needs the fused MLP");
    let mut m = mega("tied_gqa2_v4", Output::Logits, &with(None, true));
    let tiles = model::kernels::Tiles::for_config(m.config());
    m.retune(tiles, &model::megakernel_engine::RetuneOptions::default())
        .unwrap();
    assert!(m.tiles().o_heads, "a retune keeps it");
    let two = model::kernels::Tiles {
        o_heads_tiles: 2,
        ..model::kernels::Tiles::for_config(m.config())
    };
    m.retune(two, &model::megakernel_engine::RetuneOptions::default())
        .unwrap();
    assert_eq!(
        m.tiles().o_heads_tiles,
        2,
        "a retune takes its blocks a program"
    );
    // Row blocks a program (`o_heads_tiles`): the engine spreads them above hidden 2048
    // (`o_heads_tiles_rule`), else one a program; spread over 132 CTAs (0), 1 at 0.6B (128
    // programs fit), 3 at 4B (32 heads x 10 blocks), 4 at 8B (32 x 16).
    use model::megakernel_engine::{o_heads_tiles, o_heads_tiles_rule};
    for (hidden, want) in [(1024, 1), (2048, 1), (2560, 0), (4096, 0)] {
        let cfg = model::Config {
            hidden_size: hidden,
            ..model::kernels::qwen3_0_6b()
        };
        assert_eq!(o_heads_tiles_rule(&cfg), want, "hidden {hidden}");
    }
    assert_eq!(
        m.tiles().o_heads_tiles,
        2,
        "the rule does not override a retune"
    );
    let forced = MegakernelOptions {
        o_heads_tiles: Some(0),
        ..Default::default()
    };
    assert_eq!(
        mega("tied_gqa2_v4", Output::Logits, &forced)
            .tiles()
            .o_heads_tiles,
        0
    );
    assert_eq!(
        mega("tied_gqa2_v4", Output::Logits, &Default::default())
            .tiles()
            .o_heads_tiles,
        1,
        "the rule at a small hidden size"
    );
    for (hidden, heads, want) in [(1024, 16, 1), (2560, 32, 3), (4096, 32, 4)] {
        let cfg = model::Config {
            hidden_size: hidden,
            num_attention_heads: heads,
            ..model::kernels::qwen3_0_6b()
        };
        let t = model::kernels::Tiles::for_config(&cfg);
        assert_eq!(o_heads_tiles(&cfg, &t), 1, "hidden {hidden}");
        let spread = model::kernels::Tiles {
            o_heads_tiles: 0,
            ..t
        };
        assert_eq!(o_heads_tiles(&cfg, &spread), want, "hidden {hidden}");
    }
    // At Qwen3-0.6B: 16 heads x 8 row blocks of 128 = 128 programs on 132 CTAs; every QKV
    // program (128 of 32 rows) copies 8 rows of the residual.
    let cfg = model::kernels::qwen3_0_6b();
    let t = model::kernels::Tiles::for_config(&cfg);
    assert_eq!(model::megakernel_engine::o_heads_bm(&cfg, &t), 128);
    assert_eq!(model::megakernel_engine::qkv_copy_rows(&cfg, &t), 8);
}

/// The megakernel's QKV tiles (`qkv_tiles_rule`): spread over the CTAs only where one tile
/// per program would put 4 or more QKV programs on a CTA (measured faster at 4B and 8B,
/// slower at 1.7B's 2), at each Qwen3 shape on 132 CTAs; and the engine applies it.
#[test]
fn qkv_tiles_rule_spreads_where_a_cta_would_run_four_programs() {
    use model::megakernel_engine::qkv_tiles_rule;
    let shape = |hidden, inter, heads, layers| model::Config {
        hidden_size: hidden,
        intermediate_size: inter,
        num_attention_heads: heads,
        num_hidden_layers: layers,
        ..model::kernels::qwen3_0_6b()
    };
    for (name, cfg, per_cta, want) in [
        ("0.6B", model::kernels::qwen3_0_6b(), 1, 1),
        ("1.7B", shape(2048, 6144, 16, 28), 2, 1),
        ("4B", shape(2560, 9728, 32, 36), 6, 0),
        ("8B", shape(4096, 12288, 32, 36), 6, 0),
    ] {
        let t = model::kernels::Tiles::for_config(&cfg);
        let programs = t.qkv.programs(cfg.q_dim() + 2 * cfg.kv_dim());
        assert_eq!(programs.div_ceil(t.ctas), per_cta, "{name}");
        assert_eq!(qkv_tiles_rule(&cfg, &t), want, "{name}");
        let spread = t.clone().with_qkv_tiles(&cfg, qkv_tiles_rule(&cfg, &t));
        assert_eq!(
            spread.qkv_tiles,
            if want == 0 { per_cta } else { 1 },
            "{name}"
        );
    }
    // The engine (the interpreter counts as 132 SMs): tiny checkpoints keep one per program.
    let m = mega("tied_gqa2_v4", Output::Token, &MegakernelOptions::default());
    assert_eq!(m.tiles().qkv_tiles, 1);
}

/// The fused MLP's copies of the residual (`resid_copies_rule`): 2 up to hidden 2048
/// (measured faster at 0.6B and 1.7B, slower at 4B and 8B), and the engine applies it
/// unless told otherwise, fused only.
#[test]
fn resid_copies_rule_doubles_the_residual_up_to_hidden_2048() {
    use model::megakernel_engine::resid_copies_rule;
    for (hidden, want) in [(1024, 2), (2048, 2), (2560, 1), (4096, 1)] {
        let cfg = model::Config {
            hidden_size: hidden,
            ..model::kernels::qwen3_0_6b()
        };
        assert_eq!(resid_copies_rule(&cfg), want, "hidden {hidden}");
    }
    let copies = |opts: MegakernelOptions| {
        let m = mega("tied_gqa2_v4", Output::Token, &opts);
        let c = m.tiles().resid_copies;
        (c, m.hidden().unwrap().len())
    };
    // Tiny checkpoints are narrow: two copies, and `hidden` still gives one vector.
    let h = Checkpoint::load(&data_dir("tied_gqa2_v4"), false)
        .unwrap()
        .config
        .hidden_size;
    assert_eq!(copies(MegakernelOptions::default()), (2, h));
    let set = MegakernelOptions {
        resid_copies: Some(5),
        ..Default::default()
    };
    assert_eq!(copies(set).0, 5);
    let unfused = MegakernelOptions {
        fused_mlp: false,
        ..Default::default()
    };
    assert_eq!(copies(unfused).0, 1);
}

/// The fused MLP's stages and o_proj per head's prefetch 2 MiB of each weight window while
/// they wait, at every size, the other stages the default 4 MiB; naming a kernel's size
/// replaces the rule.
#[test]
fn wait_prefetch_rule_halves_the_mlps_and_o_proj_per_heads() {
    use model::megakernel_engine::with_options;
    let sizes = |hidden: usize, o: &MegakernelOptions| {
        let cfg = model::Config {
            hidden_size: hidden,
            ..model::kernels::qwen3_0_6b()
        };
        let t = model::kernels::Tiles::for_config(&cfg);
        let m = with_options(&cfg, t, o).1;
        [
            "rmsnorm_mlp_tiles",
            "rmsnorm_qkv_rope",
            "attn_head_residual",
            "gemv_head_residual",
        ]
        .map(|k| m.wait_prefetch_for(k) >> 20)
    };
    let d = MegakernelOptions::default();
    for hidden in [1024, 2048, 2560, 4096] {
        assert_eq!(sizes(hidden, &d), [2, 4, 4, 2], "hidden {hidden}");
    }
    let named = MegakernelOptions {
        mega: dsl_runtime::mega::MegaOptions {
            wait_prefetch_by_kernel: vec![("rmsnorm_qkv_rope".into(), 8 << 20)],
            ..d.mega.clone()
        },
        ..d.clone()
    };
    assert_eq!(sizes(1024, &named), [4, 8, 4, 4]);
    // The engine runs with it (its C: `megakernel_nvrtc.rs`).
    let m = mega("tied_gqa2_v4", Output::Token, &d);
    assert_eq!(
        m.mega_options().wait_prefetch_for("rmsnorm_mlp_tiles"),
        2 << 20
    );
    assert_eq!(
        m.mega_options().wait_prefetch_for("rmsnorm_qkv_rope"),
        4 << 20
    );
}

/// Decoding one step ahead chooses the tokens one step at a time does (`common::decode_ahead_check`).
#[test]
fn decoding_one_step_ahead_chooses_the_same_tokens() {
    decode_ahead_check(&Device::interpreter());
}

/// The decode step whose attention loads its next K/V tile while one reduces
/// (`MegakernelOptions::attn_ahead`, `attn_split_ahead`) computes the same logits bit for bit
/// as the same tiles loaded in turn: at every committed checkpoint, stage by stage and under
/// adversarial interleavings, with tiles of one position and 3 splits (so the splits of a
/// prompt hold several). By default a step launches it from SPLITS x BLOCK_N positions on.
#[test]
fn attention_tiles_loaded_ahead_compute_the_same_logits() {
    for name in CHECKPOINTS {
        let cfg = Checkpoint::load(&data_dir(name), false).unwrap().config;
        for (mode, opts) in modes() {
            let with = |attn_ahead| MegakernelOptions {
                tiles: Some(model::kernels::Tiles {
                    attn_block_n: 1,
                    attn_splits: 3,
                    ..model::kernels::Tiles::for_config(&cfg)
                }),
                attn_ahead,
                // The split attention at every position (no step attends inside o_proj).
                attn_in_o: Some(0),
                ..opts.clone()
            };
            let mut never = mega(name, Output::Logits, &with(Some(false)));
            let mut always = mega(name, Output::Logits, &with(Some(true)));
            let mut rule = mega(name, Output::Logits, &with(None));
            let from = rule.tiles().attn_splits;
            let prompt = ids(&expected(name)["prompt_ids"]);
            assert!(
                prompt.len() > from,
                "{name}: {} positions, ahead from {from}",
                prompt.len()
            );
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for (pos, &t) in prompt.iter().enumerate() {
                let want = bits(&logits(never.step(t, pos).unwrap()));
                for (what, e) in [("always", &mut always), ("the rule", &mut rule)] {
                    let got = bits(&logits(e.step(t, pos).unwrap()));
                    assert_eq!(got, want, "{name} ({mode}, ahead {what}) pos {pos}");
                }
            }
            let n = prompt.len() as u64;
            assert_eq!(never.ahead_launches(), 0, "{name} ({mode})");
            assert_eq!(always.ahead_launches(), n, "{name} ({mode})");
            assert_eq!(rule.ahead_launches(), n - from as u64, "{name} ({mode})");
        }
    }
}

/// The decode step whose o_proj programs compute the attention themselves
/// (`MegakernelOptions::attn_in_o`, `attn_head_residual`: one stage a layer less; with
/// `attn_rope`, `attn_rope_head_residual`, norming and roping the raw heads too): below
/// BLOCK_N positions (one tile of context) its logits equal the plain step's bit for bit,
/// and beyond, where its one pass over the context rounds otherwise than the split
/// attention's merge (and a flipped bf16 rounding of q, K or V carries that on), they stay
/// within 1e-2 of them (the GPU tests' bound); at every committed checkpoint, stage
/// by stage and under adversarial interleavings, with tiles of 4 positions and 3 splits.
/// (The shuffled interleaving draws its program order per stage, so with one stage fewer
/// the f32 atomics add in another order: there the logits are compared within the bound
/// throughout.)
/// Each step launches the specialisation its position asks for.
#[test]
fn attention_inside_o_proj_computes_the_same_logits() {
    for name in CHECKPOINTS {
        let cfg = Checkpoint::load(&data_dir(name), false).unwrap().config;
        for (mode, opts) in modes() {
            let with_rope = |attn_in_o, attn_rope| MegakernelOptions {
                tiles: Some(model::kernels::Tiles {
                    attn_block_n: 4,
                    attn_splits: 3,
                    ..model::kernels::Tiles::for_config(&cfg)
                }),
                attn_in_o,
                attn_rope: Some(attn_rope),
                // The heads finished in the QKV stage (`qkv_pairs_compute_the_same_logits`
                // tests the pairs).
                qkv_pairs: Some(false),
                qkv_pairs_split: Some(false),
                // The split attention's plain loop throughout (no ahead specialisation).
                attn_ahead: Some(false),
                ..opts.clone()
            };
            let with = |attn_in_o| with_rope(attn_in_o, false);
            let mut never = mega(name, Output::Logits, &with(Some(0)));
            let mut rope = mega(name, Output::Logits, &with_rope(Some(4), true));
            let mut rope_always = mega(name, Output::Logits, &with_rope(Some(usize::MAX), true));
            // o_proj by rows in the other steps (as at 8B): per head inside the specialisation
            // (the per-head step's bits there), by rows after it.
            let by_rows_with = |attn_in_o| MegakernelOptions {
                o_heads: Some(false),
                ..with_rope(attn_in_o, true)
            };
            let mut by_rows = mega(name, Output::Logits, &by_rows_with(Some(4)));
            let mut by_rows_never = mega(name, Output::Logits, &by_rows_with(Some(0)));
            let mut below_a_tile = mega(name, Output::Logits, &with(Some(4)));
            let mut always = mega(name, Output::Logits, &with(Some(usize::MAX)));
            let prompt = ids(&expected(name)["prompt_ids"]);
            assert!(prompt.len() > 8, "{name}: {} positions", prompt.len());
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let same_order = !mode.contains("shuffled");
            let mut worst = 0.0f32;
            let mut wants = vec![];
            for (pos, &t) in prompt.iter().enumerate() {
                let want = logits(never.step(t, pos).unwrap());
                wants.push(want.clone());
                for (what, e, exact) in [
                    ("below a tile", &mut below_a_tile, same_order),
                    ("norm and rope there too", &mut rope, same_order),
                    ("always", &mut always, same_order && pos < 4),
                    (
                        "norm and rope there, always",
                        &mut rope_always,
                        same_order && pos < 4,
                    ),
                ] {
                    let got = logits(e.step(t, pos).unwrap());
                    let err = rel_err(&got, &want);
                    worst = worst.max(err);
                    assert!(
                        err < 1e-2 && (!exact || bits(&got) == bits(&want)),
                        "{name} ({mode}, {what}) pos {pos}: error {err:.2e}, exact: {exact}"
                    );
                }
            }
            eprintln!("{name} ({mode}): worst relative error {worst:.2e}");
            for (pos, &t) in prompt.iter().enumerate() {
                let rows = logits(by_rows_never.step(t, pos).unwrap());
                let got = logits(by_rows.step(t, pos).unwrap());
                if pos >= 4 {
                    // The same step from here, over K/V rows the other form rounded.
                    let e = rel_err(&got, &rows);
                    assert!(e < 1e-2, "{name} ({mode}, by rows) pos {pos}: {e:.2e}");
                } else if same_order {
                    // The specialisation is the per-head step's.
                    assert_eq!(
                        bits(&got),
                        bits(&wants[pos]),
                        "{name} ({mode}, by rows) pos {pos}"
                    );
                }
            }
            let n = prompt.len() as u64;
            assert_eq!(never.attn_in_o_launches(), 0, "{name} ({mode})");
            assert_eq!(below_a_tile.attn_in_o_launches(), 4, "{name} ({mode})");
            assert_eq!(always.attn_in_o_launches(), n, "{name} ({mode})");
            assert_eq!(rope_always.attn_in_o_launches(), n, "{name} ({mode})");
            assert_eq!(by_rows.attn_in_o_launches(), 4, "{name} ({mode})");
        }
    }
}

/// The QKV stage's programs roping their own half-head pairs and o_proj's programs scaling
/// the heads by their 1/rms (`MegakernelOptions::qkv_pairs`: `rmsnorm_qkv_rope_pairs` and
/// `attn_scale_head_residual` in the attention-inside-o_proj specialisation, no ticket):
/// the logits of the same specialisation with the heads finished in the QKV stage within
/// 1e-2 at every prompt position, and so in the plain step with `qkv_pairs_split`
/// (`attn_split_scaled`, three splits) against it without (the 1/rms applied after the rotation rounds otherwise, so
/// q and a new K row may differ by a bf16 rounding, and every later value with them), and
/// the K and V caches within 1e-2 (`kernel_ops` checks the V rows bit for bit), on every
/// committed checkpoint, stage by stage and under adversarial interleavings, with tiles of
/// 4 positions (so the later steps attend over several).
#[test]
fn qkv_pairs_compute_the_same_logits() {
    for name in CHECKPOINTS {
        let cfg = Checkpoint::load(&data_dir(name), false).unwrap().config;
        for (mode, opts) in modes() {
            let t = model::kernels::Tiles::for_config(&cfg);
            let with = |attn_in_o, qkv_pairs| MegakernelOptions {
                tiles: Some(model::kernels::Tiles {
                    attn_block_n: 4,
                    attn_splits: 3,
                    // A pair of rows a QKV program at least (mha_tok_v5's rule gives one).
                    qkv: model::kernels::Gemv {
                        bm: t.qkv.bm.max(2),
                        ..t.qkv
                    },
                    ..t.clone()
                }),
                attn_in_o,
                qkv_pairs: Some(qkv_pairs),
                attn_ahead: Some(false),
                ..opts.clone()
            };
            // The heads finished in the QKV stage, the same attention inside o_proj; and the
            // split attention (`attn_split_scaled`) against `attn_split`.
            let split = |pairs| MegakernelOptions {
                qkv_pairs_split: Some(pairs),
                ..with(Some(0), false)
            };
            for (what, plain_opts, pairs_opts, v) in [
                (
                    "inside o_proj",
                    with(Some(usize::MAX), false),
                    with(Some(usize::MAX), true),
                    Variant::AttnInO,
                ),
                ("split", split(false), split(true), Variant::Plain),
            ] {
                let mut plain = mega(name, Output::Logits, &plain_opts);
                let mut pairs = mega(name, Output::Logits, &pairs_opts);
                let bound = pairs.constexprs_for(v);
                let on = bound.contains(&("QKV_PAIRS", dsl_runtime::ConstVal::Bool(true)));
                assert!(on, "{name} ({what}): {bound:?}");
                let prompt = ids(&expected(name)["prompt_ids"]);
                for (pos, &t) in prompt.iter().enumerate() {
                    let want = logits(plain.step(t, pos).unwrap());
                    let err = rel_err(&logits(pairs.step(t, pos).unwrap()), &want);
                    assert!(
                        err < 1e-2,
                        "{name} ({mode}, {what}) pos {pos}: error {err:.2e}"
                    );
                }
                let ((k_want, v_want), (k_got, v_got)) =
                    (plain.kv_cache().unwrap(), pairs.kv_cache().unwrap());
                let f = |v: &[half::bf16]| v.iter().map(|x| x.to_f32()).collect::<Vec<_>>();
                for (cache, got, want) in [("K", &k_got, &k_want), ("V", &v_got, &v_want)] {
                    let err = rel_err(&f(got), &f(want));
                    assert!(
                        err < 1e-2,
                        "{name} ({mode}, {what}): the {cache} cache: error {err:.2e}"
                    );
                }
            }
        }
    }
}

/// `MegakernelEngine::run_steps_unread` (`tessera tune --launch-only`): steps launched back
/// to back, no token read back, chain their tokens on the device as decoding does: after n
/// of them the device holds the token n decode steps choose and the position after them,
/// and decoding goes on from there.
#[test]
fn steps_launched_back_to_back_chain_their_tokens() {
    let n = 5;
    let mut a = mega("tied_gqa2_v4", Output::Token, &MegakernelOptions::default());
    let mut want = vec![];
    a.decode(1, 0, n + 2, &mut |t| {
        want.push(t);
        Ok(true)
    })
    .unwrap();
    let mut b = mega("tied_gqa2_v4", Output::Token, &MegakernelOptions::default());
    b.run_steps_unread(1, 0, n).unwrap();
    assert_eq!(b.next_inputs().unwrap(), (want[n - 1], n));
    let mut more = vec![];
    b.decode(want[n - 1], n, 2, &mut |t| {
        more.push(t);
        Ok(true)
    })
    .unwrap();
    assert_eq!(more, want[n..]);
    assert!(b.run_steps_unread(1, 0, 1 << 30).is_err(), "past the cache");
}

/// `MegakernelOptions::tokens_per_readback`: tokens read back in batches of 2, 3 and 5 after
/// the first step's alone (the launches of a batch with no copy between them) are the
/// tokens read one at a time, over
/// a run no batch divides and over one the caller stops early; only the batches queued
/// ahead ran, and decoding goes on from where the caller stopped.
#[test]
fn tokens_read_back_in_batches_are_the_tokens_read_one_at_a_time() {
    let n = 11;
    let with = |per: usize| {
        let o = MegakernelOptions {
            tokens_per_readback: per,
            ..Default::default()
        };
        mega("tied_gqa2_v4", Output::Token, &o)
    };
    let mut want = vec![];
    let mut one = with(1);
    one.decode(1, 0, n, &mut |t| {
        want.push(t);
        Ok(true)
    })
    .unwrap();
    assert_eq!(one.launches(), n as u64);
    for per in [2, 3, 5] {
        let mut m = with(per);
        let mut got = vec![];
        let k = m
            .decode(1, 0, n, &mut |t| {
                got.push(t);
                Ok(true)
            })
            .unwrap();
        assert_eq!((k, &got), (n, &want), "{per} a readback");
        assert_eq!(m.launches(), n as u64, "{per} a readback");
        // Stopped at the fourth token: its batch and the next one were queued.
        let mut m = with(per);
        let mut got = vec![];
        let k = m
            .decode(1, 0, n, &mut |t| {
                got.push(t);
                Ok(got.len() < 4)
            })
            .unwrap();
        assert_eq!((k, &got[..]), (4, &want[..4]), "{per} a readback, stopped");
        assert_eq!(
            m.launches(),
            launched_when_stopped(per, n, 3) as u64,
            "{per} a readback, stopped"
        );
        let mut rest = vec![];
        m.decode(got[3], 4, n - 4, &mut |t| {
            rest.push(t);
            Ok(true)
        })
        .unwrap();
        assert_eq!(rest, want[4..], "{per} a readback, after the stop");
    }
}
