use dsl_runtime::prelude::*;

#[megakernel]
fn mk(w: Ptr<f32>, eps: f32, #[constexpr] N: usize) {
    for i in 0..N {
        some_kernel(grid(1), w.layer(i), eps);
    }
}

#[megakernel]
fn mk2(w: Ptr<f32>, eps: f32, #[constexpr] N: usize) {
    for i in 0..N {
        some_kernel(grid(1), eps.layer(i, N), w);
    }
}

fn main() {}
