use dsl_runtime::prelude::*;

#[tile_fn]
fn ping(x: f32) -> f32 {
    pong(x) + 1.0
}

#[tile_fn]
fn pong(x: f32) -> f32 {
    ping(x) * 2.0
}

#[tile_fn]
fn total(x: Tile<f32, N>) -> f32 {
    sum(x, 0)
}

// Misuse at the call: arity, dtype, shape (rank), a constexpr that is not one; and recursion.
#[kernel(helpers(ping, pong, total))]
fn uses(x: Ptr<f32>, y: Ptr<bf16>, n: i32, #[constexpr] BLOCK: usize) {
    let cols = arange(0, BLOCK);
    let a = total(load(x + cols), 1.0);
    let b = total(load(y + cols));
    let c = total(load(x + cols).expand_dims(0));
    let d = rms_inv(load(x + cols), n, 1);
    let e = split_chunk(n, n, 128);
    let f = ping(1.0);
}

#[tile_fn]
fn sum(x: f32) -> f32 {
    x
}

fn main() {}
