//! Megakernels: a sequence of kernel calls (with loops) compiled into ONE persistent launch,
//! synchronised only where data flows.
//!
//! Data flows one way: [`program::Program`] (what `#[megakernel]` builds) →
//! [`resolve::resolve`] (constexprs bound, every call checked and specialised) →
//! [`schedule::schedule`] (hazards → counter waits and grid barriers, L2 prefetch; its
//! window-disjointness prover is `prove.rs`) →
//! [`interp::run`] (the CPU oracle, sequential or adversarial) or [`cuda::generate`] →
//! NVRTC → [`MegaDef::launch`] (cooperative, occupancy-sized, watchdog).
pub mod bodies;
pub mod c_expr;
pub mod cuda;
pub mod graph;
pub mod interp;
pub mod launch;
pub mod profile;
pub mod program;
mod prove;
pub mod resolve;
pub mod schedule;

pub use interp::{InterpMode, Policy};
pub use launch::{MegaDef, MegaOptions, Plan};
pub use profile::Profile;
pub use program::{ArgExpr, Call, Expr, Hints, If, Item, Loop, MParam, Op, Program};
pub use schedule::{Carried, Hazard, HazardKind, Schedule, Sync, SyncKind};

/// What the code `#[megakernel]` generates uses: never-called functions that let rustc
/// check each call against the kernel's typed `launch` (arity, pointer dtypes, scalar
/// kinds) at compile time, at the user's tokens.
#[doc(hidden)]
pub mod typecheck {
    use crate::{Buffer, Element};

    /// A pointer argument of element type `T`.
    pub fn ptr<T: Element>() -> &'static Buffer<T> {
        unreachable!("only type-checked, never called")
    }

    /// An integer expression: any integer parameter type (i32 run-time scalars, usize /
    /// i32 / u32 constexprs) accepts it; an f32 or pointer parameter does not.
    pub fn int<T: IntegerArgument>() -> T {
        unreachable!("only type-checked, never called")
    }

    /// Implemented by the integer types a kernel parameter may have.
    pub trait IntegerArgument {}
    impl IntegerArgument for i32 {}
    impl IntegerArgument for u32 {}
    impl IntegerArgument for usize {}
    impl IntegerArgument for i64 {}
    impl IntegerArgument for u64 {}
}
