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
use crate::device_model::DeviceModel;
use crate::engine::{Engine, StepOutput};
use crate::error::ModelError;
use crate::kernels::{attention, embedding, gemv, lm_head, mlp, rope, Tiles};
use crate::weights::Weights;
use dsl_runtime::{cdiv, Buffer, Device, Launch};

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

pub struct KernelsEngine {
    m: DeviceModel,
    output: Output,
}

/// Layer `l`'s part of a buffer stacked over layers, `n` elements per layer.
fn layer_view<T: dsl_runtime::Element>(
    b: &Buffer<T>,
    l: usize,
    n: usize,
) -> dsl_runtime::BufferView<'_, T> {
    b.slice(l * n..(l + 1) * n)
}

impl KernelsEngine {
    pub fn new(
        cfg: Config,
        weights: &Weights,
        dev: Device,
        opts: KernelOptions,
    ) -> Result<KernelsEngine, ModelError> {
        let max_seq = opts
            .max_seq
            .unwrap_or(DEFAULT_MAX_SEQ)
            .min(cfg.max_position_embeddings);
        let m = DeviceModel::new("kernels", cfg, weights, dev, max_seq, opts.tiles)?;
        Ok(KernelsEngine {
            m,
            output: opts.output,
        })
    }

    pub fn config(&self) -> &Config {
        &self.m.cfg
    }
    pub fn tiles(&self) -> &Tiles {
        &self.m.tiles
    }
    /// Benchmarks only: see [`DeviceModel::assume_cached`].
    pub fn assume_cached(&mut self, n: usize) -> Result<(), ModelError> {
        self.m.assume_cached(n)
    }
    pub fn set_output(&mut self, output: Output) {
        self.output = output;
    }

    /// The f32 logits of the last step (written by every step, whatever the output mode).
    pub fn logits(&self) -> Result<Vec<f32>, ModelError> {
        self.m.logits()
    }

    /// The token the fused argmax chose at the last step (written whatever the output mode).
    pub fn next_token(&self) -> Result<u32, ModelError> {
        self.m.next_token()
    }

    /// The residual stream after the last step's last layer (for checks).
    pub fn hidden(&self) -> Result<Vec<f32>, ModelError> {
        self.m.hidden()
    }

    /// What the last step (or prefill) left, as the output mode asks.
    fn output(&self) -> Result<StepOutput, ModelError> {
        match self.output {
            Output::Token => Ok(StepOutput::Token(self.next_token()?)),
            Output::Logits => Ok(StepOutput::Logits(self.logits()?)),
        }
    }

    /// Prefill tiles and chunk length (see [`crate::prefill::PrefillTiles`]).
    pub fn set_prefill_tiles(
        &mut self,
        tiles: crate::prefill::PrefillTiles,
    ) -> Result<(), ModelError> {
        self.m.set_prefill_tiles(tiles)
    }
    pub fn prefill_tiles(&self) -> &crate::prefill::PrefillTiles {
        &self.m.prefill.tiles
    }
    /// The KV cache as (K, V), `[layer][kv_head][pos][head_dim]` (for checks).
    pub fn kv_cache(&self) -> Result<(Vec<dsl_runtime::bf16>, Vec<dsl_runtime::bf16>), ModelError> {
        self.m.kv_cache()
    }

    /// Launches every op of one step; the token id and position are already on the device.
    fn launch_step(&self) -> Result<(), dsl_runtime::Error> {
        let m = &self.m;
        let (cfg, t, w, a, dev) = (&m.cfg, &m.tiles, &m.w, &m.a, &m.dev);
        let (h, hd, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let (q_dim, qkv_rows) = (cfg.q_dim(), cfg.q_dim() + 2 * cfg.kv_dim());
        let eps = cfg.rms_norm_eps as f32;
        let grid = |n: usize| Launch::grid(n as u32).warps(t.warps);

        embedding::embedding::launch(
            dev,
            &grid(cdiv(h as i64, t.embed_block as i64) as usize),
            &w.embed_tokens,
            &a.token,
            &a.x,
            h as i32,
            t.embed_block,
        )?;

        let cache_per_layer = kv_heads * m.max_seq * hd;
        for l in 0..cfg.num_hidden_layers {
            let view = |b, n| layer_view(b, l, n);
            let (k_cache, v_cache) = (
                view(&m.k_cache, cache_per_layer),
                view(&m.v_cache, cache_per_layer),
            );

            // Attention block.
            let g = t.qkv;
            gemv::rmsnorm_gemv::launch(
                dev,
                &grid(g.programs(qkv_rows)),
                &a.x,
                &view(&w.input_layernorm, h),
                &view(&w.qkv_proj, qkv_rows * h),
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
                &w.rope,
                &a.pos,
                &a.q,
                &k_cache,
                &v_cache,
                heads as i32,
                kv_heads as i32,
                m.max_seq as i32,
                eps,
                hd,
            )?;
            let split = Launch::grid((heads as u32, t.attn_splits as u32)).warps(t.warps);
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
                m.max_seq as i32,
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
                &view(&w.post_attention_layernorm, h),
                &view(&w.gate_up_proj, 2 * inter * h),
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
                &view(&w.down_proj, h * inter),
                &a.act,
                &a.x,
                h as i32,
                inter as i32,
                g.bm,
                g.bk,
            )?;
        }

        let g = t.lm_head;
        let head = w.head();
        let blocks = g.programs(cfg.vocab_size);
        lm_head::lm_head_argmax::launch(
            dev,
            &grid(blocks),
            &a.x,
            &w.norm,
            head,
            &a.logits,
            &a.part_max,
            &a.part_idx,
            &a.pos,
            &a.seed,
            &a.inv_temp,
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
            &a.token,
            &a.pos,
            blocks as i32,
            t.argmax_block,
        )?;
        Ok(())
    }
}

impl Engine for KernelsEngine {
    fn name(&self) -> &str {
        "kernels"
    }
    fn device(&self) -> String {
        self.m.dev.describe()
    }
    fn max_context(&self) -> usize {
        self.m.max_seq
    }
    fn vocab_size(&self) -> usize {
        self.m.cfg.vocab_size
    }
    fn step(&mut self, token: u32, pos: usize) -> Result<StepOutput, ModelError> {
        self.m.begin_step(token, pos)?;
        self.launch_step().map_err(|e| self.m.err(e))?;
        self.m.end_step(pos);
        self.output()
    }
    fn prompt_mode(&self) -> String {
        crate::prefill::prompt_mode(&self.m)
    }
    /// A prompt of one token is a decode step; longer ones go through `crate::prefill`.
    fn prefill(&mut self, tokens: &[u32], start_pos: usize) -> Result<StepOutput, ModelError> {
        if let [t] = tokens {
            return self.step(*t, start_pos);
        }
        crate::prefill::run(&mut self.m, tokens, start_pos)?;
        self.output()
    }
}
