//! Element types, symbolic dimensions and tile types.
use serde::{Deserialize, Serialize};
use std::fmt;

/// The scalar element types a tile can hold.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum DType {
    Bool,
    I32,
    F16,
    BF16,
    F32,
}

impl DType {
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32)
    }
    /// The Rust spelling, as written in kernels (`x.to(bf16)`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I32 => "i32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
        }
    }
    pub fn from_name(s: &str) -> Option<DType> {
        Some(match s {
            "bool" => DType::Bool,
            "i32" => DType::I32,
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            "f32" => DType::F32,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one element of a value is: a number, or a pointer to numbers in global memory.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum Elem {
    Num(DType),
    Ptr(DType),
}

impl Elem {
    pub fn num(self) -> Option<DType> {
        match self {
            Elem::Num(d) => Some(d),
            Elem::Ptr(_) => None,
        }
    }
    pub fn pointee(self) -> Option<DType> {
        match self {
            Elem::Ptr(d) => Some(d),
            Elem::Num(_) => None,
        }
    }
}

impl fmt::Display for Elem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::Num(d) => write!(f, "{d}"),
            Elem::Ptr(d) => write!(f, "Ptr<{d}>"),
        }
    }
}

/// An integer expression over constexpr parameters: tile dimensions and constexpr values.
/// Kept symbolic at macro time (so shapes are checked before the values are known) and
/// folded to literals by [`crate::Kernel::specialize`].
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ConstExpr {
    Lit(i64),
    Param(String),
    Bin(ConstOp, Box<ConstExpr>, Box<ConstExpr>),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub enum ConstOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

impl ConstExpr {
    pub fn lit(v: i64) -> Self {
        ConstExpr::Lit(v)
    }
    /// Builds `a op b`, folding literals and the identities that arise from `arange(0, N)`.
    pub fn bin(op: ConstOp, a: ConstExpr, b: ConstExpr) -> ConstExpr {
        use ConstExpr::Lit;
        match (op, &a, &b) {
            (_, Lit(x), Lit(y)) => {
                if let Some(v) = fold(op, *x, *y) {
                    return Lit(v);
                }
            }
            (ConstOp::Add | ConstOp::Sub, _, Lit(0)) => return a,
            (ConstOp::Add, Lit(0), _) => return b,
            (ConstOp::Mul | ConstOp::Div, _, Lit(1)) => return a,
            (ConstOp::Mul, Lit(1), _) => return b,
            _ => {}
        }
        ConstExpr::Bin(op, Box::new(a), Box::new(b))
    }
    pub fn as_lit(&self) -> Option<i64> {
        match self {
            ConstExpr::Lit(v) => Some(*v),
            _ => None,
        }
    }
    /// Evaluates with every parameter bound; `None` names an unbound parameter or a
    /// division by zero.
    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<i64>) -> Result<i64, String> {
        match self {
            ConstExpr::Lit(v) => Ok(*v),
            ConstExpr::Param(p) => lookup(p).ok_or_else(|| format!("constexpr `{p}` is not bound")),
            ConstExpr::Bin(op, a, b) => {
                let (x, y) = (a.eval(lookup)?, b.eval(lookup)?);
                fold(*op, x, y).ok_or_else(|| format!("`{self}` divides by zero or overflows"))
            }
        }
    }
}

fn fold(op: ConstOp, x: i64, y: i64) -> Option<i64> {
    match op {
        ConstOp::Add => x.checked_add(y),
        ConstOp::Sub => x.checked_sub(y),
        ConstOp::Mul => x.checked_mul(y),
        ConstOp::Div => x.checked_div(y),
        ConstOp::Rem => x.checked_rem(y),
    }
}

impl fmt::Display for ConstExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConstExpr::Lit(v) => write!(f, "{v}"),
            ConstExpr::Param(p) => f.write_str(p),
            ConstExpr::Bin(op, a, b) => {
                let s = match op {
                    ConstOp::Add => "+",
                    ConstOp::Sub => "-",
                    ConstOp::Mul => "*",
                    ConstOp::Div => "/",
                    ConstOp::Rem => "%",
                };
                write!(f, "({a} {s} {b})")
            }
        }
    }
}

/// One dimension of a tile: a constexpr integer expression.
pub type Dim = ConstExpr;

/// The type of every IR value: element type and shape. Rank 0 is a scalar (uniform across
/// the program), rank 1 and 2 are tiles.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub struct Type {
    pub elem: Elem,
    pub shape: Vec<Dim>,
}

impl Type {
    pub fn scalar(elem: Elem) -> Type {
        Type {
            elem,
            shape: vec![],
        }
    }
    pub fn num(d: DType, shape: Vec<Dim>) -> Type {
        Type {
            elem: Elem::Num(d),
            shape,
        }
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }
    pub fn with_elem(&self, elem: Elem) -> Type {
        Type {
            elem,
            shape: self.shape.clone(),
        }
    }
    /// The concrete shape of a specialised kernel's value.
    ///
    /// # Panics
    /// If the kernel was not specialised: every dimension is a literal after
    /// [`crate::Kernel::specialize`], so a panic here is a bug in the caller, not user input.
    pub fn dims(&self) -> Vec<usize> {
        self.shape
            .iter()
            .map(|d| d.as_lit().expect("dims() on an unspecialised kernel") as usize)
            .collect()
    }
    pub fn numel(&self) -> usize {
        self.dims().iter().product()
    }
}

pub fn shape_str(shape: &[Dim]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_scalar() {
            write!(f, "{}", self.elem)
        } else {
            write!(f, "{}{}", self.elem, shape_str(&self.shape))
        }
    }
}
