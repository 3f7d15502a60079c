//! Runs the generated CUDA C on the CPU: the body function is compiled with g++ against a
//! small CUDA emulation (tests/host_emu: one OS thread per CUDA thread, real barriers and
//! shuffles) and its results are compared with plain Rust references. This checks the
//! layouts, masks, padding, reductions, shared-memory staging and vector paths without a
//! GPU; the PTX conversions are swapped for CPU equivalents (round to nearest even).
#[path = "emit_common/mod.rs"]
mod common;
#[path = "host_emu/harness.rs"]
mod harness;
use common::*;
use dsl_ir::*;
use dsl_runtime::cuda::{emit_body, prelude::PRELUDE, EmitOptions};
use half::bf16;
use std::path::PathBuf;
use std::process::Command;

enum Arg {
    Buf(Vec<u8>),
    I32(i32),
    F32(f32),
}

fn have_gxx() -> bool {
    Command::new("g++").arg("--version").output().is_ok()
}

/// Emits `k`, compiles its body for the CPU and runs it over `grid`; returns every buffer
/// argument after the run, in order.
fn run_host(
    k: &Kernel,
    warps: u32,
    div16: Vec<bool>,
    grid: [u32; 3],
    args: Vec<Arg>,
) -> Vec<Vec<u8>> {
    run_host_with(k, warps, div16, grid, args, &|_| {}).1
}

/// [`run_host`] with the candidate lowerings `pick` turns on (`EmitOptions`'
/// `vector_atomics`, `warp_replica_reductions`); also returns the body's C.
fn run_host_with(
    k: &Kernel,
    warps: u32,
    div16: Vec<bool>,
    grid: [u32; 3],
    args: Vec<Arg>,
    pick: &dyn Fn(&mut EmitOptions),
) -> (String, Vec<Vec<u8>>) {
    let mut opts = EmitOptions {
        num_warps: warps,
        divisible16: div16,
        num_stages: 1,
        ..EmitOptions::new(warps)
    };
    pick(&mut opts);
    let src = emit_body(k, &opts).unwrap_or_else(|e| panic!("{e}"));
    // The prelude with its PTX block (conversions) swapped for CPU versions.
    let prelude = harness::swap_block(PRELUDE, "conversions", "conversions.h");
    let body = &src.code;
    let mut main = String::from("int main(int argc, char** argv) {\n  (void)argc;\n");
    let mut call = vec!["(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)gridDim.x, (int)gridDim.y, (int)gridDim.z".to_string()];
    let ptr_types: Vec<String> = k
        .params
        .iter()
        .filter_map(|p| match p.kind {
            ParamKind::Ptr(d) => Some(
                match d {
                    DType::BF16 => "bf16_t",
                    DType::F16 => "f16_t",
                    DType::F32 => "float",
                    DType::I32 => "int",
                    DType::Bool => "bool",
                }
                .to_string(),
            ),
            ParamKind::Scalar(_) => Some(String::new()),
            ParamKind::Constexpr(_) => None,
        })
        .collect();
    let dir = harness::tempdir("emu");
    let mut bufs = vec![];
    for (i, a) in args.iter().enumerate() {
        match a {
            Arg::Buf(bytes) => {
                let path = dir.join(format!("in{i}.bin"));
                std::fs::write(&path, bytes).unwrap();
                main.push_str(&format!(
                    "  auto b{i} = read_file(argv[{}]);\n",
                    bufs.len() + 1
                ));
                call.push(format!("({}*)b{i}.data()", ptr_types[i]));
                bufs.push((i, path, bytes.len()));
            }
            Arg::I32(v) => call.push(format!("{v}")),
            Arg::F32(v) => call.push(format!("__uint_as_float({}u)", v.to_bits())),
        }
    }
    let smem = src.smem_bytes.max(16);
    main.push_str(&format!(
        "  alignas(16) static unsigned char smem[{smem}];\n"
    ));
    let call_smem = if src.smem_bytes > 0 {
        "smem"
    } else {
        "nullptr"
    };
    call.push(call_smem.into());
    main.push_str(&format!(
        "  launch(dim3{{{}, {}, {}}}, {}, [&] {{ {}({}); }});\n",
        grid[0],
        grid[1],
        grid[2],
        src.block_threads,
        src.name,
        call.join(", ")
    ));
    for (n, (i, _, len)) in bufs.iter().enumerate() {
        main.push_str(&format!("  write_file(argv[{}], b{i}, {len});\n", n + 1));
    }
    main.push_str("  return 0;\n}\n");
    // A deadlock (a barrier some thread never reaches) fails after two minutes.
    let paths: Vec<PathBuf> = bufs.iter().map(|(_, p, _)| p.clone()).collect();
    harness::compile_and_run(&format!("{prelude}\n{body}\n{main}"), &dir, &paths, 120);
    let res = bufs
        .iter()
        .map(|(_, p, _)| std::fs::read(p).unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    (body.clone(), res)
}

// ---- data helpers ------------------------------------------------------------------------

/// Deterministic pseudo-random values in [-2, 2).
fn rand_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}
fn to_bf16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}
fn bf16_bytes(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes())
        .collect()
}
fn from_bf16_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks(2)
        .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
        .collect()
}
fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn from_f32_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
fn from_i32_bytes(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn close(got: &[f32], want: &[f32], rel: f32, what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= rel * w.abs() + 1e-3 || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

fn skip() -> bool {
    if !have_gxx() {
        eprintln!("SKIPPED: g++ (C++20) is needed to run generated CUDA on the CPU");
        return true;
    }
    false
}

// ---- tests -------------------------------------------------------------------------------

#[test]
fn vector_add_matches_reference() {
    if skip() {
        return;
    }
    for (block, warps, n, div) in [
        (1024, 4, 3000, true),
        (1000, 4, 2500, true),
        (7, 1, 20, true),
        (1024, 2, 1030, false),
        (1, 1, 3, true),
    ] {
        let k = vector_add(DType::BF16).finish(&[("BLOCK", block as i64)]);
        let (x, y) = (to_bf16(&rand_f32(n, 1)), to_bf16(&rand_f32(n, 2)));
        let grid = (n as u32).div_ceil(block as u32);
        let out = run_host(
            &k,
            warps,
            vec![div; 4],
            [grid, 1, 1],
            vec![
                Arg::Buf(bf16_bytes(&x)),
                Arg::Buf(bf16_bytes(&y)),
                Arg::Buf(bf16_bytes(&vec![9.0; n])),
                Arg::I32(n as i32),
            ],
        );
        let want: Vec<f32> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| bf16::from_f32(a + b).to_f32())
            .collect();
        assert_eq!(
            from_bf16_bytes(&out[2]),
            want,
            "vector_add BLOCK={block} warps={warps}"
        );
    }
}

fn rmsnorm_ref(x: &[f32], w: &[f32], rows: usize, n: usize, eps: f32) -> Vec<f32> {
    let mut y = vec![0.0; rows * n];
    for r in 0..rows {
        let xr = &x[r * n..(r + 1) * n];
        let ss: f32 = xr.iter().map(|v| v * v).sum();
        let inv = 1.0 / (ss / n as f32 + eps).sqrt();
        for j in 0..n {
            y[r * n + j] = bf16::from_f32(xr[j] * inv * w[j]).to_f32();
        }
    }
    y
}

#[test]
fn rmsnorm_matches_reference() {
    if skip() {
        return;
    }
    for (block, warps, n) in [
        (1024, 4, 1000),
        (1024, 4, 1024),
        (4099, 8, 4099),
        (7, 1, 5),
        (8192, 8, 4096),
        (64, 1, 64),
    ] {
        let rows = 3;
        let k = rmsnorm().finish(&[("BLOCK", block as i64)]);
        let x = to_bf16(&rand_f32(rows * n, 3));
        let w = to_bf16(&rand_f32(n, 4));
        let out = run_host(
            &k,
            warps,
            vec![true, true, true, n % 16 == 0, false],
            [rows as u32, 1, 1],
            vec![
                Arg::Buf(bf16_bytes(&x)),
                Arg::Buf(bf16_bytes(&w)),
                Arg::Buf(bf16_bytes(&vec![0.0; rows * n])),
                Arg::I32(n as i32),
                Arg::F32(1e-6),
            ],
        );
        close(
            &from_bf16_bytes(&out[2]),
            &rmsnorm_ref(&x, &w, rows, n, 1e-6),
            1e-2,
            &format!("rmsnorm BLOCK={block}"),
        );
    }
}

#[test]
fn two_pass_and_residual_rmsnorm_match_reference() {
    if skip() {
        return;
    }
    let rows = 2;
    for (block, warps, n) in [(256, 4, 1000), (1024, 8, 1024), (7, 1, 30)] {
        let k = rmsnorm_two_pass().finish(&[("BLOCK", block as i64)]);
        let x = to_bf16(&rand_f32(rows * n, 5));
        let w = to_bf16(&rand_f32(n, 6));
        let out = run_host(
            &k,
            warps,
            vec![true, true, true, n % 16 == 0, false],
            [rows as u32, 1, 1],
            vec![
                Arg::Buf(bf16_bytes(&x)),
                Arg::Buf(bf16_bytes(&w)),
                Arg::Buf(bf16_bytes(&vec![0.0; rows * n])),
                Arg::I32(n as i32),
                Arg::F32(1e-6),
            ],
        );
        close(
            &from_bf16_bytes(&out[2]),
            &rmsnorm_ref(&x, &w, rows, n, 1e-6),
            1e-2,
            &format!("two-pass BLOCK={block}"),
        );
    }
    // (256, 4) and (512, 8): a row narrower than the program, held by replicas that read
    // `residual` where the owners then write it in place.
    for (block, warps, n) in [
        (1024, 4, 1000),
        (4099, 8, 4099),
        (256, 4, 200),
        (512, 8, 512),
    ] {
        let k = add_rmsnorm().finish(&[("BLOCK", block as i64)]);
        let x = to_bf16(&rand_f32(rows * n, 7));
        let r = to_bf16(&rand_f32(rows * n, 8));
        let w = to_bf16(&rand_f32(n, 9));
        let out = run_host(
            &k,
            warps,
            vec![true, true, true, true, n % 16 == 0, false],
            [rows as u32, 1, 1],
            vec![
                Arg::Buf(bf16_bytes(&x)),
                Arg::Buf(bf16_bytes(&r)),
                Arg::Buf(bf16_bytes(&w)),
                Arg::Buf(bf16_bytes(&vec![0.0; rows * n])),
                Arg::I32(n as i32),
                Arg::F32(1e-6),
            ],
        );
        let h: Vec<f32> = x
            .iter()
            .zip(&r)
            .map(|(a, b)| bf16::from_f32(a + b).to_f32())
            .collect();
        assert_eq!(from_bf16_bytes(&out[1]), h, "residual h");
        close(
            &from_bf16_bytes(&out[3]),
            &rmsnorm_ref(&h, &w, rows, n, 1e-6),
            1e-2,
            "add_rmsnorm",
        );
    }
}

#[test]
fn softmax_matches_reference() {
    if skip() {
        return;
    }
    for (block, warps, n) in [(1024, 4, 1000), (7, 1, 5), (4099, 8, 4099)] {
        let rows = 2;
        let k = softmax().finish(&[("BLOCK", block as i64)]);
        let x = rand_f32(rows * n, 10);
        let out = run_host(
            &k,
            warps,
            vec![true; 3],
            [rows as u32, 1, 1],
            vec![
                Arg::Buf(f32_bytes(&x)),
                Arg::Buf(f32_bytes(&vec![0.0; rows * n])),
                Arg::I32(n as i32),
            ],
        );
        let mut want = vec![0.0; rows * n];
        for r in 0..rows {
            let xr = &x[r * n..(r + 1) * n];
            let m = xr.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = xr.iter().map(|v| (v - m).exp()).sum();
            for j in 0..n {
                want[r * n + j] = (xr[j] - m).exp() / s;
            }
        }
        close(
            &from_f32_bytes(&out[1]),
            &want,
            1e-4,
            &format!("softmax BLOCK={block}"),
        );
    }
}

/// The test kernel `gemv` (BM, BK) on `warps` warps over random W [m, kk] and x: its output
/// and the reference's.
fn gemv_on_host((bm, bk, warps, m, kk): (usize, usize, u32, usize, usize)) -> (Vec<f32>, Vec<f32>) {
    let k = gemv(DType::BF16).finish(&[("BM", bm as i64), ("BK", bk as i64)]);
    let w = to_bf16(&rand_f32(m * kk, 11));
    let x = to_bf16(&rand_f32(kk, 12));
    let grid = (m as u32).div_ceil(bm as u32);
    let out = run_host(
        &k,
        warps,
        vec![true, true, true, m % 16 == 0, kk % 16 == 0],
        [grid, 1, 1],
        vec![
            Arg::Buf(bf16_bytes(&w)),
            Arg::Buf(bf16_bytes(&x)),
            Arg::Buf(bf16_bytes(&vec![0.0; m])),
            Arg::I32(m as i32),
            Arg::I32(kk as i32),
        ],
    );
    let want: Vec<f32> = (0..m)
        .map(|i| bf16::from_f32((0..kk).map(|j| w[i * kk + j] * x[j]).sum()).to_f32())
        .collect();
    (from_bf16_bytes(&out[2]), want)
}

#[test]
fn gemv_matches_reference() {
    if skip() {
        return;
    }
    for case in [
        (16, 256, 4, 37, 1000),
        (3, 100, 1, 10, 250),
        (4, 1024, 8, 9, 2048),
        (8, 512, 4, 16, 512),
        (32, 64, 4, 70, 130),
        // k divisible by 16, m not: one predicate per vector, masked rows and a K tail.
        (16, 256, 4, 37, 1040),
        (8, 512, 4, 20, 1040),
    ] {
        let (got, want) = gemv_on_host(case);
        close(&got, &want, 1e-2, &format!("gemv {case:?}"));
    }
}

#[test]
fn argmax_picks_the_first_extreme() {
    if skip() {
        return;
    }
    for (op, block, warps, n) in [
        (ReduceOp::Argmax, 1024, 4, 1000),
        (ReduceOp::Argmin, 4099, 8, 4099),
        (ReduceOp::Argmax, 7, 1, 6),
    ] {
        let rows = 3;
        let k = argmax(op).finish(&[("BLOCK", block as i64)]);
        let mut x = to_bf16(&rand_f32(rows * n, 13));
        // Row 0: ties at the extreme (the first wins); row 1: NaNs never win.
        let ext = if op == ReduceOp::Argmax { 5.0 } else { -5.0 };
        x[n / 3] = ext;
        x[n / 2] = ext;
        x[n + 1] = f32::NAN;
        x[n] = f32::NAN;
        let out = run_host(
            &k,
            warps,
            vec![true, true, false],
            [rows as u32, 1, 1],
            vec![
                Arg::Buf(bf16_bytes(&x)),
                Arg::Buf(vec![0; rows * 4]),
                Arg::I32(n as i32),
            ],
        );
        let want: Vec<i32> = (0..rows)
            .map(|r| {
                let xr = &x[r * n..(r + 1) * n];
                let mut best = None::<usize>;
                for (j, v) in xr.iter().enumerate() {
                    if v.is_nan() {
                        continue;
                    }
                    let better = match best {
                        None => true,
                        Some(b) => {
                            (op == ReduceOp::Argmax && *v > xr[b])
                                || (op == ReduceOp::Argmin && *v < xr[b])
                        }
                    };
                    if better {
                        best = Some(j);
                    }
                }
                best.unwrap() as i32
            })
            .collect();
        assert_eq!(from_i32_bytes(&out[1]), want, "{op:?} BLOCK={block}");
    }
}

#[test]
fn two_d_softmax_and_column_reductions_match_reference() {
    if skip() {
        return;
    }
    for (bm, bn, warps, n) in [
        (4, 128, 4, 100),
        (16, 32, 4, 32),
        (3, 1000, 8, 999),
        (33, 7, 2, 7),
        (64, 256, 8, 200),
    ] {
        let k = softmax_2d().finish(&[("BM", bm as i64), ("BN", bn as i64)]);
        let x = rand_f32(bm * n, 14);
        let out = run_host(
            &k,
            warps,
            vec![true, true, true, true, n % 16 == 0],
            [1, 1, 1],
            vec![
                Arg::Buf(f32_bytes(&x)),
                Arg::Buf(f32_bytes(&vec![0.0; bm * n])),
                Arg::Buf(f32_bytes(&vec![0.0; n])),
                Arg::Buf(vec![0; 4 * n]),
                Arg::I32(n as i32),
            ],
        );
        let mut y = vec![0.0; bm * n];
        for r in 0..bm {
            let xr = &x[r * n..(r + 1) * n];
            let m = xr.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = xr.iter().map(|v| (v - m).exp()).sum();
            for j in 0..n {
                y[r * n + j] = (xr[j] - m).exp() / s;
            }
        }
        close(
            &from_f32_bytes(&out[1]),
            &y,
            1e-4,
            &format!("softmax_2d BM={bm} BN={bn}"),
        );
        let cmax: Vec<f32> = (0..n)
            .map(|j| {
                (0..bm)
                    .map(|i| x[i * n + j])
                    .fold(f32::NEG_INFINITY, f32::max)
            })
            .collect();
        assert_eq!(from_f32_bytes(&out[2]), cmax, "column max");
        let carg: Vec<i32> = (0..n)
            .map(|j| {
                let mut b = 0;
                for i in 0..bm {
                    if x[i * n + j] > x[b * n + j] {
                        b = i;
                    }
                }
                b as i32
            })
            .collect();
        assert_eq!(from_i32_bytes(&out[3]), carg, "column argmax");
    }
}

#[test]
fn broadcast_if_and_atomics_match_reference() {
    if skip() {
        return;
    }
    for (bm, bn, warps) in [(4, 256, 4), (3, 7, 1)] {
        let k = broadcast_if().finish(&[("BM", bm as i64), ("BN", bn as i64)]);
        let x = rand_f32(bn, 15);
        let flag = [1i32, 0];
        let out = run_host(
            &k,
            warps,
            vec![true; 3],
            [2, 1, 1],
            vec![
                Arg::Buf(f32_bytes(&x)),
                Arg::Buf(f32_bytes(&vec![0.0; bm * bn])),
                Arg::Buf(flag.iter().flat_map(|v| v.to_le_bytes()).collect()),
            ],
        );
        let want: Vec<f32> = (0..bm * bn)
            .map(|e| x[e % bn] * 2.0 + (e / bn) as f32)
            .collect();
        assert_eq!(from_f32_bytes(&out[1]), want);
        assert_eq!(
            from_i32_bytes(&out[2]),
            vec![1, 1],
            "else branch: flag + 1, written once"
        );
    }
    let (block, n) = (256, 1000);
    let k = atomics().finish(&[("BLOCK", block as i64)]);
    let x: Vec<f32> = rand_f32(n, 16).iter().map(|v| v * 8.0).collect();
    let grid = (n as u32).div_ceil(block as u32);
    let out = run_host(
        &k,
        4,
        vec![true; 6],
        [grid, 1, 1],
        vec![
            Arg::Buf(f32_bytes(&x)),
            Arg::Buf(vec![0; 64]),
            Arg::Buf(f32_bytes(&[-1e30])),
            Arg::Buf(f32_bytes(&[0.0])),
            Arg::Buf(vec![0x7f; 4 * n]),
            Arg::I32(n as i32),
        ],
    );
    let mut hist = vec![0i32; 16];
    for v in &x {
        hist[((*v as i32) & 15) as usize] += 1;
    }
    assert_eq!(from_i32_bytes(&out[1]), hist);
    assert_eq!(
        from_f32_bytes(&out[2])[0],
        x.iter().cloned().fold(f32::NEG_INFINITY, f32::max)
    );
    close(
        &from_f32_bytes(&out[3]),
        &[x.iter().sum()],
        1e-4,
        "atomic sum",
    );
    let imin: Vec<i32> = x.iter().map(|v| (*v as i32).min(0x7f7f7f7f)).collect();
    assert_eq!(from_i32_bytes(&out[4]), imin);
}

/// `EmitOptions::vector_atomics`: contiguous f32 adds go 4 floats per `tsr_red_add_v4`, a
/// ragged last tile element by element; either way every float gets exactly its add.
#[test]
fn vector_atomics_add_what_scalar_atomics_add() {
    if skip() {
        return;
    }
    let (block, n) = (256, 1001);
    let k = atomic_accumulate().finish(&[("BLOCK", block as i64)]);
    let x = rand_f32(n, 21);
    let res0 = rand_f32(n, 22);
    let want: Vec<f32> = res0.iter().zip(&x).map(|(r, v)| r + v).collect();
    let grid = (n as u32).div_ceil(block as u32);
    for vector in [false, true] {
        let (code, out) = run_host_with(
            &k,
            4,
            vec![true; 3],
            [grid, 1, 1],
            vec![
                Arg::Buf(f32_bytes(&x)),
                Arg::Buf(f32_bytes(&res0)),
                Arg::I32(n as i32),
            ],
            &|o| o.vector_atomics = vector,
        );
        assert_eq!(code.contains("tsr_red_add_v4("), vector, "{code}");
        assert_eq!(from_f32_bytes(&out[1]), want, "vector_atomics {vector}");
    }
}

/// `EmitOptions::warp_replica_reductions`: a scalar max, sum, argmax or argmin of a row held
/// by a row group narrower than a warp and replicated over the others, reduced by every
/// group on its own copy (no shared memory, no barrier), gives the bits the reduction
/// through shared memory gives: softmax and argmax over masked rows (the row shorter than
/// the block and than a vector's multiple), rows that fill the block, and rows too wide for
/// a warp (the option leaves those alone).
#[test]
fn warp_replica_reductions_give_the_bits_of_the_shared_memory_ones() {
    if skip() {
        return;
    }
    let rows = 3;
    for (block, warps, n, in_warps) in [
        (128, 4, 101, true),
        (64, 2, 64, true),
        (32, 1, 7, true),
        (1024, 4, 1000, false),
    ] {
        let run = |k: &Kernel, x: Vec<u8>, out: Vec<u8>, on: bool| {
            run_host_with(
                k,
                warps,
                // Rows start 16-byte aligned only when n is a multiple of 16.
                vec![true, true, n % 16 == 0],
                [rows as u32, 1, 1],
                vec![Arg::Buf(x), Arg::Buf(out), Arg::I32(n as i32)],
                &|o| o.warp_replica_reductions = on,
            )
        };
        let barriers = |c: &str| c.matches("__syncthreads()").count();
        let x = rand_f32(rows * n, 40 + block as u64);
        let k = softmax().finish(&[("BLOCK", block as i64)]);
        let zeros = f32_bytes(&vec![0.0; rows * n]);
        let (c0, want) = run(&k, f32_bytes(&x), zeros.clone(), false);
        let (c1, got) = run(&k, f32_bytes(&x), zeros, true);
        assert_eq!(got[1], want[1], "softmax BLOCK={block} n={n}");
        assert_eq!(
            barriers(&c1) < barriers(&c0),
            in_warps,
            "softmax BLOCK={block}: {c1}"
        );
        for op in [ReduceOp::Argmax, ReduceOp::Argmin, ReduceOp::Max] {
            let k = argmax(op).finish(&[("BLOCK", block as i64)]);
            let mut xb = to_bf16(&x);
            xb[n / 2] = xb[n / 3]; // a tie: the first one wins either way
            let zeros = vec![0u8; rows * 4];
            let (_, want) = run(&k, bf16_bytes(&xb), zeros.clone(), false);
            let (_, got) = run(&k, bf16_bytes(&xb), zeros, true);
            assert_eq!(got[1], want[1], "{op:?} BLOCK={block} n={n}");
        }
    }
}
