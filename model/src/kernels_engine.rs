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
use crate::kernels::{attention, embedding, gemv, mlp, rope, Gemv, Tiles};
use crate::weights::Weights;
use dsl_runtime::{bf16, cdiv, ptr, Buffer, BufferView, Device, Launch};

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

    /// Prefill tiles and chunk length (see [`crate::kernels::prefill::PrefillTiles`]).
    pub fn set_prefill_tiles(
        &mut self,
        tiles: crate::kernels::prefill::PrefillTiles,
    ) -> Result<(), ModelError> {
        self.m.set_prefill_tiles(tiles)
    }
    pub fn prefill_tiles(&self) -> &crate::kernels::prefill::PrefillTiles {
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

        use attention::{attn_merge, attn_split};
        use gemv::{gemv_residual, rmsnorm_gemv};
        use mlp::rmsnorm_gate_up_silu;
        use rope::qk_norm_rope;
        embedding::embedding::launch_with(
            dev,
            &grid(cdiv(h as i64, t.embed_block as i64) as usize),
            &embedding::embedding::Args {
                table: ptr(&w.embed_tokens),
                token: ptr(&a.token),
                x: ptr(&a.x),
                hidden: h as i32,
            },
            &embedding::embedding::Consts {
                BLOCK: t.embed_block,
                COPIES: 1,
            },
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
            rmsnorm_gemv::launch_with(
                dev,
                &grid(g.programs(qkv_rows)),
                &rmsnorm_gemv::Args {
                    x: ptr(&a.x),
                    g: ptr(&view(&w.input_layernorm, h)),
                    w: ptr(&view(&w.qkv_proj, qkv_rows * h)),
                    y: ptr(&a.qkv),
                    m: qkv_rows as i32,
                    k: h as i32,
                    eps,
                },
                &rmsnorm_gemv::Consts { BM: g.bm, BK: g.bk },
            )?;
            qk_norm_rope::launch_with(
                dev,
                &grid(heads + kv_heads),
                &qk_norm_rope::Args {
                    qkv: ptr(&a.qkv),
                    q_norm: ptr(&view(&w.q_norm, hd)),
                    k_norm: ptr(&view(&w.k_norm, hd)),
                    rope: ptr(&w.rope),
                    pos: ptr(&a.pos),
                    q_out: ptr(&a.q),
                    k_cache: ptr(&k_cache),
                    v_cache: ptr(&v_cache),
                    n_heads: heads as i32,
                    n_kv_heads: kv_heads as i32,
                    max_seq: m.max_seq as i32,
                    eps,
                },
                &qk_norm_rope::Consts { D: hd },
            )?;
            let split = Launch::grid((heads as u32, t.attn_splits as u32)).warps(t.warps);
            attn_split::launch_with(
                dev,
                &split,
                &attn_split::Args {
                    q: ptr(&a.q),
                    k_cache: ptr(&k_cache),
                    v_cache: ptr(&v_cache),
                    pos: ptr(&a.pos),
                    part_m: ptr(&a.part_m),
                    part_l: ptr(&a.part_l),
                    part_acc: ptr(&a.part_acc),
                    group: cfg.gqa_group() as i32,
                    max_seq: m.max_seq as i32,
                    scale: 1.0 / (hd as f32).sqrt(),
                },
                &attn_split::Consts {
                    D: hd,
                    BLOCK_N: t.attn_block_n,
                    SPLITS: t.attn_splits,
                },
            )?;
            attn_merge::launch_with(
                dev,
                &grid(heads),
                &attn_merge::Args {
                    part_m: ptr(&a.part_m),
                    part_l: ptr(&a.part_l),
                    part_acc: ptr(&a.part_acc),
                    out: ptr(&a.attn),
                },
                &attn_merge::Consts {
                    D: hd,
                    SPLITS: t.attn_splits,
                },
            )?;
            // x += W · input: o_proj here, down below.
            let residual =
                |g: Gemv, weight: BufferView<'_, bf16>, input: &Buffer<bf16>, k: usize| {
                    gemv_residual::launch_with(
                        dev,
                        &grid(g.programs(h)),
                        &gemv_residual::Args {
                            w: ptr(&weight),
                            x: ptr(input),
                            res: ptr(&a.x),
                            m: h as i32,
                            k: k as i32,
                        },
                        &gemv_residual::Consts { BM: g.bm, BK: g.bk },
                    )
                };
            residual(t.o_proj, view(&w.o_proj, h * q_dim), &a.attn, q_dim)?;

            // MLP block.
            let g = t.gate_up;
            rmsnorm_gate_up_silu::launch_with(
                dev,
                &grid(g.programs(inter)),
                &rmsnorm_gate_up_silu::Args {
                    x: ptr(&a.x),
                    g: ptr(&view(&w.post_attention_layernorm, h)),
                    w: ptr(&view(&w.gate_up_proj, 2 * inter * h)),
                    act: ptr(&a.act),
                    inter: inter as i32,
                    k: h as i32,
                    eps,
                },
                &rmsnorm_gate_up_silu::Consts { BM: g.bm, BK: g.bk },
            )?;
            residual(t.down, view(&w.down_proj, h * inter), &a.act, inter)?;
        }

        m.launch_head()?;
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
