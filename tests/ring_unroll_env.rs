//! `TESSERA_RING_UNROLL=1` turns on `EmitOptions::ring_unroll` for the kernels a process
//! emits (read once: one test in its own binary, the variable set before anything reads it).
use tessera::kernels::matmul::matmul;
use tessera::runtime::kernel_def::RING_UNROLL_ENV;
use tessera::runtime::ConstVal;

#[test]
fn tessera_ring_unroll_turns_the_option_on() {
    // SAFETY: the only test of this binary, before anything reads the environment.
    std::env::set_var(RING_UNROLL_ENV, "1");
    let cx = [
        ("BM", ConstVal::Int(128)),
        ("BN", ConstVal::Int(128)),
        ("BK", ConstVal::Int(32)),
        ("GROUP_M", ConstVal::Int(8)),
    ];
    let code = matmul::KERNEL.cuda_source_staged(&cx, 4, 4).unwrap().code;
    assert!(code.contains("the ring slots are constants"), "{code}");
    assert!(!code.contains("ring_it"), "{code}");
}
