//! C = silu(A·B + bias) as bf16: a GEMM on tensor cores with a fused epilogue.
//!
//! A [M, K] and B [K, N] are bf16, row-major; bias [N] is f32. Each program owns a
//! [BM, BN] tile of C and walks K in BK steps: `dot` accumulates in f32 on tensor cores
//! (mma.sync), and the loads that feed it are pipelined `num_stages` deep through a
//! cp.async ring. Programs run in *grouped* order: GROUP_M row blocks share each column
//! block before moving right, so the B tiles they read are still in L2 (Triton's matmul
//! tutorial). Every edge is masked, so any M, N, K works.
use crate::runtime::prelude::*;
use half::bf16;

#[kernel]
pub fn matmul(
    a: Ptr<bf16>,
    b: Ptr<bf16>,
    bias: Ptr<f32>,
    c: Ptr<bf16>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
    #[constexpr] GROUP_M: usize,
) {
    // Grouped program order over a 1-D grid (the tile library's `grouped_rows`).
    let rows = grouped_rows(m, n, BM, BN, GROUP_M);
    let cols = grouped_cols(m, n, BM, BN, GROUP_M);
    let row_ok = rows.expand_dims(1) < m;
    let col_ok = cols.expand_dims(0) < n;
    let mut acc = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let at = load(
            a + rows.expand_dims(1) * k + ks.expand_dims(0),
            row_ok & (ks.expand_dims(0) < k),
            0.0,
        );
        let bt = load(
            b + ks.expand_dims(1) * n + cols.expand_dims(0),
            (ks.expand_dims(1) < k) & col_ok,
            0.0,
        );
        acc = dot(at, bt, acc);
    }
    // Epilogue, fused: bias, SiLU, round to bf16.
    let bv = load(bias + cols, cols < n, 0.0);
    let y = silu(acc + bv.expand_dims(0));
    store(
        c + rows.expand_dims(1) * n + cols.expand_dims(0),
        y.to(bf16),
        row_ok & col_ok,
    );
}

/// The grid of [`matmul`]: one program per [BM, BN] tile of C, in a 1-D grid.
pub fn grid(m: usize, n: usize, bm: usize, bn: usize) -> u32 {
    (m.div_ceil(bm) * n.div_ceil(bn)) as u32
}

/// silu(A·B + bias) in f64 (before rounding to bf16).
pub fn matmul_ref(a: &[bf16], b: &[bf16], bias: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for kk in 0..k {
            let x = a[i * k + kk].to_f64();
            for j in 0..n {
                c[i * n + j] += x * b[kk * n + j].to_f64();
            }
        }
    }
    for (i, v) in c.iter_mut().enumerate() {
        let z = *v + bias[i % n] as f64;
        *v = z / (1.0 + (-z).exp());
    }
    c
}

/// Relative Frobenius error ||got - want|| / ||want||.
pub fn rel_frob(got: &[f32], want: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        num += (*g as f64 - w) * (*g as f64 - w);
        den += w * w;
    }
    (num / den.max(1e-300)).sqrt()
}
