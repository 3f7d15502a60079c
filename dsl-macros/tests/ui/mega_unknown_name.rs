use dsl_runtime::prelude::*;

#[kernel]
fn inc(x: Ptr<f32>, y: Ptr<f32>, n: i32, #[constexpr] B: usize) {
    let offs = program_id(0) * B + arange(0, B);
    store(y + offs, load(x + offs, offs < n, 0.0) + 1.0, offs < n);
}

#[megakernel]
fn mk(x: Ptr<f32>, y: Ptr<f32>, #[constexpr] N: usize) {
    inc(grid(1), x, z, N, 32);
}

fn main() {}
