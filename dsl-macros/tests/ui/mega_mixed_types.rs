use dsl_runtime::prelude::*;

#[megakernel]
fn mk(x: Ptr<f32>, eps: f32, #[constexpr] N: usize) {
    for i in 0..N {
        some_kernel(grid(1), x, eps * i);
    }
}

fn main() {}
