use dsl_runtime::prelude::*;

#[kernel]
fn flip(x: Ptr<f32>, y: Ptr<f32>, #[constexpr] N: usize) {
    let cols = arange(0, N);
    let v = load(x + cols);
    store(y + cols, v.trans());
}

fn main() {}
