//! The MLP: act = silu(gate · h) * (up · h), h = x / rms(x) * g; then x += down · act.
//!
//! Weights are repacked once as `[gate; up]` (`LayerWeights::fused_gate_up`), so a program
//! that owns gate rows r..r+BM finds the matching up rows at `intermediate + r`: both dot
//! products share each load of h, and SiLU·mul happens in registers, in f32. The
//! post-attention RMSNorm is recomputed by every program in the same loop (as in `gemv.rs`).
//!
//! Two forms:
//! - `rmsnorm_gate_up_silu` writes `act`; down is a second GEMV (`gemv::gemv_residual`),
//!   which waits for every program of this one.
//! - `rmsnorm_mlp_split` is the whole MLP, split over the intermediate dimension: a program
//!   computes CHUNK entries of `act` and at once multiplies them by the matching CHUNK
//!   columns of down, adding its partial sums into the residual stream with f32 atomics
//!   (split-k). The hop between gate/up and down is gone; the price is that the residual's
//!   sums happen in whatever order the programs finish (not bit-reproducible on a GPU), and
//!   that `h` must be a copy of `res` (`gemv::gemv_residual_copy` writes it).
use dsl_runtime::prelude::*;

/// silu(gate · h) * (up · h) for the intermediate rows `rows`, h = x / rms(x) * g: the
/// norm's 1/rms(x) scales both dot products once, at the end (as in `gemv.rs`).
#[tile_fn]
#[allow(clippy::too_many_arguments)]
pub fn normed_gate_up_act(
    x: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    rows: Tile<i32, BM>,
    row_mask: Tile<bool, BM>,
    inter: i32,
    k: i32,
    eps: f32,
    #[constexpr] BK: usize,
) -> Tile<f32, BM> {
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
    let inv = rsqrt(sum(sumsq, 0) / k as f32 + eps);
    let gate = sum(acc_gate, 1) * inv;
    let up = sum(acc_up, 1) * inv;
    silu(gate) * up
}

#[kernel(helpers(normed_gate_up_act))]
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
    let a = normed_gate_up_act(x, g, w, rows, row_mask, inter, k, eps, BK);
    store(act + rows, a.to(bf16), row_mask);
}

/// res += down · silu(gate · h) * (up · h), h = rmsnorm(x): the whole MLP, a program per
/// CHUNK intermediate rows (BM ≥ CHUNK, a power of two: the tile), its share of down's
/// output added into `res` with atomics, BN rows of down at a time. `x` and `res` must not
/// overlap (every program reads all of `x`). act stays in f32.
#[kernel(helpers(normed_gate_up_act))]
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm_mlp_split(
    x: Ptr<f32>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    down: Ptr<bf16>,
    res: Ptr<f32>,
    inter: i32,
    k: i32,
    eps: f32,
    #[constexpr] CHUNK: usize,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
    #[constexpr] BN: usize,
) {
    let j = arange(0, BM);
    let rows = program_id(0) * CHUNK + j;
    let row_mask = (j < CHUNK) & (rows < inter);
    let a = normed_gate_up_act(x, g, w, rows, row_mask, inter, k, eps, BK).expand_dims(0);
    // down is [k, inter] (row n holds the weights of output n): this program's columns.
    for n0 in (0..k).step_by(BN) {
        let n = n0 + arange(0, BN);
        let n_mask = n < k;
        let wd = load(
            down + n.expand_dims(1) * inter + rows.expand_dims(0),
            n_mask.expand_dims(1) & row_mask.expand_dims(0),
            0.0,
        )
        .to(f32);
        atomic_add(res + n, sum(wd * a, 1), n_mask);
    }
}
