use dsl_runtime::prelude::*;

#[kernel]
fn too_many(x: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let cols = arange(0, BLOCK);
    let v = load(x + cols, cols < n, 0.0, 1.0);
    store(x + cols, v, cols < n);
}

fn main() {}
