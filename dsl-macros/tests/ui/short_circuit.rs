use dsl_runtime::prelude::*;

#[kernel]
fn window(x: Ptr<f32>, lo: i32, hi: i32, #[constexpr] BLOCK: usize) {
    let cols = arange(0, BLOCK);
    let mask = cols >= lo && cols < hi;
    store(x + cols, 0.0, mask);
}

fn main() {}
