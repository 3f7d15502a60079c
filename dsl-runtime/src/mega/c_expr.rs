//! The megakernel program's names, scalar expressions and arguments as C (what
//! `mega/cuda.rs` writes): integers in `long long`, floats in `float`, constexprs folded,
//! user names kept clear of C keywords and generated names.
use super::program::{ArgExpr, ETy, Expr, Op, Val};
use super::resolve::Resolved;
use crate::cuda::C_KEYWORDS;
use dsl_ir::{DType, ParamKind};

/// A user name as a C identifier that cannot clash with C keywords or generated names.
pub fn c_name(s: &str) -> String {
    if C_KEYWORDS.contains(&s) || s == "smem" || s.starts_with("tsr_") {
        format!("{s}_")
    } else {
        s.to_string()
    }
}

pub(super) fn c_ptr_type(d: DType) -> &'static str {
    match d {
        DType::BF16 => "bf16_t*",
        DType::F16 => "f16_t*",
        DType::F32 => "float*",
        DType::I32 => "int*",
        DType::Bool => "unsigned char*",
    }
}

fn c_float(v: f32) -> String {
    if v.is_finite() {
        format!("{v:?}f")
    } else {
        format!("__int_as_float({:#x})", v.to_bits())
    }
}

/// A scalar expression as C: integers in `long long`, floats in `float`, constexprs folded.
pub fn c_expr(r: &Resolved, e: &Expr) -> String {
    match e {
        Expr::Int(v) => format!("{v}LL"),
        Expr::Float(v) => c_float(*v as f32),
        Expr::Bool(b) => (if *b { "1LL" } else { "0LL" }).into(),
        Expr::Param(i) => match r.const_env[*i] {
            Some(Val::Int(v)) => format!("{v}LL"),
            Some(Val::Bool(b)) => (if b { "1LL" } else { "0LL" }).into(),
            Some(Val::Float(f)) => c_float(f),
            None => match r.params()[*i].kind {
                ParamKind::Scalar(DType::F32) => c_name(&r.params()[*i].name),
                _ => format!("(long long){}", c_name(&r.params()[*i].name)),
            },
        },
        Expr::Var(id) => c_name(&r.vars[*id]),
        Expr::Neg(a) => format!("(-{})", c_expr(r, a)),
        Expr::ToF32(a) => format!("((float){})", c_expr(r, a)),
        Expr::ToInt(a) => format!("((long long){})", c_expr(r, a)),
        Expr::Bin(op, a, b) => {
            let (x, y) = (c_expr(r, a), c_expr(r, b));
            let float = e.ty(r.params()) == Ok(ETy::Float);
            match op {
                Op::Add => format!("({x} + {y})"),
                Op::Sub => format!("({x} - {y})"),
                Op::Mul => format!("({x} * {y})"),
                Op::Div => format!("({x} / {y})"),
                Op::Rem => format!("({x} % {y})"),
                Op::Cdiv => format!("tsr_cdiv({x}, {y})"),
                Op::Min if float => format!("fminf({x}, {y})"),
                Op::Max if float => format!("fmaxf({x}, {y})"),
                Op::Min => format!("tsr_min({x}, {y})"),
                Op::Max => format!("tsr_max({x}, {y})"),
            }
        }
    }
}

pub(super) fn c_arg(r: &Resolved, a: &ArgExpr) -> String {
    match a {
        ArgExpr::Ptr {
            param,
            offset: Expr::Int(0),
            ..
        } => c_name(&r.params()[*param].name),
        ArgExpr::Ptr { param, offset, .. } => format!(
            "{} + {}",
            c_name(&r.params()[*param].name),
            c_expr(r, offset)
        ),
        ArgExpr::Value(e) => match e.ty(r.params()) {
            Ok(ETy::Float) => format!("(float){}", c_expr(r, e)),
            _ => format!("(int){}", c_expr(r, e)),
        },
    }
}
