use dsl_runtime::prelude::*;

#[kernel]
fn not_pointers(x: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let cols = arange(0, BLOCK);
    prefetch(cols, cols < n);
    store(x + cols, load(x + cols, cols < n, 0.0), cols < n);
}

fn main() {}
