//! `TESSERA_WGMMA=1` turns on `EmitOptions::wgmma` for the kernels a process emits for an
//! sm_90 device (read once: one test in its own binary, the variable set before anything
//! reads it); the source then says it is for sm_90a.
use tessera::kernels::matmul::matmul;
use tessera::runtime::kernel_def::WGMMA_ENV;
use tessera::runtime::ConstVal;

#[test]
fn tessera_wgmma_turns_the_option_on() {
    // SAFETY: the only test of this binary, before anything reads the environment.
    std::env::set_var(WGMMA_ENV, "1");
    let cx = [
        ("BM", ConstVal::Int(128)),
        ("BN", ConstVal::Int(256)),
        ("BK", ConstVal::Int(64)),
        ("GROUP_M", ConstVal::Int(8)),
    ];
    let src = matmul::KERNEL.cuda_source_staged(&cx, 8, 3).unwrap();
    assert!(
        src.code
            .contains("// dot: tensor cores: wgmma m64n256k16 bf16, 2 warpgroups over M"),
        "{}",
        src.code
    );
    assert!(src.code.contains("__align__(1024) unsigned char smem[]"));
    assert!(src.wgmma);
    assert_eq!(src.arch("sm_90"), "sm_90a");
}
