use dsl_runtime::prelude::*;

#[kernel]
fn copy(x: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize, #[constexpr] HALF: usize) {
    let cols = arange(0, BLOCK);
    let small = arange(0, HALF) < n;
    let v = load(x + cols, small, 0.0);
    store(y + cols, v);
}

fn main() {}
