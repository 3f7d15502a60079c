//! Kernels built by hand, run by the interpreter, compared with plain-Rust references on
//! seeded random inputs. References mirror the interpreter's f32 operation order, so most
//! comparisons are bit-exact; a looser f64 cross-check guards against a shared mistake.
mod common;
use common::*;
use dsl_ir::{AtomicOp, BinOp, DType, Kernel, ReduceOp, UnaryOp};
use dsl_runtime::interp::{self, HostMem, InterpArg, InterpOptions, ProgramOrder};

const SIZES: [usize; 4] = [1, 7, 1000, 4099];

/// `z = x + y`, BLOCK elements per program.
fn vadd(d: DType, block: i64) -> Kernel {
    let mut k = K::new("vadd");
    let x = k.ptr("x", d);
    let y = k.ptr("y", d);
    let z = k.ptr("z", d);
    let n = k.scalar("n", DType::I32);
    let (bv, blk) = k.constexpr("BLOCK");
    let pid = k.pid(0);
    let base = k.mul(pid, bv);
    let cols = k.arange(blk);
    let offs = k.add(base, cols);
    let mask = k.lt(offs, n);
    let xp = k.add(x, offs);
    let yp = k.add(y, offs);
    let xv = k.load(xp, Some(mask), None);
    let yv = k.load(yp, Some(mask), None);
    let s = k.add(xv, yv);
    let zp = k.add(z, offs);
    k.store(zp, s, Some(mask));
    k.finish(&[("BLOCK", block)])
}

#[test]
fn vector_add_f32_and_bf16() {
    let mut rng = Rng::new("vector_add");
    for d in [DType::F32, DType::BF16, DType::F16] {
        for block in [1, 16, 256] {
            let k = vadd(d, block);
            for n in SIZES {
                let xs = rng.vec_f32(n, -100.0, 100.0);
                let ys = rng.vec_f32(n, -100.0, 100.0);
                // A sentinel element after z: masked lanes must not write it.
                let mut mem = vec![
                    HostMem::from_f32s(d, &xs),
                    HostMem::from_f32s(d, &ys),
                    HostMem::from_f32s(d, &vec![7.0; n + 1]),
                ];
                let args = [
                    ptr(0, &mem),
                    ptr(1, &mem),
                    ptr(2, &mem),
                    InterpArg::I32(n as i32),
                ];
                run(&k, [cdiv(n, block as usize), 1, 1], &args, &mut mem).unwrap();
                let want: Vec<f32> = (0..n)
                    .map(|i| round_to(d, round_to(d, xs[i]) + round_to(d, ys[i])))
                    .collect();
                let got = mem[2].to_f32s();
                assert_bits_eq(&got[..n], &want, &format!("vadd {d} block {block} n {n}"));
                assert_eq!(got[n], 7.0, "masked lane wrote past the end");
            }
        }
    }
}

/// The reference: the same f32 operations in the same order.
fn rmsnorm_ref(
    x: &[f32],
    w: &[f32],
    rows: usize,
    n: usize,
    eps: f32,
    acc_order: impl Fn(&[f32]) -> f32,
) -> Vec<f32> {
    let mut out = vec![0.0; rows * n];
    for r in 0..rows {
        let xr = &x[r * n..(r + 1) * n];
        let sq: Vec<f32> = xr.iter().map(|v| v * v).collect();
        let inv = 1.0 / (acc_order(&sq) / n as f32 + eps).sqrt();
        for c in 0..n {
            out[r * n + c] = bf(xr[c] * inv * w[c]);
        }
    }
    out
}

fn seq_sum(v: &[f32]) -> f32 {
    v[1..].iter().fold(v[0], |a, b| a + b)
}

/// Loose check against f64 math: within 2 bf16 ulps.
fn assert_close_bf16(got: &[f32], x: &[f32], w: &[f32], rows: usize, n: usize, eps: f32) {
    for r in 0..rows {
        let xr = &x[r * n..(r + 1) * n];
        let ms = xr.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        for c in 0..n {
            let want = xr[c] as f64 * inv * w[c] as f64;
            let g = got[r * n + c] as f64;
            assert!(
                (g - want).abs() <= 2.0 * want.abs() / 128.0 + 1e-30,
                "row {r} col {c}: {g} vs {want}"
            );
        }
    }
}

#[test]
fn rmsnorm_one_pass() {
    let mut rng = Rng::new("rmsnorm_one_pass");
    for n in [1, 7, 1000] {
        let (k, _) = rmsnorm(1024);
        let rows = 5;
        let x: Vec<f32> = rng
            .vec_f32(rows * n, -3.0, 3.0)
            .into_iter()
            .map(bf)
            .collect();
        let w: Vec<f32> = rng.vec_f32(n, 0.5, 1.5).into_iter().map(bf).collect();
        let eps = 1e-6;
        let mut mem = vec![
            HostMem::from_f32s(DType::BF16, &x),
            HostMem::from_f32s(DType::BF16, &w),
            HostMem::zeros(DType::BF16, rows * n),
        ];
        let args = [
            ptr(0, &mem),
            ptr(1, &mem),
            ptr(2, &mem),
            InterpArg::I32(n as i32),
            InterpArg::F32(eps),
        ];
        run(&k, [rows as u32, 1, 1], &args, &mut mem).unwrap();
        let got = mem[2].to_f32s();
        assert_bits_eq(
            &got,
            &rmsnorm_ref(&x, &w, rows, n, eps, seq_sum),
            &format!("rmsnorm n={n}"),
        );
        assert_close_bf16(&got, &x, &w, rows, n, eps);
    }
}

/// Two passes over the columns in chunks of BLOCK, with a `let mut` accumulator tile.
fn rmsnorm_two_pass(block: i64) -> Kernel {
    let mut k = K::new("rmsnorm2");
    let x = k.ptr("x", DType::BF16);
    let w = k.ptr("w", DType::BF16);
    let y = k.ptr("y", DType::BF16);
    let n = k.scalar("n_cols", DType::I32);
    let eps = k.scalar("eps", DType::F32);
    let (bv, blk) = k.constexpr("BLOCK");
    let row = k.pid(0);
    let cols = k.arange(blk.clone());
    let base = k.mul(row, n);
    let zeros = k.full(vec![blk], 0.0, DType::F32);
    let acc = k.var("acc", zeros);
    let start = k.int(0);
    let off = k.for_(start, n, bv, "for off in (0..n_cols).step_by(BLOCK)");
    {
        let c = k.add(cols, off);
        let mask = k.lt(c, n);
        let p = k.add(x, base);
        let p = k.add(p, c);
        let xv = k.load(p, Some(mask), None);
        let xf = k.cast(xv, DType::F32);
        let sq = k.mul(xf, xf);
        let a = k.read(acc);
        let a2 = k.add(a, sq);
        k.assign(acc, a2);
    }
    k.end_for();
    let a = k.read(acc);
    let ss = k.reduce(ReduceOp::Sum, a, 0);
    let nf = k.cast(n, DType::F32);
    let mean = k.div(ss, nf);
    let m = k.add(mean, eps);
    let inv = k.un(UnaryOp::Rsqrt, m);
    let start = k.int(0);
    let off = k.for_(start, n, bv, "for off in (0..n_cols).step_by(BLOCK)");
    {
        let c = k.add(cols, off);
        let mask = k.lt(c, n);
        let p = k.add(x, base);
        let p = k.add(p, c);
        let xv = k.load(p, Some(mask), None);
        let xf = k.cast(xv, DType::F32);
        let wp = k.add(w, c);
        let wv = k.load(wp, Some(mask), None);
        let wf = k.cast(wv, DType::F32);
        let o = k.mul(xf, inv);
        let o = k.mul(o, wf);
        let ob = k.cast(o, DType::BF16);
        let yp = k.add(y, base);
        let yp = k.add(yp, c);
        k.store(yp, ob, Some(mask));
    }
    k.end_for();
    k.finish(&[("BLOCK", block)])
}

#[test]
fn rmsnorm_two_pass_matches() {
    let mut rng = Rng::new("rmsnorm_two_pass");
    for (n, block) in [(1, 4), (7, 4), (1000, 64), (4099, 256)] {
        let k = rmsnorm_two_pass(block);
        let rows = 3;
        let x: Vec<f32> = rng
            .vec_f32(rows * n, -3.0, 3.0)
            .into_iter()
            .map(bf)
            .collect();
        let w: Vec<f32> = rng.vec_f32(n, 0.5, 1.5).into_iter().map(bf).collect();
        let eps = 1e-5;
        let mut mem = vec![
            HostMem::from_f32s(DType::BF16, &x),
            HostMem::from_f32s(DType::BF16, &w),
            HostMem::zeros(DType::BF16, rows * n),
        ];
        let args = [
            ptr(0, &mem),
            ptr(1, &mem),
            ptr(2, &mem),
            InterpArg::I32(n as i32),
            InterpArg::F32(eps),
        ];
        run(&k, [rows as u32, 1, 1], &args, &mut mem).unwrap();
        let got = mem[2].to_f32s();
        // Lane l accumulates elements l, l + B, l + 2B, ...; then the lanes are summed in order.
        let b = block as usize;
        let lanes = |sq: &[f32]| {
            let acc: Vec<f32> = (0..b)
                .map(|l| sq.iter().skip(l).step_by(b).fold(0.0f32, |a, v| a + v))
                .collect();
            seq_sum(&acc)
        };
        assert_bits_eq(
            &got,
            &rmsnorm_ref(&x, &w, rows, n, eps, lanes),
            &format!("rmsnorm2 n={n}"),
        );
        assert_close_bf16(&got, &x, &w, rows, n, eps);
    }
}

fn softmax(block: i64) -> Kernel {
    let mut k = K::new("softmax");
    let x = k.ptr("x", DType::F32);
    let y = k.ptr("y", DType::F32);
    let n = k.scalar("n", DType::I32);
    let (_, blk) = k.constexpr("BLOCK");
    let row = k.pid(0);
    let cols = k.arange(blk);
    let mask = k.lt(cols, n);
    let base = k.mul(row, n);
    let p = k.add(x, base);
    let p = k.add(p, cols);
    let ninf = k.float(f64::NEG_INFINITY);
    let xv = k.load(p, Some(mask), Some(ninf));
    let m = k.reduce(ReduceOp::Max, xv, 0);
    let d = k.sub(xv, m);
    let e = k.un(UnaryOp::Exp, d);
    let s = k.reduce(ReduceOp::Sum, e, 0);
    let o = k.div(e, s);
    let q = k.add(y, base);
    let q = k.add(q, cols);
    k.store(q, o, Some(mask));
    k.finish(&[("BLOCK", block)])
}

#[test]
fn row_softmax() {
    let mut rng = Rng::new("row_softmax");
    for n in SIZES {
        let block = n.next_power_of_two() as i64;
        let k = softmax(block);
        let rows = 4;
        let x = rng.vec_f32(rows * n, -20.0, 20.0);
        let mut mem = vec![
            HostMem::from_f32s(DType::F32, &x),
            HostMem::zeros(DType::F32, rows * n),
        ];
        let args = [ptr(0, &mem), ptr(1, &mem), InterpArg::I32(n as i32)];
        run(&k, [rows as u32, 1, 1], &args, &mut mem).unwrap();
        let got = mem[1].to_f32s();
        let mut want = vec![0.0; rows * n];
        for r in 0..rows {
            let xr = &x[r * n..(r + 1) * n];
            let m = xr.iter().copied().fold(f32::NAN, f32::max);
            let e: Vec<f32> = xr.iter().map(|v| (v - m).exp()).collect();
            let s = seq_sum(&e);
            for c in 0..n {
                want[r * n + c] = e[c] / s;
            }
            let total: f64 = got[r * n..(r + 1) * n].iter().map(|&v| v as f64).sum();
            assert!((total - 1.0).abs() < 1e-4, "row {r} sums to {total}");
        }
        assert_bits_eq(&got, &want, &format!("softmax n={n}"));
    }
}

/// y = W x, W bf16 [M, K] row-major, x bf16 [K], y f32 [M]: a [BM, BK] tile per step.
fn gemv(bm: i64, bk: i64) -> Kernel {
    let mut k = K::new("gemv");
    let w = k.ptr("w", DType::BF16);
    let x = k.ptr("x", DType::BF16);
    let y = k.ptr("y", DType::F32);
    let m = k.scalar("m", DType::I32);
    let kk = k.scalar("k", DType::I32);
    let (bmv, bm_d) = k.constexpr("BM");
    let (bkv, bk_d) = k.constexpr("BK");
    let pid = k.pid(0);
    let r0 = k.mul(pid, bmv);
    let ar = k.arange(bm_d.clone());
    let rows = k.add(r0, ar);
    let rmask = k.lt(rows, m);
    let rows2 = k.expand(rows, 1);
    let rmask2 = k.expand(rmask, 1);
    let roff = k.mul(rows2, kk);
    let ks = k.arange(bk_d.clone());
    let zeros = k.full(vec![bm_d, bk_d], 0.0, DType::F32);
    let acc = k.var("acc", zeros);
    let start = k.int(0);
    let k0 = k.for_(start, kk, bkv, "for k0 in (0..k).step_by(BK)");
    {
        let cols = k.add(ks, k0);
        let cmask = k.lt(cols, kk);
        let cols2 = k.expand(cols, 0);
        let cmask2 = k.expand(cmask, 0);
        let mask = k.and(rmask2, cmask2);
        let off = k.add(roff, cols2);
        let wp = k.add(w, off);
        let zero = k.float(0.0);
        let wv = k.load(wp, Some(mask), Some(zero));
        let wf = k.cast(wv, DType::F32);
        let xp = k.add(x, cols);
        let xv = k.load(xp, Some(cmask), None);
        let xf = k.cast(xv, DType::F32);
        let xr = k.expand(xf, 0);
        let prod = k.mul(wf, xr);
        let a = k.read(acc);
        let a2 = k.add(a, prod);
        k.assign(acc, a2);
    }
    k.end_for();
    let a = k.read(acc);
    let yv = k.reduce(ReduceOp::Sum, a, 1);
    let yp = k.add(y, rows);
    k.store(yp, yv, Some(rmask));
    k.finish(&[("BM", bm), ("BK", bk)])
}

#[test]
fn gemv_bf16_weights() {
    let mut rng = Rng::new("gemv");
    for (m, kk, bm, bk) in [
        (1, 1, 1, 1),
        (7, 4099, 4, 256),
        (1000, 1000, 16, 128),
        (33, 7, 8, 8),
    ] {
        let k = gemv(bm, bk);
        let w: Vec<f32> = rng.vec_f32(m * kk, -1.0, 1.0).into_iter().map(bf).collect();
        let x: Vec<f32> = rng.vec_f32(kk, -1.0, 1.0).into_iter().map(bf).collect();
        let mut mem = vec![
            HostMem::from_f32s(DType::BF16, &w),
            HostMem::from_f32s(DType::BF16, &x),
            HostMem::zeros(DType::F32, m),
        ];
        let args = [
            ptr(0, &mem),
            ptr(1, &mem),
            ptr(2, &mem),
            InterpArg::I32(m as i32),
            InterpArg::I32(kk as i32),
        ];
        let t = std::time::Instant::now();
        run(&k, [cdiv(m, bm as usize), 1, 1], &args, &mut mem).unwrap();
        eprintln!("gemv {m}x{kk}: {:?}", t.elapsed());
        let got = mem[2].to_f32s();
        let (bm, bk) = (bm as usize, bk as usize);
        for r in 0..m {
            // Lane c of row r sums w[r, c + j*BK] * x[c + j*BK] over the chunks j; masked
            // lanes add 0 * 0.
            let lanes: Vec<f32> = (0..bk)
                .map(|c| {
                    (c..kk.div_ceil(bk) * bk).step_by(bk).fold(0.0f32, |a, j| {
                        if j < kk {
                            a + w[r * kk + j] * x[j]
                        } else {
                            a + 0.0
                        }
                    })
                })
                .collect();
            let want = seq_sum(&lanes);
            assert_eq!(
                got[r].to_bits(),
                want.to_bits(),
                "row {r} of {m}x{kk} (BM {bm}): {} vs {want}",
                got[r]
            );
            let exact: f64 = (0..kk).map(|j| w[r * kk + j] as f64 * x[j] as f64).sum();
            assert!(
                (got[r] as f64 - exact).abs() < 1e-3,
                "row {r}: {} vs {exact}",
                got[r]
            );
        }
    }
}

fn argmax(block: i64) -> Kernel {
    let mut k = K::new("argmax");
    let x = k.ptr("x", DType::F32);
    let idx = k.ptr("idx", DType::I32);
    let mx = k.ptr("mx", DType::F32);
    let mn_idx = k.ptr("mn_idx", DType::I32);
    let n = k.scalar("n", DType::I32);
    let (_, blk) = k.constexpr("BLOCK");
    let row = k.pid(0);
    let cols = k.arange(blk);
    let mask = k.lt(cols, n);
    let base = k.mul(row, n);
    let p = k.add(x, base);
    let p = k.add(p, cols);
    let ninf = k.float(f64::NEG_INFINITY);
    let xv = k.load(p, Some(mask), Some(ninf));
    let i = k.reduce(ReduceOp::Argmax, xv, 0);
    let v = k.reduce(ReduceOp::Max, xv, 0);
    let ip = k.add(idx, row);
    k.store(ip, i, None);
    let vp = k.add(mx, row);
    k.store(vp, v, None);
    // argmin over the valid lanes: pad with +inf.
    let pinf = k.float(f64::INFINITY);
    let xv2 = k.load(p, Some(mask), Some(pinf));
    let j = k.reduce(ReduceOp::Argmin, xv2, 0);
    let jp = k.add(mn_idx, row);
    k.store(jp, j, None);
    k.finish(&[("BLOCK", block)])
}

#[test]
fn argmax_ties_and_nan() {
    let mut rng = Rng::new("argmax");
    for n in SIZES {
        let block = n.next_power_of_two() as i64;
        let k = argmax(block);
        let rows = 6;
        // Small integers make ties likely; some NaNs; row 0 all NaN.
        let mut x: Vec<f32> = (0..rows * n).map(|_| rng.i32(-5, 5) as f32).collect();
        for v in x.iter_mut() {
            if rng.u64().is_multiple_of(10) {
                *v = f32::NAN;
            }
        }
        x[..n].iter_mut().for_each(|v| *v = f32::NAN);
        let mut mem = vec![
            HostMem::from_f32s(DType::F32, &x),
            HostMem::zeros(DType::I32, rows),
            HostMem::zeros(DType::F32, rows),
            HostMem::zeros(DType::I32, rows),
        ];
        let args = [
            ptr(0, &mem),
            ptr(1, &mem),
            ptr(2, &mem),
            ptr(3, &mem),
            InterpArg::I32(n as i32),
        ];
        run(&k, [rows as u32, 1, 1], &args, &mut mem).unwrap();
        let (idx, mx, mn) = (mem[1].to_i32s(), mem[2].to_f32s(), mem[3].to_i32s());
        for r in 0..rows {
            let xr = &x[r * n..(r + 1) * n];
            let mut best: Option<usize> = None;
            let mut worst: Option<usize> = None;
            for (c, v) in xr.iter().enumerate().filter(|(_, v)| !v.is_nan()) {
                if best.is_none_or(|b| *v > xr[b]) {
                    best = Some(c);
                }
                if worst.is_none_or(|b| *v < xr[b]) {
                    worst = Some(c);
                }
            }
            // All-NaN rows: padding lanes hold -inf, which is a number and so is chosen.
            let pad = if (block as usize) > n { n } else { 0 };
            assert_eq!(idx[r] as usize, best.unwrap_or(pad), "argmax row {r} n {n}");
            assert_eq!(mn[r] as usize, worst.unwrap_or(pad), "argmin row {r} n {n}");
            match best {
                Some(b) => assert_eq!(mx[r], xr[b], "max row {r}"),
                None if pad == 0 => assert!(mx[r].is_nan(), "max of all-NaN row {r}"),
                None => assert_eq!(mx[r], f32::NEG_INFINITY),
            }
        }
    }
}

/// A histogram with i32 atomic_add, a running f32 total, and i32/f32 atomic_max.
fn atomics(block: i64) -> Kernel {
    let mut k = K::new("atomics");
    let v = k.ptr("v", DType::I32);
    let x = k.ptr("x", DType::F32);
    let hist = k.ptr("hist", DType::I32);
    let total = k.ptr("total", DType::F32);
    let imax = k.ptr("imax", DType::I32);
    let fmax = k.ptr("fmax", DType::F32);
    let n = k.scalar("n", DType::I32);
    let (bv, blk) = k.constexpr("BLOCK");
    let pid = k.pid(0);
    let base = k.mul(pid, bv);
    let ar = k.arange(blk);
    let offs = k.add(base, ar);
    let mask = k.lt(offs, n);
    let vp = k.add(v, offs);
    let vv = k.load(vp, Some(mask), None);
    let hp = k.add(hist, vv);
    let one = k.int(1);
    k.atomic(AtomicOp::Add, hp, one, Some(mask));
    let xp = k.add(x, offs);
    let xv = k.load(xp, Some(mask), None);
    let zero = k.int(0);
    let z = k.mul(ar, zero);
    let tp = k.add(total, z);
    k.atomic(AtomicOp::Add, tp, xv, Some(mask));
    let ip = k.add(imax, z);
    k.atomic(AtomicOp::Max, ip, vv, Some(mask));
    let fp = k.add(fmax, z);
    k.atomic(AtomicOp::Max, fp, xv, Some(mask));
    k.finish(&[("BLOCK", block)])
}

#[test]
fn atomic_add_and_max() {
    let mut rng = Rng::new("atomics");
    let bins = 13;
    for n in SIZES {
        let k = atomics(64);
        let v: Vec<i32> = (0..n).map(|_| rng.i32(0, bins)).collect();
        let mut x = rng.vec_f32(n, -1.0, 1.0);
        x[n / 2] = f32::NAN; // max ignores NaN; the total becomes NaN
        let mut mem = vec![
            HostMem::from_i32s(&v),
            HostMem::from_f32s(DType::F32, &x),
            HostMem::zeros(DType::I32, bins as usize),
            HostMem::zeros(DType::F32, 1),
            HostMem::from_i32s(&[-1]),
            HostMem::from_f32s(DType::F32, &[f32::NEG_INFINITY]),
        ];
        let args: Vec<InterpArg> = (0..6)
            .map(|b| ptr(b, &mem))
            .chain([InterpArg::I32(n as i32)])
            .collect();
        run(&k, [cdiv(n, 64), 1, 1], &args, &mut mem).unwrap();
        let mut want = vec![0; bins as usize];
        v.iter().for_each(|&b| want[b as usize] += 1);
        assert_eq!(mem[2].to_i32s(), want, "histogram n={n}");
        assert_eq!(mem[2].to_i32s().iter().sum::<i32>(), n as i32);
        assert!(mem[3].to_f32s()[0].is_nan());
        assert_eq!(mem[4].to_i32s()[0], *v.iter().max().unwrap());
        let fmax = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(mem[5].to_f32s()[0], fmax);
        // Without the NaN, the total is the sequential f32 sum in program, then lane, order.
        x[n / 2] = 0.5;
        mem[1] = HostMem::from_f32s(DType::F32, &x);
        mem[3] = HostMem::zeros(DType::F32, 1);
        run(&k, [cdiv(n, 64), 1, 1], &args, &mut mem).unwrap();
        let total = x.iter().fold(0.0f32, |a, b| a + b);
        assert_eq!(
            mem[3].to_f32s()[0].to_bits(),
            total.to_bits(),
            "total n={n}"
        );
    }
}

#[test]
fn where_leaky_relu_bf16() {
    let mut rng = Rng::new("where");
    let mut k = K::new("leaky");
    let x = k.ptr("x", DType::BF16);
    let y = k.ptr("y", DType::BF16);
    let n = k.scalar("n", DType::I32);
    let cols = k.arange_n(1024);
    let mask = k.lt(cols, n);
    let xp = k.add(x, cols);
    let xv = k.load(xp, Some(mask), None);
    let zero = k.float(0.0);
    let pos = k.bin(BinOp::Gt, xv, zero);
    let slope = k.float(0.1);
    let neg = k.mul(xv, slope);
    let o = k.where_(pos, xv, neg);
    let yp = k.add(y, cols);
    k.store(yp, o, Some(mask));
    let k = k.finish(&[]);
    let n = 1000;
    let xs: Vec<f32> = rng.vec_f32(n, -5.0, 5.0).into_iter().map(bf).collect();
    let mut mem = vec![
        HostMem::from_f32s(DType::BF16, &xs),
        HostMem::zeros(DType::BF16, n),
    ];
    let args = [ptr(0, &mem), ptr(1, &mem), InterpArg::I32(n as i32)];
    run(&k, [1, 1, 1], &args, &mut mem).unwrap();
    let s = bf(0.1f64 as f32);
    let want: Vec<f32> = xs
        .iter()
        .map(|&v| if v > 0.0 { v } else { bf(v * s) })
        .collect();
    assert_bits_eq(&mem[1].to_f32s(), &want, "leaky relu");
}

#[test]
fn casts() {
    // f32 -> i32 / bf16 / f16 / bool(as i32); i32 -> f32 / bf16.
    let mut k = K::new("casts");
    let x = k.ptr("x", DType::F32);
    let xi = k.ptr("xi", DType::I32);
    let o_i = k.ptr("o_i", DType::I32);
    let o_bf = k.ptr("o_bf", DType::BF16);
    let o_h = k.ptr("o_h", DType::F16);
    let o_b = k.ptr("o_b", DType::I32);
    let o_if = k.ptr("o_if", DType::F32);
    let o_ibf = k.ptr("o_ibf", DType::BF16);
    let cols = k.arange_n(8);
    let p = k.add(x, cols);
    let v = k.load(p, None, None);
    let c = k.cast(v, DType::I32);
    let q = k.add(o_i, cols);
    k.store(q, c, None);
    let c = k.cast(v, DType::BF16);
    let q = k.add(o_bf, cols);
    k.store(q, c, None);
    let c = k.cast(v, DType::F16);
    let q = k.add(o_h, cols);
    k.store(q, c, None);
    let c = k.cast(v, DType::Bool);
    let c = k.cast(c, DType::I32);
    let q = k.add(o_b, cols);
    k.store(q, c, None);
    let p = k.add(xi, cols);
    let vi = k.load(p, None, None);
    let c = k.cast(vi, DType::F32);
    let q = k.add(o_if, cols);
    k.store(q, c, None);
    let c = k.cast(vi, DType::BF16);
    let q = k.add(o_ibf, cols);
    k.store(q, c, None);
    let k = k.finish(&[]);
    let xs = [
        f32::NAN,
        f32::INFINITY,
        -3.7e10,
        -2.9,
        0.0,
        2.5,
        1.0 + 1.0 / 256.0,
        70000.0,
    ];
    let is = [0, -1, 16_777_217, 16_842_753, i32::MAX, i32::MIN, 255, 257];
    let mut mem = vec![
        HostMem::from_f32s(DType::F32, &xs),
        HostMem::from_i32s(&is),
        HostMem::zeros(DType::I32, 8),
        HostMem::zeros(DType::BF16, 8),
        HostMem::zeros(DType::F16, 8),
        HostMem::zeros(DType::I32, 8),
        HostMem::zeros(DType::F32, 8),
        HostMem::zeros(DType::BF16, 8),
    ];
    let args: Vec<InterpArg> = (0..8).map(|b| ptr(b, &mem)).collect();
    run(&k, [1, 1, 1], &args, &mut mem).unwrap();
    assert_eq!(
        mem[2].to_i32s(),
        vec![0, i32::MAX, i32::MIN, -2, 0, 2, 1, 70000]
    );
    let bfs = mem[3].to_f32s();
    assert!(bfs[0].is_nan());
    assert_eq!(
        &bfs[1..],
        &[f32::INFINITY, bf(-3.7e10), bf(-2.9), 0.0, 2.5, 1.0, 70144.0]
    );
    let hs = mem[4].to_f32s();
    assert_eq!(hs[7], f32::INFINITY, "70000 overflows f16");
    assert_eq!(hs[3], half::f16::from_f32(-2.9).to_f32());
    assert_eq!(
        mem[5].to_i32s(),
        vec![1, 1, 1, 1, 0, 1, 1, 1],
        "number -> bool is != 0 (NaN -> true)"
    );
    assert_eq!(
        mem[6].to_f32s(),
        is.iter().map(|&i| i as f32).collect::<Vec<_>>()
    );
    // i32 -> bf16 rounds once from the integer: 2^24 + 2^16 + 1 is above the midpoint
    // 2^24 + 2^16, though the detour through f32 would land exactly on it.
    let ibf = mem[7].to_f32s();
    assert_eq!(ibf[3], 16_908_288.0);
    assert_eq!(ibf[7], 256.0, "257 -> bf16 ties to even");
    assert_eq!(ibf[5], -2_147_483_648.0);
}

#[test]
fn integer_ops() {
    let mut rng = Rng::new("integer_ops");
    let bins = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Rem,
        BinOp::Min,
        BinOp::Max,
        BinOp::And,
        BinOp::Or,
        BinOp::Xor,
        BinOp::Shl,
        BinOp::Shr,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::Eq,
        BinOp::Ne,
    ];
    let uns = [UnaryOp::Neg, UnaryOp::Not, UnaryOp::Abs];
    let n = 1000usize;
    let mut k = K::new("intops");
    let a = k.ptr("a", DType::I32);
    let b = k.ptr("b", DType::I32);
    let out = k.ptr("out", DType::I32);
    let nv = k.scalar("n", DType::I32);
    let cols = k.arange_n(1024);
    let mask = k.lt(cols, nv);
    let ap = k.add(a, cols);
    let av = k.load(ap, Some(mask), None);
    let bp = k.add(b, cols);
    let bv = k.load(bp, Some(mask), None);
    for (j, op) in bins.iter().enumerate() {
        let mut r = k.bin(*op, av, bv);
        if op.is_comparison() {
            r = k.cast(r, DType::I32);
        }
        let jn = k.int((j * n) as i64);
        let p = k.add(out, jn);
        let p = k.add(p, cols);
        k.store(p, r, Some(mask));
    }
    for (j, op) in uns.iter().enumerate() {
        let r = k.un(*op, av);
        let jn = k.int(((bins.len() + j) * n) as i64);
        let p = k.add(out, jn);
        let p = k.add(p, cols);
        k.store(p, r, Some(mask));
    }
    let k = k.finish(&[]);
    let pick = |rng: &mut Rng| match rng.u64() % 4 {
        0 => rng.u64() as i32,
        1 => rng.i32(-40, 40),
        2 => [0, 1, -1, i32::MIN, i32::MAX][(rng.u64() % 5) as usize],
        _ => rng.i32(-100_000, 100_000),
    };
    let av: Vec<i32> = (0..n).map(|_| pick(&mut rng)).collect();
    let bv: Vec<i32> = (0..n).map(|_| pick(&mut rng)).collect();
    let total = bins.len() + uns.len();
    let mut mem = vec![
        HostMem::from_i32s(&av),
        HostMem::from_i32s(&bv),
        HostMem::zeros(DType::I32, total * n),
    ];
    let args = [
        ptr(0, &mem),
        ptr(1, &mem),
        ptr(2, &mem),
        InterpArg::I32(n as i32),
    ];
    run(&k, [1, 1, 1], &args, &mut mem).unwrap();
    let got = mem[2].to_i32s();
    for i in 0..n {
        let (x, y) = (av[i], bv[i]);
        let want = [
            x.wrapping_add(y),
            x.wrapping_sub(y),
            x.wrapping_mul(y),
            if y == 0 { 0 } else { x.wrapping_div(y) },
            if y == 0 { 0 } else { x.wrapping_rem(y) },
            x.min(y),
            x.max(y),
            x & y,
            x | y,
            x ^ y,
            x << (y & 31),
            x >> (y & 31),
            (x < y) as i32,
            (x <= y) as i32,
            (x > y) as i32,
            (x >= y) as i32,
            (x == y) as i32,
            (x != y) as i32,
            x.wrapping_neg(),
            !x,
            x.wrapping_abs(),
        ];
        for (j, w) in want.iter().enumerate() {
            let name = if j < bins.len() {
                bins[j].symbol()
            } else {
                uns[j - bins.len()].name()
            };
            assert_eq!(got[j * n + i], *w, "{x} {name} {y}");
        }
    }
    // Division truncates toward zero, remainder keeps the dividend's sign.
    assert_eq!((-7i32).wrapping_div(2), -3);
}

#[test]
fn unary_float_ops_round_per_dtype() {
    let mut rng = Rng::new("unary");
    let ops = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Exp2,
        UnaryOp::Log,
        UnaryOp::Log2,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Sigmoid,
        UnaryOp::Silu,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
    ];
    let reference = |op: UnaryOp, a: f32| -> f32 {
        let sig = |a: f32| 1.0 / (1.0 + (-a).exp());
        match op {
            UnaryOp::Neg => -a,
            UnaryOp::Abs => a.abs(),
            UnaryOp::Exp => a.exp(),
            UnaryOp::Exp2 => a.exp2(),
            UnaryOp::Log => a.ln(),
            UnaryOp::Log2 => a.log2(),
            UnaryOp::Sqrt => a.sqrt(),
            UnaryOp::Rsqrt => 1.0 / a.sqrt(),
            UnaryOp::Sigmoid => sig(a),
            UnaryOp::Silu => a * sig(a),
            UnaryOp::Sin => a.sin(),
            UnaryOp::Cos => a.cos(),
            UnaryOp::Tanh => a.tanh(),
            UnaryOp::Not => unreachable!(),
        }
    };
    for d in [DType::BF16, DType::F16, DType::F32] {
        let n = 7usize;
        let mut k = K::new("unary");
        let x = k.ptr("x", d);
        let y = k.ptr("y", d);
        let cols = k.arange_n(8);
        let nv = k.int(n as i64);
        let mask = k.lt(cols, nv);
        let xp = k.add(x, cols);
        let xv = k.load(xp, Some(mask), None);
        for (j, op) in ops.iter().enumerate() {
            let r = k.un(*op, xv);
            let jn = k.int((j * n) as i64);
            let p = k.add(y, jn);
            let p = k.add(p, cols);
            k.store(p, r, Some(mask));
        }
        // x * x + x: two roundings in bf16/f16.
        let sq = k.mul(xv, xv);
        let r = k.add(sq, xv);
        let jn = k.int((ops.len() * n) as i64);
        let p = k.add(y, jn);
        let p = k.add(p, cols);
        k.store(p, r, Some(mask));
        let k = k.finish(&[]);
        let xs: Vec<f32> = rng
            .vec_f32(n, -4.0, 4.0)
            .into_iter()
            .map(|v| round_to(d, v))
            .collect();
        let mut mem = vec![
            HostMem::from_f32s(d, &xs),
            HostMem::zeros(d, (ops.len() + 1) * n),
        ];
        let args = [ptr(0, &mem), ptr(1, &mem)];
        run(&k, [1, 1, 1], &args, &mut mem).unwrap();
        let got = mem[1].to_f32s();
        for (j, op) in ops.iter().enumerate() {
            let want: Vec<f32> = xs.iter().map(|&a| round_to(d, reference(*op, a))).collect();
            assert_bits_eq(
                &got[j * n..(j + 1) * n],
                &want,
                &format!("{} {d}", op.name()),
            );
        }
        let want: Vec<f32> = xs
            .iter()
            .map(|&a| round_to(d, round_to(d, a * a) + a))
            .collect();
        assert_bits_eq(&got[ops.len() * n..], &want, &format!("x*x+x {d}"));
    }
}

/// Writes `pid0 + 10 pid1 + 100 pid2` (negated for odd pid0, through an `if`) at the
/// program's linear index, and num_programs into a second buffer.
#[test]
fn program_ids_grid_and_if() {
    let mut k = K::new("pids");
    let out = k.ptr("out", DType::I32);
    let np = k.ptr("np", DType::I32);
    let (p0, p1, p2) = (k.pid(0), k.pid(1), k.pid(2));
    let (g0, g1, g2) = (k.nprog(0), k.nprog(1), k.nprog(2));
    let ten = k.int(10);
    let hundred = k.int(100);
    let a = k.mul(p1, ten);
    let b = k.mul(p2, hundred);
    let v = k.add(p0, a);
    let v = k.add(v, b);
    let lin = k.mul(p2, g1);
    let lin = k.add(lin, p1);
    let lin = k.mul(lin, g0);
    let lin = k.add(lin, p0);
    let q = k.add(out, lin);
    let two = k.int(2);
    let r = k.bin(BinOp::Rem, p0, two);
    let zero = k.int(0);
    let even = k.bin(BinOp::Eq, r, zero);
    let s = k.src("if even");
    k.b.begin_if(even, s).unwrap();
    k.store(q, v, None);
    k.b.begin_else().unwrap();
    let nv = k.un(UnaryOp::Neg, v);
    k.store(q, nv, None);
    k.b.end_if().unwrap();
    let g = k.mul(g2, hundred);
    let g1t = k.mul(g1, ten);
    let g = k.add(g, g1t);
    let g = k.add(g, g0);
    k.store(np, g, None);
    let k = k.finish(&[]);
    let grid = [3u32, 4, 2];
    let mut want = vec![];
    for z in 0..2 {
        for y in 0..4 {
            for x in 0..3 {
                let v = x + 10 * y + 100 * z;
                want.push(if x % 2 == 0 { v } else { -v });
            }
        }
    }
    for order in [
        ProgramOrder::RowMajor,
        ProgramOrder::Reversed,
        ProgramOrder::Shuffled(42),
    ] {
        let mut mem = vec![
            HostMem::zeros(DType::I32, 24),
            HostMem::zeros(DType::I32, 1),
        ];
        let args = [ptr(0, &mem), ptr(1, &mem)];
        interp::run(&k, grid, &args, &mut mem, &InterpOptions { order }).unwrap();
        assert_eq!(mem[0].to_i32s(), want, "{order:?}");
        assert_eq!(mem[1].to_i32s(), vec![243]);
    }
}

/// Every program writes its id to out[0]: the last program run wins, which shows the order.
#[test]
fn program_order_is_row_major_unless_asked() {
    let mut k = K::new("last");
    let out = k.ptr("out", DType::I32);
    let p0 = k.pid(0);
    let p1 = k.pid(1);
    let ten = k.int(10);
    let v = k.mul(p1, ten);
    let v = k.add(v, p0);
    k.store(out, v, None);
    let k = k.finish(&[]);
    let order = interp::program_order(&k, [3, 2, 1], ProgramOrder::RowMajor).unwrap();
    assert_eq!(
        order,
        vec![
            [0, 0, 0],
            [1, 0, 0],
            [2, 0, 0],
            [0, 1, 0],
            [1, 1, 0],
            [2, 1, 0]
        ]
    );
    let mut shuffled = interp::program_order(&k, [50, 1, 1], ProgramOrder::Shuffled(7)).unwrap();
    assert_ne!(
        shuffled,
        interp::program_order(&k, [50, 1, 1], ProgramOrder::RowMajor).unwrap()
    );
    shuffled.sort();
    assert_eq!(
        shuffled,
        interp::program_order(&k, [50, 1, 1], ProgramOrder::RowMajor).unwrap()
    );
    for (order, last) in [(ProgramOrder::RowMajor, 12), (ProgramOrder::Reversed, 0)] {
        let mut mem = vec![HostMem::zeros(DType::I32, 1)];
        let args = [ptr(0, &mem)];
        interp::run(&k, [3, 2, 1], &args, &mut mem, &InterpOptions { order }).unwrap();
        assert_eq!(mem[0].to_i32s(), vec![last]);
    }
    // run_program runs exactly one program.
    let mut mem = vec![HostMem::zeros(DType::I32, 1)];
    let args = [ptr(0, &mem)];
    interp::run_program(&k, [1, 1, 0], [3, 2, 1], &args, &mut mem).unwrap();
    assert_eq!(mem[0].to_i32s(), vec![11]);
}

/// A pointer argument with an offset sees only its window.
#[test]
fn pointer_windows() {
    let k = vadd(DType::F32, 4);
    let data: Vec<f32> = (0..20).map(|i| i as f32).collect();
    let mut mem = vec![HostMem::from_f32s(DType::F32, &data)];
    let args = [
        InterpArg::Ptr {
            buf: 0,
            offset: 0,
            len: 5,
        },
        InterpArg::Ptr {
            buf: 0,
            offset: 5,
            len: 5,
        },
        InterpArg::Ptr {
            buf: 0,
            offset: 10,
            len: 5,
        },
        InterpArg::I32(5),
    ];
    run(&k, [2, 1, 1], &args, &mut mem).unwrap();
    let got = mem[0].to_f32s();
    assert_eq!(&got[10..15], &[5.0, 7.0, 9.0, 11.0, 13.0]);
    assert_eq!(&got[15..], &[15.0, 16.0, 17.0, 18.0, 19.0]);
}
