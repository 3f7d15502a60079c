//! On a GPU: every op of the decoder gives what the interpreter gives on the same inputs,
//! and the kernels engine decodes transformers' greedy tokens. Run on the device with
//! `cargo test -p model --test gpu_ops -- --ignored`; without a GPU they do not run.
//!
//! GPU and interpreter sum in different orders, so a bf16 output may differ by one
//! rounding: outputs are compared as max |Δ| / max |x| < 1e-2.
mod common;
use common::*;
use dsl_runtime::{bf16, Buffer, Device, Element, Launch};
use model::kernels::{attention, embedding, gemv, lm_head, mlp, rope, Tiles, NUM_WARPS};
use model::kernels_engine::{KernelOptions, KernelsEngine, Output};
use model::sampling::{Sampler, SplitMix64};
use model::{Checkpoint, Config, Engine, StepOutput};

const TOL: f32 = 1e-2;

fn rand_bf16(rng: &mut SplitMix64, n: usize, scale: f32) -> Vec<bf16> {
    (0..n)
        .map(|_| bf16::from_f32((rng.next_f64() as f32 * 2.0 - 1.0) * scale))
        .collect()
}

fn read<T: Element + Into<f64>>(b: &Buffer<T>) -> Vec<f32> {
    b.to_vec()
        .unwrap()
        .into_iter()
        .map(|v| v.into() as f32)
        .collect()
}

/// Runs every op of a layer plus the head once on `dev`, on inputs drawn from a fixed seed,
/// and returns each op's output by name.
fn run_ops(
    dev: &Device,
    cfg: &Config,
    pos: usize,
    max_seq: usize,
) -> Vec<(&'static str, Vec<f32>)> {
    let t = Tiles::for_config(cfg);
    let mut rng = SplitMix64::new(42);
    let (h, hd, inter, vocab) = (
        cfg.hidden_size,
        cfg.head_dim,
        cfg.intermediate_size,
        cfg.vocab_size,
    );
    let (nh, nkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
    let rows = cfg.q_dim() + 2 * cfg.kv_dim();
    let eps = cfg.rms_norm_eps as f32;
    let mut r = |n: usize, s: f32| dev.upload(&rand_bf16(&mut rng, n, s)).unwrap();
    let (embed, norm_w, qkv_w, qk_norm, o_w, gu_w, down_w, head_w) = (
        r(vocab * h, 1.0),
        r(h, 1.5),
        r(rows * h, 0.1),
        r(hd, 1.5),
        r(h * cfg.q_dim(), 0.05),
        r(2 * inter * h, 0.1),
        r(h * inter, 0.05),
        r(vocab * h, 0.1),
    );
    let (kc, vc) = (r(nkv * max_seq * hd, 2.0), r(nkv * max_seq * hd, 1.0)); // a random history
    let z16 = |n| dev.zeros::<bf16>(n).unwrap();
    let z32 = |n| dev.zeros::<f32>(n).unwrap();
    let grid = |n: usize| Launch::grid(n as u32).warps(NUM_WARPS);
    let (token, posb) = (
        dev.upload(&[(vocab / 2) as i32]).unwrap(),
        dev.upload(&[pos as i32]).unwrap(),
    );
    let rope = dev
        .upload(&model::reference::rope_table(
            &model::reference::rope_inv_freq(cfg),
            max_seq,
        ))
        .unwrap();
    let (x, qkv, q, attn, act) = (z32(h), z16(rows), z16(nh * hd), z16(nh * hd), z16(inter));
    let parts = nh * t.attn_splits;
    let (pm, pl, pa) = (z32(parts), z32(parts), z32(parts * hd));
    let blocks = t.lm_head.programs(vocab);
    let (logits, pmax, pidx, next) = (
        z32(vocab),
        z32(blocks),
        dev.zeros::<i32>(blocks).unwrap(),
        dev.zeros::<i32>(1).unwrap(),
    );

    let mut out = vec![];
    embedding::embedding::launch(
        dev,
        &grid(h.div_ceil(t.embed_block)),
        &embed,
        &token,
        &x,
        h as i32,
        t.embed_block,
        1,
    )
    .unwrap();
    out.push(("embedding", read(&x)));
    gemv::rmsnorm_gemv::launch(
        dev,
        &grid(t.qkv.programs(rows)),
        &x,
        &norm_w,
        &qkv_w,
        &qkv,
        rows as i32,
        h as i32,
        eps,
        t.qkv.bm,
        t.qkv.bk,
    )
    .unwrap();
    out.push(("rmsnorm_gemv", read(&qkv)));
    rope::qk_norm_rope::launch(
        dev,
        &grid(nh + nkv),
        &qkv,
        &qk_norm,
        &qk_norm,
        &rope,
        &posb,
        &q,
        &kc,
        &vc,
        nh as i32,
        nkv as i32,
        max_seq as i32,
        eps,
        hd,
    )
    .unwrap();
    out.push(("qk_norm_rope q", read(&q)));
    out.push(("qk_norm_rope k cache", read(&kc)));
    out.push(("qk_norm_rope v cache", read(&vc)));
    let split = Launch::grid((nh as u32, t.attn_splits as u32)).warps(NUM_WARPS);
    let scale = 1.0 / (hd as f32).sqrt();
    attention::attn_split::launch(
        dev,
        &split,
        &q,
        &kc,
        &vc,
        &posb,
        &pm,
        &pl,
        &pa,
        cfg.gqa_group() as i32,
        max_seq as i32,
        scale,
        hd,
        t.attn_block_n,
        t.attn_splits,
    )
    .unwrap();
    attention::attn_merge::launch(dev, &grid(nh), &pm, &pl, &pa, &attn, hd, t.attn_splits).unwrap();
    out.push(("attention", read(&attn)));
    gemv::gemv_residual::launch(
        dev,
        &grid(t.o_proj.programs(h)),
        &o_w,
        &attn,
        &x,
        h as i32,
        cfg.q_dim() as i32,
        t.o_proj.bm,
        t.o_proj.bk,
    )
    .unwrap();
    out.push(("o_proj + residual", read(&x)));
    mlp::rmsnorm_gate_up_silu::launch(
        dev,
        &grid(t.gate_up.programs(inter)),
        &x,
        &norm_w,
        &gu_w,
        &act,
        inter as i32,
        h as i32,
        eps,
        t.gate_up.bm,
        t.gate_up.bk,
    )
    .unwrap();
    out.push(("gate/up silu", read(&act)));
    gemv::gemv_residual::launch(
        dev,
        &grid(t.down.programs(h)),
        &down_w,
        &act,
        &x,
        h as i32,
        inter as i32,
        t.down.bm,
        t.down.bk,
    )
    .unwrap();
    out.push(("down + residual", read(&x)));
    lm_head::lm_head_argmax::launch(
        dev,
        &grid(blocks),
        &x,
        &norm_w,
        &head_w,
        &logits,
        &pmax,
        &pidx,
        &posb,
        &dev.zeros::<i32>(1).unwrap(), // seed
        &z32(1),                       // 1 / temperature: 0 = greedy
        vocab as i32,
        h as i32,
        eps,
        t.lm_head.bm,
        t.lm_head.bk,
        1,
    )
    .unwrap();
    lm_head::argmax_merge::launch(
        dev,
        &grid(1),
        &pmax,
        &pidx,
        &next,
        &dev.zeros::<i32>(1).unwrap(),
        &dev.zeros::<i32>(1).unwrap(),
        blocks as i32,
        t.argmax_block,
    )
    .unwrap();
    out.push(("lm_head logits", read(&logits)));
    out.push(("argmax", read(&next)));
    out
}

fn tiny() -> Config {
    Config {
        vocab_size: 997,
        hidden_size: 64,
        intermediate_size: 160,
        num_hidden_layers: 1,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim: 32,
        ..model::kernels::qwen3_0_6b()
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_ops_equal_interpreter() {
    let (g, c) = (gpu(), Device::interpreter());
    for (cfg, pos, max_seq) in [(tiny(), 40, 64), (model::kernels::qwen3_0_6b(), 300, 512)] {
        let (a, b) = (
            run_ops(&g, &cfg, pos, max_seq),
            run_ops(&c, &cfg, pos, max_seq),
        );
        for ((name, x), (_, y)) in a.iter().zip(&b) {
            if *name == "argmax" {
                assert_eq!(x, y, "hidden {}: argmax", cfg.hidden_size);
                continue;
            }
            let e = rel_err(x, y);
            eprintln!(
                "hidden {} {name}: GPU vs interpreter {e:.2e}",
                cfg.hidden_size
            );
            assert!(
                e < TOL,
                "hidden {} {name}: GPU vs interpreter {e}",
                cfg.hidden_size
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_greedy_decode_matches_transformers() {
    for name in CHECKPOINTS {
        let ck = Checkpoint::load(&data_dir(name), false).unwrap();
        let exp = expected(name);
        let (prompt, want) = (ids(&exp["prompt_ids"]), ids(&exp["greedy_ids"]));
        let margins: Vec<f64> = exp["margins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_f64().unwrap())
            .collect();
        let decisive = margins
            .iter()
            .position(|&m| m <= 0.05)
            .unwrap_or(margins.len());
        let mut k =
            KernelsEngine::new(ck.config, &ck.weights, gpu(), KernelOptions::default()).unwrap();
        let g = model::generate::generate(
            &mut k,
            &prompt,
            decisive,
            &mut Sampler::new(Default::default()),
            &[],
            &mut |_| Ok(()),
        )
        .unwrap();
        assert_eq!(
            g.generated_ids,
            want[..decisive],
            "{name}: greedy ids differ on the GPU"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_engine_logits_equal_interpreter() {
    let name = "untied_gqa4_v5";
    let ck = Checkpoint::load(&data_dir(name), false).unwrap();
    let opts = || KernelOptions {
        output: Output::Logits,
        ..Default::default()
    };
    let mut a = KernelsEngine::new(ck.config.clone(), &ck.weights, gpu(), opts()).unwrap();
    let mut b = KernelsEngine::new(
        ck.config.clone(),
        &ck.weights,
        Device::interpreter(),
        opts(),
    )
    .unwrap();
    for (pos, &t) in ids(&expected(name)["prompt_ids"]).iter().enumerate() {
        let (StepOutput::Logits(x), StepOutput::Logits(y)) =
            (a.step(t, pos).unwrap(), b.step(t, pos).unwrap())
        else {
            panic!("logits asked")
        };
        let e = rel_err(&x, &y);
        assert!(e < 3e-2, "pos {pos}: GPU vs interpreter {e}");
    }
}

/// A decode step of a random Qwen3-0.6B (28 layers, vocab 151936) as 7 launches per layer
/// plus 3: the one-launch-per-op baseline the megakernel is measured against. Prints
/// ms/token and the bandwidth it implies (weight bytes read per step / step time).
#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_step_time_qwen3_0_6b_shaped() {
    let cfg = model::kernels::qwen3_0_6b();
    let w = model::embedded::weights(&cfg);
    let dev = gpu();
    let mut k = KernelsEngine::new(
        cfg.clone(),
        &w,
        dev.clone(),
        KernelOptions {
            max_seq: Some(1024),
            ..Default::default()
        },
    )
    .unwrap();
    let mut tok = 1;
    for pos in 0..4 {
        // Compiles every kernel (NVRTC, then the disk cache) and warms up.
        tok = match k.step(tok, pos).unwrap() {
            StepOutput::Token(t) => t,
            StepOutput::Logits(_) => unreachable!(),
        };
    }
    let n = 64;
    let start = std::time::Instant::now();
    for pos in 4..4 + n {
        tok = match k.step(tok, pos).unwrap() {
            StepOutput::Token(t) => t,
            StepOutput::Logits(_) => unreachable!(),
        };
    }
    let ms = start.elapsed().as_secs_f64() * 1e3 / n as f64;
    let layer = cfg.hidden_size * (cfg.q_dim() + 2 * cfg.kv_dim())
        + cfg.hidden_size * cfg.q_dim()
        + 3 * cfg.hidden_size * cfg.intermediate_size;
    let bytes = 2.0 * (cfg.num_hidden_layers * layer + cfg.vocab_size * cfg.hidden_size) as f64;
    eprintln!(
        "{}: Qwen3-0.6B-shaped step, one launch per op: {ms:.3} ms/token, {:.0} GB/s of weights",
        dev.describe(),
        bytes / (ms * 1e-3) / 1e9
    );
}
