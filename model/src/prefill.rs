//! Prefill: a prompt through the decoder in chunks of T rows, with the `dot` kernels of
//! `kernels/prefill.rs`, for both device engines (they share [`DeviceModel`]).
//!
//! A prompt of N tokens at `start_pos` is cut into chunks of at most `PrefillTiles::chunk`
//! rows; each chunk runs every layer over its rows and writes its K/V into the KV cache at
//! positions start_pos + i, the layout decode reads, so the next decode step continues
//! from the cache with no copy. Later chunks attend to the earlier ones through the cache.
//! Scratch (the rows' residual stream, normed rows, qkv, q, attention output, MLP
//! activation) is sized by the chunk, allocated at the first prefill and kept, so memory
//! stays bounded whatever the prompt's length.
//!
//! After the last chunk, the final norm, the lm_head and the argmax run on the last row
//! only, with the decode kernels (`lm_head_argmax`, `argmax_merge`): the logits, the fused
//! argmax (or Gumbel-max sample) and the device's token / position buffers end exactly as a
//! decode step at the prompt's last position leaves them.
use crate::device_model::{DeviceModel, Scratch};
use crate::error::ModelError;
use crate::kernels::norm;
use crate::kernels::prefill::{
    embed_rows, gemm_nn_residual, gemm_nt, gemm_nt_gate_up_silu, gemm_nt_residual,
    prefill_attention, qk_norm_rope_rows, widen,
};
use dsl_runtime::{bf16, cdiv, ptr, Buffer, BufferView, Element, Launch};

/// How a device engine feeds a prompt, for reports.
pub fn prompt_mode(m: &DeviceModel) -> String {
    format!(
        "prefill, chunks of up to {} tokens",
        m.prefill.tiles.chunk.min(m.max_seq)
    )
}

fn layer_view<T: Element>(b: &Buffer<T>, l: usize, n: usize) -> BufferView<'_, T> {
    b.slice(l * n..(l + 1) * n)
}

/// Checks a prefill's tokens and positions against the model and its cache.
fn check(m: &DeviceModel, tokens: &[u32], start_pos: usize) -> Result<(), ModelError> {
    if tokens.is_empty() {
        return Err(m.err("prefill of no tokens"));
    }
    let vocab = m.cfg.vocab_size;
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= vocab) {
        return Err(m.err(format!("token id {bad} ≥ vocab_size {vocab}")));
    }
    if start_pos > m.cached {
        return Err(m.err(format!(
            "position {start_pos} skips ahead of the {} cached positions",
            m.cached
        )));
    }
    let end = start_pos + tokens.len();
    if end > m.max_seq {
        return Err(m.err(format!(
            "a prompt of {} tokens at position {start_pos} needs {end} positions, beyond the KV cache's {} positions (--max-context)",
            tokens.len(),
            m.max_seq
        )));
    }
    Ok(())
}

/// Allocates the chunk scratch if it is missing (or was sized for a smaller chunk).
fn ensure_scratch(m: &mut DeviceModel) -> Result<(), ModelError> {
    let rows = m.prefill.tiles.chunk.clamp(1, m.max_seq);
    if m.prefill.scratch.as_ref().is_some_and(|s| s.rows >= rows) {
        return Ok(());
    }
    m.prefill.scratch = None; // free the old one first
    let cfg = &m.cfg;
    let engine = m.engine;
    let e = |x: dsl_runtime::Error| crate::device_model::engine_err(engine, x);
    let z16 = |n: usize| m.dev.zeros::<bf16>(n).map_err(e);
    let (h, q_dim) = (cfg.hidden_size, cfg.q_dim());
    let s = Scratch {
        rows,
        tokens: m.dev.zeros::<i32>(rows).map_err(e)?,
        x: z16(rows * h)?,
        xn: z16(rows * h)?,
        qkv: z16(rows * (q_dim + 2 * cfg.kv_dim()))?,
        q: z16(rows * q_dim)?,
        attn: z16(rows * q_dim)?,
        act: z16(rows * cfg.intermediate_size)?,
    };
    m.prefill.scratch = Some(s);
    Ok(())
}

/// Runs `tokens` at positions start_pos.. through every layer, writing their K/V into the
/// cache, then the lm_head on the last position: afterwards the logits, the next token and
/// the device's token / position buffers are what a decode step at the last position
/// leaves. `m.cached` becomes start_pos + tokens.len().
pub fn run(m: &mut DeviceModel, tokens: &[u32], start_pos: usize) -> Result<(), ModelError> {
    check(m, tokens, start_pos)?;
    ensure_scratch(m)?;
    let rows = m.prefill.scratch.as_ref().map_or(1, |s| s.rows);
    // Positions before start_pos stay; rewinding needs nothing more (attention reads
    // positions 0 ..= its own only).
    m.cached = start_pos;
    m.on_device = None;
    let mut pos = start_pos;
    for chunk in tokens.chunks(rows) {
        let mut padded: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
        padded.resize(rows, 0);
        let engine = m.engine;
        let scratch = m.prefill.scratch.as_mut().expect("allocated above");
        scratch
            .tokens
            .copy_from(&padded)
            .map_err(|e| crate::device_model::engine_err(engine, e))?;
        launch_chunk(m, chunk.len(), pos).map_err(|e| m.err(e))?;
        pos += chunk.len();
        m.cached = pos;
    }
    // The prompt's last row, in the last chunk's scratch.
    let last = (tokens.len() - 1) % rows;
    // The lm_head reads the position for its Gumbel noise, and argmax_merge advances it.
    m.a.pos
        .copy_from(&[(pos - 1) as i32])
        .map_err(|e| crate::device_model::engine_err(m.engine, e))?;
    launch_head(m, last).map_err(|e| m.err(e))?;
    Ok(())
}

/// Every layer over the `t` rows of the scratch at positions pos.. .
fn launch_chunk(m: &DeviceModel, t: usize, pos: usize) -> Result<(), dsl_runtime::Error> {
    let (cfg, w, dev) = (&m.cfg, &m.w, &m.dev);
    let p = &m.prefill.tiles;
    let s = m.prefill.scratch.as_ref().expect("allocated by run");
    let (h, hd, inter) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let (heads, kv_heads) = (cfg.num_attention_heads, cfg.num_key_value_heads);
    let (q_dim, qkv_rows) = (cfg.q_dim(), cfg.q_dim() + 2 * cfg.kv_dim());
    let eps = cfg.rms_norm_eps as f32;
    let block = m.tiles.embed_block;
    let rows_launch = |n: usize| Launch::grid(n as u32).warps(p.row_warps);
    let gemm = |n: usize| {
        Launch::grid((t.div_ceil(p.gemm_bm) * n.div_ceil(p.gemm_bn)) as u32)
            .warps(p.gemm_warps)
            .stages(p.gemm_stages)
    };
    let (ti, hi) = (t as i32, h as i32);

    let (bm, bn, bk, group_m) = (p.gemm_bm, p.gemm_bn, p.gemm_bk, p.group_m);
    embed_rows::launch_with(
        dev,
        &Launch::grid((cdiv(h as i64, block as i64) as u32, t as u32)).warps(p.row_warps),
        &embed_rows::Args {
            table: ptr(&w.embed_tokens),
            tokens: ptr(&s.tokens),
            x: ptr(&s.x),
            hidden: hi,
        },
        &embed_rows::Consts { BLOCK: block },
    )?;
    let cache_per_layer = kv_heads * m.max_seq * hd;
    for l in 0..cfg.num_hidden_layers {
        let (k_cache, v_cache) = (
            layer_view(&m.k_cache, l, cache_per_layer),
            layer_view(&m.v_cache, l, cache_per_layer),
        );
        // Attention block.
        norm::rmsnorm::launch_with(
            dev,
            &rows_launch(t),
            &norm::rmsnorm::Args {
                x: ptr(&s.x),
                w: ptr(&layer_view(&w.input_layernorm, l, h)),
                y: ptr(&s.xn),
                n_cols: hi,
                eps,
            },
            &norm::rmsnorm::Consts { BLOCK: block },
        )?;
        gemm_nt::launch_with(
            dev,
            &gemm(qkv_rows),
            &gemm_nt::Args {
                x: ptr(&s.xn),
                w: ptr(&layer_view(&w.qkv_proj, l, qkv_rows * h)),
                y: ptr(&s.qkv),
                m: ti,
                n: qkv_rows as i32,
                k: hi,
            },
            &gemm_nt::Consts {
                BM: bm,
                BN: bn,
                BK: bk,
                GROUP_M: group_m,
            },
        )?;
        qk_norm_rope_rows::launch_with(
            dev,
            &Launch::grid(((heads + kv_heads) as u32, t.div_ceil(p.rope_bt) as u32))
                .warps(p.row_warps),
            &qk_norm_rope_rows::Args {
                qkv: ptr(&s.qkv),
                q_norm: ptr(&layer_view(&w.q_norm, l, hd)),
                k_norm: ptr(&layer_view(&w.k_norm, l, hd)),
                rope: ptr(&w.rope),
                q_out: ptr(&s.q),
                k_cache: ptr(&k_cache),
                v_cache: ptr(&v_cache),
                t_len: ti,
                start_pos: pos as i32,
                n_heads: heads as i32,
                n_kv_heads: kv_heads as i32,
                max_seq: m.max_seq as i32,
                eps,
            },
            &qk_norm_rope_rows::Consts {
                D: hd,
                BT: p.rope_bt,
            },
        )?;
        prefill_attention::launch_with(
            dev,
            &Launch::grid((t.div_ceil(p.attn_bm) as u32, heads as u32))
                .warps(p.attn_warps)
                .stages(p.attn_stages),
            &prefill_attention::Args {
                q: ptr(&s.q),
                k_cache: ptr(&k_cache),
                v_cache: ptr(&v_cache),
                out: ptr(&s.attn),
                t_len: ti,
                start_pos: pos as i32,
                n_heads: heads as i32,
                group: cfg.gqa_group() as i32,
                max_seq: m.max_seq as i32,
                scale: 1.0 / (hd as f32).sqrt(),
            },
            &prefill_attention::Consts {
                BM: p.attn_bm,
                BN: p.attn_bn,
                D: hd,
            },
        )?;
        let residual = |x: &Buffer<bf16>, w: BufferView<'_, bf16>, k: usize| {
            gemm_nt_residual::launch_with(
                dev,
                &gemm(h),
                &gemm_nt_residual::Args {
                    x: ptr(x),
                    w: ptr(&w),
                    res: ptr(&s.x),
                    m: ti,
                    n: hi,
                    k: k as i32,
                },
                &gemm_nt_residual::Consts {
                    BM: bm,
                    BN: bn,
                    BK: bk,
                    GROUP_M: group_m,
                },
            )
        };
        residual(&s.attn, layer_view(&w.o_proj, l, h * q_dim), q_dim)?;

        // MLP block.
        norm::rmsnorm::launch_with(
            dev,
            &rows_launch(t),
            &norm::rmsnorm::Args {
                x: ptr(&s.x),
                w: ptr(&layer_view(&w.post_attention_layernorm, l, h)),
                y: ptr(&s.xn),
                n_cols: hi,
                eps,
            },
            &norm::rmsnorm::Consts { BLOCK: block },
        )?;
        gemm_nt_gate_up_silu::launch_with(
            dev,
            &gemm(inter),
            &gemm_nt_gate_up_silu::Args {
                x: ptr(&s.xn),
                w: ptr(&layer_view(&w.gate_up_proj, l, 2 * inter * h)),
                act: ptr(&s.act),
                m: ti,
                inter: inter as i32,
                k: hi,
            },
            &gemm_nt_gate_up_silu::Consts {
                BM: bm,
                BN: bn,
                BK: bk,
                GROUP_M: group_m,
            },
        )?;
        let down = layer_view(&w.down_proj, l, h * inter);
        if w.down_transposed {
            // [inter, hidden]: the megakernel engine's, for its fused MLP.
            gemm_nn_residual::launch_with(
                dev,
                &gemm(h),
                &gemm_nn_residual::Args {
                    x: ptr(&s.act),
                    w: ptr(&down),
                    res: ptr(&s.x),
                    m: ti,
                    n: hi,
                    k: inter as i32,
                },
                &gemm_nn_residual::Consts {
                    BM: bm,
                    BN: bn,
                    BK: bk,
                    GROUP_M: group_m,
                },
            )?;
        } else {
            residual(&s.act, down, inter)?;
        }
    }
    Ok(())
}

/// Final norm + lm_head + argmax on scratch row `row` (the prompt's last), with the decode
/// kernels (the row widened into the decode's f32 residual stream first); `a.pos` holds
/// that row's position.
fn launch_head(m: &DeviceModel, row: usize) -> Result<(), dsl_runtime::Error> {
    let (t, a) = (&m.tiles, &m.a);
    let s = m.prefill.scratch.as_ref().expect("allocated by run");
    let h = m.cfg.hidden_size;
    widen::launch_with(
        &m.dev,
        &Launch::grid(h.div_ceil(t.embed_block) as u32).warps(t.warps),
        &widen::Args {
            src: ptr(&s.x.slice(row * h..(row + 1) * h)),
            x: ptr(&a.x),
            n: h as i32,
        },
        &widen::Consts {
            BLOCK: t.embed_block,
        },
    )?;
    m.launch_head()
}
