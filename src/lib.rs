//! tessera: a Triton-style tile DSL embedded in Rust proc-macros, and the compiler that
//! stitches its kernels into one persistent GPU kernel.
//!
//! - [`kernel`]: tile-level Rust → tile IR (checked at compile time) → interpreter or CUDA C.
//! - [`runtime`]: devices, buffers, launch, autotune, NVRTC.
//! - [`kernels`]: the kernels tessera ships, each with a plain-Rust reference.
//! - [`model`]: Qwen3 from Hugging Face files.

// Lets the `#[kernel]` macro name this crate as `::tessera` from inside it too.
extern crate self as tessera;

pub mod check;
pub mod cli;
pub mod kernels;
pub mod serve;
pub mod toy;

pub use dsl_ir as ir;
pub use dsl_macros::{kernel, megakernel};
pub use dsl_runtime as runtime;
pub use model;

/// `use tessera::prelude::*;` in a file of kernels.
pub mod prelude {
    pub use dsl_runtime::prelude::*;
}
