//! tessera: a Triton-style tile DSL embedded in Rust proc-macros, and the compiler that
//! stitches its kernels into one persistent GPU kernel.
//!
//! This facade re-exports the DSL (`#[kernel]`, the tile primitives' runtime) and the model.
pub use dsl_ir as ir;
pub use dsl_runtime as runtime;
/// `use tessera::prelude::*;`: `#[kernel]`, `Ptr`, `bf16`, `f16`.
pub use dsl_runtime::prelude;
pub use model;
