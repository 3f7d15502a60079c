use dsl_runtime::prelude::*;

// Each builder error points at the operand it names (`BuildError::operand`).
#[kernel]
fn spans(x: Ptr<f32>, y: Ptr<bf16>, n: i32, #[constexpr] BLOCK: usize) {
    let cols = arange(0, BLOCK);
    let v = load(x + cols);
    // A loop bound that is not an i32 scalar: at that bound.
    for i in 0..n as f32 {}
    // A reduction axis out of range: at the axis.
    let s = sum(v, 1);
    // An assignment that would narrow: at the value.
    let mut acc = zeros([BLOCK], bf16);
    acc = v * 2.0;
    // An atomic through a pointer it does not work on: at the pointer.
    atomic_add(y + cols, v.to(bf16));
    // `where_` between a number and pointers: at the pointers.
    let w = where_(cols < n, v, x + cols);
    // `expand_dims` past the rank: at the axis.
    let e = v.expand_dims(3);
    // A fill of three dimensions: at the shape.
    let z = zeros([BLOCK, BLOCK, BLOCK], f32);
}

fn main() {}
