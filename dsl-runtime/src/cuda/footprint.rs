//! The footprint of a tile load as a box, from its IR alone: one thread can compute the
//! bytes a whole program's load reads with a few scalar operations.
//!
//! A pointer tile `p[i, j]` (a 1-D tile has `j` only) is *affine* when
//! `p = base + ci·i + cj·j` (in elements) with `base`, `ci` and `cj` scalar expressions
//! over program ids, parameters, loop counters and constants; its mask is a *box* when it
//! is a conjunction of `x < bound` conditions (or `<=`), each `x` affine in one index with
//! coefficient 1 (`rows < m`, `k0 + arange(0, BK) < k`). Then the unmasked elements are
//! rows `[0, nr)` by columns `[0, nc)`, and with `cj = 1` they are one contiguous piece when
//! `nr <= 1` or `ci == nc` (whole rows of a row-major matrix). The staging issue
//! (`staging.rs`) uses this to write a copy's range without every thread reducing the
//! addresses it will read; whatever the analysis concludes, a copy only ever holds
//! read-only bytes that the body takes by address, so a box can cost speed, never
//! correctness.
use super::analysis::Facts;
use dsl_ir::{BinOp, Elem, Kernel, Lit, Op, ValueId};

/// A scalar expression over the kernel's scalar values (folded where constant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Term {
    Int(i64),
    Val(ValueId),
    Add(Box<Term>, Box<Term>),
    Sub(Box<Term>, Box<Term>),
    Mul(Box<Term>, Box<Term>),
    Min(Box<Term>, Box<Term>),
}

impl Term {
    pub(crate) fn add(a: Term, b: Term) -> Term {
        match (a, b) {
            (Term::Int(x), Term::Int(y)) => Term::Int(x + y),
            (Term::Int(0), t) | (t, Term::Int(0)) => t,
            (a, b) => Term::Add(Box::new(a), Box::new(b)),
        }
    }
    pub(crate) fn sub(a: Term, b: Term) -> Term {
        match (a, b) {
            (Term::Int(x), Term::Int(y)) => Term::Int(x - y),
            (t, Term::Int(0)) => t,
            (a, b) => Term::Sub(Box::new(a), Box::new(b)),
        }
    }
    pub(crate) fn mul(a: Term, b: Term) -> Term {
        match (a, b) {
            (Term::Int(x), Term::Int(y)) => Term::Int(x * y),
            (Term::Int(0), _) | (_, Term::Int(0)) => Term::Int(0),
            (Term::Int(1), t) | (t, Term::Int(1)) => t,
            (a, b) => Term::Mul(Box::new(a), Box::new(b)),
        }
    }
    fn min(a: Term, b: Term) -> Term {
        match (a, b) {
            (Term::Int(x), Term::Int(y)) => Term::Int(x.min(y)),
            (a, b) => Term::Min(Box::new(a), Box::new(b)),
        }
    }

    /// C for the term, given C for each scalar value it reads.
    pub fn c<E>(&self, val: &impl Fn(ValueId) -> Result<String, E>) -> Result<String, E> {
        Ok(match self {
            Term::Int(x) => format!("{x}"),
            Term::Val(v) => val(*v)?,
            Term::Add(a, b) => format!("({} + {})", a.c(val)?, b.c(val)?),
            Term::Sub(a, b) => format!("({} - {})", a.c(val)?, b.c(val)?),
            Term::Mul(a, b) => format!("({} * {})", a.c(val)?, b.c(val)?),
            Term::Min(a, b) => {
                let (a, b) = (a.c(val)?, b.c(val)?);
                format!("({a} < {b} ? {a} : {b})")
            }
        })
    }

    /// The value of the term for integer values of the scalars (tests, and the host side).
    #[cfg(test)]
    pub fn eval(&self, val: &impl Fn(ValueId) -> i64) -> i64 {
        match self {
            Term::Int(x) => *x,
            Term::Val(v) => val(*v),
            Term::Add(a, b) => a.eval(val) + b.eval(val),
            Term::Sub(a, b) => a.eval(val) - b.eval(val),
            Term::Mul(a, b) => a.eval(val) * b.eval(val),
            Term::Min(a, b) => a.eval(val).min(b.eval(val)),
        }
    }
}

/// `base + ci·i + cj·j` over a tile's indices (`i`: axis 0 of a 2-D tile; `j`: the last axis).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Affine {
    pub base: Term,
    pub ci: Term,
    pub cj: Term,
}

impl Affine {
    fn uniform(base: Term) -> Affine {
        Affine {
            base,
            ci: Term::Int(0),
            cj: Term::Int(0),
        }
    }
    fn is_uniform(&self) -> bool {
        self.ci == Term::Int(0) && self.cj == Term::Int(0)
    }
}

/// Upper bounds on the unmasked indices: `i < rows`, `j < cols` (`None`: no bound).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub rows: Option<Term>,
    pub cols: Option<Term>,
}

/// A load's footprint: `[m, n]` tile (`m` = 1 for a 1-D tile) whose unmasked elements are
/// `base + ci·i + j` for `i < clamp(rows, 0, m)`, `j < clamp(cols, 0, n)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TileBox {
    pub base: Term,
    pub ci: Term,
    pub rows: Term,
    pub cols: Term,
    pub m: usize,
    pub n: usize,
}

/// The box of a load through `ptr` under `mask`, when both have the shapes above.
pub(crate) fn tile_box(
    k: &Kernel,
    f: &Facts,
    ptr: ValueId,
    mask: Option<ValueId>,
) -> Option<TileBox> {
    let dims = k.ty(ptr).dims();
    let (m, n) = match dims.as_slice() {
        [n] => (1, *n),
        [m, n] => (*m, *n),
        _ => return None,
    };
    let a = affine(k, f, ptr)?;
    if a.cj != Term::Int(1) {
        return None;
    }
    let b = match mask {
        Some(mv) => bounds(k, f, mv)?,
        None => Bounds::default(),
    };
    Some(TileBox {
        base: a.base,
        ci: a.ci,
        rows: b.rows.unwrap_or(Term::Int(m as i64)),
        cols: b.cols.unwrap_or(Term::Int(n as i64)),
        m,
        n,
    })
}

fn is_ptr(k: &Kernel, v: ValueId) -> bool {
    matches!(k.ty(v).elem, Elem::Ptr(_))
}

fn rank(k: &Kernel, v: ValueId) -> usize {
    k.ty(v).dims().len()
}

/// `v` as an affine function of the tile's indices, if it is one.
pub(crate) fn affine(k: &Kernel, f: &Facts, v: ValueId) -> Option<Affine> {
    let def = &f.defs[v.0 as usize];
    if k.ty(v).is_scalar() {
        return match def {
            Some(Op::Lit(Lit::Int(x))) => Some(Affine::uniform(Term::Int(*x))),
            Some(Op::Const(c)) => Some(Affine::uniform(match c.as_lit() {
                Some(x) => Term::Int(x),
                None => Term::Val(v),
            })),
            // Loop counters (no def) and pure scalars are values the C has by name.
            None => Some(Affine::uniform(Term::Val(v))),
            Some(_) if f.pure[v.0 as usize] => Some(Affine::uniform(Term::Val(v))),
            Some(_) => None,
        };
    }
    match def.as_ref()? {
        Op::Arange { start, .. } => Some(Affine {
            base: Term::Int(start.as_lit()?),
            ci: Term::Int(0),
            cj: Term::Int(1),
        }),
        Op::ExpandDims(x, axis) => {
            let ax = affine(k, f, *x)?;
            if rank(k, *x) != 1 {
                return None;
            }
            Some(match axis {
                // [n] -> [1, n]: j stays j.
                0 => ax,
                // [n] -> [n, 1]: j becomes i.
                _ => Affine {
                    base: ax.base,
                    ci: ax.cj,
                    cj: Term::Int(0),
                },
            })
        }
        Op::Broadcast(x) => {
            let ax = affine(k, f, *x)?;
            if k.ty(*x).is_scalar() {
                return Some(ax);
            }
            // Along a dimension of size 1 the index is always 0: its coefficient goes.
            let (src, dst) = (k.ty(*x).dims(), k.ty(v).dims());
            if src.len() != dst.len() {
                return None;
            }
            let keep = |c: Term, d: usize| if src[d] == 1 { Term::Int(0) } else { c };
            Some(match src.len() {
                1 => Affine {
                    cj: keep(ax.cj, 0),
                    ..ax
                },
                _ => Affine {
                    base: ax.base,
                    ci: keep(ax.ci, 0),
                    cj: keep(ax.cj, 1),
                },
            })
        }
        Op::Binary(op, x, y) => {
            let (ax, ay) = (affine(k, f, *x)?, affine(k, f, *y)?);
            match op {
                BinOp::Add => Some(Affine {
                    base: Term::add(ax.base, ay.base),
                    ci: Term::add(ax.ci, ay.ci),
                    cj: Term::add(ax.cj, ay.cj),
                }),
                BinOp::Sub if !is_ptr(k, *x) && !is_ptr(k, *y) => Some(Affine {
                    base: Term::sub(ax.base, ay.base),
                    ci: Term::sub(ax.ci, ay.ci),
                    cj: Term::sub(ax.cj, ay.cj),
                }),
                BinOp::Mul => {
                    let (s, t) = if ay.is_uniform() {
                        (ay.base, ax)
                    } else if ax.is_uniform() {
                        (ax.base, ay)
                    } else {
                        return None;
                    };
                    Some(Affine {
                        base: Term::mul(t.base, s.clone()),
                        ci: Term::mul(t.ci, s.clone()),
                        cj: Term::mul(t.cj, s),
                    })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The box a mask describes, if it is a conjunction of one-index bounds.
pub(crate) fn bounds(k: &Kernel, f: &Facts, mask: ValueId) -> Option<Bounds> {
    let def = f.defs[mask.0 as usize].as_ref();
    if k.ty(mask).is_scalar() {
        return match def {
            Some(Op::Lit(Lit::Bool(true))) => Some(Bounds::default()),
            _ => None,
        };
    }
    match def? {
        Op::Binary(BinOp::And, x, y) => {
            let (bx, by) = (bounds(k, f, *x)?, bounds(k, f, *y)?);
            let both = |a: Option<Term>, b: Option<Term>| match (a, b) {
                (Some(a), Some(b)) => Some(Term::min(a, b)),
                (a, b) => a.or(b),
            };
            Some(Bounds {
                rows: both(bx.rows, by.rows),
                cols: both(bx.cols, by.cols),
            })
        }
        Op::ExpandDims(x, axis) => {
            if rank(k, *x) != 1 {
                return None;
            }
            let bx = bounds(k, f, *x)?;
            Some(match axis {
                0 => bx,
                _ => Bounds {
                    rows: bx.cols,
                    cols: None,
                },
            })
        }
        Op::Broadcast(x) => {
            if k.ty(*x).is_scalar() {
                return bounds(k, f, *x);
            }
            // A bound along a dimension of size 1 only says whether index 0 is in.
            let (src, dst) = (k.ty(*x).dims(), k.ty(mask).dims());
            let bx = bounds(k, f, *x)?;
            let grows = |d: usize| src[d] == 1 && dst[d] != 1;
            let lost = match src.len() {
                1 => grows(0) && bx.cols.is_some(),
                _ => (grows(0) && bx.rows.is_some()) || (grows(1) && bx.cols.is_some()),
            };
            (!lost).then_some(bx)
        }
        Op::Binary(op @ (BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge), x, y) => {
            // `idx < bound` (or the mirrored `bound > idx`); `<=` adds one.
            let (idx, bound, inclusive) = match op {
                BinOp::Lt => (x, y, false),
                BinOp::Le => (x, y, true),
                BinOp::Gt => (y, x, false),
                _ => (y, x, true),
            };
            let (a, b) = (affine(k, f, *idx)?, affine(k, f, *bound)?);
            if !b.is_uniform() {
                return None;
            }
            let limit = Term::sub(b.base, a.base);
            let limit = if inclusive {
                Term::add(limit, Term::Int(1))
            } else {
                limit
            };
            let one = Term::Int(1);
            let zero = Term::Int(0);
            let on_i = a.ci == one && a.cj == zero && rank(k, *idx) == 2;
            let on_j = a.cj == one && a.ci == zero;
            if on_i {
                Some(Bounds {
                    rows: Some(limit),
                    cols: None,
                })
            } else if on_j {
                Some(Bounds {
                    rows: None,
                    cols: Some(limit),
                })
            } else {
                None
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsl_ir::{Builder, ConstExpr, DType, ParamKind, Src};

    /// `w + rows[:, None] * k + (k0 + cols)[None, :]` under `rows < m & k0 + cols < k`, the
    /// GEMV weight tile (`k0` a scalar parameter standing in for the loop counter), with
    /// `nonaffine` using `rows * rows` for the row offset (not affine) and `or` joining the mask
    /// with `|` (not a box).
    /// Returns the kernel, the pointer, the mask and the scalars w, m, k, k0, pid·4.
    fn gemv_tile(nonaffine: bool, or: bool) -> (Kernel, ValueId, ValueId, [ValueId; 5]) {
        let s = Src::default;
        let mut b = Builder::new("t", "t.rs");
        let w = b.param("w", ParamKind::Ptr(DType::BF16)).unwrap();
        let m = b.param("m", ParamKind::Scalar(DType::I32)).unwrap();
        let k = b.param("k", ParamKind::Scalar(DType::I32)).unwrap();
        let k0 = b.param("k0", ParamKind::Scalar(DType::I32)).unwrap();
        let (w, m, k, k0) = (
            b.param_value(w, s()).unwrap(),
            b.param_value(m, s()).unwrap(),
            b.param_value(k, s()).unwrap(),
            b.param_value(k0, s()).unwrap(),
        );
        let lit = ConstExpr::Lit;
        let pid = b.program_id(0, s()).unwrap();
        let bm = b.lit_int(4, s()).unwrap();
        let first = b.binary(BinOp::Mul, pid, bm, s()).unwrap();
        let r = b.arange(lit(0), lit(4), s()).unwrap();
        let rows = b.binary(BinOp::Add, first, r, s()).unwrap();
        let c = b.arange(lit(0), lit(8), s()).unwrap();
        let cols = b.binary(BinOp::Add, k0, c, s()).unwrap();
        let ri = b.expand_dims(rows, 1, s()).unwrap();
        let cj = b.expand_dims(cols, 0, s()).unwrap();
        let stride = if nonaffine { ri } else { k };
        let roff = b.binary(BinOp::Mul, ri, stride, s()).unwrap();
        let p = b.binary(BinOp::Add, w, roff, s()).unwrap();
        let ptr = b.binary(BinOp::Add, p, cj, s()).unwrap();
        let rm = b.binary(BinOp::Lt, rows, m, s()).unwrap();
        let cm = b.binary(BinOp::Lt, cols, k, s()).unwrap();
        let rm = b.expand_dims(rm, 1, s()).unwrap();
        let cm = b.expand_dims(cm, 0, s()).unwrap();
        let join = if or { BinOp::Or } else { BinOp::And };
        let mask = b.binary(join, rm, cm, s()).unwrap();
        b.load(ptr, Some(mask), None, s()).unwrap();
        (b.finish().unwrap(), ptr, mask, [w, m, k, k0, first])
    }

    #[test]
    fn a_gemv_weight_tile_is_a_box_of_whole_rows() {
        let (k, ptr, mask, scalars) = gemv_tile(false, false);
        let f = super::super::analysis::analyse(&k, &[]);
        let b = tile_box(&k, &f, ptr, Some(mask)).expect("a box");
        assert_eq!((b.m, b.n), (4, 8));
        // The box at w = 1000, m = 14, k = 8, k0 = 0, program 3 (pid·4 = 12).
        let at = |v: ValueId| {
            let i = scalars.iter().position(|&s| s == v);
            [1000, 14, 8, 0, 12][i.expect("a scalar of the box")]
        };
        assert_eq!(b.base.eval(&at), 1000 + 3 * 4 * 8);
        assert_eq!(b.ci.eval(&at), 8);
        // Rows 12, 13 of 14 are in: 2 valid rows; columns 0..8 of 8.
        assert_eq!(b.rows.eval(&at), 2);
        assert_eq!(b.cols.eval(&at), 8);
    }

    #[test]
    fn a_non_affine_pointer_or_a_non_box_mask_is_not_a_box() {
        let (k, ptr, mask, _) = gemv_tile(true, false);
        let f = super::super::analysis::analyse(&k, &[]);
        assert!(tile_box(&k, &f, ptr, Some(mask)).is_none());
        let (k, ptr, mask, _) = gemv_tile(false, true);
        let f = super::super::analysis::analyse(&k, &[]);
        assert!(affine(&k, &f, ptr).is_some());
        assert!(tile_box(&k, &f, ptr, Some(mask)).is_none());
    }
}
