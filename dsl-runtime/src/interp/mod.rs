//! The tile interpreter: the executable specification of the DSL.
//!
//! Runs a specialised kernel on host memory, program by program. Every value is a dense
//! host tile; masked-off lanes are never touched; an unmasked access outside its buffer is
//! an error naming the kernel and the source expression (on a GPU it would corrupt memory).
use dsl_ir::{DType, Kernel};

/// One device buffer as the interpreter sees it: raw little-endian elements of one dtype.
#[derive(Clone, Debug, PartialEq)]
pub struct HostMem {
    pub dtype: DType,
    pub bytes: Vec<u8>,
}

/// A launch argument, in the order of the kernel's run-time parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InterpArg {
    /// A pointer into `mem[buf]`, `offset` elements in, with `len` elements reachable from it.
    Ptr {
        buf: usize,
        offset: usize,
        len: usize,
    },
    I32(i32),
    F32(f32),
}

#[derive(Clone, Debug, Default)]
pub struct InterpOptions {}

/// Runs every program of the grid, in row-major program-id order.
pub fn run(
    kernel: &Kernel,
    grid: [u32; 3],
    args: &[InterpArg],
    mem: &mut [HostMem],
    opts: &InterpOptions,
) -> Result<(), String> {
    let _ = (kernel, grid, args, mem, opts);
    Err("the interpreter is not written yet".into())
}
