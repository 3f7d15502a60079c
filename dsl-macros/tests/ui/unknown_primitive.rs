use dsl_runtime::prelude::*;

#[kernel]
fn softmax_row(x: Ptr<f32>, #[constexpr] BLOCK: usize) {
    let cols = arange(0, BLOCK);
    let v = load(x + cols);
    let p = softmax(v, 0);
    store(x + cols, p);
}

fn main() {}
