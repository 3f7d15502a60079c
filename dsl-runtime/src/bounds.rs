//! Checks, before a GPU launch, that no access can leave its buffer, where the grid and the
//! masks make that decidable.
//!
//! An offset that is affine in the program ids, the tile lanes and the loop counters (with
//! run-time i32 arguments as known coefficients) has an exact range over the whole grid:
//! each of those variables is independent, so the extremes are reached. An access is
//! checked when it is unmasked, or masked by `offset < bound` on that same offset (the
//! `mask = offs < n` idiom), and not under an `if`. Anything else is not judged here, so this never rejects a
//! correct launch; the interpreter checks every access exactly.
use dsl_ir::*;
use std::collections::HashMap;

/// `c + Σ coef·var` over independent variables, each with an inclusive range.
#[derive(Clone, Debug, PartialEq)]
struct Affine {
    c: i64,
    terms: Vec<(usize, i64)>, // (variable, coefficient)
}

impl Affine {
    fn konst(c: i64) -> Affine {
        Affine { c, terms: vec![] }
    }
    fn var(v: usize) -> Affine {
        Affine {
            c: 0,
            terms: vec![(v, 1)],
        }
    }
    fn add(&self, o: &Affine, sign: i64) -> Affine {
        let mut r = self.clone();
        r.c += sign * o.c;
        for &(v, k) in &o.terms {
            match r.terms.iter_mut().find(|(w, _)| *w == v) {
                Some(t) => t.1 += sign * k,
                None => r.terms.push((v, sign * k)),
            }
        }
        r.terms.retain(|t| t.1 != 0);
        r
    }
    fn scale(&self, k: i64) -> Affine {
        Affine {
            c: self.c * k,
            terms: self
                .terms
                .iter()
                .map(|&(v, c)| (v, c * k))
                .filter(|t| t.1 != 0)
                .collect(),
        }
    }
    fn as_const(&self) -> Option<i64> {
        self.terms.is_empty().then_some(self.c)
    }
    fn range(&self, vars: &[(i64, i64)]) -> (i64, i64) {
        let (mut lo, mut hi) = (self.c, self.c);
        for &(v, k) in &self.terms {
            let (a, b) = (k * vars[v].0, k * vars[v].1);
            lo += a.min(b);
            hi += a.max(b);
        }
        (lo, hi)
    }
}

/// A pointer value: which parameter it points into, and its element offset.
#[derive(Clone)]
enum Val {
    Int(Affine),
    Ptr(usize, Affine),
    /// A mask that admits only lanes where `offset < bound`.
    Below(Affine, Affine),
    Unknown,
}

/// Returns an error message for the first access that provably leaves its buffer.
/// `args[i]` is the i32 value of parameter i, if it is an i32 scalar; `lens[i]` the element
/// count a pointer parameter reaches.
pub fn check(
    k: &Kernel,
    grid: [u32; 3],
    ints: &[Option<i64>],
    lens: &[Option<usize>],
) -> Result<(), String> {
    let mut vars: Vec<(i64, i64)> = vec![];
    for g in grid {
        vars.push((0, g as i64 - 1));
    }
    let mut vals: HashMap<ValueId, Val> = HashMap::new();
    walk_body(k, &k.body, &mut vars, &mut vals, ints, lens)
}

fn walk_body(
    k: &Kernel,
    body: &[Stmt],
    vars: &mut Vec<(i64, i64)>,
    vals: &mut HashMap<ValueId, Val>,
    ints: &[Option<i64>],
    lens: &[Option<usize>],
) -> Result<(), String> {
    let get =
        |vals: &HashMap<ValueId, Val>, v: &ValueId| vals.get(v).cloned().unwrap_or(Val::Unknown);
    for s in body {
        match s {
            Stmt::Let { id, op, src } => {
                let v = match op {
                    Op::ProgramId(a) => Val::Int(Affine::var(*a as usize)),
                    Op::NumPrograms(a) => Val::Int(Affine::konst(vars[*a as usize].1 + 1)),
                    Op::Lit(Lit::Int(c)) => Val::Int(Affine::konst(*c)),
                    Op::Param(i) => match (k.params[*i].kind, ints.get(*i).copied().flatten()) {
                        (ParamKind::Ptr(_), _) => Val::Ptr(*i, Affine::konst(0)),
                        (_, Some(c)) => Val::Int(Affine::konst(c)),
                        _ => Val::Unknown,
                    },
                    Op::Arange { start, end } => {
                        // A fresh variable per arange: the lanes of one tile.
                        let (s, e) = (start.as_lit().unwrap_or(0), end.as_lit().unwrap_or(1));
                        vars.push((s, e - 1));
                        Val::Int(Affine::var(vars.len() - 1))
                    }
                    Op::Broadcast(x) | Op::ExpandDims(x, _) => get(vals, x),
                    Op::Binary(b, x, y) => binary(*b, get(vals, x), get(vals, y)),
                    Op::Load { ptr, mask, .. } => {
                        access(
                            k,
                            "load",
                            &get(vals, ptr),
                            mask.map(|m| get(vals, &m)),
                            vars,
                            lens,
                            src,
                        )?;
                        Val::Unknown
                    }
                    _ => Val::Unknown,
                };
                vals.insert(*id, v);
            }
            Stmt::Prefetch { ptr, mask, src }
            | Stmt::Store { ptr, mask, src, .. }
            | Stmt::Atomic { ptr, mask, src, .. } => {
                let what = match s {
                    Stmt::Prefetch { .. } => "prefetch",
                    _ => "store",
                };
                access(
                    k,
                    what,
                    &get(vals, ptr),
                    mask.map(|m| get(vals, &m)),
                    vars,
                    lens,
                    src,
                )?;
            }
            Stmt::For {
                iv,
                start,
                end,
                step,
                body,
                ..
            } => {
                let range = match (get(vals, start), get(vals, end), get(vals, step)) {
                    (Val::Int(a), Val::Int(b), Val::Int(c)) => {
                        match (a.as_const(), b.as_const(), c.as_const()) {
                            (Some(a), Some(b), Some(c)) if c > 0 && b > a => {
                                Some((a, a + (b - 1 - a) / c * c))
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                };
                let empty = matches!((get(vals, start), get(vals, end)), (Val::Int(a), Val::Int(b))
                    if matches!((a.as_const(), b.as_const()), (Some(a), Some(b)) if b <= a));
                let iv_val = match range {
                    Some(r) => {
                        vars.push(r);
                        Val::Int(Affine::var(vars.len() - 1))
                    }
                    None => Val::Unknown,
                };
                vals.insert(*iv, iv_val);
                // A loop that provably never runs makes no access.
                if !empty {
                    walk_body(k, body, vars, vals, ints, lens)?;
                }
            }
            // A branch may guard its accesses (`if row < m { .. }`), which this analysis cannot
            // see: accesses under an `if` are not judged.
            Stmt::If { .. } => {}
            Stmt::DeclVar { .. } | Stmt::Assign { .. } => {}
        }
    }
    Ok(())
}

fn binary(b: BinOp, x: Val, y: Val) -> Val {
    match (b, x, y) {
        (BinOp::Add, Val::Int(a), Val::Int(c)) => Val::Int(a.add(&c, 1)),
        (BinOp::Sub, Val::Int(a), Val::Int(c)) => Val::Int(a.add(&c, -1)),
        (BinOp::Mul, Val::Int(a), Val::Int(c)) => match (a.as_const(), c.as_const()) {
            (Some(k), _) => Val::Int(c.scale(k)),
            (_, Some(k)) => Val::Int(a.scale(k)),
            _ => Val::Unknown,
        },
        (BinOp::Add, Val::Ptr(p, o), Val::Int(c)) => Val::Ptr(p, o.add(&c, 1)),
        (BinOp::Sub, Val::Ptr(p, o), Val::Int(c)) => Val::Ptr(p, o.add(&c, -1)),
        (BinOp::Lt, Val::Int(a), Val::Int(c)) => Val::Below(a, c),
        _ => Val::Unknown,
    }
}

fn access(
    k: &Kernel,
    what: &str,
    ptr: &Val,
    mask: Option<Val>,
    vars: &[(i64, i64)],
    lens: &[Option<usize>],
    src: &Src,
) -> Result<(), String> {
    let Val::Ptr(p, off) = ptr else { return Ok(()) };
    let Some(len) = lens.get(*p).copied().flatten() else {
        return Ok(());
    };
    let (lo, mut hi) = off.range(vars);
    match mask {
        None => {}
        // `offs < n` admits offsets up to n - 1 (when the masked offset is the pointer's).
        Some(Val::Below(a, bound)) if a == *off => match bound.as_const() {
            Some(n) => hi = hi.min(n - 1),
            None => return Ok(()),
        },
        Some(_) => return Ok(()),
    }
    if hi < lo {
        return Ok(()); // every lane is masked off
    }
    let name = &k.params[*p].name;
    if lo < 0 {
        return Err(format!(
            "the {what} at line {} (`{}`) can reach element {lo} of `{name}` (before its start)",
            src.line, src.text
        ));
    }
    if hi as u64 >= len as u64 {
        return Err(format!(
            "the {what} at line {} (`{}`) can reach element {hi} of `{name}`, which has {len} elements, with this grid and these arguments",
            src.line, src.text
        ));
    }
    Ok(())
}
