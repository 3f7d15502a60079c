use dsl_runtime::prelude::*;

#[kernel]
fn scale(x: Ptr<bf16>, y: Ptr<bf16>, s: f32, #[constexpr] BLOCK: usize) {
    let cols = arange(0, BLOCK);
    let v = load(x + cols).to(f32) * s;
    store(y + cols, v);
}

fn main() {}
