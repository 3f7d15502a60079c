use dsl_runtime::prelude::*;

// Each misuse is reported at the argument it is about.
#[kernel]
fn bad_dots(a: Ptr<bf16>, b: Ptr<f32>, c: Ptr<f32>, #[constexpr] M: usize, #[constexpr] N: usize) {
    let r = arange(0, M);
    let cols = arange(0, N);
    let at = load(a + r.expand_dims(1) * N + cols.expand_dims(0));
    let bt = load(b + r.expand_dims(1) * N + cols.expand_dims(0));
    let row = load(c + cols);
    let x = dot(row, at);
    let y = dot(at, bt);
    let z = dot(at, trans(at), zeros([M, M], bf16));
    let w = dot(at, trans(at), zeros([M, N], f32));
    let ints = r.expand_dims(1) + cols.expand_dims(0);
    let v = dot(ints, trans(ints));
}

fn main() {}
