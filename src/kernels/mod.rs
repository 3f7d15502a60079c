//! The kernels tessera ships, each a `#[kernel]` beside a plain-Rust reference of the same
//! math (as llm.c keeps a CPU reference beside every GPU kernel). The examples drive them;
//! `tessera explain` prints their CUDA C.
pub mod add_rmsnorm;
pub mod attention;
pub mod gemv;
pub mod matmul;
pub mod rmsnorm;
pub mod softmax;
pub mod vector_add;

use crate::runtime::{ConstVal, Shipped};

/// Every kernel the library ships, for `tessera explain --list`.
pub fn shipped() -> Vec<Shipped> {
    let int = ConstVal::Int;
    vec![
        Shipped {
            kernel: &vector_add::vector_add::KERNEL,
            constexprs: vec![("BLOCK", int(1024))],
            num_warps: 4,
            about: "z = x + y (f32)",
        },
        Shipped {
            kernel: &rmsnorm::rmsnorm::KERNEL,
            constexprs: vec![("BLOCK", int(1024))],
            num_warps: 4,
            about: "y = x / rms(x) * w, any row length (two streaming passes)",
        },
        Shipped {
            kernel: &softmax::softmax::KERNEL,
            constexprs: vec![("BLOCK", int(1024))],
            num_warps: 4,
            about: "row softmax, one tile per row",
        },
        Shipped {
            kernel: &gemv::gemv::KERNEL,
            constexprs: vec![("BM", int(8)), ("BK", int(512))],
            num_warps: 4,
            about: "y = W·x, bf16 W [M,K], f32 accumulation (decode's matmul)",
        },
        Shipped {
            kernel: &add_rmsnorm::add_rmsnorm::KERNEL,
            constexprs: vec![("BLOCK", int(1024))],
            num_warps: 4,
            about: "h = x + residual; residual = h; y = rmsnorm(h) * w",
        },
        Shipped {
            kernel: &matmul::matmul::KERNEL,
            constexprs: vec![
                ("BM", int(64)),
                ("BN", int(64)),
                ("BK", int(32)),
                ("GROUP_M", int(8)),
            ],
            num_warps: 4,
            about: "C = silu(A·B + bias) as bf16: dot on tensor cores, cp.async pipelining, grouped order",
        },
        Shipped {
            kernel: &attention::attention::KERNEL,
            constexprs: vec![
                ("BM", int(64)),
                ("BN", int(64)),
                ("D", int(64)),
                ("CAUSAL", ConstVal::Bool(true)),
            ],
            num_warps: 4,
            about: "attention forward (FlashAttention-2 style online softmax), causal or not",
        },
    ]
}
