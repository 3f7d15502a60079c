//! The runtime under `#[kernel]`: tile interpreter, CUDA C emitter, NVRTC compile cache,
//! typed launch and autotune.
pub mod api;
pub mod cuda;
pub mod interp;

pub use dsl_ir as ir;
pub use api::*;
