//! `dot` on `wgmma` (sm_90a; `EmitOptions::wgmma`, planned by `dot_plan::plan_wgmma`).
//!
//! A warpgroup (4 consecutive warps, the first a multiple of 4) runs `wgmma.mma_async`
//! m64nNk16: D[64 x N] += A[64 x 16] B[16 x N], A and B read from shared memory through
//! 64-bit descriptors, D in registers (warp w of the group holds rows 16w..16w+15 as the
//! m16n8 C fragment repeated over N/8 column tiles: `Frag::interleaved`). Warpgroups split
//! M; a warpgroup's `mt` instructions per k step are a whole warp grid of rows apart, so
//! the accumulator is the same layout the epilogue already reads.
//!
//! Operands come straight from the cp.async ring (`pipeline.rs`), whose tiles are stored
//! in column blocks (`dot_plan::tile_off_c`) so each block is one of wgmma's canonical
//! swizzled layouts:
//!
//! ```text
//!   K-major (A [m][k], B [n][k]): block rows of W elements (2W bytes: the 2W-byte swizzle),
//!     8-row groups SBO = 16W bytes apart; a k step of 16 is 32 bytes along the row (or the
//!     next block); LBO unused (16).
//!   MN-major (B [k][n]): the same blocks, N blocks of W columns LBO = K * 2W bytes apart,
//!     8-row (k) groups SBO = 16W bytes apart; a k step of 16 is 16 rows further.
//! ```
//!
//! In the loop: each thread waits for its copies, fences them to the async proxy
//! (`fence.proxy.async`: cp.async writes through the generic proxy), and the barrier makes
//! everyone's visible; then `wgmma.fence`, the k steps' wgmmas, `commit_group` and
//! `wait_group 0`: the slot is free to refill in the next iteration, the accumulators
//! readable. With `EmitOptions::wgmma_in_flight` (`PipeLoop::in_flight`), `wait_group 1`:
//! the wgmmas retire in the next iteration (the last ones after the loop, `pipe_after`),
//! and the ring has one more slot, so the slot they read is refilled only after that.
use super::super::layout::Frag;
use super::dot_plan::{wgmma_swizzle_mode, DotPlan, Wgmma};
use super::{Emitter, R};
use dsl_ir::*;

/// The descriptor's encoding: plain integer arithmetic, kept by the CPU emulator (which
/// decodes it in its model of the instruction).
const WGMMA_DESC: &str = r#"// -- wgmma descriptor (sm_90a) --
// A shared-memory matrix descriptor (PTX ISA, warpgroup-level MMA, "Matrix Descriptor
// Format"): bits 0-13 the start address, 16-29 the leading dimension byte offset, 32-45 the
// stride dimension byte offset (each as (x & 0x3FFFF) >> 4), 49-51 the base offset (0: the
// swizzle atoms are aligned), 62-63 the swizzle (1 = 128B, 2 = 64B, 3 = 32B).
__device__ __forceinline__ unsigned long long tsr_wgmma_desc(tsr_saddr start, unsigned lbo, unsigned sbo, unsigned swizzle) {
  return (unsigned long long)((start & 0x3FFFF) >> 4)
       | (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16
       | (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32
       | (unsigned long long)swizzle << 62;
}
"#;

/// The instructions' fences and groups (the emulator swaps the block for its models).
const WGMMA_SYNC: &str = r#"// -- wgmma (PTX: wgmma.mma_async, its fences and groups; a CPU emulator of the generated code swaps this block) --
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma needs sm_90a: compile this kernel for sm_90a (EmitOptions::wgmma)"
#endif
// The swizzle is on address bits: the rings' blocks sit at multiples of 1024 bytes from smem.
__device__ __forceinline__ void tsr_wgmma_check_align(const void* smem) {
  if (tsr_saddr_of(smem) % 1024 != 0) __trap();
}
// Orders the warpgroup's earlier register accesses to the accumulators before its wgmmas.
__device__ __forceinline__ void tsr_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tsr_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most N of the warpgroup's wgmma groups are in flight.
template <int N> __device__ __forceinline__ void tsr_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// This thread's generic-proxy writes to shared memory (cp.async's) become visible to the
// async proxy, through which wgmma reads.
__device__ __forceinline__ void tsr_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// After the wait: the accumulators are read from here on (no read may move above the wait).
template <int N> __device__ __forceinline__ void tsr_wgmma_hold(float* d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
"#;

/// One `wgmma` instruction as a C++ specialisation of `tsr_wgmma_<dt>_<nk|kn><N>`.
fn insn_c(n: usize, f16: bool, b_nk: bool) -> String {
    let dt = if f16 { "f16" } else { "bf16" };
    let name = insn_name(f16, b_nk);
    let regs = n / 2;
    // The accumulator operands, 16 to a line of the asm string and 8 to a line of operands.
    let list: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
    let list: Vec<String> = list.chunks(16).map(|c| c.join(", ")).collect();
    let outs: Vec<String> = (0..regs).map(|i| format!("\"+f\"(d[{i}])")).collect();
    let outs: Vec<String> = outs.chunks(8).map(|c| c.join(", ")).collect();
    format!(
        "template <> __device__ __forceinline__ void {name}<{n}>(float* d, unsigned long long a, unsigned long long b) {{\n  \
         asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{scale}, 0;\\n\"\n               \
         \"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{dt}.{dt} {{\"\n               \"{}\"\n               \"}}, %{regs}, %{}, p, 1, 1, 0, {};\\n}}\\n\"\n               \
         : {}\n               : \"l\"(a), \"l\"(b), \"n\"(1));\n}}\n",
        list.join(",\"\n               \""),
        regs + 1,
        u8::from(!b_nk),
        outs.join(",\n                 "),
        scale = regs + 2,
    )
}

/// `tsr_wgmma_bf16_nk` (B `[n][k]`, K-major) or `tsr_wgmma_bf16_kn` (B `[k][n]`,
/// MN-major: the transpose bit), or their f16 twins.
fn insn_name(f16: bool, b_nk: bool) -> String {
    format!(
        "tsr_wgmma_{}_{}",
        if f16 { "f16" } else { "bf16" },
        if b_nk { "nk" } else { "kn" }
    )
}

/// A K-major operand's descriptor offsets (LBO, SBO) in bytes, its tile stored in column
/// blocks of `w`: 8-row groups one after the other; LBO unused for swizzled K-major tiles.
fn k_major_offsets(w: usize) -> (usize, usize) {
    (16, 8 * 2 * w)
}

/// Bytes from a K-major tile's first k step to step `kstep` (C), the tile `rows` x `cols`
/// in blocks of `w`: 32 bytes along the row, or into the next block.
fn k_major_step(kstep: &str, rows: usize, cols: usize, w: usize) -> String {
    if cols == w {
        format!("{kstep} * 32")
    } else {
        format!(
            "{kstep} * 16 / {w} * {} + {kstep} * 16 % {w} * 2",
            rows * w * 2
        )
    }
}

impl Emitter<'_> {
    /// Whether some `dot` runs on `wgmma` (the code is for sm_90a).
    pub(crate) fn uses_wgmma(&self) -> bool {
        !self.wgmma_insns.is_empty()
    }

    /// The `wgmma` helpers, once per translation unit: the descriptor, the fences and the
    /// instructions the code calls.
    pub(crate) fn wgmma_helpers(&self) -> Option<String> {
        if !self.uses_wgmma() {
            return None;
        }
        let mut out = String::from("#ifndef TSR_WGMMA_HELPERS\n#define TSR_WGMMA_HELPERS\n");
        out.push_str(WGMMA_DESC);
        out.push_str(WGMMA_SYNC);
        out.push_str(
            "// D[64 x N] += A[64 x 16] B[16 x N] for a warpgroup, f32 accumulators d[0..N/2), A\n\
             // (K-major) and B by descriptor: B [n][k] (K-major) or [k][n] (MN-major, transposed).\n",
        );
        let mut declared = std::collections::BTreeSet::new();
        for &(n, f16, b_nk) in &self.wgmma_insns {
            if declared.insert((f16, b_nk)) {
                out.push_str(&format!(
                    "template <int N> __device__ void {}(float* d, unsigned long long a, unsigned long long b);\n",
                    insn_name(f16, b_nk)
                ));
            }
            out.push_str(&insn_c(n, f16, b_nk));
        }
        out.push_str("// -- end wgmma --\n#endif\n");
        Some(out)
    }

    /// A `dot` on `wgmma` (see the module's comment): operands by descriptor from their
    /// ring slots, the accumulator in `f`'s interleaved layout.
    pub(super) fn dot_wgmma(
        &mut self,
        id: ValueId,
        (a, b, acc): (ValueId, ValueId, Option<ValueId>),
        src: &Src,
        plan: &DotPlan,
        f: Frag,
        w: Wgmma,
    ) -> R<()> {
        self.uses_mma = true;
        let (m, kk, n) = plan.mkn;
        let f16 = self.k.ty(a).elem == Elem::Num(DType::F16);
        let b_src = match (&self.f.defs[b.0 as usize], w.b_nk) {
            (Some(Op::Trans(x)), true) => *x,
            _ => b,
        };
        let (Some(a_smem), Some(b_smem)) = (self.pipelined_tile(a), self.pipelined_tile(b_src))
        else {
            return Err(self.err("internal: a wgmma operand outside the cp.async ring"));
        };
        self.wgmma_insns.insert((n, f16, w.b_nk));
        let name = self.dot_accumulator(id, acc, src)?;
        let warps = f.wm;
        self.open(format!(
            "{{  // {name} += a·b on wgmma: warpgroup wgroup owns rows mi*{} + 64*wgroup.. (its warp w: 16w..), all {n} columns",
            16 * warps
        ));
        self.line("const int wgroup = warp / 4;");
        let (a_lbo, a_sbo) = k_major_offsets(w.a_block);
        self.line(format!(
            "const unsigned long long desc_a = tsr_wgmma_desc({a_smem} + wgroup * {}, {a_lbo}, {a_sbo}, {});  // A [{m}][{kk}] K-major, blocks of {} columns",
            64 * w.a_block * 2,
            wgmma_swizzle_mode(w.a_block),
            w.a_block
        ));
        let (b_lbo, b_sbo, b_how) = if w.b_nk {
            let (l, s) = k_major_offsets(w.b_block);
            (l, s, format!("B [{n}][{kk}] K-major"))
        } else {
            (
                kk * w.b_block * 2,
                8 * 2 * w.b_block,
                format!(
                    "B [{kk}][{n}] MN-major: blocks of {} columns {} bytes apart",
                    w.b_block,
                    kk * w.b_block * 2
                ),
            )
        };
        self.line(format!(
            "const unsigned long long desc_b = tsr_wgmma_desc({b_smem}, {b_lbo}, {b_sbo}, {});  // {b_how}",
            wgmma_swizzle_mode(w.b_block)
        ));
        self.line(
            "tsr_wgmma_fence();  // the accumulators were last written by ordinary instructions",
        );
        self.line("#pragma unroll");
        self.open(format!(
            "for (int kstep = 0; kstep < {}; ++kstep) {{  // the start addresses move by 16 k (the descriptors' low bits, in 16-byte units)",
            kk / 16
        ));
        let a_off = k_major_step("kstep", m, kk, w.a_block);
        let b_off = if w.b_nk {
            k_major_step("kstep", n, kk, w.b_block)
        } else {
            format!("kstep * {}", 16 * w.b_block * 2)
        };
        let call = format!(
            "{}<{n}>({name} + mi * {}, desc_a + ({a_off} + mi * {}) / 16, desc_b + ({b_off}) / 16);",
            insn_name(f16, w.b_nk),
            f.nt * 4,
            16 * warps * w.a_block * 2
        );
        self.line("#pragma unroll");
        self.line(format!("for (int mi = 0; mi < {}; ++mi) {call}", f.mt));
        self.close("}");
        self.line("tsr_wgmma_commit();");
        let in_flight = self
            .pipe
            .loads
            .get(&a)
            .and_then(|l| self.pipe.loops.get(l))
            .is_some_and(|pl| pl.in_flight);
        if in_flight {
            self.line("tsr_wgmma_wait<1>();  // the previous iteration's are done (their slot is refilled next); these stay in flight");
        } else {
            self.line(
                "tsr_wgmma_wait<0>();  // done: the ring slot may be refilled, the accumulators read",
            );
            self.line(format!("tsr_wgmma_hold<{}>({name});", f.mt * f.nt * 4));
        }
        self.close("}");
        self.regs[id.0 as usize] = true;
        Ok(())
    }

    /// The C names and slot counts of the tiles a loop body assigns in a wgmma accumulator's
    /// layout (what the loop carries out of it while its wgmmas may be in flight).
    pub(super) fn wgmma_carried(&mut self, body: &[Stmt]) -> Vec<(String, usize)> {
        let mut out = vec![];
        for s in body {
            let Stmt::Assign { var, .. } = s else {
                continue;
            };
            let dims = self.k.var_ty(*var).dims();
            if let Some(f) = self.frag_shapes.get(&dims).filter(|f| f.interleaved) {
                let held = (self.var_names[var.0 as usize].clone(), f.mt * f.nt * 4);
                if !out.contains(&held) {
                    out.push(held);
                }
            }
        }
        out
    }

    /// Before a pipelined loop whose rings a `wgmma` reads: `smem` must be 1024-byte aligned.
    pub(super) fn wgmma_align_check(&mut self) {
        self.line("tsr_wgmma_check_align(smem);  // wgmma's swizzle is on address bits");
    }
}
