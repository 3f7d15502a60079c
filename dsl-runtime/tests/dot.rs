//! `dot` and `trans`: the interpreter against an f64 reference at odd, masked sizes; the
//! generated CUDA C (FMA fallback and tensor cores, with and without the cp.async ring, its
//! copies stepped or generic) run on the CPU by the g++ emulation (tests/host_emu, with
//! functional models of ldmatrix, mma.sync and cp.async) against the interpreter, bit for
//! bit; and NVRTC for sm_80 and sm_90 on every variant.
#[path = "host_emu/kernel.rs"]
mod emu;
use dsl_ir::{DType, Kernel};
use dsl_runtime::cuda::{emit, EmitOptions};
use dsl_runtime::interp::{self, HostMem, InterpArg, InterpOptions};
use dsl_runtime::prelude::*;
use dsl_runtime::ConstVal;
use emu::{emulate, emulate_variant, emulate_with, facts, have_gxx, Scalar, Variant};

// ---- kernels -----------------------------------------------------------------------------

/// C[M, N] = A[M, K] · B[K, N] (bf16 in, f32 out), masked at every edge.
#[kernel]
fn mm_bf16(
    a: Ptr<bf16>,
    b: Ptr<bf16>,
    c: Ptr<f32>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let cols = program_id(1) * BN + arange(0, BN);
    let mut acc = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let a_mask = (rows.expand_dims(1) < m) & (ks.expand_dims(0) < k);
        let at = load(a + rows.expand_dims(1) * k + ks.expand_dims(0), a_mask, 0.0);
        let b_mask = (ks.expand_dims(1) < k) & (cols.expand_dims(0) < n);
        let bt = load(b + ks.expand_dims(1) * n + cols.expand_dims(0), b_mask, 0.0);
        acc = dot(at, bt, acc);
    }
    let c_mask = (rows.expand_dims(1) < m) & (cols.expand_dims(0) < n);
    store(
        c + rows.expand_dims(1) * n + cols.expand_dims(0),
        acc,
        c_mask,
    );
}

/// The same with f16 operands and a bf16 result (`dot(a, b)` then `+=`).
#[kernel]
fn mm_f16(
    a: Ptr<f16>,
    b: Ptr<f16>,
    c: Ptr<bf16>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let cols = program_id(1) * BN + arange(0, BN);
    let mut acc = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let a_mask = (rows.expand_dims(1) < m) & (ks.expand_dims(0) < k);
        let at = load(a + rows.expand_dims(1) * k + ks.expand_dims(0), a_mask, 0.0);
        let b_mask = (ks.expand_dims(1) < k) & (cols.expand_dims(0) < n);
        let bt = load(b + ks.expand_dims(1) * n + cols.expand_dims(0), b_mask, 0.0);
        acc += dot(at, bt);
    }
    let c_mask = (rows.expand_dims(1) < m) & (cols.expand_dims(0) < n);
    store(
        c + rows.expand_dims(1) * n + cols.expand_dims(0),
        acc.to(bf16),
        c_mask,
    );
}

/// f32 operands (always the FMA path).
#[kernel]
fn mm_f32(
    a: Ptr<f32>,
    b: Ptr<f32>,
    c: Ptr<f32>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let cols = program_id(1) * BN + arange(0, BN);
    let mut acc = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let a_mask = (rows.expand_dims(1) < m) & (ks.expand_dims(0) < k);
        let at = load(a + rows.expand_dims(1) * k + ks.expand_dims(0), a_mask, 0.0);
        let b_mask = (ks.expand_dims(1) < k) & (cols.expand_dims(0) < n);
        let bt = load(b + ks.expand_dims(1) * n + cols.expand_dims(0), b_mask, 0.0);
        acc = dot(at, bt, acc);
    }
    let c_mask = (rows.expand_dims(1) < m) & (cols.expand_dims(0) < n);
    store(
        c + rows.expand_dims(1) * n + cols.expand_dims(0),
        acc,
        c_mask,
    );
}

/// [`mm_bf16`] over k tiles numbered `kb`, at `k0 = kb << SH` (SH = log2 BK): the stepped
/// copies follow `+`, `-` and `*` of the loop counter only, so the pipelined loads keep the
/// generic copies (pointer and mask rebuilt for each iteration ahead).
#[kernel]
fn mm_shl(
    a: Ptr<bf16>,
    b: Ptr<bf16>,
    c: Ptr<f32>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
    #[constexpr] SH: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let cols = program_id(1) * BN + arange(0, BN);
    let mut acc = zeros([BM, BN], f32);
    let nk = (k + BK - 1) / BK;
    for kb in 0..nk {
        let ks = (kb << SH) + arange(0, BK);
        let a_mask = (rows.expand_dims(1) < m) & (ks.expand_dims(0) < k);
        let at = load(a + rows.expand_dims(1) * k + ks.expand_dims(0), a_mask, 0.0);
        let b_mask = (ks.expand_dims(1) < k) & (cols.expand_dims(0) < n);
        let bt = load(b + ks.expand_dims(1) * n + cols.expand_dims(0), b_mask, 0.0);
        acc = dot(at, bt, acc);
    }
    let c_mask = (rows.expand_dims(1) < m) & (cols.expand_dims(0) < n);
    store(
        c + rows.expand_dims(1) * n + cols.expand_dims(0),
        acc,
        c_mask,
    );
}

/// C[M, N] = A[M, K] · B[N, K]ᵀ (B stored as `nn.Linear` weights: `trans` of its tile),
/// masked at every edge.
#[kernel]
fn mm_nt(
    a: Ptr<bf16>,
    b: Ptr<bf16>,
    c: Ptr<f32>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let cols = program_id(1) * BN + arange(0, BN);
    let mut acc = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let a_mask = (rows.expand_dims(1) < m) & (ks.expand_dims(0) < k);
        let at = load(a + rows.expand_dims(1) * k + ks.expand_dims(0), a_mask, 0.0);
        let b_mask = (cols.expand_dims(1) < n) & (ks.expand_dims(0) < k);
        let bt = load(b + cols.expand_dims(1) * k + ks.expand_dims(0), b_mask, 0.0);
        acc = dot(at, trans(bt), acc);
    }
    let c_mask = (rows.expand_dims(1) < m) & (cols.expand_dims(0) < n);
    store(
        c + rows.expand_dims(1) * n + cols.expand_dims(0),
        acc,
        c_mask,
    );
}

/// S[M, N] = Q[M, D] · K[N, D]ᵀ with `trans(k)` (and `x.trans()` on the way out: the result
/// is stored transposed, S^T[N, M]).
#[kernel]
fn qk_t(
    q: Ptr<bf16>,
    kk: Ptr<bf16>,
    s: Ptr<f32>,
    st: Ptr<f32>,
    m: i32,
    n: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] D: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let keys = program_id(1) * BN + arange(0, BN);
    let d = arange(0, D);
    let qt = load(
        q + rows.expand_dims(1) * D + d.expand_dims(0),
        rows.expand_dims(1) < m,
        0.0,
    );
    let kt = load(
        kk + keys.expand_dims(1) * D + d.expand_dims(0),
        keys.expand_dims(1) < n,
        0.0,
    );
    let sc = dot(qt, trans(kt));
    let mask = (rows.expand_dims(1) < m) & (keys.expand_dims(0) < n);
    store(s + rows.expand_dims(1) * n + keys.expand_dims(0), sc, mask);
    store(
        st + keys.expand_dims(1) * m + rows.expand_dims(0),
        sc.trans(),
        mask.trans(),
    );
}

// ---- helpers -----------------------------------------------------------------------------

struct Rng(u64);
impl Rng {
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self
                    .0
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }
}

/// Relative Frobenius error ||got - want|| / ||want||.
fn rel_frob(got: &[f32], want: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(want) {
        num += (*g as f64 - w) * (*g as f64 - w);
        den += w * w;
    }
    (num / den.max(1e-300)).sqrt()
}

/// f64 C = A·B of the values as stored (already rounded to their dtype).
fn matmul_f64(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for kk in 0..k {
            let x = a[i * k + kk] as f64;
            for j in 0..n {
                c[i * n + j] += x * b[kk * n + j] as f64;
            }
        }
    }
    c
}

fn ints(b: &[(&'static str, i64)]) -> Vec<(&'static str, ConstVal)> {
    b.iter().map(|(n, v)| (*n, ConstVal::Int(*v))).collect()
}

/// Runs `k` in the interpreter; `bufs` are the pointer arguments, then the i32 scalars.
fn interpret(k: &Kernel, grid: [u32; 3], bufs: &mut [HostMem], scalars: &[i32]) {
    let mut args: Vec<InterpArg> = (0..bufs.len()).map(|i| InterpArg::whole(i, bufs)).collect();
    args.extend(scalars.iter().map(|&v| InterpArg::I32(v)));
    interp::run(k, grid, &args, bufs, &InterpOptions::default()).unwrap();
}

/// Compiles the full kernel for sm_80 and sm_90 with NVRTC (skipped, loudly, without it:
/// ./scripts/test.sh installs it).
fn nvrtc_compiles(k: &Kernel, warps: u32, stages: u32) -> String {
    nvrtc_compiles_with(k, warps, stages, false)
}

/// [`nvrtc_compiles`] with `EmitOptions::ring_unroll` as given.
fn nvrtc_compiles_with(k: &Kernel, warps: u32, stages: u32, ring_unroll: bool) -> String {
    let src = emit(
        k,
        &EmitOptions {
            num_warps: warps,
            divisible16: vec![true; k.params.len()],
            num_stages: stages,
            ring_unroll,
            wgmma: false,
            wgmma_in_flight: false,
            acq_rel_atomics: false,
            vector_atomics: false,
            warp_replica_reductions: false,
            row_values_once: false,
            elide_reuse_syncs: false,
            frag_rows: false,
            fast_exp2: false,
            dep_hook: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = dsl_runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs libnvrtc)");
    }
    for arch in ["sm_80", "sm_90"] {
        if let Err(e) = dsl_runtime::nvrtc::compile(&src.code, arch, false) {
            let numbered: String = src
                .code
                .lines()
                .enumerate()
                .map(|(i, l)| format!("{:5} {l}\n", i + 1))
                .collect();
            panic!("NVRTC {arch} rejected `{}`:\n{e}\n{numbered}", k.name);
        }
    }
    src.code
}

// ---- matmul: interpreter vs f64, emulation vs interpreter, NVRTC --------------------------

struct Case {
    m: usize,
    n: usize,
    k: usize,
    tile: (i64, i64, i64),
    warps: u32,
    stages: u32,
    /// Whether the loads feeding the dot go through the cp.async ring (tensor cores,
    /// 16-byte aligned rows, num_stages >= 2).
    ring: bool,
}

const CASES: &[Case] = &[
    // Tensor cores; odd sizes leave masked edges in every dimension. Rows of A that are not
    // 16-byte aligned (K = 50) keep the register path.
    Case {
        m: 37,
        n: 45,
        k: 50,
        tile: (32, 32, 16),
        warps: 4,
        stages: 1,
        ring: false,
    },
    Case {
        m: 70,
        n: 33,
        k: 77,
        tile: (64, 32, 32),
        warps: 4,
        stages: 3,
        ring: false,
    },
    // B's rows are aligned (N = 64), A's are not (K = 40): B alone goes through the ring.
    Case {
        m: 16,
        n: 64,
        k: 40,
        tile: (16, 64, 16),
        warps: 2,
        stages: 2,
        ring: true,
    },
    // The cp.async ring: aligned rows, masked edges in M and N, K tails zero-filled.
    Case {
        m: 50,
        n: 48,
        k: 96,
        tile: (32, 32, 32),
        warps: 4,
        stages: 3,
        ring: true,
    },
    Case {
        m: 33,
        n: 80,
        k: 64,
        tile: (32, 64, 16),
        warps: 4,
        stages: 4,
        ring: true,
    },
    Case {
        m: 64,
        n: 64,
        k: 48,
        tile: (64, 64, 16),
        warps: 8,
        stages: 2,
        ring: true,
    },
    Case {
        m: 20,
        n: 16,
        k: 160,
        tile: (16, 16, 64),
        warps: 1,
        stages: 3,
        ring: true,
    },
    // A tile the warps cannot cover in 16x16 pieces, and odd tiles: FMA.
    Case {
        m: 19,
        n: 23,
        k: 29,
        tile: (16, 16, 16),
        warps: 4,
        stages: 3,
        ring: false,
    },
    Case {
        m: 21,
        n: 17,
        k: 13,
        tile: (8, 8, 4),
        warps: 1,
        stages: 3,
        ring: false,
    },
];

/// `which`: "bf16", "f16", "f32" (`mm_bf16`, `mm_f16`, `mm_f32`) or "shl" (`mm_shl`). Every
/// ring's copies are stepped (the matmuls' pointers are affine in k0), except `mm_shl`'s.
fn mm_run(case: &Case, which: &str, seed: u64) {
    mm_run_with(case, which, seed, false)
}

/// [`mm_run`] with `EmitOptions::ring_unroll` as given: with it, a ring's loop runs in
/// passes of `stages` iterations (constant ring slots), the last pass cut short.
fn mm_run_with(case: &Case, which: &str, seed: u64, ring_unroll: bool) {
    let Case {
        m,
        n,
        k,
        tile,
        warps,
        stages,
        ring,
    } = *case;
    let (bm, bn, bk) = tile;
    let (def, din, dout): (&KernelDefRef, DType, DType) = match which {
        "bf16" => (&mm_bf16::KERNEL, DType::BF16, DType::F32),
        "f16" => (&mm_f16::KERNEL, DType::F16, DType::BF16),
        "shl" => (&mm_shl::KERNEL, DType::BF16, DType::F32),
        _ => (&mm_f32::KERNEL, DType::F32, DType::F32),
    };
    let mut cx = ints(&[("BM", bm), ("BN", bn), ("BK", bk)]);
    if which == "shl" {
        cx.extend(ints(&[("SH", bk.trailing_zeros() as i64)]));
    }
    let kern = def.specialize(&cx).unwrap();
    let mut rng = Rng(seed);
    let a = HostMem::from_f32s(din, &rng.vec(m * k));
    let b = HostMem::from_f32s(din, &rng.vec(k * n));
    let c = HostMem::from_f32s(dout, &vec![f32::NAN; m * n]);
    let want = matmul_f64(&a.to_f32s(), &b.to_f32s(), m, n, k);
    let grid = [
        (m as u64).div_ceil(bm as u64) as u32,
        (n as u64).div_ceil(bn as u64) as u32,
        1,
    ];
    let scalars = [m as i32, n as i32, k as i32];
    let sc = scalars.map(Scalar::I32);
    let mut mem = vec![a.clone(), b.clone(), c.clone()];
    interpret(&kern, grid, &mut mem, &scalars);
    let got = mem[2].to_f32s();
    let err = rel_frob(&got, &want);
    let tol = if dout == DType::F32 { 1e-5 } else { 1e-2 };
    assert!(
        err <= tol,
        "{which} {m}x{n}x{k} tile {tile:?}: interpreter vs f64 {err:e} > {tol:e}"
    );
    let code = emit(
        &kern,
        &EmitOptions {
            num_warps: warps,
            divisible16: facts(&kern, &sc),
            num_stages: stages,
            ring_unroll,
            wgmma: false,
            wgmma_in_flight: false,
            acq_rel_atomics: false,
            vector_atomics: false,
            warp_replica_reductions: false,
            row_values_once: false,
            elide_reuse_syncs: false,
            frag_rows: false,
            fast_exp2: false,
            dep_hook: None,
        },
    )
    .unwrap()
    .code;
    assert_eq!(
        code.contains("the ring slots are constants"),
        ring_unroll && ring && which != "f32",
        "{which} {m}x{n}x{k} tile {tile:?} stages {stages}: passes of constant ring slots\n{code}"
    );
    assert!(!(ring_unroll && code.contains("ring_it")), "{code}");
    assert_eq!(
        code.contains("// software pipelining (num_stages"),
        ring && which != "f32",
        "{which} {m}x{n}x{k} tile {tile:?} stages {stages}: cp.async ring expected: {ring}"
    );
    let generic = which == "shl";
    assert_eq!(
        code.contains("tsr_cp_async16_at("),
        ring && which != "f32" && !generic,
        "{which} {m}x{n}x{k} tile {tile:?} stages {stages}: copies advanced by a fixed step"
    );
    let generic_copies = code
        .lines()
        .filter(|l| l.contains("tsr_cp_async16(") && !l.contains("void tsr_cp_async16("))
        .count();
    assert_eq!(
        generic_copies > 0,
        ring && generic,
        "{which} {m}x{n}x{k} tile {tile:?} stages {stages}: generic copies\n{code}"
    );
    assert_eq!(
        code.contains("tsr_saddr lds_a["),
        code.contains("// dot: tensor cores"),
        "{which} {m}x{n}x{k} tile {tile:?}: ldmatrix from lane bases on tensor cores"
    );
    if have_gxx() {
        let emu = emulate_with(&kern, warps, stages, ring_unroll, grid, &[a, b, c], &sc);
        let eg = emu[2].to_f32s();
        for (i, (x, y)) in eg.iter().zip(&got).enumerate() {
            assert!(
                x.to_bits() == y.to_bits(),
                "{which} {m}x{n}x{k} tile {tile:?} warps {warps} stages {stages}: emulated C[{}, {}] = {x}, interpreter {y}",
                i / n,
                i % n
            );
        }
    } else {
        eprintln!("g++ not found: the emulation half of this test is skipped");
    }
}

type KernelDefRef = dsl_runtime::KernelDef;

#[test]
fn matmul_bf16_interpreter_and_emulation() {
    for (i, c) in CASES.iter().enumerate() {
        mm_run(c, "bf16", 11 + i as u64);
    }
}

#[test]
fn matmul_f16_to_bf16_interpreter_and_emulation() {
    for (i, c) in CASES.iter().enumerate().skip(2).take(3) {
        mm_run(c, "f16", 21 + i as u64);
    }
}

/// Larger tiles: warp grids with several warps along N (2x2 on 4 warps for 64x128, 2x4 on
/// 8, 1x2 for 32x64), swizzles with 8 phases (4 lane bases) and chunk constants past them, masked
/// edges in every dimension, with and without the ring.
const LANE_CASES: &[Case] = &[
    Case {
        m: 150,
        n: 272,
        k: 208,
        tile: (64, 128, 64),
        warps: 4,
        stages: 3,
        ring: true,
    },
    Case {
        m: 70,
        n: 200,
        k: 100,
        tile: (64, 128, 32),
        warps: 8,
        stages: 4,
        ring: false,
    },
    Case {
        m: 40,
        n: 96,
        k: 144,
        tile: (32, 64, 128),
        warps: 2,
        stages: 2,
        ring: true,
    },
];

#[test]
fn matmul_lane_bases_interpreter_and_emulation() {
    for (i, c) in LANE_CASES.iter().enumerate() {
        mm_run(c, "bf16", 41 + i as u64);
        mm_run(c, "f16", 71 + i as u64);
    }
}

/// Stepped copies: odd, masked M and N, K not a multiple of BK, with and without
/// the ring (and B alone in it), a copy count that does not divide the threads (a guarded
/// copy), and a tile whose copies are not a whole number of swizzle periods apart.
const CP_CASES: &[Case] = &[
    Case {
        m: 37,
        n: 48,
        k: 80,
        tile: (32, 32, 32),
        warps: 4,
        stages: 3,
        ring: true,
    },
    Case {
        m: 45,
        n: 80,
        k: 112,
        tile: (32, 64, 64),
        warps: 4,
        stages: 2,
        ring: true,
    },
    // K = 40 is not divisible by 16: A keeps the register path, B alone has the ring.
    Case {
        m: 16,
        n: 64,
        k: 40,
        tile: (16, 64, 16),
        warps: 2,
        stages: 2,
        ring: true,
    },
    Case {
        m: 37,
        n: 45,
        k: 50,
        tile: (32, 32, 16),
        warps: 4,
        stages: 3,
        ring: false,
    },
    // B is 32 chunks for 64 threads: the copy is guarded.
    Case {
        m: 21,
        n: 32,
        k: 48,
        tile: (32, 16, 16),
        warps: 2,
        stages: 3,
        ring: true,
    },
    // One warp: B's copies are 2 rows apart, under its swizzle's period of 8 (no per-lane base).
    Case {
        m: 20,
        n: 144,
        k: 96,
        tile: (16, 128, 32),
        warps: 1,
        stages: 4,
        ring: true,
    },
];

#[test]
fn matmul_stepped_copies_interpreter_and_emulation() {
    for (i, c) in CP_CASES.iter().enumerate() {
        mm_run(c, "bf16", 101 + i as u64);
        mm_run(c, "f16", 131 + i as u64);
    }
}

#[test]
fn stepped_copies_compile_with_nvrtc() {
    for (i, c) in CP_CASES.iter().enumerate() {
        let (bm, bn, bk) = c.tile;
        let cx = ints(&[("BM", bm), ("BN", bn), ("BK", bk)]);
        for def in [&mm_bf16::KERNEL, &mm_f16::KERNEL] {
            let code = nvrtc_compiles(&def.specialize(&cx).unwrap(), c.warps, c.stages);
            // The guarded copy and the copies without a per-lane base are exercised.
            match i {
                4 => assert!(code.contains("if (cq < 32) {"), "{code}"),
                5 => assert!(
                    code.contains("const tsr_saddr bt_ring_s = tsr_saddr_of(bt_ring);"),
                    "{code}"
                ),
                _ => {}
            }
        }
    }
}

/// `EmitOptions::ring_unroll`: trip counts (`ceil(k / BK)`) of 0, 1, below the ring's
/// depth, equal to it, above it and not a multiple of it (over 2S - 1 too: copies issued
/// after a whole pass), K tails masked or not, with both operands in the ring or B alone
/// (K not divisible by 16).
const UNROLL_CASES: &[Case] = &[
    // 4 stages, BK = 32: trips 0, 1, 2 (tail), 3 (tail), 4 (tail), 6 (tail), 9.
    Case {
        m: 37,
        n: 48,
        k: 0,
        tile: (32, 32, 32),
        warps: 4,
        stages: 4,
        ring: true,
    },
    Case {
        m: 37,
        n: 48,
        k: 32,
        tile: (32, 32, 32),
        warps: 4,
        stages: 4,
        ring: true,
    },
    Case {
        m: 37,
        n: 48,
        k: 48,
        tile: (32, 32, 32),
        warps: 4,
        stages: 4,
        ring: true,
    },
    Case {
        m: 50,
        n: 40,
        k: 80,
        tile: (32, 32, 32),
        warps: 4,
        stages: 4,
        ring: true,
    },
    Case {
        m: 21,
        n: 64,
        k: 112,
        tile: (32, 32, 32),
        warps: 4,
        stages: 4,
        ring: true,
    },
    Case {
        m: 37,
        n: 48,
        k: 176,
        tile: (32, 32, 32),
        warps: 4,
        stages: 4,
        ring: true,
    },
    Case {
        m: 33,
        n: 80,
        k: 288,
        tile: (32, 64, 32),
        warps: 4,
        stages: 4,
        ring: true,
    },
    // Trip 11 (tail): the third pass is short (and the copies' pointers advance by passes).
    Case {
        m: 37,
        n: 48,
        k: 336,
        tile: (32, 32, 32),
        warps: 4,
        stages: 4,
        ring: true,
    },
    // 3 stages, BK = 16: trips 5 and 7; 2 stages: 3 and 5 (tails).
    Case {
        m: 45,
        n: 32,
        k: 80,
        tile: (32, 32, 16),
        warps: 4,
        stages: 3,
        ring: true,
    },
    Case {
        m: 19,
        n: 96,
        k: 112,
        tile: (16, 64, 16),
        warps: 2,
        stages: 3,
        ring: true,
    },
    Case {
        m: 40,
        n: 48,
        k: 80,
        tile: (32, 32, 32),
        warps: 4,
        stages: 2,
        ring: true,
    },
    Case {
        m: 40,
        n: 48,
        k: 144,
        tile: (32, 32, 32),
        warps: 4,
        stages: 2,
        ring: true,
    },
    // K = 72: A's rows are not 16-byte aligned (register path), B alone in the ring; 5 trips.
    Case {
        m: 24,
        n: 64,
        k: 72,
        tile: (16, 64, 16),
        warps: 2,
        stages: 4,
        ring: true,
    },
];

/// With `EmitOptions::ring_unroll`: every ring case of this file, emulated bit for bit
/// against the interpreter (bf16 and f16; the generic copies of `mm_shl` too), and the
/// trip counts of [`UNROLL_CASES`].
#[test]
fn matmul_ring_unroll_interpreter_and_emulation() {
    let all = || {
        CASES
            .iter()
            .chain(LANE_CASES)
            .chain(CP_CASES)
            .chain(UNROLL_CASES)
    };
    for (i, c) in all().enumerate() {
        mm_run_with(c, "bf16", 201 + i as u64, true);
        mm_run_with(c, "f16", 251 + i as u64, true);
    }
    for (i, c) in all().enumerate().filter(|(_, c)| c.ring) {
        mm_run_with(c, "shl", 301 + i as u64, true);
    }
    // And the new trip counts with the option off.
    for (i, c) in UNROLL_CASES.iter().enumerate() {
        mm_run(c, "bf16", 351 + i as u64);
    }
}

#[test]
fn ring_unroll_compiles_with_nvrtc() {
    for c in CASES
        .iter()
        .chain(LANE_CASES)
        .chain(CP_CASES)
        .chain(UNROLL_CASES)
    {
        let (bm, bn, bk) = c.tile;
        let cx = ints(&[("BM", bm), ("BN", bn), ("BK", bk)]);
        for def in [&mm_bf16::KERNEL, &mm_f16::KERNEL] {
            nvrtc_compiles_with(&def.specialize(&cx).unwrap(), c.warps, c.stages, true);
        }
        if c.ring {
            let cx = [cx, ints(&[("SH", bk.trailing_zeros() as i64)])].concat();
            let code = nvrtc_compiles_with(
                &mm_shl::KERNEL.specialize(&cx).unwrap(),
                c.warps,
                c.stages,
                true,
            );
            assert!(code.contains("the ring slots are constants"), "{code}");
        }
    }
    // The matmul example's tuning space.
    for (bm, bn, bk, w, s) in [
        (128, 256, 64, 8, 3),
        (128, 256, 32, 8, 3),
        (128, 128, 32, 4, 4),
        (128, 128, 64, 4, 3),
        (256, 128, 32, 8, 3),
        (256, 128, 64, 8, 3),
    ] {
        let big = mm_bf16::KERNEL
            .specialize(&ints(&[("BM", bm), ("BN", bn), ("BK", bk)]))
            .unwrap();
        let code = nvrtc_compiles_with(&big, w, s, true);
        assert!(code.contains("the ring slots are constants"), "{code}");
        assert!(!code.contains("ring_it"), "{code}");
    }
}

/// `mm_shl`: pipelined loads whose pointers the stepped copies do not follow keep the
/// generic copies (every ring case of [`CASES`]; its K tails and B-alone ring included).
#[test]
fn matmul_generic_copies_interpreter_emulation_and_nvrtc() {
    for (i, c) in CASES.iter().enumerate().filter(|(_, c)| c.ring) {
        mm_run(c, "shl", 161 + i as u64);
        let (bm, bn, bk) = c.tile;
        let cx = ints(&[
            ("BM", bm),
            ("BN", bn),
            ("BK", bk),
            ("SH", bk.trailing_zeros() as i64),
        ]);
        nvrtc_compiles(&mm_shl::KERNEL.specialize(&cx).unwrap(), c.warps, c.stages);
    }
}

#[test]
fn warp_grid_loads_the_fewest_fragments() {
    let src = |bm, bn, bk, warps| {
        let k = mm_bf16::KERNEL
            .specialize(&ints(&[("BM", bm), ("BN", bn), ("BK", bk)]))
            .unwrap();
        emit(&k, &EmitOptions::new(warps)).unwrap().code
    };
    // 128x256 on 8 warps: 2x4 warps of 64x64 (8 ldmatrix.x4 per k step), not 8x1 (17).
    let big = src(128, 256, 64, 8);
    assert!(big.contains("2x4 warps, each 4 x 8 tiles of 16x8"), "{big}");
    // 4 + 4 bases (BK = 64 and BN = 256: 8-phase swizzles), not one register per ldmatrix.
    assert!(big.contains("tsr_saddr lds_a[4], lds_b[4];"), "{big}");
    assert!(!big.contains("tsr_smem_u32(smem") && !big.contains("tsr_ldmatrix_x4(fa[mi], smem"));
    // Square tiles: 2x2 of 64x64 on 4 warps, 4x2 of 64x64 on 8. A tie (64x64 on 2 warps:
    // 2x1 loads 2 + 4 fragments, 1x2 loads 4 + 2) goes to more warps along M.
    assert!(src(128, 128, 32, 4).contains("2x2 warps, each 4 x 8 tiles of 16x8"));
    assert!(src(256, 128, 64, 8).contains("4x2 warps, each 4 x 8 tiles of 16x8"));
    assert!(src(64, 64, 32, 2).contains("2x1 warps, each 2 x 8 tiles of 16x8"));
}

#[test]
fn matmul_f32_fma_interpreter_and_emulation() {
    for (i, c) in CASES.iter().enumerate().skip(6) {
        mm_run(c, "f32", 31 + i as u64);
    }
}

#[test]
fn qk_transposed_interpreter_and_emulation() {
    for (m, n, tile, warps) in [
        (37usize, 29usize, (32i64, 32i64, 64i64), 4u32),
        (20, 9, (16, 16, 32), 1),
        (5, 7, (8, 4, 24), 2),
    ] {
        let (bm, bn, d) = tile;
        let kern = qk_t::KERNEL
            .specialize(&ints(&[("BM", bm), ("BN", bn), ("D", d)]))
            .unwrap();
        let du = d as usize;
        let mut rng = Rng(m as u64 * 7 + n as u64);
        let q = HostMem::from_f32s(DType::BF16, &rng.vec(m * du));
        let kk = HostMem::from_f32s(DType::BF16, &rng.vec(n * du));
        let s = HostMem::from_f32s(DType::F32, &vec![0.0; m * n]);
        let st = HostMem::from_f32s(DType::F32, &vec![0.0; m * n]);
        // K^T as [D, N] for the reference.
        let kv = kk.to_f32s();
        let ktr: Vec<f32> = (0..du * n).map(|o| kv[(o % n) * du + o / n]).collect();
        let want = matmul_f64(&q.to_f32s(), &ktr, m, n, du);
        let grid = [
            (m as u64).div_ceil(bm as u64) as u32,
            (n as u64).div_ceil(bn as u64) as u32,
            1,
        ];
        let mut mem = vec![q.clone(), kk.clone(), s.clone(), st.clone()];
        interpret(&kern, grid, &mut mem, &[m as i32, n as i32]);
        let got = mem[2].to_f32s();
        assert!(rel_frob(&got, &want) <= 1e-5, "qk {m}x{n}");
        let gt = mem[3].to_f32s();
        for i in 0..m {
            for j in 0..n {
                assert_eq!(gt[j * m + i].to_bits(), got[i * n + j].to_bits(), "S^T");
            }
        }
        if have_gxx() {
            let emu = emulate(
                &kern,
                warps,
                3,
                grid,
                &[q, kk, s, st],
                &[Scalar::I32(m as i32), Scalar::I32(n as i32)],
            );
            let same =
                |x: &[f32], y: &[f32]| x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same(&emu[2].to_f32s(), &got), "emulated S, tile {tile:?}");
            assert!(same(&emu[3].to_f32s(), &gt), "emulated S^T, tile {tile:?}");
        }
    }
}

#[test]
fn explain_names_the_path_and_the_reason() {
    let tc = mm_bf16::KERNEL
        .cuda_source(&ints(&[("BM", 64), ("BN", 64), ("BK", 32)]), 4)
        .unwrap();
    assert!(
        tc.code
            .contains("// dot: tensor cores: mma.sync m16n8k16 bf16"),
        "{}",
        tc.code
    );
    let odd = mm_bf16::KERNEL
        .cuda_source(&ints(&[("BM", 24), ("BN", 64), ("BK", 32)]), 4)
        .unwrap();
    assert!(odd
        .code
        .contains("// dot: FMA fallback: M=24, N=64, K=32 are not all multiples of 16"));
    let f32s = mm_f32::KERNEL
        .cuda_source(&ints(&[("BM", 64), ("BN", 64), ("BK", 32)]), 4)
        .unwrap();
    assert!(f32s.code.contains("// dot: FMA fallback: f32 operands"));
}

#[test]
fn every_dot_kernel_compiles_with_nvrtc() {
    for c in CASES {
        let (bm, bn, bk) = c.tile;
        let cx = ints(&[("BM", bm), ("BN", bn), ("BK", bk)]);
        for def in [&mm_bf16::KERNEL, &mm_f16::KERNEL, &mm_f32::KERNEL] {
            nvrtc_compiles(&def.specialize(&cx).unwrap(), c.warps, c.stages);
        }
    }
    // A large tile: over 48 KiB of shared memory (dynamic), 8 warps, 4 stages.
    let big = mm_bf16::KERNEL
        .specialize(&ints(&[("BM", 128), ("BN", 256), ("BK", 64)]))
        .unwrap();
    let code = nvrtc_compiles(&big, 8, 4);
    assert!(code.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
    let qk = qk_t::KERNEL
        .specialize(&ints(&[("BM", 64), ("BN", 64), ("D", 128)]))
        .unwrap();
    nvrtc_compiles(&qk, 4, 2);
}

#[test]
fn lane_base_tiles_compile_with_nvrtc() {
    for c in LANE_CASES {
        let (bm, bn, bk) = c.tile;
        let cx = ints(&[("BM", bm), ("BN", bn), ("BK", bk)]);
        for def in [&mm_bf16::KERNEL, &mm_f16::KERNEL] {
            nvrtc_compiles(&def.specialize(&cx).unwrap(), c.warps, c.stages);
        }
    }
    // The matmul example's tuning space (BK = 64 on 8 warps included).
    for (bm, bn, bk, w, s) in [
        (128, 256, 64, 8, 3),
        (128, 256, 32, 8, 3),
        (128, 128, 32, 4, 4),
        (128, 128, 64, 4, 3),
        (256, 128, 32, 8, 3),
        (256, 128, 64, 8, 3),
    ] {
        let big = mm_bf16::KERNEL
            .specialize(&ints(&[("BM", bm), ("BN", bn), ("BK", bk)]))
            .unwrap();
        let code = nvrtc_compiles(&big, w, s);
        assert!(code.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
        // Both operands' copies are stepped (the helper, then each in the prologue and the
        // loop), from a per-lane shared-memory base.
        assert_eq!(code.matches("tsr_cp_async16_at(").count(), 5, "{code}");
        assert!(code.contains("this thread's first chunk"), "{code}");
    }
}

// ---- wgmma (sm_90a, EmitOptions::wgmma): emulation with a model of wgmma, NVRTC + ptxas ----

/// A `dot` that takes `wgmma`: odd sizes (masked rows, columns and k tails), rows of 16, 32
/// and 64 elements and wider (column blocks), one or two warpgroups, one or two m64 slabs per
/// warpgroup, B `[k][n]` (MN-major) and `[n][k]` (`mm_nt`, K-major).
#[derive(Clone, Copy)]
struct WgCase {
    which: &'static str,
    m: usize,
    n: usize,
    k: usize,
    tile: (i64, i64, i64),
    warps: u32,
    stages: u32,
}

const WG_CASES: &[WgCase] = &[
    WgCase {
        which: "bf16",
        m: 70,
        n: 144,
        k: 80,
        tile: (64, 128, 32),
        warps: 4,
        stages: 3,
    },
    WgCase {
        which: "bf16",
        m: 100,
        n: 80,
        k: 208,
        tile: (64, 64, 64),
        warps: 4,
        stages: 2,
    },
    WgCase {
        which: "bf16",
        m: 130,
        n: 48,
        k: 48,
        tile: (128, 32, 16),
        warps: 4,
        stages: 3,
    },
    WgCase {
        which: "bf16",
        m: 140,
        n: 272,
        k: 80,
        tile: (128, 256, 32),
        warps: 8,
        stages: 3,
    },
    WgCase {
        which: "bf16",
        m: 64,
        n: 48,
        k: 144,
        tile: (64, 16, 128),
        warps: 4,
        stages: 2,
    },
    WgCase {
        which: "f16",
        m: 90,
        n: 80,
        k: 48,
        tile: (64, 64, 32),
        warps: 4,
        stages: 3,
    },
    WgCase {
        which: "nt",
        m: 77,
        n: 100,
        k: 112,
        tile: (64, 64, 64),
        warps: 4,
        stages: 3,
    },
    WgCase {
        which: "nt",
        m: 150,
        n: 90,
        k: 48,
        tile: (128, 128, 16),
        warps: 8,
        stages: 4,
    },
];

/// (kernel, A/B dtype, C dtype) of a `WgCase::which`.
fn wg_kernel(which: &str) -> (&'static KernelDefRef, DType, DType) {
    match which {
        "f16" => (&mm_f16::KERNEL, DType::F16, DType::BF16),
        "nt" => (&mm_nt::KERNEL, DType::BF16, DType::F32),
        _ => (&mm_bf16::KERNEL, DType::BF16, DType::F32),
    }
}

/// The options of a `WgCase` (all pointers aligned, i32s as `facts` finds them).
fn wg_opts(kern: &Kernel, c: &WgCase, v: Variant, sc: &[Scalar]) -> EmitOptions {
    EmitOptions {
        num_warps: c.warps,
        divisible16: facts(kern, sc),
        num_stages: c.stages,
        ring_unroll: v.ring_unroll,
        wgmma: v.wgmma,
        wgmma_in_flight: v.in_flight,
        acq_rel_atomics: false,
        vector_atomics: false,
        warp_replica_reductions: false,
        row_values_once: false,
        elide_reuse_syncs: false,
        frag_rows: false,
        fast_exp2: false,
        dep_hook: None,
    }
}

/// The interpreter against f64; the C with `wgmma` emulated (the model of host_emu/wgmma.h)
/// against the interpreter, bit for bit (the model sums each output's 16 k in ascending
/// order with fmaf, as the interpreter).
fn wgmma_run(c: &WgCase, v: Variant, seed: u64) {
    let (m, n, k) = (c.m, c.n, c.k);
    let (bm, bn, bk) = c.tile;
    let (def, din, dout) = wg_kernel(c.which);
    let kern = def
        .specialize(&ints(&[("BM", bm), ("BN", bn), ("BK", bk)]))
        .unwrap();
    let mut rng = Rng(seed);
    let a = HostMem::from_f32s(din, &rng.vec(m * k));
    let b = HostMem::from_f32s(din, &rng.vec(k * n));
    let cbuf = HostMem::from_f32s(dout, &vec![f32::NAN; m * n]);
    // B is [n][k] for `mm_nt`: the reference multiplies by its transpose.
    let bf = b.to_f32s();
    let b_kn: Vec<f32> = if c.which == "nt" {
        (0..k * n).map(|i| bf[(i % n) * k + i / n]).collect()
    } else {
        bf
    };
    let want = matmul_f64(&a.to_f32s(), &b_kn, m, n, k);
    let grid = [
        m.div_ceil(bm as usize) as u32,
        n.div_ceil(bn as usize) as u32,
        1,
    ];
    let scalars = [m as i32, n as i32, k as i32];
    let sc = scalars.map(Scalar::I32);
    let mut mem = vec![a.clone(), b.clone(), cbuf.clone()];
    interpret(&kern, grid, &mut mem, &scalars);
    let got = mem[2].to_f32s();
    let tol = if dout == DType::F32 { 1e-5 } else { 1e-2 };
    let what = format!(
        "{} {m}x{n}x{k} tile {:?} warps {} stages {} {v:?}",
        c.which, c.tile, c.warps, c.stages
    );
    let err = rel_frob(&got, &want);
    assert!(err <= tol, "{what}: interpreter vs f64 {err:e} > {tol:e}");
    let code = emit(&kern, &wg_opts(&kern, c, v, &sc)).unwrap().code;
    assert!(
        code.contains(&format!("// dot: tensor cores: wgmma m64n{bn}k16")),
        "{what}: the dot takes wgmma\n{code}"
    );
    assert!(code.contains("tsr_fence_proxy_async();"), "{what}");
    assert!(!code.contains("lds_a["), "{what}: no ldmatrix");
    assert_eq!(
        code.contains("the ring slots are constants"),
        v.ring_unroll,
        "{what}"
    );
    // In flight only where the dot accumulates in place (`mm_f16`'s `acc += dot(a, b)` adds
    // the result: it waits, as without the option).
    let in_flight = v.in_flight && c.which != "f16";
    assert_eq!(code.contains("tsr_wgmma_wait<1>();"), in_flight, "{what}");
    assert_eq!(
        code.contains(&format!("into a ring of {} slots", c.stages + 1)),
        in_flight,
        "{what}"
    );
    if !have_gxx() {
        eprintln!("g++ not found: the emulation half of this test is skipped");
        return;
    }
    let emu = emulate_variant(&kern, c.warps, c.stages, v, grid, &[a, b, cbuf], &sc);
    for (i, (x, y)) in emu[2].to_f32s().iter().zip(&got).enumerate() {
        assert!(
            x.to_bits() == y.to_bits(),
            "{what}: emulated C[{}, {}] = {x}, interpreter {y}",
            i / n,
            i % n
        );
    }
}

const WGMMA: Variant = Variant {
    ring_unroll: false,
    wgmma: true,
    in_flight: false,
    warp_reduce: false,
    row_values: false,
    reuse_sync: false,
    frag_rows: false,
    fast_exp2: false,
};

/// `EmitOptions::wgmma_in_flight` (`TESSERA_WGMMA=2`): an iteration's wgmmas retire in the
/// next one, the ring a slot deeper.
const IN_FLIGHT: Variant = Variant {
    ring_unroll: false,
    wgmma: true,
    in_flight: true,
    warp_reduce: false,
    row_values: false,
    reuse_sync: false,
    frag_rows: false,
    fast_exp2: false,
};

#[test]
fn matmul_wgmma_interpreter_and_emulation() {
    for (i, c) in WG_CASES.iter().enumerate() {
        wgmma_run(c, WGMMA, 31 + i as u64);
    }
}

/// With `EmitOptions::ring_unroll` too: the slots a wgmma reads are constants.
#[test]
fn matmul_wgmma_ring_unroll_interpreter_and_emulation() {
    for (i, c) in WG_CASES.iter().enumerate().step_by(3) {
        for in_flight in [false, true] {
            let v = Variant {
                ring_unroll: true,
                wgmma: true,
                in_flight,
                warp_reduce: false,
                row_values: false,
                reuse_sync: false,
                frag_rows: false,
                fast_exp2: false,
            };
            wgmma_run(c, v, 41 + i as u64);
        }
    }
}

/// With `EmitOptions::wgmma_in_flight`: `wait_group 1` in the loop, 0 after it, one more
/// ring slot (the model fails if a slot changes under a wgmma before its wait).
#[test]
fn matmul_wgmma_in_flight_interpreter_and_emulation() {
    for (i, c) in WG_CASES.iter().enumerate() {
        // Three more iterations: refills while the previous iteration's wgmmas are in flight.
        let longer = WgCase {
            k: c.k + 3 * c.tile.2 as usize,
            ..*c
        };
        wgmma_run(&longer, IN_FLIGHT, 51 + i as u64);
    }
}

/// The model is not vacuous: a descriptor whose swizzle does not match the ring's changes
/// the result; a missing proxy fence, and a wgmma left in flight over a slot the next
/// iteration refills, fail the emulation (the generated C edited).
#[test]
fn wgmma_model_rejects_a_wrong_layout() {
    if !have_gxx() {
        eprintln!("g++ not found: skipped");
        return;
    }
    let c = &WG_CASES[0];
    // 9 iterations: slots are refilled while earlier iterations' wgmmas could be in flight.
    let (m, n, k) = (c.m, c.n, 272);
    let (bm, bn, bk) = c.tile;
    let kern = mm_bf16::KERNEL
        .specialize(&ints(&[("BM", bm), ("BN", bn), ("BK", bk)]))
        .unwrap();
    let mut rng = Rng(5);
    let a = HostMem::from_f32s(DType::BF16, &rng.vec(m * k));
    let b = HostMem::from_f32s(DType::BF16, &rng.vec(k * n));
    let cbuf = HostMem::from_f32s(DType::F32, &vec![f32::NAN; m * n]);
    let bufs = [a, b, cbuf];
    let grid = [
        m.div_ceil(bm as usize) as u32,
        n.div_ceil(bn as usize) as u32,
        1,
    ];
    let sc = [m as i32, n as i32, k as i32].map(Scalar::I32);
    let body = dsl_runtime::cuda::emit_body(&kern, &wg_opts(&kern, c, WGMMA, &sc)).unwrap();
    let run = |code: String| {
        let mut edited = body.clone();
        edited.code = code;
        emu::run_body(&kern, &edited, grid, &bufs, &sc)
    };
    let good = run(body.code.clone()).unwrap()[2].to_f32s();
    // BK = 32: A's rows of 64 bytes take the 64B swizzle (mode 2); claim 32B (mode 3).
    let a_desc = ", 16, 512, 2);  // A [64][32] K-major";
    assert!(body.code.contains(a_desc), "{}", body.code);
    let bad = run(body
        .code
        .replace(a_desc, ", 16, 512, 3);  // A [64][32] K-major"))
    .unwrap();
    assert!(
        bad[2]
            .to_f32s()
            .iter()
            .zip(&good)
            .any(|(x, y)| x.to_bits() != y.to_bits()),
        "a wrong swizzle must change the result"
    );
    let fence = "tsr_fence_proxy_async();  //";
    assert!(body.code.contains(fence));
    let err = run(body.code.replace(fence, "//"))
        .err()
        .unwrap_or_default();
    assert!(err.contains("fence.proxy.async"), "{err}");
    // One iteration's wgmmas in flight without the extra ring slot: the next iteration's
    // copies go into the slot they still read.
    let wait = "tsr_wgmma_wait<0>();  // done";
    assert!(body.code.contains(wait));
    let err = run(body.code.replace(wait, "tsr_wgmma_wait<1>();  // done"))
        .err()
        .unwrap_or_default();
    assert!(
        err.contains("a cp.async in flight into shared memory a wgmma reads"),
        "{err}"
    );
}

/// Every `WgCase` compiles for sm_90a through ptxas with no spills (waiting for each
/// iteration's wgmmas, and with them in flight); plain sm_90 is refused
/// by the generated `#error` (ptxas would reject wgmma there).
#[test]
fn wgmma_compiles_for_sm90a_without_spills() {
    if let Err(e) = dsl_runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs libnvrtc)");
    }
    for (c, v) in WG_CASES.iter().flat_map(|c| [(c, WGMMA), (c, IN_FLIGHT)]) {
        let (bm, bn, bk) = c.tile;
        let (def, ..) = wg_kernel(c.which);
        let kern = def
            .specialize(&ints(&[("BM", bm), ("BN", bn), ("BK", bk)]))
            .unwrap();
        let src = emit(&kern, &wg_opts(&kern, c, v, &[Scalar::I32(16); 3])).unwrap();
        assert!(src.wgmma && src.arch("sm_90") == "sm_90a");
        let info = dsl_runtime::nvrtc::ptxas_info(&src.code, "sm_90a")
            .unwrap_or_else(|e| panic!("{} tile {:?}: {e}", c.which, c.tile));
        assert_eq!(
            info.spill_bytes, 0,
            "{} tile {:?}: {}",
            c.which, c.tile, info.log
        );
        assert!(
            !info.log.contains("serialized") && !info.log.contains("injected"),
            "{}",
            info.log
        );
        // The runtime's path (PTX for the driver) for the architecture `CudaSource::arch` names.
        if let Err(e) = dsl_runtime::nvrtc::compile(&src.code, src.arch("sm_90"), false) {
            panic!("{} tile {:?}: {e}", c.which, c.tile);
        }
        let e = dsl_runtime::nvrtc::compile(&src.code, "sm_90", false)
            .err()
            .expect("wgmma code must not compile for plain sm_90");
        assert!(e.to_string().contains("wgmma needs sm_90a"), "{e}");
    }
}

/// With the option on, a `dot` that cannot take wgmma keeps mma.sync (or FMA) and says why;
/// an f32 `dot`'s code does not change at all.
#[test]
fn wgmma_falls_back_with_the_reason() {
    let why = |def: &KernelDefRef, tile: (i64, i64, i64), warps: u32| {
        let kern = def
            .specialize(&ints(&[("BM", tile.0), ("BN", tile.1), ("BK", tile.2)]))
            .unwrap();
        let c = WgCase {
            which: "",
            m: 0,
            n: 0,
            k: 0,
            tile,
            warps,
            stages: 3,
        };
        let code = emit(&kern, &wg_opts(&kern, &c, WGMMA, &[Scalar::I32(16); 3]))
            .unwrap()
            .code;
        let line = code
            .lines()
            .find(|l| l.contains("// dot: "))
            .unwrap_or_default()
            .to_string();
        (line, code)
    };
    let (l, code) = why(&mm_bf16::KERNEL, (64, 64, 32), 2);
    assert!(
        l.contains("mma.sync") && l.contains("not wgmma: 2 warps are not whole warpgroups of 4"),
        "{l}"
    );
    assert!(!code.contains("wgmma.mma_async"), "{code}");
    let (l, _) = why(&mm_bf16::KERNEL, (64, 64, 32), 8);
    assert!(
        l.contains("not wgmma: M=64 is not a multiple of 64 rows x 2 warpgroups"),
        "{l}"
    );
    let (l, _) = why(&mm_bf16::KERNEL, (64, 512, 32), 4);
    assert!(l.contains("not wgmma: N=512 is over 256"), "{l}");
    let (l, _) = why(&mm_bf16::KERNEL, (64, 48, 32), 4);
    assert!(
        l.contains("not wgmma: B's rows of 96 bytes take no wgmma swizzle"),
        "{l}"
    );
    let (l, _) = why(&mm_bf16::KERNEL, (64, 64, 48), 4);
    assert!(
        l.contains("not wgmma: A's rows of 96 bytes take no wgmma swizzle"),
        "{l}"
    );
    // Not in a pipelined loop: qk_t's operands are plain loads.
    let kern = qk_t::KERNEL
        .specialize(&ints(&[("BM", 64), ("BN", 64), ("D", 64)]))
        .unwrap();
    let c = WgCase {
        which: "",
        m: 0,
        n: 0,
        k: 0,
        tile: (0, 0, 0),
        warps: 4,
        stages: 3,
    };
    let code = emit(&kern, &wg_opts(&kern, &c, WGMMA, &[Scalar::I32(16); 2]))
        .unwrap()
        .code;
    assert!(
        code.contains("not wgmma: its operands are not both in one loop's cp.async ring"),
        "{code}"
    );
    // f32: FMA, nothing to plan: the same code with the option off.
    let (_, on) = why(&mm_f32::KERNEL, (64, 64, 32), 4);
    let kern = mm_f32::KERNEL
        .specialize(&ints(&[("BM", 64), ("BN", 64), ("BK", 32)]))
        .unwrap();
    let c = WgCase {
        which: "",
        m: 0,
        n: 0,
        k: 0,
        tile: (64, 64, 32),
        warps: 4,
        stages: 3,
    };
    let off = emit(
        &kern,
        &wg_opts(&kern, &c, Variant::default(), &[Scalar::I32(16); 3]),
    )
    .unwrap()
    .code;
    assert_eq!(on, off);
}
