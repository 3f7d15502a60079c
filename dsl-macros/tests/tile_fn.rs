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

// ---- tile functions that return several values --------------------------------------------

/// A single-value helper a tuple helper calls.
#[tile_fn]
fn block_max(s: Tile<f32, N>) -> f32 {
    max(s, 0)
}

/// The running max after a block of scores `s`, and the factor that rescales what was
/// summed under the old max `m`: a tuple helper, called from another.
#[tile_fn]
fn new_max(m: f32, s: Tile<f32, N>) -> (f32, f32) {
    let m_new = maximum(m, block_max(s));
    (m_new, exp(m - m_new))
}

/// One step of online softmax · V: the new max, sum and accumulator.
#[tile_fn]
fn softmax_step(
    m: f32,
    l: f32,
    acc: Tile<f32, D>,
    s: Tile<f32, N>,
    vt: Tile<f32, N, D>,
    valid: Tile<bool, N>,
    #[constexpr] D: usize,
    #[constexpr] N: usize,
) -> (f32, f32, Tile<f32, D>) {
    let (m_new, alpha) = new_max(m, s);
    let pr = where_(valid, exp(s - m_new), 0.0);
    (
        m_new,
        l * alpha + sum(pr, 0),
        acc * alpha + sum(vt * pr.expand_dims(1), 0),
    )
}

/// The state before the first step (a weak literal returned as an f32).
#[tile_fn]
fn softmax_init(#[constexpr] D: usize) -> (f32, f32, Tile<f32, D>) {
    (f32::NEG_INFINITY, 0.0, zeros([D], f32))
}

/// The normalised output and the log-sum-exp (which the kernel ignores with `_`).
#[tile_fn]
fn softmax_finish(acc: Tile<f32, D>, l: f32, m: f32) -> (Tile<f32, D>, f32) {
    (acc / l, m + log(l))
}

/// softmax(s[row]) · v[row] over `n` keys in `BLOCK_N` blocks; stats gets the row's max and sum.
#[kernel(helpers(softmax_init, softmax_step, new_max, block_max, softmax_finish))]
fn attend_helpers(
    s: Ptr<f32>,
    v: Ptr<f32>,
    out: Ptr<f32>,
    stats: Ptr<f32>,
    n: i32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
) {
    let row = program_id(0);
    let dcols = arange(0, D);
    let (mut m, mut l, mut acc) = softmax_init(D);
    for start in (0..n).step_by(BLOCK_N) {
        let keys = start + arange(0, BLOCK_N);
        let valid = keys < n;
        let sv = load(s + row * n + keys, valid, f32::NEG_INFINITY);
        let vt = load(
            v + (row * n + keys).expand_dims(1) * D + dcols.expand_dims(0),
            valid.expand_dims(1),
            0.0,
        );
        let (m2, l2, acc2) = softmax_step(m, l, acc, sv, vt, valid, D, BLOCK_N);
        m = m2;
        l = l2;
        acc = acc2;
    }
    let (o, _) = softmax_finish(acc, l, m);
    store(out + row * D + dcols, o);
    store(stats + row * 2, m);
    store(stats + row * 2 + 1, l);
}

/// `attend_helpers` written out: each call's arguments read first, as inlining does.
#[kernel]
fn attend_plain(
    s: Ptr<f32>,
    v: Ptr<f32>,
    out: Ptr<f32>,
    stats: Ptr<f32>,
    n: i32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
) {
    let row = program_id(0);
    let dcols = arange(0, D);
    let m0 = f32::NEG_INFINITY;
    let l0 = 0.0;
    let acc0 = zeros([D], f32);
    let mut m = m0;
    let mut l = l0;
    let mut acc = acc0;
    for start in (0..n).step_by(BLOCK_N) {
        let keys = start + arange(0, BLOCK_N);
        let valid = keys < n;
        let sv = load(s + row * n + keys, valid, f32::NEG_INFINITY);
        let vt = load(
            v + (row * n + keys).expand_dims(1) * D + dcols.expand_dims(0),
            valid.expand_dims(1),
            0.0,
        );
        let m0 = m;
        let l0 = l;
        let acc0 = acc;
        let m_new = maximum(m0, max(sv, 0));
        let alpha = exp(m0 - m_new);
        let pr = where_(valid, exp(sv - m_new), 0.0);
        let l_new = l0 * alpha + sum(pr, 0);
        let acc_new = acc0 * alpha + sum(vt * pr.expand_dims(1), 0);
        m = m_new;
        l = l_new;
        acc = acc_new;
    }
    let acc0 = acc;
    let l0 = l;
    let m0 = m;
    let o = acc0 / l0;
    let _ = m0 + log(l0);
    store(out + row * D + dcols, o);
    store(stats + row * 2, m);
    store(stats + row * 2 + 1, l);
}

/// The IR's statements without the kernel's name and the source comments: the ops alone.
fn ops_text(json: &str) -> String {
    let text = Kernel::from_json(json).unwrap().to_text();
    let ops: Vec<&str> = text
        .lines()
        .skip(1)
        .map(|l| l.split("    // ").next().unwrap_or(l))
        .collect();
    ops.join("\n")
}

#[test]
fn tuple_helpers_build_the_ir_of_the_kernel_written_out() {
    let (a, b) = (
        ops_text(attend_helpers::ir_json()),
        ops_text(attend_plain::ir_json()),
    );
    assert_eq!(a, b, "with helpers:\n{a}\nwritten out:\n{b}");
}

#[test]
fn tuple_helpers_compute_what_the_kernel_written_out_computes() {
    let dev = Device::interpreter();
    let (rows, n, d) = (3usize, 45usize, 8usize);
    let sh: Vec<f32> = (0..rows * n)
        .map(|i| ((i * 7919) % 101) as f32 / 101.0 * 6.0 - 3.0)
        .collect();
    let vh: Vec<f32> = (0..rows * n * d)
        .map(|i| ((i * 104729) % 89) as f32 / 89.0 - 0.5)
        .collect();
    let (s, v) = (dev.upload(&sh).unwrap(), dev.upload(&vh).unwrap());
    let grid = Launch::grid(rows as u32);
    let mut outs = vec![];
    for helpers in [true, false] {
        let (out, stats) = (
            dev.zeros::<f32>(rows * d).unwrap(),
            dev.zeros::<f32>(rows * 2).unwrap(),
        );
        if helpers {
            attend_helpers::launch(&dev, &grid, &s, &v, &out, &stats, n as i32, d, 16).unwrap();
        } else {
            attend_plain::launch(&dev, &grid, &s, &v, &out, &stats, n as i32, d, 16).unwrap();
        }
        let mut all = out.to_vec().unwrap();
        all.extend(stats.to_vec().unwrap());
        outs.push(all.iter().map(|f| f.to_bits()).collect::<Vec<_>>());
    }
    assert_eq!(outs[0], outs[1]);
    // And it is softmax · V: row 0 against a direct evaluation.
    let got: Vec<f32> = outs[0][..d].iter().map(|b| f32::from_bits(*b)).collect();
    let mx = sh[..n].iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f32> = sh[..n].iter().map(|x| (x - mx).exp()).collect();
    let total: f32 = w.iter().sum();
    for (c, g) in got.iter().enumerate() {
        let want: f32 = (0..n).map(|j| w[j] * vh[j * d + c]).sum::<f32>() / total;
        assert!((g - want).abs() < 1e-4, "column {c}: {g} vs {want}");
    }
}
