use dsl_runtime::prelude::*;

#[kernel]
fn accumulate(x: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let acc = 0.0;
    for off in (0..n).step_by(BLOCK) {
        acc += sum(load(x + off + arange(0, BLOCK)), 0);
    }
    store(x, acc);
}

fn main() {}
