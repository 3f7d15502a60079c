//! The tile interpreter: the executable specification of the DSL.
//!
//! Runs a specialised kernel ([`dsl_ir::Kernel::specialize`] done: every dimension is a
//! literal, no `Op::Const` is left) on host memory, program by program. Every value is a
//! dense host tile; masked-off lanes are never touched; an unmasked access outside its
//! buffer is an error naming the kernel, the source line and the element (on a GPU it would
//! corrupt memory). The CUDA backend must compute what this module computes; where the GPU
//! may differ, it says so below.
//!
//! # Programs
//! - [`run`] runs every program of the grid, one at a time, in row-major program-id order
//!   with axis 0 fastest (`(0,0,0), (1,0,0), …, (0,1,0), …`), unless
//!   [`InterpOptions::order`] asks for another order (reversed, or a seeded shuffle, to
//!   expose programs that depend on one another). [`run_program`] runs one program; the
//!   megakernel interpreter calls it in adversarial orders. A grid with a zero dimension is
//!   an error (CUDA refuses such a launch).
//! - `program_id(a)` / `num_programs(a)` are `pid[a]` / `grid[a]` as i32.
//!
//! # Values
//! Scalars and dense row-major tiles of rank 1 or 2 ([`Tile`], [`Data`]). Floats of every
//! dtype are held as f32 values exactly representable in their dtype. Pointers are element
//! offsets (i64, so pointer arithmetic never wraps) from the start of the pointer
//! argument's visible range.
//!
//! # Arithmetic
//! - Floats: every op computes in f32 and rounds the result to the value's dtype (bf16,
//!   f16: to nearest, ties to even) after EVERY op. `%` on floats is C's `fmodf`.
//!   `minimum`/`maximum` ignore a NaN operand (`fminf`/`fmaxf`); which of ±0 they return
//!   is unspecified.
//! - i32: `+ - *` wrap; `/` and `%` truncate toward zero (`%` has the dividend's sign);
//!   division or remainder by zero yields 0 (on the GPU the result is unspecified);
//!   `i32::MIN / -1` wraps to `i32::MIN` and `i32::MIN % -1` is 0. Shifts mask the amount
//!   to 0..31; `>>` is arithmetic (sign-extending).
//! - Comparisons give bool (any comparison with NaN is false, `!=` true). `& | ^` are
//!   logical on bool and bitwise on i32; `not` likewise. `neg`/`abs` on i32 wrap
//!   (`abs(i32::MIN) == i32::MIN`).
//! - Unary functions compute in f32 with Rust's `f32` methods (`exp`, `exp2`, `ln`, `log2`,
//!   `sqrt`, `sin`, `cos`, `tanh`), `rsqrt(x) = 1 / sqrt(x)`, `sigmoid(x) = 1 / (1 +
//!   exp(-x))`, `silu(x) = x * sigmoid(x)` (sigmoid not rounded in between), then round
//!   to the dtype. `+ - * / sqrt` are correctly rounded and match the GPU bit for bit; the
//!   transcendentals may differ by an ulp or two from CUDA's `expf` & co. in f32 (after
//!   rounding to bf16 they almost always agree).
//! - Casts: float → float rounds to nearest even; float → i32 is Rust's `as` (truncates
//!   toward zero, saturates, NaN → 0); i32 → float rounds to f32 first, then to the dtype
//!   (as the GPU does; for bf16/f16 a value can round twice);
//!   bool → number is 0/1; number → bool is `!= 0` (NaN → true).
//! - Literals (`Lit::Float`, an f64) round straight to the value's dtype.
//!
//! # Shapes
//! `broadcast` repeats a scalar to the result shape, or stretches the size-1 dims of a tile
//! of the same rank; `expand_dims` inserts a size-1 axis; `where_` is elementwise;
//! `arange(s, e)` is the i32 tile `s..e`.
//!
//! # Memory
//! - A pointer argument ([`InterpArg::Ptr`]) sees `len` elements of `mem[buf]` starting at
//!   element `offset`. Buffers hold little-endian elements of their dtype.
//! - Load: every lane whose mask is true (every lane, without a mask) reads element `off`
//!   of the pointer's range; `off` outside `[0, len)` is an error. Masked-off lanes get
//!   `other` (0 / false without one) and touch nothing.
//! - Store: the same bounds rule; all lanes are checked before any is written, then lanes
//!   are written in row-major order, so a later lane overwrites an earlier one at the same
//!   address (on a GPU, which of them wins is unspecified).
//! - Atomics (`add`, `max`, `min`) apply lane by lane in row-major order: f32 add is a
//!   sequential f32 sum (the GPU's order differs, so f32 results may differ in the last
//!   bits), i32 add wraps, f32 max/min ignore NaN. A scalar atomic returns the value it
//!   replaced (0 when masked off); programs run one at a time, so its GPU ordering
//!   (acquire and release around the program's other accesses) holds trivially.
//! - Buffers of every dtype can be loaded and stored: f32/bf16/f16 (IEEE little-endian),
//!   i32, and bool (one byte, nonzero reads as true, stores write 0/1).
//! - An out-of-bounds error names the first offending lane in row-major order.
//! - Pointer arguments whose buffer dtype differs from the parameter's pointee dtype, whose
//!   range does not fit in the buffer, or whose buffer does not exist are rejected before
//!   any program runs; so are argument lists that do not match
//!   [`dsl_ir::Kernel::runtime_params`] in count or kind.
//!
//! # Reductions
//! Along any axis of a 1-D or 2-D tile (a 1-D tile reduces to a scalar).
//! - `sum`: f32 and bf16/f16 accumulate in f32, sequentially in index order starting from
//!   the first element; bf16/f16 round once at the end. The GPU sums as a tree, so f32 sums
//!   may differ in the last bits; tests compare with a tolerance. i32 sums wrap.
//! - `max`/`min` ignore NaN unless every element is NaN (then NaN).
//! - `argmax`/`argmin`: the i32 index of the first extreme element (ties → lowest index);
//!   NaN is never chosen over a number; all-NaN gives 0.
//!
//! # `dot` and `trans`
//! - `dot(a, b, acc)` (`a: [M, K]`, `b: [K, N]`, one dtype of bf16/f16/f32; `acc: f32[M,
//!   N]`, zeros when omitted) gives f32 `[M, N]`: for each (i, j), `c = acc[i, j]`, then
//!   for k = 0, 1, …, K-1 in ascending order `c = fma(a[i, k], b[k, j], c)` in f32 (one
//!   rounding per step; for bf16/f16 operands the product is exact, so this is `c + a*b`).
//!   The CUDA FMA fallback computes exactly this; tensor cores (`mma.sync`) sum each
//!   16-wide k-step in their own order, so GPU results on that path agree within a
//!   tolerance: relative Frobenius error against an f64 reference ≤ 1e-5 for f32 output,
//!   ≤ 1e-2 after rounding to bf16 (see `dot.rs`).
//! - `trans(x)` is the transpose of a 2-D tile.
//!
//! # Control flow
//! `for iv in (start..end).step_by(step)` with i32 bounds evaluated once; `step ≤ 0` is an
//! error naming the loop. `if` takes a bool scalar. `let mut` variables live in an
//! environment; a value of a loop body is recomputed on every iteration.
//!
//! # Errors
//! Every kernel or argument mistake is an [`InterpError`] (with an [`ErrorKind`]), never a
//! panic; so is IR the builder never produces (undefined values, types that disagree with
//! what the ops compute, tiles over [`dsl_ir::spec::MAX_TILE_ELEMS`]). Programs that ran
//! before the failing one keep their effects; the failing program's earlier statements
//! keep theirs too (as a faulting GPU kernel would). Out-of-bounds
//! errors read e.g. `kernel rmsnorm: load out of bounds at line 7 (load(x + row * n_cols +
//! cols, mask, 0.0)): element 4100 of a 4099-element buffer `x`, program (3, 0, 0)`.
mod dot;
mod exec;
mod mem;
mod ops;
mod value;

pub use exec::Interpreter;
pub use value::{Data, Tile};

use dsl_ir::{DType, Kernel};
use std::fmt;

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

impl InterpArg {
    /// A pointer to the whole of `mem[buf]`.
    pub fn whole(buf: usize, mem: &[HostMem]) -> InterpArg {
        InterpArg::Ptr {
            buf,
            offset: 0,
            len: mem.get(buf).map_or(0, |m| m.len()),
        }
    }
}

/// The order in which [`run`] visits programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProgramOrder {
    /// Row-major, axis 0 fastest: the specification's order.
    #[default]
    RowMajor,
    /// The row-major order backwards.
    Reversed,
    /// A permutation drawn from this seed (deterministic).
    Shuffled(u64),
}

#[derive(Clone, Debug, Default)]
pub struct InterpOptions {
    pub order: ProgramOrder,
}

/// What went wrong, for callers that match on it (the message is in [`InterpError`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Launch arguments do not fit the kernel (count, kind, dtype, buffer range), or the grid
    /// or program id is invalid.
    Args,
    /// An unmasked load, store or atomic outside its pointer's range.
    OutOfBounds,
    /// A loop with a step ≤ 0.
    BadLoop,
    /// The IR is not one the builder produces (or not specialised).
    Malformed,
}

/// An error from running a kernel; `Display` gives the full message.
#[derive(Clone, Debug, PartialEq)]
pub struct InterpError {
    pub kind: ErrorKind,
    pub kernel: String,
    /// The program that failed, if the error arose while running one.
    pub program: Option<[u32; 3]>,
    /// The source line of the failing statement, if any.
    pub line: Option<u32>,
    /// What happened, e.g. `load out of bounds at line 7 (…): element 4100 of a 4099-element buffer `x``.
    pub message: String,
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel {}: {}", self.kernel, self.message)?;
        if let Some([a, b, c]) = self.program {
            write!(f, ", program ({a}, {b}, {c})")?;
        }
        Ok(())
    }
}

impl std::error::Error for InterpError {}

impl From<InterpError> for String {
    fn from(e: InterpError) -> String {
        e.to_string()
    }
}

/// Runs every program of the grid, in the order of `opts.order` (row-major by default).
pub fn run(
    kernel: &Kernel,
    grid: [u32; 3],
    args: &[InterpArg],
    mem: &mut [HostMem],
    opts: &InterpOptions,
) -> Result<(), InterpError> {
    let it = Interpreter::new(kernel, args, mem)?;
    if let ProgramOrder::Shuffled(_) = opts.order {
        for pid in program_order(kernel, grid, opts.order)? {
            it.run_program(pid, grid, mem)?;
        }
        return Ok(());
    }
    // Row-major (or reversed) without materialising the list: grids can be large.
    check_grid(kernel, grid)?;
    let total = grid.iter().map(|&g| g as u64).product::<u64>();
    let (g0, g1) = (grid[0] as u64, grid[1] as u64);
    for i in 0..total {
        let i = if opts.order == ProgramOrder::Reversed {
            total - 1 - i
        } else {
            i
        };
        let pid = [
            (i % g0) as u32,
            ((i / g0) % g1) as u32,
            (i / (g0 * g1)) as u32,
        ];
        it.run_program(pid, grid, mem)?;
    }
    Ok(())
}

/// Runs the single program `pid` of `grid`.
pub fn run_program(
    kernel: &Kernel,
    pid: [u32; 3],
    grid: [u32; 3],
    args: &[InterpArg],
    mem: &mut [HostMem],
) -> Result<(), InterpError> {
    Interpreter::new(kernel, args, mem)?.run_program(pid, grid, mem)
}

/// Every program id of `grid`, in the given order.
pub fn program_order(
    kernel: &Kernel,
    grid: [u32; 3],
    order: ProgramOrder,
) -> Result<Vec<[u32; 3]>, InterpError> {
    check_grid(kernel, grid)?;
    let mut pids = Vec::with_capacity(grid.iter().map(|&g| g as usize).product());
    for z in 0..grid[2] {
        for y in 0..grid[1] {
            for x in 0..grid[0] {
                pids.push([x, y, z]);
            }
        }
    }
    match order {
        ProgramOrder::RowMajor => {}
        ProgramOrder::Reversed => pids.reverse(),
        ProgramOrder::Shuffled(seed) => {
            let mut s = seed;
            for i in (1..pids.len()).rev() {
                let j = (splitmix64(&mut s) % (i as u64 + 1)) as usize;
                pids.swap(i, j);
            }
        }
    }
    Ok(pids)
}

fn check_grid(kernel: &Kernel, grid: [u32; 3]) -> Result<(), InterpError> {
    if grid.contains(&0) {
        return Err(InterpError {
            kind: ErrorKind::Args,
            kernel: kernel.name.clone(),
            program: None,
            line: None,
            message: format!("empty grid ({}, {}, {})", grid[0], grid[1], grid[2]),
        });
    }
    Ok(())
}

/// The splitmix64 generator: one step.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
