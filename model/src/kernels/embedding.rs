//! Embedding gather: x = `embed_tokens[token]`, the first op of a decode step.
//!
//! The decode step keeps the residual stream `x` in f32: every layer adds two updates to
//! it, and a bf16 stream rounds each sum (transformers' does), roundings that add up over
//! the layers. The weights and the other activations stay bf16.
//!
//! The token id is read from a device buffer, not passed as a scalar, so a step (and later
//! the megakernel, whose launch arguments never change) needs no host value baked into
//! its launch. One program copies BLOCK consecutive elements of the row.
use dsl_runtime::prelude::*;

#[kernel]
pub fn embedding(
    table: Ptr<bf16>,
    token: Ptr<i32>,
    x: Ptr<f32>,
    hidden: i32,
    #[constexpr] BLOCK: usize,
    #[constexpr] COPIES: usize,
) {
    let tok = load(token); // a scalar load: the same id for every lane
    let cols = program_id(0) * BLOCK + arange(0, BLOCK);
    let mask = cols < hidden;
    store(
        x + cols,
        load(table + tok * hidden + cols, mask, 0.0).to(f32),
        mask,
    );
    // The residual's other copies (`gemv::resid_load`), which the last step's MLP left.
    for c in 1..COPIES {
        store(x + c * hidden + cols, zeros([BLOCK], f32), mask);
    }
}
