//! The kernels engine: a decode step as a sequence of `#[kernel]` launches, one per op.
//!
//! Weights are repacked once (fused QKV, fused gate/up), stacked over layers (one buffer
//! per kind, a layer is a `Buffer::slice`) and uploaded to a `Device`: a GPU, or the tile
//! interpreter on the CPU. Activations, the KV cache and the small scratch buffers of the
//! two-phase ops are allocated once. `step(token, pos)` writes the token id and the
//! position into device buffers (the kernels read them from there, so every launch's
//! arguments are the same at every step: the shape the megakernel needs) and launches:
//!
//! ```text
//! embedding
//! per layer: rmsnorm_gemv (input norm + QKV) → qk_norm_rope (+ KV write)
//!            → attn_split → attn_merge → gemv_residual (o_proj)
//!            → rmsnorm_gate_up_silu → gemv_residual (down)
//! lm_head_argmax (final norm + lm_head + block argmax) → argmax_merge
//! ```
//!
//! Greedy decoding reads back one i32 (`StepOutput::Token`); `Output::Logits` reads the
//! f32 logits instead, for sampling and for checks against the reference.
//!
//! Precision: weights and every activation in memory are bf16 (the residual stream, the
//! QKV output, roped q, the KV cache, the attention output, the MLP activation); math in
//! kernels is f32. The reference decoder keeps all activations in f32, so each of those
//! stores is one bf16 rounding the reference does not have; the fusions remove the others
//! (normed vectors, SiLU inputs and softmax state never leave f32). Logits are f32.
use crate::config::Config;
use crate::engine::{Engine, StepOutput};
use crate::error::ModelError;
use crate::kernels::{attention, embedding, gemv, lm_head, mlp, rope, Tiles, NUM_WARPS};
use crate::weights::{Tensor, Weights};
use dsl_runtime::{bf16, cdiv, Buffer, Device, Launch};

/// What a step returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The fused argmax: one int read back (greedy decoding).
    Token,
    /// The full f32 logits (sampling; checks).
    Logits,
}

#[derive(Debug, Clone)]
pub struct KernelOptions {
    /// KV-cache capacity in positions; None: min(max_position_embeddings, 4096).
    pub max_seq: Option<usize>,
    pub output: Output,
    /// Tile sizes; None: `Tiles::for_config`.
    pub tiles: Option<Tiles>,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            max_seq: None,
            output: Output::Token,
            tiles: None,
        }
    }
}

/// Default KV capacity: 4096 positions keep Qwen3-0.6B's cache at 470 MB.
pub const DEFAULT_MAX_SEQ: usize = 4096;

/// The weights on the device, each kind stacked over layers.
struct DeviceWeights {
    embed: Buffer<bf16>,
    /// None when tied to `embed`.
    lm_head: Option<Buffer<bf16>>,
    final_norm: Buffer<bf16>,
    /// 1 / theta^(2i / head_dim), i < head_dim / 2, as the reference computes it.
    inv_freq: Buffer<f32>,
    attn_norm: Buffer<bf16>, // [L, hidden]
    qkv: Buffer<bf16>,       // [L, q_dim + 2 kv_dim, hidden]
    q_norm: Buffer<bf16>,    // [L, head_dim]
    k_norm: Buffer<bf16>,    // [L, head_dim]
    o_proj: Buffer<bf16>,    // [L, hidden, q_dim]
    mlp_norm: Buffer<bf16>,  // [L, hidden]
    gate_up: Buffer<bf16>,   // [L, 2 intermediate, hidden]
    down: Buffer<bf16>,      // [L, hidden, intermediate]
}

/// Activations and scratch, allocated once.
struct Activations {
    token: Buffer<i32>,
    pos: Buffer<i32>,
    /// The residual stream, updated in place by the two residual GEMVs.
    x: Buffer<bf16>,
    qkv: Buffer<bf16>,
    q: Buffer<bf16>,
    attn: Buffer<bf16>,
    act: Buffer<bf16>,
    part_m: Buffer<f32>,
    part_l: Buffer<f32>,
    part_acc: Buffer<f32>,
    logits: Buffer<f32>,
    part_max: Buffer<f32>,
    part_idx: Buffer<i32>,
    next: Buffer<i32>,
}

pub struct KernelEngine {
    cfg: Config,
    dev: Device,
    tiles: Tiles,
    max_seq: usize,
    output: Output,
    w: DeviceWeights,
    a: Activations,
    k_cache: Buffer<bf16>, // [L, kv_heads, max_seq, head_dim]
    v_cache: Buffer<bf16>,
    /// Positions whose K/V are in the cache.
    cached: usize,
}

fn engine_err(msg: impl std::fmt::Display) -> ModelError {
    ModelError::Engine {
        engine: "kernels".into(),
        msg: msg.to_string(),
    }
}

/// Layer `l`'s part of a buffer stacked over layers, `n` elements per layer.
fn layer_view<T: dsl_runtime::Element>(
    b: &Buffer<T>,
    l: usize,
    n: usize,
) -> dsl_runtime::BufferView<'_, T> {
    b.slice(l * n..(l + 1) * n)
}

fn stack<'a>(ts: impl Iterator<Item = &'a Tensor>) -> Vec<bf16> {
    ts.flat_map(|t| t.data.iter().copied()).collect()
}

impl KernelEngine {
    pub fn new(
        cfg: Config,
        weights: &Weights,
        dev: Device,
        opts: KernelOptions,
    ) -> Result<KernelEngine, ModelError> {
        let max_seq = opts
            .max_seq
            .unwrap_or(DEFAULT_MAX_SEQ)
            .min(cfg.max_position_embeddings);
        if max_seq == 0 {
            return Err(engine_err("max_seq must be at least 1"));
        }
        if !cfg.head_dim.is_multiple_of(2) {
            return Err(engine_err(format!(
                "head_dim {} must be even for rotate-half rope",
                cfg.head_dim
            )));
        }
        let tiles = opts.tiles.unwrap_or_else(|| Tiles::for_config(&cfg));
        let (l, h, hd) = (cfg.num_hidden_layers, cfg.hidden_size, cfg.head_dim);
        // i32 offsets inside kernels: the largest matrix and a layer's cache must fit.
        let biggest = [
            cfg.vocab_size * h,
            2 * cfg.intermediate_size * h,
            cfg.num_key_value_heads * max_seq * hd,
        ];
        if biggest.iter().any(|&n| n > i32::MAX as usize) {
            return Err(engine_err(
                "a weight matrix or a layer's KV cache exceeds i32 offsets",
            ));
        }
        let up = |v: &[bf16]| dev.upload(v).map_err(engine_err);
        let ls = &weights.layers;
        let inv_freq = crate::reference::rope_inv_freq(&cfg);
        let w = DeviceWeights {
            embed: up(&weights.embed_tokens.data)?,
            lm_head: weights.lm_head.as_ref().map(|t| up(&t.data)).transpose()?,
            final_norm: up(&weights.norm.data)?,
            inv_freq: dev.upload(&inv_freq).map_err(engine_err)?,
            attn_norm: up(&stack(ls.iter().map(|lw| &lw.input_layernorm)))?,
            qkv: up(&ls.iter().flat_map(|lw| lw.fused_qkv()).collect::<Vec<_>>())?,
            q_norm: up(&stack(ls.iter().map(|lw| &lw.q_norm)))?,
            k_norm: up(&stack(ls.iter().map(|lw| &lw.k_norm)))?,
            o_proj: up(&stack(ls.iter().map(|lw| &lw.o_proj)))?,
            mlp_norm: up(&stack(ls.iter().map(|lw| &lw.post_attention_layernorm)))?,
            gate_up: up(&ls
                .iter()
                .flat_map(|lw| lw.fused_gate_up())
                .collect::<Vec<_>>())?,
            down: up(&stack(ls.iter().map(|lw| &lw.down_proj)))?,
        };
        let z16 = |n: usize| dev.zeros::<bf16>(n).map_err(engine_err);
        let z32 = |n: usize| dev.zeros::<f32>(n).map_err(engine_err);
        let zi = |n: usize| dev.zeros::<i32>(n).map_err(engine_err);
        let parts = cfg.num_attention_heads * tiles.attn_splits;
        let lm_blocks = tiles.lm_head.programs(cfg.vocab_size);
        let a = Activations {
            token: zi(1)?,
            pos: zi(1)?,
            x: z16(h)?,
            qkv: z16(cfg.q_dim() + 2 * cfg.kv_dim())?,
            q: z16(cfg.q_dim())?,
            attn: z16(cfg.q_dim())?,
            act: z16(cfg.intermediate_size)?,
            part_m: z32(parts)?,
            part_l: z32(parts)?,
            part_acc: z32(parts * hd)?,
            logits: z32(cfg.vocab_size)?,
            part_max: z32(lm_blocks)?,
            part_idx: zi(lm_blocks)?,
            next: zi(1)?,
        };
        let cache_len = l * cfg.num_key_value_heads * max_seq * hd;
        Ok(KernelEngine {
            k_cache: z16(cache_len)?,
            v_cache: z16(cache_len)?,
            cfg,
            dev,
            tiles,
            max_seq,
            output: opts.output,
            w,
            a,
            cached: 0,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }
    pub fn tiles(&self) -> &Tiles {
        &self.tiles
    }
    pub fn set_output(&mut self, output: Output) {
        self.output = output;
    }

    /// The f32 logits of the last step (written by every step, whatever the output mode).
    pub fn logits(&self) -> Result<Vec<f32>, ModelError> {
        self.a.logits.to_vec().map_err(engine_err)
    }

    /// The token the fused argmax chose at the last step (written whatever the output mode).
    pub fn next_token(&self) -> Result<u32, ModelError> {
        Ok(self.a.next.to_vec().map_err(engine_err)?[0] as u32)
    }

    /// The residual stream after the last step's last layer (for checks).
    pub fn hidden(&self) -> Result<Vec<bf16>, ModelError> {
        self.a.x.to_vec().map_err(engine_err)
    }

    /// Launches every op of one step; the token id and position are already on the device.
    fn launch_step(&self) -> Result<(), dsl_runtime::Error> {
        let (cfg, t, w, a, dev) = (&self.cfg, &self.tiles, &self.w, &self.a, &self.dev);
        let (h, hd, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let (q_dim, qkv_rows) = (cfg.q_dim(), cfg.q_dim() + 2 * cfg.kv_dim());
        let eps = cfg.rms_norm_eps as f32;
        let grid = |n: usize| Launch::grid(n as u32).warps(NUM_WARPS);

        embedding::embedding::launch(
            dev,
            &grid(cdiv(h as i64, t.embed_block as i64) as usize),
            &w.embed,
            &a.token,
            &a.x,
            h as i32,
            t.embed_block,
        )?;

        let cache_per_layer = kv_heads * self.max_seq * hd;
        for l in 0..cfg.num_hidden_layers {
            let view = |b, n| layer_view(b, l, n);
            let (k_cache, v_cache) = (
                view(&self.k_cache, cache_per_layer),
                view(&self.v_cache, cache_per_layer),
            );

            // Attention block.
            let g = t.qkv;
            gemv::rmsnorm_gemv::launch(
                dev,
                &grid(g.programs(qkv_rows)),
                &a.x,
                &view(&w.attn_norm, h),
                &view(&w.qkv, qkv_rows * h),
                &a.qkv,
                qkv_rows as i32,
                h as i32,
                eps,
                g.bm,
                g.bk,
            )?;
            rope::qk_norm_rope::launch(
                dev,
                &grid(heads + kv_heads),
                &a.qkv,
                &view(&w.q_norm, hd),
                &view(&w.k_norm, hd),
                &w.inv_freq,
                &a.pos,
                &a.q,
                &k_cache,
                &v_cache,
                heads as i32,
                kv_heads as i32,
                self.max_seq as i32,
                eps,
                hd,
            )?;
            let split = Launch::grid((heads as u32, t.attn_splits as u32)).warps(NUM_WARPS);
            attention::attn_split::launch(
                dev,
                &split,
                &a.q,
                &k_cache,
                &v_cache,
                &a.pos,
                &a.part_m,
                &a.part_l,
                &a.part_acc,
                cfg.gqa_group() as i32,
                self.max_seq as i32,
                1.0 / (hd as f32).sqrt(),
                hd,
                t.attn_block_n,
                t.attn_splits,
            )?;
            attention::attn_merge::launch(
                dev,
                &grid(heads),
                &a.part_m,
                &a.part_l,
                &a.part_acc,
                &a.attn,
                hd,
                t.attn_splits,
            )?;
            let g = t.o_proj;
            gemv::gemv_residual::launch(
                dev,
                &grid(g.programs(h)),
                &view(&w.o_proj, h * q_dim),
                &a.attn,
                &a.x,
                h as i32,
                q_dim as i32,
                g.bm,
                g.bk,
            )?;

            // MLP block.
            let g = t.gate_up;
            mlp::rmsnorm_gate_up_silu::launch(
                dev,
                &grid(g.programs(inter)),
                &a.x,
                &view(&w.mlp_norm, h),
                &view(&w.gate_up, 2 * inter * h),
                &a.act,
                inter as i32,
                h as i32,
                eps,
                g.bm,
                g.bk,
            )?;
            let g = t.down;
            gemv::gemv_residual::launch(
                dev,
                &grid(g.programs(h)),
                &view(&w.down, h * inter),
                &a.act,
                &a.x,
                h as i32,
                inter as i32,
                g.bm,
                g.bk,
            )?;
        }

        let g = t.lm_head;
        let head = w.lm_head.as_ref().unwrap_or(&w.embed);
        let blocks = g.programs(cfg.vocab_size);
        lm_head::lm_head_argmax::launch(
            dev,
            &grid(blocks),
            &a.x,
            &w.final_norm,
            head,
            &a.logits,
            &a.part_max,
            &a.part_idx,
            cfg.vocab_size as i32,
            h as i32,
            eps,
            g.bm,
            g.bk,
        )?;
        lm_head::argmax_merge::launch(
            dev,
            &grid(1),
            &a.part_max,
            &a.part_idx,
            &a.next,
            blocks as i32,
            t.argmax_block,
        )?;
        Ok(())
    }
}

impl Engine for KernelEngine {
    fn name(&self) -> &str {
        "kernels"
    }
    fn device(&self) -> String {
        self.dev.describe()
    }
    fn max_context(&self) -> usize {
        self.max_seq
    }
    fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }
    fn step(&mut self, token: u32, pos: usize) -> Result<StepOutput, ModelError> {
        if token as usize >= self.cfg.vocab_size {
            return Err(engine_err(format!(
                "token id {token} ≥ vocab_size {}",
                self.cfg.vocab_size
            )));
        }
        if pos >= self.max_seq {
            return Err(engine_err(format!(
                "position {pos} beyond the KV cache's {} positions",
                self.max_seq
            )));
        }
        if pos > self.cached {
            return Err(engine_err(format!(
                "position {pos} skips ahead of the {} cached positions",
                self.cached
            )));
        }
        // Rewinding needs nothing more: attention reads positions 0..=pos only.
        self.a
            .token
            .copy_from(&[token as i32])
            .map_err(engine_err)?;
        self.a.pos.copy_from(&[pos as i32]).map_err(engine_err)?;
        self.launch_step().map_err(engine_err)?;
        self.cached = pos + 1;
        match self.output {
            Output::Token => Ok(StepOutput::Token(self.next_token()?)),
            Output::Logits => Ok(StepOutput::Logits(self.logits()?)),
        }
    }
}
