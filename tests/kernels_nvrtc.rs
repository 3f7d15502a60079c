//! Every shipped kernel's CUDA C (the library's and the Qwen3 decoder's) compiles with NVRTC for sm_80 and sm_90, at the default
//! constexprs and at odd ones. Needs libnvrtc (./scripts/test.sh installs it), not a GPU.
use tessera::runtime::{nvrtc, ConstVal};

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
