//! The MLP's first half: act = silu(gate · h) * (up · h), h = x / rms(x) * g.
//!
//! Weights are repacked once as `[gate; up]` (`LayerWeights::fused_gate_up`), so a program
//! that owns gate rows r..r+BM finds the matching up rows at `intermediate + r`: both dot
//! products share each load of h, and SiLU·mul happens in registers, in f32. The
//! post-attention RMSNorm is recomputed by every program in the same loop (as in `gemv.rs`). The grid is
//! intermediate / BM programs, the widest of the layer: the fusion costs no parallelism.
//! `rmsnorm_gate_up_silu_tiles` is the megakernel's when one k step covers the hidden size:
//! several row tiles per program and the norm once (`Tiles::gate_up_tiles`, spread over the
//! CTAs; faster than one tile per program on an H100, docs/PERF.md session 13).
//! `rmsnorm_mlp_tiles` is the megakernel's default since session 17: the same tiles times
//! down's transposed rows in the same stage, the partial sums added into the residual.
use dsl_runtime::prelude::*;

#[kernel]
pub fn rmsnorm_gate_up_silu(
    x: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    act: Ptr<bf16>,
    inter: i32,
    k: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let row_mask = rows < inter;
    let mut acc_gate = zeros([BM, BK], f32);
    let mut acc_up = zeros([BM, BK], f32);
    let mut sumsq = zeros([BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let col_mask = cols < k;
        let tile_mask = row_mask.expand_dims(1) & col_mask.expand_dims(0);
        let offs = rows.expand_dims(1) * k + cols.expand_dims(0);
        let wg = load(w + offs, tile_mask, 0.0).to(f32);
        let wu = load(w + inter * k + offs, tile_mask, 0.0).to(f32);
        let xv = load(x + cols, col_mask, 0.0);
        sumsq += xv * xv;
        let xg = (xv * load(g + cols, col_mask, 0.0).to(f32)).expand_dims(0);
        acc_gate += wg * xg;
        acc_up += wu * xg;
    }
    // The norm's 1/rms(x) scales both dot products once, at the end (as in `gemv.rs`).
    let inv = rms_inv(sumsq, k, eps);
    let gate = sum(acc_gate, 1) * inv;
    let up = sum(acc_up, 1) * inv;
    store(act + rows, (silu(gate) * up).to(bf16), row_mask);
}

/// `rmsnorm_gate_up_silu` for a program that owns `TILES` consecutive `BM`-row tiles in one
/// k step (`k <= BK`): the norm (x's load, its squares' reduction, x·g) once per program
/// instead of once per tile, and each tile's weights loaded while the previous one reduces
/// (`wg`/`wu` carried into the next iteration). With one program per CTA the CTA computes
/// the stage's activation once (issue 10). The same arithmetic, tile by tile, as
/// `rmsnorm_gate_up_silu` with one k step: the same bits.
#[kernel(helpers(crate::kernels::gemv::rmsnorm_parts))]
pub fn rmsnorm_gate_up_silu_tiles(
    x: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    act: Ptr<bf16>,
    inter: i32,
    k: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] TILES: usize,
) {
    let cols = arange(0, BK);
    let col_mask = cols < k;
    let first = program_id(0) * TILES;
    // The first tile's weights, before anything another stage writes; each iteration loads
    // the next one's.
    let rows0 = first * BM + arange(0, BM);
    let mask0 = (rows0 < inter).expand_dims(1) & col_mask.expand_dims(0);
    let offs0 = rows0.expand_dims(1) * k + cols.expand_dims(0);
    let mut wg = load(w + offs0, mask0, 0.0);
    let mut wu = load(w + inter * k + offs0, mask0, 0.0);
    let xv = load(x + cols, col_mask, 0.0);
    let (inv, xg) = rmsnorm_parts(xv, g, cols, col_mask, k, eps);
    for t in 0..TILES {
        let rows = (first + t) * BM + arange(0, BM);
        let row_mask = rows < inter;
        let mut acc_gate = zeros([BM, BK], f32);
        let mut acc_up = zeros([BM, BK], f32);
        acc_gate += wg.to(f32) * xg;
        acc_up += wu.to(f32) * xg;
        // The next tile's weights (none past the last tile) stream in while this one reduces.
        let next = rows + BM;
        let next_mask = ((next < inter) & (t + 1 < TILES)).expand_dims(1) & col_mask.expand_dims(0);
        let next_offs = next.expand_dims(1) * k + cols.expand_dims(0);
        wg = load(w + next_offs, next_mask, 0.0);
        wu = load(w + inter * k + next_offs, next_mask, 0.0);
        let gate = sum(acc_gate, 1) * inv;
        let up = sum(acc_up, 1) * inv;
        store(act + rows, (silu(gate) * up).to(bf16), row_mask);
    }
}

/// The whole MLP block as ONE stage of the megakernel, split over the intermediate
/// dimension (`decode_step` with `FUSED_MLP`, the default: 1-4% faster from 0.6B to 8B on
/// an H100, docs/PERF.md session 17): each program computes act for its `TILES` row tiles as
/// `rmsnorm_gate_up_silu_tiles` does, multiplies it by the matching rows of down stored
/// transposed (`down_t`: `[inter, hidden]`, row i is down's column i, so a tile's rows are
/// contiguous), and adds its partial sums for the whole hidden vector to the residual
/// stream `x` with f32 atomics. One hop fewer per layer than gate/up then down.
///
/// The norm reads `h`, o_proj's copy of the residual stream (`gemv_residual_copy`), never
/// `x`, which this stage's finished programs are adding into while others still read.
/// act is rounded to bf16 as the two-stage path stores it, so only the order of the sums
/// differs (and varies from run to run: the atomics land in any order).
#[kernel(helpers(crate::kernels::gemv::rmsnorm_parts))]
pub fn rmsnorm_mlp_tiles(
    h: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    down_t: Ptr<bf16>,
    x: Ptr<f32>,
    inter: i32,
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
    // The first tile's three weight tiles, before anything another stage writes; each
    // iteration loads the next one's.
    let rows0 = first * BM + arange(0, BM);
    let mask0 = (rows0 < inter).expand_dims(1) & col_mask.expand_dims(0);
    let offs0 = rows0.expand_dims(1) * k + cols.expand_dims(0);
    let mut wg = load(w + offs0, mask0, 0.0);
    let mut wu = load(w + inter * k + offs0, mask0, 0.0);
    let mut wd = load(down_t + offs0, mask0, 0.0);
    let hv = load(h + cols, col_mask, 0.0);
    let (inv, hg) = rmsnorm_parts(hv, g, cols, col_mask, k, eps);
    // Each tile's act times its down rows, summed over the tiles lane by lane; the sum
    // over rows happens once, after the loop.
    let mut acc_down = zeros([BM, BK], f32);
    for t in 0..TILES {
        let rows = (first + t) * BM + arange(0, BM);
        let mut acc_gate = zeros([BM, BK], f32);
        let mut acc_up = zeros([BM, BK], f32);
        acc_gate += wg.to(f32) * hg;
        acc_up += wu.to(f32) * hg;
        let wd_now = wd;
        // The next tile's weights (none past the last tile) stream in while this one reduces.
        let next = rows + BM;
        let next_mask = ((next < inter) & (t + 1 < TILES)).expand_dims(1) & col_mask.expand_dims(0);
        let next_offs = next.expand_dims(1) * k + cols.expand_dims(0);
        wg = load(w + next_offs, next_mask, 0.0);
        wu = load(w + inter * k + next_offs, next_mask, 0.0);
        wd = load(down_t + next_offs, next_mask, 0.0);
        let gate = sum(acc_gate, 1) * inv;
        let up = sum(acc_up, 1) * inv;
        // Rows past `inter` have zero weights: act 0, no contribution.
        let a = (silu(gate) * up).to(bf16).to(f32);
        acc_down += wd_now.to(f32) * a.expand_dims(1);
    }
    // Into one of the residual's COPIES (`[COPIES, k]`, folded by the next o_proj and
    // summed by every reader), so that fewer programs' atomics queue on each address.
    atomic_add(
        x + (program_id(0) % COPIES) * k + cols,
        sum(acc_down, 0),
        col_mask,
    );
}
