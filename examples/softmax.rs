//! Row softmax with a 1000-wide tile: not a power of two (Triton refuses it; masking makes
//! it work). Run: `cargo run --example softmax [-- --explain]`.
use tessera::check::{compare, run_example};
use tessera::kernels::softmax::{softmax, softmax_ref};
use tessera::runtime::{ConstVal, Launch};

fn main() -> std::process::ExitCode {
    const BLOCK: usize = 1000;
    run_example(
        &softmax::KERNEL,
        &[("BLOCK", ConstVal::Int(BLOCK as i64))],
        4,
        |dev, rng| {
            let (rows, cols) = (64, 1000);
            let x: Vec<f32> = rng
                .vec_f32(rows * cols)
                .into_iter()
                .map(|v| v * 8.0)
                .collect();
            let (dx, dy) = (
                dev.upload(&x).map_err(s)?,
                dev.zeros::<f32>(rows * cols).map_err(s)?,
            );
            softmax::launch(
                dev,
                &Launch::grid(rows as u32),
                &dx,
                &dy,
                cols as i32,
                BLOCK,
            )
            .map_err(s)?;
            compare(&dy.to_vec().map_err(s)?, &softmax_ref(&x, cols), 1e-6, 1e-4)
        },
    )
}

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}
