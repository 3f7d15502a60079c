//! The GEMVs of decode (M = 1): every matmul of the step reads a bf16 weight matrix
//! W[m, k] (PyTorch's `[out, in]`, row-major) once and does one multiply-add per element.
//!
//! Tile strategy (all three kernels, and `mlp.rs`, `lm_head.rs`): a program owns BM output
//! rows and walks k in BK-wide steps with a [BM, BK] tile (rows over warps, columns over
//! lanes: each row segment is a contiguous, coalesced read). Partial products accumulate
//! per lane in an f32 [BM, BK] tile; the row sums happen once, after the loop. BK covers
//! k in one step where it can and BM spreads the rows evenly over the GPU's SMs (see
//! `TileRule`): at M = 1 the bytes each SM has in flight decide the speed.
//!
//! Fusions that keep the grid full (seed 000's rule):
//! - `rmsnorm_gemv`: the RMSNorm that feeds the GEMV is *recomputed redundantly*: every
//!   program sums x² over the whole of x (k elements, L2-resident) in the same loop that
//!   streams its weight rows, and scales its dot products by 1/rms(x) at the end
//!   (W · (x·g·inv) = inv · (W · (x·g))). No separate launch, no grid-wide barrier, no
//!   reduction before the first weight load, and the normed vector never goes to memory.
//! - `gemv_residual`: the residual add is the epilogue; each program reads and writes only
//!   its own rows of the residual stream (f32), so it updates it in place.
use super::attention::{attend_head_cur, merged_head, softmax_start, softmax_tile};
use super::rope::{head_rms_inv, norm_rope_qk};
use dsl_runtime::prelude::*;

/// The residual stream at `cols`: the sum of its `COPIES` copies (`x` is `[COPIES, n]`).
/// The megakernel's fused MLP adds its programs' partial sums into several copies, so fewer
/// atomics queue on each address (`Tiles::resid_copies`); everywhere else COPIES is 1 and
/// this is one load.
#[tile_fn]
pub fn resid_load(
    x: Ptr<f32>,
    cols: Tile<i32, N>,
    mask: Tile<bool, N>,
    n: i32,
    #[constexpr] COPIES: usize,
) -> Tile<f32, N> {
    let mut v = load(x + cols, mask, 0.0);
    for c in 1..COPIES {
        v += load(x + c * n + cols, mask, 0.0);
    }
    v
}

/// An RMSNorm over a whole row `xv` (one k step, `cols` the row's columns) in the two parts
/// a GEMV takes separately: 1/rms(x), applied once to the dot products, and x·g as a
/// [1, BK] row to multiply the weight tiles by (W · (x·g·inv) = inv · (W · (x·g))).
#[tile_fn]
pub fn rmsnorm_parts(
    xv: Tile<f32, BK>,
    g: Ptr<bf16>,
    cols: Tile<i32, BK>,
    col_mask: Tile<bool, BK>,
    k: i32,
    eps: f32,
) -> (f32, Tile<f32, 1, BK>) {
    (
        rms_inv(xv * xv, k, eps),
        (xv * load(g + cols, col_mask, 0.0).to(f32)).expand_dims(0),
    )
}

/// `W[rows, :] · (x / rms(x) * g)` for a bf16 W of row length `k`: the RMSNorm's squares
/// summed in the loop that streams the weight rows, its scalar applied once at the end
/// (W · (x * g * inv) = inv · (W · (x * g))).
#[tile_fn]
pub fn normed_gemv_rows(
    x: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    rows: Tile<i32, BM>,
    row_mask: Tile<bool, BM>,
    k: i32,
    eps: f32,
    #[constexpr] BK: usize,
    #[constexpr] COPIES: usize,
) -> Tile<f32, BM> {
    let mut acc = zeros([BM, BK], f32);
    let mut sumsq = zeros([BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let col_mask = cols < k;
        let tile_mask = row_mask.expand_dims(1) & col_mask.expand_dims(0);
        // The weight tile first: nothing it needs waits on the norm.
        let wv = load(
            w + rows.expand_dims(1) * k + cols.expand_dims(0),
            tile_mask,
            0.0,
        )
        .to(f32);
        let xv = resid_load(x, cols, col_mask, k, COPIES);
        sumsq += xv * xv;
        acc += wv * (xv * load(g + cols, col_mask, 0.0).to(f32)).expand_dims(0);
    }
    let inv = rms_inv(sumsq, k, eps);
    sum(acc, 1) * inv
}

/// y = W · (x / rms(x) * g): input RMSNorm fused into the (QKV) projection.
#[kernel(helpers(normed_gemv_rows, resid_load))]
pub fn rmsnorm_gemv(
    x: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    y: Ptr<bf16>,
    m: i32,
    k: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let row_mask = rows < m;
    let out = normed_gemv_rows(x, g, w, rows, row_mask, k, eps, BK, 1);
    store(y + rows, out.to(bf16), row_mask);
}

/// res += W · x: a projection whose output is added to the residual stream (o_proj, down).
#[kernel]
pub fn gemv_residual(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    res: Ptr<f32>,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let row_mask = rows < m;
    // The residual stream is f32 (`embedding.rs` says why). One program owns each row, so
    // adding in place is `res[r] + y` rounded once, as a load and a store would be, with no
    // load's round trip on the way.
    atomic_add(res + rows, gemv_rows(w, x, rows, row_mask, k, BK), row_mask);
}

/// `gemv_residual_copy`'s rows of the new residual into copy 0 and `copy`, and copies
/// 1.. zeroed for the MLP's adds.
#[tile_fn]
fn store_residual(
    res: Ptr<f32>,
    copy: Ptr<f32>,
    rows: Tile<i32, BM>,
    row_mask: Tile<bool, BM>,
    after: Tile<f32, BM>,
    m: i32,
    #[constexpr] COPIES: usize,
) {
    store(res + rows, after, row_mask);
    store(copy + rows, after, row_mask);
    for c in 1..COPIES {
        store(res + c * m + rows, zeros([BM], f32), row_mask);
    }
}

/// `gemv_residual` that also leaves the updated rows in `copy`: o_proj's form when the
/// megakernel fuses the MLP into one stage (`mlp::rmsnorm_mlp_tiles`), whose norm reads the
/// copy while its programs add into `res`. The rows of `res` are loaded before the weights
/// stream, so the add costs no round trip at the end; with `WEIGHTS_FIRST` the weight tile
/// comes first, before anything another stage writes (with `MegaOptions::wait_in_body` it
/// is in flight while the stage waits for attention: `Tiles::o_weights_first`). `res[r] +
/// y` rounds once either way, as `gemv_residual`'s atomic add does: the same bits.
///
/// With `COPIES` > 1 the residual is `[COPIES, m]` (the fused MLP adds into all of them):
/// this stage folds them, `res[0] = Σ res[c] + y`, and zeroes the others for the MLP.
#[kernel(helpers(resid_load, store_residual))]
pub fn gemv_residual_copy(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    res: Ptr<f32>,
    copy: Ptr<f32>,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] COPIES: usize,
    #[constexpr] WEIGHTS_FIRST: bool,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let row_mask = rows < m;
    if WEIGHTS_FIRST {
        let y = gemv_rows(w, x, rows, row_mask, k, BK);
        let after = resid_load(res, rows, row_mask, m, COPIES) + y;
        store_residual(res, copy, rows, row_mask, after, m, COPIES);
    } else {
        let before = resid_load(res, rows, row_mask, m, COPIES);
        let after = before + gemv_rows(w, x, rows, row_mask, k, BK);
        store_residual(res, copy, rows, row_mask, after, m, COPIES);
    }
}

/// `gemv_residual` for a program that owns `TILES` consecutive `BM`-row tiles in one k step
/// (`k <= BK`): x loaded once per program instead of once per tile, and each tile's weights
/// loaded while the previous one reduces (`wv` carried into the next iteration), as
/// `rmsnorm_gate_up_silu_tiles` does for gate/up. The same arithmetic, tile by tile, as
/// `gemv_residual` with one k step (`gemv_rows`): the same bits. A knob of the
/// megakernel's o_proj and down (`Tiles::with_gemv_tiles`; off: `megakernel_engine::GEMV_TILES`
/// says why).
#[kernel]
pub fn gemv_residual_tiles(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    res: Ptr<f32>,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] TILES: usize,
) {
    let cols = arange(0, BK);
    let col_mask = cols < k;
    let first = program_id(0) * TILES;
    // The first tile's weights before x, which another stage writes; each iteration loads
    // the next one's.
    let rows0 = first * BM + arange(0, BM);
    let mask0 = (rows0 < m).expand_dims(1) & col_mask.expand_dims(0);
    let mut wv = load(
        w + rows0.expand_dims(1) * k + cols.expand_dims(0),
        mask0,
        0.0,
    );
    let xv = load(x + cols, col_mask, 0.0).to(f32).expand_dims(0);
    for t in 0..TILES {
        let rows = (first + t) * BM + arange(0, BM);
        let row_mask = rows < m;
        // Into zeros, as `gemv_rows` accumulates (the same bits, -0.0 included).
        let mut acc = zeros([BM, BK], f32);
        acc += wv.to(f32) * xv;
        // The next tile's weights (none past the last tile or past m) stream in while this
        // one reduces.
        let next = rows + BM;
        let next_mask = ((next < m) & (t + 1 < TILES)).expand_dims(1) & col_mask.expand_dims(0);
        wv = load(
            w + next.expand_dims(1) * k + cols.expand_dims(0),
            next_mask,
            0.0,
        );
        // One program owns each row: the add rounds as `gemv_residual`'s does.
        atomic_add(res + rows, sum(acc, 1), row_mask);
    }
}

/// Head `head`'s share `y` of o_proj's rows `rows` added into the fused MLP's input `copy`
/// and into copy head % COPIES of the residual `res` (`[COPIES, m]`), with f32 atomics.
#[tile_fn]
fn add_head_rows(
    res: Ptr<f32>,
    copy: Ptr<f32>,
    rows: Tile<i32, BM>,
    row_mask: Tile<bool, BM>,
    y: Tile<f32, BM>,
    head: i32,
    m: i32,
    #[constexpr] COPIES: usize,
) {
    atomic_add(copy + rows, y, row_mask);
    atomic_add(res + (head % COPIES) * m + rows, y, row_mask);
}

/// The [BM, D] block of W at rows `rows` and head `head`'s columns (`k`: W's row length),
/// rows where `mask` is false zero.
#[tile_fn]
fn load_head_block(
    w: Ptr<bf16>,
    rows: Tile<i32, BM>,
    mask: Tile<bool, BM>,
    head: i32,
    k: i32,
    #[constexpr] D: usize,
) -> Tile<bf16, BM, D> {
    let d = arange(0, D);
    load(
        w + rows.expand_dims(1) * k + head * D + d.expand_dims(0),
        mask.expand_dims(1),
        0.0,
    )
}

/// o_proj split over the query heads, each program merging its head's attention first:
/// program (h, j) merges head h's SPLITS attention partials (`attention::merged_head`, in
/// f32), multiplies them by the [BM, D] block of W at rows j·BM.. and columns h·D.., and
/// adds its BM partial sums into `copy` (the fused MLP's input, which the QKV stage left
/// holding the layer's residual) and into copy h % COPIES of the residual `res`, with f32
/// atomics. It replaces `attn_split_merge`'s merge (a ticket and a round trip per head) and
/// o_proj's load of the merged heads: the megakernel's o_proj up to hidden 2560
/// (`megakernel_engine::o_heads_rule`). `m`: hidden size, `k`: q_dim (W's row length).
#[kernel(helpers(merged_head, add_head_rows, load_head_block))]
pub fn gemv_head_residual(
    w: Ptr<bf16>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    res: Ptr<f32>,
    copy: Ptr<f32>,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] D: usize,
    #[constexpr] SPLITS: usize,
    #[constexpr] COPIES: usize,
) {
    let head = program_id(0);
    let rows = program_id(1) * BM + arange(0, BM);
    let row_mask = rows < m;
    // The weights first: nothing they need is written by another stage.
    let wt = load_head_block(w, rows, row_mask, head, k, D).to(f32);
    let a = merged_head(part_m, part_l, part_acc, head, D, SPLITS);
    let y = sum(wt * a.expand_dims(0), 1);
    add_head_rows(res, copy, rows, row_mask, y, head, m, COPIES);
}

/// The attention and o_proj per head in one stage, for short contexts: program (h, j)
/// computes head h's attention over every position itself (`attention::attend_head_cur`, no
/// splits, no partials), multiplies it by the [BM, D] block of W at rows j·BM.. and
/// columns h·D.., and adds into `copy` and `res` as `gemv_head_residual` does. The
/// hidden / BM programs of a head each compute it (the K/V rows come from L2 after the
/// first), which costs little while the context is a tile or two, and the step loses the
/// hop between the attention's stage and o_proj's (`MegakernelOptions::attn_in_o`). Up to
/// BLOCK_N positions it adds what `attn_split` then `gemv_head_residual` add, bit for bit.
#[kernel(helpers(
    attend_head_cur,
    softmax_start,
    softmax_tile,
    add_head_rows,
    load_head_block
))]
pub fn attn_head_residual(
    w: Ptr<bf16>,
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    res: Ptr<f32>,
    copy: Ptr<f32>,
    group: i32,
    max_seq: i32,
    scale: f32,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] COPIES: usize,
) {
    let head = program_id(0);
    let rows = program_id(1) * BM + arange(0, BM);
    let row_mask = rows < m;
    // The weights first: nothing they need is written by another stage.
    let wt = load_head_block(w, rows, row_mask, head, k, D);
    let p = load(pos);
    let d = arange(0, D);
    let base = (head / group) * max_seq * D;
    // The new position's row is in the cache already (the QKV stage finished the heads).
    let cur = base + p * D + d;
    let a = attend_head_cur(
        load(q + head * D + d).to(f32),
        load(k_cache + cur).to(f32),
        load(v_cache + cur).to(f32),
        k_cache,
        v_cache,
        base,
        p + 1,
        scale,
        D,
        BLOCK_N,
    );
    let y = sum(wt.to(f32) * a.expand_dims(0), 1);
    add_head_rows(res, copy, rows, row_mask, y, head, m, COPIES);
}

/// `attn_head_residual` reading the QKV stage's raw heads (`rmsnorm_qkv_rope` with FINISH
/// off: no ticket, no head finished there): program (h, j) norms and ropes head h's q and
/// its KV head's k itself (`rope::norm_rope`, rounded to bf16 as the cache and `q` hold
/// them), takes the new position's K and V from registers and the older ones from the cache
/// (`attention::attend_head_cur`), and program (h, 0) of the first query head of each KV
/// head writes them into the cache for the later steps. A candidate (session 23): the QKV
/// stage's ticket chain off the critical path, a norm and a rope in every program here.
#[kernel(helpers(
    attend_head_cur,
    softmax_start,
    softmax_tile,
    norm_rope_qk,
    add_head_rows,
    load_head_block
))]
pub fn attn_rope_head_residual(
    w: Ptr<bf16>,
    qkv: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    rope: Ptr<f32>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    res: Ptr<f32>,
    copy: Ptr<f32>,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    scale: f32,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] COPIES: usize,
    // Row blocks a program (grid (heads, ⌈m / (BM·TILES)⌉)): the head attended once for
    // them all, each block's weights loaded while the previous one adds, as
    // `gemv_head_residual_tiles` does.
    #[constexpr] TILES: usize,
) {
    let head = program_id(0);
    let first_block = program_id(1) * TILES;
    // The first block's weights first: nothing they need is written by another stage.
    let rows0 = first_block * BM + arange(0, BM);
    let mut wt = load_head_block(w, rows0, rows0 < m, head, k, D);
    let p = load(pos);
    let cs = rope + p * D;
    let group = n_heads / n_kv_heads;
    let kvh = head / group;
    let d = arange(0, D);
    // q and k normed and roped in one [2, D] tile, one reduction; rows taken out by adding
    // zeros.
    let qk = norm_rope_qk(
        qkv,
        head * D,
        (n_heads + kvh) * D,
        q_norm,
        k_norm,
        cs,
        eps,
        D,
    );
    let first = (arange(0, 2) == 0).expand_dims(1);
    let qv = sum(where_(first, qk, 0.0), 0).to(bf16).to(f32);
    let kn = sum(where_(first, 0.0, qk), 0).to(bf16);
    let vn = load(qkv + (n_heads + n_kv_heads + kvh) * D + d);
    if program_id(1) == 0 {
        if head % group == 0 {
            let slot = (kvh * max_seq + p) * D;
            store(k_cache + slot + d, kn);
            store(v_cache + slot + d, vn);
        }
    }
    let a = attend_head_cur(
        qv,
        kn.to(f32),
        vn.to(f32),
        k_cache,
        v_cache,
        kvh * max_seq * D,
        p + 1,
        scale,
        D,
        BLOCK_N,
    )
    .expand_dims(0);
    for t in 0..TILES {
        let rows = (first_block + t) * BM + arange(0, BM);
        let row_mask = rows < m;
        let y = sum(wt.to(f32) * a, 1);
        let next = rows + BM;
        wt = load_head_block(w, next, (next < m) & (t + 1 < TILES), head, k, D);
        add_head_rows(res, copy, rows, row_mask, y, head, m, COPIES);
    }
}

/// `attn_head_residual` reading the QKV stage's rotated pairs (`rope::rmsnorm_qkv_rope_pairs`,
/// `Tiles::qkv_pairs`, a candidate): program (h, j) scales head h's q and its KV head's k by
/// their 1/rms (`rope::head_rms_inv`: the sums of squares of the head's QBM-row QKV
/// programs, added; no reduction over the head here) and rounds them to bf16 as `q` and the
/// cache hold them, takes the new V row from the cache (the QKV stage wrote it) and the new
/// K row from registers (`attention::attend_head_cur`), and program (h, 0) of the first
/// query head of each KV head writes that K row into the cache for the later steps, last
/// (after its own reads of the cache, so no barrier orders them).
#[kernel(helpers(
    attend_head_cur,
    softmax_start,
    softmax_tile,
    head_rms_inv,
    add_head_rows,
    load_head_block
))]
pub fn attn_scale_head_residual(
    w: Ptr<bf16>,
    qk_rot: Ptr<f32>,
    qk_ss: Ptr<f32>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    res: Ptr<f32>,
    copy: Ptr<f32>,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    scale: f32,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] COPIES: usize,
    // The QKV stage's rows a program (`qk_ss` holds D / QBM sums a head).
    #[constexpr] QBM: usize,
) {
    let head = program_id(0);
    let rows = program_id(1) * BM + arange(0, BM);
    let row_mask = rows < m;
    // The weights first: nothing they need is written by another stage.
    let wt = load_head_block(w, rows, row_mask, head, k, D);
    let p = load(pos);
    let group = n_heads / n_kv_heads;
    let kvh = head / group;
    let d = arange(0, D);
    let ku = n_heads + kvh;
    let qs = head_rms_inv(qk_ss, head, eps, D, QBM);
    let ks = head_rms_inv(qk_ss, ku, eps, D, QBM);
    let qv = (load(qk_rot + head * D + d) * qs).to(bf16).to(f32);
    let kn = (load(qk_rot + ku * D + d) * ks).to(bf16);
    let slot = (kvh * max_seq + p) * D;
    let a = attend_head_cur(
        qv,
        kn.to(f32),
        load(v_cache + slot + d).to(f32),
        k_cache,
        v_cache,
        kvh * max_seq * D,
        p + 1,
        scale,
        D,
        BLOCK_N,
    );
    let y = sum(wt.to(f32) * a.expand_dims(0), 1);
    add_head_rows(res, copy, rows, row_mask, y, head, m, COPIES);
    if program_id(1) == 0 {
        if head % group == 0 {
            store(k_cache + slot + d, kn);
        }
    }
}

/// `gemv_head_residual` for a program that owns `TILES` consecutive `BM`-row blocks of its
/// head (grid (heads, ⌈m / (BM·TILES)⌉)): the head merged once per program instead of once
/// per block, and each block's weights loaded while the previous one reduces (`wt` carried
/// into the next iteration), as `gemv_residual_tiles` does for o_proj by rows. The same
/// arithmetic per row as one block per program: the same bits. A candidate where o_proj per
/// head has more programs than CTAs (4B: 320, 8B: 512 of 132; `Tiles::o_heads_tiles`).
#[kernel(helpers(merged_head, add_head_rows, load_head_block))]
pub fn gemv_head_residual_tiles(
    w: Ptr<bf16>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    res: Ptr<f32>,
    copy: Ptr<f32>,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] D: usize,
    #[constexpr] SPLITS: usize,
    #[constexpr] COPIES: usize,
    #[constexpr] TILES: usize,
) {
    let head = program_id(0);
    let first = program_id(1) * TILES;
    // The first block's weights first: nothing they need is written by another stage.
    let rows0 = first * BM + arange(0, BM);
    let mut wt = load_head_block(w, rows0, rows0 < m, head, k, D);
    let a = merged_head(part_m, part_l, part_acc, head, D, SPLITS).expand_dims(0);
    for t in 0..TILES {
        let rows = (first + t) * BM + arange(0, BM);
        let row_mask = rows < m;
        let y = sum(wt.to(f32) * a, 1);
        // The next block's weights (none past the last block or past m) stream in while
        // this one's atomics go out.
        let next = rows + BM;
        wt = load_head_block(w, next, (next < m) & (t + 1 < TILES), head, k, D);
        add_head_rows(res, copy, rows, row_mask, y, head, m, COPIES);
    }
}
