//! RMSNorm on its own: y = x / sqrt(mean(x²) + eps) * w, one program per row (also the
//! lesson's kernel: `tessera::kernels::rmsnorm` re-exports it beside its reference).
//!
//! Two streaming passes over the row, so any row length works with any tile: pass 1 sums
//! the squares in f32 (a bf16 sum would lose the low bits), pass 2 normalises and writes.
//! The second read of x mostly hits L2; holding the row on chip instead would cost
//! shared memory and occupancy.
//!
//! The decode step does not launch it: each norm of the decoder is fused as a *redundant
//! prologue* into the GEMV that consumes it (see `gemv.rs`), which saves a launch (a sync
//! in the megakernel) and a bf16 rounding of the normed vector. It stays here as
//! the readable statement of the op, and as a stage for engines that want it separate.
use dsl_runtime::prelude::*;

#[kernel]
pub fn rmsnorm(
    x: Ptr<bf16>,
    w: Ptr<bf16>,
    y: Ptr<bf16>,
    n_cols: i32,
    eps: f32,
    #[constexpr] BLOCK: usize,
) {
    let row = program_id(0);
    // Pass 1: per-lane partial sums of squares in f32, one reduction after the loop.
    let mut sumsq = zeros([BLOCK], f32);
    for off in (0..n_cols).step_by(BLOCK) {
        let cols = off + arange(0, BLOCK);
        let mask = cols < n_cols;
        let xb = load(x + row * n_cols + cols, mask, 0.0).to(f32);
        sumsq += xb * xb;
    }
    let inv = rms_inv(sumsq, n_cols, eps);
    // Pass 2: normalise and scale (the second read of x hits L2).
    for off in (0..n_cols).step_by(BLOCK) {
        let cols = off + arange(0, BLOCK);
        let mask = cols < n_cols;
        let xb = load(x + row * n_cols + cols, mask, 0.0).to(f32);
        let wb = load(w + cols, mask, 0.0).to(f32);
        store(y + row * n_cols + cols, (xb * inv * wb).to(bf16), mask);
    }
}
