//! The first kernel: z = x + y. One program handles BLOCK consecutive elements; the mask
//! keeps the last program inside the arrays when n is not a multiple of BLOCK.
use crate::runtime::prelude::*;

#[kernel]
pub fn vector_add(x: Ptr<f32>, y: Ptr<f32>, z: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let pid = program_id(0); // prologue: which tile is mine
    let offs = pid * BLOCK + arange(0, BLOCK);
    let mask = offs < n;
    let a = load(x + offs, mask, 0.0); // load: coalesced, masked
    let b = load(y + offs, mask, 0.0);
    store(z + offs, a + b, mask); // epilogue
}

/// The reference.
pub fn vector_add_ref(x: &[f32], y: &[f32]) -> Vec<f32> {
    x.iter().zip(y).map(|(a, b)| a + b).collect()
}
