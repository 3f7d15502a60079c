//! The smallest kernel: z = x + y over 100 003 elements (not a multiple of the tile, so the
//! last program's mask matters). Run: `cargo run --example vector_add [-- --explain]`.
use tessera::check::{compare, run_example};
use tessera::kernels::vector_add::{vector_add, vector_add_ref};
use tessera::runtime::{cdiv, ConstVal, Launch};

fn main() -> std::process::ExitCode {
    const BLOCK: usize = 1024;
    run_example(
        &vector_add::KERNEL,
        &[("BLOCK", ConstVal::Int(BLOCK as i64))],
        4,
        |dev, rng| {
            let n = 100_003;
            let (x, y) = (rng.vec_f32(n), rng.vec_f32(n));
            let (dx, dy, dz) = (
                dev.upload(&x).map_err(s)?,
                dev.upload(&y).map_err(s)?,
                dev.zeros::<f32>(n).map_err(s)?,
            );
            let launch = Launch::grid(cdiv(n as i64, BLOCK as i64));
            vector_add::launch(dev, &launch, &dx, &dy, &dz, n as i32, BLOCK).map_err(s)?;
            compare(&dz.to_vec().map_err(s)?, &vector_add_ref(&x, &y), 0.0, 0.0)
        },
    )
}

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}
