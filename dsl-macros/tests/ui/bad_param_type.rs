use dsl_runtime::prelude::*;

#[kernel]
fn takes_a_vec(x: Ptr<f32>, sizes: Vec<i32>) {
    store(x, 0.0);
}

fn main() {}
