//! The footprint of a pointer tile as an affine function of its indices, from its IR
//! alone: a pointer tile `p[i, j]` (a 1-D tile has `j` only) is *affine* when
//! `p = base + ci·i + cj·j` (in elements) with `base`, `ci` and `cj` scalar expressions
//! over program ids, parameters, loop counters and constants. The `cp.async` pipeline
//! (`pipeline.rs`) uses it to advance a copy's pointer by a fixed step per iteration.
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

    /// C for the term, given C for each scalar value it reads.
    pub fn c<E>(&self, val: &impl Fn(ValueId) -> Result<String, E>) -> Result<String, E> {
        Ok(match self {
            Term::Int(x) => format!("{x}"),
            Term::Val(v) => val(*v)?,
            Term::Add(a, b) => format!("({} + {})", a.c(val)?, b.c(val)?),
            Term::Sub(a, b) => format!("({} - {})", a.c(val)?, b.c(val)?),
            Term::Mul(a, b) => format!("({} * {})", a.c(val)?, b.c(val)?),
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

#[cfg(test)]
mod tests {
    use super::*;
    use dsl_ir::{Builder, ConstExpr, DType, ParamKind, Src};

    /// `w + rows[:, None] * k + (k0 + cols)[None, :]`, the GEMV weight tile (`k0` a scalar
    /// parameter standing in for the loop counter), with `nonaffine` using `rows * rows` for
    /// the row offset (not affine).
    /// Returns the kernel, the pointer and the scalars w, k, k0, pid·4.
    fn gemv_tile(nonaffine: bool) -> (Kernel, ValueId, [ValueId; 4]) {
        let s = Src::default;
        let mut b = Builder::new("t", "t.rs");
        let w = b.param("w", ParamKind::Ptr(DType::BF16)).unwrap();
        let k = b.param("k", ParamKind::Scalar(DType::I32)).unwrap();
        let k0 = b.param("k0", ParamKind::Scalar(DType::I32)).unwrap();
        let (w, k, k0) = (
            b.param_value(w, s()).unwrap(),
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
        b.load(ptr, None, None, s()).unwrap();
        (b.finish().unwrap(), ptr, [w, k, k0, first])
    }

    #[test]
    fn a_gemv_weight_tile_is_affine_with_unit_columns() {
        let (k, ptr, scalars) = gemv_tile(false);
        let f = super::super::analysis::analyse(&k, &[]);
        let a = affine(&k, &f, ptr).expect("affine");
        // At w = 1000, k = 8, k0 = 0, program 3 (pid·4 = 12).
        let at = |v: ValueId| {
            let i = scalars.iter().position(|&s| s == v);
            [1000, 8, 0, 12][i.expect("a scalar of the tile")]
        };
        assert_eq!(a.base.eval(&at), 1000 + 3 * 4 * 8);
        assert_eq!(a.ci.eval(&at), 8);
        assert_eq!(a.cj, Term::Int(1));
    }

    #[test]
    fn a_non_affine_pointer_is_not_affine() {
        let (k, ptr, _) = gemv_tile(true);
        let f = super::super::analysis::analyse(&k, &[]);
        assert!(affine(&k, &f, ptr).is_none());
    }
}
