//! `f32::NEG_INFINITY` and kin are literals in kernels: a masked max whose masked-off lanes
//! must never win, even when every real value is negative. Through the interpreter, and
//! compiled by NVRTC (the emitter spells non-finite values without `inf`).
use tessera::prelude::*;
use tessera::runtime::ConstVal::Int;
use tessera::runtime::Launch;

#[kernel]
fn masked_row_max(x: Ptr<f32>, out: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let row = program_id(0);
    let cols = arange(0, BLOCK);
    let mask = cols < n;
    let v = load(x + row * n + cols, mask, f32::NEG_INFINITY);
    store(out + row, maximum(max(v, 0), f32::MIN));
}

#[test]
fn masked_lanes_hold_negative_infinity() {
    let dev = Device::interpreter();
    let (rows, n, block) = (3usize, 5usize, 8usize);
    let x: Vec<f32> = (0..rows * n).map(|i| -10.0 - i as f32).collect();
    let (dx, dout) = (dev.upload(&x).unwrap(), dev.zeros::<f32>(rows).unwrap());
    masked_row_max::launch(
        &dev,
        &Launch::grid(rows as u32),
        &dx,
        &dout,
        n as i32,
        block,
    )
    .unwrap();
    let want: Vec<f32> = x
        .chunks(n)
        .map(|r| r.iter().copied().fold(f32::NEG_INFINITY, f32::max))
        .collect();
    assert_eq!(dout.to_vec().unwrap(), want);
}

#[test]
fn non_finite_literals_compile_with_nvrtc() {
    if let Err(e) = tessera::runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
    let src = masked_row_max::KERNEL
        .cuda_source(&[("BLOCK", Int(8))], 1)
        .unwrap();
    assert!(
        !src.code.contains(" inf") && !src.code.contains("(inf"),
        "{}",
        src.code
    );
    tessera::runtime::nvrtc::compile(&src.code, "sm_90", false).unwrap_or_else(|e| panic!("{e}"));
}
