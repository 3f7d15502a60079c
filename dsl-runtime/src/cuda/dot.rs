//! `dot` and `trans` in CUDA C: which path a `dot` takes, the FMA fallback, and the
//! tensor-core path (`mma.sync` fed by `ldmatrix` from XOR-swizzled shared memory).
//!
//! - Tensor cores (sm_80+): a and b of bf16 or f16, M, N and K multiples of 16, and the
//!   program's warps tile `[M, N]` in m16 x n16 pieces. The `[M, N]` shape then takes the
//!   accumulator fragment layout ([`Layout::mma`]) for every value of that shape, so the
//!   accumulator stays in registers across a loop and the epilogue reads it where it is.
//!   Operands reach shared memory as bf16/f16 rows of 16-byte chunks, the chunk index
//!   XOR-ed with the row (`swizzle`), either from registers or, for loads in a loop, by
//!   `cp.async` into a ring `num_stages` deep (`pipeline.rs`). `b = trans(x)` is stored as
//!   x's rows (`[n][k]`) and read with a plain `ldmatrix`; any other b as `[k][n]` rows,
//!   read with `ldmatrix.trans`. Each lane computes a few 32-bit shared-memory addresses
//!   before the k steps (one per residue of the swizzle's chunk XOR, [`LaneBases`]), and
//!   each `ldmatrix` adds a constant to one; the warps tile `[M, N]` in the grid that loads
//!   the fewest fragments (`dot_plan.rs`: 2x4 warps of 64x64 for 128x256 on 8 warps).
//! - FMA fallback (any shape and dtype): a and b through shared memory (as f32), each
//!   thread computes its own elements of the result in its layout, `fmaf` in ascending k
//!   from the accumulator: the interpreter's order exactly.
use super::super::layout::Frag;
use super::dot_plan::{swz_c, DotPlan};
use super::{strip, At, Emitter, R};
use dsl_ir::*;

/// Inline PTX for the tensor-core path, once per translation unit. The g++ emulation swaps
/// the block for functional models (tests/host_emu/mma.h).
pub const MMA_HELPERS: &str = r#"#ifndef TSR_MMA_HELPERS
#define TSR_MMA_HELPERS
// -- mma (PTX: ldmatrix, mma.sync, cp.async; a CPU emulator of the generated code swaps this block) --
__device__ __forceinline__ unsigned tsr_smem_u32(const void* p) {
  unsigned a;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// ldmatrix takes a 32-bit shared-memory address, computed once per lane as a base (the
// k loop's ldmatrix add constants, which ptxas folds into the instruction's offset).
typedef unsigned tsr_saddr;
// Not volatile: a pure function of p, so the compiler may hoist it out of the k loop.
__device__ __forceinline__ tsr_saddr tsr_saddr_of(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void tsr_ldmatrix_x4(unsigned* r, tsr_saddr a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void tsr_ldmatrix_x4_trans(unsigned* r, tsr_saddr a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
// D[16x8] += A[16x16] B[16x8] for one warp, f32 accumulators.
__device__ __forceinline__ void tsr_mma_bf16(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void tsr_mma_f16(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// 16 bytes global -> shared, asynchronously; src_bytes = 0 (a masked-off vector) zero-fills.
__device__ __forceinline__ void tsr_cp_async16(void* dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(tsr_smem_u32(dst)), "l"(src), "r"(pred ? 16 : 0) : "memory");
}
__device__ __forceinline__ void tsr_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's groups are still in flight.
template <int N> __device__ __forceinline__ void tsr_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
// -- end mma --
#endif
"#;

/// A `cp.async` to a 32-bit shared-memory address computed once before the loop (stepped
/// copies; `tsr_cp_async16` converts a generic pointer per call).
const CP_ASYNC_AT: &str = r#"// 16 bytes global -> shared at a 32-bit shared-memory address (a tsr_saddr).
__device__ __forceinline__ void tsr_cp_async16_at(tsr_saddr dst, const void* src, bool pred) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(dst), "l"(src), "r"(pred ? 16 : 0) : "memory");
}
"#;

/// [`MMA_HELPERS`], with `tsr_cp_async16_at` when some copy is stepped (`pipeline.rs`).
pub fn mma_helpers(stepped: bool) -> std::borrow::Cow<'static, str> {
    if stepped {
        let end = "// -- end mma --";
        MMA_HELPERS
            .replacen(end, &format!("{CP_ASYNC_AT}{end}"), 1)
            .into()
    } else {
        MMA_HELPERS.into()
    }
}

/// One operand's `ldmatrix` addresses: a few per-lane bases. A lane's row phase
/// depends only on the lane (every constant row offset is a multiple of 16, and the
/// swizzle's per_phase * max_phase divides 16), and a chunk `X + c` (X: lane and warp, c:
/// a compile-time multiple of 2) swizzles to `((X + c % mp) ^ phase) + (c - c % mp)`
/// (adding a multiple of mp leaves the XOR-ed low bits alone). So one base per residue
/// `c % mp` (at most 4) and a constant per `ldmatrix`.
struct LaneBases {
    /// The swizzle's max_phase for this tile's rows.
    mp: usize,
    /// Bases (residues) the k loop's constants reach.
    count: usize,
}

impl LaneBases {
    fn new(cols: usize, consts: usize) -> LaneBases {
        let mp = super::dot_plan::swizzle_params(cols).1;
        LaneBases {
            mp,
            count: (mp / 2).clamp(1, consts.max(1)),
        }
    }
    /// The base for chunk constant `c` (C, an even value).
    fn index(&self, c: &str) -> String {
        if self.mp >= 2 {
            format!("{c} % {} / 2", self.mp)
        } else {
            "0".into()
        }
    }
    /// The part of `c` above the XOR-ed bits, in chunks.
    fn high(&self, c: &str) -> String {
        if self.mp >= 2 {
            format!("{c} / {mp} * {mp}", mp = self.mp)
        } else {
            c.into()
        }
    }
}

impl Emitter<'_> {
    /// Whether every reader of `id` is a `dot` (so a `trans` needs no code of its own).
    fn only_dot_readers(&self, id: ValueId) -> bool {
        let rd = super::pipeline::readers(self.k);
        rd.get(&id).is_none_or(|r| {
            r.iter().all(|x| {
                x.is_some_and(|x| matches!(self.f.defs[x.0 as usize], Some(Op::Dot { .. })))
            })
        })
    }

    /// `trans(x)`: no code when x can be recomputed at any index, or when only `dot`s read
    /// it (they store x's rows themselves); otherwise x goes to shared memory and readers
    /// index it with the dimensions swapped.
    pub(super) fn trans_let(&mut self, id: ValueId, x: ValueId) -> R<()> {
        if self.recomputable(x) || self.only_dot_readers(id) {
            return Ok(());
        }
        self.stage(x)
    }

    /// Makes `v` readable at any logical index (recomputed, or staged in shared memory).
    fn indexable(&mut self, v: ValueId) -> R<()> {
        if self.recomputable(v) {
            return Ok(());
        }
        if let Some(Op::Trans(x)) = &self.f.defs[v.0 as usize] {
            let x = *x;
            return self.indexable(x);
        }
        self.stage(v)
    }

    pub(super) fn dot_let(
        &mut self,
        id: ValueId,
        a: ValueId,
        b: ValueId,
        acc: Option<ValueId>,
        src: &Src,
    ) -> R<()> {
        let plan = self
            .dot_plans
            .get(&id)
            .cloned()
            .ok_or_else(|| self.err("internal: a dot without a plan"))?;
        self.line(format!("// dot: {}", plan.why));
        match (plan.mma, plan.wgmma) {
            (Some(f), Some(w)) => self.dot_wgmma(id, (a, b, acc), src, &plan, f, w),
            (Some(f), None) => self.dot_mma(id, a, b, acc, src, &plan, f),
            (None, _) => self.dot_fma(id, a, b, acc, src, &plan),
        }
    }

    fn dot_fma(
        &mut self,
        id: ValueId,
        a: ValueId,
        b: ValueId,
        acc: Option<ValueId>,
        src: &Src,
        plan: &DotPlan,
    ) -> R<()> {
        let (_, kk, _) = plan.mkn;
        self.indexable(a)?;
        self.indexable(b)?;
        let lay = self.lay_of_value(id)?;
        let n = self.value_name(id, src);
        let idx = self.idx_exprs(lay, "s");
        let (i, j) = (idx[0].clone(), idx[1].clone());
        let av = self.access(a, &At::Idx(vec![i, "dk".into()]))?;
        let bv = self.access(b, &At::Idx(vec!["dk".into(), j]))?;
        let init = match acc {
            Some(c) => strip(&self.access(c, &At::Slot { lay, s: "s".into() })?),
            None => "0.0f".into(),
        };
        self.line(format!("float {n}[{}];", self.layouts[lay].slots()));
        self.open_slots(lay, "s");
        self.line(format!("float dc = {init};"));
        self.open(format!(
            "for (int dk = 0; dk < {kk}; ++dk) {{  // ascending k, one rounding per step"
        ));
        self.line(format!("dc = fmaf({}, {}, dc);", strip(&av), strip(&bv)));
        self.close("}");
        self.line(format!("{n}[s] = dc;"));
        self.close("}");
        self.regs[id.0 as usize] = true;
        Ok(())
    }

    /// Writes tile `v` (`[rows, cols]`, in registers or recomputable) into a fresh
    /// swizzled bf16/f16 shared-memory tile; returns the region's name.
    pub(super) fn swizzled_tile(&mut self, v: ValueId, d: DType, what: &str) -> R<String> {
        let dims = self.k.ty(v).dims();
        let (rows, cols) = (dims[0], dims[1]);
        let base = format!("{}_tile", self.names[v.0 as usize]);
        let base = if base == "_tile" {
            format!("v{}_tile", v.0)
        } else {
            base
        };
        let buf = self.region(
            &base,
            "unsigned short",
            rows * cols,
            format!("{what} ({d}[{rows}, {cols}]), swizzled 16-byte chunks"),
        )?;
        let lay = self.lay_of_value(v)?;
        let l = self.layouts[lay].clone();
        let conv = if d == DType::BF16 {
            "tsr_f32_to_bf16"
        } else {
            "tsr_f32_to_f16"
        };
        self.sync_before_reuse();
        let ok = self.owned(lay, "s");
        if l.frag.is_none() && l.vec == 8 && cols % 8 == 0 && !l.replicated() {
            // Whole chunks: one 16-byte store each.
            let q = l.slots() / 8;
            let idx = self.idx_exprs(lay, "q * 8");
            let ok8 = self.owned(lay, "q * 8");
            self.line("#pragma unroll");
            self.open(format!("for (int q = 0; q < {q}; ++q) {{"));
            if let Some(c) = &ok8 {
                self.open(format!("if ({c}) {{"));
            }
            let mut words = vec![];
            for w in 0..4 {
                let e0 = self.access(
                    v,
                    &At::Slot {
                        lay,
                        s: format!("q * 8 + {}", 2 * w),
                    },
                )?;
                let e1 = self.access(
                    v,
                    &At::Slot {
                        lay,
                        s: format!("q * 8 + {}", 2 * w + 1),
                    },
                )?;
                let pack = if d == DType::BF16 {
                    "tsr_pack_bf16"
                } else {
                    "tsr_pack_f16"
                };
                words.push(format!("{pack}({}, {})", strip(&e0), strip(&e1)));
            }
            let off = swz_c(&strip(&idx[0]), &format!("{} / 8", strip(&idx[1])), cols);
            self.line(format!(
                "*(uint4*)({buf} + {off}) = uint4{{{}}};",
                words.join(", ")
            ));
            if ok8.is_some() {
                self.close("}");
            }
            self.close("}");
        } else {
            let idx = self.idx_exprs(lay, "s");
            let e = self.access(v, &At::Slot { lay, s: "s".into() })?;
            let (r, c) = (strip(&idx[0]), strip(&idx[1]));
            let off = format!("{} + ({c}) % 8", swz_c(&r, &format!("({c}) / 8"), cols));
            self.open_slots(lay, "s");
            let st = format!("{buf}[{off}] = {conv}({});", strip(&e));
            match ok {
                Some(c) => self.line(format!("if ({c}) {st}")),
                None => self.line(st),
            }
            self.close("}");
        }
        Ok(buf)
    }

    #[allow(clippy::too_many_arguments)]
    fn dot_mma(
        &mut self,
        id: ValueId,
        a: ValueId,
        b: ValueId,
        acc: Option<ValueId>,
        src: &Src,
        plan: &DotPlan,
        f: Frag,
    ) -> R<()> {
        self.uses_mma = true;
        let (m, kk, n) = plan.mkn;
        let d = self.k.ty(a).elem.num().expect("checked by the plan");
        // Operands: a ring slot (pipelined), a tile written before the loop (loop-invariant),
        // or written now from registers.
        let mut wrote = false;
        // As 32-bit shared-memory addresses; `None`: A from the registers it is in.
        let a_regs = self.a_in_registers(a, f);
        if a_regs.is_some() {
            self.line("// A from the registers it was computed in (EmitOptions::frag_rows), B by ldmatrix");
        }
        let a_smem = match (a_regs, self.pipelined_tile(a)) {
            (Some(_), _) => None,
            (None, Some(t)) => Some(t),
            (None, None) => Some(match self.pipe.hoisted.get(&a) {
                Some(t) => format!("tsr_saddr_of({t})"),
                None => {
                    wrote = true;
                    format!(
                        "tsr_saddr_of({})",
                        self.swizzled_tile(a, d, "dot operand a")?
                    )
                }
            }),
        };
        let (b_src, b_nk) = match &self.f.defs[b.0 as usize] {
            Some(Op::Trans(x)) => (*x, true),
            _ => (b, false),
        };
        let b_smem = match self.pipelined_tile(b_src) {
            Some(t) => t,
            None => match self.pipe.hoisted.get(&b_src) {
                Some(t) => format!("tsr_saddr_of({t})"),
                None => {
                    wrote = true;
                    format!(
                        "tsr_saddr_of({})",
                        self.swizzled_tile(b_src, d, "dot operand b")?
                    )
                }
            },
        };
        if wrote {
            self.barrier("  // the operand tiles are in shared memory");
        }
        let name = self.dot_accumulator(id, acc, src)?;
        let (mt, nt) = (f.mt, f.nt);
        let mma = if d == DType::BF16 {
            "tsr_mma_bf16"
        } else {
            "tsr_mma_f16"
        };
        self.open(format!(
            "{{  // {name} += a·b: warp (wrow, wcol) owns rows wrow*{}.., columns wcol*{}..",
            f.warp_row_step(),
            nt * 8
        ));
        self.line(format!(
            "const int wrow = warp / {}, wcol = warp % {};",
            f.wn, f.wn
        ));
        self.line("(void)wrow; (void)wcol;");
        self.ldmatrix_lane_bases(a_smem.as_deref(), &b_smem, b_nk, f, (kk, n));
        self.line("#pragma unroll");
        self.open(format!(
            "for (int kstep = 0; kstep < {}; ++kstep) {{",
            kk / 16
        ));
        self.line(format!("unsigned fa[{mt}][4], fb[{nt}][2];"));
        if let Some(al) = a_regs {
            self.a_from_registers(a, al, d, f, kk)?;
        }
        self.ldmatrix_from_bases(a_smem.is_some(), b_nk, f, (kk, n));
        self.line("#pragma unroll");
        self.line(format!("for (int mi = 0; mi < {mt}; ++mi)"));
        self.line("#pragma unroll");
        self.line(format!(
            "  for (int ni = 0; ni < {nt}; ++ni) {mma}({name} + (mi * {nt} + ni) * 4, fa[mi], fb[ni]);"
        ));
        self.close("}");
        self.close("}");
        let _ = m;
        self.regs[id.0 as usize] = true;
        Ok(())
    }

    /// `EmitOptions::frag_rows`: the layout of A when it can enter the `mma` from its
    /// registers: A `[M, K]` is in the accumulator layout of the same warp rows as the
    /// `dot` (`wn` 1 for both: each warp holds whole rows), so a lane's two n8 tiles `2k`
    /// and `2k + 1` of A are the k16 A fragment of k step `k` (rows g and g + 8, columns
    /// 2q, 2q + 1 and 8 more: PTX ISA, mma.m16n8k16's A and C fragments).
    fn a_in_registers(&mut self, a: ValueId, f: Frag) -> Option<usize> {
        if !self.a_fits_registers(a, f) {
            return None;
        }
        self.lay_of_value(a).ok()
    }

    /// Whether A (of a `dot` on fragment `f`) enters the `mma` from its registers
    /// ([`Self::a_in_registers`]), from the plans alone (before any layout is built).
    pub(super) fn a_fits_registers(&self, a: ValueId, f: Frag) -> bool {
        let in_smem = self.pipe.hoisted.contains_key(&a) || self.pipe.loads.contains_key(&a);
        if !self.frag_rows || f.wn != 1 || f.interleaved || in_smem {
            return false;
        }
        self.frag_shapes
            .get(&self.k.ty(a).dims())
            .is_some_and(|fa| (fa.wm, fa.wn, fa.mt, fa.interleaved) == (f.wm, 1, f.mt, false))
    }

    /// `x.to(bf16)` (x f32) read only by a `dot` that takes it from registers: the `mma`
    /// packs x itself ([`Self::a_from_registers`]), so the cast needs no registers of its
    /// own (no dead array in the generated C).
    pub(super) fn casts_packed_by_mma(&self) -> Vec<ValueId> {
        let readers = super::pipeline::readers(self.k);
        let mut out = vec![];
        for (id, plan) in &self.dot_plans {
            let (Some(f), None) = (plan.mma, plan.wgmma) else {
                continue;
            };
            let Some(Op::Dot { a, .. }) = &self.f.defs[id.0 as usize] else {
                continue;
            };
            let from_f32 = matches!(self.f.defs[a.0 as usize], Some(Op::Cast(x))
                if self.k.ty(x).elem == Elem::Num(DType::F32));
            let only_this_dot = readers
                .get(a)
                .is_some_and(|r| r.iter().all(|x| *x == Some(*id)));
            if from_f32 && only_this_dot && self.a_fits_registers(*a, f) {
                out.push(*a);
            }
        }
        out
    }

    /// In a k step: `fa` from A's registers (layout `al`): fragment register `2h + c` of
    /// m16 tile mi is A's n8 tile `2 kstep + c`, slots `2h` and `2h + 1` (row g + 8h).
    fn a_from_registers(&mut self, a: ValueId, al: usize, d: DType, f: Frag, kk: usize) -> R<()> {
        let nta = kk / 8;
        let pack = if d == DType::BF16 {
            "tsr_pack_bf16"
        } else {
            "tsr_pack_f16"
        };
        // `x.to(bf16)` of an f32 x: the pack rounds x itself, the same bits.
        let a = match self.f.defs[a.0 as usize] {
            Some(Op::Cast(x)) if self.k.ty(x).elem == Elem::Num(DType::F32) => x,
            _ => a,
        };
        let at = |me: &Self, s: String| -> R<String> {
            Ok(strip(&me.access(a, &At::Slot { lay: al, s })?))
        };
        self.line(
            "// A from registers: its n8 tiles 2 kstep and 2 kstep + 1 are this k step's fragment",
        );
        self.line("#pragma unroll");
        self.open(format!("for (int mi = 0; mi < {}; ++mi) {{", f.mt));
        for r in 0..4 {
            let base = format!("(mi * {nta} + 2 * kstep + {}) * 4 + {}", r / 2, 2 * (r % 2));
            let lo = at(self, base.clone())?;
            let hi = at(self, format!("{base} + 1"))?;
            self.line(format!("fa[mi][{r}] = {pack}({lo}, {hi});"));
        }
        self.close("}");
        Ok(())
    }

    /// A tensor-core `dot`'s result array in the accumulator layout, initialised from `acc`
    /// (or zeros); returns its name.
    pub(super) fn dot_accumulator(
        &mut self,
        id: ValueId,
        acc: Option<ValueId>,
        src: &Src,
    ) -> R<String> {
        let lay = self.lay_of_value(id)?;
        let name = self.value_name(id, src);
        let slots = self.layouts[lay].slots();
        self.line(format!("float {name}[{slots}];"));
        match acc {
            Some(c) => {
                let e = self.access(c, &At::Slot { lay, s: "s".into() })?;
                self.open_slots(lay, "s");
                self.line(format!("{name}[s] = {};", strip(&e)));
                self.close("}");
            }
            None => {
                self.open_slots(lay, "s");
                self.line(format!("{name}[s] = 0.0f;"));
                self.close("}");
            }
        }
        Ok(name)
    }
}

impl Emitter<'_> {
    /// Before the k steps: `lds_a[j]`, `lds_b[j]`, each lane's shared addresses for chunk
    /// residue `2 * j` (see [`LaneBases`]); `a_smem`, `b_smem`: the tiles' 32-bit addresses.
    fn ldmatrix_lane_bases(
        &mut self,
        a_smem: Option<&str>,
        b_smem: &str,
        b_nk: bool,
        f: Frag,
        (kk, n): (usize, usize),
    ) {
        let nt = f.nt;
        let la = LaneBases::new(kk, kk / 16);
        let lb = if b_nk {
            LaneBases::new(kk, kk / 16)
        } else {
            LaneBases::new(n, nt / 2)
        };
        match a_smem {
            Some(a_smem) => {
                self.line(format!(
                    "// ldmatrix addresses: per lane, {} + {} shared addresses (one per residue of the swizzle's chunk XOR); each ldmatrix adds a constant",
                    la.count, lb.count
                ));
                self.line(format!(
                    "tsr_saddr lds_a[{}], lds_b[{}];",
                    la.count, lb.count
                ));
                // A: lane l at row wrow * 16mt + l % 16 (interleaved: wrow * 16), chunk 2j + l / 16.
                let arow = format!("wrow * {} + lane % 16", f.warp_row_step());
                self.line("#pragma unroll");
                self.line(format!(
                    "for (int j = 0; j < {}; ++j) lds_a[j] = {a_smem} + 2 * ({});",
                    la.count,
                    swz_c(&arow, "2 * j + lane / 16", kk)
                ));
            }
            None => {
                self.line(format!(
                    "// ldmatrix addresses of B: per lane, {} shared addresses (one per residue of the swizzle's chunk XOR); each ldmatrix adds a constant",
                    lb.count
                ));
                self.line(format!("tsr_saddr lds_b[{}];", lb.count));
            }
        }
        let b_off = if b_nk {
            // [n][k] rows: lane l at row wcol * 8nt + l % 8 + (l / 16) * 8, chunk 2j + (l / 8) % 2.
            let brow = format!("wcol * {} + lane % 8 + lane / 16 * 8", nt * 8);
            swz_c(&brow, "2 * j + lane / 8 % 2", kk)
        } else {
            // [k][n] rows: lane l at row l % 16, chunk wcol * nt + 2j + l / 16.
            swz_c("lane % 16", &format!("wcol * {nt} + 2 * j + lane / 16"), n)
        };
        self.line("#pragma unroll");
        self.line(format!(
            "for (int j = 0; j < {}; ++j) lds_b[j] = {b_smem} + 2 * ({b_off});",
            lb.count
        ));
    }

    /// In a k step: the fragments from `lds_a`, `lds_b`, each `ldmatrix` a base plus a
    /// constant.
    fn ldmatrix_from_bases(&mut self, a: bool, b_nk: bool, f: Frag, (kk, n): (usize, usize)) {
        let (mt, nt) = (f.mt, f.nt);
        let la = LaneBases::new(kk, kk / 16);
        if a {
            self.line("#pragma unroll");
            self.line(format!(
                "for (int mi = 0; mi < {mt}; ++mi) tsr_ldmatrix_x4(fa[mi], lds_a[{}] + 2 * (mi * {} + {} * 8));",
                la.index("kstep * 2"),
                f.mi_step() * kk,
                la.high("kstep * 2")
            ));
        }
        self.line("#pragma unroll");
        self.open(format!("for (int nj = 0; nj < {}; ++nj) {{", nt / 2));
        self.line("unsigned r4[4];");
        if b_nk {
            let lb = LaneBases::new(kk, kk / 16);
            self.line(format!(
                "tsr_ldmatrix_x4(r4, lds_b[{}] + 2 * (nj * {} + {} * 8));",
                lb.index("kstep * 2"),
                16 * kk,
                lb.high("kstep * 2")
            ));
        } else {
            let lb = LaneBases::new(n, nt / 2);
            self.line(format!(
                "tsr_ldmatrix_x4_trans(r4, lds_b[{}] + 2 * (kstep * {} + {} * 8));",
                lb.index("nj * 2"),
                16 * n,
                lb.high("nj * 2")
            ));
        }
        self.line("fb[2 * nj][0] = r4[0]; fb[2 * nj][1] = r4[1];");
        self.line("fb[2 * nj + 1][0] = r4[2]; fb[2 * nj + 1][1] = r4[3];");
        self.close("}");
    }
}
