//! GEMV at M=1, the op that carries decode: y[M] = W[M,K] · x[K], bf16 W, f32 accumulation.
//!
//! Each program owns BM rows and walks K in BK-wide steps with a [BM, BK] tile: rows over
//! warps, columns over lanes, so every load of W is a wide, coalesced read. x is broadcast
//! across the rows (`expand_dims(0)`), and the row sums happen once, after the loop.
use crate::runtime::prelude::*;
use half::bf16;

#[kernel]
pub fn gemv(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    y: Ptr<bf16>,
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
    store(y + rows, sum(acc, 1).to(bf16), row_mask);
}

pub fn gemv_ref(w: &[bf16], x: &[bf16], m: usize, k: usize) -> Vec<bf16> {
    (0..m)
        .map(|r| {
            bf16::from_f32(
                w[r * k..(r + 1) * k]
                    .iter()
                    .zip(x)
                    .map(|(a, b)| a.to_f32() * b.to_f32())
                    .sum(),
            )
        })
        .collect()
}
