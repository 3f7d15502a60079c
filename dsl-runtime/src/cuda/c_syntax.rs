//! How one op is spelled in C: storage and register types, literals, casts, the unary,
//! binary and reduction operators, loads, stores and atomics of one element. Pure
//! functions of dtypes and expression text: the emitter decides what to write and where,
//! this module only how.
use dsl_ir::*;

/// C and C++ keywords, CUDA's built-in names, and the types and helpers the generated code
/// declares: no user name may become one of them. The kernel emitter adds the names its
/// own code uses (`emit.rs`), the megakernel generator its `tsr_` prefix (`mega/cuda.rs`).
pub(crate) const C_KEYWORDS: &[&str] = &[
    "auto",
    "bool",
    "break",
    "case",
    "char",
    "const",
    "constexpr",
    "continue",
    "default",
    "delete",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "false",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "new",
    "nullptr",
    "operator",
    "private",
    "public",
    "register",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "template",
    "this",
    "true",
    "typedef",
    "typename",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "class",
    "namespace",
    "using",
    "asm",
    "friend",
    "virtual",
    "mutable",
    "explicit",
    "export",
    "not",
    "and",
    "or",
    "xor",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "min",
    "max",
    "abs",
    "bf16_t",
    "f16_t",
    "uint4",
    "uint2",
    "float4",
    "int4",
    "restrict",
    "protected",
];

pub(super) fn num(e: Elem) -> DType {
    match e {
        Elem::Num(d) => d,
        Elem::Ptr(_) => DType::I32,
    }
}

pub(super) fn storage_c(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::I32 => "int",
        DType::F32 => "float",
        DType::BF16 => "bf16_t",
        DType::F16 => "f16_t",
    }
}

/// The register type of a value: bf16/f16 compute in float registers.
pub(super) fn reg_ty(e: Elem) -> String {
    match e {
        Elem::Num(DType::Bool) => "bool".into(),
        Elem::Num(DType::I32) => "int".into(),
        Elem::Num(_) => "float".into(),
        Elem::Ptr(d) => format!("{}*", storage_c(d)),
    }
}

/// A cast that changes nothing in registers: bf16/f16 to f32 (already exact floats).
pub(super) fn exact_cast(k: &Kernel, id: ValueId, x: ValueId) -> bool {
    let (from, to) = (k.ty(x).elem, k.ty(id).elem);
    from == to
        || matches!(
            (from, to),
            (Elem::Num(DType::BF16 | DType::F16), Elem::Num(DType::F32))
        )
}

/// `const T name` (for pointers, the pointer is const, not the pointee).
pub(super) fn const_decl(e: Elem, name: &str) -> String {
    match e {
        Elem::Ptr(_) => format!("{} const {name}", reg_ty(e)),
        _ => format!("const {} {name}", reg_ty(e)),
    }
}

pub(super) fn zero_c(e: Elem) -> String {
    match e {
        Elem::Num(DType::Bool) => "false".into(),
        Elem::Num(DType::I32) => "0".into(),
        Elem::Num(_) => "0.0f".into(),
        Elem::Ptr(_) => "nullptr".into(),
    }
}

pub(super) fn f32_c(x: f32) -> String {
    if x.is_nan() {
        "__uint_as_float(0x7fc00000u)".into()
    } else if x.is_infinite() {
        if x > 0.0 {
            "__uint_as_float(0x7f800000u)"
        } else {
            "__uint_as_float(0xff800000u)"
        }
        .into()
    } else if x < 0.0 || (x == 0.0 && x.is_sign_negative()) {
        format!("({x:?}f)")
    } else {
        format!("{x:?}f")
    }
}

pub(super) fn lit_c(l: Lit, d: DType) -> String {
    let f = match l {
        Lit::Int(i) => i as f64,
        Lit::Float(f) => f,
        Lit::Bool(b) => b as i64 as f64,
    };
    match d {
        DType::Bool => (f != 0.0).to_string(),
        DType::I32 => {
            let i = match l {
                Lit::Int(i) => i as i32,
                _ => f as i32,
            };
            if i == i32::MIN {
                "(-2147483647 - 1)".into()
            } else if i < 0 {
                format!("({i})")
            } else {
                i.to_string()
            }
        }
        DType::F32 => f32_c(f as f32),
        DType::BF16 => f32_c(half::bf16::from_f64(f).to_f32()),
        DType::F16 => f32_c(half::f16::from_f64(f).to_f32()),
    }
}

/// Rounds a float expression to the dtype's precision (no-op for f32).
/// The result keeps its parentheses: it may be an operand of a larger expression.
pub(super) fn round_c(d: DType, e: &str) -> String {
    match d {
        DType::BF16 => format!("tsr_rbf16({})", strip(e)),
        DType::F16 => format!("tsr_rf16({})", strip(e)),
        _ => e.to_string(),
    }
}

pub(super) fn unary_c(op: UnaryOp, d: DType, a: &str) -> String {
    use UnaryOp::*;
    let a0 = strip(a);
    let f = |name: &str| round_c(d, &format!("{name}({a0})"));
    match op {
        Neg => format!("(-{a})"),
        Not if d == DType::Bool => format!("(!{a})"),
        Not => format!("(~{a})"),
        Abs if d.is_float() => format!("fabsf({a0})"),
        Abs => format!("({a} < 0 ? -{a} : {a})"),
        Exp => f("expf"),
        Exp2 => f("exp2f"),
        Log => f("logf"),
        Log2 => f("log2f"),
        Sqrt => f("sqrtf"),
        Rsqrt => f("rsqrtf"),
        Sigmoid => f("tsr_sigmoid"),
        Silu => f("tsr_silu"),
        Sin => f("sinf"),
        Cos => f("cosf"),
        Tanh => f("tanhf"),
    }
}

pub(super) fn binary_c(op: BinOp, d: DType, a: &str, b: &str) -> String {
    use BinOp::*;
    let fl = d.is_float();
    let bo = d == DType::Bool;
    let (a0, b0) = (strip(a), strip(b));
    match op {
        Add => round_c(d, &format!("({a} + {b})")),
        Sub => round_c(d, &format!("({a} - {b})")),
        // __fmul_rn is never fused into an FMA: results stay bit-exact with the spec.
        Mul if fl => round_c(d, &format!("__fmul_rn({a0}, {b0})")),
        Mul => format!("({a} * {b})"),
        Div => round_c(d, &format!("({a} / {b})")),
        Rem if fl => round_c(d, &format!("fmodf({a0}, {b0})")),
        Rem => format!("({a} % {b})"),
        Min if fl => format!("fminf({a0}, {b0})"),
        Max if fl => format!("fmaxf({a0}, {b0})"),
        Min => format!("({a} < {b} ? {a} : {b})"),
        Max => format!("({a} > {b} ? {a} : {b})"),
        Lt => format!("({a} < {b})"),
        Le => format!("({a} <= {b})"),
        Gt => format!("({a} > {b})"),
        Ge => format!("({a} >= {b})"),
        Eq => format!("({a} == {b})"),
        Ne => format!("({a} != {b})"),
        And if bo => format!("({a} && {b})"),
        Or if bo => format!("({a} || {b})"),
        Xor if bo => format!("({a} != {b})"),
        And => format!("({a} & {b})"),
        Or => format!("({a} | {b})"),
        Xor => format!("({a} ^ {b})"),
        // Shift amounts wrap like Rust's wrapping_shl/shr (C leaves >= 32 undefined).
        Shl => format!("({a} << ({b} & 31))"),
        Shr => format!("({a} >> ({b} & 31))"),
    }
}

pub(super) fn cast_c(from: DType, to: DType, a: &str) -> String {
    use DType::*;
    if from == to {
        return a.to_string();
    }
    let a0 = strip(a);
    match (from, to) {
        (Bool, I32) => format!("((int){a})"),
        (Bool, _) => format!("({a} ? 1.0f : 0.0f)"),
        (I32, Bool) => format!("({a} != 0)"),
        (_, Bool) => format!("({a} != 0.0f)"),
        (I32, F32) => format!("((float){a})"),
        (I32, d) => round_c(d, &format!("((float){a})")),
        (_, I32) => format!("tsr_f2i({a0})"),
        (_, F32) => a.to_string(),
        (_, d) => round_c(d, a),
    }
}

pub(super) fn load_c(d: DType, p: &str) -> String {
    let p = strip(p);
    match d {
        DType::BF16 => format!("tsr_bf16_to_f32(*({p}))"),
        DType::F16 => format!("tsr_f16_to_f32(*({p}))"),
        _ => format!("*({p})"),
    }
}

pub(super) fn store_c(d: DType, p: &str, v: &str) -> String {
    let v = strip(v);
    match d {
        DType::BF16 => format!("*({p}) = tsr_f32_to_bf16({v});"),
        DType::F16 => format!("*({p}) = tsr_f32_to_f16({v});"),
        _ => format!("*({p}) = {v};"),
    }
}

pub(super) fn atomic_c(op: AtomicOp, d: DType, p: &str, v: &str) -> String {
    format!("{};", atomic_expr(op, d, p, v))
}

/// The atomic as a C expression whose value is the old one.
pub(super) fn atomic_expr(op: AtomicOp, d: DType, p: &str, v: &str) -> String {
    let v = strip(v);
    match (op, d) {
        (AtomicOp::Add, _) => format!("atomicAdd({p}, {v})"),
        (AtomicOp::Max, DType::F32) => format!("tsr_atomic_max_f32({p}, {v})"),
        (AtomicOp::Max, _) => format!("atomicMax({p}, {v})"),
        (AtomicOp::Min, _) => format!("atomicMin({p}, {v})"),
    }
}

/// The identity of a reduction (value, index): NaN for float max/min, since fmaxf/fminf
/// ignore it (a row of NaNs stays NaN).
pub(super) fn identity(op: ReduceOp, d: DType) -> (String, String) {
    let nan = "__uint_as_float(0x7fc00000u)".to_string();
    let big = "2147483647".to_string();
    let small = "(-2147483647 - 1)".to_string();
    let v = match (op, d.is_float()) {
        (ReduceOp::Sum, true) => "0.0f".to_string(),
        (ReduceOp::Sum, false) => "0".to_string(),
        (_, true) => nan,
        (ReduceOp::Max | ReduceOp::Argmax, false) => small,
        (ReduceOp::Min | ReduceOp::Argmin, false) => big.clone(),
    };
    (v, big)
}

/// One reduction step: fold `(x, xi)` into `(acc, acc_i)`.
pub(super) fn step_c(op: ReduceOp, acc: &str, acc_i: &str, x: &str, xi: &str) -> String {
    match op {
        ReduceOp::Sum => format!("{acc} += {x};"),
        // fmaxf/fminf return the number when one side is NaN: NaN is ignored.
        ReduceOp::Max => format!("{acc} = fmaxf({acc}, {x});"),
        ReduceOp::Min => format!("{acc} = fminf({acc}, {x});"),
        ReduceOp::Argmax => format!("tsr_argmax_step({acc}, {acc_i}, {x}, {xi});"),
        ReduceOp::Argmin => format!("tsr_argmin_step({acc}, {acc_i}, {x}, {xi});"),
    }
}

/// Row-major linear index of a logical index (C expressions) in a tile of `dims`.
pub(super) fn linear(dims: &[usize], idx: &[String]) -> String {
    match dims {
        [_] => strip(&idx[0]),
        [1, _] => strip(&idx[1]),
        [_, 1] => strip(&idx[0]),
        [_, n] => {
            // A conditional column (a clamped padding lane) needs its parentheses.
            let j = strip(&idx[1]);
            let j = if j.contains('?') { format!("({j})") } else { j };
            format!("({}) * {n} + {j}", strip(&idx[0]))
        }
        _ => "0".into(),
    }
}

/// Removes one pair of parentheses around a whole expression.
pub(crate) fn strip(e: &str) -> String {
    let b = e.as_bytes();
    if b.len() >= 2 && b[0] == b'(' && b[b.len() - 1] == b')' {
        let mut depth = 0;
        for (i, &c) in b.iter().enumerate() {
            match c {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 && i != b.len() - 1 {
                        return e.to_string();
                    }
                }
                _ => {}
            }
        }
        return e[1..e.len() - 1].to_string();
    }
    e.to_string()
}
