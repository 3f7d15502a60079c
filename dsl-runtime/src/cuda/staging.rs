//! Staged loads: a tile load from memory that nothing writes while the (mega)kernel runs
//! (a weight matrix) can be *issued early*, before the program's inputs are ready, as a
//! bulk copy into shared memory (sm_90's copy engine, `cp.async.bulk`), and read from
//! there when the program reaches it. A megakernel issues a program's weights before it
//! waits for the stages that produce its activations, and keeps several programs' worth in
//! flight, so the weight stream does not stop at every synchronisation.
//!
//! The emitter writes two functions per staged kernel from the same IR:
//! - `<name>_issue(pids, params, stage, range, bar)`: only the pure index arithmetic the
//!   staged loads' pointers and masks need; every thread reduces the byte range its
//!   unmasked vectors cover into `range` (min, max over the CTA), then thread 0 writes each
//!   load's header into `stage` (where the range starts, and its length: 0 when it is not
//!   one piece that fits the load's region) and issues one bulk copy per load, whose bytes
//!   complete the mbarrier `bar`;
//! - `<name>_body(.., smem, stage)`: as always, except that a staged load takes each vector
//!   from the copy when the header's range holds it, and from global memory otherwise.
//!
//! So correctness never depends on the copy: the region is a faithful copy of read-only
//! bytes, and whatever it does not hold is loaded as before (a strided tile, the later
//! iterations of a loop, a GPU without the copy engine). `stage` holds a 16-byte header per
//! staged load (at most [`MAX_STAGED`]), then each load's region (its tile's bytes).
//!
//! Which loads qualify (`candidates`): a tile load through a pointer parameter marked early
//! (`EmitOptions::early`) whose pointer, mask and `other` are pure index arithmetic that
//! depends on the program id (loads every program shares, like a norm's weights, stay in
//! L2), at the top level of the kernel or in a top-level `for` loop, whose *first*
//! iteration is staged. The emitter then stages those that lower to one 16-byte access per
//! vector with one predicate each.
use super::analysis::Facts;
use dsl_ir::{Kernel, Op, Stmt, ValueId};
use std::collections::{BTreeMap, HashSet};

/// Staged loads per kernel at most (the headers take 16 bytes each).
pub(crate) const MAX_STAGED: usize = 8;
/// Bytes of headers at the start of `stage`.
pub(crate) const HEADER_BYTES: usize = 16 * MAX_STAGED;

/// Where one staged load lives in `stage`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Its header: `stage + 16 * k`.
    pub k: usize,
    /// Its region: `stage + data`, `region` bytes (the tile's).
    pub data: usize,
    pub region: usize,
}

/// What the emitter needs to stage loads, in either of its two passes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Staging {
    /// Loads that may be staged (everything but the lowering's own conditions holds).
    pub candidates: HashSet<ValueId>,
    /// The staged loads and where each one lives in `stage`: filled by the body pass, given
    /// to the issue pass.
    pub slots: BTreeMap<ValueId, Slot>,
    /// Bytes of `stage` per program (0: nothing staged).
    pub bytes: usize,
    /// Issue pass: the values to compute (the staged loads' operands, transitively).
    pub slice: HashSet<ValueId>,
    /// Issue pass: the induction variables of loops whose first iteration is staged.
    pub loops: HashSet<ValueId>,
    /// True while emitting `<name>_issue`.
    pub issue: bool,
    /// Issue pass: write a copy's header from the load's box when it has one
    /// (`footprint.rs`), instead of reducing every thread's addresses.
    pub boxes: bool,
    /// Issue pass: the slots (`Slot::k`) whose headers came from a box.
    pub boxed: std::collections::BTreeSet<usize>,
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
pub(crate) fn slice(k: &Kernel, f: &Facts, staged: &BTreeMap<ValueId, Slot>) -> Staging {
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
        bytes: staged
            .values()
            .map(|s| s.data + s.region)
            .max()
            .unwrap_or(0),
        slice,
        loops,
        issue: true,
        candidates: staged.keys().copied().collect(),
        ..Staging::default()
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
