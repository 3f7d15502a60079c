//! Fused RMSNorm, the lesson's kernel: y = x * w / sqrt(mean(x²) + eps), one program per row.
//!
//! Two streaming passes over the row, so any row length works with any tile: pass 1 sums
//! the squares in f32 (a bf16 sum would lose the low bits), pass 2 normalises and writes.
//! The second read of x mostly hits L2; holding the row on chip instead would cost
//! shared memory and occupancy (the lesson's trade-off).
use crate::runtime::prelude::*;
use half::bf16;

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
    let mut sumsq = zeros([BLOCK], f32);
    for off in (0..n_cols).step_by(BLOCK) {
        let cols = off + arange(0, BLOCK);
        let mask = cols < n_cols;
        let xb = load(x + row * n_cols + cols, mask, 0.0).to(f32);
        sumsq += xb * xb; // per-lane partial sums: one reduction after the loop
    }
    let inv = rsqrt(sum(sumsq, 0) / n_cols as f32 + eps);
    for off in (0..n_cols).step_by(BLOCK) {
        let cols = off + arange(0, BLOCK);
        let mask = cols < n_cols;
        let xb = load(x + row * n_cols + cols, mask, 0.0).to(f32);
        let wb = load(w + cols, mask, 0.0).to(f32);
        store(y + row * n_cols + cols, (xb * inv * wb).to(bf16), mask);
    }
}

/// The reference: the same math, f32 accumulation, rounded to bf16 at the end.
pub fn rmsnorm_ref(x: &[bf16], w: &[bf16], n_cols: usize, eps: f32) -> Vec<bf16> {
    x.chunks(n_cols)
        .flat_map(|row| {
            let ss: f32 = row.iter().map(|v| v.to_f32() * v.to_f32()).sum();
            let inv = 1.0 / (ss / n_cols as f32 + eps).sqrt();
            row.iter()
                .zip(w)
                .map(move |(v, g)| bf16::from_f32(v.to_f32() * inv * g.to_f32()))
        })
        .collect()
}
