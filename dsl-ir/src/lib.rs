//! The tile IR of tessera: what a `#[kernel]` becomes.
//!
//! The macro builds it at compile time through [`Builder`] (which applies the typing rules,
//! so misuse is a compile error), serialises it into the user's crate, and the runtime
//! specialises it with constexpr values ([`Kernel::specialize`]) before interpreting it or
//! emitting CUDA C. Data flows one way: builder → kernel → specialised kernel → backends.
pub mod analysis;
pub mod builder;
pub mod error;
pub mod ir;
pub mod print;
pub mod spec;
pub mod types;

pub use analysis::Effects;
pub use builder::{broadcast_shapes, promote, Builder};
pub use error::{BResult, BuildError, Operand};
pub use ir::*;
pub use types::*;
