//! The prover behind the schedule's "provably disjoint": a window's offsets as polynomials
//! over the megakernel's run-time scalars and loop variables, and a sufficient test that
//! one window ends before another starts.
//!
//! A pending run from `k >= 1` iterations ago reads its loop variable `v` as `v - k`
//! (`Sym::Shift`), so `&w[l*n..(l+1)*n]` of the previous iteration ends at `l*n - k*n + n`
//! and the current one starts at `l*n`: the difference `k*n - n` is a non-negative
//! combination of shifts once `n` is a known constant. Anything the prover cannot
//! see through is an opaque symbol, and an access whose bounds it cannot order conflicts:
//! a false "may overlap" costs a wait, never a race.
use super::program::{Expr, Val};
use super::resolve::Resolved;
use std::collections::BTreeMap;

/// A symbol of an offset polynomial.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Sym {
    /// A run-time i32 parameter.
    Param(usize),
    /// A loop variable in the current iteration.
    Var(usize),
    /// `k ≥ 1`: how many iterations of this loop ago a pending run happened.
    Shift(usize),
    /// A loop variable of a finished loop: any value, unrelated to anything.
    Fresh(usize),
    /// A sub-expression that is not a polynomial (division…), compared by its text.
    Opaque(String),
}

/// Σ coeff · monomial; the empty monomial is the constant.
pub(super) type Poly = BTreeMap<Vec<Sym>, i64>;

/// How a pending run's loop variables relate to the current ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Frame {
    Current,
    Earlier,
    Exited,
}

pub(super) fn poly_add(a: &Poly, b: &Poly, sign: i64) -> Poly {
    let mut out = a.clone();
    for (m, c) in b {
        let e = out.entry(m.clone()).or_insert(0);
        *e = e.wrapping_add(sign.wrapping_mul(*c));
    }
    out.retain(|_, c| *c != 0);
    out
}

pub(super) fn poly_mul(a: &Poly, b: &Poly) -> Poly {
    let mut out = Poly::new();
    for (ma, ca) in a {
        for (mb, cb) in b {
            let mut m: Vec<Sym> = ma.iter().chain(mb).cloned().collect();
            m.sort();
            let e = out.entry(m).or_insert(0);
            *e = e.wrapping_add(ca.wrapping_mul(*cb));
        }
    }
    out.retain(|_, c| *c != 0);
    out
}

pub(super) fn constant(c: i64) -> Poly {
    let mut p = Poly::new();
    if c != 0 {
        p.insert(vec![], c);
    }
    p
}

pub(super) struct Polys<'a> {
    pub(super) r: &'a Resolved,
    /// Per loop id: how this expression's loop variables are to be read.
    pub(super) frames: &'a BTreeMap<usize, Frame>,
}

impl Polys<'_> {
    pub(super) fn poly(&self, e: &Expr) -> Poly {
        match e {
            Expr::Int(v) => constant(*v),
            Expr::Param(i) => match self.r.const_env.get(*i).copied().flatten() {
                Some(Val::Int(v)) => constant(v),
                _ => [(vec![Sym::Param(*i)], 1)].into_iter().collect(),
            },
            Expr::Var(id) => match self.frames.get(id).copied().unwrap_or(Frame::Current) {
                Frame::Current => [(vec![Sym::Var(*id)], 1)].into_iter().collect(),
                Frame::Earlier => [(vec![Sym::Var(*id)], 1), (vec![Sym::Shift(*id)], -1)]
                    .into_iter()
                    .collect(),
                Frame::Exited => [(vec![Sym::Fresh(*id)], 1)].into_iter().collect(),
            },
            Expr::Neg(a) => poly_add(&Poly::new(), &self.poly(a), -1),
            Expr::Bin(super::program::Op::Add, a, b) => poly_add(&self.poly(a), &self.poly(b), 1),
            Expr::Bin(super::program::Op::Sub, a, b) => poly_add(&self.poly(a), &self.poly(b), -1),
            Expr::Bin(super::program::Op::Mul, a, b) => poly_mul(&self.poly(a), &self.poly(b)),
            other => {
                // Constant folding first; else an opaque symbol that only cancels with the
                // same text in the same frame.
                let env = super::program::Env {
                    params: &self.r.const_env,
                    vars: &[],
                };
                if let Ok(Val::Int(v)) = other.eval(&env, self.r.params()) {
                    return constant(v);
                }
                let mut vs = vec![];
                other.vars(&mut vs);
                let tag: Vec<String> = vs
                    .iter()
                    .map(|v| {
                        format!(
                            "{v}:{:?}",
                            self.frames.get(v).copied().unwrap_or(Frame::Current)
                        )
                    })
                    .collect();
                [(
                    vec![Sym::Opaque(format!(
                        "{}@{}",
                        self.r.show(other),
                        tag.join(",")
                    ))],
                    1,
                )]
                .into_iter()
                .collect()
            }
        }
    }
}

/// True if `p ≥ 0` for every value of its symbols: only constants and shifts (each ≥ 1)
/// with non-negative coefficients, and the value at all shifts = 1 is ≥ 0.
pub(super) fn provably_nonneg(p: &Poly) -> bool {
    let mut at_one = 0i64;
    for (m, c) in p {
        // A constant, or a product of shifts (each ≥ 1) with a non-negative coefficient:
        // its least value is at all shifts = 1.
        let shifts_only = m.iter().all(|s| matches!(s, Sym::Shift(_)));
        if !(m.is_empty() || (shifts_only && *c >= 0)) {
            return false;
        }
        at_one = at_one.saturating_add(*c);
    }
    at_one >= 0
}

/// An access with its offsets as polynomials.
pub(super) struct Region {
    pub(super) param: usize,
    pub(super) start: Poly,
    pub(super) end: Option<Poly>,
}

pub(super) fn disjoint(a: &Region, b: &Region) -> bool {
    if a.param != b.param {
        return true;
    }
    let before = |x: &Region, y: &Region| {
        x.end
            .as_ref()
            .is_some_and(|e| provably_nonneg(&poly_add(&y.start, e, -1)))
    };
    before(a, b) || before(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(s: Sym) -> Poly {
        [(vec![s], 1)].into_iter().collect()
    }
    /// `c * a`
    fn scale(a: &Poly, c: i64) -> Poly {
        poly_mul(a, &constant(c))
    }
    fn window(start: Poly, end: Poly) -> Region {
        Region {
            param: 0,
            start,
            end: Some(end),
        }
    }

    #[test]
    fn polynomials_cancel_and_multiply() {
        let (l, n) = (sym(Sym::Var(0)), sym(Sym::Param(3)));
        // (l + 1) * n - l * n = n
        let a = poly_mul(&poly_add(&l, &constant(1), 1), &n);
        let b = poly_mul(&l, &n);
        assert_eq!(poly_add(&a, &b, -1), n);
        // x - x is the empty polynomial, and a zero constant is no term at all.
        assert!(poly_add(&a, &a, -1).is_empty());
        assert!(constant(0).is_empty());
        // Monomials are sorted, so n * l and l * n are one term.
        assert_eq!(poly_add(&poly_mul(&n, &l), &b, -1), Poly::new());
    }

    #[test]
    fn nonnegative_only_when_every_symbol_is_a_shift() {
        let (k, v, p) = (sym(Sym::Shift(0)), sym(Sym::Var(0)), sym(Sym::Param(0)));
        assert!(provably_nonneg(&constant(0)));
        assert!(provably_nonneg(&constant(5)));
        assert!(!provably_nonneg(&constant(-1)));
        // k >= 1: 1024 k - 1024 >= 0, but 1024 k - 1025 is -1 at k = 1.
        assert!(provably_nonneg(&poly_add(
            &scale(&k, 1024),
            &constant(1024),
            -1
        )));
        assert!(!provably_nonneg(&poly_add(
            &scale(&k, 1024),
            &constant(1025),
            -1
        )));
        // A negative coefficient on a shift is unbounded below.
        assert!(!provably_nonneg(&poly_add(&constant(9), &k, -1)));
        // Loop variables and run-time parameters may be anything.
        assert!(!provably_nonneg(&v));
        assert!(!provably_nonneg(&poly_mul(&p, &p)));
    }

    #[test]
    fn layer_windows_are_disjoint_across_iterations_not_within_one() {
        // &w[l * 1024..(l + 1) * 1024] in this iteration and k >= 1 iterations ago.
        let n = 1024;
        let l = sym(Sym::Var(0));
        let earlier = poly_add(&l, &sym(Sym::Shift(0)), -1);
        let at = |x: &Poly| window(scale(x, n), scale(&poly_add(x, &constant(1), 1), n));
        assert!(disjoint(&at(&l), &at(&earlier)));
        assert!(disjoint(&at(&earlier), &at(&l)));
        // The same iteration's window overlaps itself.
        assert!(!disjoint(&at(&l), &at(&l)));
        // A window one element too long reaches into the next layer's at k = 1.
        let long = |x: &Poly| {
            window(
                scale(x, n),
                poly_add(&scale(&poly_add(x, &constant(1), 1), n), &constant(1), 1),
            )
        };
        assert!(!disjoint(&long(&earlier), &long(&l)));
        // A window with no end (`&p[a..]`) is ordered only when it comes second.
        let open = Region {
            param: 0,
            start: scale(&l, n),
            end: None,
        };
        assert!(disjoint(&at(&earlier), &open));
        assert!(!disjoint(&open, &at(&l)));
        // Distinct parameters never overlap (the launch refuses aliases).
        let other = Region { param: 1, ..at(&l) };
        assert!(disjoint(&at(&l), &other));
    }
}
