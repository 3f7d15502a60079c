//! The runtime under `#[kernel]` and `#[megakernel]`: tile interpreter, CUDA C emitter,
//! NVRTC compile cache, typed launch, bounds check and autotune, and the megakernel
//! compiler (`mega`: resolve, schedule, interpreter, persistent-kernel generator, launch).
//!
//! Data flows one way: the macro's IR → [`ir::Kernel::specialize`] → [`interp`] (the spec)
//! or [`cuda::emit`] → [`nvrtc`] → launch ([`KernelDef::launch`]).
pub mod autotune;
pub mod bounds;
pub mod cuda;
pub mod device;
pub mod element;
pub mod error;
pub mod interp;
pub mod kernel_def;
pub mod launch_args;
pub mod mega;
pub mod nvrtc;
pub mod readback;

pub use autotune::Config;
pub use device::{AsPtr, Buffer, BufferView, Device, PtrArg, INTERPRET_ENV};
pub use dsl_ir as ir;
pub use dsl_ir::ConstVal;
pub use element::{bf16, f16, Element};
pub use error::{Error, Result};
pub use kernel_def::{cdiv, Binding, Constexprs, Grid, IntoGrid, KernelDef, Launch, Shipped, Tune};
pub use launch_args::{ptr, Arg, TypedPtr};
pub use readback::Readback;

/// A kernel parameter type: a pointer to elements of `T` in device memory. Only the
/// `#[kernel]` macro reads it; it never exists at run time.
pub struct Ptr<T>(std::marker::PhantomData<T>);

/// What a file of kernels needs: `use dsl_runtime::prelude::*;`.
pub mod prelude {
    pub use crate::{bf16, cdiv, f16, Buffer, Config, Device, Launch, Ptr, Tune};
    pub use dsl_macros::{kernel, megakernel, tile_fn};
}

/// Where a `#[tile_fn]`'s expansion hands a kernel and its helpers' sources (not for direct
/// use).
#[doc(hidden)]
pub use dsl_macros::__kernel_with_helpers;
