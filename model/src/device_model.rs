//! What the two device engines share: the model's weights on a `Device` (repacked and
//! stacked over layers), the activations and scratch of a decode step, the KV cache, and
//! the per-step bookkeeping (checks, the two tiny host→device copies, reading results).
//!
//! The kernels engine (`kernels_engine.rs`) launches one kernel per op over this state; the
//! megakernel engine (`megakernel_engine.rs`) launches the whole step once. Both see the same
//! buffers, so they compute the same thing from the same bytes.
use crate::config::Config;
use crate::error::ModelError;
use crate::kernels::prefill::PrefillTiles;
use crate::kernels::{TileRule, Tiles};
use crate::weights::{Tensor, Weights};
use dsl_runtime::{bf16, ptr, Buffer, Device, Launch};

/// The weights on the device, each kind stacked over layers (a layer is a window), named
/// as in the checkpoint (`model.layers.N.NAME`; `qkv_proj` and `gate_up_proj` are the
/// fused q/k/v and gate/up projections).
pub struct DeviceWeights {
    pub embed_tokens: Buffer<bf16>,
    /// None when tied to `embed_tokens`.
    pub lm_head: Option<Buffer<bf16>>,
    pub norm: Buffer<bf16>,
    /// [max_seq, head_dim]: each position's rotary cosines, then sines
    /// (`reference::rope_table`).
    pub rope: Buffer<f32>,
    pub input_layernorm: Buffer<bf16>,          // [L, hidden]
    pub qkv_proj: Buffer<bf16>,                 // [L, q_dim + 2 kv_dim, hidden]: [q; k; v]
    pub q_norm: Buffer<bf16>,                   // [L, head_dim]
    pub k_norm: Buffer<bf16>,                   // [L, head_dim]
    pub o_proj: Buffer<bf16>,                   // [L, hidden, q_dim]
    pub post_attention_layernorm: Buffer<bf16>, // [L, hidden]
    pub gate_up_proj: Buffer<bf16>,             // [L, 2 intermediate, hidden]: [gate; up]
    /// [L, hidden, intermediate]; with `down_transposed`, [L, intermediate, hidden].
    pub down_proj: Buffer<bf16>,
    /// Down stored transposed, for the megakernel's fused MLP (`Tiles::fused_mlp`, whose
    /// programs read a row per intermediate index); prefill then multiplies by it as it is
    /// (`gemm_nn_residual`). The kernels engine keeps PyTorch's layout.
    pub down_transposed: bool,
}

impl DeviceWeights {
    /// The output head: `lm_head`, or the embedding table when they are tied.
    pub fn head(&self) -> &Buffer<bf16> {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }
}

/// Activations and scratch, allocated once. Every kernel reads the token id and the
/// position from `token` / `pos`, so a step's launch arguments never change.
pub struct Activations {
    pub token: Buffer<i32>,
    pub pos: Buffer<i32>,
    /// Gumbel-max sampling in the lm_head: the seed, and 1 / temperature (0: greedy).
    pub seed: Buffer<i32>,
    pub inv_temp: Buffer<f32>,
    /// The residual stream, updated in place by the two residual GEMVs (in the
    /// megakernel's fused MLP, by its programs' atomic adds); f32 (`kernels/embedding.rs`
    /// says why).
    pub x: Buffer<f32>,
    /// The megakernel's fused MLP: o_proj's copy of `x`, which the MLP's norm reads while
    /// its programs add into `x`.
    pub x_mlp: Buffer<f32>,
    pub qkv: Buffer<bf16>,
    pub q: Buffer<bf16>,
    /// The megakernel's rotated q and k heads before their 1/rms, and the sums of squares
    /// of their QKV programs' rows (`rope::rmsnorm_qkv_rope_pairs`, `Tiles::qkv_pairs`).
    pub qk_rot: Buffer<f32>,
    pub qk_ss: Buffer<f32>,
    pub attn: Buffer<bf16>,
    pub act: Buffer<bf16>,
    pub part_m: Buffer<f32>,
    pub part_l: Buffer<f32>,
    pub part_acc: Buffer<f32>,
    /// Programs finished so far, per query head (`attn_split_merge`: the split programs),
    /// then per head of the QKV output (`rmsnorm_qkv_rope`: its D / BM programs); the
    /// last one finishes the head and puts the count back to 0 (a launch the watchdog
    /// stopped may leave them counting, as it leaves the KV cache half-written: the engine
    /// reports the error, and a new engine starts from zeros).
    pub tickets: Buffer<i32>,
    pub logits: Buffer<f32>,
    pub part_max: Buffer<f32>,
    pub part_idx: Buffer<i32>,
    pub next: Buffer<i32>,
}

/// A model resident on a device, ready for decode steps.
pub struct DeviceModel {
    /// The engine's name, for error messages.
    pub engine: &'static str,
    pub cfg: Config,
    pub dev: Device,
    pub tiles: Tiles,
    /// KV-cache capacity in positions.
    pub max_seq: usize,
    pub w: DeviceWeights,
    pub a: Activations,
    pub k_cache: Buffer<bf16>, // [L, kv_heads, max_seq, head_dim]
    pub v_cache: Buffer<bf16>,
    /// Positions whose K/V are in the cache.
    pub cached: usize,
    /// The (token, position) `token` / `pos` hold for the next step, when the device set
    /// them itself (the megakernel's `advance`); None: unknown, the next step copies them.
    pub on_device: Option<(u32, usize)>,
    /// Steps that copied their token and position in (the others found them on the device).
    pub steps_copied_in: u64,
    /// Prefill's tiles, chunk length and scratch (`crate::prefill`).
    pub prefill: Prefill,
}

pub fn engine_err(engine: &str, msg: impl std::fmt::Display) -> ModelError {
    ModelError::Engine {
        engine: engine.into(),
        msg: msg.to_string(),
    }
}

/// Each layer's tensors, in layer order, as the parts of one stacked device buffer.
fn stack<'a>(ts: impl Iterator<Item = &'a Tensor>) -> Vec<&'a [bf16]> {
    ts.map(|t| &*t.data).collect()
}

/// Bytes of K and V that one position adds to the cache (all layers).
pub fn kv_bytes_per_position(cfg: &Config) -> usize {
    2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 2
}

/// Weight bytes a decode step reads: every layer's matrices and norms, the output head,
/// the final norm, and one row of the embedding table.
pub fn weight_bytes_per_token(cfg: &Config) -> usize {
    let (h, hd, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let layer = (cfg.q_dim() + 2 * cfg.kv_dim()) * h // qkv
        + h * cfg.q_dim() // o_proj
        + 3 * inter * h // gate, up, down
        + 2 * h + 2 * hd; // norms
    2 * (cfg.num_hidden_layers * layer + cfg.vocab_size * h + h + h)
}

/// `t` ([rows, cols], row-major) transposed, by blocks that stay in cache.
fn transposed(t: &[bf16], rows: usize, cols: usize) -> Vec<bf16> {
    const B: usize = 32;
    let mut out = vec![bf16::ZERO; t.len()];
    for r0 in (0..rows).step_by(B) {
        for c0 in (0..cols).step_by(B) {
            for r in r0..(r0 + B).min(rows) {
                for c in c0..(c0 + B).min(cols) {
                    out[c * rows + r] = t[r * cols + c];
                }
            }
        }
    }
    out
}

/// Each layer's down projection transposed ([hidden, inter] to [inter, hidden]), the
/// layers spread over the host's cores (3.6 GB of bf16 at 8B).
fn down_transposed(cfg: &Config, weights: &Weights) -> Vec<Vec<bf16>> {
    let (h, inter) = (cfg.hidden_size, cfg.intermediate_size);
    let ls = &weights.layers;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = ls.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let parts: Vec<_> = ls
            .chunks(per)
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .map(|lw| transposed(&lw.down_proj.data, h, inter))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("a transpose thread panicked"))
            .collect()
    })
}

/// Bytes the weights take on the device: what a step reads, with the whole embedding
/// table instead of one row when the head is not tied to it.
pub fn resident_weight_bytes(cfg: &Config) -> usize {
    let row = 2 * cfg.hidden_size;
    let table = if cfg.tie_word_embeddings {
        0 // the head is the table, counted once already
    } else {
        2 * cfg.vocab_size * cfg.hidden_size
    };
    weight_bytes_per_token(cfg) - row + table
}

/// How many positions the KV cache holds.
///
/// `requested` (from `--max-context`) must not exceed the model's
/// `max_position_embeddings`; without it, the model's whole context. On a GPU the cache
/// must fit in free memory less `other_bytes` (what will be allocated besides, e.g. the
/// weights) and a reserve for the runtime: an explicit request that does not fit is an
/// error, the default is capped, and the returned note says so.
pub fn kv_capacity(
    cfg: &Config,
    requested: Option<usize>,
    dev: &Device,
    other_bytes: usize,
) -> Result<(usize, Option<String>), String> {
    let max_pos = cfg.max_position_embeddings;
    if let Some(r) = requested {
        if r == 0 {
            return Err("--max-context must be at least 1".into());
        }
        if r > max_pos {
            return Err(format!(
                "--max-context {r} exceeds the model's max_position_embeddings {max_pos}"
            ));
        }
    }
    let want = requested.unwrap_or(max_pos);
    let per_pos = kv_bytes_per_position(cfg);
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    let Some(info) = dev.mem_info() else {
        return Ok((want, None));
    };
    let (free, _total) = info.map_err(|e| format!("cannot query GPU memory: {e}"))?;
    // Leave room for the runtime, the megakernel's module and sync words, and scratch.
    const RESERVE: usize = 512 << 20;
    let fits = free.saturating_sub(RESERVE + other_bytes) / per_pos;
    if want <= fits {
        return Ok((want, None));
    }
    if requested.is_some() {
        return Err(format!(
            "--max-context {want} needs {:.2} GiB of KV cache; {:.2} GiB of GPU memory is free (at most {fits} positions)",
            gib(want * per_pos),
            gib(free)
        ));
    }
    if fits == 0 {
        return Err(format!(
            "no GPU memory left for a KV cache ({:.2} GiB free)",
            gib(free)
        ));
    }
    Ok((
        fits,
        Some(format!(
            "KV cache capped at {fits} positions ({:.2} GiB) by free GPU memory (the model allows {max_pos}); --max-context sets it",
            gib(fits * per_pos)
        )),
    ))
}

impl DeviceModel {
    /// The decode step's last two launches, shared by both device engines' kernel paths
    /// (the kernels engine's step, prefill's last row): final norm + lm_head + per-block
    /// argmax over the residual stream `a.x`, then the argmax over blocks, which writes the
    /// next token and position into `a.token` / `a.pos`.
    pub(crate) fn launch_head(&self) -> Result<(), dsl_runtime::Error> {
        use crate::kernels::lm_head::{argmax_merge, lm_head_argmax};
        let (cfg, t, w, a, dev) = (&self.cfg, &self.tiles, &self.w, &self.a, &self.dev);
        let grid = |n: usize| Launch::grid(n as u32).warps(t.warps);
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps as f32);
        let g = t.lm_head;
        let blocks = g.programs(cfg.vocab_size);
        lm_head_argmax::launch_with(
            dev,
            &grid(blocks),
            &lm_head_argmax::Args {
                x: ptr(&a.x),
                g: ptr(&w.norm),
                w: ptr(w.head()),
                logits: ptr(&a.logits),
                part_max: ptr(&a.part_max),
                part_idx: ptr(&a.part_idx),
                pos: ptr(&a.pos),
                seed: ptr(&a.seed),
                inv_temp: ptr(&a.inv_temp),
                vocab: cfg.vocab_size as i32,
                k: h as i32,
                eps,
            },
            // One copy of the residual: what `widen` (prefill) or the kernels engine wrote.
            &lm_head_argmax::Consts {
                BM: g.bm,
                BK: g.bk,
                COPIES: 1,
            },
        )?;
        argmax_merge::launch_with(
            dev,
            &grid(1),
            &argmax_merge::Args {
                part_max: ptr(&a.part_max),
                part_idx: ptr(&a.part_idx),
                next: ptr(&a.next),
                token: ptr(&a.token),
                pos: ptr(&a.pos),
                n: blocks as i32,
            },
            &argmax_merge::Consts {
                BLOCK: t.argmax_block,
            },
        )?;
        Ok(())
    }

    /// Repacks, stacks and uploads the weights; allocates activations and a KV cache of
    /// `max_seq` positions.
    pub fn new(
        engine: &'static str,
        cfg: Config,
        weights: &Weights,
        dev: Device,
        max_seq: usize,
        tiles: Option<Tiles>,
    ) -> Result<DeviceModel, ModelError> {
        let err = |m: String| engine_err(engine, m);
        if max_seq == 0 {
            return Err(err("max_seq must be at least 1".into()));
        }
        if !cfg.head_dim.is_multiple_of(2) {
            return Err(err(format!(
                "head_dim {} must be even for rotate-half rope",
                cfg.head_dim
            )));
        }
        let tiles = tiles.unwrap_or_else(|| Tiles::with_rule(&cfg, &TileRule::for_device(&dev)));
        let (l, h, hd) = (cfg.num_hidden_layers, cfg.hidden_size, cfg.head_dim);
        // i32 offsets inside kernels: the largest matrix and a layer's cache must fit.
        let biggest = [
            cfg.vocab_size * h,
            2 * cfg.intermediate_size * h,
            cfg.num_key_value_heads * max_seq * hd,
        ];
        if biggest.iter().any(|&n| n > i32::MAX as usize) {
            return Err(err(
                "a weight matrix or a layer's KV cache exceeds i32 offsets".into(),
            ));
        }
        let e = |x: dsl_runtime::Error| engine_err(engine, x);
        let up = |v: &[bf16]| dev.upload(v).map_err(e);
        // Stacked over the layers, copied to the device part by part (no host copy).
        let up_stack = |parts: Vec<&[bf16]>| dev.upload_concat(&parts).map_err(e);
        let ls = &weights.layers;
        let rope = crate::reference::rope_table(&crate::reference::rope_inv_freq(&cfg), max_seq);
        let w = DeviceWeights {
            embed_tokens: up(&weights.embed_tokens.data)?,
            lm_head: weights.lm_head.as_ref().map(|t| up(&t.data)).transpose()?,
            norm: up(&weights.norm.data)?,
            rope: dev.upload(&rope).map_err(e)?,
            input_layernorm: up_stack(stack(ls.iter().map(|lw| &lw.input_layernorm)))?,
            qkv_proj: up_stack(ls.iter().flat_map(|lw| lw.qkv_parts()).collect())?,
            q_norm: up_stack(stack(ls.iter().map(|lw| &lw.q_norm)))?,
            k_norm: up_stack(stack(ls.iter().map(|lw| &lw.k_norm)))?,
            o_proj: up_stack(stack(ls.iter().map(|lw| &lw.o_proj)))?,
            post_attention_layernorm: up_stack(stack(
                ls.iter().map(|lw| &lw.post_attention_layernorm),
            ))?,
            gate_up_proj: up_stack(ls.iter().flat_map(|lw| lw.gate_up_parts()).collect())?,
            down_proj: if tiles.fused_mlp {
                let ts = down_transposed(&cfg, weights);
                up_stack(ts.iter().map(|t| &t[..]).collect())?
            } else {
                up_stack(stack(ls.iter().map(|lw| &lw.down_proj)))?
            },
            down_transposed: tiles.fused_mlp,
        };
        let a = activations(engine, &cfg, &tiles, &dev)?;
        let prefill = Prefill::new(&dev);
        let cache_len = l * cfg.num_key_value_heads * max_seq * hd;
        Ok(DeviceModel {
            engine,
            k_cache: dev.zeros::<bf16>(cache_len).map_err(e)?,
            v_cache: dev.zeros::<bf16>(cache_len).map_err(e)?,
            cfg,
            dev,
            tiles,
            max_seq,
            w,
            a,
            cached: 0,
            on_device: None,
            steps_copied_in: 0,
            prefill,
        })
    }

    pub fn err(&self, msg: impl std::fmt::Display) -> ModelError {
        engine_err(self.engine, msg)
    }

    /// Checks a step's token and position, then copies them to the device: the only
    /// host→device traffic of a step.
    pub fn begin_step(&mut self, token: u32, pos: usize) -> Result<(), ModelError> {
        if token as usize >= self.cfg.vocab_size {
            return Err(self.err(format!(
                "token id {token} ≥ vocab_size {}",
                self.cfg.vocab_size
            )));
        }
        if pos >= self.max_seq {
            return Err(self.err(format!(
                "position {pos} beyond the KV cache's {} positions",
                self.max_seq
            )));
        }
        if pos > self.cached {
            return Err(self.err(format!(
                "position {pos} skips ahead of the {} cached positions",
                self.cached
            )));
        }
        // Rewinding needs nothing more: attention reads positions 0..=pos only.
        let engine = self.engine;
        let e = |x| engine_err(engine, x);
        // The megakernel hands its token and next position to the next step on the device:
        // while decoding its own tokens, a step copies nothing in.
        if self.on_device != Some((token, pos)) {
            self.a.token.copy_from(&[token as i32]).map_err(e)?;
            self.a.pos.copy_from(&[pos as i32]).map_err(e)?;
            self.steps_copied_in += 1;
        }
        self.on_device = None;
        Ok(())
    }

    /// New tiles (same weights): reallocates the activations and scratch.
    pub fn set_tiles(&mut self, tiles: Tiles) -> Result<(), ModelError> {
        if tiles.fused_mlp != self.w.down_transposed {
            return Err(self.err(format!(
                "down was uploaded for the MLP {}: new tiles cannot change that",
                if self.w.down_transposed {
                    "fused"
                } else {
                    "as two stages"
                }
            )));
        }
        self.a = activations(self.engine, &self.cfg, &tiles, &self.dev)?;
        self.tiles = tiles;
        self.on_device = None;
        Ok(())
    }

    /// Benchmarks only: treat the first `n` positions as cached without computing them, so
    /// a step can run at position `n` at once (attention then reads whatever the cache
    /// holds; the time does not depend on it).
    pub fn assume_cached(&mut self, n: usize) -> Result<(), ModelError> {
        if n > self.max_seq {
            return Err(self.err(format!(
                "cannot assume {n} cached positions: the KV cache holds {}",
                self.max_seq
            )));
        }
        self.cached = n;
        Ok(())
    }

    /// Prefill tiles and chunk length from now on (the scratch is reallocated at the next
    /// prefill when the chunk grows).
    pub fn set_prefill_tiles(&mut self, tiles: PrefillTiles) -> Result<(), ModelError> {
        if tiles.chunk == 0 {
            return Err(self.err("the prefill chunk must be at least 1 token"));
        }
        let t = &tiles;
        let sizes = [
            t.gemm_bm, t.gemm_bn, t.gemm_bk, t.group_m, t.attn_bm, t.attn_bn, t.rope_bt,
        ];
        let warps = [
            t.gemm_warps,
            t.attn_warps,
            t.row_warps,
            t.gemm_stages,
            t.attn_stages,
        ];
        if sizes.contains(&0) || warps.contains(&0) {
            return Err(self.err(format!(
                "prefill tiles, warps and stages must be at least 1: {tiles:?}"
            )));
        }
        if tiles.chunk < self.prefill.tiles.chunk {
            self.prefill.scratch = None;
        }
        self.prefill.tiles = tiles;
        Ok(())
    }

    /// Marks position `pos` as cached once its step has run.
    pub fn end_step(&mut self, pos: usize) {
        self.cached = pos + 1;
    }

    /// Gumbel-max sampling in the lm_head from now on: `temperature` ≤ 0 is greedy. The
    /// seed is used modulo 2^31 (the kernel's hash reads a non-negative i32).
    pub fn set_sampling(&mut self, temperature: f32, seed: u64) -> Result<(), ModelError> {
        let inv = if temperature > 0.0 {
            1.0 / temperature
        } else {
            0.0
        };
        let engine = self.engine;
        let e = |x| engine_err(engine, x);
        self.a.inv_temp.copy_from(&[inv]).map_err(e)?;
        self.a
            .seed
            .copy_from(&[(seed & 0x7FFF_FFFF) as i32])
            .map_err(e)?;
        Ok(())
    }

    /// The f32 logits of the last step.
    pub fn logits(&self) -> Result<Vec<f32>, ModelError> {
        self.a.logits.to_vec().map_err(|e| self.err(e))
    }

    /// The token the fused argmax chose at the last step: a 4-byte read.
    pub fn next_token(&self) -> Result<u32, ModelError> {
        Ok(self.a.next.to_vec().map_err(|e| self.err(e))?[0] as u32)
    }

    /// The KV cache as (K, V), `[layer][kv_head][pos][head_dim]` (for checks).
    pub fn kv_cache(&self) -> Result<(Vec<bf16>, Vec<bf16>), ModelError> {
        let e = |x| self.err(x);
        Ok((
            self.k_cache.to_vec().map_err(e)?,
            self.v_cache.to_vec().map_err(e)?,
        ))
    }

    /// The residual stream after the last step's last layer (for checks).
    pub fn hidden(&self) -> Result<Vec<f32>, ModelError> {
        // The sum of the residual's copies (`Tiles::resid_copies`), as its readers take it.
        let all = self.a.x.to_vec().map_err(|e| self.err(e))?;
        let h = self.cfg.hidden_size;
        let mut x = all[..h].to_vec();
        for copy in all[h..].chunks(h) {
            x.iter_mut().zip(copy).for_each(|(a, b)| *a += b);
        }
        Ok(x)
    }
}

/// Activations and scratch for `cfg` with `tiles` (the scratch of the two-phase ops
/// depends on their grids).
fn activations(
    engine: &'static str,
    cfg: &Config,
    tiles: &Tiles,
    dev: &Device,
) -> Result<Activations, ModelError> {
    let e = |x: dsl_runtime::Error| engine_err(engine, x);
    let (h, hd) = (cfg.hidden_size, cfg.head_dim);
    let z16 = |n: usize| dev.zeros::<bf16>(n).map_err(e);
    let z32 = |n: usize| dev.zeros::<f32>(n).map_err(e);
    let zi = |n: usize| dev.zeros::<i32>(n).map_err(e);
    let parts = cfg.num_attention_heads * tiles.attn_splits;
    let lm_blocks = tiles.lm_head.programs(cfg.vocab_size);
    Ok(Activations {
        token: zi(1)?,
        pos: zi(1)?,
        seed: zi(1)?,
        inv_temp: z32(1)?,
        // [copies, hidden]: the fused MLP's copies of the residual (`Tiles::resid_copies`).
        x: z32(tiles.resid_copies.max(1) * h)?,
        x_mlp: z32(h)?,
        qkv: z16(cfg.q_dim() + 2 * cfg.kv_dim())?,
        q: z16(cfg.q_dim())?,
        // A sum a QKV program, at most one a row.
        qk_rot: z32(cfg.q_dim() + cfg.kv_dim())?,
        qk_ss: z32(cfg.q_dim() + cfg.kv_dim())?,
        attn: z16(cfg.q_dim())?,
        act: z16(cfg.intermediate_size)?,
        part_m: z32(parts)?,
        part_l: z32(parts)?,
        part_acc: z32(parts * hd)?,
        tickets: zi(2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads)?,
        logits: z32(cfg.vocab_size)?,
        part_max: z32(lm_blocks)?,
        part_idx: zi(lm_blocks)?,
        next: zi(1)?,
    })
}

/// Per-chunk scratch, `rows` rows of each.
pub struct Scratch {
    pub rows: usize,
    pub tokens: Buffer<i32>,
    /// The rows' residual stream.
    pub x: Buffer<bf16>,
    /// RMSNorm'd rows (input and post-attention norms).
    pub xn: Buffer<bf16>,
    pub qkv: Buffer<bf16>,
    /// Roped queries, `[rows, heads · head_dim]`.
    pub q: Buffer<bf16>,
    pub attn: Buffer<bf16>,
    pub act: Buffer<bf16>,
}

/// Prefill state kept by a [`DeviceModel`] (`crate::prefill` runs it): the tiles and the
/// scratch once allocated.
pub struct Prefill {
    pub tiles: PrefillTiles,
    pub scratch: Option<Scratch>,
}

impl Prefill {
    pub fn new(dev: &Device) -> Prefill {
        Prefill {
            tiles: PrefillTiles::for_device(dev),
            scratch: None,
        }
    }
}
