//! A stage body's first weight tiles as L2 prefetches (`MegaOptions::prefetch_first_loads`).
//!
//! A CTA that waits for its stage's producers outside its bodies runs this cut of its first
//! program's body before the wait: the body's top-level statements up to the first one that
//! may touch what another stage writes (a store, an atomic, a load of such memory, a loop, a
//! branch, a reduction, a `dot`), with each tile load of a pointer it may read before the
//! wait turned into a `prefetch` of the same (masked) addresses, and what only such loads
//! feed left out. Scalar loads stay loads (later addresses may need them). The tiles then
//! stream into L2 during the hop instead of after it: the hand-written probe
//! (`scripts/probe/hop_parts.cu`, docs/PERF.md session 31) put a hop at 1.69 µs as the
//! generated kernel makes it and at 1.00 µs with each CTA's first 32 KiB so prefetched.
use dsl_ir::{Kernel, Op, Stmt, ValueId};

/// The cut of `kernel`'s body described above, named `<name>_first`, or None when it
/// prefetches nothing: at most `tiles` tile loads prefetched (the cut ends before the next).
/// `before_wait[p]`: whether parameter `p` may be read before the stage's wait (a weight,
/// or what no pending stage writes: `bodies::loads_before_wait`).
pub fn first_loads_prefetch(kernel: &Kernel, before_wait: &[bool], tiles: usize) -> Option<Kernel> {
    let mut defs: Vec<Option<&Op>> = vec![None; kernel.values.len()];
    let mut dropped = vec![false; kernel.values.len()];
    let mut dropped_vars = vec![false; kernel.vars.len()];
    let mut body = vec![];
    let mut prefetches = 0;
    for s in &kernel.body {
        match s {
            Stmt::Let { id, op, src } => {
                defs[id.0 as usize] = Some(op);
                let uses = operands(op);
                if uses.iter().any(|u| dropped[u.0 as usize])
                    || matches!(op, Op::ReadVar(v) if dropped_vars[v.0 as usize])
                {
                    if matches!(op, Op::Load { .. } | Op::Reduce { .. } | Op::Dot { .. }) {
                        break;
                    }
                    dropped[id.0 as usize] = true;
                    continue;
                }
                match op {
                    Op::Load { ptr, mask, .. } => {
                        let early = root(&defs, *ptr)
                            .is_some_and(|p| before_wait.get(p).copied().unwrap_or(false));
                        if !early {
                            break;
                        }
                        if kernel.ty(*id).shape.is_empty() {
                            body.push(s.clone());
                        } else if prefetches == tiles {
                            break;
                        } else {
                            body.push(Stmt::Prefetch {
                                ptr: *ptr,
                                mask: *mask,
                                src: src.clone(),
                            });
                            dropped[id.0 as usize] = true;
                            prefetches += 1;
                        }
                    }
                    Op::Reduce { .. } | Op::Dot { .. } | Op::Trans(_) => break,
                    _ => body.push(s.clone()),
                }
            }
            Stmt::DeclVar { var, init, .. } => {
                if dropped[init.0 as usize] {
                    dropped_vars[var.0 as usize] = true;
                } else {
                    body.push(s.clone());
                }
            }
            Stmt::Prefetch { ptr, mask, .. } => {
                if dropped[ptr.0 as usize] || mask.is_some_and(|m| dropped[m.0 as usize]) {
                    break;
                }
                body.push(s.clone());
            }
            _ => break,
        }
    }
    (prefetches > 0).then(|| Kernel {
        name: format!("{}_first", kernel.name),
        body: feeding_prefetches(body, &defs),
        ..kernel.clone()
    })
}

/// `body` (straight-line) without the statements no prefetch needs.
fn feeding_prefetches(body: Vec<Stmt>, defs: &[Option<&Op>]) -> Vec<Stmt> {
    let mut needed = vec![false; defs.len()];
    let mut keep = vec![false; body.len()];
    for (i, s) in body.iter().enumerate().rev() {
        let uses = match s {
            Stmt::Prefetch { ptr, mask, .. } => [Some(*ptr), *mask].into_iter().flatten().collect(),
            Stmt::Let { id, op, .. } if needed[id.0 as usize] => operands(op),
            _ => continue,
        };
        keep[i] = true;
        for u in uses {
            needed[u.0 as usize] = true;
        }
    }
    body.into_iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(s))
        .collect()
}

/// The parameter a pointer value is rooted in (through pointer arithmetic and reshapes).
fn root(defs: &[Option<&Op>], v: ValueId) -> Option<usize> {
    match defs[v.0 as usize]? {
        Op::Param(i) => Some(*i),
        Op::Binary(_, p, _) | Op::Broadcast(p) | Op::ExpandDims(p, _) => root(defs, *p),
        _ => None,
    }
}

/// The values an op reads.
fn operands(op: &Op) -> Vec<ValueId> {
    match op {
        Op::ProgramId(_)
        | Op::NumPrograms(_)
        | Op::Param(_)
        | Op::Const(_)
        | Op::Lit(_)
        | Op::Arange { .. }
        | Op::ReadVar(_) => vec![],
        Op::Unary(_, x)
        | Op::Cast(x)
        | Op::ExpandDims(x, _)
        | Op::Broadcast(x)
        | Op::Trans(x)
        | Op::Reduce { x, .. } => vec![*x],
        Op::Binary(_, x, y) => vec![*x, *y],
        Op::Where(c, x, y) => vec![*c, *x, *y],
        Op::Load { ptr, mask, other } => {
            [Some(*ptr), *mask, *other].into_iter().flatten().collect()
        }
        Op::Dot { a, b, acc } => [Some(*a), Some(*b), *acc].into_iter().flatten().collect(),
    }
}
