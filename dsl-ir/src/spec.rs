//! Specialisation: binds a kernel's constexprs, folding every shape to literal dimensions.
use crate::ir::*;
use crate::types::*;

/// The largest tile a program may hold (elements). Beyond it, registers spill badly on a
/// GPU and the interpreter would allocate absurd buffers: a tile this large is a mistake.
pub const MAX_TILE_ELEMS: i64 = 1 << 20;

impl Kernel {
    /// Binds every constexpr (by name) and returns the concrete kernel the backends take.
    /// Errors name the constexpr or the dimension that is wrong.
    pub fn specialize(&self, bindings: &[(&str, ConstVal)]) -> Result<Kernel, String> {
        for (name, _) in bindings {
            if !self.constexprs().any(|p| p.name == *name) {
                return Err(format!("kernel `{}` has no constexpr `{name}`", self.name));
            }
        }
        let mut bound = vec![];
        for p in self.constexprs() {
            let Some((_, v)) = bindings.iter().find(|(n, _)| *n == p.name) else {
                return Err(format!(
                    "kernel `{}`: constexpr `{}` is not bound",
                    self.name, p.name
                ));
            };
            match (p.kind, v) {
                (ParamKind::Constexpr(ConstKind::Int), ConstVal::Int(_))
                | (ParamKind::Constexpr(ConstKind::Bool), ConstVal::Bool(_)) => {}
                _ => {
                    return Err(format!(
                        "kernel `{}`: constexpr `{}` bound to the wrong kind ({v:?})",
                        self.name, p.name
                    ))
                }
            }
            bound.push((p.name.clone(), *v));
        }
        let lookup = |n: &str| -> Option<i64> {
            bound.iter().find(|(b, _)| b == n).map(|(_, v)| match v {
                ConstVal::Int(i) => *i,
                ConstVal::Bool(b) => *b as i64,
            })
        };
        let fold = |e: &ConstExpr| -> Result<ConstExpr, String> {
            e.eval(&lookup)
                .map(ConstExpr::Lit)
                .map_err(|m| format!("kernel `{}`: {m}", self.name))
        };
        let mut k = self.clone();
        for t in &mut k.values {
            fold_type(t, &fold, &self.name)?;
        }
        for v in &mut k.vars {
            fold_type(&mut v.ty, &fold, &self.name)?;
        }
        fold_body(&mut k.body, &fold, &k.values)?;
        k.bound = bound;
        Ok(k)
    }
}

fn fold_type(
    t: &mut Type,
    fold: &dyn Fn(&ConstExpr) -> Result<ConstExpr, String>,
    kname: &str,
) -> Result<(), String> {
    let orig = t.clone();
    for d in &mut t.shape {
        *d = fold(d)?;
    }
    let dims = t.dims();
    if dims.contains(&0) || t.shape.iter().any(|d| d.as_lit().unwrap_or(0) <= 0) {
        return Err(format!(
            "kernel `{kname}`: tile {orig} has a dimension ≤ 0 with these constexprs"
        ));
    }
    if dims.iter().product::<usize>() as i64 > MAX_TILE_ELEMS {
        return Err(format!(
            "kernel `{kname}`: tile {orig} = {:?} exceeds {MAX_TILE_ELEMS} elements",
            dims
        ));
    }
    Ok(())
}

fn fold_body(
    body: &mut [Stmt],
    fold: &dyn Fn(&ConstExpr) -> Result<ConstExpr, String>,
    values: &[Type],
) -> Result<(), String> {
    for s in body {
        match s {
            Stmt::Let { id, op, .. } => match op {
                Op::Const(e) => {
                    let v = fold(e)?.as_lit().unwrap_or(0);
                    *op = Op::Lit(if values[id.0 as usize].elem == Elem::Num(DType::Bool) {
                        Lit::Bool(v != 0)
                    } else {
                        Lit::Int(v)
                    });
                }
                Op::Arange { start, end } => {
                    *start = fold(start)?;
                    *end = fold(end)?;
                }
                _ => {}
            },
            Stmt::For { body, .. } => fold_body(body, fold, values)?,
            Stmt::If { then, els, .. } => {
                fold_body(then, fold, values)?;
                fold_body(els, fold, values)?;
            }
            _ => {}
        }
    }
    Ok(())
}
