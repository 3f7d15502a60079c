use dsl_runtime::prelude::*;

#[kernel]
fn inc(x: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] B: usize) {
    let offs = program_id(0) * B + arange(0, B);
    store(y + offs, load(x + offs, offs < n, 0.0) + 1.0, offs < n);
}

#[megakernel]
fn mk(x: Ptr<f32>, y: Ptr<bf16>, eps: f32, #[constexpr] N: usize) {
    // Missing the constexpr B.
    inc(grid(1), x, x, N);
    // A bf16 pointer where the kernel takes Ptr<f32>, and an f32 where it takes i32.
    inc(grid(1), x, y, eps, 32);
}

fn main() {}
