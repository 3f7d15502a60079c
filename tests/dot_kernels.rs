//! The shipped `dot` kernels (src/kernels/matmul.rs, attention.rs): the interpreter against
//! f64 references at odd, masked sizes; the generated CUDA C (tensor cores, the cp.async
//! ring, the hoisted Q tile, reductions of the accumulator layout) under the g++ emulation
//! against the interpreter, bit for bit; and, on a GPU, against the f64 references within
//! the stated tolerance (bf16 output: relative Frobenius error ≤ 1e-2).
#[path = "../dsl-runtime/tests/host_emu/kernel.rs"]
mod emu;
use emu::{emulate_variant, emulate_with, have_gxx, Scalar, Variant};
use half::bf16;
use tessera::check::Rng;
use tessera::kernels::attention::{self as att, attention, attention_ref};
use tessera::kernels::matmul::{self as mmk, matmul, matmul_ref, rel_frob};
use tessera::runtime::interp::{self, HostMem, InterpArg, InterpOptions};
use tessera::runtime::ir::{DType, Kernel};
use tessera::runtime::{Config, ConstVal, Device, Launch, Tune};

const BF16_TOL: f64 = 1e-2;

fn ints(b: &[(&'static str, i64)]) -> Vec<(&'static str, ConstVal)> {
    b.iter().map(|(n, v)| (*n, ConstVal::Int(*v))).collect()
}

fn to_f32(v: &[bf16]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

fn interpret(k: &Kernel, grid: [u32; 3], bufs: &mut [HostMem], scalars: &[Scalar]) {
    let mut args: Vec<InterpArg> = (0..bufs.len()).map(|i| InterpArg::whole(i, bufs)).collect();
    args.extend(scalars.iter().map(|s| match *s {
        Scalar::I32(v) => InterpArg::I32(v),
        Scalar::F32(v) => InterpArg::F32(v),
    }));
    interp::run(k, grid, &args, bufs, &InterpOptions::default()).unwrap();
}

struct Mm {
    a: Vec<bf16>,
    b: Vec<bf16>,
    bias: Vec<f32>,
    want: Vec<f64>,
}

fn mm_data(m: usize, n: usize, k: usize, seed: u64) -> Mm {
    let mut d = mm_inputs(m, n, k, seed);
    d.want = matmul_ref(&d.a, &d.b, &d.bias, m, n, k);
    d
}

/// [`mm_data`] without the reference (`want` empty: too slow on the CPU at 4096^3).
fn mm_inputs(m: usize, n: usize, k: usize, seed: u64) -> Mm {
    let mut rng = Rng::new(seed);
    let a = rng.vec_bf16(m * k);
    let b = rng.vec_bf16(k * n);
    let bias = rng.vec_f32(n);
    Mm {
        a,
        b,
        bias,
        want: vec![],
    }
}

#[test]
fn matmul_interpreter_and_emulation() {
    // (M, N, K, tile, warps, stages): masked edges everywhere; aligned rows take the ring.
    for (m, n, k, (bm, bn, bk), warps, stages) in [
        (77usize, 50usize, 96usize, (32i64, 32i64, 32i64), 4u32, 3u32),
        (40, 72, 53, (32, 64, 16), 4, 2),
        (33, 17, 20, (16, 16, 16), 1, 3),
        // Trip counts not a multiple of the ring's depth (EmitOptions::ring_unroll).
        (77, 50, 304, (32, 32, 32), 4, 4),
        (45, 64, 112, (32, 64, 16), 4, 3),
    ] {
        let d = mm_data(m, n, k, (m * n + k) as u64);
        let kern = matmul::KERNEL
            .specialize(&ints(&[("BM", bm), ("BN", bn), ("BK", bk), ("GROUP_M", 2)]))
            .unwrap();
        let grid = [mmk::grid(m, n, bm as usize, bn as usize), 1, 1];
        let bufs = vec![
            HostMem::from_f32s(DType::BF16, &to_f32(&d.a)),
            HostMem::from_f32s(DType::BF16, &to_f32(&d.b)),
            HostMem::from_f32s(DType::F32, &d.bias),
            HostMem::from_f32s(DType::BF16, &vec![f32::NAN; m * n]),
        ];
        let sc = [m as i32, n as i32, k as i32].map(Scalar::I32);
        let mut mem = bufs.clone();
        interpret(&kern, grid, &mut mem, &sc);
        let got = mem[3].to_f32s();
        let err = rel_frob(&got, &d.want);
        assert!(
            err <= BF16_TOL,
            "matmul {m}x{n}x{k}: interpreter vs f64 {err:e}"
        );
        // Without and with `EmitOptions::ring_unroll` (the ring's loop in passes of
        // `stages` iterations, constant slots).
        for unroll in [false, true].into_iter().filter(|_| have_gxx()) {
            let e = emulate_with(&kern, warps, stages, unroll, grid, &bufs, &sc);
            assert!(
                e[3].to_f32s()
                    .iter()
                    .zip(&got)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "matmul {m}x{n}x{k} tile ({bm}, {bn}, {bk}) warps {warps} stages {stages} ring_unroll {unroll}: emulation != interpreter"
            );
        }
    }
}

/// The shipped matmul with `EmitOptions::wgmma` (`TESSERA_WGMMA=1`, a candidate): its `dot`
/// on wgmma (one or two warpgroups, one or two m64 slabs each, rows of 64 and 128 bytes, B in
/// 64-column blocks), the C emulated with the model of wgmma (host_emu/wgmma.h) bit for bit
/// against the interpreter, masked edges and k tails, with and without `ring_unroll`.
#[test]
fn matmul_wgmma_interpreter_and_emulation() {
    for (m, n, k, (bm, bn, bk), warps, stages) in [
        (
            150usize,
            144usize,
            80usize,
            (64i64, 128i64, 32i64),
            4u32,
            3u32,
        ),
        (200, 80, 208, (128, 64, 64), 4, 2),
        (130, 272, 96, (128, 256, 32), 8, 3),
    ] {
        let d = mm_data(m, n, k, (m + n * k) as u64);
        let kern = matmul::KERNEL
            .specialize(&ints(&[("BM", bm), ("BN", bn), ("BK", bk), ("GROUP_M", 2)]))
            .unwrap();
        let grid = [mmk::grid(m, n, bm as usize, bn as usize), 1, 1];
        let bufs = vec![
            HostMem::from_f32s(DType::BF16, &to_f32(&d.a)),
            HostMem::from_f32s(DType::BF16, &to_f32(&d.b)),
            HostMem::from_f32s(DType::F32, &d.bias),
            HostMem::from_f32s(DType::BF16, &vec![f32::NAN; m * n]),
        ];
        let sc = [m as i32, n as i32, k as i32].map(Scalar::I32);
        let mut mem = bufs.clone();
        interpret(&kern, grid, &mut mem, &sc);
        let got = mem[3].to_f32s();
        let err = rel_frob(&got, &d.want);
        assert!(
            err <= BF16_TOL,
            "matmul {m}x{n}x{k}: interpreter vs f64 {err:e}"
        );
        let code = tessera::runtime::cuda::emit(
            &kern,
            &tessera::runtime::cuda::EmitOptions {
                divisible16: emu::facts(&kern, &sc),
                num_stages: stages,
                wgmma: true,
                ..tessera::runtime::cuda::EmitOptions::new(warps)
            },
        )
        .unwrap()
        .code;
        assert!(
            code.contains(&format!("// dot: tensor cores: wgmma m64n{bn}k16")),
            "matmul tile ({bm}, {bn}, {bk}): on wgmma\n{code}"
        );
        let variants = [(false, false), (true, false), (false, true), (true, true)];
        for (ring_unroll, in_flight) in variants.into_iter().filter(|_| have_gxx()) {
            let v = Variant {
                ring_unroll,
                wgmma: true,
                in_flight,
                warp_reduce: false,
                row_values: false,
                reuse_sync: false,
                frag_rows: false,
                fast_exp2: false,
            };
            let e = emulate_variant(&kern, warps, stages, v, grid, &bufs, &sc);
            assert!(
                e[3].to_f32s()
                    .iter()
                    .zip(&got)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "matmul {m}x{n}x{k} tile ({bm}, {bn}, {bk}) warps {warps} stages {stages} {v:?}: emulation != interpreter"
            );
        }
    }
}

struct Attn {
    q: Vec<bf16>,
    k: Vec<bf16>,
    v: Vec<bf16>,
    want: Vec<f64>,
    scale: f32,
}

fn attn_data(bh: usize, s: usize, d: usize, causal: bool, seed: u64) -> Attn {
    let mut rng = Rng::new(seed);
    let (q, k, v) = (
        rng.vec_bf16(bh * s * d),
        rng.vec_bf16(bh * s * d),
        rng.vec_bf16(bh * s * d),
    );
    let scale = 1.0 / (d as f32).sqrt();
    let want = attention_ref(&q, &k, &v, bh, s, d, scale as f64, causal);
    Attn {
        q,
        k,
        v,
        want,
        scale,
    }
}

#[test]
fn attention_interpreter_and_emulation() {
    // (B*H, S, D, BM, BN, warps, stages, causal)
    for (bh, s, d, bm, bn, warps, stages, causal) in [
        (2usize, 77usize, 64usize, 32i64, 32i64, 4u32, 3u32, true),
        (2, 77, 64, 32, 32, 4, 2, false),
        (1, 40, 128, 16, 32, 2, 3, true),
        (1, 23, 16, 16, 16, 1, 1, false),
        // 2 to 10 key blocks per program (causal), 4 stages.
        (1, 150, 64, 32, 16, 2, 4, true),
        // Warps over M only (`frag_rows`): one m16 tile a warp, then two.
        (1, 150, 64, 64, 32, 4, 2, true),
        (1, 100, 32, 64, 32, 2, 2, false),
    ] {
        let dd = attn_data(bh, s, d, causal, (bh * s * d) as u64 + causal as u64);
        let kern = attention::KERNEL
            .specialize(&[
                ("BM", ConstVal::Int(bm)),
                ("BN", ConstVal::Int(bn)),
                ("D", ConstVal::Int(d as i64)),
                ("CAUSAL", ConstVal::Bool(causal)),
            ])
            .unwrap();
        let (g0, g1) = att::grid(1, bh, s, bm as usize);
        let grid = [g0, g1, 1];
        let bufs = vec![
            HostMem::from_f32s(DType::BF16, &to_f32(&dd.q)),
            HostMem::from_f32s(DType::BF16, &to_f32(&dd.k)),
            HostMem::from_f32s(DType::BF16, &to_f32(&dd.v)),
            HostMem::from_f32s(DType::BF16, &vec![f32::NAN; bh * s * d]),
        ];
        let sc = [Scalar::I32(s as i32), Scalar::F32(dd.scale)];
        let mut mem = bufs.clone();
        interpret(&kern, grid, &mut mem, &sc);
        let got = mem[3].to_f32s();
        let err = rel_frob(&got, &dd.want);
        let what = format!("attention bh={bh} s={s} d={d} tile ({bm}, {bn}) causal={causal}");
        assert!(err <= BF16_TOL, "{what}: interpreter vs f64 {err:e}");
        // The ring unrolled or not, with `EmitOptions::elide_reuse_syncs` (the softmax's
        // shared-memory regions rewritten with no barrier of their own; on by default), and
        // with `EmitOptions::frag_rows` (the softmax in the fragment's registers: quad
        // shuffles, across warp columns through shared memory where the tile leaves
        // several, P into the second dot from registers where each warp holds whole rows).
        // And with `EmitOptions::fast_exp2` (its `ex2.approx` emulated by the host's exp2f).
        let variants = [
            (false, false, false, false),
            (true, false, false, false),
            (false, true, false, false),
            (false, true, true, false),
            (true, false, true, false),
            (false, true, true, true),
        ];
        for (unroll, reuse_sync, frag_rows, fast_exp2) in
            variants.into_iter().filter(|_| have_gxx())
        {
            let v = Variant {
                ring_unroll: unroll,
                reuse_sync,
                frag_rows,
                fast_exp2,
                ..Variant::default()
            };
            let e = emulate_variant(&kern, warps, stages, v, grid, &bufs, &sc);
            let eg = e[3].to_f32s();
            if frag_rows {
                // The row sums fold in another order (a thread's columns, then the quad,
                // then the warp columns): a bf16 output at a rounding boundary may land one
                // ulp away, never more, and rarely.
                let ulps = |x: f32, y: f32| {
                    (bf16::from_f32(x).to_bits() as i32 - bf16::from_f32(y).to_bits() as i32).abs()
                };
                let off = eg
                    .iter()
                    .zip(&got)
                    .filter(|(x, y)| x.to_bits() != y.to_bits());
                assert!(
                    off.clone().all(|(x, y)| ulps(*x, *y) <= 1) && off.count() * 1000 <= got.len(),
                    "{what} warps {warps} stages {stages} {v:?}: emulation more than a bf16 ulp from the interpreter"
                );
                continue;
            }
            // exp2 on the CPU and in the interpreter are both Rust/libm's: bit for bit.
            let bad = eg
                .iter()
                .zip(&got)
                .position(|(x, y)| x.to_bits() != y.to_bits());
            assert!(
                bad.is_none(),
                "{what} warps {warps} stages {stages} {v:?}: emulation != interpreter at {bad:?}"
            );
        }
    }
}

// ---- on a GPU ---------------------------------------------------------------------------

#[test]
#[ignore = "needs a CUDA GPU"]
fn matmul_on_gpu_matches_f64_within_tolerance() {
    let dev = Device::cuda(0).unwrap();
    let (m, n, k) = (1000usize, 777usize, 1234usize);
    let d = mm_data(m, n, k, 7);
    let (da, db, dbias) = (
        dev.upload(&d.a).unwrap(),
        dev.upload(&d.b).unwrap(),
        dev.upload(&d.bias).unwrap(),
    );
    let dc = dev.zeros::<bf16>(m * n).unwrap();
    for (bm, bn, bk, warps, stages) in [
        (128usize, 128usize, 32usize, 4u32, 3u32),
        (128, 256, 64, 8, 3),
        (64, 64, 32, 4, 1),
        (64, 128, 64, 4, 4),
        (48, 40, 24, 4, 2), // FMA fallback
    ] {
        let launch = Launch::grid(mmk::grid(m, n, bm, bn))
            .warps(warps)
            .stages(stages);
        matmul::launch(
            &dev, &launch, &da, &db, &dbias, &dc, m as i32, n as i32, k as i32, bm, bn, bk, 8,
        )
        .unwrap();
        let got = to_f32(&dc.to_vec().unwrap());
        let err = rel_frob(&got, &d.want);
        assert!(
            err <= BF16_TOL,
            "GPU matmul tile ({bm}, {bn}, {bk}) warps {warps} stages {stages}: {err:e}"
        );
    }
    // Autotune picks among configs and the winner is correct too.
    let tune = Tune {
        configs: vec![
            Config::new(
                &ints(&[("BM", 128), ("BN", 128), ("BK", 32), ("GROUP_M", 8)]),
                4,
            )
            .stages(3),
            Config::new(
                &ints(&[("BM", 128), ("BN", 256), ("BK", 32), ("GROUP_M", 8)]),
                8,
            )
            .stages(3),
        ],
        key: format!("{m}x{n}x{k}"),
        grid: Launch::grid_fn(move |c| {
            [
                mmk::grid(m, n, c.int("BM") as usize, c.int("BN") as usize),
                1,
                1,
            ]
        })
        .grid,
    };
    matmul::autotune(
        &dev, &tune, &da, &db, &dbias, &dc, m as i32, n as i32, k as i32,
    )
    .unwrap();
    let err = rel_frob(&to_f32(&dc.to_vec().unwrap()), &d.want);
    assert!(err <= BF16_TOL, "autotuned GPU matmul: {err:e}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn attention_on_gpu_matches_f64_within_tolerance() {
    let dev = Device::cuda(0).unwrap();
    for (d, causal, bm, bn, warps, stages) in [
        (64usize, true, 64usize, 64usize, 4u32, 3u32),
        (64, false, 128, 64, 8, 2),
        (128, true, 64, 64, 4, 2),
        (128, false, 64, 32, 4, 3),
    ] {
        let (bh, s) = (6usize, 333usize);
        let dd = attn_data(bh, s, d, causal, 3 + d as u64);
        let (dq, dk, dv) = (
            dev.upload(&dd.q).unwrap(),
            dev.upload(&dd.k).unwrap(),
            dev.upload(&dd.v).unwrap(),
        );
        let dout = dev.zeros::<bf16>(bh * s * d).unwrap();
        let launch = Launch::grid(att::grid(1, bh, s, bm))
            .warps(warps)
            .stages(stages);
        attention::launch(
            &dev, &launch, &dq, &dk, &dv, &dout, s as i32, dd.scale, bm, bn, d, causal,
        )
        .unwrap();
        let err = rel_frob(&to_f32(&dout.to_vec().unwrap()), &dd.want);
        assert!(
            err <= BF16_TOL,
            "GPU attention d={d} causal={causal} tile ({bm}, {bn}) warps {warps} stages {stages}: {err:e}"
        );
    }
}

/// silu(A·B + bias)[i, j] in f64 (one element of [`matmul_ref`], for sampled checks).
fn matmul_ref_at(d: &Mm, n: usize, k: usize, i: usize, j: usize) -> f64 {
    let mut z = d.bias[j] as f64;
    for kk in 0..k {
        z += d.a[i * k + kk].to_f64() * d.b[kk * n + j].to_f64();
    }
    z / (1.0 + (-z).exp())
}

/// `TESSERA_WGMMA=1` (`EmitOptions::wgmma`, a candidate): the matmul example's tuning space on
/// wgmma (sm_90a), against f64 at 4096^3 (4096 sampled entries, each within 2e-2 of its
/// value + 1 and all within a relative Frobenius error of 1e-2) and at an odd shape whose rows
/// still take the ring (every edge masked, a k tail; the whole output checked). The variable
/// is read once per process: run this test alone (it fails, saying so, if the option did not
/// take), on an H100 or H200:
/// `cargo test --release --test dot_kernels -- --ignored --exact matmul_wgmma_on_gpu_matches_f64`
#[test]
#[ignore = "needs a CUDA GPU"]
fn matmul_wgmma_on_gpu_matches_f64() {
    wgmma_on_gpu("1", false);
}

/// The same with `TESSERA_WGMMA=2` (`EmitOptions::wgmma_in_flight`: one iteration's wgmmas in
/// flight, the ring a slot deeper); alone too:
/// `cargo test --release --test dot_kernels -- --ignored --exact matmul_wgmma_in_flight_on_gpu_matches_f64`
#[test]
#[ignore = "needs a CUDA GPU"]
fn matmul_wgmma_in_flight_on_gpu_matches_f64() {
    wgmma_on_gpu("2", true);
}

/// `TESSERA_WGMMA=level`; `in_flight`: the loop waits with `wait_group 1`, not 0.
fn wgmma_on_gpu(level: &str, in_flight: bool) {
    // SAFETY: set before anything in this process reads it (run the test alone).
    std::env::set_var(tessera::runtime::kernel_def::WGMMA_ENV, level);
    let dev = Device::cuda(0).unwrap();
    assert_eq!(
        dev.arch(),
        Some("sm_90"),
        "wgmma needs an sm_90 GPU (H100, H200): {}",
        dev.describe()
    );
    let configs = [
        (128usize, 256usize, 32usize, 8u32, 3u32),
        (128, 128, 32, 4, 4),
        (128, 128, 64, 4, 3),
        (256, 128, 32, 8, 3),
        (128, 256, 64, 8, 3),
        (256, 128, 64, 8, 3),
    ];
    for &(bm, bn, bk, w, s) in &configs {
        let cx = ints(&[
            ("BM", bm as i64),
            ("BN", bn as i64),
            ("BK", bk as i64),
            ("GROUP_M", 8),
        ]);
        let code = matmul::KERNEL.cuda_source_staged(&cx, w, s).unwrap().code;
        assert!(
            code.contains("wgmma.mma_async")
                && code.contains("tsr_wgmma_wait<1>();") == in_flight,
            "tile ({bm}, {bn}, {bk}) warps {w}: not on wgmma (was {} read before this test set it? run it alone)",
            tessera::runtime::kernel_def::WGMMA_ENV
        );
    }
    for (m, n, k, full) in [
        (4096usize, 4096usize, 4096usize, false),
        (1000, 784, 1232, true),
    ] {
        let d = if full {
            mm_data(m, n, k, 11)
        } else {
            mm_inputs(m, n, k, 11)
        };
        let (da, db, dbias) = (
            dev.upload(&d.a).unwrap(),
            dev.upload(&d.b).unwrap(),
            dev.upload(&d.bias).unwrap(),
        );
        let mut rng = Rng::new(3);
        let samples: Vec<(usize, usize)> = (0..4096)
            .map(|_| ((rng.next_u64() as usize) % m, (rng.next_u64() as usize) % n))
            .collect();
        let want: Vec<f64> = samples
            .iter()
            .map(|&(i, j)| matmul_ref_at(&d, n, k, i, j))
            .collect();
        for &(bm, bn, bk, warps, stages) in &configs {
            let dc = dev.zeros::<bf16>(m * n).unwrap();
            let launch = Launch::grid(mmk::grid(m, n, bm, bn))
                .warps(warps)
                .stages(stages);
            matmul::launch(
                &dev, &launch, &da, &db, &dbias, &dc, m as i32, n as i32, k as i32, bm, bn, bk, 8,
            )
            .unwrap();
            let got = to_f32(&dc.to_vec().unwrap());
            let what = format!(
                "wgmma matmul {m}x{n}x{k} tile ({bm}, {bn}, {bk}) warps {warps} stages {stages}"
            );
            if full {
                let err = rel_frob(&got, &d.want);
                assert!(err <= BF16_TOL, "{what}: {err:e}");
            }
            let g: Vec<f32> = samples.iter().map(|&(i, j)| got[i * n + j]).collect();
            let err = rel_frob(&g, &want);
            assert!(err <= BF16_TOL, "{what}: sampled {err:e}");
            for (((i, j), x), y) in samples.iter().zip(&g).zip(&want) {
                assert!(
                    (*x as f64 - y).abs() <= 2e-2 * (y.abs() + 1.0),
                    "{what}: C[{i}, {j}] = {x}, f64 {y}"
                );
            }
        }
    }
}
