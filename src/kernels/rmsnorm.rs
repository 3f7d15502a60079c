//! Fused RMSNorm, the lesson's kernel: y = x * w / sqrt(mean(x²) + eps), one program per row.
//!
//! Two streaming passes over the row, so any row length works with any tile: pass 1 sums
//! the squares in f32 (a bf16 sum would lose the low bits), pass 2 normalises and writes.
//! The second read of x mostly hits L2; holding the row on chip instead would cost
//! shared memory and occupancy (the lesson's trade-off).
use half::bf16;

/// The kernel is the decoder's own (`model::kernels::norm`): one RMSNorm in the tree,
/// taught here and launched by the prefill.
pub use model::kernels::norm::rmsnorm;

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
