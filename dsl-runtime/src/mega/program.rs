//! The stage program: what `#[megakernel]` leaves behind. A list of kernel calls and
//! loops whose arguments are small expressions over the megakernel's parameters and loop
//! variables. The macro cannot see other kernels' IR, so it emits Rust that builds this at
//! run time, naming each kernel by its `KERNEL` handle; [`crate::mega::resolve`] then
//! checks every call against the kernel's IR.
//!
//! Expressions are integers (i64 on the host, `long long` on the GPU, so per-layer offsets
//! of large models never wrap), f32 scalars (computed in f32 on both sides), or bools (for
//! bool constexprs). Division truncates toward zero and `%` has the dividend's sign (Rust and
//! C agree); `cdiv(a, b)` is `(a + b - 1) / b`.
use crate::kernel_def::KernelDef;
use dsl_ir::ParamKind;
use std::fmt;

/// A megakernel parameter: the same kinds as a kernel's.
#[derive(Clone, Debug, PartialEq)]
pub struct MParam {
    pub name: String,
    pub kind: ParamKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Cdiv,
    Min,
    Max,
}

impl Op {
    fn symbol(self) -> &'static str {
        match self {
            Op::Add => "+",
            Op::Sub => "-",
            Op::Mul => "*",
            Op::Div => "/",
            Op::Rem => "%",
            Op::Cdiv => "cdiv",
            Op::Min => "min",
            Op::Max => "max",
        }
    }
}

/// A scalar expression over the megakernel's scalar and constexpr parameters and the loop
/// variables in scope.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A scalar or constexpr parameter, by index into `Program::params`.
    Param(usize),
    /// A loop variable, by loop id (`Loop::id`).
    Var(usize),
    Neg(Box<Expr>),
    Bin(Op, Box<Expr>, Box<Expr>),
    /// `e as f32`.
    ToF32(Box<Expr>),
    /// `e as i32` / `as usize` (float → int truncates toward zero, as Rust's `as`).
    ToInt(Box<Expr>),
}

/// An expression's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ETy {
    Int,
    Float,
    Bool,
}

impl fmt::Display for ETy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ETy::Int => "an integer",
            ETy::Float => "an f32",
            ETy::Bool => "a bool",
        })
    }
}

/// A value during host evaluation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    Int(i64),
    Float(f32),
    Bool(bool),
}

/// What an expression may see when it is evaluated on the host.
pub struct Env<'a> {
    /// Per megakernel parameter: its value (None for pointers, or for run-time scalars
    /// when only constexprs are known).
    pub params: &'a [Option<Val>],
    /// Per loop id: the loop variable's current value (None when out of scope or unknown).
    pub vars: &'a [Option<i64>],
}

impl Expr {
    pub fn int(v: i64) -> Expr {
        Expr::Int(v)
    }
    pub fn float(v: f64) -> Expr {
        Expr::Float(v)
    }
    pub fn param(i: usize) -> Expr {
        Expr::Param(i)
    }
    pub fn var(id: usize) -> Expr {
        Expr::Var(id)
    }
    pub fn bin(op: Op, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }
    #[allow(clippy::should_implement_trait)]
    pub fn neg(a: Expr) -> Expr {
        Expr::Neg(Box::new(a))
    }
    pub fn to_f32(a: Expr) -> Expr {
        Expr::ToF32(Box::new(a))
    }
    pub fn to_int(a: Expr) -> Expr {
        Expr::ToInt(Box::new(a))
    }

    /// The type, or why the expression is ill-typed (the macro checks this too; a
    /// hand-built program is checked here).
    pub fn ty(&self, params: &[MParam]) -> Result<ETy, String> {
        Ok(match self {
            Expr::Int(_) | Expr::Var(_) => ETy::Int,
            Expr::Float(_) => ETy::Float,
            Expr::Bool(_) => ETy::Bool,
            Expr::Param(i) => match params.get(*i).map(|p| p.kind) {
                Some(ParamKind::Scalar(d)) if d.is_float() => ETy::Float,
                Some(ParamKind::Scalar(_)) => ETy::Int,
                Some(ParamKind::Constexpr(dsl_ir::ConstKind::Int)) => ETy::Int,
                Some(ParamKind::Constexpr(dsl_ir::ConstKind::Bool)) => ETy::Bool,
                Some(ParamKind::Ptr(_)) => {
                    return Err(format!("pointer `{}` used as a number", params[*i].name))
                }
                None => return Err(format!("parameter #{i} does not exist")),
            },
            Expr::Neg(a) => match a.ty(params)? {
                ETy::Bool => return Err("cannot negate a bool".into()),
                t => t,
            },
            Expr::Bin(op, a, b) => {
                let (ta, tb) = (a.ty(params)?, b.ty(params)?);
                if ta != tb || ta == ETy::Bool {
                    return Err(format!(
                        "`{}` needs two integers or two f32s, got {ta} and {tb}",
                        op.symbol()
                    ));
                }
                if ta == ETy::Float && matches!(op, Op::Rem | Op::Cdiv) {
                    return Err(format!("`{}` is for integers", op.symbol()));
                }
                ta
            }
            Expr::ToF32(a) => {
                a.ty(params)?;
                ETy::Float
            }
            Expr::ToInt(a) => {
                a.ty(params)?;
                ETy::Int
            }
        })
    }

    /// Evaluates on the host; `Err` names what was unknown or wrong.
    pub fn eval(&self, env: &Env, params: &[MParam]) -> Result<Val, String> {
        Ok(match self {
            Expr::Int(v) => Val::Int(*v),
            Expr::Float(v) => Val::Float(*v as f32),
            Expr::Bool(b) => Val::Bool(*b),
            Expr::Param(i) => env.params.get(*i).copied().flatten().ok_or_else(|| {
                format!(
                    "`{}` is not known here",
                    params.get(*i).map_or("?", |p| p.name.as_str())
                )
            })?,
            Expr::Var(id) => Val::Int(
                env.vars
                    .get(*id)
                    .copied()
                    .flatten()
                    .ok_or_else(|| "a loop variable is not known here".to_string())?,
            ),
            Expr::Neg(a) => match a.eval(env, params)? {
                Val::Int(v) => Val::Int(v.wrapping_neg()),
                Val::Float(v) => Val::Float(-v),
                Val::Bool(_) => return Err("cannot negate a bool".into()),
            },
            Expr::Bin(op, a, b) => match (a.eval(env, params)?, b.eval(env, params)?) {
                (Val::Int(x), Val::Int(y)) => Val::Int(match op {
                    Op::Add => x.wrapping_add(y),
                    Op::Sub => x.wrapping_sub(y),
                    Op::Mul => x.wrapping_mul(y),
                    Op::Div | Op::Rem | Op::Cdiv if y == 0 => {
                        return Err(format!("division by zero in `{}`", self.show(params, &[])))
                    }
                    Op::Div => x.wrapping_div(y),
                    Op::Rem => x.wrapping_rem(y),
                    Op::Cdiv => (x + y - 1).wrapping_div(y),
                    Op::Min => x.min(y),
                    Op::Max => x.max(y),
                }),
                (Val::Float(x), Val::Float(y)) => Val::Float(match op {
                    Op::Add => x + y,
                    Op::Sub => x - y,
                    Op::Mul => x * y,
                    Op::Div => x / y,
                    Op::Min => x.min(y),
                    Op::Max => x.max(y),
                    Op::Rem | Op::Cdiv => return Err(format!("`{}` is for integers", op.symbol())),
                }),
                _ => return Err(format!("`{}` mixes types", self.show(params, &[]))),
            },
            Expr::ToF32(a) => match a.eval(env, params)? {
                Val::Int(v) => Val::Float(v as f32),
                Val::Float(v) => Val::Float(v),
                Val::Bool(b) => Val::Float(b as u8 as f32),
            },
            Expr::ToInt(a) => match a.eval(env, params)? {
                Val::Int(v) => Val::Int(v),
                Val::Float(v) => Val::Int(v as i64),
                Val::Bool(b) => Val::Int(b as i64),
            },
        })
    }

    /// True if the expression mentions only literals and constexpr parameters.
    pub fn is_const(&self, params: &[MParam]) -> bool {
        match self {
            Expr::Int(_) | Expr::Float(_) | Expr::Bool(_) => true,
            Expr::Param(i) => matches!(
                params.get(*i).map(|p| p.kind),
                Some(ParamKind::Constexpr(_))
            ),
            Expr::Var(_) => false,
            Expr::Neg(a) | Expr::ToF32(a) | Expr::ToInt(a) => a.is_const(params),
            Expr::Bin(_, a, b) => a.is_const(params) && b.is_const(params),
        }
    }

    /// Source-like text, for `explain` and errors. `vars` names loop ids.
    pub fn show(&self, params: &[MParam], vars: &[String]) -> String {
        self.show_prec(params, vars, 0)
    }

    fn show_prec(&self, params: &[MParam], vars: &[String], outer: u8) -> String {
        let name = |i: usize| {
            params
                .get(i)
                .map_or_else(|| format!("#{i}"), |p| p.name.clone())
        };
        match self {
            Expr::Int(v) => v.to_string(),
            Expr::Float(v) => format!("{v:?}"),
            Expr::Bool(b) => b.to_string(),
            Expr::Param(i) => name(*i),
            Expr::Var(id) => vars
                .get(*id)
                .cloned()
                .unwrap_or_else(|| format!("loop{id}")),
            Expr::Neg(a) => format!("-{}", a.show_prec(params, vars, 3)),
            Expr::ToF32(a) => format!("{} as f32", a.show_prec(params, vars, 3)),
            Expr::ToInt(a) => format!("{} as i32", a.show_prec(params, vars, 3)),
            Expr::Bin(op @ (Op::Cdiv | Op::Min | Op::Max), a, b) => {
                format!(
                    "{}({}, {})",
                    op.symbol(),
                    a.show_prec(params, vars, 0),
                    b.show_prec(params, vars, 0)
                )
            }
            Expr::Bin(op, a, b) => {
                let p = match op {
                    Op::Add | Op::Sub => 1,
                    _ => 2,
                };
                // Left-associative: the right operand needs parentheses at equal precedence.
                let s = format!(
                    "{} {} {}",
                    a.show_prec(params, vars, p),
                    op.symbol(),
                    b.show_prec(params, vars, p + 1)
                );
                if p < outer {
                    format!("({s})")
                } else {
                    s
                }
            }
        }
    }

    /// Loop ids the expression mentions.
    pub fn vars(&self, out: &mut Vec<usize>) {
        match self {
            Expr::Var(id) => out.push(*id),
            Expr::Neg(a) | Expr::ToF32(a) | Expr::ToInt(a) => a.vars(out),
            Expr::Bin(_, a, b) => {
                a.vars(out);
                b.vars(out);
            }
            _ => {}
        }
    }
}

/// One argument of a kernel call, as written in the megakernel.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgExpr {
    /// A pointer parameter of the megakernel, `offset` elements in. `end` is the window's
    /// end (exclusive) when written as a slice, `&w[a..b]`: the kernel may touch only
    /// `[offset, end)` (the interpreter checks it), which lets the scheduler prove two
    /// windows disjoint and the idle CTAs prefetch the window. `w + a` reaches to the end
    /// of the buffer.
    Ptr {
        param: usize,
        offset: Expr,
        end: Option<Expr>,
    },
    /// A scalar or constexpr value.
    Value(Expr),
}

impl ArgExpr {
    pub fn ptr(param: usize) -> ArgExpr {
        ArgExpr::Ptr {
            param,
            offset: Expr::Int(0),
            end: None,
        }
    }
    pub fn ptr_at(param: usize, offset: Expr) -> ArgExpr {
        ArgExpr::Ptr {
            param,
            offset,
            end: None,
        }
    }
    pub fn window(param: usize, start: Expr, end: Expr) -> ArgExpr {
        ArgExpr::Ptr {
            param,
            offset: start,
            end: Some(end),
        }
    }
    pub fn value(e: Expr) -> ArgExpr {
        ArgExpr::Value(e)
    }

    pub fn show(&self, params: &[MParam], vars: &[String]) -> String {
        match self {
            ArgExpr::Value(e) => e.show(params, vars),
            ArgExpr::Ptr { param, offset, end } => {
                let name = params.get(*param).map_or("?", |p| p.name.as_str());
                match (offset, end) {
                    (Expr::Int(0), None) => name.to_string(),
                    (o, None) => format!("{name} + {}", o.show_prec(params, vars, 2)),
                    (o, Some(e)) => format!(
                        "&{name}[{}..{}]",
                        o.show(params, vars),
                        e.show(params, vars)
                    ),
                }
            }
        }
    }
}

/// Per-call hints, written as attributes on the call statement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    /// `#[barrier]`: a full grid barrier before this stage, hazard or not (for a dependency
    /// the IR cannot show, e.g. through memory the kernels reach by other means).
    pub barrier: bool,
}

/// One kernel call: a stage.
#[derive(Clone)]
pub struct Call {
    pub kernel: &'static KernelDef,
    /// The 1-based source line of the call.
    pub line: u32,
    /// The grid (up to 3 dimensions; missing ones are 1).
    pub grid: [Expr; 3],
    /// Every argument after the grid, in the kernel's parameter order (run-time parameters
    /// and constexprs alike, as `launch` takes them).
    pub args: Vec<ArgExpr>,
    pub hints: Hints,
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("kernel", &self.kernel.name())
            .field("line", &self.line)
            .field("grid", &self.grid)
            .field("args", &self.args)
            .finish()
    }
}

/// `for var in start..end { body }` (step 1; zero iterations when `end <= start`).
#[derive(Clone, Debug)]
pub struct Loop {
    /// Unique within the program; `Expr::Var(id)` names this loop's variable.
    pub id: usize,
    pub var: String,
    pub start: Expr,
    pub end: Expr,
    pub body: Vec<Item>,
}

/// `if cond { then } else { els }` on constexprs: `resolve` keeps one branch.
#[derive(Clone, Debug)]
pub struct If {
    pub cond: Expr,
    pub then: Vec<Item>,
    pub els: Vec<Item>,
}

#[derive(Clone, Debug)]
pub enum Item {
    Call(Call),
    Loop(Loop),
    If(If),
}

/// A megakernel as written.
#[derive(Clone, Debug)]
pub struct Program {
    pub name: String,
    /// The file that holds the megakernel (`file!()`).
    pub file: String,
    pub params: Vec<MParam>,
    pub body: Vec<Item>,
}

impl Program {
    pub fn new(name: &str, file: &str, params: Vec<MParam>, body: Vec<Item>) -> Program {
        Program {
            name: name.into(),
            file: file.into(),
            params,
            body,
        }
    }

    /// Loop variable names by loop id.
    pub fn loop_vars(&self) -> Vec<String> {
        fn walk(items: &[Item], out: &mut Vec<String>) {
            for it in items {
                match it {
                    Item::Loop(l) => {
                        if out.len() <= l.id {
                            out.resize(l.id + 1, String::new());
                        }
                        out[l.id] = l.var.clone();
                        walk(&l.body, out);
                    }
                    Item::If(i) => {
                        walk(&i.then, out);
                        walk(&i.els, out);
                    }
                    Item::Call(_) => {}
                }
            }
        }
        let mut out = vec![];
        walk(&self.body, &mut out);
        out
    }

    /// The run-time parameters (pointers and scalars), in declaration order: what `launch`
    /// takes as `Arg`s.
    pub fn runtime_params(&self) -> impl Iterator<Item = (usize, &MParam)> {
        self.params
            .iter()
            .enumerate()
            .filter(|(_, p)| !matches!(p.kind, ParamKind::Constexpr(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsl_ir::{ConstKind, DType};

    fn params() -> Vec<MParam> {
        vec![
            MParam {
                name: "x".into(),
                kind: ParamKind::Ptr(DType::BF16),
            },
            MParam {
                name: "n".into(),
                kind: ParamKind::Scalar(DType::I32),
            },
            MParam {
                name: "eps".into(),
                kind: ParamKind::Scalar(DType::F32),
            },
            MParam {
                name: "D".into(),
                kind: ParamKind::Constexpr(ConstKind::Int),
            },
        ]
    }

    #[test]
    fn expressions_evaluate_type_and_print() {
        let p = params();
        let e = Expr::bin(
            Op::Mul,
            Expr::bin(Op::Add, Expr::var(0), Expr::int(1)),
            Expr::param(3),
        );
        let env = Env {
            params: &[
                None,
                Some(Val::Int(7)),
                Some(Val::Float(1e-6)),
                Some(Val::Int(64)),
            ],
            vars: &[Some(2)],
        };
        assert_eq!(e.eval(&env, &p), Ok(Val::Int(192)));
        assert_eq!(e.ty(&p), Ok(ETy::Int));
        assert_eq!(e.show(&p, &["layer".into()]), "(layer + 1) * D");
        assert!(!e.is_const(&p));
        let c = Expr::bin(Op::Cdiv, Expr::param(3), Expr::int(8));
        assert!(c.is_const(&p));
        assert_eq!(c.eval(&env, &p), Ok(Val::Int(8)));
        assert!(Expr::bin(Op::Add, Expr::param(2), Expr::int(1))
            .ty(&p)
            .is_err());
        assert!(Expr::param(0).ty(&p).unwrap_err().contains("pointer `x`"));
        let sub = Expr::bin(
            Op::Sub,
            Expr::param(1),
            Expr::bin(Op::Sub, Expr::int(1), Expr::int(2)),
        );
        assert_eq!(sub.show(&p, &[]), "n - (1 - 2)");
        assert_eq!(sub.eval(&env, &p), Ok(Val::Int(8)));
        let unknown = Env {
            params: &[None, None, None, Some(Val::Int(64))],
            vars: &[],
        };
        assert!(Expr::param(1)
            .eval(&unknown, &p)
            .unwrap_err()
            .contains("`n`"));
        assert_eq!(
            ArgExpr::window(
                0,
                Expr::var(0),
                Expr::bin(Op::Add, Expr::var(0), Expr::int(4))
            )
            .show(&p, &["l".into()]),
            "&x[l..l + 4]"
        );
        assert_eq!(
            ArgExpr::ptr_at(0, Expr::bin(Op::Mul, Expr::var(0), Expr::param(3)))
                .show(&p, &["l".into()]),
            "x + l * D"
        );
    }
}
