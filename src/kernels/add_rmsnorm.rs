//! Fused residual add + RMSNorm, the seam between two transformer sub-blocks:
//! h = x + residual; residual ← h (what the next block adds to); y = h / rms(h) * w.
//! One read of each input, two writes, one reduction: one tile per row (BLOCK ≥ n_cols).
use crate::runtime::prelude::*;
use half::bf16;

#[kernel]
pub fn add_rmsnorm(
    x: Ptr<bf16>,
    residual: Ptr<bf16>,
    w: Ptr<bf16>,
    y: Ptr<bf16>,
    n_cols: i32,
    eps: f32,
    #[constexpr] BLOCK: usize,
) {
    let row = program_id(0);
    let cols = arange(0, BLOCK);
    let mask = cols < n_cols;
    let offs = row * n_cols + cols;
    let h = (load(x + offs, mask, 0.0).to(f32) + load(residual + offs, mask, 0.0).to(f32)).to(bf16);
    store(residual + offs, h, mask);
    let hf = h.to(f32);
    let inv = rms_inv(hf * hf, n_cols, eps);
    let g = load(w + cols, mask, 0.0).to(f32);
    store(y + offs, (hf * inv * g).to(bf16), mask);
}

/// Returns (y, new residual).
pub fn add_rmsnorm_ref(
    x: &[bf16],
    residual: &[bf16],
    w: &[bf16],
    n_cols: usize,
    eps: f32,
) -> (Vec<bf16>, Vec<bf16>) {
    let h: Vec<bf16> = x
        .iter()
        .zip(residual)
        .map(|(a, b)| bf16::from_f32(a.to_f32() + b.to_f32()))
        .collect();
    (crate::kernels::rmsnorm::rmsnorm_ref(&h, w, n_cols, eps), h)
}
