//! The CUDA C emitter: every kernel here is built by hand with `dsl_ir::Builder` (the way
//! the macro builds it), emitted, and compiled by NVRTC for sm_80 and sm_90. No GPU is
//! needed: NVRTC runs on the CPU. Golden snippets check the fast paths are taken.
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};
use dsl_ir::*;
use dsl_runtime::cuda::{emit, CudaSource, EmitOptions};

#[path = "emit_common/mod.rs"]
mod common;
use common::*;

// ---- compiling ---------------------------------------------------------------------------

fn require_nvrtc() {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        panic!(
            "libnvrtc could not be loaded, so the generated CUDA cannot be checked.\n\
             Install it with `pip install nvidia-cuda-nvrtc` (or a CUDA toolkit) and put its lib \
             directory on LD_LIBRARY_PATH, e.g.\n  export LD_LIBRARY_PATH=$(python3 -c 'import nvidia, os; \
             print(os.path.dirname(nvidia.__path__[0]))')/nvidia/cu13/lib:$LD_LIBRARY_PATH"
        );
    }
}

/// Compiles for sm_80 and sm_90; on failure shows the log and the numbered source lines
/// around each error.
fn compile(src: &CudaSource) {
    require_nvrtc();
    for arch in ["sm_80", "sm_90"] {
        let opts = CompileOptions {
            arch: Some(arch),
            ..Default::default()
        };
        match compile_ptx_with_opts(&src.code, opts) {
            Ok(_) => {}
            Err(CompileError::CompileError { log, .. }) => {
                let log = log.to_string_lossy().to_string();
                let lines: Vec<&str> = src.code.lines().collect();
                let mut ctx = String::new();
                for l in log.lines() {
                    // "default_program(123): error: ..."
                    if let Some(n) = l
                        .split('(')
                        .nth(1)
                        .and_then(|r| r.split(')').next())
                        .and_then(|n| n.parse::<usize>().ok())
                    {
                        ctx.push_str(&format!("--- around line {n}: {l}\n"));
                        #[allow(clippy::needless_range_loop)]
                        for i in n.saturating_sub(4)..(n + 3).min(lines.len()) {
                            ctx.push_str(&format!(
                                "{:5}{} {}\n",
                                i + 1,
                                if i + 1 == n { ">" } else { " " },
                                lines[i]
                            ));
                        }
                    }
                }
                panic!("NVRTC ({arch}) rejected `{}`:\n{log}\n{ctx}", src.entry);
            }
            Err(e) => panic!("NVRTC ({arch}) failed on `{}`: {e:?}", src.entry),
        }
    }
}

fn emit_ok(k: &Kernel, warps: u32, div16: Vec<bool>) -> CudaSource {
    let opts = EmitOptions {
        divisible16: div16,
        num_stages: 1,
        ..EmitOptions::new(warps)
    };
    let src = emit(k, &opts).unwrap_or_else(|e| panic!("emit failed: {e}\n{}", k.to_text()));
    assert_eq!(src.block_threads, 32 * warps);
    src
}

fn check(k: &Kernel, warps: u32, div16: Vec<bool>) -> CudaSource {
    let src = emit_ok(k, warps, div16);
    compile(&src);
    src
}

// ---- tests -------------------------------------------------------------------------------

#[test]
fn vector_add_compiles_with_vector_paths() {
    for d in [DType::F32, DType::BF16, DType::F16, DType::I32] {
        for (block, warps) in [(1024, 4), (1000, 4), (4099, 8), (7, 1), (1, 1)] {
            let k = vector_add(d).finish(&[("BLOCK", block)]);
            let src = check(&k, warps, vec![true; 4]);
            if block % 8 == 0 {
                assert!(
                    src.code.contains("*(const uint4*)"),
                    "16-byte loads expected:\n{}",
                    src.code
                );
                assert!(
                    src.code.contains("*(uint4*)"),
                    "16-byte stores expected:\n{}",
                    src.code
                );
            }
        }
    }
    // Without alignment facts, only the scalar path.
    let k = vector_add(DType::BF16).finish(&[("BLOCK", 1024)]);
    let src = check(&k, 4, vec![]);
    assert!(!src.code.contains("*(const uint4*)"), "{}", src.code);
}

#[test]
fn rmsnorm_compiles_and_reads_well() {
    for (block, warps) in [
        (1024, 4),
        (1000, 4),
        (4099, 8),
        (7, 1),
        (1, 1),
        (8192, 8),
        (64, 1),
    ] {
        let k = rmsnorm().finish(&[("BLOCK", block)]);
        let src = check(&k, warps, vec![true, true, true, true, false]);
        if block == 1024 && warps == 4 {
            println!("{}", src.code);
            let c = &src.code;
            assert!(c.contains("*(const uint4*)"), "vector load:\n{c}");
            assert!(c.contains("__shfl_xor_sync"), "warp shuffle:\n{c}");
            assert!(
                c.contains("// line 7: let inv = rsqrt(sum(x * x, 0) / n_cols as f32 + eps);"),
                "{c}"
            );
            for sec in ["prologue", "load", "math", "epilogue"] {
                assert!(
                    c.contains(&format!("// ---- {sec} ----")),
                    "section {sec}:\n{c}"
                );
            }
            assert!(
                c.contains("float x_1[8];") || c.contains("float x_1[8]"),
                "source names:\n{c}"
            );
            assert!(c.contains("__launch_bounds__(128)"));
            assert!(!c.contains("#include"));
            assert_eq!(src.entry, "rmsnorm");
            // Stable output.
            assert_eq!(
                emit_ok(&k, 4, vec![true, true, true, true, false]).code,
                src.code
            );
        }
    }
}

#[test]
fn two_pass_rmsnorm_compiles() {
    for (block, warps) in [(1024, 4), (1000, 8), (7, 1)] {
        let k = rmsnorm_two_pass().finish(&[("BLOCK", block)]);
        let src = check(&k, warps, vec![true, true, true, true, false]);
        assert!(
            src.code.contains("for (int off = 0; off < d; off += "),
            "{}",
            src.code
        );
        // Each iteration stores its own columns (`off + arange(0, BLOCK)`, step BLOCK): the
        // stores of earlier iterations need no barrier.
        assert!(!src.code.contains("order global memory"), "{}", src.code);
    }
}

#[test]
fn residual_add_rmsnorm_compiles() {
    for (block, warps) in [(1024, 4), (4099, 8), (1, 1)] {
        let k = add_rmsnorm().finish(&[("BLOCK", block)]);
        check(&k, warps, vec![true; 6]);
    }
}

#[test]
fn softmax_compiles() {
    for (block, warps) in [(1024, 4), (1000, 4), (7, 1), (4099, 8)] {
        let k = softmax().finish(&[("BLOCK", block)]);
        check(&k, warps, vec![true, true, true]);
    }
}

#[test]
fn gemv_compiles_with_vector_weight_loads() {
    for wd in [DType::BF16, DType::F32] {
        for (bm, bk, warps) in [
            (16, 256, 4),
            (8, 512, 4),
            (4, 1024, 8),
            (32, 64, 4),
            (3, 100, 1),
            (1, 8, 1),
        ] {
            let k = gemv(wd).finish(&[("BM", bm), ("BK", bk)]);
            let src = check(&k, warps, vec![true, true, true, true, true]);
            if bk % 64 == 0 {
                assert!(
                    src.code.contains("*(const uint4*)"),
                    "W by 16-byte loads:\n{}",
                    src.code
                );
            }
            if (bm, bk, warps, wd) == (16, 256, 4, DType::BF16) {
                println!("{}", src.code);
            }
        }
    }
}

#[test]
fn argmax_compiles() {
    for op in [
        ReduceOp::Argmax,
        ReduceOp::Argmin,
        ReduceOp::Max,
        ReduceOp::Min,
    ] {
        for (block, warps) in [(1024, 4), (4099, 8), (7, 1), (1, 1)] {
            let k = argmax(op).finish(&[("BLOCK", block)]);
            let src = check(&k, warps, vec![true, true, false]);
            if op == ReduceOp::Argmax {
                assert!(src.code.contains("tsr_argmax_step"), "{}", src.code);
                assert!(
                    src.code.contains("if (tid == 0)"),
                    "scalar store once per program:\n{}",
                    src.code
                );
            }
        }
    }
}

#[test]
fn atomics_compile() {
    for (block, warps) in [(1024, 4), (7, 1)] {
        let k = atomics().finish(&[("BLOCK", block)]);
        let src = check(&k, warps, vec![true; 6]);
        assert!(
            src.code.contains("atomicAdd(")
                && src.code.contains("tsr_atomic_max_f32(")
                && src.code.contains("atomicMin(")
        );
    }
}

#[test]
fn casts_and_where_compile() {
    for (block, warps) in [(256, 2), (7, 1), (1000, 4)] {
        let k = casts_and_ops().finish(&[("BLOCK", block)]);
        let src = check(&k, warps, vec![true; 7]);
        assert!(
            src.code.contains("tsr_rbf16(")
                && src.code.contains("tsr_f2i(")
                && src.code.contains("__fmul_rn(")
        );
    }
}

#[test]
fn two_d_reductions_and_broadcasts_compile() {
    for (bm, bn, warps) in [
        (4, 128, 4),
        (16, 32, 4),
        (3, 1000, 8),
        (33, 7, 2),
        (1, 1, 1),
        (64, 256, 8),
    ] {
        let k = softmax_2d().finish(&[("BM", bm), ("BN", bn)]);
        check(&k, warps, vec![true; 5]);
    }
}

#[test]
fn broadcast_and_if_compile() {
    for (bm, bn, warps) in [(4, 256, 4), (3, 7, 1)] {
        let k = broadcast_if().finish(&[("BM", bm), ("BN", bn)]);
        let src = check(&k, warps, vec![true; 3]);
        assert!(src.code.contains("} else {"), "{}", src.code);
    }
}

#[test]
fn unsupported_is_an_error_not_a_panic() {
    // A tile far too large for the registers of one warp.
    let k = vector_add(DType::F32).finish(&[("BLOCK", 1 << 18)]);
    let err = emit(&k, &EmitOptions::new(1)).unwrap_err();
    assert!(
        err.contains("vector_add") && err.contains("line 4"),
        "{err}"
    );
    let k = vector_add(DType::F32).finish(&[("BLOCK", 128)]);
    assert!(emit(&k, &EmitOptions::new(3))
        .unwrap_err()
        .contains("num_warps"));
}
