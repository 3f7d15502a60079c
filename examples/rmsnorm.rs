//! The lesson's fused RMSNorm on rows of 4099 bf16 values with a 1024-wide tile: the two
//! streaming passes and the mask on the last chunk handle any row length.
//! Run: `cargo run --example rmsnorm [-- --explain]`.
use tessera::check::{compare, run_example, to_f32};
use tessera::kernels::rmsnorm::{rmsnorm, rmsnorm_ref};
use tessera::runtime::{ConstVal, Launch};

fn main() -> std::process::ExitCode {
    const BLOCK: usize = 1024;
    run_example(
        &rmsnorm::KERNEL,
        &[("BLOCK", ConstVal::Int(BLOCK as i64))],
        4,
        |dev, rng| {
            let (rows, cols, eps) = (37, 4099, 1e-6);
            let (x, w) = (rng.vec_bf16(rows * cols), rng.vec_bf16(cols));
            let (dx, dw, dy) = (
                dev.upload(&x).map_err(s)?,
                dev.upload(&w).map_err(s)?,
                dev.zeros(rows * cols).map_err(s)?,
            );
            rmsnorm::launch(
                dev,
                &Launch::grid(rows as u32),
                &dx,
                &dw,
                &dy,
                cols as i32,
                eps,
                BLOCK,
            )
            .map_err(s)?;
            // bf16 output: one rounding step (2^-8 relative) plus f32 summation order.
            compare(
                &to_f32(&dy.to_vec().map_err(s)?),
                &to_f32(&rmsnorm_ref(&x, &w, cols, eps)),
                1e-2,
                1e-2,
            )
        },
    )
}

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}
