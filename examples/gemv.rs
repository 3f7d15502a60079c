//! GEMV y = W·x with bf16 W at M=1, the op that carries decode, on an odd shape (1000×777)
//! so both masks matter. Run: `cargo run --example gemv [-- --explain]`.
use tessera::check::{compare, run_example, to_f32};
use tessera::kernels::gemv::{gemv, gemv_ref};
use tessera::runtime::{cdiv, ConstVal, Launch};

fn main() -> std::process::ExitCode {
    const BM: usize = 8;
    const BK: usize = 512;
    run_example(
        &gemv::KERNEL,
        &[
            ("BM", ConstVal::Int(BM as i64)),
            ("BK", ConstVal::Int(BK as i64)),
        ],
        4,
        |dev, rng| {
            let (m, k) = (1000, 777);
            let (w, x) = (rng.vec_bf16(m * k), rng.vec_bf16(k));
            let (dw, dx, dy) = (
                dev.upload(&w).map_err(s)?,
                dev.upload(&x).map_err(s)?,
                dev.zeros(m).map_err(s)?,
            );
            let launch = Launch::grid(cdiv(m as i64, BM as i64));
            gemv::launch(dev, &launch, &dw, &dx, &dy, m as i32, k as i32, BM, BK).map_err(s)?;
            compare(
                &to_f32(&dy.to_vec().map_err(s)?),
                &to_f32(&gemv_ref(&w, &x, m, k)),
                2e-2,
                1e-2,
            )
        },
    )
}

fn s(e: impl std::fmt::Display) -> String {
    e.to_string()
}
