//! Per-head q/k RMSNorm, rotary embedding and the KV-cache write, one program per head.
//!
//! Programs 0..n_heads take the query heads of the fused QKV output and write the roped
//! queries; programs n_heads..n_heads + n_kv_heads take the key heads, write the roped key
//! into the K cache and copy the matching value head into the V cache.
//!
//! - The norm needs a whole head (it reduces over head_dim), so a head is the unit here;
//!   fusing it into the QKV GEMV would shrink that GEMV's grid to one program per head
//!   (seed 000 measured 14-19x slower), so the GEMV writes raw q/k/v and this op follows.
//! - Rotate-half needs, for element d, its partner d ± head_dim/2. Tiles cannot be indexed,
//!   so the head is loaded twice: once in order and once at the partners' offsets (the
//!   second load hits L1/L2), and both copies are normed with the same 1/rms.
//! - cos/sin are a row of a host-computed table (`reference::rope_table`, [max_seq,
//!   head_dim] f32: the cosines of the position's head_dim/2 angles, then the sines), the
//!   angle `pos * inv_freq` an f32 product and each value Rust's `sin_cos`, as in the
//!   reference, so the rotation is the reference's to the bit. Evaluated in-kernel, sin and
//!   cos cost every thread 8 of each (a [head_dim] tile sits in 8-element chunks, held in
//!   replicas by the program's 512 threads): ~1 µs of a 2.5 µs program on an H100. The
//!   table is 128 · 4 bytes per position (21 MB at 40k), and a step reads one row.
//!
//! KV-cache layout (per layer): `[kv_head][pos][head_dim]`, capacity `max_seq` positions.
//! A head's keys are then one contiguous `[len, head_dim]` block, so attention streams it
//! with full-width, coalesced tile loads; the whole cache is `[layer][kv_head][pos][dim]`
//! and a layer's part is a `Buffer::slice`.
use super::gemv::{normed_gemv_rows, resid_load, rmsnorm_parts};
use dsl_runtime::prelude::*;

/// The head at `src` (D elements of the QKV output) RMS-normed with weight `w` and rotated
/// by the position's cosines and sines (`cs`, a row of the rope table): rotate-half RoPE,
/// the arithmetic of `qk_norm_rope` and `rmsnorm_qkv_rope`, written once.
#[tile_fn]
fn norm_rope(
    src: Ptr<bf16>,
    w: Ptr<bf16>,
    cs: Ptr<f32>,
    eps: f32,
    #[constexpr] D: usize,
) -> Tile<f32, D> {
    let d = arange(0, D);
    let half = D / 2;
    let partner = (d + half) % D;
    let cos_a = load(cs + d % half);
    let sin_a = load(cs + half + d % half);
    // rotate_half: the first half takes -x2 sin, the second half +x1 sin.
    let sign = where_(d < half, -1.0, 1.0);
    let x = load(src + d).to(f32);
    let xp = load(src + partner).to(f32);
    let inv = rms_inv(x * x, D, eps);
    let xn = x * inv * load(w + d).to(f32);
    let xpn = xp * inv * load(w + partner).to(f32);
    xn * cos_a + sign * xpn * sin_a
}

/// A query head (at `q_off` in the QKV output, weight `wq`) and a key head (`k_off`, `wk`)
/// normed and roped at once: `norm_rope`'s arithmetic on a [2, D] tile (row 0 the query, row
/// 1 the key), one reduction for both, so a program that needs both waits for one round
/// trip, not two (`gemv::attn_rope_head_residual`).
#[tile_fn]
pub fn norm_rope_qk(
    qkv: Ptr<bf16>,
    q_off: i32,
    k_off: i32,
    wq: Ptr<bf16>,
    wk: Ptr<bf16>,
    cs: Ptr<f32>,
    eps: f32,
    #[constexpr] D: usize,
) -> Tile<f32, 2, D> {
    let d = arange(0, D);
    let half = D / 2;
    let partner = (d + half) % D;
    let cos_a = load(cs + d % half).expand_dims(0);
    let sin_a = load(cs + half + d % half).expand_dims(0);
    let sign = where_(d < half, -1.0, 1.0).expand_dims(0);
    let row = arange(0, 2);
    let first = (row == 0).expand_dims(1);
    let base = where_(row == 0, q_off, k_off).expand_dims(1);
    let x = load(qkv + base + d.expand_dims(0)).to(f32);
    let xp = load(qkv + base + partner.expand_dims(0)).to(f32);
    let w = where_(
        first,
        load(wq + d).to(f32).expand_dims(0),
        load(wk + d).to(f32).expand_dims(0),
    );
    let wp = where_(
        first,
        load(wq + partner).to(f32).expand_dims(0),
        load(wk + partner).to(f32).expand_dims(0),
    );
    let inv = rsqrt(sum(x * x, 1) / D as f32 + eps).expand_dims(1);
    let xn = x * inv * w;
    let xpn = xp * inv * wp;
    xn * cos_a + sign * xpn * sin_a
}

/// q/k RMSNorm + RoPE + K/V cache write for one head per program (the kernels engine's
/// op; the megakernel finishes heads in `rmsnorm_qkv_rope` with the same `norm_rope`).
#[kernel(helpers(norm_rope))]
pub fn qk_norm_rope(
    qkv: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    rope: Ptr<f32>,
    pos: Ptr<i32>,
    q_out: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    #[constexpr] D: usize,
) {
    let head = program_id(0);
    let p = load(pos);
    let d = arange(0, D);
    // This position's cosines and sines: a row of the host's table.
    let cs = rope + p * D;
    if head < n_heads {
        let base = head * D;
        store(
            q_out + base + d,
            norm_rope(qkv + base, q_norm, cs, eps, D).to(bf16),
        );
    } else {
        let kvh = head - n_heads;
        let base = n_heads * D + kvh * D;
        let slot = (kvh * max_seq + p) * D;
        store(
            k_cache + slot + d,
            norm_rope(qkv + base, k_norm, cs, eps, D).to(bf16),
        );
        // V needs no norm or rope: straight into the cache.
        store(v_cache + slot + d, load(qkv + base + n_kv_heads * D + d));
    }
}

/// Head `unit` of the QKV output (query heads, then key heads, then value heads: D
/// consecutive values each) finished: a query head normed and roped into `q_out`, a key
/// head into its K-cache slot at the position, a value head copied into its V-cache slot.
#[tile_fn]
fn finish_head(
    qkv: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    rope: Ptr<f32>,
    pos: Ptr<i32>,
    q_out: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    unit: i32,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    #[constexpr] D: usize,
) {
    let p = load(pos);
    let cs = rope + p * D;
    let d = arange(0, D);
    let src = qkv + unit * D;
    if unit < n_heads {
        store(
            q_out + unit * D + d,
            norm_rope(src, q_norm, cs, eps, D).to(bf16),
        );
    } else {
        let kvh = unit - n_heads;
        if kvh < n_kv_heads {
            let slot = (kvh * max_seq + p) * D;
            store(
                k_cache + slot + d,
                norm_rope(src, k_norm, cs, eps, D).to(bf16),
            );
        } else {
            // V needs no norm or rope: straight into the cache.
            let slot = ((kvh - n_kv_heads) * max_seq + p) * D;
            store(v_cache + slot + d, load(src + d));
        }
    }
}

/// Rows [p·R, p·R + R) of the residual (the sum of its COPIES copies) into `x_copy`: with
/// `COPY` the QKV stage leaves the fused MLP's input holding the layer's residual, and
/// o_proj adds into it (`gemv::gemv_head_residual`, `MegakernelOptions::o_heads`).
#[tile_fn]
fn copy_resid_rows(
    x: Ptr<f32>,
    x_copy: Ptr<f32>,
    p: i32,
    k: i32,
    #[constexpr] R: usize,
    #[constexpr] COPIES: usize,
) {
    let rows = p * R + arange(0, R);
    let mask = rows < k;
    store(x_copy + rows, resid_load(x, rows, mask, k, COPIES), mask);
}

/// The input RMSNorm + QKV GEMV (`rmsnorm_gemv`) and `qk_norm_rope` in one grid: every
/// program writes its BM rows of `qkv`, and the last of the D / BM programs of each head
/// (a query, key or value head: D consecutive rows) finishes it (`finish_head`).
/// `tickets[unit]` counts a head's finished programs (the scalar atomic orders each
/// program's rows before its count and the last one's loads after every count); the last
/// one puts it back to 0. Needs D % BM == 0 (`Tiles` makes it so).
#[kernel(helpers(normed_gemv_rows, resid_load, finish_head, norm_rope, copy_resid_rows))]
pub fn rmsnorm_qkv_rope(
    x: Ptr<f32>,
    x_copy: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    qkv: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    rope: Ptr<f32>,
    pos: Ptr<i32>,
    q_out: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    tickets: Ptr<i32>,
    m: i32,
    k: i32,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] D: usize,
    #[constexpr] COPIES: usize,
    #[constexpr] COPY: bool,
    #[constexpr] COPY_ROWS: usize,
    // false: the heads stay raw in `qkv`, no ticket; the stage that reads them norms and
    // ropes them itself (`gemv::attn_rope_head_residual`).
    #[constexpr] FINISH: bool,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let row_mask = rows < m;
    let out = normed_gemv_rows(x, g, w, rows, row_mask, k, eps, BK, COPIES);
    // After the weights and x (its rows are then in L1), before the ticket.
    if COPY {
        copy_resid_rows(x, x_copy, program_id(0), k, COPY_ROWS, COPIES);
    }
    store(qkv + rows, out.to(bf16), row_mask);
    if FINISH {
        let unit = program_id(0) * BM / D;
        let done = atomic_add(tickets + unit, 1);
        if done == D / BM - 1 {
            store(tickets + unit, 0);
            finish_head(
                qkv, q_norm, k_norm, rope, pos, q_out, k_cache, v_cache, unit, n_heads, n_kv_heads,
                max_seq, eps, D,
            );
        }
    }
}

/// `rmsnorm_qkv_rope` for a program that owns `TILES` consecutive `BM`-row tiles in one k
/// step (`k <= BK`), as `rmsnorm_gate_up_silu_tiles` does for gate/up: the norm (x's load,
/// its squares' reduction, x·g) once per program, and each tile's weights loaded while the
/// previous one reduces (`wt` carried into the next iteration). Each tile counts itself
/// into its head's ticket and the head's last tile finishes it, as one program per tile
/// does. The same arithmetic, tile by tile, as `rmsnorm_qkv_rope` with one k step: the
/// same bits. Needs D % BM == 0.
#[kernel(helpers(resid_load, rmsnorm_parts, finish_head, norm_rope, copy_resid_rows))]
pub fn rmsnorm_qkv_rope_tiles(
    x: Ptr<f32>,
    x_copy: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    qkv: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    rope: Ptr<f32>,
    pos: Ptr<i32>,
    q_out: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    tickets: Ptr<i32>,
    m: i32,
    k: i32,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] D: usize,
    #[constexpr] TILES: usize,
    #[constexpr] COPIES: usize,
    #[constexpr] COPY: bool,
    #[constexpr] COPY_ROWS: usize,
    // false: no ticket and no head finished, as `rmsnorm_qkv_rope`'s FINISH.
    #[constexpr] FINISH: bool,
) {
    let cols = arange(0, BK);
    let col_mask = cols < k;
    let first = program_id(0) * TILES;
    // The first tile's weights, before anything another stage writes; each iteration loads
    // the next one's.
    let rows0 = first * BM + arange(0, BM);
    let mask0 = (rows0 < m).expand_dims(1) & col_mask.expand_dims(0);
    let mut wt = load(
        w + rows0.expand_dims(1) * k + cols.expand_dims(0),
        mask0,
        0.0,
    );
    let xv = resid_load(x, cols, col_mask, k, COPIES);
    // After the weights and x (its rows are then in L1).
    if COPY {
        copy_resid_rows(x, x_copy, program_id(0), k, COPY_ROWS, COPIES);
    }
    let (inv, xg) = rmsnorm_parts(xv, g, cols, col_mask, k, eps);
    for t in 0..TILES {
        let tile = first + t;
        let rows = tile * BM + arange(0, BM);
        let row_mask = rows < m;
        let mut acc = zeros([BM, BK], f32);
        acc += wt.to(f32) * xg;
        // The next tile's weights (none past the last tile) stream in while this one reduces.
        let next = rows + BM;
        let next_mask = ((next < m) & (t + 1 < TILES)).expand_dims(1) & col_mask.expand_dims(0);
        wt = load(
            w + next.expand_dims(1) * k + cols.expand_dims(0),
            next_mask,
            0.0,
        );
        store(qkv + rows, (sum(acc, 1) * inv).to(bf16), row_mask);
        // A tile past the last row counts nothing (its head's count would never reset).
        if FINISH & (tile * BM < m) {
            let unit = tile * BM / D;
            let done = atomic_add(tickets + unit, 1);
            if done == D / BM - 1 {
                store(tickets + unit, 0);
                finish_head(
                    qkv, q_norm, k_norm, rope, pos, q_out, k_cache, v_cache, unit, n_heads,
                    n_kv_heads, max_seq, eps, D,
                );
            }
        }
    }
}

/// 1 / rms of QKV head `unit` from its D / BM programs' sums of squares (`ss`, written by
/// `rmsnorm_qkv_rope_pairs`): a few scalar loads added in order, no reduction over the head.
#[tile_fn]
pub fn head_rms_inv(
    ss: Ptr<f32>,
    unit: i32,
    eps: f32,
    #[constexpr] D: usize,
    #[constexpr] BM: usize,
) -> f32 {
    let mut s = 0.0;
    for i in 0..D / BM {
        s += load(ss + unit * (D / BM) + i);
    }
    rsqrt(s / D as f32 + eps)
}

/// `rmsnorm_qkv_rope` with no ticket and no head finisher (`Tiles::qkv_pairs`, a
/// candidate): program p owns BM / 2 dimensions of its head's first half and their RoPE
/// partners D / 2 later (two [BM / 2, BK] weight tiles), so it rotates its own rows. RMSNorm
/// scales a head by one scalar and the rotation is linear (rope(x·inv·w) = inv·rope(x·w)),
/// so a q or k program writes its rows weighted and rotated, in f32, into `qk_rot` and their
/// sum of squares into `qk_ss[p]`, and the head's reader applies its 1/rms
/// (`head_rms_inv`, `gemv::attn_scale_head_residual`); a v program stores its rows in the V
/// cache. No program waits for another, and none does more than the rest. The GEMV's rows
/// are rounded to bf16 first, as `rmsnorm_qkv_rope` leaves them in `qkv`. One k step
/// (k <= BK); D % BM == 0 and BM even (`megakernel_engine::qkv_pairs_fit`).
#[kernel(helpers(resid_load, rmsnorm_parts, copy_resid_rows))]
pub fn rmsnorm_qkv_rope_pairs(
    x: Ptr<f32>,
    x_copy: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    rope: Ptr<f32>,
    pos: Ptr<i32>,
    qk_rot: Ptr<f32>,
    qk_ss: Ptr<f32>,
    v_cache: Ptr<bf16>,
    m: i32,
    k: i32,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] D: usize,
    #[constexpr] COPIES: usize,
    #[constexpr] COPY: bool,
    #[constexpr] COPY_ROWS: usize,
) {
    let p = program_id(0);
    let unit = p / (D / BM);
    let half = D / 2;
    // This program's dimensions in the head's first half, and their weight rows.
    let da = (p % (D / BM)) * (BM / 2) + arange(0, BM / 2);
    let ra = unit * D + da;
    let rb = ra + half;
    let cols = arange(0, BK);
    let col_mask = cols < k;
    // The weights first: nothing they need is written by another stage.
    let wa = load(
        w + ra.expand_dims(1) * k + cols.expand_dims(0),
        (ra < m).expand_dims(1) & col_mask.expand_dims(0),
        0.0,
    );
    let wb = load(
        w + rb.expand_dims(1) * k + cols.expand_dims(0),
        (rb < m).expand_dims(1) & col_mask.expand_dims(0),
        0.0,
    );
    // The rotation's inputs: nothing another stage of the layer writes either.
    let at = load(pos);
    let cs = rope + at * D;
    let cos_a = load(cs + da);
    let sin_a = load(cs + half + da);
    let is_q = unit < n_heads;
    let nwa = where_(is_q, load(q_norm + da).to(f32), load(k_norm + da).to(f32));
    let nwb = where_(
        is_q,
        load(q_norm + da + half).to(f32),
        load(k_norm + da + half).to(f32),
    );
    let xv = resid_load(x, cols, col_mask, k, COPIES);
    // After the weights and x (its rows are then in L1).
    if COPY {
        copy_resid_rows(x, x_copy, p, k, COPY_ROWS, COPIES);
    }
    let (inv, xg) = rmsnorm_parts(xv, g, cols, col_mask, k, eps);
    let ya = (sum(wa.to(f32) * xg, 1) * inv).to(bf16);
    let yb = (sum(wb.to(f32) * xg, 1) * inv).to(bf16);
    // Both halves in one [2, BM / 2] store (row 0 the first half's dimensions).
    let first = (arange(0, 2) == 0).expand_dims(1);
    let dims = (arange(0, 2) * half).expand_dims(1) + da.expand_dims(0);
    if unit < n_heads + n_kv_heads {
        let a = ya.to(f32);
        let b = yb.to(f32);
        let xa = a * nwa;
        let xb = b * nwb;
        // rotate_half: the first half takes -x2 sin, the second half +x1 sin.
        let rot = where_(
            first,
            (xa * cos_a - xb * sin_a).expand_dims(0),
            (xb * cos_a + xa * sin_a).expand_dims(0),
        );
        store(qk_rot + unit * D + dims, rot);
        store(qk_ss + p, sum(a * a + b * b, 0));
    } else {
        // V needs no norm or rope: straight into the cache.
        let slot = ((unit - n_heads - n_kv_heads) * max_seq + at) * D;
        store(
            v_cache + slot + dims,
            where_(first, ya.expand_dims(0), yb.expand_dims(0)),
        );
    }
}
