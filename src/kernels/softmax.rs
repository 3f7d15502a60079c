//! Row softmax, one program per row holding the whole row in one tile (BLOCK ≥ n_cols; a
//! tile need not be a power of two). Subtracting the row max first keeps exp() finite.
use crate::runtime::prelude::*;

#[kernel]
pub fn softmax(x: Ptr<f32>, y: Ptr<f32>, n_cols: i32, #[constexpr] BLOCK: usize) {
    let row = program_id(0);
    let cols = arange(0, BLOCK);
    let mask = cols < n_cols;
    let v = load(x + row * n_cols + cols, mask, -3.0e38); // masked lanes never win the max
    let e = exp(v - max(v, 0));
    let e = where_(mask, e, 0.0);
    store(y + row * n_cols + cols, e / sum(e, 0), mask);
}

pub fn softmax_ref(x: &[f32], n_cols: usize) -> Vec<f32> {
    x.chunks(n_cols)
        .flat_map(|row| {
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = row.iter().map(|v| (v - m).exp()).collect();
            let s: f32 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}
