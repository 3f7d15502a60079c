use dsl_runtime::prelude::*;

#[kernel]
fn add_tiles(out: Ptr<i32>, #[constexpr] A: usize, #[constexpr] B: usize) {
    let s = arange(0, A) + arange(0, B);
    store(out + s, s);
}

fn main() {}
