//! Elementwise operations, casts and reductions over whole tiles.
//!
//! Each function takes operands already checked to have the result's element count and
//! returns the result's elements; `Err` carries a message for an IR the builder would never
//! produce (the executor adds the kernel and source line).
use super::value::{round_f64, round_vec, Data};
use dsl_ir::{BinOp, DType, ReduceOp, UnaryOp};

fn map1<A: Copy, R>(a: &[A], f: impl Fn(A) -> R) -> Vec<R> {
    a.iter().map(|&x| f(x)).collect()
}

fn map2<A: Copy, B: Copy, R>(a: &[A], b: &[B], f: impl Fn(A, B) -> R) -> Vec<R> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

#[inline]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// `op x`; `out` is the result dtype (that of `x`).
pub fn unary(op: UnaryOp, x: &Data, out: DType) -> Result<Data, String> {
    use UnaryOp::*;
    Ok(match x {
        Data::F32(v) => {
            let mut r: Vec<f32> = match op {
                Neg => map1(v, |a| -a),
                Abs => map1(v, f32::abs),
                Exp => map1(v, f32::exp),
                Exp2 => map1(v, f32::exp2),
                Log => map1(v, f32::ln),
                Log2 => map1(v, f32::log2),
                Sqrt => map1(v, f32::sqrt),
                Rsqrt => map1(v, |a| 1.0 / a.sqrt()),
                Sigmoid => map1(v, sigmoid),
                Silu => map1(v, |a| a * sigmoid(a)),
                Sin => map1(v, f32::sin),
                Cos => map1(v, f32::cos),
                Tanh => map1(v, f32::tanh),
                Not => return Err("`not` of a float".into()),
            };
            round_vec(out, &mut r);
            Data::F32(r)
        }
        Data::I32(v) => Data::I32(match op {
            Neg => map1(v, i32::wrapping_neg),
            Abs => map1(v, i32::wrapping_abs),
            Not => map1(v, |a| !a),
            _ => return Err(format!("`{}` of i32 values", op.name())),
        }),
        Data::Bool(v) => match op {
            Not => Data::Bool(map1(v, |a| !a)),
            _ => return Err(format!("`{}` of bool values", op.name())),
        },
        Data::Ptr { .. } => return Err(format!("`{}` of pointers", op.name())),
    })
}

/// `a op b` on operands of one shape; `out` is the result dtype (bool for comparisons).
pub fn binary(op: BinOp, a: &Data, b: &Data, out: DType) -> Result<Data, String> {
    use BinOp::*;
    if a.len() != b.len() {
        return Err(format!(
            "`{}` of {} and {} elements",
            op.symbol(),
            a.len(),
            b.len()
        ));
    }
    Ok(match (a, b) {
        (Data::F32(x), Data::F32(y)) => {
            let mut r: Vec<f32> = match op {
                Add => map2(x, y, |a, b| a + b),
                Sub => map2(x, y, |a, b| a - b),
                Mul => map2(x, y, |a, b| a * b),
                Div => map2(x, y, |a, b| a / b),
                Rem => map2(x, y, |a, b| a % b),
                Min => map2(x, y, f32::min),
                Max => map2(x, y, f32::max),
                Lt => return Ok(Data::Bool(map2(x, y, |a, b| a < b))),
                Le => return Ok(Data::Bool(map2(x, y, |a, b| a <= b))),
                Gt => return Ok(Data::Bool(map2(x, y, |a, b| a > b))),
                Ge => return Ok(Data::Bool(map2(x, y, |a, b| a >= b))),
                Eq => return Ok(Data::Bool(map2(x, y, |a, b| a == b))),
                Ne => return Ok(Data::Bool(map2(x, y, |a, b| a != b))),
                And | Or | Xor | Shl | Shr => return Err(format!("`{}` of floats", op.symbol())),
            };
            round_vec(out, &mut r);
            Data::F32(r)
        }
        (Data::I32(x), Data::I32(y)) => Data::I32(match op {
            Add => map2(x, y, i32::wrapping_add),
            Sub => map2(x, y, i32::wrapping_sub),
            Mul => map2(x, y, i32::wrapping_mul),
            Div => map2(x, y, |a, b| if b == 0 { 0 } else { a.wrapping_div(b) }),
            Rem => map2(x, y, |a, b| if b == 0 { 0 } else { a.wrapping_rem(b) }),
            Min => map2(x, y, std::cmp::min),
            Max => map2(x, y, std::cmp::max),
            And => map2(x, y, |a, b| a & b),
            Or => map2(x, y, |a, b| a | b),
            Xor => map2(x, y, |a, b| a ^ b),
            Shl => map2(x, y, |a, b| a.wrapping_shl(b as u32)),
            Shr => map2(x, y, |a, b| a.wrapping_shr(b as u32)),
            Lt => return Ok(Data::Bool(map2(x, y, |a, b| a < b))),
            Le => return Ok(Data::Bool(map2(x, y, |a, b| a <= b))),
            Gt => return Ok(Data::Bool(map2(x, y, |a, b| a > b))),
            Ge => return Ok(Data::Bool(map2(x, y, |a, b| a >= b))),
            Eq => return Ok(Data::Bool(map2(x, y, |a, b| a == b))),
            Ne => return Ok(Data::Bool(map2(x, y, |a, b| a != b))),
        }),
        (Data::Bool(x), Data::Bool(y)) => Data::Bool(match op {
            Eq => map2(x, y, |a, b| a == b),
            Ne | Xor => map2(x, y, |a, b| a != b),
            And => map2(x, y, |a, b| a & b),
            Or => map2(x, y, |a, b| a | b),
            _ => return Err(format!("`{}` of bools", op.symbol())),
        }),
        (Data::Ptr { arg, offs }, Data::I32(d)) => {
            let offs = match op {
                Add => map2(offs, d, |p, d| p.wrapping_add(d as i64)),
                Sub => map2(offs, d, |p, d| p.wrapping_sub(d as i64)),
                _ => return Err(format!("`{}` of a pointer", op.symbol())),
            };
            Data::Ptr { arg: *arg, offs }
        }
        _ => {
            return Err(format!(
                "`{}` of {} and {} operands",
                op.symbol(),
                a.kind(),
                b.kind()
            ))
        }
    })
}

/// Converts to `to` (see the module doc of `interp` for the rules).
pub fn cast(x: &Data, to: DType) -> Result<Data, String> {
    Ok(match (x, to) {
        (Data::F32(v), DType::F32 | DType::BF16 | DType::F16) => {
            let mut r = v.clone();
            round_vec(to, &mut r);
            Data::F32(r)
        }
        (Data::F32(v), DType::I32) => Data::I32(map1(v, |a| a as i32)),
        (Data::F32(v), DType::Bool) => Data::Bool(map1(v, |a| a != 0.0)),
        (Data::I32(v), DType::I32) => Data::I32(v.clone()),
        (Data::I32(v), DType::Bool) => Data::Bool(map1(v, |a| a != 0)),
        // One rounding, straight from the exact integer.
        (Data::I32(v), _) => Data::F32(map1(v, |a| round_f64(to, a as f64))),
        (Data::Bool(v), DType::Bool) => Data::Bool(v.clone()),
        (Data::Bool(v), DType::I32) => Data::I32(map1(v, |a| a as i32)),
        (Data::Bool(v), _) => Data::F32(map1(v, |a| if a { 1.0 } else { 0.0 })),
        (Data::Ptr { .. }, _) => return Err(format!("cast of a pointer to {to}")),
    })
}

/// `where_(c, a, b)` elementwise.
pub fn select(c: &Data, a: &Data, b: &Data) -> Result<Data, String> {
    let Data::Bool(c) = c else {
        return Err(format!("where_ with a {} condition", c.kind()));
    };
    if c.len() != a.len() || a.len() != b.len() {
        return Err(format!(
            "where_ of {}, {} and {} elements",
            c.len(),
            a.len(),
            b.len()
        ));
    }
    fn sel<T: Copy>(c: &[bool], a: &[T], b: &[T]) -> Vec<T> {
        c.iter()
            .zip(a.iter().zip(b))
            .map(|(&c, (&a, &b))| if c { a } else { b })
            .collect()
    }
    Ok(match (a, b) {
        (Data::F32(a), Data::F32(b)) => Data::F32(sel(c, a, b)),
        (Data::I32(a), Data::I32(b)) => Data::I32(sel(c, a, b)),
        (Data::Bool(a), Data::Bool(b)) => Data::Bool(sel(c, a, b)),
        (Data::Ptr { arg: p, offs: a }, Data::Ptr { arg: q, offs: b }) if p == q => Data::Ptr {
            arg: *p,
            offs: sel(c, a, b),
        },
        _ => {
            return Err(format!(
                "where_ between {} and {} values",
                a.kind(),
                b.kind()
            ))
        }
    })
}

/// Reduces `x` (shape `dims`) along `axis`; `dtype` is the input dtype.
pub fn reduce(
    op: ReduceOp,
    x: &Data,
    dims: &[usize],
    axis: usize,
    dtype: DType,
) -> Result<Data, String> {
    if axis >= dims.len() {
        return Err(format!(
            "{}() along axis {axis} of a rank-{} value",
            op.name(),
            dims.len()
        ));
    }
    let n = dims[axis];
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    if n == 0 || outer * n * inner != x.len() {
        return Err(format!("{}() of a malformed tile", op.name()));
    }
    // Visits every output lane with an iterator over its inputs, in index order.
    fn each<T: Copy, R>(
        v: &[T],
        (outer, n, inner): (usize, usize, usize),
        mut f: impl FnMut(&mut dyn Iterator<Item = T>) -> R,
    ) -> Vec<R> {
        let mut out = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            if inner == 1 {
                let row = &v[o * n..(o + 1) * n];
                out.push(f(&mut row.iter().copied()));
            } else {
                for i in 0..inner {
                    let base = o * n * inner + i;
                    out.push(f(&mut (0..n).map(|k| v[base + k * inner])));
                }
            }
        }
        out
    }
    let shape = (outer, n, inner);
    Ok(match x {
        Data::F32(v) => match op {
            ReduceOp::Sum => {
                let mut r = each(v, shape, |it| {
                    let first = it.next().unwrap_or(0.0);
                    it.fold(first, |a, b| a + b)
                });
                round_vec(dtype, &mut r);
                Data::F32(r)
            }
            ReduceOp::Max => Data::F32(each(v, shape, |it| it.fold(f32::NAN, f32::max))),
            ReduceOp::Min => Data::F32(each(v, shape, |it| it.fold(f32::NAN, f32::min))),
            ReduceOp::Argmax => Data::I32(each(v, shape, |it| arg_best(it, |a, b| a > b))),
            ReduceOp::Argmin => Data::I32(each(v, shape, |it| arg_best(it, |a, b| a < b))),
        },
        Data::I32(v) => Data::I32(match op {
            ReduceOp::Sum => each(v, shape, |it| it.fold(0i32, i32::wrapping_add)),
            ReduceOp::Max => each(v, shape, |it| it.fold(i32::MIN, i32::max)),
            ReduceOp::Min => each(v, shape, |it| it.fold(i32::MAX, i32::min)),
            ReduceOp::Argmax => each(v, shape, |it| arg_best(it, |a, b| a > b)),
            ReduceOp::Argmin => each(v, shape, |it| arg_best(it, |a, b| a < b)),
        }),
        _ => return Err(format!("{}() of {} values", op.name(), x.kind())),
    })
}

/// The index of the first element that beats every earlier one (`better(new, best)`);
/// NaN (`x != x`) is never chosen; 0 if nothing qualifies.
fn arg_best<T: Copy + PartialEq>(
    it: &mut dyn Iterator<Item = T>,
    better: impl Fn(T, T) -> bool,
) -> i32 {
    let mut best: Option<(usize, T)> = None;
    for (i, x) in it.enumerate() {
        #[allow(clippy::eq_op)]
        if x != x {
            continue;
        }
        match best {
            Some((_, b)) if !better(x, b) => {}
            _ => best = Some((i, x)),
        }
    }
    best.map_or(0, |(i, _)| i as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_corner_cases() {
        let a = Data::I32(vec![7, -7, i32::MIN, 5, 1]);
        let b = Data::I32(vec![2, 2, -1, 0, 33]);
        assert_eq!(
            binary(BinOp::Div, &a, &b, DType::I32).unwrap(),
            Data::I32(vec![3, -3, i32::MIN, 0, 0])
        );
        assert_eq!(
            binary(BinOp::Rem, &a, &b, DType::I32).unwrap(),
            Data::I32(vec![1, -1, 0, 0, 1])
        );
        assert_eq!(
            binary(BinOp::Shl, &a, &b, DType::I32).unwrap(),
            Data::I32(vec![28, -28, 0, 5, 2])
        );
    }

    #[test]
    fn arg_reductions_skip_nan_and_prefer_low_index() {
        let v = Data::F32(vec![f32::NAN, 1.0, 3.0, 3.0, f32::NAN]);
        assert_eq!(
            reduce(ReduceOp::Argmax, &v, &[5], 0, DType::F32).unwrap(),
            Data::I32(vec![2])
        );
        assert_eq!(
            reduce(ReduceOp::Argmin, &v, &[5], 0, DType::F32).unwrap(),
            Data::I32(vec![1])
        );
        assert_eq!(
            reduce(ReduceOp::Max, &v, &[5], 0, DType::F32).unwrap(),
            Data::F32(vec![3.0])
        );
        let nan = Data::F32(vec![f32::NAN; 3]);
        assert_eq!(
            reduce(ReduceOp::Argmax, &nan, &[3], 0, DType::F32).unwrap(),
            Data::I32(vec![0])
        );
        let Data::F32(m) = reduce(ReduceOp::Max, &nan, &[3], 0, DType::F32).unwrap() else {
            panic!()
        };
        assert!(m[0].is_nan());
    }

    #[test]
    fn reduce_along_each_axis() {
        // [[1, 2, 3], [4, 5, 6]]
        let v = Data::I32(vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(
            reduce(ReduceOp::Sum, &v, &[2, 3], 0, DType::I32).unwrap(),
            Data::I32(vec![5, 7, 9])
        );
        assert_eq!(
            reduce(ReduceOp::Sum, &v, &[2, 3], 1, DType::I32).unwrap(),
            Data::I32(vec![6, 15])
        );
        assert_eq!(
            reduce(ReduceOp::Argmax, &v, &[2, 3], 0, DType::I32).unwrap(),
            Data::I32(vec![1, 1, 1])
        );
    }
}
