use dsl_runtime::prelude::*;

// Independent mistakes are all reported; uses of a failed binding add no noise.
#[kernel]
fn two_mistakes(x: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let cols = arange(0, n);
    let v = load(x + cols);
    let w = exp(program_id(0));
    store(x, w);
}

fn main() {}
