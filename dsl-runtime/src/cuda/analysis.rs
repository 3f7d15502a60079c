//! Facts about a specialised kernel that the emitter needs before it writes a line:
//! where each value is defined, which values are pure index arithmetic (so they can be
//! recomputed in any layout instead of moved), which values need registers at all, and
//! what is known about the divisibility and contiguity of integer and pointer values
//! (so a memory access can become one 16-byte vector access).
use dsl_ir::{BinOp, DType, Elem, Kernel, Lit, Op, ParamKind, Stmt, ValueId};

/// Divisibility is tracked as a power of two, capped here (enough for any vector width).
const DIV_CAP: i64 = 1 << 20;

/// Affine facts about an integer or pointer value along the tile's last axis:
/// `value(.., j) = g(..) + stride * j` with `g` divisible by `div` (in elements, for
/// pointers). `stride: None` means "not affine in j", and `div` then divides the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aff {
    pub stride: Option<i64>,
    pub div: i64,
}

impl Aff {
    const UNKNOWN: Aff = Aff {
        stride: None,
        div: 1,
    };
    fn uniform(div: i64) -> Aff {
        Aff {
            stride: Some(0),
            div: div.clamp(1, DIV_CAP),
        }
    }
    /// A divisor of the whole value (not only of its j-independent part).
    pub fn total_div(self) -> i64 {
        match self.stride {
            Some(s) => self.div.min(pow2_div(s)),
            None => self.div,
        }
    }
}

/// The largest power of two dividing `x` (capped; 0 is divisible by everything).
pub fn pow2_div(x: i64) -> i64 {
    if x == 0 {
        DIV_CAP
    } else {
        (1i64 << x.trailing_zeros().min(20)).min(DIV_CAP)
    }
}

pub struct Facts {
    /// The defining op of each value (`None` for loop induction variables).
    pub defs: Vec<Option<Op>>,
    /// Pure index arithmetic: depends only on literals, parameters, program ids, aranges
    /// and loop counters, never on memory, variables or reductions.
    pub pure: Vec<bool>,
    /// Whether a tile value is worth materialising in registers of its own layout (a pure
    /// value only read through broadcasts is recomputed at its readers instead).
    pub needs_regs: Vec<bool>,
    pub aff: Vec<Aff>,
    /// Constancy along the last axis: the value is the same over each aligned run of this
    /// many elements (a power of two; `DIV_CAP` for values constant along the whole axis).
    /// A mask like `cols < n` with `cols = k0 + arange` and `n` divisible by 16 is constant
    /// over every 16-byte vector, so a vector load needs one predicate, not one per element.
    pub cst: Vec<i64>,
    /// For each source line (and, inside an inlined `#[tile_fn]`, each line of the helper:
    /// `Src::via`), the longest statement text on it (the whole expression).
    pub line_text: std::collections::BTreeMap<(u32, String), String>,
}

pub fn analyse(k: &Kernel, divisible16: &[bool]) -> Facts {
    let n = k.values.len();
    let mut defs: Vec<Option<Op>> = vec![None; n];
    let mut order: Vec<&Stmt> = vec![];
    let mut line_text = std::collections::BTreeMap::new();
    dsl_ir::walk(&k.body, &mut |s| {
        order.push(s);
        if let Stmt::Let { id, op, .. } = s {
            defs[id.0 as usize] = Some(op.clone());
        }
        let src = match s {
            Stmt::Let { src, .. }
            | Stmt::DeclVar { src, .. }
            | Stmt::Assign { src, .. }
            | Stmt::Store { src, .. }
            | Stmt::Atomic { src, .. }
            | Stmt::Prefetch { src, .. }
            | Stmt::For { src, .. }
            | Stmt::If { src, .. } => src,
        };
        if src.line != 0 {
            let e: &mut String = line_text.entry((src.line, src.via.clone())).or_default();
            if src.text.len() > e.len() {
                *e = src.text.clone();
            }
        }
    });

    // Purity and affine facts, in program order (operands are defined first).
    let mut pure = vec![true; n]; // loop counters (no def) are pure
    let mut aff = vec![Aff::UNKNOWN; n];
    let mut cst = vec![1i64; n];
    for s in &order {
        if let Stmt::For {
            iv, start, step, ..
        } = s
        {
            // iv = start + n * step: as divisible as both.
            let d = aff[start.0 as usize]
                .total_div()
                .min(aff[step.0 as usize].total_div());
            aff[iv.0 as usize] = Aff::uniform(d);
            cst[iv.0 as usize] = DIV_CAP;
            continue;
        }
        let Stmt::Let { id, op, .. } = s else {
            continue;
        };
        let i = id.0 as usize;
        let p = |v: &ValueId| pure[v.0 as usize];
        pure[i] = match op {
            Op::ProgramId(_)
            | Op::NumPrograms(_)
            | Op::Param(_)
            | Op::Const(_)
            | Op::Lit(_)
            | Op::Arange { .. } => true,
            Op::Unary(_, a) | Op::Cast(a) | Op::ExpandDims(a, _) | Op::Broadcast(a) => p(a),
            Op::Binary(_, a, b) => p(a) && p(b),
            Op::Where(c, a, b) => p(c) && p(a) && p(b),
            Op::Trans(a) => p(a),
            Op::Load { .. } | Op::Reduce { .. } | Op::ReadVar(_) | Op::Dot { .. } => false,
        };
        let a = |v: &ValueId| aff[v.0 as usize];
        let lit = |v: &ValueId| match &defs[v.0 as usize] {
            Some(Op::Lit(Lit::Int(c))) => Some(*c),
            _ => None,
        };
        aff[i] = match op {
            Op::Lit(Lit::Int(c)) => Aff::uniform(pow2_div(*c)),
            Op::Param(pi) => {
                let d16 = divisible16.get(*pi).copied().unwrap_or(false);
                match k.params[*pi].kind {
                    ParamKind::Ptr(d) if d16 => Aff::uniform((16 / d.size_bytes()) as i64),
                    ParamKind::Scalar(DType::I32) if d16 => Aff::uniform(16),
                    _ => Aff::uniform(1),
                }
            }
            Op::ProgramId(_) | Op::NumPrograms(_) => Aff::uniform(1),
            Op::Arange { start, .. } => Aff {
                stride: Some(1),
                div: pow2_div(start.as_lit().unwrap_or(1)),
            },
            Op::Binary(BinOp::Add | BinOp::Sub, x, y) => {
                let (x, y) = (a(x), a(y));
                let neg = matches!(op, Op::Binary(BinOp::Sub, ..));
                match (x.stride, y.stride) {
                    (Some(sx), Some(sy)) => Aff {
                        stride: Some(if neg { sx - sy } else { sx + sy }),
                        div: x.div.min(y.div),
                    },
                    _ => Aff {
                        stride: None,
                        div: x.total_div().min(y.total_div()),
                    },
                }
            }
            Op::Binary(BinOp::Mul, x, y) => mul_aff(a(x), lit(x), a(y), lit(y)),
            Op::Binary(BinOp::Shl, x, y) => match lit(y) {
                Some(sh) if (0..20).contains(&sh) => {
                    mul_aff(a(x), lit(x), Aff::uniform(1 << sh), Some(1 << sh))
                }
                _ => Aff::UNKNOWN,
            },
            Op::ExpandDims(x, axis) => {
                let rank = k.ty(*x).rank();
                if *axis as usize == rank && rank > 0 {
                    // The new last axis has size 1: constant along it.
                    Aff::uniform(a(x).total_div())
                } else {
                    a(x)
                }
            }
            Op::Broadcast(x) => {
                let (tx, tv) = (k.ty(*x), k.ty(*id));
                let last_stretched = tx.is_scalar()
                    || (tx.dims().last() == Some(&1) && tv.dims().last() != Some(&1));
                if last_stretched {
                    Aff::uniform(a(x).total_div())
                } else {
                    a(x)
                }
            }
            _ => Aff::UNKNOWN,
        };
        cst[i] = constancy(k, *id, op, &aff, &cst);
    }

    // Which tile values need registers: walk backwards; a pure value is materialised only
    // if some materialised reader, or a reader that is not recomputation, uses it at its
    // own shape.
    let mut needs_regs = vec![false; n];
    for s in order.iter().rev() {
        let mut direct: Vec<ValueId> = vec![];
        match s {
            Stmt::Let { id, op, .. } => {
                let i = id.0 as usize;
                if !pure[i] {
                    needs_regs[i] = true;
                }
                let me = needs_regs[i];
                match op {
                    Op::Unary(_, x) | Op::Cast(x) if me => direct.push(*x),
                    Op::Binary(_, x, y) if me => direct.extend([*x, *y]),
                    Op::Where(c, x, y) if me => direct.extend([*c, *x, *y]),
                    Op::Load { ptr, mask, other } => {
                        direct.push(*ptr);
                        direct.extend(mask.iter().chain(other.iter()).copied());
                    }
                    Op::Reduce { x, .. } => direct.push(*x),
                    Op::Dot { a, b, acc } => {
                        direct.extend([*a, *b]);
                        direct.extend(acc.iter().copied());
                    }
                    Op::Trans(x) if me => direct.push(*x),
                    _ => {}
                }
            }
            Stmt::DeclVar { init, .. } => direct.push(*init),
            Stmt::Assign { value, .. } => direct.push(*value),
            Stmt::Store {
                ptr, value, mask, ..
            }
            | Stmt::Atomic {
                ptr, value, mask, ..
            } => {
                direct.extend([*ptr, *value]);
                direct.extend(mask.iter().copied());
            }
            Stmt::Prefetch { ptr, mask, .. } => {
                direct.push(*ptr);
                direct.extend(mask.iter().copied());
            }
            _ => {}
        }
        for v in direct {
            if !k.ty(v).is_scalar() {
                needs_regs[v.0 as usize] = true;
            }
        }
    }
    Facts {
        defs,
        pure,
        needs_regs,
        aff,
        cst,
        line_text,
    }
}

/// The constancy of `id = op` along the last axis (see `Facts::cst`).
fn constancy(k: &Kernel, id: ValueId, op: &Op, aff: &[Aff], cst: &[i64]) -> i64 {
    let c = |v: &ValueId| cst[v.0 as usize];
    let a = |v: &ValueId| aff[v.0 as usize];
    let (ty, last) = (k.ty(id), |v: &ValueId| k.ty(*v).dims().last().copied());
    if ty.is_scalar() || aff[id.0 as usize].stride == Some(0) {
        return DIV_CAP; // uniform along the axis
    }
    match op {
        Op::Binary(b, x, y) => {
            // `g + j < u` (g and u multiples of d) flips only at a multiple of d.
            let affine_vs_uniform = |p: &ValueId, q: &ValueId| match (a(p).stride, a(q).stride) {
                (Some(1), Some(0)) => Some(a(p).div.min(a(q).total_div())),
                _ => None,
            };
            let cmp = match b {
                BinOp::Lt | BinOp::Ge => affine_vs_uniform(x, y),
                BinOp::Gt | BinOp::Le => affine_vs_uniform(y, x),
                _ => None,
            };
            cmp.unwrap_or(1).max(c(x).min(c(y)))
        }
        Op::Unary(_, x) | Op::Cast(x) => c(x),
        Op::Where(p, x, y) => c(p).min(c(x)).min(c(y)),
        Op::ExpandDims(x, axis) => {
            if *axis as usize == k.ty(*x).rank() {
                DIV_CAP // the new last axis has size 1
            } else {
                c(x)
            }
        }
        Op::Broadcast(x) => {
            if k.ty(*x).is_scalar() || (last(x) == Some(1) && ty.dims().last() != Some(&1)) {
                DIV_CAP
            } else {
                c(x)
            }
        }
        _ => 1,
    }
}

fn mul_aff(x: Aff, lx: Option<i64>, y: Aff, ly: Option<i64>) -> Aff {
    match (x.stride, y.stride, lx, ly) {
        (Some(0), Some(0), _, _) => Aff::uniform(x.div.saturating_mul(y.div)),
        (Some(sx), _, _, Some(c)) => Aff {
            stride: Some(sx * c),
            div: x.div.saturating_mul(pow2_div(c)).min(DIV_CAP),
        },
        (_, Some(sy), Some(c), _) => Aff {
            stride: Some(sy * c),
            div: y.div.saturating_mul(pow2_div(c)).min(DIV_CAP),
        },
        _ => Aff {
            stride: None,
            div: x.total_div().saturating_mul(y.total_div()).min(DIV_CAP),
        },
    }
}

/// The preferred chunk (elements per thread per vector access): 16 bytes of the
/// narrowest dtype a tile is loaded or stored as (8 for bf16/f16, 4 for f32/i32).
pub fn preferred_vec(k: &Kernel) -> usize {
    let mut min_size = 4;
    dsl_ir::walk(&k.body, &mut |s| {
        let ptr = match s {
            Stmt::Let {
                op: Op::Load { ptr, .. },
                ..
            }
            | Stmt::Store { ptr, .. } => *ptr,
            _ => return,
        };
        let t = k.ty(ptr);
        if let Elem::Ptr(d) = t.elem {
            if !t.is_scalar() && d != DType::Bool {
                min_size = min_size.min(d.size_bytes());
            }
        }
    });
    16 / min_size
}
