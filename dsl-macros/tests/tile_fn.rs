//! `#[tile_fn]` helpers and the tile standard library: inlined at lowering, so a kernel
//! written on them computes what the same kernel written out computes, bit for bit.
use dsl_ir::{walk, Kernel, Stmt};
use dsl_runtime::prelude::*;

/// The rows of the program's block (a helper with a constexpr parameter).
#[tile_fn]
fn row_block(#[constexpr] BM: usize) -> Tile<i32, BM> {
    program_id(0) * BM + arange(0, BM)
}

/// A helper that calls the library (`gemv_rows`, `rms_inv`) and has statements of its own.
const HELPER_LINE: u32 = line!() + 2;
#[tile_fn]
fn normed_gemv(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    rows: Tile<i32, BM>,
    m: i32,
    k: i32,
    eps: f32,
    #[constexpr] BK: usize,
) -> Tile<f32, BM> {
    let mut sumsq = zeros([BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let xv = load(x + cols, cols < k, 0.0).to(f32);
        sumsq += xv * xv;
    }
    gemv_rows(w, x, rows, rows < m, k, BK) * rms_inv(sumsq, k, eps)
}

const CALL_LINE: u32 = line!() + 12;
#[kernel(helpers(row_block, normed_gemv))]
fn gemv_helpers(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    y: Ptr<f32>,
    m: i32,
    k: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    let rows = row_block(BM);
    let out = normed_gemv(w, x, rows, m, k, eps, BK);
    store(y + rows, out, rows < m);
}

#[kernel]
fn gemv_plain(
    w: Ptr<bf16>,
    x: Ptr<bf16>,
    y: Ptr<f32>,
    m: i32,
    k: i32,
    eps: f32,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let mut sumsq = zeros([BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let xv = load(x + cols, cols < k, 0.0).to(f32);
        sumsq += xv * xv;
    }
    let row_mask = rows < m;
    let mut acc = zeros([BM, BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let col_mask = cols < k;
        let xv = load(x + cols, col_mask, 0.0).to(f32);
        let tile_mask = row_mask.expand_dims(1) & col_mask.expand_dims(0);
        let wv = load(
            w + rows.expand_dims(1) * k + cols.expand_dims(0),
            tile_mask,
            0.0,
        )
        .to(f32);
        acc += wv * xv.expand_dims(0);
    }
    let out = sum(acc, 1) * rsqrt(sum(sumsq, 0) / k as f32 + eps);
    store(y + rows, out, rows < m);
}

#[test]
fn a_kernel_on_helpers_computes_what_it_computes_written_out() {
    let dev = Device::interpreter();
    let (m, k) = (37usize, 200usize);
    let wh: Vec<bf16> = (0..m * k)
        .map(|i| bf16::from_f32(((i * 7919) % 61) as f32 / 61.0 - 0.5))
        .collect();
    let xh: Vec<bf16> = (0..k)
        .map(|i| bf16::from_f32(((i * 104729) % 37) as f32 / 37.0 - 0.5))
        .collect();
    let (w, x) = (dev.upload(&wh).unwrap(), dev.upload(&xh).unwrap());
    let (y1, y2) = (dev.zeros::<f32>(m).unwrap(), dev.zeros::<f32>(m).unwrap());
    let grid = Launch::grid(m.div_ceil(8) as u32);
    let (mi, ki) = (m as i32, k as i32);
    gemv_helpers::launch(&dev, &grid, &w, &x, &y1, mi, ki, 1e-6, 8, 64).unwrap();
    gemv_plain::launch(&dev, &grid, &w, &x, &y2, mi, ki, 1e-6, 8, 64).unwrap();
    let (a, b) = (y1.to_vec().unwrap(), y2.to_vec().unwrap());
    assert!(a.iter().any(|v| *v != 0.0), "{a:?}");
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&b));
}

#[test]
fn inlined_code_takes_the_line_of_the_call_and_names_its_place_in_the_helper() {
    let k = Kernel::from_json(gemv_helpers::ir_json()).unwrap();
    let mut lines = std::collections::BTreeSet::new();
    walk(&k.body, &mut |s| {
        if let Stmt::Let { src, .. } = s {
            lines.insert(src.line);
        }
    });
    // row_block(BM) on the first line of the body, normed_gemv(..) (and the library
    // functions it calls) on the next, the store on the third.
    let want: std::collections::BTreeSet<u32> = [CALL_LINE, CALL_LINE + 1, CALL_LINE + 2].into();
    assert_eq!(lines, want, "{}", k.to_text());
    // Each inlined statement also says where it is in its helper (`Src::via`): the user's
    // helper with its own lines, the library's by name (its text carries no lines).
    let mut via = std::collections::BTreeSet::new();
    walk(&k.body, &mut |s| {
        if let Stmt::Let { src, .. } | Stmt::For { src, .. } = s {
            via.insert(src.via.clone());
        }
    });
    for (name, own) in [
        ("row_block", HELPER_LINE - 6),
        ("normed_gemv", HELPER_LINE + 10),
        ("normed_gemv", HELPER_LINE + 12),
        ("normed_gemv", HELPER_LINE + 15),
    ] {
        assert!(
            via.contains(&format!("{name}:{own}")),
            "{name}:{own} in {via:?}"
        );
    }
    assert!(
        via.contains("gemv_rows") && via.contains("rms_inv"),
        "{via:?}"
    );
    assert!(via.contains(""), "the store is the kernel's own");
    let cuda = gemv_helpers::KERNEL
        .cuda_source(&gemv_helpers::Consts { BM: 8, BK: 64 }.bindings(), 4)
        .unwrap()
        .code;
    let comment = format!(
        "// line {} (normed_gemv:{}): ",
        CALL_LINE + 1,
        HELPER_LINE + 12
    );
    assert!(cuda.contains(&comment), "{cuda}");
    // The library's loop is there, nested in nothing: two loops, one per streaming pass.
    let mut loops = 0;
    walk(&k.body, &mut |s| {
        loops += matches!(s, Stmt::For { .. }) as usize
    });
    assert_eq!(loops, 2);
}
