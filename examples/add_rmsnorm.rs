//! Fused residual add + RMSNorm: the residual stream is updated in place and the normalised
//! row written, in one pass. Run: `cargo run --example add_rmsnorm [-- --explain]`.
use tessera::check::{compare, run_example, to_f32};
use tessera::kernels::add_rmsnorm::{add_rmsnorm, add_rmsnorm_ref};
use tessera::runtime::{ConstVal, Launch};

fn main() -> std::process::ExitCode {
    const BLOCK: usize = 1024;
    run_example(
        &add_rmsnorm::KERNEL,
        &[("BLOCK", ConstVal::Int(BLOCK as i64))],
        4,
        |dev, rng| {
            let (rows, cols, eps) = (16, 1000, 1e-6);
            let (x, r, w) = (
                rng.vec_bf16(rows * cols),
                rng.vec_bf16(rows * cols),
                rng.vec_bf16(cols),
            );
            let (dx, dr, dw, dy) = (
                dev.upload(&x).map_err(s)?,
                dev.upload(&r).map_err(s)?,
                dev.upload(&w).map_err(s)?,
                dev.zeros(rows * cols).map_err(s)?,
            );
            add_rmsnorm::launch(
                dev,
                &Launch::grid(rows as u32),
                &dx,
                &dr,
                &dw,
                &dy,
                cols as i32,
                eps,
                BLOCK,
            )
            .map_err(s)?;
            let (want_y, want_r) = add_rmsnorm_ref(&x, &r, &w, cols, eps);
            compare(
                &to_f32(&dr.to_vec().map_err(s)?),
                &to_f32(&want_r),
                0.0,
                0.0,
            )
            .map_err(|e| format!("residual: {e}"))?;
            compare(
                &to_f32(&dy.to_vec().map_err(s)?),
                &to_f32(&want_y),
                1e-2,
                1e-2,
            )
        },
    )
}

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}
