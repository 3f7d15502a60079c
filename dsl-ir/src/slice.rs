//! The weight-prefetch slice of a kernel: only what computes the addresses of its weight
//! loads, so that a megakernel can warm a program's weights into L2 before the program's
//! stage waits for its producers (`MegaOptions::prefetch_own`). The backends emit each
//! load the slice keeps as a prefetch: nothing is loaded, stored or reduced.
use crate::ir::*;
use std::collections::{BTreeSet, HashMap};

/// `k` cut down to its loads through the pointer parameters marked in `weights` whose
/// pointer and mask (and every enclosing loop bound and branch condition) depend only on
/// program ids, constexprs, scalar parameters and loop counters, and to what computes
/// those. A kept load has no `other` (a prefetch returns nothing). Gone: every other load,
/// store, atomic, variable and reduction, and loops and branches left empty. A load whose
/// address depends on a loaded value (a position, a ticket) or on a variable is not kept:
/// its address is not known before the data is. None when no load qualifies.
pub fn prefetch_slice(k: &Kernel, weights: &[bool]) -> Option<Kernel> {
    let mut s = Slicer {
        defs: HashMap::new(),
        ivs: HashMap::new(),
        clean: HashMap::new(),
        needed: BTreeSet::new(),
        kept: BTreeSet::new(),
    };
    s.index(&k.body);
    s.select(&k.body, weights, &[]);
    if s.kept.is_empty() {
        return None;
    }
    let mut out = k.clone();
    out.name = format!("{}_prefetch", k.name);
    out.body = s.filter(&k.body);
    Some(out)
}

struct Slicer<'a> {
    /// The op of each value a `Let` defines.
    defs: HashMap<ValueId, &'a Op>,
    /// Each loop counter: its loop's start, end and step.
    ivs: HashMap<ValueId, [ValueId; 3]>,
    /// Memo: whether a value is computed from no loaded value and no variable.
    clean: HashMap<ValueId, bool>,
    /// The values the kept loads' addresses need.
    needed: BTreeSet<ValueId>,
    /// The kept loads.
    kept: BTreeSet<ValueId>,
}

impl<'a> Slicer<'a> {
    fn index(&mut self, body: &'a [Stmt]) {
        for st in body {
            match st {
                Stmt::Let { id, op, .. } => {
                    self.defs.insert(*id, op);
                }
                Stmt::For {
                    iv,
                    start,
                    end,
                    step,
                    body,
                    ..
                } => {
                    self.ivs.insert(*iv, [*start, *end, *step]);
                    self.index(body);
                }
                Stmt::If { then, els, .. } => {
                    self.index(then);
                    self.index(els);
                }
                _ => {}
            }
        }
    }

    /// Whether `v` is known before any data is: no load, no variable, no atomic's result.
    fn is_clean(&mut self, v: ValueId) -> bool {
        if let Some(&c) = self.clean.get(&v) {
            return c;
        }
        let c = if let Some(b) = self.ivs.get(&v).copied() {
            b.iter().all(|&x| self.is_clean(x))
        } else {
            match self.defs.get(&v).copied() {
                None | Some(Op::Load { .. } | Op::ReadVar(_) | Op::Dot { .. }) => false,
                Some(op) => op.operands().into_iter().all(|x| self.is_clean(x)),
            }
        };
        self.clean.insert(v, c);
        c
    }

    /// The pointer parameter a pointer value is computed from (`p + offsets`).
    fn root(&self, v: ValueId) -> Option<usize> {
        match self.defs.get(&v).copied() {
            Some(Op::Param(i)) => Some(*i),
            Some(Op::Binary(_, p, _) | Op::Broadcast(p) | Op::ExpandDims(p, _)) => self.root(*p),
            _ => None,
        }
    }

    fn need(&mut self, v: ValueId) {
        if !self.needed.insert(v) {
            return;
        }
        if let Some(b) = self.ivs.get(&v).copied() {
            b.into_iter().for_each(|x| self.need(x));
        } else if let Some(op) = self.defs.get(&v).copied() {
            op.operands().into_iter().for_each(|x| self.need(x));
        }
    }

    /// Marks the weight loads whose addresses are clean; `ctx`: the enclosing loops'
    /// bounds and branches' conditions.
    fn select(&mut self, body: &'a [Stmt], weights: &[bool], ctx: &[ValueId]) {
        for st in body {
            match st {
                Stmt::Let {
                    id,
                    op: Op::Load { ptr, mask, .. },
                    ..
                } => {
                    let weight = self
                        .root(*ptr)
                        .is_some_and(|p| weights.get(p).copied().unwrap_or(false));
                    let deps: Vec<ValueId> =
                        ctx.iter().copied().chain([*ptr]).chain(*mask).collect();
                    if weight && deps.iter().all(|&v| self.is_clean(v)) {
                        self.kept.insert(*id);
                        deps.into_iter().for_each(|v| self.need(v));
                    }
                }
                Stmt::For {
                    start,
                    end,
                    step,
                    body,
                    ..
                } => {
                    let inner: Vec<ValueId> =
                        ctx.iter().copied().chain([*start, *end, *step]).collect();
                    self.select(body, weights, &inner);
                }
                Stmt::If {
                    cond, then, els, ..
                } => {
                    let inner: Vec<ValueId> = ctx.iter().copied().chain([*cond]).collect();
                    self.select(then, weights, &inner);
                    self.select(els, weights, &inner);
                }
                _ => {}
            }
        }
    }

    fn filter(&self, body: &[Stmt]) -> Vec<Stmt> {
        let mut out = vec![];
        for st in body {
            match st {
                Stmt::Let {
                    id,
                    op: Op::Load { ptr, mask, .. },
                    src,
                } if self.kept.contains(id) => out.push(Stmt::Let {
                    id: *id,
                    op: Op::Load {
                        ptr: *ptr,
                        mask: *mask,
                        other: None,
                    },
                    src: src.clone(),
                }),
                Stmt::Let { id, .. } if self.needed.contains(id) => out.push(st.clone()),
                Stmt::For {
                    iv,
                    start,
                    end,
                    step,
                    body,
                    src,
                } => {
                    let inner = self.filter(body);
                    if !inner.is_empty() {
                        out.push(Stmt::For {
                            iv: *iv,
                            start: *start,
                            end: *end,
                            step: *step,
                            body: inner,
                            src: src.clone(),
                        });
                    }
                }
                Stmt::If {
                    cond,
                    then,
                    els,
                    src,
                } => {
                    let (t, e) = (self.filter(then), self.filter(els));
                    if !t.is_empty() || !e.is_empty() {
                        out.push(Stmt::If {
                            cond: *cond,
                            then: t,
                            els: e,
                            src: src.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        out
    }
}
