//! Facts derived from a kernel's IR: which pointer parameters it reads and writes (the
//! megakernel scheduler's hazards come from here).
use crate::ir::*;
use std::collections::BTreeSet;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Indices into `Kernel::params` of pointers the kernel loads through.
    pub reads: BTreeSet<usize>,
    /// Indices of pointers it stores or atomically updates through.
    pub writes: BTreeSet<usize>,
}

impl Kernel {
    pub fn effects(&self) -> Effects {
        let mut defs: Vec<Option<&Op>> = vec![None; self.values.len()];
        walk(&self.body, &mut |s| {
            if let Stmt::Let { id, op, .. } = s {
                defs[id.0 as usize] = Some(op);
            }
        });
        let mut e = Effects::default();
        walk_live(&self.body, &defs, &mut |s| match s {
            Stmt::Let {
                op: Op::Load { ptr, .. },
                ..
            } => e.reads.extend(self.ptr_roots(*ptr, &defs)),
            Stmt::Store { ptr, .. } | Stmt::Atomic { ptr, old: None, .. } => {
                e.writes.extend(self.ptr_roots(*ptr, &defs))
            }
            // A scalar atomic also reads what it replaces.
            Stmt::Atomic { ptr, .. } => {
                e.writes.extend(self.ptr_roots(*ptr, &defs));
                e.reads.extend(self.ptr_roots(*ptr, &defs));
            }
            _ => {}
        });
        e
    }

    /// The pointer parameters a pointer value may point into. A pointer that flows through
    /// a variable cannot be traced here: it conservatively names every pointer parameter.
    fn ptr_roots(&self, v: ValueId, defs: &[Option<&Op>]) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        let mut stack = vec![v];
        while let Some(v) = stack.pop() {
            match defs[v.0 as usize] {
                Some(Op::Param(i)) => {
                    out.insert(*i);
                }
                Some(Op::Binary(_, p, _)) | Some(Op::Broadcast(p)) | Some(Op::ExpandDims(p, _)) => {
                    stack.push(*p)
                }
                Some(Op::Where(_, a, b)) => stack.extend([*a, *b]),
                _ => {
                    out.extend(
                        self.params
                            .iter()
                            .enumerate()
                            .filter(|(_, p)| matches!(p.kind, ParamKind::Ptr(_)))
                            .map(|(i, _)| i),
                    );
                }
            }
        }
        out
    }
}

/// `walk`, but an `if` on a constant (a constexpr, once specialised) visits only the branch
/// it takes: the other one never runs, so its accesses are no hazard.
fn walk_live<'a>(body: &'a [Stmt], defs: &[Option<&Op>], f: &mut dyn FnMut(&'a Stmt)) {
    for s in body {
        f(s);
        match s {
            Stmt::For { body, .. } => walk_live(body, defs, f),
            Stmt::If {
                cond, then, els, ..
            } => match defs[cond.0 as usize] {
                Some(Op::Lit(Lit::Bool(true))) => walk_live(then, defs, f),
                Some(Op::Lit(Lit::Bool(false))) => walk_live(els, defs, f),
                _ => {
                    walk_live(then, defs, f);
                    walk_live(els, defs, f);
                }
            },
            _ => {}
        }
    }
}
