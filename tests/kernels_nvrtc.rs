//! Every shipped kernel's CUDA C (the library's and the Qwen3 decoder's) compiles with NVRTC for sm_80 and sm_90, at the default
//! constexprs and at odd ones; the `dot` kernels at their tuned configs too, with every
//! pipelined load's copies stepped, with and without `EmitOptions::ring_unroll`. Needs
//! libnvrtc (./scripts/test.sh installs it), not a GPU.
use tessera::kernels::{attention::attention, matmul::matmul};
use tessera::model::kernels::prefill::{
    gemm_nn_residual, gemm_nt, gemm_nt_gate_up_silu, gemm_nt_residual, prefill_attention,
    PrefillTiles,
};
use tessera::runtime::cuda::{emit, EmitOptions, DEFAULT_NUM_STAGES};
use tessera::runtime::{nvrtc, ConstVal, KernelDef};

#[test]
fn every_shipped_kernel_compiles_with_nvrtc() {
    if let Err(e) = tessera::runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
    let mut all = tessera::kernels::shipped();
    all.extend(tessera::model::kernels::shipped());
    for k in all {
        let mut variants = vec![(k.constexprs.clone(), k.num_warps)];
        // The same kernel with every integer constexpr made odd (a tile that is not a power
        // of two) and with one warp.
        let odd: Vec<_> = k
            .constexprs
            .iter()
            .map(|(n, v)| {
                (
                    *n,
                    match v {
                        ConstVal::Int(i) => ConstVal::Int((i - 1).max(1)),
                        b => *b,
                    },
                )
            })
            .collect();
        variants.push((odd, 1));
        for (cx, warps) in variants {
            let src = k
                .kernel
                .cuda_source(&cx, warps)
                .unwrap_or_else(|e| panic!("{}: {e}", k.kernel.name()));
            for arch in ["sm_80", "sm_90"] {
                if let Err(e) = nvrtc::compile(&src.code, arch, false) {
                    panic!("{} {cx:?} warps={warps} {arch}:\n{e}", k.kernel.name());
                }
            }
        }
    }
}

/// `ring_unroll`: with `EmitOptions::ring_unroll` (else `KernelDef::cuda_source_staged`'s
/// options, the process's default); `gemm`: the pipelined loop's `dot`s only accumulate, so
/// the option puts it in passes (attention's loop stays as it is).
fn compiles(
    what: &str,
    def: &KernelDef,
    cx: &[(&'static str, ConstVal)],
    (warps, st): (u32, u32),
    (ring_unroll, gemm): (bool, bool),
) {
    let src = if ring_unroll {
        let k = def.specialize(cx).unwrap_or_else(|e| panic!("{what}: {e}"));
        let opts = EmitOptions {
            divisible16: vec![true; k.params.len()],
            num_stages: st,
            ring_unroll: true,
            ..EmitOptions::new(warps)
        };
        emit(&k, &opts).unwrap_or_else(|e| panic!("{what}: {e}"))
    } else {
        def.cuda_source_staged(cx, warps, st)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    };
    assert_eq!(
        src.code.contains("the ring slots are constants"),
        ring_unroll && gemm,
        "{what}: passes of constant ring slots"
    );
    // Every pipelined load of these kernels is affine in its loop counter: its copies are
    // stepped, none keeps the generic path.
    assert!(
        src.code.contains("// software pipelining (num_stages"),
        "{what}: no ring"
    );
    assert!(
        src.code.contains("tsr_cp_async16_at("),
        "{what}:\n{}",
        src.code
    );
    let generic = src
        .code
        .lines()
        .filter(|l| l.contains("tsr_cp_async16(") && !l.contains("void tsr_cp_async16("))
        .count();
    assert_eq!(
        generic, 0,
        "{what}: a copy kept the generic path:\n{}",
        src.code
    );
    for arch in ["sm_80", "sm_90"] {
        if let Err(e) = nvrtc::compile(&src.code, arch, false) {
            panic!("{what} {arch}:\n{e}");
        }
    }
}

/// The `dot` kernels whose loads are pipelined through the cp.async ring, at their tuned
/// configs and stage counts: the matmul example's tuning space, the attention example's
/// configs, and the prefill kernels at the GPU's tiles.
#[test]
fn pipelined_dot_kernels_compile_with_stepped_copies() {
    pipelined_dot_kernels_compile(false);
}

/// The same with `EmitOptions::ring_unroll` (`TESSERA_RING_UNROLL=1`, a candidate): the
/// GEMM loops in passes of constant ring slots, attention's as without it.
#[test]
fn pipelined_dot_kernels_compile_with_ring_unroll() {
    pipelined_dot_kernels_compile(true);
}

fn pipelined_dot_kernels_compile(ring_unroll: bool) {
    if let Err(e) = tessera::runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
    let int = |v: i64| ConstVal::Int(v);
    // examples/matmul.rs: configs().
    for (bm, bn, bk, w, s) in [
        (128, 256, 32, 8, 3),
        (128, 128, 32, 4, 4),
        (128, 128, 64, 4, 3),
        (256, 128, 32, 8, 3),
        (128, 256, 64, 8, 3),
        (256, 128, 64, 8, 3),
    ] {
        let cx = [
            ("BM", int(bm)),
            ("BN", int(bn)),
            ("BK", int(bk)),
            ("GROUP_M", int(8)),
        ];
        compiles(
            &format!("matmul {bm}x{bn}x{bk}"),
            &matmul::KERNEL,
            &cx,
            (w, s),
            (ring_unroll, true),
        );
    }
    // examples/attention.rs: configs(d, causal).
    for d in [64, 128] {
        for causal in [false, true] {
            for (bm, bn, w, s) in [(128, 64, 8, 2), (64, 64, 4, 3), (128, 32, 8, 3)] {
                let cx = [
                    ("BM", int(bm)),
                    ("BN", int(bn)),
                    ("D", int(d)),
                    ("CAUSAL", ConstVal::Bool(causal)),
                ];
                let what = format!("attention {bm}x{bn} d={d} causal={causal}");
                compiles(&what, &attention::KERNEL, &cx, (w, s), (ring_unroll, false));
            }
        }
    }
    // model/src/kernels/prefill.rs at the GPU's tiles (attention where it takes the ring).
    let p = PrefillTiles::gpu();
    let u = |v: usize| ConstVal::Int(v as i64);
    let gemm = [
        ("BM", u(p.gemm_bm)),
        ("BN", u(p.gemm_bn)),
        ("BK", u(p.gemm_bk)),
        ("GROUP_M", u(p.group_m)),
    ];
    for k in [
        &gemm_nt::KERNEL,
        &gemm_nt_residual::KERNEL,
        &gemm_nn_residual::KERNEL,
        &gemm_nt_gate_up_silu::KERNEL,
    ] {
        compiles(
            k.name(),
            k,
            &gemm,
            (p.gemm_warps, p.gemm_stages),
            (ring_unroll, true),
        );
    }
    for d in [128usize, 32] {
        let cx = [("BM", u(p.attn_bm)), ("BN", u(p.attn_bn)), ("D", u(d))];
        let what = format!("prefill_attention D={d}");
        compiles(
            &what,
            &prefill_attention::KERNEL,
            &cx,
            (p.attn_warps, p.attn_stages),
            (ring_unroll, false),
        );
    }
}

/// [`compiles`]' twin for `EmitOptions::wgmma` (`TESSERA_WGMMA=1` on an sm_90 device): the
/// code for sm_90a through ptxas (what PTX alone does not check), no spills; whether some
/// `dot` takes wgmma is `wgmma`. Returns ptxas's registers per thread.
fn compiles_wgmma(
    what: &str,
    def: &KernelDef,
    cx: &[(&'static str, ConstVal)],
    (warps, st): (u32, u32),
    (wgmma, in_flight, ring_unroll): (bool, bool, bool),
) -> u32 {
    let k = def.specialize(cx).unwrap_or_else(|e| panic!("{what}: {e}"));
    let opts = EmitOptions {
        divisible16: vec![true; k.params.len()],
        num_stages: st,
        wgmma: true,
        wgmma_in_flight: in_flight,
        acq_rel_atomics: false,
        vector_atomics: false,
        warp_replica_reductions: false,
        row_values_once: false,
        elide_reuse_syncs: false,
        frag_rows: false,
        fast_exp2: false,
        dep_hook: None,
        ring_unroll,
        ..EmitOptions::new(warps)
    };
    let src = emit(&k, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(src.wgmma, wgmma, "{what}: takes wgmma\n{}", src.code);
    if !wgmma {
        assert!(
            src.code.contains("; not wgmma: "),
            "{what}: the reason\n{}",
            src.code
        );
    }
    let info = nvrtc::ptxas_info(&src.code, "sm_90a").unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(info.spill_bytes, 0, "{what}: spills\n{}", info.log);
    // ptxas's "wgmma.mma_async instructions are serialized due to ..." or "wgmma.wait_group
    // is injected" (an accumulator register touched while in flight: checked by adding one
    // such access) would make the candidate slow, not wrong.
    assert!(
        !info.log.contains("serialized") && !info.log.contains("injected"),
        "{what}:\n{}",
        info.log
    );
    assert_eq!(
        src.code.contains("tsr_wgmma_wait<1>();"),
        wgmma && in_flight,
        "{what}: in flight"
    );
    eprintln!(
        "wgmma {}{}{}: {what} warps {warps} stages {st}: {} registers, no spills",
        if wgmma { "on" } else { "off (mma.sync)" },
        if wgmma && in_flight {
            ", in flight"
        } else {
            ""
        },
        if ring_unroll { ", ring unrolled" } else { "" },
        info.registers
    );
    info.registers
}

/// With `EmitOptions::wgmma` (a candidate, off by default): every config of the matmul
/// example's tuning space takes wgmma (whole warpgroups over M, N up to 256, rows of 64 or
/// 128 bytes) and compiles for sm_90a without spills; the prefill GEMMs (B `[n][k]`,
/// K-major) too where both operands are in the ring; attention keeps mma.sync (Q is
/// hoisted, P comes from registers) and says why. Each GEMM also with its wgmmas in flight
/// (`EmitOptions::wgmma_in_flight`, `TESSERA_WGMMA=2`); the matmul with and without the
/// unrolled ring (the runtime's default since session 15).
#[test]
fn dot_kernels_compile_for_sm90a_with_wgmma() {
    if let Err(e) = tessera::runtime::device::probe_nvrtc() {
        panic!("{e}\n(run the tests with ./scripts/test.sh, which installs it)");
    }
    let int = |v: i64| ConstVal::Int(v);
    for (bm, bn, bk, w, s) in [
        (128, 256, 32, 8, 3),
        (128, 128, 32, 4, 4),
        (128, 128, 64, 4, 3),
        (256, 128, 32, 8, 3),
        (128, 256, 64, 8, 3),
        (256, 128, 64, 8, 3),
    ] {
        let cx = [
            ("BM", int(bm)),
            ("BN", int(bn)),
            ("BK", int(bk)),
            ("GROUP_M", int(8)),
        ];
        let what = format!("matmul {bm}x{bn}x{bk}");
        for (in_flight, unroll) in [(false, false), (true, false), (false, true), (true, true)] {
            compiles_wgmma(
                &what,
                &matmul::KERNEL,
                &cx,
                (w, s),
                (true, in_flight, unroll),
            );
        }
    }
    for (bm, bn, w, s) in [(128, 64, 8, 2), (64, 64, 4, 3), (128, 32, 8, 3)] {
        let cx = [
            ("BM", int(bm)),
            ("BN", int(bn)),
            ("D", int(128)),
            ("CAUSAL", ConstVal::Bool(true)),
        ];
        let what = format!("attention {bm}x{bn} d=128");
        compiles_wgmma(&what, &attention::KERNEL, &cx, (w, s), (false, false, true));
    }
    let p = PrefillTiles::gpu();
    let u = |v: usize| ConstVal::Int(v as i64);
    let gemm = [
        ("BM", u(p.gemm_bm)),
        ("BN", u(p.gemm_bn)),
        ("BK", u(p.gemm_bk)),
        ("GROUP_M", u(p.group_m)),
    ];
    for k in [
        &gemm_nt::KERNEL,
        &gemm_nt_residual::KERNEL,
        &gemm_nn_residual::KERNEL,
    ] {
        for in_flight in [false, true] {
            let st = (p.gemm_warps, p.gemm_stages);
            compiles_wgmma(k.name(), k, &gemm, st, (true, in_flight, true));
        }
    }
}

/// Every shipped kernel (the library's and the decoder's) at its default constexprs: its
/// name, its specialised IR and its warps.
fn shipped_specialised() -> Vec<(&'static str, tessera::ir::Kernel, u32)> {
    let mut all = tessera::kernels::shipped();
    all.extend(tessera::model::kernels::shipped());
    all.into_iter()
        .map(|k| {
            let name = k.kernel.name();
            let spec = k
                .kernel
                .specialize(&k.constexprs)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, spec, k.num_warps)
        })
        .collect()
}

/// `code` (kernel `name`'s) compiles for sm_80 with NVRTC, and for sm_90 through ptxas with no
/// spill.
fn compiles_without_spills(name: &str, code: &str) {
    if let Err(e) = nvrtc::compile(code, "sm_80", false) {
        panic!("{name} sm_80:\n{e}");
    }
    let info = nvrtc::ptxas_info(code, "sm_90").unwrap_or_else(|e| panic!("{name} sm_90: {e}"));
    assert_eq!(info.spill_bytes, 0, "{name}: spills\n{}", info.log);
}

/// Every shipped kernel at its default constexprs and `DEFAULT_NUM_STAGES`, and prefill's
/// FlashAttention at the GPU's tiles and stages (its loop on the cp.async ring).
fn shipped_with_prefill_attention() -> Vec<(&'static str, tessera::ir::Kernel, u32, u32)> {
    let mut all: Vec<_> = shipped_specialised()
        .into_iter()
        .map(|(name, spec, warps)| (name, spec, warps, DEFAULT_NUM_STAGES))
        .collect();
    let p = PrefillTiles::gpu();
    let u = |v: usize| ConstVal::Int(v as i64);
    let cx = [("BM", u(p.attn_bm)), ("BN", u(p.attn_bn)), ("D", u(128))];
    let pa = prefill_attention::KERNEL.specialize(&cx).unwrap();
    all.push(("prefill_attention", pa, p.attn_warps, p.attn_stages));
    all
}

/// The options a shipped kernel's A/B starts from: aligned parameters, and the lowerings on
/// by default whose tests came before (vector atomics, reductions in warps, per-row values
/// once); each test adds the ones it compares.
fn shipped_options(spec: &tessera::ir::Kernel, warps: u32, stages: u32) -> EmitOptions {
    EmitOptions {
        divisible16: vec![true; spec.params.len()],
        num_stages: stages,
        vector_atomics: true,
        warp_replica_reductions: true,
        row_values_once: true,
        ..EmitOptions::new(warps)
    }
}

/// `EmitOptions::acq_rel_atomics` (on by default, `TESSERA_ACQ_REL_ATOMIC=0` off): every shipped kernel with a
/// scalar atomic add (the last-program pattern) gets the one acquire-release atomic in
/// place of the fenced one, and still compiles for sm_80 and sm_90.
#[test]
fn scalar_atomics_compile_as_acq_rel() {
    let mut changed = vec![];
    for (name, spec, warps) in shipped_specialised() {
        let fenced = emit(&spec, &EmitOptions::new(warps)).unwrap().code;
        let opts = EmitOptions {
            acq_rel_atomics: true,
            ..EmitOptions::new(warps)
        };
        let code = emit(&spec, &opts).unwrap().code;
        let fenced_rmws = fenced.matches("{ __threadfence(); ").count();
        let calls = code.matches("= tsr_atom_add_acq_rel(").count();
        assert_eq!(
            calls + code.matches("{ __threadfence(); ").count(),
            fenced_rmws,
            "{name}"
        );
        if calls == 0 {
            assert_eq!(code, fenced, "{name}: nothing to change, nothing changed");
            continue;
        }
        changed.push(name.to_string());
        for arch in ["sm_80", "sm_90"] {
            if let Err(e) = nvrtc::compile(&code, arch, false) {
                panic!("{name} {arch}:\n{e}");
            }
        }
    }
    // Decode attention folds its merge into the split phase with tickets.
    assert_eq!(changed, ["attn_split_merge"]);
}

/// `EmitOptions::vector_atomics` (on by default, `TESSERA_VECTOR_ATOMICS=0` off): the shipped kernels whose f32
/// tile `atomic_add` is contiguous (the decode GEMVs' residual adds, the fused MLP's partial
/// sums) get `tsr_red_add_v4`, every kernel still compiles for sm_80, and for sm_90 through
/// ptxas (which checks the `red.global.add.v4.f32` that PTX text alone does not) without
/// spilling.
#[test]
fn f32_tile_atomics_compile_as_vector_reductions() {
    let mut vectorised = vec![];
    for (name, spec, warps) in shipped_specialised() {
        let opts = EmitOptions {
            divisible16: vec![true; spec.params.len()],
            vector_atomics: true,
            warp_replica_reductions: false,
            row_values_once: false,
            elide_reuse_syncs: false,
            frag_rows: false,
            fast_exp2: false,
            dep_hook: None,
            ..EmitOptions::new(warps)
        };
        let code = emit(&spec, &opts).unwrap().code;
        if !code.contains("tsr_red_add_v4(v") && !code.contains("tsr_red_add_v2(v") {
            continue;
        }
        vectorised.push(name.to_string());
        compiles_without_spills(name, &code);
    }
    vectorised.sort();
    assert_eq!(
        vectorised,
        [
            "attn_head_residual",
            "attn_rope_head_residual",
            "gemv_head_residual",
            "gemv_head_residual_tiles",
            "gemv_residual",
            "gemv_residual_tiles",
            "rmsnorm_mlp_tiles"
        ]
    );
}

/// `EmitOptions::row_values_once` (on by default, `TESSERA_ROW_VALUES=0` off): the shipped kernels
/// that read a per-row value recomputed at each element (the attention's softmax weights
/// against V, the merge's split weights, the fused MLP's activation against down's rows)
/// compute it once per row instead, with no more `expf` calls in the C; every kernel still
/// compiles for sm_80, and for sm_90 through ptxas without spilling. (The same bits: `model/tests/kernels_emulated.rs`.)
#[test]
fn per_row_values_are_computed_once_per_row() {
    let mut changed = vec![];
    for (name, spec, warps) in shipped_specialised() {
        let base = EmitOptions {
            divisible16: vec![true; spec.params.len()],
            vector_atomics: true,
            warp_replica_reductions: true,
            ..EmitOptions::new(warps)
        };
        let before = emit(&spec, &base).unwrap().code;
        let opts = EmitOptions {
            row_values_once: true,
            ..base
        };
        let code = emit(&spec, &opts).unwrap().code;
        if code == before {
            continue;
        }
        changed.push(name.to_string());
        assert!(code.contains("once per row this thread holds"), "{name}");
        let exps = |c: &str| c.matches("expf(").count();
        assert!(exps(&code) <= exps(&before), "{name}: more expf calls");
        compiles_without_spills(name, &code);
    }
    changed.sort();
    assert_eq!(
        changed,
        [
            "attn_head_residual",
            "attn_merge",
            "attn_rope_head_residual",
            "attn_split",
            "attn_split_ahead",
            "attn_split_merge",
            "gemv_head_residual",
            "gemv_head_residual_tiles",
            "rmsnorm_mlp_tiles"
        ]
    );
}

/// `EmitOptions::elide_reuse_syncs` (on by default, `TESSERA_REUSE_SYNC=0` off): in the shipped
/// kernels whose loops rewrite a shared-memory region after an earlier barrier of the same
/// iteration, that region's own barrier goes (never one more anywhere), and each still
/// compiles for sm_80, and for sm_90 through ptxas without spilling. (The same bits on the
/// emulated CTAs: `model/tests/kernels_emulated.rs`, `tests/dot_kernels.rs`.) With the
/// shipped `frag_rows` FlashAttention's loops rewrite no region (their softmax stays in
/// registers), so only the decode kernels change.
#[test]
fn reuse_barriers_after_an_earlier_barrier_are_elided() {
    let mut changed = vec![];
    for (name, spec, warps, stages) in shipped_with_prefill_attention() {
        let base = EmitOptions {
            frag_rows: true,
            ..shipped_options(&spec, warps, stages)
        };
        let before = emit(&spec, &base).unwrap().code;
        let opts = EmitOptions {
            elide_reuse_syncs: true,
            ..base
        };
        let code = emit(&spec, &opts).unwrap().code;
        if code == before {
            continue;
        }
        changed.push(name.to_string());
        let syncs = |c: &str| c.matches("__syncthreads()").count();
        let elided = code
            .matches("// no barrier: every thread passed one")
            .count();
        assert!(elided > 0, "{name}");
        assert_eq!(syncs(&code) + elided, syncs(&before), "{name}");
        compiles_without_spills(name, &code);
    }
    changed.sort();
    assert_eq!(
        changed,
        [
            "argmax_merge",
            "attn_head_residual",
            "attn_rope_head_residual",
            "attn_split",
            "attn_split_ahead",
            "attn_split_merge",
            "rmsnorm_gate_up_silu_tiles",
            "rmsnorm_mlp_tiles"
        ]
    );
}

/// `EmitOptions::frag_rows` (`TESSERA_FRAG_ROWS=1`; off until measured): only the kernels
/// with FlashAttention's chained dots change, their key loop keeps the softmax in the
/// fragment's registers (no shared memory but the cp.async ring; one barrier a key block,
/// the ring's) and feeds P to the second dot from registers; each compiles for sm_80, and
/// for sm_90 through ptxas without spilling. (The same outputs on the emulated CTAs, within
/// a bf16 ulp: `tests/dot_kernels.rs`, `model/tests/kernels_emulated.rs`.)
#[test]
fn flash_attention_softmax_stays_in_registers_with_frag_rows() {
    let mut all = shipped_with_prefill_attention();
    // The attention example's first tile: 128 x 64 on 8 warps.
    let cx = [
        ("BM", ConstVal::Int(128)),
        ("BN", ConstVal::Int(64)),
        ("D", ConstVal::Int(128)),
        ("CAUSAL", ConstVal::Bool(true)),
    ];
    let at = attention::KERNEL.specialize(&cx).unwrap();
    all.push(("attention 128x64", at, 8, 2));
    let mut changed = vec![];
    for (name, spec, warps, stages) in all {
        let base = EmitOptions {
            elide_reuse_syncs: true,
            ..shipped_options(&spec, warps, stages)
        };
        let before = emit(&spec, &base).unwrap().code;
        let opts = EmitOptions {
            frag_rows: true,
            ..base
        };
        let code = emit(&spec, &opts).unwrap().code;
        if code == before {
            continue;
        }
        changed.push(name.to_string());
        let syncs = |c: &str| c.matches("__syncthreads()").count();
        assert!(syncs(&code) < syncs(&before), "{name}: fewer barriers");
        assert!(
            code.contains("quad shuffles"),
            "{name}: rows reduced in the quads"
        );
        assert!(
            code.contains("// A from registers"),
            "{name}: P from registers"
        );
        // The loop body's only shared memory is the ring's (and Q's tile before it).
        assert!(!code.contains("_smem["), "{name}: nothing staged\n{code}");
        assert!(
            !code.contains("_res["),
            "{name}: no reduction result in shared memory"
        );
        compiles_without_spills(name, &code);
        // With `EmitOptions::fast_exp2` too: ptxas takes its `ex2.approx.ftz`.
        let fast = EmitOptions {
            fast_exp2: true,
            ..opts.clone()
        };
        let code = emit(&spec, &fast).unwrap().code;
        assert!(code.contains("= tsr_ex2("), "{name}: exp2 as ex2.approx");
        compiles_without_spills(name, &code);
    }
    changed.sort();
    assert_eq!(
        changed,
        ["attention", "attention 128x64", "prefill_attention"]
    );
}
