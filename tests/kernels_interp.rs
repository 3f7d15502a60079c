//! Every shipped kernel, run by the interpreter, equals its plain-Rust reference on random
//! inputs at odd sizes (1, 7, 1000, 4099) and tiles that do and do not divide them.
use tessera::check::{compare, to_f32, Rng};
use tessera::kernels::*;
use tessera::runtime::{cdiv, ConstVal::Int, Device, Launch};

fn seed() -> u64 {
    let s = Rng::seed_from_env();
    eprintln!("seed {s} (TESSERA_SEED={s} reproduces)");
    s
}

#[test]
fn vector_add_matches_reference() {
    let dev = Device::interpreter();
    let mut rng = Rng::new(seed());
    for (n, block) in [(1, 128), (7, 4), (1000, 256), (4099, 1024), (4099, 1000)] {
        let (x, y) = (rng.vec_f32(n), rng.vec_f32(n));
        let (dx, dy, dz) = (
            dev.upload(&x).unwrap(),
            dev.upload(&y).unwrap(),
            dev.zeros::<f32>(n).unwrap(),
        );
        let l = Launch::grid(cdiv(n as i64, block as i64));
        vector_add::vector_add::launch(&dev, &l, &dx, &dy, &dz, n as i32, block).unwrap();
        compare(
            &dz.to_vec().unwrap(),
            &vector_add::vector_add_ref(&x, &y),
            0.0,
            0.0,
        )
        .unwrap_or_else(|e| panic!("n={n} BLOCK={block}: {e}"));
    }
}

#[test]
fn rmsnorm_matches_reference_for_any_row_length() {
    let dev = Device::interpreter();
    let mut rng = Rng::new(seed());
    for (rows, cols, block) in [
        (1, 1, 16),
        (3, 7, 4),
        (2, 1000, 256),
        (2, 4099, 1024),
        (1, 4099, 1000),
    ] {
        let (x, w) = (rng.vec_bf16(rows * cols), rng.vec_bf16(cols));
        let (dx, dw, dy) = (
            dev.upload(&x).unwrap(),
            dev.upload(&w).unwrap(),
            dev.zeros(rows * cols).unwrap(),
        );
        rmsnorm::rmsnorm::launch(
            &dev,
            &Launch::grid(rows as u32),
            &dx,
            &dw,
            &dy,
            cols as i32,
            1e-6,
            block,
        )
        .unwrap();
        let want = rmsnorm::rmsnorm_ref(&x, &w, cols, 1e-6);
        compare(&to_f32(&dy.to_vec().unwrap()), &to_f32(&want), 1e-2, 1e-2)
            .unwrap_or_else(|e| panic!("{rows}x{cols} BLOCK={block}: {e}"));
    }
}

#[test]
fn softmax_matches_reference() {
    let dev = Device::interpreter();
    let mut rng = Rng::new(seed());
    for (rows, cols, block) in [(1, 1, 1), (4, 7, 8), (3, 1000, 1000), (2, 4099, 4099)] {
        let x: Vec<f32> = rng.vec_f32(rows * cols).iter().map(|v| v * 10.0).collect();
        let (dx, dy) = (
            dev.upload(&x).unwrap(),
            dev.zeros::<f32>(rows * cols).unwrap(),
        );
        softmax::softmax::launch(
            &dev,
            &Launch::grid(rows as u32),
            &dx,
            &dy,
            cols as i32,
            block,
        )
        .unwrap();
        compare(
            &dy.to_vec().unwrap(),
            &softmax::softmax_ref(&x, cols),
            1e-6,
            1e-4,
        )
        .unwrap_or_else(|e| panic!("{rows}x{cols}: {e}"));
    }
}

#[test]
fn gemv_matches_reference() {
    let dev = Device::interpreter();
    let mut rng = Rng::new(seed());
    for (m, k, bm, bk) in [
        (1, 1, 1, 16),
        (7, 7, 4, 4),
        (1000, 33, 8, 32),
        (33, 1000, 16, 256),
        (5, 4099, 2, 1000),
        (10, 160, 1, 160),
    ] {
        let (w, x) = (rng.vec_bf16(m * k), rng.vec_bf16(k));
        let (dw, dx, dy) = (
            dev.upload(&w).unwrap(),
            dev.upload(&x).unwrap(),
            dev.zeros(m).unwrap(),
        );
        let l = Launch::grid(cdiv(m as i64, bm as i64));
        gemv::gemv::launch(&dev, &l, &dw, &dx, &dy, m as i32, k as i32, bm, bk).unwrap();
        let want = gemv::gemv_ref(&w, &x, m, k);
        compare(&to_f32(&dy.to_vec().unwrap()), &to_f32(&want), 2e-2, 1e-2)
            .unwrap_or_else(|e| panic!("{m}x{k} BM={bm} BK={bk}: {e}"));
    }
}

#[test]
fn add_rmsnorm_matches_reference() {
    let dev = Device::interpreter();
    let mut rng = Rng::new(seed());
    for (rows, cols, block) in [(1, 1, 1), (3, 7, 8), (2, 1000, 1000), (2, 4099, 4099)] {
        let (x, r, w) = (
            rng.vec_bf16(rows * cols),
            rng.vec_bf16(rows * cols),
            rng.vec_bf16(cols),
        );
        let (dx, dr, dw, dy) = (
            dev.upload(&x).unwrap(),
            dev.upload(&r).unwrap(),
            dev.upload(&w).unwrap(),
            dev.zeros(rows * cols).unwrap(),
        );
        add_rmsnorm::add_rmsnorm::launch(
            &dev,
            &Launch::grid(rows as u32),
            &dx,
            &dr,
            &dw,
            &dy,
            cols as i32,
            1e-6,
            block,
        )
        .unwrap();
        let (want_y, want_r) = add_rmsnorm::add_rmsnorm_ref(&x, &r, &w, cols, 1e-6);
        assert_eq!(dr.to_vec().unwrap(), want_r, "{rows}x{cols}: residual");
        compare(&to_f32(&dy.to_vec().unwrap()), &to_f32(&want_y), 1e-2, 1e-2)
            .unwrap_or_else(|e| panic!("{rows}x{cols}: {e}"));
    }
}

#[test]
fn a_mistyped_launch_is_an_error_not_a_panic() {
    let dev = Device::interpreter();
    let x = dev.zeros::<f32>(10).unwrap();
    let err = tessera::kernels::vector_add::vector_add::KERNEL
        .launch(
            &dev,
            &Launch::grid(1u32),
            &[tessera::runtime::Arg::I32(3)],
            &[("BLOCK", Int(16))],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("expects 4 arguments, got 1"), "{err}");
    // An unmasked access past the end is caught by the interpreter, naming the kernel.
    let err = tessera::kernels::vector_add::vector_add::launch(
        &dev,
        &Launch::grid(2u32),
        &x,
        &x,
        &x,
        20,
        16,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("vector_add") && err.contains("out of bounds"),
        "{err}"
    );
}
