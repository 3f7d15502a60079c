//! The tile IR: a kernel is a list of statements over SSA values and mutable variables.
//!
//! Invariants the builder guarantees (so every backend stays simple):
//! - every operand of `Binary` and `Where` has exactly the result's shape (broadcasts are
//!   explicit `Broadcast` ops) and, for arithmetic, the same dtype (casts are explicit);
//! - pointer arithmetic is `Binary(Add|Sub, ptr, i32 offsets)` with a pointer result;
//! - a `Load`/`Store` mask is a bool value of the pointer's shape; `other` has the loaded
//!   type; a stored value has the pointee dtype and the pointer's shape;
//! - values are defined before use, once; a `For` defines its induction variable and a
//!   scalar `Atomic` the old value it returns.
use crate::types::{ConstExpr, DType, Type};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ValueId(pub u32);

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VarId(pub u32);

/// Where a statement came from in the user's kernel source.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize)]
pub struct Src {
    /// 1-based line in the file that holds the kernel.
    pub line: u32,
    /// The source expression, as written (whitespace normalised).
    pub text: String,
    /// The `let` binding this value is the final result of, if any (`cols`, `acc`): the
    /// name generated code gives it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Inside an inlined `#[tile_fn]` (then `line` is the call's): the helper and the
    /// statement's line in the helper's own source, `normed_gemv_rows:40` (the name alone
    /// where that line is not known, as in the tile library). Generated code quotes both.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub via: String,
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    /// The file that holds the kernel (`file!()` of the macro call).
    pub file: String,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
    /// The type of each value, indexed by `ValueId`.
    pub values: Vec<Type>,
    /// The type and source name of each mutable variable, indexed by `VarId`.
    pub vars: Vec<VarInfo>,
    /// Constexpr bindings applied by `specialize` (empty before).
    pub bound: Vec<(String, ConstVal)>,
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub struct VarInfo {
    pub name: String,
    pub ty: Type,
}

#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum ParamKind {
    /// A pointer into a device buffer of this dtype.
    Ptr(DType),
    /// A run-time scalar (i32 or f32), uniform across the program.
    Scalar(DType),
    /// A compile-time value: tile sizes, flags. Each distinct binding is compiled once.
    Constexpr(ConstKind),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum ConstKind {
    Int,
    Bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ConstVal {
    Int(i64),
    Bool(bool),
}

/// As written in Rust (`8`, `true`): body names (`gemv_BM8_BK256`), autotuning records.
impl std::fmt::Display for ConstVal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConstVal::Int(i) => write!(f, "{i}"),
            ConstVal::Bool(b) => write!(f, "{b}"),
        }
    }
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub enum Stmt {
    /// `%id: ty = op`
    Let { id: ValueId, op: Op, src: Src },
    /// `let mut name = init;` (a loop-carried or conditionally updated value).
    DeclVar { var: VarId, init: ValueId, src: Src },
    /// `name = value;`
    Assign {
        var: VarId,
        value: ValueId,
        src: Src,
    },
    Store {
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        src: Src,
    },
    /// Atomic read-modify-write on global memory. On a tile, lane by lane and relaxed; the
    /// old values are not returned. On a scalar pointer, once per program, ordered after
    /// every earlier memory access of the program and before every later one (acquire and
    /// release at GPU scope, Triton's default `sem`), and `old` is the value it replaced (0
    /// when masked off): the last-program pattern of split reductions.
    Atomic {
        op: AtomicOp,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        #[serde(default)]
        old: Option<ValueId>,
        src: Src,
    },
    /// `prefetch(ptrs, mask)`: a hint that the lines the (masked-on) pointers name are read
    /// soon. On a GPU each becomes an L2 prefetch, which moves no value and waits for
    /// nothing; the interpreter checks the pointers stay in their buffers and does nothing
    /// else. Not a read: a megakernel stage may prefetch before its wait what a stage it
    /// waits for is still writing (the load after the wait reads the written value).
    Prefetch {
        ptr: ValueId,
        mask: Option<ValueId>,
        src: Src,
    },
    /// `for iv in (start..end).step_by(step) { body }`; all i32 scalars; step > 0.
    For {
        iv: ValueId,
        start: ValueId,
        end: ValueId,
        step: ValueId,
        body: Vec<Stmt>,
        src: Src,
    },
    /// `if cond { then } else { els }` on a bool scalar (uniform: no divergence within a program).
    If {
        cond: ValueId,
        then: Vec<Stmt>,
        els: Vec<Stmt>,
        src: Src,
    },
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
pub enum Op {
    ProgramId(u8),
    NumPrograms(u8),
    /// A run-time pointer or scalar parameter, by index into `Kernel::params`.
    Param(usize),
    /// A constexpr integer expression, as an i32 scalar (or bool for a bool constexpr).
    Const(ConstExpr),
    /// A literal scalar of the value's dtype.
    Lit(Lit),
    /// `arange(start, end)`: i32 tile `[end - start]`.
    Arange {
        start: ConstExpr,
        end: ConstExpr,
    },
    Unary(UnaryOp, ValueId),
    Binary(BinOp, ValueId, ValueId),
    /// `where_(cond, a, b)`, elementwise.
    Where(ValueId, ValueId, ValueId),
    /// Conversion to the value's dtype (round to nearest even for floats, truncation
    /// toward zero for float -> int, as Rust's `as`).
    Cast(ValueId),
    /// Inserts a dimension of size 1 at `axis`.
    ExpandDims(ValueId, u8),
    /// A scalar repeated to the value's shape (`zeros`, `full`, scalar operands), or a tile
    /// of the same rank repeated along its dimensions of size 1.
    Broadcast(ValueId),
    Load {
        ptr: ValueId,
        mask: Option<ValueId>,
        other: Option<ValueId>,
    },
    /// Reduction along `axis`; the axis disappears from the shape.
    Reduce {
        op: ReduceOp,
        x: ValueId,
        axis: u8,
    },
    ReadVar(VarId),
    /// `dot(a, b)` / `dot(a, b, acc)`: the f32 `[M, N]` tile `acc + a·b` for `a: [M, K]`,
    /// `b: [K, N]` of one dtype (bf16, f16 or f32) and `acc: f32[M, N]` (zeros without one).
    /// Accumulates in f32 in ascending k, starting from `acc` (the interpreter's order; a
    /// tensor core's order differs, see docs/LANGUAGE.md).
    Dot {
        a: ValueId,
        b: ValueId,
        acc: Option<ValueId>,
    },
    /// `trans(x)` / `x.trans()`: the transpose of a 2-D tile (`[M, N]` -> `[N, M]`).
    Trans(ValueId),
}

#[derive(Clone, Copy, PartialEq, Debug, Serialize, Deserialize)]
pub enum Lit {
    Int(i64),
    /// Stored so that ±inf and NaN survive JSON (which has no spelling for them).
    Float(#[serde(with = "float_json")] f64),
    Bool(bool),
}

/// JSON has no inf or NaN: finite floats are written as numbers, the others as strings.
mod float_json {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        if v.is_finite() {
            s.serialize_f64(*v)
        } else {
            s.serialize_str(&v.to_string())
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum F {
            N(f64),
            S(String),
        }
        match F::deserialize(d)? {
            F::N(v) => Ok(v),
            F::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum UnaryOp {
    Neg,
    /// Logical not for bool, bitwise not for i32.
    Not,
    Abs,
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Sigmoid,
    Silu,
    Sin,
    Cos,
    Tanh,
}

impl UnaryOp {
    /// The DSL's name for it, where it is a function.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Not => "not",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Exp2 => "exp2",
            UnaryOp::Log => "log",
            UnaryOp::Log2 => "log2",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Silu => "silu",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
        }
    }
    pub fn from_name(s: &str) -> Option<UnaryOp> {
        use UnaryOp::*;
        [
            Abs, Exp, Exp2, Log, Log2, Sqrt, Rsqrt, Sigmoid, Silu, Sin, Cos, Tanh,
        ]
        .into_iter()
        .find(|op| op.name() == s)
    }
    /// True for the transcendental functions, which take float operands only.
    pub fn float_only(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Not | UnaryOp::Abs)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    /// Float division, or integer division truncating toward zero (Rust and C agree).
    Div,
    /// Remainder with the sign of the dividend (Rust and C agree).
    Rem,
    Min,
    Max,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    /// Logical for bool, bitwise for i32.
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

impl BinOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne
        )
    }
    pub fn is_bitwise(self) -> bool {
        matches!(
            self,
            BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl | BinOp::Shr
        )
    }
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Min => "minimum",
            BinOp::Max => "maximum",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&",
            BinOp::Or => "|",
            BinOp::Xor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ReduceOp {
    /// Accumulates in f32 for f16/bf16 inputs; the result has the input dtype.
    Sum,
    Max,
    Min,
    /// Index (i32) of the largest element; ties go to the lowest index; NaN is never chosen
    /// over a number.
    Argmax,
    Argmin,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Argmax => "argmax",
            ReduceOp::Argmin => "argmin",
        }
    }
    pub fn from_name(s: &str) -> Option<ReduceOp> {
        use ReduceOp::*;
        [Sum, Max, Min, Argmax, Argmin]
            .into_iter()
            .find(|op| op.name() == s)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum AtomicOp {
    Add,
    Max,
    Min,
}

impl Kernel {
    pub fn ty(&self, v: ValueId) -> &Type {
        &self.values[v.0 as usize]
    }
    pub fn var_ty(&self, v: VarId) -> &Type {
        &self.vars[v.0 as usize].ty
    }
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the IR always serialises")
    }
    pub fn from_json(s: &str) -> Result<Kernel, String> {
        serde_json::from_str(s).map_err(|e| format!("malformed kernel IR: {e}"))
    }
    /// Constexpr parameters, in declaration order.
    pub fn constexprs(&self) -> impl Iterator<Item = &Param> {
        self.params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Constexpr(_)))
    }
    /// Run-time parameters (pointers and scalars), in declaration order: the launch arguments.
    pub fn runtime_params(&self) -> impl Iterator<Item = (usize, &Param)> {
        self.params
            .iter()
            .enumerate()
            .filter(|(_, p)| !matches!(p.kind, ParamKind::Constexpr(_)))
    }
}

/// Visits every statement, depth first, in program order.
pub fn walk<'a>(body: &'a [Stmt], f: &mut dyn FnMut(&'a Stmt)) {
    for s in body {
        f(s);
        match s {
            Stmt::For { body, .. } => walk(body, f),
            Stmt::If { then, els, .. } => {
                walk(then, f);
                walk(els, f);
            }
            _ => {}
        }
    }
}
