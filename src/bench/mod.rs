//! `tessera bench`: the megakernel decoder's speed against the memory-bandwidth floor.
//!
//! At decode every step reads all the weights once and the KV cache up to the current
//! position, so the floor for one token is (weight bytes + KV bytes) / read bandwidth. The
//! bandwidth is measured on the same GPU in the same run, by [`stream_sum`] (a DSL kernel
//! that only reads: 1 GiB of bf16, one f32 out per 32 KiB read). For each context position
//! the KV cache is declared filled up to it (the contents do not change the time), then
//! 128 tokens are decoded greedily as `generate` runs them: one launch and one 4-byte read
//! back per token (the step hands its token and position to the next on the device).
//!
//! The kernels engine (the same ops, one launch each) is timed the same way at the same
//! contexts, after the megakernel engine is dropped (one model's weights on the GPU at a
//! time), so the table says what one launch per token buys.
//!
//! Also measured: NVRTC compile of the decode megakernel, cold and from the disk cache, and
//! the time to the first token of a fresh engine (compile and module load included).
//! `--peers peers.json` (written by `scripts/hf_peers.py` on the same GPU) adds transformers'
//! eager and static-cache + torch.compile ms/token at each context; an older peers.json
//! (`hf_reference.py`'s, one short context) fills the context-1 row only.
pub mod plot;
pub mod tune;

use crate::runtime::prelude::*;
use model::device_model::{kv_bytes_per_position, weight_bytes_per_token};
use model::kernels_engine::{KernelOptions, KernelsEngine, Output};
use model::megakernel_engine::{decode_step, MegakernelEngine, MegakernelOptions};
use model::{Config, Engine, ModelError, StepOutput, Weights};
use serde::Serialize;
use std::time::Instant;

/// Sums a bf16 buffer: program p reads `STEPS` tiles of `BLOCK` elements from
/// p · BLOCK · STEPS on and writes one f32. Nothing else touches memory, so its time is
/// the device's read bandwidth.
#[kernel]
pub fn stream_sum(
    x: Ptr<bf16>,
    out: Ptr<f32>,
    n: i32,
    #[constexpr] BLOCK: usize,
    #[constexpr] STEPS: usize,
) {
    let base = program_id(0) * (BLOCK * STEPS);
    let mut acc = zeros([BLOCK], f32);
    for s in 0..STEPS {
        let offs = base + s * BLOCK + arange(0, BLOCK);
        acc += load(x + offs, offs < n, 0.0).to(f32);
    }
    store(out + program_id(0), sum(acc, 0));
}

/// What the bench measures and how.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// Context positions to decode from.
    pub positions: Vec<usize>,
    /// Tokens decoded per position.
    pub tokens: usize,
    /// Bytes the bandwidth probe reads.
    pub probe_bytes: usize,
    /// Also time the kernels engine (one launch per op) at the same contexts.
    pub kernels_engine: bool,
    /// Prompt lengths whose time to first token (prefill) is measured.
    pub prompts: Vec<usize>,
    /// Timed prefills per prompt length (the median is reported), after one warm-up.
    pub prefill_repeats: usize,
    /// Prefill chunk length; None: the engine's default.
    pub prefill_chunk: Option<usize>,
    /// Prompts up to this length are also fed one decode step per token (what `generate`
    /// did before prefill), timed twice, beside the prefill: 0, none.
    pub stepwise_max: usize,
}

impl Default for BenchPlan {
    fn default() -> Self {
        BenchPlan {
            positions: vec![1, 512, 2048, 8192],
            tokens: 128,
            probe_bytes: 1 << 30,
            kernels_engine: true,
            prompts: vec![128, 512, 2048, 8192],
            prefill_repeats: 5,
            prefill_chunk: None,
            stepwise_max: 0,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub context: usize,
    pub ms_per_token: f64,
    pub tokens_per_s: f64,
    /// Weight + KV bytes per token (KV averaged over the decoded positions).
    pub bytes_per_token: f64,
    pub floor_ms: Option<f64>,
    /// ms_per_token / floor_ms.
    pub x_floor: Option<f64>,
    /// 100 · floor_ms / ms_per_token.
    pub pct_of_floor: Option<f64>,
    /// Transformers (from --peers) at this context: see [`peer_ms`].
    pub hf_eager_ms: Option<f64>,
    pub hf_compiled_ms: Option<f64>,
    /// The kernels engine (one launch per op) at this context, when measured.
    pub kernels_ms_per_token: Option<f64>,
    /// kernels_ms_per_token / ms_per_token: what one launch per token buys.
    pub x_kernels: Option<f64>,
}

/// Time to first token of one prompt length: prefill of the prompt (every layer over its
/// rows, then the lm_head and argmax of its last row) until the first token is on the host.
#[derive(Debug, Clone, Serialize)]
pub struct PrefillRow {
    pub prompt_tokens: usize,
    /// Median over the timed runs.
    pub ttft_ms: f64,
    pub runs_ms: Vec<f64>,
    pub prompt_tokens_per_s: f64,
    /// Multiply-adds × 2 of the prompt: every layer's GEMMs over all rows, causal attention
    /// (q·kᵀ and p·v over the visible keys), the lm_head of the last row.
    pub flops: f64,
    pub tflops: f64,
    /// flops / the prefill GEMM's measured TFLOP/s (`Report::gemm_tflops`).
    pub floor_ms: Option<f64>,
    pub x_floor: Option<f64>,
    /// Transformers' prefill of the same length (from --peers: `prefill` entries of
    /// scripts/hf_peers.py): one forward over the prompt, bf16, sdpa, median.
    pub hf_ms: Option<f64>,
    /// ttft_ms / hf_ms.
    pub x_hf: Option<f64>,
    /// The same prompt fed one decode step per token (`--stepwise-max`): the median of 2
    /// runs, and ttft_ms over it.
    pub stepwise_ms: Option<f64>,
    pub x_stepwise: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub model: String,
    pub device: String,
    pub commit: Option<String>,
    pub layers: usize,
    pub hidden: usize,
    pub vocab: usize,
    pub weight_bytes_per_token: usize,
    pub kv_bytes_per_position: usize,
    pub read_bandwidth_gbps: Option<f64>,
    pub read_bandwidth_method: String,
    pub nvrtc_cold_ms: Option<f64>,
    pub nvrtc_warm_ms: Option<f64>,
    pub megakernel_source_lines: Option<usize>,
    pub time_to_first_token_ms: f64,
    pub time_to_first_token_note: String,
    pub rows: Vec<Row>,
    /// The prefill GEMM (`gemm_nt`, the engine's GPU tiles) at 2048 x 4096 x 4096, best of
    /// 5: the TFLOP/s the prefill floor divides by.
    pub gemm_tflops: Option<f64>,
    pub prefill_chunk: usize,
    pub prefill_rows: Vec<PrefillRow>,
    pub skipped: Vec<String>,
    pub peers: Option<serde_json::Value>,
}

fn err(msg: impl std::fmt::Display) -> ModelError {
    ModelError::Engine {
        engine: "bench".into(),
        msg: msg.to_string(),
    }
}

/// Read bandwidth in GB/s: [`stream_sum`] over `bytes`, best of 5 after 2 warm-ups.
pub fn read_bandwidth(dev: &Device, bytes: usize) -> Result<f64, ModelError> {
    const BLOCK: usize = 2048;
    const STEPS: usize = 8;
    let n = bytes / 2;
    if n > i32::MAX as usize {
        return Err(err("the bandwidth probe's buffer exceeds i32 offsets"));
    }
    let x = dev.zeros::<bf16>(n).map_err(err)?;
    let programs = n.div_ceil(BLOCK * STEPS);
    let out = dev.zeros::<f32>(programs).map_err(err)?;
    let launch = Launch::grid(programs as u32).warps(8);
    let run = || stream_sum::launch(dev, &launch, &x, &out, n as i32, BLOCK, STEPS);
    for _ in 0..2 {
        run().map_err(err)?;
    }
    dev.synchronize().map_err(err)?;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        run().map_err(err)?;
        dev.synchronize().map_err(err)?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((n * 2) as f64 / best / 1e9)
}

/// An engine the bench can start at any context.
trait Timed: Engine {
    fn assume_cached(&mut self, n: usize) -> Result<(), ModelError>;
}
impl Timed for MegakernelEngine {
    fn assume_cached(&mut self, n: usize) -> Result<(), ModelError> {
        MegakernelEngine::assume_cached(self, n)
    }
}
impl Timed for KernelsEngine {
    fn assume_cached(&mut self, n: usize) -> Result<(), ModelError> {
        KernelsEngine::assume_cached(self, n)
    }
}

/// ms per token of `tokens` greedy steps from context `p` (after 3 warm-up steps there), as
/// `generate` runs them; `tok` carries the last token from call to call.
fn ms_per_token(
    e: &mut dyn Timed,
    p: usize,
    tokens: usize,
    tok: &mut u32,
) -> Result<f64, ModelError> {
    e.assume_cached(p)?;
    *tok = greedy_steps(e, *tok, p, 3)?;
    e.assume_cached(p)?;
    let t = Instant::now();
    *tok = greedy_steps(e, *tok, p, tokens)?;
    Ok(t.elapsed().as_secs_f64() * 1e3 / tokens as f64)
}

/// `n` steps from `tok` at `p` as `generate` runs them (`Engine::decode`, every token read
/// back); the last token chosen.
pub fn greedy_steps(e: &mut dyn Engine, tok: u32, p: usize, n: usize) -> Result<u32, ModelError> {
    let mut last = tok;
    e.decode(tok, p, n, &mut |t| {
        last = t;
        Ok(true)
    })?;
    Ok(last)
}

/// The token of a step: chosen on the device, or the argmax of its logits.
pub fn token_of(out: StepOutput) -> u32 {
    match out {
        StepOutput::Token(t) => t,
        StepOutput::Logits(l) => model::sampling::argmax(&l),
    }
}

/// Runs the bench on `dev` and returns the report (the caller prints it).
pub fn run(
    model_name: &str,
    cfg: Config,
    weights: &Weights,
    dev: Device,
    plan: &BenchPlan,
    peers: Option<serde_json::Value>,
) -> Result<Report, ModelError> {
    let gpu = dev.is_cuda();
    let max_pos = plan.positions.iter().copied().max().unwrap_or(1);
    let mut skipped = vec![];
    let max_prompt = plan.prompts.iter().copied().max().unwrap_or(1);
    let max_seq = (max_pos + plan.tokens + 1)
        .max(max_prompt)
        .min(cfg.max_position_embeddings);

    // Whether the first token can find a compiled megakernel on disk.
    let cache_entries = dsl_runtime::nvrtc::cache_dir()
        .and_then(|d| std::fs::read_dir(d).ok())
        .map_or(0, |d| d.count());

    // A fresh engine's first token: NVRTC (or the disk cache), module load, one step.
    let opts = MegakernelOptions {
        max_seq: Some(max_seq),
        output: Output::Token,
        ..Default::default()
    };
    let mut engine = MegakernelEngine::new(cfg.clone(), weights, dev.clone(), opts)?;
    let t = Instant::now();
    let mut tok = token_of(engine.step(0, 0)?);
    let ttft_ms = t.elapsed().as_secs_f64() * 1e3;

    // Compile times of the same source, outside the engine.
    let (mut nvrtc_cold, mut nvrtc_warm, mut lines) = (None, None, None);
    if let Some(arch) = dev.arch() {
        let src = decode_step::MEGAKERNEL
            .cuda_source(engine.constexprs(), engine.mega_options())
            .map_err(err)?;
        lines = Some(src.code.lines().count());
        let t = Instant::now();
        dsl_runtime::nvrtc::compile(&src.code, arch, false).map_err(err)?;
        nvrtc_cold = Some(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let c = dsl_runtime::nvrtc::compile(&src.code, arch, true).map_err(err)?;
        if c.from_disk_cache {
            nvrtc_warm = Some(t.elapsed().as_secs_f64() * 1e3);
        }
    }

    // Every specialisation of the step loaded, as `generate` and `serve` start (the step at
    // position 0 loaded one; a decode row crossing into another must not time its load).
    engine.compile()?;

    let bw = if gpu {
        Some(read_bandwidth(&dev, plan.probe_bytes)?)
    } else {
        None
    };
    let wbytes = weight_bytes_per_token(&cfg);
    let per_pos = kv_bytes_per_position(&cfg);

    let mut rows = vec![];
    for &p in &plan.positions {
        if p + plan.tokens + 1 > engine.max_context() {
            skipped.push(format!(
                "context {p}: needs {} positions, the model allows {}",
                p + plan.tokens + 1,
                cfg.max_position_embeddings
            ));
            continue;
        }
        let ms = ms_per_token(&mut engine, p, plan.tokens, &mut tok)?;
        // Step i reads positions 0..=p+i: on average p + (tokens + 1) / 2 positions.
        let kv = per_pos as f64 * (p as f64 + (plan.tokens as f64 + 1.0) / 2.0);
        let bytes = wbytes as f64 + kv;
        let floor_ms = bw.map(|g| bytes / (g * 1e9) * 1e3);
        let (hf_eager_ms, hf_compiled_ms) = peer_ms(peers.as_ref(), p);
        rows.push(Row {
            context: p,
            ms_per_token: ms,
            tokens_per_s: 1e3 / ms,
            bytes_per_token: bytes,
            floor_ms,
            x_floor: floor_ms.map(|f| ms / f),
            pct_of_floor: floor_ms.map(|f| 100.0 * f / ms),
            hf_eager_ms,
            hf_compiled_ms,
            kernels_ms_per_token: None,
            x_kernels: None,
        });
    }
    // Time to first token per prompt length, on the same engine.
    if let Some(chunk) = plan.prefill_chunk {
        let t = model::kernels::prefill::PrefillTiles {
            chunk,
            ..*engine.prefill_tiles()
        };
        engine.set_prefill_tiles(t)?;
    }
    let prefill_chunk = engine.prefill_tiles().chunk;
    let gemm_tflops = if gpu {
        Some(gemm_tflops(&dev, engine.prefill_tiles())?)
    } else {
        None
    };
    let mut prefill_rows = vec![];
    for &n in &plan.prompts {
        if n < 2 || n > engine.max_context() {
            skipped.push(format!(
                "prompt of {n} tokens: {}",
                if n < 2 {
                    "prefill needs at least 2 tokens".to_string()
                } else {
                    format!("the KV cache holds {} positions", engine.max_context())
                }
            ));
            continue;
        }
        let runs = time_prefill(&mut engine, &cfg, n, plan.prefill_repeats.max(1))?;
        let ttft_ms = median(&runs);
        let flops = prefill_flops(&cfg, n);
        let floor_ms = gemm_tflops.map(|t| flops / (t * 1e12) * 1e3);
        let hf_ms = peer_prefill_ms(peers.as_ref(), n);
        let stepwise_ms = if n <= plan.stepwise_max {
            Some(median(&time_stepwise(&mut engine, &cfg, n, 2)?))
        } else {
            None
        };
        prefill_rows.push(PrefillRow {
            prompt_tokens: n,
            ttft_ms,
            runs_ms: runs,
            prompt_tokens_per_s: n as f64 * 1e3 / ttft_ms,
            flops,
            tflops: flops / (ttft_ms * 1e-3) / 1e12,
            floor_ms,
            x_floor: floor_ms.map(|f| ttft_ms / f),
            hf_ms,
            x_hf: hf_ms.map(|h| ttft_ms / h),
            stepwise_ms,
            x_stepwise: stepwise_ms.map(|s| ttft_ms / s),
        });
    }

    if plan.kernels_engine && !rows.is_empty() {
        drop(engine);
        let opts = KernelOptions {
            max_seq: Some(max_seq),
            output: Output::Token,
            tiles: None,
        };
        let mut kernels = KernelsEngine::new(cfg.clone(), weights, dev.clone(), opts)?;
        for row in &mut rows {
            let ms = ms_per_token(&mut kernels, row.context, plan.tokens, &mut tok)?;
            row.kernels_ms_per_token = Some(ms);
            row.x_kernels = Some(ms / row.ms_per_token);
        }
    }
    let ttft_note = if gpu && cache_entries == 0 {
        "a fresh engine's first step, 1-token prompt: cold NVRTC compile (empty disk cache) + module load + one launch".into()
    } else if gpu {
        format!("a fresh engine's first step, 1-token prompt: NVRTC or the disk cache ({cache_entries} files there at start) + module load + one launch")
    } else {
        "interpreter: no compile; timings are not GPU timings".into()
    };
    Ok(Report {
        model: model_name.into(),
        device: dev.describe(),
        commit: option_env!("TESSERA_COMMIT").map(String::from),
        layers: cfg.num_hidden_layers,
        hidden: cfg.hidden_size,
        vocab: cfg.vocab_size,
        weight_bytes_per_token: wbytes,
        kv_bytes_per_position: per_pos,
        read_bandwidth_gbps: bw,
        read_bandwidth_method: format!(
            "stream_sum (DSL kernel, read-only) over {} MiB of bf16, best of 5",
            plan.probe_bytes >> 20
        ),
        nvrtc_cold_ms: nvrtc_cold,
        nvrtc_warm_ms: nvrtc_warm,
        megakernel_source_lines: lines,
        time_to_first_token_ms: ttft_ms,
        time_to_first_token_note: ttft_note,
        rows,
        gemm_tflops,
        prefill_chunk,
        prefill_rows,
        skipped,
        peers,
    })
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Prompt ids for the prefill bench: a fixed pseudo-random sequence in the vocabulary.
pub fn bench_prompt(vocab: usize, n: usize) -> Vec<u32> {
    let mut rng = model::sampling::SplitMix64::new(0x5EED_7E55);
    (0..n)
        .map(|_| (rng.next_f64() * vocab as f64) as u32 % vocab as u32)
        .collect()
}

/// ms from the start of a prefill of `n` tokens at position 0 to its first token on the
/// host, `repeats` times after one warm-up (which compiles what the length needs).
fn time_prefill(
    e: &mut MegakernelEngine,
    cfg: &Config,
    n: usize,
    repeats: usize,
) -> Result<Vec<f64>, ModelError> {
    let prompt = bench_prompt(cfg.vocab_size, n);
    token_of(e.prefill(&prompt, 0)?);
    (0..repeats)
        .map(|_| {
            let t = Instant::now();
            token_of(e.prefill(&prompt, 0)?);
            Ok(t.elapsed().as_secs_f64() * 1e3)
        })
        .collect()
}

/// The same as [`time_prefill`] with the prompt fed one decode step per token, the way
/// `generate` fed prompts before prefill (no warm-up: the step is already compiled).
fn time_stepwise(
    e: &mut MegakernelEngine,
    cfg: &Config,
    n: usize,
    repeats: usize,
) -> Result<Vec<f64>, ModelError> {
    let prompt = bench_prompt(cfg.vocab_size, n);
    (0..repeats)
        .map(|_| {
            let t = Instant::now();
            for (pos, &tok) in prompt.iter().enumerate() {
                token_of(e.step(tok, pos)?);
            }
            Ok(t.elapsed().as_secs_f64() * 1e3)
        })
        .collect()
}

/// 2 × the multiply-adds of a prefill of `n` tokens: the layers' GEMMs over every row,
/// causal attention over the visible keys (q·kᵀ and p·v: n(n+1)/2 pairs per head), and the
/// lm_head of the last row.
pub fn prefill_flops(cfg: &Config, n: usize) -> f64 {
    let (h, inter) = (cfg.hidden_size as f64, cfg.intermediate_size as f64);
    let (q, kv) = (cfg.q_dim() as f64, cfg.kv_dim() as f64);
    let n_f = n as f64;
    let gemm = n_f * (h * (q + 2.0 * kv) + q * h + 3.0 * h * inter);
    let attn = 2.0 * cfg.num_attention_heads as f64 * cfg.head_dim as f64 * n_f * (n_f + 1.0) / 2.0;
    2.0 * (cfg.num_hidden_layers as f64 * (gemm + attn) + cfg.vocab_size as f64 * h)
}

/// TFLOP/s of the prefill GEMM (`gemm_nt` with the engine's tiles) at 2048 x 4096 x 4096,
/// best of 5 after 2 warm-ups: the rate the prefill floor assumes for all of its FLOPs.
pub fn gemm_tflops(
    dev: &Device,
    t: &model::kernels::prefill::PrefillTiles,
) -> Result<f64, ModelError> {
    use model::kernels::prefill::gemm_nt;
    let (m, n, k) = (2048usize, 4096usize, 4096usize);
    let x = dev.zeros::<bf16>(m * k).map_err(err)?;
    let w = dev.zeros::<bf16>(n * k).map_err(err)?;
    let y = dev.zeros::<bf16>(m * n).map_err(err)?;
    let launch = Launch::grid((m.div_ceil(t.gemm_bm) * n.div_ceil(t.gemm_bn)) as u32)
        .warps(t.gemm_warps)
        .stages(t.gemm_stages);
    let run = || {
        gemm_nt::launch(
            dev, &launch, &x, &w, &y, m as i32, n as i32, k as i32, t.gemm_bm, t.gemm_bn,
            t.gemm_bk, t.group_m,
        )
    };
    for _ in 0..2 {
        run().map_err(err)?;
    }
    dev.synchronize().map_err(err)?;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let s = Instant::now();
        run().map_err(err)?;
        dev.synchronize().map_err(err)?;
        best = best.min(s.elapsed().as_secs_f64());
    }
    Ok(2.0 * (m * n * k) as f64 / best / 1e12)
}

/// Transformers' prefill ms for a prompt of `n` tokens from a peers.json
/// (`prefill: [{prompt_tokens, ms, ..}]`, scripts/hf_peers.py).
pub fn peer_prefill_ms(peers: Option<&serde_json::Value>, n: usize) -> Option<f64> {
    peers?["prefill"]
        .as_array()?
        .iter()
        .find(|e| e["prompt_tokens"].as_u64() == Some(n as u64))?["ms"]
        .as_f64()
}

/// Transformers' (eager, compiled) ms/token at `context` from a peers.json. The format of
/// `scripts/hf_peers.py` has `contexts: [{context, eager_ms, compiled_ms, ..}]`: the entry
/// with this context. The older one (`hf_reference.py`) has only top-level
/// `hf_eager_ms_per_token` and `hf_compiled_static_ms_per_token`, timed after a 12-token
/// prompt: shown at context 1 only.
pub fn peer_ms(peers: Option<&serde_json::Value>, context: usize) -> (Option<f64>, Option<f64>) {
    let Some(p) = peers else {
        return (None, None);
    };
    match p["contexts"].as_array() {
        Some(entries) => entries
            .iter()
            .find(|e| e["context"].as_u64() == Some(context as u64))
            .map_or((None, None), |e| {
                (e["eager_ms"].as_f64(), e["compiled_ms"].as_f64())
            }),
        None if context <= 1 => (
            p["hf_eager_ms_per_token"].as_f64(),
            p["hf_compiled_static_ms_per_token"].as_f64(),
        ),
        None => (None, None),
    }
}

/// The lines under the table that say where the HF columns come from (empty without peers).
pub fn peers_note(peers: Option<&serde_json::Value>) -> String {
    let Some(p) = peers else {
        return String::new();
    };
    let Some(entries) = p["contexts"].as_array() else {
        return "\nHF columns: transformers on the same GPU (hf_reference.py), at a 12-token prompt + 128 tokens, so shown at context 1 only.\n".into();
    };
    let steps = p["steps"].as_u64().map_or("N".into(), |n| n.to_string());
    let versions = match (p["transformers"].as_str(), p["torch"].as_str()) {
        (Some(t), Some(torch)) => format!("transformers {t}, torch {torch}"),
        _ => "transformers".into(),
    };
    let dtype = p["dtype"]
        .as_str()
        .unwrap_or("bf16")
        .trim_start_matches("torch.");
    let attn = p["attn_implementation"].as_str().unwrap_or("sdpa");
    let mut s = format!(
        "\nHF columns: {versions} on the same GPU (scripts/hf_peers.py, {dtype}, {attn}): greedy decode of {steps} tokens after a context of that many positions, median ms/token; eager = DynamicCache, compiled = StaticCache + torch.compile(mode=\"reduce-overhead\") (CUDA graphs).\n"
    );
    for e in entries {
        for (key, name) in [("eager_error", "eager"), ("compiled_error", "compiled")] {
            if let Some(msg) = e[key].as_str() {
                let short: String = msg.chars().take(160).collect();
                let ctx = e["context"].as_u64().map_or("?".into(), |c| c.to_string());
                s += &format!("HF {name} at context {ctx}: {short}\n");
            }
        }
    }
    s
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".into(), |x| format!("{x:.digits$}"))
}

/// The report as a table, for stdout.
pub fn table(r: &Report) -> String {
    let mut s = String::new();
    s += &format!(
        "tessera bench: {} ({} layers, hidden {}, vocab {}) on {}\n",
        r.model, r.layers, r.hidden, r.vocab, r.device
    );
    s += &format!(
        "weights read per token: {:.1} MB; KV cache: {:.1} KiB per position\n",
        r.weight_bytes_per_token as f64 / 1e6,
        r.kv_bytes_per_position as f64 / 1024.0
    );
    s += &match r.read_bandwidth_gbps {
        Some(g) => format!(
            "read bandwidth: {g:.0} GB/s ({})\n",
            r.read_bandwidth_method
        ),
        None => "read bandwidth: not measured (no GPU), so no floor\n".into(),
    };
    s += &format!(
        "NVRTC, decode megakernel ({} lines of CUDA C): cold {} ms, warm (disk cache) {} ms\n",
        r.megakernel_source_lines
            .map_or("—".into(), |n| n.to_string()),
        opt(r.nvrtc_cold_ms, 0),
        opt(r.nvrtc_warm_ms, 1)
    );
    s += &format!(
        "time to first token: {:.1} ms ({})\n",
        r.time_to_first_token_ms, r.time_to_first_token_note
    );
    s += "floor = (weight bytes + KV bytes read per token) / read bandwidth\n\n";
    s += "kernels = the same ops, one launch each (`--engine kernels`); × = its ms over the megakernel's\n\n";
    s += "| context | ms/token | tokens/s | floor ms | × floor | % of floor | kernels ms | × kernels | HF eager ms | HF compiled ms |\n";
    s += "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for row in &r.rows {
        s += &format!(
            "| {} | {:.3} | {:.1} | {} | {} | {} | {} | {} | {} | {} |\n",
            row.context,
            row.ms_per_token,
            row.tokens_per_s,
            opt(row.floor_ms, 3),
            opt(row.x_floor, 2),
            opt(row.pct_of_floor, 1),
            opt(row.kernels_ms_per_token, 3),
            opt(row.x_kernels, 2),
            opt(row.hf_eager_ms, 3),
            opt(row.hf_compiled_ms, 3),
        );
    }
    s += &peers_note(r.peers.as_ref());
    if !r.prefill_rows.is_empty() {
        s += &format!(
            "\nTime to first token: prefill of a prompt (chunks of {} tokens) until its first token is on the host, median of {} runs.\n",
            r.prefill_chunk,
            r.prefill_rows[0].runs_ms.len()
        );
        s += &match r.gemm_tflops {
            Some(t) => format!("floor = prefill FLOPs / {t:.0} TFLOP/s (the prefill GEMM, gemm_nt, at 2048x4096x4096, best of 5)\n"),
            None => "floor: not measured (no GPU)\n".into(),
        };
        s += "\n| prompt tokens | TTFT ms | prompt tokens/s | TFLOP/s | floor ms | × floor | HF prefill ms | × HF | step by step ms | × step by step |\n";
        s += "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        for p in &r.prefill_rows {
            s += &format!(
                "| {} | {:.2} | {:.0} | {:.1} | {} | {} | {} | {} | {} | {} |\n",
                p.prompt_tokens,
                p.ttft_ms,
                p.prompt_tokens_per_s,
                p.tflops,
                opt(p.floor_ms, 2),
                opt(p.x_floor, 2),
                opt(p.hf_ms, 2),
                opt(p.x_hf, 2),
                opt(p.stepwise_ms, 1),
                opt(p.x_stepwise, 4),
            );
        }
        if let Some(p) = r.peers.as_ref().and_then(|p| p["prefill_note"].as_str()) {
            s += &format!("HF prefill: {p}\n");
        }
    }
    for k in &r.skipped {
        s += &format!("skipped: {k}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn peers_by_context_from_hf_peers() {
        let p = json!({
            "torch": "2.11.0+cu130", "transformers": "4.57.1", "gpu": "NVIDIA H200", "steps": 128,
            "hf_eager_ms_per_token": 25.1, "hf_compiled_static_ms_per_token": 6.2,
            "contexts": [
                {"context": 1, "eager_ms": 25.1, "compiled_ms": 6.2, "eager_error": null, "compiled_error": null},
                {"context": 512, "eager_ms": 25.9, "compiled_ms": null, "eager_error": null,
                 "compiled_error": "OutOfMemoryError: CUDA out of memory"},
            ]
        });
        assert_eq!(peer_ms(Some(&p), 1), (Some(25.1), Some(6.2)));
        assert_eq!(peer_ms(Some(&p), 512), (Some(25.9), None));
        // A context the peers did not measure: no figures (not the top-level ones).
        assert_eq!(peer_ms(Some(&p), 2048), (None, None));
        let note = peers_note(Some(&p));
        assert!(note.contains("scripts/hf_peers.py"), "{note}");
        assert!(note.contains("128 tokens after a context"), "{note}");
        assert!(note.contains("transformers 4.57.1"), "{note}");
        assert!(
            note.contains("HF compiled at context 512: OutOfMemoryError"),
            "{note}"
        );
        assert!(!note.contains("HF eager at"), "{note}");
    }

    #[test]
    fn prefill_peers_by_prompt_length() {
        let p = json!({"prefill": [
            {"prompt_tokens": 128, "ms": 3.5, "error": null},
            {"prompt_tokens": 8192, "ms": null, "error": "OutOfMemoryError"},
        ]});
        assert_eq!(peer_prefill_ms(Some(&p), 128), Some(3.5));
        assert_eq!(peer_prefill_ms(Some(&p), 8192), None);
        assert_eq!(peer_prefill_ms(Some(&p), 512), None);
        assert_eq!(peer_prefill_ms(Some(&json!({})), 128), None);
        assert_eq!(peer_prefill_ms(None, 128), None);
    }

    #[test]
    fn prefill_flops_count_gemms_attention_and_one_head_row() {
        let cfg = model::kernels::qwen3_0_6b();
        // Qwen3-0.6B: 28 layers of (1024 x 4096 + 2048 x 1024 + 3 x 1024 x 3072) weights.
        let per_token = 2.0 * 28.0 * (1024.0 * 4096.0 + 2048.0 * 1024.0 + 3.0 * 1024.0 * 3072.0);
        let attn = |n: f64| 2.0 * 28.0 * 2.0 * 16.0 * 128.0 * n * (n + 1.0) / 2.0;
        let head = 2.0 * 151_936.0 * 1024.0;
        for n in [1usize, 128, 2048] {
            let want = per_token * n as f64 + attn(n as f64) + head;
            assert!((prefill_flops(&cfg, n) - want).abs() < 1e-6 * want, "{n}");
        }
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn peers_from_hf_reference_fill_context_1_only() {
        let p = json!({"gpu": "NVIDIA H200", "hf_eager_ms_per_token": 25.844,
                       "hf_compiled_error": "RuntimeError(...)"});
        assert_eq!(peer_ms(Some(&p), 1), (Some(25.844), None));
        assert_eq!(peer_ms(Some(&p), 512), (None, None));
        let p = json!({"hf_eager_ms_per_token": 25.0, "hf_compiled_static_ms_per_token": 5.0});
        assert_eq!(peer_ms(Some(&p), 1), (Some(25.0), Some(5.0)));
        assert_eq!(peer_ms(None, 1), (None, None));
        assert!(peers_note(Some(&p)).contains("context 1 only"));
        assert_eq!(peers_note(None), "");
    }
}
