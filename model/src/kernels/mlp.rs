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
#[kernel]
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
    let inv = rms_inv(xv * xv, k, eps);
    let xg = (xv * load(g + cols, col_mask, 0.0).to(f32)).expand_dims(0);
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
