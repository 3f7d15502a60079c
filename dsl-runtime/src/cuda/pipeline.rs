//! `num_stages`: loads in a `for` loop that feed a `dot` on tensor cores are issued
//! `num_stages - 1` iterations ahead by `cp.async` into a ring of `num_stages` swizzled
//! shared-memory slots, so global memory and the tensor cores overlap (Triton's software
//! pipelining of loads that feed a dot).
//!
//! ```text
//!   prologue: for st in 0..S-1: issue the copies of iteration st (if it exists); commit
//!   iteration it (k0):
//!     cp.async.wait_group S-2      this thread's copies for iteration it have landed
//!     __syncthreads()              everyone's have; every warp is done with slot (it-1) % S
//!     issue the copies of iteration it+S-1 into slot (it+S-1) % S (if it exists); commit
//!     ... the dot reads slot it % S ...
//! ```
//!
//! A load qualifies when it is in the loop's body (not nested deeper), its only reader is
//! the `dot` (directly, or through `trans` for b), its pointers are 16-byte chunks along
//! the last axis (contiguous and aligned, from the same facts as vector loads), its mask
//! is constant over each chunk and `other` is 0 (a masked chunk is zero-filled by
//! `src_bytes = 0`), and its pointers and mask are index arithmetic that can be evaluated
//! for a later iteration. Everything else keeps the plain path (registers, then shared
//! memory), and says so nowhere because nothing changed.
//!
//! A pipelined load whose pointer is affine in the loop counter with a loop-invariant
//! coefficient (`a + rows * k + k0 + j`, `b + (k0 + i) * n + cols`: [`CpStep`]) has stepped
//! copies: each thread's copy pointers are computed once, before the loop, for the first
//! iteration, and advanced by `coefficient * step` elements per issued iteration; the
//! conjuncts of its mask that do not depend on the counter (`rows < m`) are computed once
//! too, only the others (`k0 + j < k`) per iteration; and each copy's shared-memory
//! destination is a 32-bit address (`tsr_cp_async16_at`) from a base computed once. Any
//! other pipelined load (its pointer not affine in the counter, or the coefficient not
//! computable before the loop) rebuilds pointer and mask for the iteration ahead
//! (`tsr_cp_async16`).
//!
//! With `EmitOptions::ring_unroll` (off by default, a candidate) a loop whose `dot`s only
//! accumulate (a GEMM main loop; not attention's, whose body unrolled spills) runs as passes
//! of S iterations, the S iterations of a pass a `#pragma unroll` loop over the ring's
//! slots, so each one's read slot (`ring_slot`) and refilled slot (`(ring_slot + S-1) % S`)
//! are constants after unrolling (what CUTLASS's multistage mainloop does), and a stepped
//! copy's pointer is the pass's plus `ring_slot` steps (advanced by S steps per pass):
//!
//! ```text
//!   for (k0_pass = start; k0_pass < end; k0_pass += S * step)
//!     #pragma unroll
//!     for (ring_slot = 0; ring_slot < S; ++ring_slot):
//!       k0 = k0_pass + ring_slot * step; if (k0 >= end) break;   the last pass may be short
//!       ... the iteration above, slot it % S = ring_slot ...
//! ```
use super::super::analysis::Facts;
use super::super::footprint::{affine, Term};
use super::c_syntax::reg_ty;
use super::dot_plan::{swizzle_params, tile_off_c, DotPlan};
use super::{strip, At, Emitter, R};
use dsl_ir::*;
use std::collections::{BTreeMap, BTreeSet};

/// Shared memory the rings of one loop may take (of the 227 KiB an H100 program may use):
/// `num_stages` is lowered until they fit.
const RING_LIMIT: usize = 192 * 1024;

#[derive(Clone, Debug)]
pub(crate) struct PipeLoop {
    /// The pipelined loads, in program order.
    pub loads: Vec<ValueId>,
    pub stages: usize,
    /// The ring's slots: `stages`, or one more when a wgmma stays in flight (`in_flight`).
    /// Iteration `it` reads slot `it % slots` and refills slot `(it + stages - 1) % slots`.
    pub slots: usize,
    /// Scalar `let`s of the loop body the loads' pointers and masks need (re-evaluated for
    /// the iteration ahead), in program order.
    pub scalars: Vec<ValueId>,
    /// The loads with stepped copies (advanced by a fixed step per issued iteration).
    pub steps: BTreeMap<ValueId, CpStep>,
    /// `EmitOptions::ring_unroll`, for a loop whose `dot`s only accumulate: the iterations
    /// in passes of `stages`, the ring slots constants (the loop's counter is then the
    /// pass's slot, `ring_slot`, not an iteration count).
    pub passes: bool,
    /// Some `dot` of the body runs on `wgmma` (`dot_plan::plan_wgmma`): it reads the ring
    /// through the async proxy, so each thread fences its landed copies before the barrier.
    pub wgmma: bool,
    /// `EmitOptions::wgmma_in_flight`: an iteration's wgmmas retire in the next one
    /// (`wait_group 1`), so the slot they read is refilled one iteration later: one more slot.
    pub in_flight: bool,
}

/// A pipelined load whose pointer is `p(start) + (k0 - start) * per_iv` elements.
#[derive(Clone, Debug)]
pub(crate) struct CpStep {
    /// d(pointer) / d(loop counter), in elements: a term over scalars defined before the
    /// loop (or a constant).
    pub per_iv: Term,
    /// The mask's conjuncts that do not depend on the loop counter (computed once, before
    /// the loop), and those that do (evaluated for the iteration ahead).
    pub fixed: Vec<ValueId>,
    pub moving: Vec<ValueId>,
}

/// The C names of a [`CpStep`] load's per-thread state (while emitting).
#[derive(Clone, Debug)]
struct CpNames {
    /// Per copy: the pointer of the next iteration to issue.
    ptr: String,
    /// Per copy: the fixed conjuncts of the mask (`None`: there are none).
    ok: Option<String>,
    /// The pointer's step per issued iteration, in elements (`None`: it does not move).
    step: Option<String>,
    /// The ring's 32-bit shared-memory address, or (`lane`) this thread's first copy's
    /// address in slot 0: copy `q` is then `q * threads * 16` bytes further (its rows are
    /// a whole number of swizzle periods below), a constant the copy instruction takes.
    ring: String,
    lane: bool,
}

#[derive(Default)]
pub(crate) struct Pipes {
    /// By the loop's induction variable.
    pub loops: BTreeMap<ValueId, PipeLoop>,
    /// Each pipelined load's loop.
    pub loads: BTreeMap<ValueId, ValueId>,
    /// While emitting: each load's ring, each loop's iteration counter.
    ring: BTreeMap<ValueId, String>,
    /// Loop-invariant `dot` operands written to swizzled shared memory once, before the
    /// loop (attention's Q), by value.
    pub hoisted: BTreeMap<ValueId, String>,
    counter: BTreeMap<ValueId, String>,
    /// While emitting: the per-thread state of each `CpStep` load.
    cp: BTreeMap<ValueId, CpNames>,
    /// The rings a `wgmma` reads: their tiles stored in column blocks of this many elements
    /// (`dot_plan::tile_off_c`), the ring 1024-byte aligned. Absent: whole swizzled rows.
    pub blocks: BTreeMap<ValueId, usize>,
}

/// The readers of every value: `Some(id)` for a `let id = op(.., v, ..)`, `None` for a
/// statement (store, assignment, loop bound, ...).
pub(crate) fn readers(k: &Kernel) -> BTreeMap<ValueId, Vec<Option<ValueId>>> {
    let mut out: BTreeMap<ValueId, Vec<Option<ValueId>>> = BTreeMap::new();
    walk(&k.body, &mut |s| {
        let (me, reads): (Option<ValueId>, Vec<ValueId>) = match s {
            Stmt::Let { id, op, .. } => (Some(*id), operands(op)),
            Stmt::DeclVar { init, .. } => (None, vec![*init]),
            Stmt::Assign { value, .. } => (None, vec![*value]),
            Stmt::Store {
                ptr, value, mask, ..
            }
            | Stmt::Atomic {
                ptr, value, mask, ..
            } => {
                let mut v = vec![*ptr, *value];
                v.extend(mask.iter());
                (None, v)
            }
            Stmt::Prefetch { ptr, mask, .. } => {
                let mut v = vec![*ptr];
                v.extend(mask.iter());
                (None, v)
            }
            Stmt::For {
                start, end, step, ..
            } => (None, vec![*start, *end, *step]),
            Stmt::If { cond, .. } => (None, vec![*cond]),
        };
        for r in reads {
            out.entry(r).or_default().push(me);
        }
    });
    out
}

pub(crate) fn operands(op: &Op) -> Vec<ValueId> {
    match op {
        Op::Unary(_, x)
        | Op::Cast(x)
        | Op::ExpandDims(x, _)
        | Op::Broadcast(x)
        | Op::Trans(x)
        | Op::Reduce { x, .. } => vec![*x],
        Op::Binary(_, x, y) => vec![*x, *y],
        Op::Where(c, x, y) => vec![*c, *x, *y],
        Op::Load { ptr, mask, other } => {
            let mut v = vec![*ptr];
            v.extend(mask.iter().chain(other.iter()));
            v
        }
        Op::Dot { a, b, acc } => {
            let mut v = vec![*a, *b];
            v.extend(acc.iter());
            v
        }
        _ => vec![],
    }
}

/// Whether `v` is a literal zero (possibly converted or broadcast).
fn is_zero(f: &Facts, v: ValueId) -> bool {
    match &f.defs[v.0 as usize] {
        Some(Op::Lit(Lit::Float(x))) => *x == 0.0,
        Some(Op::Lit(Lit::Int(x))) => *x == 0,
        Some(Op::Cast(x) | Op::Broadcast(x)) => is_zero(f, *x),
        _ => false,
    }
}

pub(crate) fn plan(
    k: &Kernel,
    f: &Facts,
    plans: &BTreeMap<ValueId, DotPlan>,
    stages: u32,
    unroll: bool,
) -> Pipes {
    let mut pipes = Pipes::default();
    if stages < 2 {
        return pipes;
    }
    let rd = readers(k);
    let only = |v: ValueId, r: ValueId| rd.get(&v).is_some_and(|x| x == &vec![Some(r)]);
    walk(&k.body, &mut |s| {
        let Stmt::For { iv, body, .. } = s else {
            return;
        };
        let top: BTreeSet<ValueId> = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let { id, .. } => Some(*id),
                _ => None,
            })
            .collect();
        let mut loads = vec![];
        for st in body {
            let Stmt::Let {
                id,
                op: Op::Dot { a, b, .. },
                ..
            } = st
            else {
                continue;
            };
            if plans.get(id).is_none_or(|p| p.mma.is_none()) {
                continue;
            }
            let mut cands = vec![];
            if only(*a, *id) {
                cands.push(*a);
            }
            match &f.defs[b.0 as usize] {
                Some(Op::Trans(x)) if only(*b, *id) && only(*x, *b) => cands.push(*x),
                _ if only(*b, *id) => cands.push(*b),
                _ => {}
            }
            for v in cands {
                if top.contains(&v) && eligible(k, f, v) && !loads.contains(&v) {
                    loads.push(v);
                }
            }
        }
        if loads.is_empty() {
            return;
        }
        loads.sort();
        let bytes: usize = loads.iter().map(|v| k.ty(*v).numel() * 2).sum();
        let mut st = stages as usize;
        while st > 2 && st * bytes > RING_LIMIT {
            st -= 1;
        }
        if st * bytes > RING_LIMIT {
            return;
        }
        // The loop body's scalar lets that the pointers and masks depend on.
        let mut need = BTreeSet::new();
        let mut stack: Vec<ValueId> = vec![];
        for v in &loads {
            if let Some(Op::Load { ptr, mask, .. }) = &f.defs[v.0 as usize] {
                stack.push(*ptr);
                stack.extend(mask.iter());
            }
        }
        while let Some(v) = stack.pop() {
            if !need.insert(v) {
                continue;
            }
            if let Some(op) = &f.defs[v.0 as usize] {
                stack.extend(operands(op));
            }
        }
        let scalars: Vec<ValueId> = body
            .iter()
            .filter_map(|s| match s {
                Stmt::Let { id, .. } if need.contains(id) && k.ty(*id).is_scalar() => Some(*id),
                _ => None,
            })
            .collect();
        for v in &loads {
            pipes.loads.insert(*v, *iv);
        }
        let dep = counter_dependent(*iv, body);
        let inside = body_lets(body);
        let steps = loads
            .iter()
            .filter_map(|&v| Some((v, cp_step_of(k, f, *iv, &dep, &inside, v)?)))
            .collect();
        pipes.loops.insert(
            *iv,
            PipeLoop {
                loads,
                stages: st,
                slots: st,
                scalars,
                steps,
                passes: unroll && only_accumulates(&rd, f, body),
                wgmma: false,
                in_flight: false,
            },
        );
    });
    pipes
}

/// `EmitOptions::wgmma_in_flight`: each loop with a wgmma keeps one iteration's wgmmas in
/// flight when its ring has room for one more slot and every wgmma `dot` of its body
/// accumulates in place (`acc = dot(a, b, acc)`: what reads its result is the assignment
/// alone; an `acc += dot(a, b)` adds the in-flight registers, and ptxas would serialize the
/// wgmmas). Else the loop waits for them in each iteration, as without the option.
pub(crate) fn keep_wgmma_in_flight(
    k: &Kernel,
    plans: &BTreeMap<ValueId, DotPlan>,
    pipes: &mut Pipes,
) {
    let rd = readers(k);
    let in_place = |body: &[Stmt]| {
        let mut ok = true;
        walk(body, &mut |s| {
            if let Stmt::Let {
                id,
                op: Op::Dot { acc, .. },
                ..
            } = s
            {
                if plans.get(id).is_some_and(|p| p.wgmma.is_some()) {
                    let statements_only = rd.get(id).is_some_and(|r| r.iter().all(Option::is_none));
                    ok &= acc.is_some() && statements_only;
                }
            }
        });
        ok
    };
    walk(&k.body, &mut |s| {
        let Stmt::For { iv, body, .. } = s else {
            return;
        };
        let Some(pl) = pipes.loops.get_mut(iv).filter(|pl| pl.wgmma) else {
            return;
        };
        let bytes: usize = pl.loads.iter().map(|v| k.ty(*v).numel() * 2).sum();
        if (pl.stages + 1) * bytes <= RING_LIMIT && in_place(body) {
            pl.slots = pl.stages + 1;
            pl.in_flight = true;
        }
    });
}

/// Whether every `dot` of a loop body only accumulates (a GEMM main loop: `acc = dot(a, b,
/// acc)`, `acc += dot(a, b)`): its result is read by statements (the assignment) only, or by
/// one `+` that only statements read. Not attention's `s = dot(q, trans(k))`, which feeds
/// the softmax: unrolled by the ring's depth, that body spills at 255 registers (sm_90).
fn only_accumulates(
    rd: &BTreeMap<ValueId, Vec<Option<ValueId>>>,
    f: &Facts,
    body: &[Stmt],
) -> bool {
    let statements_only = |v: &ValueId| rd.get(v).is_some_and(|r| r.iter().all(Option::is_none));
    let mut ok = true;
    walk(body, &mut |s| {
        if let Stmt::Let {
            id,
            op: Op::Dot { .. },
            ..
        } = s
        {
            ok &= statements_only(id)
                || match rd.get(id).map(Vec::as_slice) {
                    Some([Some(x)]) => {
                        matches!(f.defs[x.0 as usize], Some(Op::Binary(BinOp::Add, ..)))
                            && statements_only(x)
                    }
                    _ => false,
                };
        }
    });
    ok
}

/// The values of a loop body (`iv` included) that depend on the loop counter `iv`.
fn counter_dependent(iv: ValueId, body: &[Stmt]) -> BTreeSet<ValueId> {
    let mut dep = BTreeSet::from([iv]);
    walk(body, &mut |s| {
        if let Stmt::Let { id, op, .. } = s {
            if operands(op).iter().any(|x| dep.contains(x)) {
                dep.insert(*id);
            }
        }
    });
    dep
}

/// The values a loop body defines.
fn body_lets(body: &[Stmt]) -> BTreeSet<ValueId> {
    let mut out = BTreeSet::new();
    walk(body, &mut |s| {
        if let Stmt::Let { id, .. } = s {
            out.insert(*id);
        }
    });
    out
}

/// Every scalar a term reads.
fn term_vals(t: &Term, out: &mut Vec<ValueId>) {
    match t {
        Term::Int(_) => {}
        Term::Val(v) => out.push(*v),
        Term::Add(a, b) | Term::Sub(a, b) | Term::Mul(a, b) => {
            term_vals(a, out);
            term_vals(b, out);
        }
    }
}

/// Whether a term reads no value that depends on the loop counter.
fn counter_free(t: &Term, dep: &BTreeSet<ValueId>) -> bool {
    let mut vs = vec![];
    term_vals(t, &mut vs);
    vs.iter().all(|v| !dep.contains(v))
}

/// d(t) / d(iv) as a term free of the counter, when `t` is affine in it (`dep`: the values
/// that depend on the counter; a scalar `let` of the body that does is expanded through
/// `+`, `-` and `*`).
fn d_counter(
    k: &Kernel,
    f: &Facts,
    t: &Term,
    iv: ValueId,
    dep: &BTreeSet<ValueId>,
) -> Option<Term> {
    let d = |t: &Term| d_counter(k, f, t, iv, dep);
    Some(match t {
        Term::Int(_) => Term::Int(0),
        Term::Val(v) if *v == iv => Term::Int(1),
        Term::Val(v) if !dep.contains(v) => Term::Int(0),
        Term::Val(v) => {
            if !k.ty(*v).is_scalar() || k.ty(*v).elem != Elem::Num(DType::I32) {
                return None;
            }
            let Some(Op::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), x, y)) =
                &f.defs[v.0 as usize]
            else {
                return None;
            };
            let (x, y) = (Box::new(Term::Val(*x)), Box::new(Term::Val(*y)));
            d(&match op {
                BinOp::Add => Term::Add(x, y),
                BinOp::Sub => Term::Sub(x, y),
                _ => Term::Mul(x, y),
            })?
        }
        Term::Add(a, b) => Term::add(d(a)?, d(b)?),
        Term::Sub(a, b) => Term::sub(d(a)?, d(b)?),
        Term::Mul(a, b) => match (counter_free(a, dep), counter_free(b, dep)) {
            (true, true) => Term::Int(0),
            (true, false) => Term::mul((**a).clone(), d(b)?),
            (false, true) => Term::mul(d(a)?, (**b).clone()),
            (false, false) => return None,
        },
    })
}

/// The conjuncts of a mask (`x & y & ...` over bools of the mask's shape).
fn conjuncts(k: &Kernel, f: &Facts, m: ValueId, out: &mut Vec<ValueId>) {
    match &f.defs[m.0 as usize] {
        Some(Op::Binary(BinOp::And, x, y))
            if k.ty(m).elem == Elem::Num(DType::Bool)
                && k.ty(*x).dims() == k.ty(m).dims()
                && k.ty(*y).dims() == k.ty(m).dims() =>
        {
            conjuncts(k, f, *x, out);
            conjuncts(k, f, *y, out);
        }
        _ => out.push(m),
    }
}

/// Whether the copies of pipelined load `v` of the loop over `iv` can advance by a fixed
/// step (its pointer affine in the counter, the coefficient computable before the loop),
/// and how its mask splits. `None`: the load keeps the generic copies.
fn cp_step_of(
    k: &Kernel,
    f: &Facts,
    iv: ValueId,
    dep: &BTreeSet<ValueId>,
    inside: &BTreeSet<ValueId>,
    v: ValueId,
) -> Option<CpStep> {
    let Some(Op::Load { ptr, mask, .. }) = &f.defs[v.0 as usize] else {
        return None;
    };
    let a = affine(k, f, *ptr)?;
    if !counter_free(&a.ci, dep) || !counter_free(&a.cj, dep) {
        return None;
    }
    let per_iv = d_counter(k, f, &a.base, iv, dep)?;
    let mut vs = vec![];
    term_vals(&per_iv, &mut vs);
    // A parameter read in the body (`%77 = param n`) has its name everywhere.
    let before_loop = |v: &ValueId| {
        !dep.contains(v)
            && (!inside.contains(v) || matches!(f.defs[v.0 as usize], Some(Op::Param(_))))
    };
    if !vs.iter().all(before_loop) {
        return None;
    }
    let mut leaves = vec![];
    if let Some(m) = mask {
        conjuncts(k, f, *m, &mut leaves);
    }
    let (moving, fixed) = leaves.into_iter().partition(|l| dep.contains(l));
    Some(CpStep {
        per_iv,
        fixed,
        moving,
    })
}

/// A load that can be a `cp.async` copy of whole 16-byte chunks.
fn eligible(k: &Kernel, f: &Facts, v: ValueId) -> bool {
    let Some(Op::Load { ptr, mask, other }) = &f.defs[v.0 as usize] else {
        return false;
    };
    let t = k.ty(v);
    let d = t.elem.num();
    if t.rank() != 2 || !matches!(d, Some(DType::BF16 | DType::F16)) {
        return false;
    }
    let cols = t.dims()[1];
    let a = f.aff[ptr.0 as usize];
    let mask_ok = mask.is_none_or(|m| f.pure[m.0 as usize] && f.cst[m.0 as usize] >= 8);
    cols.is_multiple_of(8)
        && a.stride == Some(1)
        && a.div % 8 == 0
        && f.pure[ptr.0 as usize]
        && mask_ok
        && other.is_none_or(|o| is_zero(f, o))
}

impl Emitter<'_> {
    /// The ring slot a pipelined load's current iteration sits in: the 32-bit shared-memory
    /// address of its swizzled tile (a `tsr_saddr` expression).
    pub(super) fn pipelined_tile(&mut self, v: ValueId) -> Option<String> {
        let lp = *self.pipe.loads.get(&v)?;
        let ring = self.pipe.ring.get(&v)?.clone();
        let counter = self.pipe.counter.get(&lp)?.clone();
        let st = self.pipe.loops[&lp].slots;
        let n = self.k.ty(v).numel();
        Some(if self.pipe.loops[&lp].passes {
            // A constant slot once the pass is unrolled: the ring's base plus slot * bytes.
            format!("tsr_saddr_of({ring}) + {counter} * {}", n * 2)
        } else {
            format!("tsr_saddr_of(({ring} + {counter} % {st} * {n}))")
        })
    }

    /// A pipelined load: nothing to do here (its copies were issued ahead).
    pub(super) fn pipelined_load(&mut self, id: ValueId, src: &Src) -> R<bool> {
        let Some(lp) = self.pipe.loads.get(&id).copied() else {
            return Ok(false);
        };
        let name = self.value_name(id, src);
        let st = self.pipe.loops[&lp].stages;
        self.line(format!(
            "// `{name}`: already in shared memory, copied {} iteration{} ahead by cp.async",
            st - 1,
            if st == 2 { "" } else { "s" }
        ));
        Ok(true)
    }

    /// Before a pipelined loop (`iv` already named): the rings, the iteration counter and
    /// the prologue's copies. `bounds`: the loop's start, end and step as C.
    pub(super) fn pipe_prologue(&mut self, iv: ValueId, bounds: &[String; 3]) -> R<()> {
        let Some(pl) = self.pipe.loops.get(&iv).cloned() else {
            return Ok(());
        };
        let (st, slots) = (pl.stages, pl.slots);
        let mut names = vec![];
        for &v in &pl.loads {
            let t = self.k.ty(v).clone();
            let base = self.load_name(v);
            let what = match self.pipe.blocks.get(&v) {
                Some(w) => format!(
                    "`{base}` ({t}) x {slots} slots in column blocks of {w}, swizzled 16-byte chunks (wgmma's {}B swizzle), filled by cp.async",
                    2 * w
                ),
                None => format!(
                    "`{base}` ({t}) x {st} stages, swizzled 16-byte chunks, filled by cp.async"
                ),
            };
            // wgmma's swizzle is on address bits: its blocks' 8-row atoms 1024-byte aligned.
            let align = if self.pipe.blocks.contains_key(&v) {
                1024
            } else {
                16
            };
            let ring = self.region_aligned(
                &format!("{base}_ring"),
                "unsigned short",
                slots * t.numel(),
                what,
                align,
            )?;
            self.pipe.ring.insert(v, ring);
            names.push(format!("`{base}`"));
        }
        let counter = self.fresh(if pl.passes { "ring_slot" } else { "ring_it" });
        self.pipe.counter.insert(iv, counter.clone());
        self.line(format!(
            "// software pipelining (num_stages = {st}): {} copied by cp.async {} iteration{} ahead into a ring of {slots} slots{}",
            names.join(", "),
            st - 1,
            if st == 2 { "" } else { "s" },
            if pl.in_flight {
                " (one more than the stages: an iteration's wgmmas read their slot until the next iteration's wait)"
            } else {
                ""
            }
        ));
        if pl.wgmma {
            self.wgmma_align_check();
        }
        if !pl.passes {
            self.line(format!("int {counter} = 0;"));
        }
        let [start, end, step] = bounds;
        self.cp_state(iv, &pl, start, step)?;
        self.line("#pragma unroll");
        self.open(format!(
            "for (int st = 0; st < {}; ++st) {{  // prologue: the first iterations' tiles",
            st - 1
        ));
        self.line(format!("const int ahead = {start} + st * {step};"));
        self.issue_copies(iv, &pl, end, "st", None)?;
        self.line("tsr_cp_async_commit();  // one group per iteration, even an empty one");
        self.close("}");
        Ok(())
    }

    /// `EmitOptions::ring_unroll`: opens a pipelined loop as passes of S iterations, each
    /// pass a `#pragma unroll` loop over the ring's slots (`name`: the loop variable, defined
    /// per iteration; `bounds`: start, end and step as C), closed by
    /// [`Self::pipe_close_passes`]. `false`: not a loop in passes ([`PipeLoop::passes`]; the
    /// caller opens the plain loop).
    pub(super) fn pipe_open_passes(
        &mut self,
        iv: ValueId,
        name: &str,
        bounds: &[String; 3],
    ) -> bool {
        // A pass is one turn of the ring (`slots` iterations).
        let Some((stages, st)) = self
            .pipe
            .loops
            .get(&iv)
            .filter(|pl| pl.passes)
            .map(|pl| (pl.stages, pl.slots))
        else {
            return false;
        };
        let slot = self.pipe.counter[&iv].clone();
        let pass = self.fresh(&format!("{name}_pass"));
        let [start, end, step] = bounds;
        let step = if step.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            step.clone()
        } else {
            format!("({step})")
        };
        self.open(format!(
            "for (int {pass} = {start}; {pass} < {end}; {pass} += {st} * {step}) {{  // passes of {st} iterations: the ring slots are constants"
        ));
        self.line("#pragma unroll");
        self.open(format!(
            "for (int {slot} = 0; {slot} < {st}; ++{slot}) {{  // reads ring slot {slot}, refills slot ({slot} + {}) % {st}",
            stages - 1
        ));
        self.line(format!("const int {name} = {pass} + {slot} * {step};"));
        self.line(format!(
            "if ({name} >= {end}) break;  // the last pass: fewer than {st} iterations left"
        ));
        true
    }

    /// Closes the slot loop [`Self::pipe_open_passes`] opened, advances the stepped copies'
    /// pointers by a pass (S iterations), and closes the pass loop.
    pub(super) fn pipe_close_passes(&mut self, iv: ValueId) {
        self.close("}");
        let pl = self.pipe.loops[&iv].clone();
        let st = pl.slots;
        let mut first = true;
        for &v in &pl.loads {
            let Some(CpNames {
                ptr,
                step: Some(step),
                ..
            }) = self.pipe.cp.get(&v).cloned()
            else {
                continue;
            };
            if first {
                self.line(format!(
                    "// the pass's copies read their pointers at slot * step: advance them by {st} steps"
                ));
                first = false;
            }
            let per = (self.k.ty(v).numel() / 8).div_ceil(self.threads);
            self.line("#pragma unroll");
            self.line(format!(
                "for (int q = 0; q < {per}; ++q) {ptr}[q] += {st} * {step};"
            ));
        }
        self.close("}");
    }

    /// Before a loop: the tensor-core `dot` operands of its body that are defined outside
    /// it go to shared memory once, here, instead of in every iteration.
    pub(super) fn hoist_operands(&mut self, body: &[Stmt]) -> R<()> {
        let mut inside = BTreeSet::new();
        walk(body, &mut |s| {
            if let Stmt::Let { id, .. } = s {
                inside.insert(*id);
            }
        });
        let mut any = false;
        for s in body {
            let Stmt::Let {
                id,
                op: Op::Dot { a, b, .. },
                ..
            } = s
            else {
                continue;
            };
            if self.dot_plans.get(id).is_none_or(|p| p.mma.is_none()) {
                continue;
            }
            let d = self
                .k
                .ty(*a)
                .elem
                .num()
                .expect("a tensor-core dot has numbers");
            let b_src = match &self.f.defs[b.0 as usize] {
                Some(Op::Trans(x)) => *x,
                _ => *b,
            };
            for (v, what) in [(*a, "dot operand a"), (b_src, "dot operand b")] {
                if inside.contains(&v)
                    || self.pipe.loads.contains_key(&v)
                    || self.pipe.hoisted.contains_key(&v)
                {
                    continue;
                }
                self.line(format!(
                    "// `{}` does not change in the loop: to shared memory once, before it",
                    self.load_name(v)
                ));
                let t = self.swizzled_tile(v, d, what)?;
                self.pipe.hoisted.insert(v, t);
                any = true;
            }
        }
        if any {
            self.barrier("");
        }
        Ok(())
    }

    /// At the top of a pipelined loop's body.
    pub(super) fn pipe_iteration(&mut self, iv: ValueId, bounds: &[String; 3]) -> R<()> {
        let Some(pl) = self.pipe.loops.get(&iv).cloned() else {
            return Ok(());
        };
        let st = pl.stages;
        let counter = self.pipe.counter[&iv].clone();
        let ivn = self.names[iv.0 as usize].clone();
        self.line(format!(
            "tsr_cp_async_wait<{}>();  // this thread's copies for this iteration have landed",
            st - 2
        ));
        if pl.wgmma {
            self.line("tsr_fence_proxy_async();  // cp.async wrote through the generic proxy; wgmma reads through the async proxy");
        }
        self.barrier("  // everyone's have, and every warp is done with the slot refilled next");
        self.line(format!(
            "const int ahead = {ivn} + {} * {};",
            st - 1,
            bounds[2]
        ));
        // Off: an iteration count; on: the pass's slot (`ring_slot`), its refill a constant,
        // and the stepped pointers at that slot's offset from the pass's.
        let in_pass = pl.passes.then_some(counter.as_str());
        self.issue_copies(
            iv,
            &pl,
            &bounds[1],
            &format!("({counter} + {})", st - 1),
            in_pass,
        )?;
        self.line("tsr_cp_async_commit();");
        Ok(())
    }

    /// Whether some copy is stepped (issued by `tsr_cp_async16_at`).
    pub(crate) fn uses_stepped_copies(&self) -> bool {
        !self.pipe.cp.is_empty()
    }

    /// After a pipelined loop whose wgmmas stay in flight: wait for the last iteration's, and
    /// hold the accumulators the loop carries (`vars`: the C names of its assigned tiles of
    /// a wgmma accumulator's shape) until then.
    pub(super) fn pipe_after(&mut self, iv: ValueId, vars: &[(String, usize)]) {
        if !self.pipe.loops.get(&iv).is_some_and(|pl| pl.in_flight) {
            return;
        }
        self.line("tsr_wgmma_wait<0>();  // the last iteration's wgmmas");
        for (v, slots) in vars {
            self.line(format!("tsr_wgmma_hold<{slots}>({v});"));
        }
    }

    /// At the end of a pipelined loop's body.
    pub(super) fn pipe_end(&mut self, iv: ValueId) {
        if self.pipe.loops.get(&iv).is_some_and(|pl| pl.passes) {
            return;
        }
        if let Some(c) = self.pipe.counter.get(&iv).cloned() {
            self.line(format!("++{c};"));
        }
    }

    /// The column block of load `v`'s ring tile (its whole row unless a `wgmma` reads it).
    fn ring_block(&self, v: ValueId) -> usize {
        let cols = self.k.ty(v).dims()[1];
        self.pipe.blocks.get(&v).copied().unwrap_or(cols)
    }

    /// The element offset in a slot of load `v`'s ring of 16-byte chunk `cq` (C: its index
    /// in the tile, row-major).
    fn ring_off(&self, v: ValueId, cq: &str) -> String {
        let dims = self.k.ty(v).dims();
        let cpr = dims[1] / 8;
        tile_off_c(
            &format!("{cq} / {cpr}"),
            &format!("{cq} % {cpr}"),
            dims[0],
            dims[1],
            self.ring_block(v),
        )
    }

    /// Bytes between a thread's copy `q` and `q + 1` of load `v` (stepped copies from one
    /// base per thread): `threads / cpr` rows of a column block further, the same chunk.
    fn lane_copy_step(&self, v: ValueId) -> usize {
        let cpr = self.k.ty(v).dims()[1] / 8;
        self.threads / cpr * self.ring_block(v) * 2
    }

    fn load_name(&self, v: ValueId) -> String {
        let mut name = String::new();
        walk(&self.k.body, &mut |s| {
            if let Stmt::Let { id, src, .. } = s {
                if *id == v && !src.name.is_empty() {
                    name = src.name.clone();
                }
            }
        });
        if name.is_empty() {
            format!("v{}", v.0)
        } else {
            name
        }
    }

    /// The copies of iteration `ahead` (a C variable in scope) into ring slot `slot % S`:
    /// the loop variable and the scalars the pointers need are re-evaluated for it.
    /// `in_pass`: in a pass of `EmitOptions::ring_unroll`, the pass's slot (C): a stepped
    /// pointer is then read at `slot * step` from the pass's (a constant offset once
    /// unrolled, for a constant step) and advanced once per pass ([`Self::pipe_close_passes`]);
    /// otherwise each copy advances its pointer by a step.
    fn issue_copies(
        &mut self,
        iv: ValueId,
        pl: &PipeLoop,
        end: &str,
        slot: &str,
        in_pass: Option<&str>,
    ) -> R<()> {
        self.open(format!("if (ahead < {end}) {{"));
        let saved = self.names[iv.0 as usize].clone();
        self.names[iv.0 as usize] = "ahead".into();
        self.rescalars(pl)?;
        for &v in &pl.loads {
            let Some(Op::Load { ptr, mask, .. }) = self.f.defs[v.0 as usize].clone() else {
                continue;
            };
            let dims = self.k.ty(v).dims();
            let (rows, cols) = (dims[0], dims[1]);
            let chunks = rows * cols / 8;
            let per = chunks.div_ceil(self.threads);
            let ring = self.pipe.ring[&v].clone();
            let cpr = cols / 8;
            let idx = vec![format!("cq / {cpr}"), format!("cq % {cpr} * 8")];
            if let Some(cp) = self.pipe.cp.get(&v).cloned() {
                let cs = &pl.steps[&v];
                let mut m = self.conj(&cs.moving, &idx)?;
                if let Some(ok) = &cp.ok {
                    m = if cs.moving.is_empty() {
                        format!("{ok}[q]")
                    } else {
                        format!("{ok}[q] && {m}")
                    };
                }
                let dst = if cp.lane {
                    format!(
                        "{} + {slot} % {} * {} + q * {}",
                        cp.ring,
                        pl.slots,
                        rows * cols * 2,
                        self.lane_copy_step(v)
                    )
                } else {
                    format!(
                        "{} + ({slot} % {} * {} + {}) * 2",
                        cp.ring,
                        pl.slots,
                        rows * cols,
                        self.ring_off(v, "cq")
                    )
                };
                let src = match (&cp.step, in_pass) {
                    (Some(st), Some(s)) => format!("{}[q] + {s} * {st}", cp.ptr),
                    _ => format!("{}[q]", cp.ptr),
                };
                let mut copy = vec![format!("tsr_cp_async16_at({dst}, {src}, {m});")];
                if let (Some(st), None) = (&cp.step, in_pass) {
                    copy.push(format!("{}[q] += {st};", cp.ptr));
                }
                self.chunk_loop(v, per, chunks, &copy);
                continue;
            }
            let p = self.access(ptr, &At::Idx(idx.clone()))?;
            let m = match mask {
                Some(m) => strip(&self.access(m, &At::Idx(idx))?),
                None => "true".into(),
            };
            let dst = format!(
                "{ring} + {slot} % {} * {} + {}",
                pl.slots,
                rows * cols,
                self.ring_off(v, "cq")
            );
            self.chunk_loop(
                v,
                per,
                chunks,
                &[format!("tsr_cp_async16({dst}, {}, {m});", strip(&p))],
            );
        }
        self.names[iv.0 as usize] = saved;
        self.close("}");
        Ok(())
    }

    /// Load `v`'s copies: the loop over a thread's `per` 16-byte chunks (`cq`, of `chunks`)
    /// around `copy`.
    fn chunk_loop(&mut self, v: ValueId, per: usize, chunks: usize, copy: &[String]) {
        self.line("#pragma unroll");
        self.open(format!(
            "for (int q = 0; q < {per}; ++q) {{  // `{}`: 16-byte chunks, masked ones zero-filled",
            self.load_name(v)
        ));
        self.line(format!("const int cq = tid + q * {};", self.threads));
        let guard = !chunks.is_multiple_of(self.threads);
        if guard {
            self.open(format!("if (cq < {chunks}) {{"));
        }
        for c in copy {
            self.line(c);
        }
        if guard {
            self.close("}");
        }
        self.close("}");
    }

    /// Before the prologue: for each `CpStep` load (stepped copies), each thread's
    /// copy pointers and fixed mask conjuncts for the first iteration (`start`), the
    /// pointers' step per issued iteration and the ring's 32-bit address.
    fn cp_state(&mut self, iv: ValueId, pl: &PipeLoop, start: &str, step: &str) -> R<()> {
        if pl.steps.is_empty() {
            return Ok(());
        }
        let mut names = vec![];
        let mut fill = vec![];
        for (&v, cs) in &pl.steps {
            let Some(Op::Load { ptr, .. }) = self.f.defs[v.0 as usize].clone() else {
                continue;
            };
            let base = self.load_name(v);
            names.push(format!("`{base}`"));
            let dims = self.k.ty(v).dims();
            let per = (dims[0] * dims[1] / 8).div_ceil(self.threads);
            let ring = self.pipe.ring[&v].clone();
            let cpr = dims[1] / 8;
            let (pp, mp) = swizzle_params(self.ring_block(v));
            let lane =
                self.threads.is_multiple_of(cpr) && (self.threads / cpr).is_multiple_of(pp * mp);
            let cp = CpNames {
                ptr: self.fresh(&format!("{base}_cp")),
                ok: (!cs.fixed.is_empty()).then(|| self.fresh(&format!("{base}_ok"))),
                step: (cs.per_iv != Term::Int(0)).then(|| self.fresh(&format!("{base}_step"))),
                ring: self.fresh(&format!("{ring}_s")),
                lane,
            };
            fill.push((v, ptr, per, cp.clone()));
            self.pipe.cp.insert(v, cp);
        }
        self.line(format!(
            "// {}: each thread's copy pointers once, for the first iteration, then a fixed step per issued iteration; the mask's terms that do not depend on the loop counter once",
            names.join(", ")
        ));
        for (v, ptr, per, cp) in &fill {
            let cs = &pl.steps[v];
            let ring = self.pipe.ring[v].clone();
            if cp.lane {
                self.line(format!(
                    "const tsr_saddr {} = tsr_saddr_of({ring}) + ({}) * 2;  // this thread's first chunk",
                    cp.ring,
                    self.ring_off(*v, "tid")
                ));
            } else {
                self.line(format!(
                    "const tsr_saddr {} = tsr_saddr_of({ring});",
                    cp.ring
                ));
            }
            self.line(format!(
                "{} {}[{per}];",
                reg_ty(self.k.ty(*ptr).elem),
                cp.ptr
            ));
            if let Some(ok) = &cp.ok {
                self.line(format!("bool {ok}[{per}];"));
            }
            if let Some(st) = &cp.step {
                let d = cs.per_iv.c(&|x| match self.f.defs[x.0 as usize] {
                    // Perhaps read in the body only (`%77 = param n`): not named yet.
                    Some(Op::Param(p)) => Ok(self.param_names[p].clone()),
                    _ => self.access(x, &At::Idx(vec![])).map(|e| strip(&e)),
                })?;
                self.line(format!(
                    "const long long {st} = (long long)({}) * ({step});",
                    strip(&d)
                ));
            }
        }
        self.open("{");
        self.line(format!("const int ahead = {start};"));
        let saved = self.names[iv.0 as usize].clone();
        self.names[iv.0 as usize] = "ahead".into();
        self.rescalars(pl)?;
        for (v, ptr, per, cp) in &fill {
            let cs = &pl.steps[v];
            let cols = self.k.ty(*v).dims()[1];
            let cpr = cols / 8;
            let idx = vec![format!("cq / {cpr}"), format!("cq % {cpr} * 8")];
            self.line("#pragma unroll");
            self.open(format!("for (int q = 0; q < {per}; ++q) {{"));
            self.line(format!("const int cq = tid + q * {};", self.threads));
            let p = self.access(*ptr, &At::Idx(idx.clone()))?;
            self.line(format!("{}[q] = {};", cp.ptr, strip(&p)));
            if let Some(ok) = &cp.ok {
                let m = self.conj(&cs.fixed, &idx)?;
                self.line(format!("{ok}[q] = {m};"));
            }
            self.close("}");
        }
        self.names[iv.0 as usize] = saved;
        self.close("}");
        Ok(())
    }

    /// The pipelined loads' scalars, re-evaluated (the loop counter renamed by the caller).
    fn rescalars(&mut self, pl: &PipeLoop) -> R<()> {
        for &s in &pl.scalars {
            let (op, src) = self.let_of(s).ok_or_else(|| self.err("internal: scalar"))?;
            let src = Src {
                name: String::new(),
                ..src
            };
            self.let_(s, &op, &src)?;
        }
        Ok(())
    }

    /// `a && b && ...` of mask conjuncts at one index (`true` for none).
    fn conj(&self, vs: &[ValueId], idx: &[String]) -> R<String> {
        let mut terms = vec![];
        for &c in vs {
            terms.push(self.access(c, &At::Idx(idx.to_vec()))?);
        }
        Ok(match terms.len() {
            0 => "true".into(),
            1 => strip(&terms[0]),
            _ => terms.join(" && "),
        })
    }

    fn let_of(&self, v: ValueId) -> Option<(Op, Src)> {
        let mut out = None;
        walk(&self.k.body, &mut |s| {
            if let Stmt::Let { id, op, src } = s {
                if *id == v {
                    out = Some((op.clone(), src.clone()));
                }
            }
        });
        out
    }
}
