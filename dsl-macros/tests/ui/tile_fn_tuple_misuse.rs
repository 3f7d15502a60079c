use dsl_runtime::prelude::*;

#[tile_fn]
fn pair(x: Tile<f32, N>) -> (f32, Tile<f32, N>) {
    (sum(x, 0), x * 2.0)
}

#[tile_fn]
fn total(x: Tile<f32, N>) -> f32 {
    sum(x, 0)
}

// The body's tail: not a tuple, a tuple of the wrong arity, none, a wrong element type.
#[tile_fn]
fn not_a_tuple(x: f32) -> (f32, f32) {
    x
}

#[tile_fn]
fn short_tuple(x: f32) -> (f32, f32, f32) {
    (x, x)
}

#[tile_fn]
fn no_tail(x: f32) -> (f32, f32) {
    let y = x + 1.0;
}

#[tile_fn]
fn wrong_element(x: Tile<f32, N>) -> (f32, Tile<f32, N>) {
    (sum(x, 0), sum(x, 0))
}

// Misuse at the call: the pattern's arity, a tuple helper where one value goes, a
// single-value helper bound with a tuple pattern, patterns that are not names or `_`, and
// an initialiser that is no call of a tuple helper.
#[kernel(helpers(pair, total, not_a_tuple, short_tuple, no_tail, wrong_element))]
fn uses(x: Ptr<f32>, #[constexpr] BLOCK: usize) {
    let v = load(x + arange(0, BLOCK));
    let (a, b, c) = pair(v);
    let d = pair(v);
    let e = pair(v) + 1.0;
    let f = total(pair(v));
    pair(v);
    let (g, h) = total(v);
    let (i, (j, k)) = pair(v);
    let (l, l) = pair(v);
    let (m, n) = (v, v);
    // Names of a failed pattern stay quiet.
    store(x + arange(0, BLOCK), b + a);
    let (o, p) = not_a_tuple(1.0);
    let (q, r, s) = short_tuple(1.0);
    let (t, u) = no_tail(1.0);
    let (w, _) = wrong_element(v);
}

#[tile_fn]
fn one_tuple(x: f32) -> (f32,) {
    (x,)
}

fn main() {}
