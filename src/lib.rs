//! tessera: a Triton-style tile DSL embedded in Rust proc-macros, and the compiler that
//! stitches its kernels into one persistent GPU kernel.
//!
//! - [`kernel`]: tile-level Rust → tile IR (checked at compile time) → interpreter or CUDA C.
//! - [`megakernel`]: a sequence of kernel calls → one persistent launch, synchronised only
//!   where data flows.
//! - [`runtime`]: devices, buffers, launch, autotune, NVRTC, the megakernel scheduler.
//! - [`kernels`]: the kernels tessera ships, each with a plain-Rust reference; [`toy`]: the
//!   toy megakernel; [`check`]: what examples and tests share.
//! - [`model`]: Qwen3 from Hugging Face files, and its three engines.
//! - [`cli`]: the binary's commands (`generate`, `bench`, `tune`, `explain`); [`bench`]:
//!   decode speed against the bandwidth floor and over a grid of knobs; [`serve`]: the
//!   OpenAI-compatible endpoint.
//!
//! ARCHITECTURE.md at the repository root maps where each stage lives.

// Lets the `#[kernel]` macro name this crate as `::tessera` from inside it too.
extern crate self as tessera;

pub mod bench;
pub mod check;
pub mod cli;
pub mod kernels;
pub mod serve;
pub mod toy;

pub use dsl_ir as ir;
pub use dsl_macros::{kernel, megakernel, tile_fn};
pub use dsl_runtime as runtime;
pub use model;

/// `use tessera::prelude::*;` in a file of kernels.
pub mod prelude {
    pub use dsl_runtime::prelude::*;
}
