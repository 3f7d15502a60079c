//! Staged loads: a tile load from memory that nothing writes while the (mega)kernel runs
//! (a weight matrix) can be *issued early*, before the program's inputs are ready, as
//! asynchronous copies into shared memory (`cp.async`), and read from there when the
//! program reaches it. A megakernel issues a program's weights before it waits for the
//! stages that produce its activations, and keeps several programs' worth in flight, so
//! the weight stream never waits on a synchronisation.
//!
//! The emitter writes two functions per staged kernel from the same IR:
//! - `<name>_issue(pids, params, stage)`: only the pure index arithmetic the staged loads'
//!   pointers and masks need, then one `cp.async` per 16-byte vector into `stage`;
//! - `<name>_body(.., smem, stage)`: as always, except that a staged load reads `stage`.
//!
//! Every thread copies exactly the vectors it will read itself, into its own slots
//! (`stage + offset + (q * threads + tid) * 16`), so no barrier is needed between the copy
//! and the read: the thread's own `cp.async.wait_group` suffices. Which loads qualify
//! (`candidates`): a tile load through a pointer parameter marked early
//! (`EmitOptions::early`) whose pointer, mask and `other` are pure index arithmetic that
//! depends on the program id (loads every program shares, like a norm's weights, stay in
//! L2), at the top level of the kernel or in a top-level `for` loop, whose *first*
//! iteration is staged (later iterations load from global memory). The emitter then
//! stages only those that lower to one 16-byte access per vector with one predicate each.
use super::analysis::Facts;
use dsl_ir::{Kernel, Op, Stmt, ValueId};
use std::collections::{BTreeMap, HashSet};

/// What the emitter needs to stage loads, in either of its two passes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Staging {
    /// Loads that may be staged (everything but the lowering's own conditions holds).
    pub candidates: HashSet<ValueId>,
    /// The staged loads and the byte offset of each one's slots in `stage`: filled by the
    /// body pass, given to the issue pass.
    pub slots: BTreeMap<ValueId, usize>,
    /// Bytes of `stage` per program.
    pub bytes: usize,
    /// Issue pass: the values to compute (the staged loads' operands, transitively).
    pub slice: HashSet<ValueId>,
    /// Issue pass: the induction variables of loops whose first iteration is staged.
    pub loops: HashSet<ValueId>,
    /// True while emitting `<name>_issue`.
    pub issue: bool,
}

/// The loads that may be staged, given which pointer parameters are early.
pub(crate) fn candidates(k: &Kernel, f: &Facts, early: &[bool]) -> HashSet<ValueId> {
    let mut out = HashSet::new();
    let mut consider = |s: &Stmt| {
        let Stmt::Let {
            id,
            op: Op::Load { ptr, mask, other },
            ..
        } = s
        else {
            return;
        };
        let pure = |v: &Option<ValueId>| v.is_none_or(|v| f.pure[v.0 as usize]);
        let early_root = root(f, *ptr).is_some_and(|p| early.get(p).copied().unwrap_or(false));
        if early_root
            && !k.ty(*ptr).is_scalar()
            && pure(&Some(*ptr))
            && pure(mask)
            && pure(other)
            && uses_program_id(f, *ptr)
        {
            out.insert(*id);
        }
    };
    for s in &k.body {
        match s {
            Stmt::For { body, .. } => body.iter().for_each(&mut consider),
            s => consider(s),
        }
    }
    out
}

/// For the issue pass: the values the staged loads' operands need, and the loops they
/// sit in (their start and end are needed too: the copies are issued only when the loop
/// runs at least once).
pub(crate) fn slice(k: &Kernel, f: &Facts, staged: &BTreeMap<ValueId, usize>) -> Staging {
    let mut need: Vec<ValueId> = vec![];
    let mut loops = HashSet::new();
    let operands = |op: &Op| -> Vec<ValueId> {
        match op {
            Op::Load { ptr, mask, other } => std::iter::once(*ptr)
                .chain(mask.iter().copied())
                .chain(other.iter().copied())
                .collect(),
            _ => vec![],
        }
    };
    for s in &k.body {
        match s {
            Stmt::Let { id, op, .. } if staged.contains_key(id) => need.extend(operands(op)),
            Stmt::For {
                iv,
                start,
                end,
                body,
                ..
            } => {
                let mut inner = vec![];
                for b in body {
                    if let Stmt::Let { id, op, .. } = b {
                        if staged.contains_key(id) {
                            inner.extend(operands(op));
                        }
                    }
                }
                if !inner.is_empty() {
                    loops.insert(*iv);
                    need.extend(inner);
                    need.extend([*start, *end]);
                }
            }
            _ => {}
        }
    }
    let mut slice = HashSet::new();
    while let Some(v) = need.pop() {
        if !slice.insert(v) {
            continue;
        }
        match &f.defs[v.0 as usize] {
            Some(Op::Unary(_, x) | Op::Cast(x) | Op::ExpandDims(x, _) | Op::Broadcast(x)) => {
                need.push(*x)
            }
            Some(Op::Binary(_, x, y)) => need.extend([*x, *y]),
            Some(Op::Where(c, x, y)) => need.extend([*c, *x, *y]),
            _ => {}
        }
    }
    Staging {
        slots: staged.clone(),
        bytes: 0,
        slice,
        loops,
        issue: true,
        candidates: staged.keys().copied().collect(),
    }
}

/// The pointer parameter a pointer value is an offset of.
fn root(f: &Facts, v: ValueId) -> Option<usize> {
    match &f.defs[v.0 as usize] {
        Some(Op::Param(i)) => Some(*i),
        Some(Op::Binary(_, p, _) | Op::Broadcast(p) | Op::ExpandDims(p, _)) => root(f, *p),
        _ => None,
    }
}

fn uses_program_id(f: &Facts, v: ValueId) -> bool {
    let u = |x: &ValueId| uses_program_id(f, *x);
    match &f.defs[v.0 as usize] {
        Some(Op::ProgramId(_)) => true,
        Some(Op::Unary(_, x) | Op::Cast(x) | Op::ExpandDims(x, _) | Op::Broadcast(x)) => u(x),
        Some(Op::Binary(_, x, y)) => u(x) || u(y),
        Some(Op::Where(c, x, y)) => u(c) || u(x) || u(y),
        _ => false,
    }
}
