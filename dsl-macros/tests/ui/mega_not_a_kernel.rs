use dsl_runtime::prelude::*;

fn helper(_x: i32) {}

#[megakernel]
fn mk(x: Ptr<f32>, #[constexpr] N: usize) {
    helper(grid(1), x, N);
}

fn main() {}
