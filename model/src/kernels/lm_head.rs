//! The output head with greedy decoding fused in: final RMSNorm (recomputed per program, as in
//! `gemv.rs`), logits = W · h, and a two-phase argmax, so a greedy step reads back ONE int.
//!
//! Phase 1, `lm_head_argmax`: the GEMV over vocab / BM programs (the widest grid of the
//! step: 150k rows); each program also stores its rows' logits (f32, for sampling or
//! checks; 4 bytes per row against 2·hidden of weights read) and its block's (max, argmax).
//! Phase 2, `argmax_merge`: one program reduces the per-block pairs in BLOCK-wide tiles.
//! Ties go to the lowest id, as torch.argmax and the reference's sampler.
//!
//! Temperature sampling without reading logits back (Gumbel-max): with `inv_temp` > 0, the
//! block argmax is taken over z / T + g instead of z, where g = -log(-log(u)) and u is a
//! uniform drawn per row from a hash of (seed, position, row). argmax(z / T + g) is an
//! exact draw from softmax(z / T), so the same two phases return a sampled token.
//! `inv_temp` = 0 selects z itself (greedy, bit for bit) and skips the hash, which cost a
//! greedy step 40% of the lm_head's time on an H100 (docs/PERF.md). The hash is counter-based (no
//! state between steps), works in 16-bit lanes so every i32 product stays below 2^31
//! (signed overflow is undefined in the CUDA C this lowers to), and is mirrored on the host
//! by `sampling::gumbel_uniform` for tests.
//!
//! `lm_head_argmax_tiles` is the megakernel's phase 1 when one k step covers the hidden size:
//! several blocks per program and the final norm once (`Tiles::lm_head_tiles`, spread over
//! the CTAs; faster than one block per program on an H100, docs/PERF.md session 13).
use dsl_runtime::prelude::*;

/// The scores a block's argmax is taken over: z itself when greedy (`inv_temp` = 0), else
/// z / T + Gumbel noise from a hash of (seed, position, row).
#[tile_fn]
pub fn gumbel_scores(
    z: Tile<f32, BM>,
    rows: Tile<i32, BM>,
    pos: Ptr<i32>,
    seed: Ptr<i32>,
    inv_temp: Ptr<f32>,
) -> Tile<f32, BM> {
    // Gumbel noise, only when sampling: the hash below is ~1000 integer ops per thread
    // (every thread of the program holds a replica of the rows), wasted on a greedy step.
    // It absorbs the 16-bit words of seed, position and row into two 16-bit lanes (each
    // round a bijection of the lanes for a given word), two rounds to finish.
    let it = load(inv_temp);
    let mut zs = z;
    if it > 0.0 {
        let s = load(seed);
        let p = load(pos);
        let mut a = rows * 0 + 0x2545;
        let mut b = rows * 0 + 0x4F6C;
        for r in 0..8 {
            let word = where_(r < 2, s, where_(r < 4, p, where_(r < 6, rows, 0)));
            let w = (word >> (16 * (r % 2))) & 0xFFFF;
            a = ((a ^ w) * 27459) & 0xFFFF;
            a = a ^ (a >> 7);
            b = ((b ^ a) * 24373) & 0xFFFF;
            b = b ^ (b >> 8);
            a = a ^ (b >> 3);
        }
        // 24 bits of (a, b), centred in (0, 1): never exactly 0 or 1, so g is finite.
        let u = (((a & 0xFF) * 65536 + b).to(f32) + 0.5) * (1.0 / 16777216.0);
        zs = z * it + -log(-log(u));
    }
    zs
}

#[kernel(helpers(
    crate::kernels::gemv::normed_gemv_rows,
    crate::kernels::gemv::resid_load,
    gumbel_scores
))]
pub fn lm_head_argmax(
    x: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    logits: Ptr<f32>,
    part_max: Ptr<f32>,
    part_idx: Ptr<i32>,
    pos: Ptr<i32>,
    seed: Ptr<i32>,
    inv_temp: Ptr<f32>,
    vocab: i32,
    k: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] COPIES: usize,
) {
    let pid = program_id(0);
    let rows = pid * BM + arange(0, BM);
    let row_mask = rows < vocab;
    // The final norm fused into the GEMV, as in `gemv.rs`.
    let z = normed_gemv_rows(x, g, w, rows, row_mask, k, eps, BK, COPIES);
    store(logits + rows, z, row_mask);

    let zs = gumbel_scores(z, rows, pos, seed, inv_temp);
    // Epilogue: this block's best row. Rows past the vocab never win.
    let zm = where_(row_mask, zs, -3.0e38);
    store(part_max + pid, max(zm, 0));
    store(part_idx + pid, pid * BM + argmax(zm, 0));
}

/// `lm_head_argmax` for a program that owns `TILES` consecutive `BM`-row blocks in one k
/// step (`k <= BK`): the final norm once per program instead of once per block, and each
/// block's weights loaded while the previous one reduces. Every block still stores its own
/// (max, argmax), so `argmax_merge` is unchanged; blocks past the vocab store nothing. The
/// same arithmetic, block by block, as `lm_head_argmax` with one k step: the same bits.
#[kernel(helpers(
    crate::kernels::gemv::resid_load,
    crate::kernels::gemv::rmsnorm_parts,
    gumbel_scores
))]
pub fn lm_head_argmax_tiles(
    x: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    logits: Ptr<f32>,
    part_max: Ptr<f32>,
    part_idx: Ptr<i32>,
    pos: Ptr<i32>,
    seed: Ptr<i32>,
    inv_temp: Ptr<f32>,
    vocab: i32,
    k: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] TILES: usize,
    #[constexpr] COPIES: usize,
) {
    let cols = arange(0, BK);
    let col_mask = cols < k;
    let first = program_id(0) * TILES;
    // The first block's weights, before anything another stage writes; each iteration
    // loads the next one's.
    let rows0 = first * BM + arange(0, BM);
    let mask0 = (rows0 < vocab).expand_dims(1) & col_mask.expand_dims(0);
    let mut wv = load(
        w + rows0.expand_dims(1) * k + cols.expand_dims(0),
        mask0,
        0.0,
    );
    let xv = resid_load(x, cols, col_mask, k, COPIES);
    let (inv, xg) = rmsnorm_parts(xv, g, cols, col_mask, k, eps);
    for t in 0..TILES {
        let block = first + t;
        let rows = block * BM + arange(0, BM);
        let row_mask = rows < vocab;
        let mut acc = zeros([BM, BK], f32);
        acc += wv.to(f32) * xg;
        // The next block's weights (none past the last) stream in while this one reduces.
        let next = rows + BM;
        let next_mask = ((next < vocab) & (t + 1 < TILES)).expand_dims(1) & col_mask.expand_dims(0);
        wv = load(
            w + next.expand_dims(1) * k + cols.expand_dims(0),
            next_mask,
            0.0,
        );
        let z = sum(acc, 1) * inv;
        store(logits + rows, z, row_mask);
        if block * BM < vocab {
            let zs = gumbel_scores(z, rows, pos, seed, inv_temp);
            let zm = where_(row_mask, zs, -3.0e38);
            store(part_max + block, max(zm, 0));
            store(part_idx + block, block * BM + argmax(zm, 0));
        }
    }
}

/// Phase 2; it also hands the step's result to the next step on the device: `token` =
/// the chosen id, `pos` += 1, so a step that decodes its own token needs nothing copied in.
#[kernel]
pub fn argmax_merge(
    part_max: Ptr<f32>,
    part_idx: Ptr<i32>,
    next: Ptr<i32>,
    token: Ptr<i32>,
    pos: Ptr<i32>,
    n: i32,
    #[constexpr] BLOCK: usize,
) {
    let mut best = -3.4e38;
    let mut best_idx = 0;
    for c0 in (0..n).step_by(BLOCK) {
        let offs = c0 + arange(0, BLOCK);
        let v = load(part_max + offs, offs < n, -3.4e38);
        let cand = load(part_idx + c0 + argmax(v, 0));
        // Strictly greater: an earlier block keeps a tie.
        let better = max(v, 0) > best;
        best_idx = where_(better, cand, best_idx);
        best = where_(better, max(v, 0), best);
    }
    store(next, best_idx);
    store(token, best_idx);
    store(pos, load(pos) + 1);
}
