//! Lowering a specialised tile kernel to readable, header-free CUDA C.
//!
//! The execution model (see `layout.rs` for the index math):
//! - a program is a CTA of `32 * num_warps` threads; scalars are uniform (every thread
//!   holds the value), so control flow on them never diverges and every thread reaches
//!   every `__syncthreads()`;
//! - a tile `[N]` or `[M, N]` is spread over the threads in chunks of `vec` contiguous
//!   elements (16 bytes of the narrowest dtype the kernel loads or stores), rows over
//!   warps and columns over lanes; each thread holds its elements in a register array,
//!   and padding lanes (past the tile's end) never touch memory or enter a reduction;
//! - a tile of one row narrower than the program is replicated: every row group of
//!   threads holds the same columns, so broadcasting it over `[M, N]` is a register copy
//!   (no shared memory, no barrier); replicas load and compute but never store or reduce;
//! - pure index arithmetic is recomputed in whatever layout a reader needs; other values
//!   that must reach threads that do not hold them go through shared memory;
//! - reductions: per-thread partials, `__shfl_xor_sync` butterflies, one shared-memory
//!   exchange across warps, and every thread reads the result;
//! - a load or store whose pointers are provably contiguous and 16-byte aligned (from
//!   `EmitOptions::divisible16` and the pointer arithmetic) is one vector access per 16
//!   bytes: with one predicate per vector when the mask is provably constant over each
//!   vector (`cols < n` with `n` divisible by 16, as Triton's axis analysis), otherwise
//!   when all of a thread's elements are real and unmasked (else element by element);
//! - a loop whose iterations store to disjoint addresses (`invariant + iv + arange(0, n)`,
//!   step >= n) needs no barrier between one iteration's stores and the next's.
//!
//! Numerics follow the interpreter bit for bit except transcendental functions and
//! reduction order: bf16/f16 values are computed in f32 and rounded after every op, and
//! multiplications use `__fmul_rn` so NVRTC never contracts them into FMAs. Compile
//! without `--use_fast_math` (and keep the default `--prec-div/--prec-sqrt=true`).
//!
//! Output: a `<name>_body(pid0, pid1, pid2, npid0, npid1, npid2, params..., smem)` device
//! function (reusable by a megakernel: call `__syncthreads()` between two calls that share
//! `smem`) and an `extern "C" __global__` entry that calls it with blockIdx/gridDim.
mod analysis;
pub(crate) mod c_writer;
mod emit;
mod footprint;
pub mod layout;
pub mod prelude;

pub(crate) use c_writer::CWriter;
use dsl_ir::Kernel;
pub(crate) use emit::C_KEYWORDS;
pub use emit::SMEM_LIMIT;

#[derive(Clone, Debug)]
pub struct EmitOptions {
    /// Threads per program = 32 * num_warps.
    pub num_warps: u32,
    /// Per kernel parameter (same indexing as `Kernel::params`): for pointers, whether the
    /// address is 16-byte aligned; for i32 scalars, whether the value is divisible by 16.
    /// Launch checks these facts and they are part of the compile key (Triton does the same).
    pub divisible16: Vec<bool>,
    /// Software pipelining depth for loads in a `for` loop that feed a `dot` on tensor
    /// cores: a ring of `num_stages` shared-memory slots filled by `cp.async`, the copies
    /// for `num_stages - 1` iterations ahead in flight (`pipeline.rs`). 1: no ring (each
    /// iteration loads, then computes).
    pub num_stages: u32,
    /// Off by default (`TESSERA_RING_UNROLL=1` turns it on in `KernelDef`; no H100 A/B showed
    /// it faster overall): a pipelined loop (`pipeline.rs`) whose `dot`s only accumulate (a GEMM main
    /// loop) runs as passes of `num_stages` iterations, the iterations of a pass a
    /// `#pragma unroll` loop over the ring's slots, so the slot each iteration reads and the
    /// one it refills are compile-time constants (every `ldmatrix` base and `cp.async`
    /// destination a base plus a constant, a stepped copy's source the pass's pointer plus
    /// a constant number of steps); the last pass stops at the loop's end. Off: one
    /// iteration at a time, the slots `counter % S`.
    pub ring_unroll: bool,
    /// On in `KernelDef` for an sm_90 device (`TESSERA_WGMMA=0` turns it off; `EmitOptions::new`
    /// and code for no device leave it off): the code is for `sm_90a`, and a `dot` in a pipelined loop whose
    /// operands both come from the cp.async ring runs on `wgmma` (warpgroup MMA, operands by
    /// shared-memory descriptor, `dot_plan.rs`) when its tile allows; any other `dot` keeps
    /// `mma.sync`, the reason in the generated comment. Never set it for code compiled for
    /// anything but `sm_90a` (ptxas rejects `wgmma` for plain sm_90; [`CudaSource::arch`]).
    pub wgmma: bool,
    /// With `wgmma` (`TESSERA_WGMMA=2`, the default on sm_90; `1` waits): a loop's wgmmas stay in flight
    /// over the next iteration (`wgmma.wait_group 1`, the last ones waited for after the
    /// loop), its ring one slot deeper so a refill never lands in the slot they read
    /// (`pipeline.rs`: `PipeLoop::in_flight`). Off: `wait_group 0` in every iteration.
    pub wgmma_in_flight: bool,
    /// On in `KernelDef` and the megakernel (`TESSERA_ACQ_REL_ATOMIC=0` turns it off;
    /// `EmitOptions::new` leaves it off): a scalar atomic (the last-program pattern) is
    /// thread 0's one `atom.acq_rel.gpu` between the two barriers, instead of
    /// `__threadfence(); atomicAdd(..); __threadfence()`. The same ordering as the
    /// megakernel's counters (a release after `bar.sync` publishes the CTA's writes; an
    /// acquire before `bar.sync` orders every thread's later reads), without two full
    /// fences on the hop. Only adds on i32 and f32; max and min keep the fences.
    pub acq_rel_atomics: bool,
    /// On in `KernelDef` and the megakernel (`TESSERA_VECTOR_ATOMICS=0` turns it off;
    /// `EmitOptions::new` leaves it off): a tile `atomic_add` on f32 whose pointers are
    /// provably contiguous and aligned adds 4 (or 2) floats with one
    /// `red.global.add.v4.f32` (`.v2`) on sm_90 (one `atomicAdd` each elsewhere), as plain
    /// stores are vectorised. 128 CTAs adding 1024 floats each into one vector: 1.70 against
    /// 2.08 µs on an H100 (`scripts/probe/atomics.cu`, docs/PERF.md session 16).
    pub vector_atomics: bool,
    /// On in `KernelDef` and the megakernel (`TESSERA_WARP_REDUCE=0` turns it off;
    /// `EmitOptions::new` leaves it off): a reduction to a scalar of a tile of
    /// one row held by a row group narrower than a warp and replicated over the others
    /// (`Layout::replicated`, e.g. the attention's max and sum over a [BLOCK_N] row) runs in
    /// every row group on its own copy: per-thread partials and the butterfly, and every
    /// thread has the result, with no shared memory and no barrier. The owners compute what
    /// they computed before; the replicas hold the same values, so the same bits.
    pub warp_replica_reductions: bool,
    /// On in `KernelDef` and the megakernel (`TESSERA_ROW_VALUES=0` turns it off;
    /// `EmitOptions::new` leaves it off): an elementwise op on an
    /// `[R, C]` tile whose operand broadcasts a per-row value that is recomputed where it is
    /// read (e.g. the attention's `exp(s - m).expand_dims(1)` from a reduction's
    /// shared-memory result) computes that value once per row the thread holds (`passes`
    /// of them) before its loop over the slots, instead of once per slot, each under its
    /// own branch. The same expression at the same row: the same bits. The decode step 5%
    /// faster at 0.6B on an H100 (docs/PERF.md, session 27).
    pub row_values_once: bool,
    /// On in `KernelDef` and the megakernel (`TESSERA_REUSE_SYNC=0` turns it off;
    /// `EmitOptions::new` leaves it off): a shared-memory region that a loop rewrites every
    /// iteration (a reduction's partials, a tile staged for another layout or for a `dot`)
    /// gets no barrier before the rewrite when a barrier every thread runs has already been
    /// passed in the same iteration, before it: each thread's reads of the region in the
    /// previous iteration came before that barrier (regions are never shared between values).
    /// The FlashAttention loop's six such barriers a key block go (the attention example
    /// 2.2-2.4% faster on an H200); the decode step within 1% either way (docs/PERF.md,
    /// session 34).
    pub elide_reuse_syncs: bool,
    /// On in `KernelDef` and the megakernel (`TESSERA_FRAG_ROWS=0` turns it off;
    /// `EmitOptions::new` leaves it off): FlashAttention's softmax in the registers of the tensor-core
    /// fragment, as FlashAttention-2 keeps it. Dots chained through their accumulator (`P =
    /// f(dot(..))` the A operand of another `dot`) tile M only, each warp whole rows
    /// (`dot_plan.rs`, Triton's rule); the `[M]` and `[M, 1]` tiles of a kernel that reduces
    /// an `[M, N]` fragment along its rows take the fragment's rows (`Layout::rows_of`), so
    /// the reduction is per-thread partials and two quad shuffles (`reduce.rs`; shared
    /// memory only across warp columns) and its broadcast back a register read; and such an
    /// A operand goes into `mma.sync` from the registers it was computed in, two n8
    /// accumulator tiles a k16 fragment (`dot.rs`), instead of through shared memory. The
    /// attention example 2.3x / 2.1x faster on an H200 (not causal / causal), the time to
    /// first token at 8192 prompt tokens 35% shorter (docs/PERF.md, session 35).
    pub frag_rows: bool,
    /// On in `KernelDef` and the megakernel (`TESSERA_FAST_EXP2=0` turns it off;
    /// `EmitOptions::new` leaves it off): an f32 `exp2` is the hardware's approximation, one
    /// `ex2.approx.ftz` (about 2 ulp, results below 2^-126 flushed to zero), as Triton lowers
    /// `exp2`, instead of `exp2f`'s range check and two multiplies around it. Only
    /// FlashAttention's softmax (base 2) calls `exp2` among the shipped kernels: the attention
    /// example 3.0% / 4.5% faster on an H200 (not causal / causal; docs/PERF.md, session 35).
    pub fast_exp2: bool,
    /// A megakernel body whose stage waits inside it (`MegaOptions::wait_in_body`): per
    /// kernel parameter, whether the body may load through it before the wait (a weight;
    /// with `MegaOptions::early_loads`, whatever no pending stage writes). The body
    /// takes the stage's wait as a callable `tsr_dep` and calls it (`if (!tsr_dep())
    /// return;`) right before its first access that is not such a load, so the loads
    /// before it are in flight while the CTA waits.
    pub dep_hook: Option<Vec<bool>>,
}

/// The default pipelining depth (Triton's default on Ampere and Hopper).
pub const DEFAULT_NUM_STAGES: u32 = 3;

impl EmitOptions {
    /// `num_warps` warps, no alignment facts (every access takes the scalar path).
    pub fn new(num_warps: u32) -> EmitOptions {
        EmitOptions {
            num_warps,
            divisible16: vec![],
            num_stages: DEFAULT_NUM_STAGES,
            ring_unroll: false,
            wgmma: false,
            wgmma_in_flight: false,
            acq_rel_atomics: false,
            vector_atomics: false,
            warp_replica_reductions: false,
            row_values_once: false,
            elide_reuse_syncs: false,
            frag_rows: false,
            fast_exp2: false,
            dep_hook: None,
        }
    }
}

/// The generated source of one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaSource {
    /// The `extern "C" __global__` entry point's name.
    pub entry: String,
    /// Complete CUDA C, compilable by NVRTC with no headers.
    pub code: String,
    /// Threads per block.
    pub block_threads: u32,
    /// Shared memory the kernel uses, in bytes.
    pub smem_bytes: usize,
    /// Above 48 KiB the shared memory is dynamic (`extern __shared__`): the bytes the
    /// launch must ask for (after raising the function's limit); 0 when it is static.
    pub dynamic_smem_bytes: usize,
    /// Some `dot` runs on `wgmma`: the code must be compiled for `sm_90a`.
    pub wgmma: bool,
}

impl CudaSource {
    /// The architecture NVRTC compiles this source for on a device of architecture `arch`:
    /// `sm_90a` when the code has `wgmma` (only emitted for an sm_90 device), else `arch`.
    pub fn arch(&self, arch: &'static str) -> &'static str {
        if self.wgmma {
            "sm_90a"
        } else {
            arch
        }
    }
}

/// The most static shared memory a kernel may declare.
pub const STATIC_SMEM_LIMIT: usize = 48 * 1024;

/// The body function alone (no prelude, no entry point), for a megakernel that pastes
/// several bodies into one translation unit after one copy of [`prelude::PRELUDE`].
#[derive(Clone, Debug, PartialEq)]
pub struct CudaBody {
    /// `<name>_body`.
    pub name: String,
    pub code: String,
    /// Run-time parameters as (C type, C name), in declaration order.
    pub params: Vec<(String, String)>,
    pub block_threads: u32,
    pub smem_bytes: usize,
    /// Some `dot` runs on `wgmma` (sm_90a; its rings want 1024-byte aligned shared memory).
    pub wgmma: bool,
}

pub fn emit_body(kernel: &Kernel, opts: &EmitOptions) -> Result<CudaBody, String> {
    let entry = c_ident(&kernel.name);
    let mut e = emit::Emitter::new(kernel, opts)?;
    e.body(&kernel.body)?;
    let params = e.params_c();
    let mut w = CWriter::new(0);
    if e.uses_mma {
        w.paste(&emit::mma_helpers(e.uses_stepped_copies()));
    }
    if let Some(h) = e.wgmma_helpers() {
        w.paste(&h);
    }
    let bound: Vec<String> = kernel
        .bound
        .iter()
        .map(|(n, v)| format!("{n}={v:?}"))
        .collect();
    w.line(format!(
        "// ==== kernel `{}` ({}){}: {} warps = {} threads per program, {} bytes of shared memory ====",
        kernel.name,
        kernel.file,
        if bound.is_empty() { String::new() } else { format!(" with {}", bound.join(", ")) },
        opts.num_warps,
        e.threads,
        e.smem_top
    ));
    let mut sig = vec!["int pid0, int pid1, int pid2, int npid0, int npid1, int npid2".to_string()];
    sig.extend(params.iter().map(|(t, n)| format!("{t} {n}")));
    sig.push("unsigned char* smem".into());
    if opts.dep_hook.is_some() {
        sig.push("W& tsr_dep".into());
        w.line("template <typename W>  // W: the stage's wait, called once before the first dependent access");
    }
    w.open(format!(
        "__device__ __forceinline__ void {entry}_body({}) {{",
        sig.join(", ")
    ));
    e.header(&mut w);
    w.paste(e.statements());
    w.close("}");
    let code = w.finish();
    Ok(CudaBody {
        name: format!("{entry}_body"),
        code,
        params,
        block_threads: e.threads as u32,
        smem_bytes: e.smem_top,
        wgmma: e.uses_wgmma(),
    })
}

pub fn emit(kernel: &Kernel, opts: &EmitOptions) -> Result<CudaSource, String> {
    let body = emit_body(kernel, opts)?;
    let entry = c_ident(&kernel.name);
    let mut w = CWriter::new(0);
    w.paste(prelude::PRELUDE);
    w.blank();
    w.paste(&body.code);
    let params: Vec<String> = body
        .params
        .iter()
        .map(|(t, n)| format!("{t} {n}"))
        .collect();
    let args: Vec<&str> = body.params.iter().map(|(_, n)| n.as_str()).collect();
    w.blank();
    w.open(format!(
        "extern \"C\" __global__ void __launch_bounds__({}) {entry}({}) {{",
        body.block_threads,
        params.join(", ")
    ));
    let dynamic = if body.smem_bytes > STATIC_SMEM_LIMIT {
        body.smem_bytes
    } else {
        0
    };
    // wgmma's swizzle is a function of address bits: its rings sit at multiples of 1024
    // bytes from `smem`, which must be 1024-byte aligned too (the kernel checks).
    let (dyn_align, static_align) = if body.wgmma { (1024, 1024) } else { (128, 16) };
    let smem = if dynamic > 0 {
        w.line(format!(
            "extern __shared__ __align__({dyn_align}) unsigned char smem[];  // {} bytes, dynamic (over 48 KiB)",
            body.smem_bytes
        ));
        "smem"
    } else if body.smem_bytes > 0 {
        w.line(format!(
            "__shared__ __align__({static_align}) unsigned char smem[{}];",
            body.smem_bytes
        ));
        "smem"
    } else {
        "nullptr"
    };
    let mut call =
        vec!["blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z".to_string()];
    call.extend(args.iter().map(|s| s.to_string()));
    call.push(smem.into());
    w.line(format!("{}({});", body.name, call.join(", ")));
    w.close("}");
    let code = w.finish();
    Ok(CudaSource {
        entry,
        code,
        block_threads: body.block_threads,
        smem_bytes: body.smem_bytes,
        dynamic_smem_bytes: dynamic,
        wgmma: body.wgmma,
    })
}

/// A kernel name as a C identifier.
fn c_ident(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'k');
    }
    out
}
