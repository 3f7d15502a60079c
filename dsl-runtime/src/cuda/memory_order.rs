//! Memory-order barriers: which global and shared-memory accesses of a program must be
//! separated by a `__syncthreads()`. Each load, store and atomic is a `MemOp` (the
//! pointer parameter it goes through and its structural address); a new access that
//! conflicts with a pending one of another thread gets a barrier first. Accesses through
//! different parameters, two loads, or the same address by the same thread never conflict,
//! nor do a loop's accesses to addresses each iteration owns alone.
use super::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum MemKind {
    Load,
    Store,
    Atomic,
}

#[derive(Clone, Debug)]
pub(super) struct MemOp {
    pub(super) root: Option<usize>,
    /// Structural pointer expression and shape; `None` for a scalar access (made by
    /// every thread, or by thread 0 for a store).
    pub(super) key: Option<String>,
    pub(super) kind: MemKind,
    /// For an access carried from an earlier iteration of a loop whose every iteration
    /// touches its own addresses (`ptr = invariant + iv + arange(0, N)`, step >= N): the
    /// key of the same access now, which it cannot overlap.
    pub(super) other_iteration_of: Option<String>,
}

impl MemOp {
    pub(super) fn conflicts(&self, o: &MemOp) -> bool {
        use MemKind::*;
        if matches!((self.kind, o.kind), (Load, Load) | (Atomic, Atomic)) {
            return false;
        }
        if let (Some(a), Some(b)) = (self.root, o.root) {
            if a != b {
                return false;
            }
        }
        let other_iter =
            |x: &MemOp, y: &MemOp| x.other_iteration_of.is_some() && x.other_iteration_of == y.key;
        if other_iter(self, o) || other_iter(o, self) {
            return false;
        }
        !(self.key.is_some() && self.key == o.key)
    }
}

impl Emitter<'_> {
    /// `__syncthreads()`: also orders every global memory access before it.
    pub(super) fn barrier(&mut self, why: &str) {
        self.line(format!("__syncthreads();{why}"));
        self.pending.clear();
        if let Some(b) = self.blocks.last_mut() {
            b.barrier = true;
        }
    }

    /// The pointer parameter a pointer value is an offset of, if it can be traced.
    pub(super) fn ptr_root(&self, v: ValueId) -> Option<usize> {
        match &self.f.defs[v.0 as usize] {
            Some(Op::Param(i)) => Some(*i),
            Some(Op::Binary(_, p, _) | Op::Broadcast(p) | Op::ExpandDims(p, _)) => {
                self.ptr_root(*p)
            }
            _ => None,
        }
    }

    /// A structural key of a pure value (equal keys: equal values at every index).
    pub(super) fn canon(&self, v: ValueId) -> String {
        let c = |x: &ValueId| self.canon(*x);
        match &self.f.defs[v.0 as usize] {
            Some(Op::Param(i)) => format!("p{i}"),
            Some(Op::ProgramId(a)) => format!("pid{a}"),
            Some(Op::NumPrograms(a)) => format!("np{a}"),
            Some(Op::Lit(l)) => format!("{l:?}"),
            Some(Op::Arange { start, end }) => format!("ar({start},{end})"),
            Some(Op::Unary(u, x)) => format!("{u:?}({})", c(x)),
            Some(Op::Binary(b, x, y)) => format!("{b:?}({},{})", c(x), c(y)),
            Some(Op::Where(a, x, y)) => format!("where({},{},{})", c(a), c(x), c(y)),
            Some(Op::Cast(x)) => format!("cast{}({})", self.k.ty(v), c(x)),
            Some(Op::ExpandDims(x, a)) => format!("ed{a}({})", c(x)),
            Some(Op::Broadcast(x)) => format!("bc{}({})", self.k.ty(v), c(x)),
            _ => format!("v{}", v.0),
        }
    }

    pub(super) fn mem_op_of(&self, ptr: ValueId, kind: MemKind) -> MemOp {
        let t = self.k.ty(ptr);
        let key = if t.is_scalar() {
            None
        } else {
            Some(format!("{}@{}", self.canon(ptr), t))
        };
        MemOp {
            root: self.ptr_root(ptr),
            key,
            kind,
            other_iteration_of: None,
        }
    }

    /// Whether `ptr`'s addresses in two iterations of the loop over `iv` (stepping by
    /// `step`) are disjoint: `ptr = terms + (iv + arange(0, n))` with `step >= n` and every
    /// other term pure and free of loop counters (the same in every iteration).
    pub(super) fn disjoint_across_iterations(
        &self,
        ptr: ValueId,
        iv: ValueId,
        step: ValueId,
    ) -> bool {
        let step = match &self.f.defs[step.0 as usize] {
            Some(Op::Lit(Lit::Int(s))) => *s,
            Some(Op::Const(c)) => match c.as_lit() {
                Some(s) => s,
                None => return false,
            },
            _ => return false,
        };
        let mut terms = vec![];
        self.add_terms(ptr, &mut terms);
        let mut strided = 0;
        for t in terms {
            if self.f.pure[t.0 as usize] && !self.uses_loop_counter(t) {
                continue;
            }
            let Some(Op::Binary(BinOp::Add, a, b)) = &self.f.defs[t.0 as usize] else {
                return false;
            };
            let is_iv = |v: &ValueId| {
                *v == iv || matches!(self.f.defs[v.0 as usize], Some(Op::Broadcast(x)) if x == iv)
            };
            let n = match (&self.f.defs[a.0 as usize], &self.f.defs[b.0 as usize]) {
                (_, Some(Op::Arange { start, end })) if is_iv(a) => {
                    end.as_lit().zip(start.as_lit())
                }
                (Some(Op::Arange { start, end }), _) if is_iv(b) => {
                    end.as_lit().zip(start.as_lit())
                }
                _ => return false,
            };
            match n {
                Some((n, 0)) if n <= step && n > 0 => strided += 1,
                _ => return false,
            }
        }
        strided == 1
    }

    /// The operands of a chain of additions (pointer or integer).
    pub(super) fn add_terms(&self, v: ValueId, out: &mut Vec<ValueId>) {
        match &self.f.defs[v.0 as usize] {
            Some(Op::Binary(BinOp::Add, a, b))
                if !matches!(
                    (&self.f.defs[a.0 as usize], &self.f.defs[b.0 as usize]),
                    (_, Some(Op::Arange { .. })) | (Some(Op::Arange { .. }), _)
                ) =>
            {
                self.add_terms(*a, out);
                self.add_terms(*b, out);
            }
            _ => out.push(v),
        }
    }

    pub(super) fn uses_loop_counter(&self, v: ValueId) -> bool {
        let u = |x: &ValueId| self.uses_loop_counter(*x);
        match &self.f.defs[v.0 as usize] {
            None => true, // a loop induction variable
            Some(Op::Unary(_, x) | Op::Cast(x) | Op::ExpandDims(x, _) | Op::Broadcast(x)) => u(x),
            Some(Op::Binary(_, x, y)) => u(x) || u(y),
            Some(Op::Where(c, x, y)) => u(c) || u(x) || u(y),
            _ => false,
        }
    }

    /// Threads of a program run unordered between barriers, but the tile semantics are
    /// sequential: before a global access that may touch what another thread of this
    /// program read or wrote since the last barrier (not the same element by the same
    /// thread), insert one. Distinct pointer parameters are assumed not to overlap unless
    /// they are the same buffer accessed at the same offsets (in-place ops).
    pub(super) fn order_memory(&mut self, op: MemOp) {
        if self.pending.iter().any(|p| p.conflicts(&op)) {
            self.barrier("  // order global memory: another thread of this program accessed it");
        }
        self.pending.push(op);
    }

    /// The memory ops of a statement list (for loops: what the previous iteration left).
    pub(super) fn mem_ops(&self, body: &[Stmt]) -> Vec<(ValueId, MemOp)> {
        let mut out = vec![];
        walk(body, &mut |s| match s {
            Stmt::Let {
                op: Op::Load { ptr, .. },
                ..
            } => out.push((*ptr, self.mem_op_of(*ptr, MemKind::Load))),
            Stmt::Store { ptr, .. } => out.push((*ptr, self.mem_op_of(*ptr, MemKind::Store))),
            Stmt::Atomic { ptr, .. } => out.push((*ptr, self.mem_op_of(*ptr, MemKind::Atomic))),
            _ => {}
        });
        out
    }

    /// Before a shared-memory region is rewritten in a loop, all threads must be done
    /// reading what the previous iteration put there. With `EmitOptions::elide_reuse_syncs`
    /// a barrier written earlier in this iteration (in the innermost loop's body, or in a
    /// branch of it that holds this rewrite) already orders them: every thread passes it
    /// after its reads of the previous iteration, and no other value uses the region.
    pub(super) fn sync_before_reuse(&mut self) {
        if self.loop_depth == 0 {
            return;
        }
        let body = self.blocks.iter().rposition(|b| b.loop_body).unwrap_or(0);
        if self.elide_reuse_syncs && self.blocks[body..].iter().any(|b| b.barrier) {
            self.line("// no barrier: every thread passed one in this iteration after the previous one's reads");
        } else {
            self.barrier("  // previous iteration's readers are done with it");
        }
    }
}
