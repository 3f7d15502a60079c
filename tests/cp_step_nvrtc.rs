//! `TESSERA_CP_STEP=1` (`EmitOptions::cp_step`, off by default): the `dot` kernels whose
//! loads are pipelined through the cp.async ring compile with NVRTC for sm_80 and sm_90
//! with the option on, and their copies do advance by a fixed step: the matmul example's
//! tuning space, the attention example's configs, and the prefill kernels at the GPU's
//! tiles. One test in its own binary: the option is read from the environment once per
//! process. Needs libnvrtc (./scripts/test.sh installs it), not a GPU.
use tessera::kernels::{attention::attention, matmul::matmul};
use tessera::model::kernels::prefill::{
    gemm_nt, gemm_nt_gate_up_silu, gemm_nt_residual, prefill_attention, PrefillTiles,
};
use tessera::runtime::{nvrtc, ConstVal, KernelDef};

fn compiles(what: &str, def: &KernelDef, cx: &[(&'static str, ConstVal)], warps: u32, st: u32) {
    let src = def
        .cuda_source_staged(cx, warps, st)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    // Every pipelined load of these kernels is affine in its loop counter.
    assert!(src.code.contains("cp.async"), "{what}: no ring");
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

#[test]
fn cp_step_dot_kernels_compile_with_nvrtc() {
    // SAFETY: the only test of this binary, before anything reads the environment.
    std::env::set_var("TESSERA_CP_STEP", "1");
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
            w,
            s,
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
                compiles(&what, &attention::KERNEL, &cx, w, s);
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
        &gemm_nt_gate_up_silu::KERNEL,
    ] {
        compiles(k.name(), k, &gemm, p.gemm_warps, p.gemm_stages);
    }
    for d in [128usize, 32] {
        let cx = [("BM", u(p.attn_bm)), ("BN", u(p.attn_bn)), ("D", u(d))];
        let what = format!("prefill_attention D={d}");
        compiles(
            &what,
            &prefill_attention::KERNEL,
            &cx,
            p.attn_warps,
            p.attn_stages,
        );
    }
}
