//! What can go wrong while building a kernel, and which operand of the call it is about.
//!
//! Every [`Builder`](crate::Builder) method returns a [`BuildError`] on misuse. Its
//! [`operand`](BuildError::operand) names the argument of the builder call at fault (the
//! pointer, the mask, `dot`'s accumulator, ...), so the macro points the compile error at
//! the token the user wrote for that argument by construction, never by reading the message.
use crate::ir::{BinOp, ReduceOp, UnaryOp};
use crate::types::*;
use std::fmt;

pub type BResult<T> = Result<T, BuildError>;

/// The argument of a builder call an error is about. `Op` is the operation as a whole (a
/// mismatch between operands, or an operation that does not take this kind of value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    Op,
    /// `select`'s and `begin_if`'s condition.
    Cond,
    /// The first operand: `dot`'s `a`, `select`'s `a`, `trans`'s `x`.
    A,
    /// The second operand: `dot`'s `b`, `select`'s `b`.
    B,
    /// `dot`'s accumulator.
    Acc,
    /// The pointers of a load, store or atomic.
    Ptr,
    /// The value written by a store, atomic or assignment; `full`'s fill value.
    Value,
    Mask,
    /// A load's `other`.
    Other,
    /// An axis argument (`program_id`, `expand_dims`, reductions).
    Axis,
    /// A shape argument (`full`, `zeros`).
    Shape,
    /// A loop's start, end or step.
    Start,
    End,
    Step,
}

/// A misuse the builder refuses; `Display` is the message the user sees.
#[derive(Clone, Debug, PartialEq)]
pub enum BuildError {
    DuplicateParam {
        name: String,
    },
    ScalarParam {
        dtype: DType,
    },
    /// `param_value` of an index `param` never returned: a bug in the caller.
    NoSuchParam {
        index: usize,
    },
    Axis {
        what: &'static str,
        axis: i64,
    },
    IntLiteral {
        value: i64,
    },
    EmptyArange {
        start: Dim,
        end: Dim,
    },
    /// A shape of rank 3 or more (`full`, `broadcast_to`).
    Rank {
        shape: Vec<Dim>,
    },
    FillNotScalar {
        ty: Type,
    },
    UnaryPointer {
        op: UnaryOp,
    },
    UnaryDType {
        op: UnaryOp,
        dtype: DType,
    },
    ShapeMismatch {
        op: BinOp,
        a: Type,
        b: Type,
    },
    PointerArith {
        op: BinOp,
        a: Elem,
        b: Elem,
    },
    BitwiseMixed {
        op: BinOp,
        a: DType,
        b: DType,
    },
    BitwiseDType {
        op: BinOp,
        dtype: DType,
    },
    BoolArith {
        op: BinOp,
    },
    /// A bool meets a number (`promote`).
    BoolMix {
        a: DType,
        b: DType,
    },
    WhereCond {
        ty: Type,
    },
    /// `select` of a pointer: `operand` is the one that is a pointer (A or B).
    WherePointer {
        operand: Operand,
    },
    WhereShape {
        cond: Type,
        a: Type,
        b: Type,
    },
    CastPointer {
        ty: Type,
        to: DType,
    },
    ConvertPointer {
        ty: Type,
        to: DType,
    },
    ExpandRank {
        ty: Type,
    },
    ExpandAxis {
        axis: i64,
        ty: Type,
    },
    Broadcast {
        ty: Type,
        shape: Vec<Dim>,
    },
    LoadPtr {
        ty: Type,
    },
    LoadOtherPointer,
    LoadOtherShape {
        other: Type,
        ptr: Type,
    },
    MaskDType {
        what: &'static str,
        ty: Type,
    },
    MaskShape {
        what: &'static str,
        mask: Vec<Dim>,
        ptr: Vec<Dim>,
    },
    AtomicDType {
        what: &'static str,
        dtype: DType,
    },
    WritePtr {
        what: &'static str,
        ty: Type,
    },
    WritePointerValue {
        what: &'static str,
    },
    /// A float stored (or atomically written) through a pointer of another dtype.
    WriteNeedsCast {
        what: &'static str,
        from: DType,
        to: DType,
    },
    WriteShape {
        what: &'static str,
        value: Vec<Dim>,
        ptr: Vec<Dim>,
    },
    ReducePointer {
        op: ReduceOp,
    },
    ReduceScalar {
        op: ReduceOp,
        ty: Type,
    },
    ReduceBool {
        op: ReduceOp,
    },
    ReduceAxis {
        op: ReduceOp,
        axis: i64,
        ty: Type,
    },
    /// `operand` is A or B.
    DotRank {
        operand: Operand,
        ty: Type,
    },
    DotDType {
        operand: Operand,
        ty: Type,
    },
    DotMixed {
        a: Type,
        b: Type,
    },
    DotInner {
        a: Type,
        b: Type,
    },
    DotAcc {
        want: Type,
        got: Type,
    },
    TransRank {
        ty: Type,
    },
    TransNotNumbers {
        ty: Type,
    },
    AssignType {
        name: String,
        from: Elem,
        ty: Type,
    },
    AssignShape {
        name: String,
        from: Vec<Dim>,
        to: Vec<Dim>,
    },
    /// `operand` is Start, End or Step.
    LoopBound {
        operand: Operand,
        ty: Type,
    },
    IfCond {
        ty: Type,
    },
    /// Control flow opened and closed out of order: a bug in the caller, not the user's.
    Nesting {
        what: &'static str,
    },
}

impl BuildError {
    /// The argument of the builder call this error is about.
    pub fn operand(&self) -> Operand {
        use BuildError::*;
        match self {
            Axis { .. } | ExpandAxis { .. } | ReduceAxis { .. } => Operand::Axis,
            Rank { .. } => Operand::Shape,
            FillNotScalar { .. } => Operand::Value,
            WhereCond { .. } | IfCond { .. } => Operand::Cond,
            WherePointer { operand }
            | DotRank { operand, .. }
            | DotDType { operand, .. }
            | LoopBound { operand, .. } => *operand,
            DotMixed { .. } | DotInner { .. } => Operand::B,
            DotAcc { .. } => Operand::Acc,
            TransRank { .. } | TransNotNumbers { .. } => Operand::A,
            LoadPtr { .. } | AtomicDType { .. } | WritePtr { .. } => Operand::Ptr,
            LoadOtherPointer | LoadOtherShape { .. } => Operand::Other,
            MaskDType { .. } | MaskShape { .. } => Operand::Mask,
            WritePointerValue { .. }
            | WriteNeedsCast { .. }
            | WriteShape { .. }
            | AssignType { .. }
            | AssignShape { .. } => Operand::Value,
            DuplicateParam { .. }
            | ScalarParam { .. }
            | NoSuchParam { .. }
            | IntLiteral { .. }
            | EmptyArange { .. }
            | UnaryPointer { .. }
            | UnaryDType { .. }
            | ShapeMismatch { .. }
            | PointerArith { .. }
            | BitwiseMixed { .. }
            | BitwiseDType { .. }
            | BoolArith { .. }
            | BoolMix { .. }
            | WhereShape { .. }
            | CastPointer { .. }
            | ConvertPointer { .. }
            | ExpandRank { .. }
            | Broadcast { .. }
            | ReducePointer { .. }
            | ReduceScalar { .. }
            | ReduceBool { .. }
            | Nesting { .. } => Operand::Op,
        }
    }
}

fn which(o: Operand) -> &'static str {
    if o == Operand::A {
        "first"
    } else {
        "second"
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use BuildError::*;
        match self {
            DuplicateParam { name } => write!(f, "parameter `{name}` is declared twice"),
            ScalarParam { dtype } => write!(f, "scalar parameters are i32 or f32, not {dtype}"),
            NoSuchParam { index } => write!(f, "no such parameter (index {index})"),
            Axis { what, axis } => write!(f, "{what} axis must be 0, 1 or 2, got {axis}"),
            IntLiteral { value } => write!(f, "integer literal {value} does not fit in i32"),
            EmptyArange { start, end } => {
                write!(f, "arange({start}, {end}) is empty: end must exceed start")
            }
            Rank { shape } => write!(
                f,
                "tiles have at most 2 dimensions, got {}",
                shape_str(shape)
            ),
            FillNotScalar { ty } => write!(f, "full() takes a scalar fill value, got {ty}"),
            UnaryPointer { op } => write!(f, "`{}` cannot take a pointer", op.name()),
            UnaryDType { op, dtype } => {
                let hint = if op.float_only() && *dtype == DType::I32 {
                    ": cast first with `.to(f32)`"
                } else {
                    ""
                };
                write!(f, "`{}` does not take {dtype} values{hint}", op.name())
            }
            ShapeMismatch { op, a, b } => {
                write!(f, "shape mismatch in `{}`: {a} vs {b}", op.symbol())
            }
            PointerArith { op, a, b } => write!(
                f,
                "pointer arithmetic is `ptr + i32 offsets` or `ptr - i32 offsets`; got `{a} {} {b}`",
                op.symbol()
            ),
            BitwiseMixed { op, a, b } => write!(
                f,
                "`{}` needs both sides of one type, got {a} and {b}",
                op.symbol()
            ),
            BitwiseDType { op, dtype } => {
                write!(f, "`{}` takes i32 or bool values, not {dtype}", op.symbol())
            }
            BoolArith { op } => write!(f, "`{}` does not take bool values", op.symbol()),
            BoolMix { a, b } => {
                write!(f, "cannot combine {a} and {b}: cast the bool with `.to(..)`")
            }
            WhereCond { ty } => write!(f, "where_ needs a bool condition, got {ty}"),
            WherePointer { .. } => write!(f, "where_ selects between numbers, not pointers"),
            WhereShape { cond, a, b } => {
                write!(f, "shape mismatch in where_: {cond} / {a} / {b}")
            }
            CastPointer { ty, to } => write!(f, "cannot cast a pointer ({ty}) to {to}"),
            ConvertPointer { ty, to } => write!(f, "cannot convert a pointer ({ty}) to {to}"),
            ExpandRank { ty } => write!(
                f,
                "expand_dims on {ty}: tiles have at most 2 dimensions"
            ),
            ExpandAxis { axis, ty } => {
                write!(f, "expand_dims axis {axis} is out of range for {ty}")
            }
            Broadcast { ty, shape } => {
                write!(f, "cannot broadcast {ty} to {}", shape_str(shape))
            }
            LoadPtr { ty } => write!(
                f,
                "load() needs pointers (a Ptr parameter plus offsets), got {ty}"
            ),
            LoadOtherPointer => write!(f, "load()'s `other` is a number, not a pointer"),
            LoadOtherShape { other, ptr } => write!(
                f,
                "load()'s `other` of shape {other} does not fit pointers {ptr}"
            ),
            MaskDType { what, ty } => {
                write!(f, "{what}() mask must be bool (a comparison), got {ty}")
            }
            MaskShape { what, mask, ptr } => write!(
                f,
                "{what}() mask of shape {} does not fit pointers of shape {}",
                shape_str(mask),
                shape_str(ptr)
            ),
            AtomicDType { what, dtype } => write!(
                f,
                "{what} works on Ptr<i32> or Ptr<f32> (max too, not min, for f32), not Ptr<{dtype}>"
            ),
            WritePtr { what, ty } => write!(f, "{what}() needs pointers, got {ty}"),
            WritePointerValue { what } => {
                write!(f, "{what}() of a pointer value is not supported")
            }
            WriteNeedsCast { what, from, to } => write!(
                f,
                "{what} of {from} values through Ptr<{to}>: convert explicitly with `.to({to})`"
            ),
            WriteShape { what, value, ptr } => write!(
                f,
                "{what}() of shape {} does not fit pointers of shape {}",
                shape_str(value),
                shape_str(ptr)
            ),
            ReducePointer { op } => write!(f, "{}() of pointers", op.name()),
            ReduceScalar { op, ty } => {
                write!(f, "{}() needs a tile, got the scalar {ty}", op.name())
            }
            ReduceBool { op } => write!(
                f,
                "{}() of bool values: cast with `.to(i32)` first",
                op.name()
            ),
            ReduceAxis { op, axis, ty } => {
                write!(f, "{}() axis {axis} is out of range for {ty}", op.name())
            }
            DotRank { operand, ty } => write!(
                f,
                "dot's {} operand must be a 2-D tile, got {ty}",
                which(*operand)
            ),
            DotDType { operand, ty } => write!(
                f,
                "dot takes bf16, f16 or f32 tiles; its {} operand is {ty}",
                which(*operand)
            ),
            DotMixed { a, b } => write!(
                f,
                "dot's operands must have one dtype: {a} · {b} (convert one with `.to({})`)",
                a.elem
            ),
            DotInner { a, b } => write!(
                f,
                "dot's inner dimensions differ: {a} · {b} (a is [M, K], b is [K, N]; `trans(x)` swaps a tile's dimensions)"
            ),
            DotAcc { want, got } => write!(
                f,
                "dot's accumulator must be {want} (f32, [M, N] of a · b), got {got}"
            ),
            TransRank { ty } => write!(f, "trans takes a 2-D tile, got {ty}"),
            TransNotNumbers { ty } => write!(f, "trans takes a tile of numbers, got {ty}"),
            AssignType { name, from, ty } => write!(
                f,
                "cannot assign {from} to `{name}` ({ty}): convert explicitly with `.to(..)`"
            ),
            AssignShape { name, from, to } => write!(
                f,
                "cannot assign a value of shape {} to `{name}` of shape {}",
                shape_str(from),
                shape_str(to)
            ),
            LoopBound { ty, .. } => write!(f, "loop bounds are i32 scalars, got {ty}"),
            IfCond { ty } => write!(
                f,
                "`if` needs a bool scalar (uniform over the program), got {ty}; use where_ for tiles"
            ),
            Nesting { what } => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for BuildError {}
