use dsl_runtime::prelude::*;

#[megakernel]
fn mk(w: Ptr<f32>, eps: f32, #[constexpr] N: usize) {
    if N {
        some_kernel(grid(1), w, eps);
    }
}

#[megakernel]
fn mk2(w: Ptr<f32>, eps: f32, #[constexpr] N: usize) {
    if w {
        some_kernel(grid(1), w, eps);
    }
}

fn main() {}
