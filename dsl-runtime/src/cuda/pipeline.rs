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
use super::super::analysis::Facts;
use super::dot_plan::{swz_c, DotPlan};
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
    /// Scalar `let`s of the loop body the loads' pointers and masks need (re-evaluated for
    /// the iteration ahead), in program order.
    pub scalars: Vec<ValueId>,
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
        pipes.loops.insert(
            *iv,
            PipeLoop {
                loads,
                stages: st,
                scalars,
            },
        );
    });
    pipes
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
    /// The ring slot a pipelined load's current iteration sits in, as a pointer to its
    /// swizzled tile.
    pub(super) fn pipelined_tile(&mut self, v: ValueId) -> Option<String> {
        let lp = *self.pipe.loads.get(&v)?;
        let ring = self.pipe.ring.get(&v)?.clone();
        let counter = self.pipe.counter.get(&lp)?.clone();
        let st = self.pipe.loops[&lp].stages;
        let n = self.k.ty(v).numel();
        Some(format!("({ring} + {counter} % {st} * {n})"))
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
        let st = pl.stages;
        let mut names = vec![];
        for &v in &pl.loads {
            let t = self.k.ty(v).clone();
            let base = self.load_name(v);
            let ring = self.region(
                &format!("{base}_ring"),
                "unsigned short",
                st * t.numel(),
                format!(
                    "`{base}` ({t}) x {st} stages, swizzled 16-byte chunks, filled by cp.async"
                ),
            )?;
            self.pipe.ring.insert(v, ring);
            names.push(format!("`{base}`"));
        }
        let counter = self.fresh("ring_it");
        self.pipe.counter.insert(iv, counter.clone());
        self.line(format!(
            "// software pipelining (num_stages = {st}): {} copied by cp.async {} iteration{} ahead into a ring of {st} slots",
            names.join(", "),
            st - 1,
            if st == 2 { "" } else { "s" }
        ));
        self.line(format!("int {counter} = 0;"));
        let [start, end, step] = bounds;
        self.line("#pragma unroll");
        self.open(format!(
            "for (int st = 0; st < {}; ++st) {{  // prologue: the first iterations' tiles",
            st - 1
        ));
        self.line(format!("const int ahead = {start} + st * {step};"));
        self.issue_copies(iv, &pl, end, "st")?;
        self.line("tsr_cp_async_commit();  // one group per iteration, even an empty one");
        self.close("}");
        Ok(())
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
        self.barrier("  // everyone's have, and every warp is done with the slot refilled next");
        self.line(format!(
            "const int ahead = {ivn} + {} * {};",
            st - 1,
            bounds[2]
        ));
        self.issue_copies(iv, &pl, &bounds[1], &format!("({counter} + {})", st - 1))?;
        self.line("tsr_cp_async_commit();");
        Ok(())
    }

    /// At the end of a pipelined loop's body.
    pub(super) fn pipe_end(&mut self, iv: ValueId) {
        if let Some(c) = self.pipe.counter.get(&iv).cloned() {
            self.line(format!("++{c};"));
        }
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
    fn issue_copies(&mut self, iv: ValueId, pl: &PipeLoop, end: &str, slot: &str) -> R<()> {
        self.open(format!("if (ahead < {end}) {{"));
        let saved = self.names[iv.0 as usize].clone();
        self.names[iv.0 as usize] = "ahead".into();
        for &s in &pl.scalars {
            let (op, src) = self.let_of(s).ok_or_else(|| self.err("internal: scalar"))?;
            let src = Src {
                name: String::new(),
                ..src
            };
            self.let_(s, &op, &src)?;
        }
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
            let p = self.access(ptr, &At::Idx(idx.clone()))?;
            let m = match mask {
                Some(m) => strip(&self.access(m, &At::Idx(idx))?),
                None => "true".into(),
            };
            let dst = format!(
                "{ring} + {slot} % {} * {} + {}",
                pl.stages,
                rows * cols,
                swz_c(&format!("cq / {cpr}"), &format!("cq % {cpr}"), cols)
            );
            self.line("#pragma unroll");
            self.open(format!(
                "for (int q = 0; q < {per}; ++q) {{  // `{}`: 16-byte chunks, masked ones zero-filled",
                self.load_name(v)
            ));
            self.line(format!("const int cq = tid + q * {};", self.threads));
            let guard = chunks % self.threads != 0;
            if guard {
                self.open(format!("if (cq < {chunks}) {{"));
            }
            self.line(format!("tsr_cp_async16({dst}, {}, {m});", strip(&p)));
            if guard {
                self.close("}");
            }
            self.close("}");
        }
        self.names[iv.0 as usize] = saved;
        self.close("}");
        Ok(())
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
