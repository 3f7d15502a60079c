//! The GEMVs of decode (M = 1): every matmul of the step reads a bf16 weight matrix
//! W[m, k] (PyTorch's `[out, in]`, row-major) once and does one multiply-add per element.
//!
//! Tile strategy (all three kernels, and `mlp.rs`, `lm_head.rs`): a program owns BM output
//! rows and walks k in BK-wide steps with a [BM, BK] tile (rows over warps, columns over
//! lanes: each row segment is a contiguous, coalesced read). Partial products accumulate
//! per lane in an f32 [BM, BK] tile; the row sums happen once, after the loop. BM is
//! chosen so the grid has enough programs to fill the GPU (see `Tiles`), which is the
//! one rule that decides speed at M = 1.
//!
//! Fusions that keep the grid full (seed 000's rule):
//! - `rmsnorm_gemv`: the RMSNorm that feeds the GEMV runs as a *redundant prologue*: every
//!   program recomputes 1/rms(x) from the whole of x (k elements, L2-resident) before its
//!   rows. No separate launch, no grid-wide barrier, and the normed vector never goes to
//!   memory (so it is never rounded to bf16: the reference keeps it in f32 too).
//! - `gemv_residual`: the residual add is the epilogue; each program reads and writes only
//!   its own rows of the residual stream, so it updates it in place.
use dsl_runtime::prelude::*;

/// y = W · (x / rms(x) * g): input RMSNorm fused into the (QKV) projection.
#[kernel]
pub fn rmsnorm_gemv(
    x: Ptr<bf16>,
    g: Ptr<bf16>,
    w: Ptr<bf16>,
    y: Ptr<bf16>,
    m: i32,
    k: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    // Prologue: 1/rms(x), recomputed by every program.
    let mut sumsq = zeros([BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let xv = load(x + cols, cols < k, 0.0).to(f32);
        sumsq += xv * xv;
    }
    let inv = rsqrt(sum(sumsq, 0) / k as f32 + eps);

    let rows = program_id(0) * BM + arange(0, BM);
    let row_mask = rows < m;
    let mut acc = zeros([BM, BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let col_mask = cols < k;
        // The normed activation, in f32, never stored.
        let h = load(x + cols, col_mask, 0.0).to(f32) * inv * load(g + cols, col_mask, 0.0).to(f32);
        let tile_mask = row_mask.expand_dims(1) & col_mask.expand_dims(0);
        let wv = load(
            w + rows.expand_dims(1) * k + cols.expand_dims(0),
            tile_mask,
            0.0,
        )
        .to(f32);
        acc += wv * h.expand_dims(0);
    }
    store(y + rows, sum(acc, 1).to(bf16), row_mask);
}

/// res += W · x: a projection whose output is added to the residual stream (o_proj, down).
#[kernel]
pub fn gemv_residual(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    res: Ptr<bf16>,
    m: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let row_mask = rows < m;
    let mut acc = zeros([BM, BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let col_mask = cols < k;
        let xv = load(x + cols, col_mask, 0.0).to(f32);
        let tile_mask = row_mask.expand_dims(1) & col_mask.expand_dims(0);
        let wv = load(
            w + rows.expand_dims(1) * k + cols.expand_dims(0),
            tile_mask,
            0.0,
        )
        .to(f32);
        acc += wv * xv.expand_dims(0);
    }
    // Epilogue: the add happens in f32, one rounding to bf16 per update of the stream.
    let r = load(res + rows, row_mask, 0.0).to(f32);
    store(res + rows, (r + sum(acc, 1)).to(bf16), row_mask);
}
