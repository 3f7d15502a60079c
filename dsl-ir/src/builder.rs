//! Builds a kernel's IR one operation at a time, applying the DSL's typing rules.
//!
//! The `#[kernel]` macro drives this at compile time, so every error here becomes a compile
//! error at the offending token: a [`BuildError`](crate::BuildError) names the operand at
//! fault, and the macro points at the token written for it. The rules, in brief (Triton's, where Triton has one):
//! - shapes broadcast numpy-style (right-aligned; a dimension of 1 or a scalar stretches);
//! - literals are *weak*: `x * 2.0` keeps x's dtype, `i + 0.5` with i32 `i` gives f32;
//! - two different float dtypes meet at f32; an int meets a float at the float's dtype;
//! - a store, an assignment to a `let mut` variable and an atomic never convert a float
//!   silently: the user writes `.to(bf16)`;
//! - tiles have rank 1 or 2; scalars (rank 0) are uniform over the program.
use crate::error::{BResult, BuildError as E, Operand};
use crate::ir::*;
use crate::types::*;

pub struct Builder {
    kernel: Kernel,
    /// Weak (literal-derived) values adopt the dtype of what they meet.
    weak: Vec<bool>,
    /// Open statement lists: the kernel body, then one per enclosing `for` / `if` branch.
    blocks: Vec<Vec<Stmt>>,
    /// Open control flow: what to build when its block closes.
    open: Vec<Open>,
}

enum Open {
    For {
        iv: ValueId,
        start: ValueId,
        end: ValueId,
        step: ValueId,
        src: Src,
    },
    If {
        cond: ValueId,
        then: Option<Vec<Stmt>>,
        src: Src,
    },
}

impl Builder {
    pub fn new(name: &str, file: &str) -> Builder {
        Builder {
            kernel: Kernel {
                name: name.to_string(),
                file: file.to_string(),
                params: vec![],
                body: vec![],
                values: vec![],
                vars: vec![],
                bound: vec![],
            },
            weak: vec![],
            blocks: vec![vec![]],
            open: vec![],
        }
    }

    pub fn ty(&self, v: ValueId) -> &Type {
        self.kernel.ty(v)
    }
    pub fn is_weak(&self, v: ValueId) -> bool {
        self.weak[v.0 as usize]
    }

    /// Declares a parameter; returns its index.
    pub fn param(&mut self, name: &str, kind: ParamKind) -> BResult<usize> {
        if self.kernel.params.iter().any(|p| p.name == name) {
            return Err(E::DuplicateParam {
                name: name.to_string(),
            });
        }
        if let ParamKind::Scalar(d) = kind {
            if !matches!(d, DType::I32 | DType::F32) {
                return Err(E::ScalarParam { dtype: d });
            }
        }
        self.kernel.params.push(Param {
            name: name.to_string(),
            kind,
        });
        Ok(self.kernel.params.len() - 1)
    }

    /// The value of a parameter: a pointer or run-time scalar, or a constexpr as a weak scalar.
    pub fn param_value(&mut self, index: usize, src: Src) -> BResult<ValueId> {
        let p = self
            .kernel
            .params
            .get(index)
            .ok_or(E::NoSuchParam { index })?
            .clone();
        Ok(match p.kind {
            ParamKind::Ptr(d) => {
                self.push(Op::Param(index), Type::scalar(Elem::Ptr(d)), false, src)
            }
            ParamKind::Scalar(d) => {
                self.push(Op::Param(index), Type::scalar(Elem::Num(d)), false, src)
            }
            ParamKind::Constexpr(ConstKind::Int) => {
                let op = Op::Const(ConstExpr::Param(p.name.clone()));
                self.push(op, Type::scalar(Elem::Num(DType::I32)), true, src)
            }
            ParamKind::Constexpr(ConstKind::Bool) => {
                let op = Op::Const(ConstExpr::Param(p.name.clone()));
                self.push(op, Type::scalar(Elem::Num(DType::Bool)), false, src)
            }
        })
    }

    /// Looks up a constexpr integer parameter by name (for shapes: `arange(0, BLOCK)`).
    pub fn constexpr_int(&self, name: &str) -> Option<ConstExpr> {
        self.kernel
            .params
            .iter()
            .find(|p| p.name == name && p.kind == ParamKind::Constexpr(ConstKind::Int))
            .map(|p| ConstExpr::Param(p.name.clone()))
    }

    pub fn finish(mut self) -> BResult<Kernel> {
        if !self.open.is_empty() {
            return Err(E::Nesting {
                what: "unclosed control flow",
            });
        }
        self.kernel.body = self.blocks.pop().unwrap_or_default();
        Ok(self.kernel)
    }

    // ---- values -------------------------------------------------------------------------

    fn push(&mut self, op: Op, ty: Type, weak: bool, src: Src) -> ValueId {
        let id = ValueId(self.kernel.values.len() as u32);
        self.kernel.values.push(ty);
        self.weak.push(weak);
        self.emit(Stmt::Let { id, op, src });
        id
    }

    fn emit(&mut self, s: Stmt) {
        self.blocks
            .last_mut()
            .expect("a block is always open")
            .push(s);
    }

    pub fn program_id(&mut self, axis: i64, src: Src) -> BResult<ValueId> {
        let a = check_axis3(axis, "program_id")?;
        Ok(self.push(
            Op::ProgramId(a),
            Type::scalar(Elem::Num(DType::I32)),
            false,
            src,
        ))
    }

    pub fn num_programs(&mut self, axis: i64, src: Src) -> BResult<ValueId> {
        let a = check_axis3(axis, "num_programs")?;
        Ok(self.push(
            Op::NumPrograms(a),
            Type::scalar(Elem::Num(DType::I32)),
            false,
            src,
        ))
    }

    pub fn lit_int(&mut self, v: i64, src: Src) -> BResult<ValueId> {
        if i32::try_from(v).is_err() {
            return Err(E::IntLiteral { value: v });
        }
        Ok(self.push(
            Op::Lit(Lit::Int(v)),
            Type::scalar(Elem::Num(DType::I32)),
            true,
            src,
        ))
    }
    pub fn lit_float(&mut self, v: f64, src: Src) -> BResult<ValueId> {
        Ok(self.push(
            Op::Lit(Lit::Float(v)),
            Type::scalar(Elem::Num(DType::F32)),
            true,
            src,
        ))
    }
    pub fn lit_bool(&mut self, v: bool, src: Src) -> BResult<ValueId> {
        Ok(self.push(
            Op::Lit(Lit::Bool(v)),
            Type::scalar(Elem::Num(DType::Bool)),
            false,
            src,
        ))
    }

    /// A constexpr integer expression (`BLOCK / 2`) as a weak i32 scalar.
    pub fn const_expr(&mut self, e: ConstExpr, src: Src) -> BResult<ValueId> {
        Ok(self.push(Op::Const(e), Type::scalar(Elem::Num(DType::I32)), true, src))
    }

    pub fn arange(&mut self, start: ConstExpr, end: ConstExpr, src: Src) -> BResult<ValueId> {
        let len = ConstExpr::bin(ConstOp::Sub, end.clone(), start.clone());
        if let Some(n) = len.as_lit() {
            if n <= 0 {
                return Err(E::EmptyArange { start, end });
            }
        }
        let ty = Type::num(DType::I32, vec![len]);
        Ok(self.push(Op::Arange { start, end }, ty, false, src))
    }

    /// `full(shape, value, dtype)`; `zeros` is `full` of 0.
    pub fn full(
        &mut self,
        shape: Vec<Dim>,
        value: ValueId,
        dtype: DType,
        src: Src,
    ) -> BResult<ValueId> {
        check_rank(&shape)?;
        if !self.ty(value).is_scalar() {
            return Err(E::FillNotScalar {
                ty: self.ty(value).clone(),
            });
        }
        let v = self.convert(value, dtype, src.clone())?;
        let ty = Type::num(dtype, shape);
        if ty.is_scalar() {
            return Ok(v);
        }
        Ok(self.push(Op::Broadcast(v), ty, false, src))
    }

    pub fn unary(&mut self, op: UnaryOp, x: ValueId, src: Src) -> BResult<ValueId> {
        let t = self.ty(x).clone();
        let d = t.elem.num().ok_or(E::UnaryPointer { op })?;
        let ok = match op {
            UnaryOp::Not => matches!(d, DType::Bool | DType::I32),
            UnaryOp::Neg | UnaryOp::Abs => d != DType::Bool,
            _ => d.is_float(),
        };
        if !ok {
            return Err(E::UnaryDType { op, dtype: d });
        }
        let weak = self.is_weak(x);
        Ok(self.push(Op::Unary(op, x), t, weak, src))
    }

    pub fn binary(&mut self, op: BinOp, a: ValueId, b: ValueId, src: Src) -> BResult<ValueId> {
        let (ta, tb) = (self.ty(a).clone(), self.ty(b).clone());
        let shape = broadcast_shapes(&ta.shape, &tb.shape).ok_or_else(|| E::ShapeMismatch {
            op,
            a: ta.clone(),
            b: tb.clone(),
        })?;
        // Pointer arithmetic.
        if let Some(pd) = ta.elem.pointee().or(tb.elem.pointee()) {
            let (p, off) = if ta.elem.pointee().is_some() {
                (a, b)
            } else {
                (b, a)
            };
            let ok_op = op == BinOp::Add || (op == BinOp::Sub && p == a);
            let off_ty = self.ty(off).elem;
            if !ok_op || off_ty != Elem::Num(DType::I32) {
                return Err(E::PointerArith {
                    op,
                    a: ta.elem,
                    b: tb.elem,
                });
            }
            let p = self.broadcast_to(p, &shape, src.clone())?;
            let off = self.broadcast_to(off, &shape, src.clone())?;
            // The pointer always comes first, whichever side the user wrote it on.
            return Ok(self.push(
                Op::Binary(op, p, off),
                Type {
                    elem: Elem::Ptr(pd),
                    shape,
                },
                false,
                src,
            ));
        }
        let (da, db) = (ta.elem.num().unwrap(), tb.elem.num().unwrap());
        let d = if op.is_bitwise() {
            if da != db && !(self.is_weak(a) || self.is_weak(b)) {
                return Err(E::BitwiseMixed { op, a: da, b: db });
            }
            let d = if self.is_weak(a) { db } else { da };
            let allowed = matches!(op, BinOp::And | BinOp::Or | BinOp::Xor) && d == DType::Bool;
            if !(d == DType::I32 || allowed) {
                return Err(E::BitwiseDType { op, dtype: d });
            }
            d
        } else {
            let d = promote(da, self.is_weak(a), db, self.is_weak(b))?;
            if d == DType::Bool && !matches!(op, BinOp::Eq | BinOp::Ne) {
                return Err(E::BoolArith { op });
            }
            d
        };
        let a = self.convert(a, d, src.clone())?;
        let b = self.convert(b, d, src.clone())?;
        let a = self.broadcast_to(a, &shape, src.clone())?;
        let b = self.broadcast_to(b, &shape, src.clone())?;
        let out = if op.is_comparison() { DType::Bool } else { d };
        let weak = self.is_weak(a) && self.is_weak(b);
        Ok(self.push(Op::Binary(op, a, b), Type::num(out, shape), weak, src))
    }

    /// `where_(cond, a, b)`.
    pub fn select(&mut self, c: ValueId, a: ValueId, b: ValueId, src: Src) -> BResult<ValueId> {
        if self.ty(c).elem != Elem::Num(DType::Bool) {
            return Err(E::WhereCond {
                ty: self.ty(c).clone(),
            });
        }
        let (ta, tb) = (self.ty(a).clone(), self.ty(b).clone());
        let (da, db) = match (ta.elem.num(), tb.elem.num()) {
            (Some(x), Some(y)) => (x, y),
            (None, _) => {
                return Err(E::WherePointer {
                    operand: Operand::A,
                })
            }
            _ => {
                return Err(E::WherePointer {
                    operand: Operand::B,
                })
            }
        };
        let d = promote(da, self.is_weak(a), db, self.is_weak(b))?;
        let s = broadcast_shapes(&ta.shape, &tb.shape)
            .and_then(|s| broadcast_shapes(&s, &self.ty(c).shape))
            .ok_or_else(|| E::WhereShape {
                cond: self.ty(c).clone(),
                a: ta.clone(),
                b: tb.clone(),
            })?;
        let a = self.convert(a, d, src.clone())?;
        let b = self.convert(b, d, src.clone())?;
        let (c, a, b) = (
            self.broadcast_to(c, &s, src.clone())?,
            self.broadcast_to(a, &s, src.clone())?,
            self.broadcast_to(b, &s, src.clone())?,
        );
        Ok(self.push(Op::Where(c, a, b), Type::num(d, s), false, src))
    }

    /// An explicit conversion (`x.to(bf16)`, `n as f32`).
    pub fn cast(&mut self, x: ValueId, to: DType, src: Src) -> BResult<ValueId> {
        if self.ty(x).elem.pointee().is_some() {
            return Err(E::CastPointer {
                ty: self.ty(x).clone(),
                to,
            });
        }
        let v = self.convert(x, to, src)?;
        self.weak[v.0 as usize] = false;
        Ok(v)
    }

    pub fn expand_dims(&mut self, x: ValueId, axis: i64, src: Src) -> BResult<ValueId> {
        let t = self.ty(x).clone();
        if t.rank() >= 2 {
            return Err(E::ExpandRank { ty: t });
        }
        if axis < 0 || axis as usize > t.rank() {
            return Err(E::ExpandAxis { axis, ty: t });
        }
        let mut shape = t.shape.clone();
        shape.insert(axis as usize, ConstExpr::Lit(1));
        let weak = self.is_weak(x);
        Ok(self.push(
            Op::ExpandDims(x, axis as u8),
            Type {
                elem: t.elem,
                shape,
            },
            weak,
            src,
        ))
    }

    /// `broadcast_to(x, shape)` and every implicit broadcast.
    pub fn broadcast_to(&mut self, x: ValueId, shape: &[Dim], src: Src) -> BResult<ValueId> {
        let t = self.ty(x).clone();
        if t.shape == shape {
            return Ok(x);
        }
        check_rank(shape)?;
        match broadcast_shapes(&t.shape, shape) {
            Some(s) if s == shape => {}
            _ => {
                return Err(E::Broadcast {
                    ty: t,
                    shape: shape.to_vec(),
                })
            }
        }
        let mut x = x;
        // Same rank first (leading ones), so backends only stretch dimensions of size 1.
        if !t.is_scalar() {
            for _ in t.rank()..shape.len() {
                x = self.expand_dims(x, 0, src.clone())?;
            }
        }
        let weak = self.is_weak(x);
        Ok(self.push(
            Op::Broadcast(x),
            Type {
                elem: t.elem,
                shape: shape.to_vec(),
            },
            weak,
            src,
        ))
    }

    pub fn load(
        &mut self,
        ptr: ValueId,
        mask: Option<ValueId>,
        other: Option<ValueId>,
        src: Src,
    ) -> BResult<ValueId> {
        let pt = self.ty(ptr).clone();
        let d = pt
            .elem
            .pointee()
            .ok_or_else(|| E::LoadPtr { ty: pt.clone() })?;
        let mask = self.mask_for(mask, &pt, "load", &src)?;
        let other = match other {
            None => None,
            Some(o) => {
                if self.ty(o).elem.pointee().is_some() {
                    return Err(E::LoadOtherPointer);
                }
                let o = self.convert(o, d, src.clone())?;
                let ot = self.ty(o).clone();
                if broadcast_shapes(&ot.shape, &pt.shape).as_deref() != Some(&pt.shape[..]) {
                    return Err(E::LoadOtherShape { other: ot, ptr: pt });
                }
                Some(self.broadcast_to(o, &pt.shape, src.clone())?)
            }
        };
        Ok(self.push(
            Op::Load { ptr, mask, other },
            Type::num(d, pt.shape),
            false,
            src,
        ))
    }

    pub fn store(
        &mut self,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        src: Src,
    ) -> BResult<()> {
        let (ptr, value, mask) = self.write_operands(ptr, value, mask, "store", &src)?;
        self.emit(Stmt::Store {
            ptr,
            value,
            mask,
            src,
        });
        Ok(())
    }

    /// `prefetch(ptrs, mask)` (see `Stmt::Prefetch`).
    pub fn prefetch(&mut self, ptr: ValueId, mask: Option<ValueId>, src: Src) -> BResult<()> {
        let pt = self.ty(ptr).clone();
        if pt.elem.pointee().is_none() {
            return Err(E::WritePtr {
                what: "prefetch",
                ty: pt,
            });
        }
        let mask = self.mask_for(mask, &pt, "prefetch", &src)?;
        self.emit(Stmt::Prefetch { ptr, mask, src });
        Ok(())
    }

    /// An atomic; on a scalar pointer it returns the old value (see `Stmt::Atomic`).
    pub fn atomic(
        &mut self,
        op: AtomicOp,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        src: Src,
    ) -> BResult<Option<ValueId>> {
        let name = match op {
            AtomicOp::Add => "atomic_add",
            AtomicOp::Max => "atomic_max",
            AtomicOp::Min => "atomic_min",
        };
        if let Some(d) = self.ty(ptr).elem.pointee() {
            if !matches!(d, DType::F32 | DType::I32) || (d == DType::F32 && op == AtomicOp::Min) {
                return Err(E::AtomicDType {
                    what: name,
                    dtype: d,
                });
            }
        }
        let (ptr, value, mask) = self.write_operands(ptr, value, mask, name, &src)?;
        let pt = self.ty(ptr).clone();
        let old = match pt.elem.pointee() {
            Some(d) if pt.is_scalar() => {
                let id = ValueId(self.kernel.values.len() as u32);
                self.kernel.values.push(Type::scalar(Elem::Num(d)));
                self.weak.push(false);
                Some(id)
            }
            _ => None,
        };
        self.emit(Stmt::Atomic {
            op,
            ptr,
            value,
            mask,
            old,
            src,
        });
        Ok(old)
    }

    fn write_operands(
        &mut self,
        ptr: ValueId,
        value: ValueId,
        mask: Option<ValueId>,
        what: &'static str,
        src: &Src,
    ) -> BResult<(ValueId, ValueId, Option<ValueId>)> {
        let pt = self.ty(ptr).clone();
        let d = pt.elem.pointee().ok_or_else(|| E::WritePtr {
            what,
            ty: pt.clone(),
        })?;
        let vt = self.ty(value).clone();
        let vd = vt.elem.num().ok_or(E::WritePointerValue { what })?;
        let value = if vd == d {
            value
        } else if self.is_weak(value) {
            self.convert(value, d, src.clone())?
        } else {
            return Err(E::WriteNeedsCast {
                what,
                from: vd,
                to: d,
            });
        };
        if broadcast_shapes(&vt.shape, &pt.shape).as_deref() != Some(&pt.shape[..]) {
            return Err(E::WriteShape {
                what,
                value: vt.shape,
                ptr: pt.shape,
            });
        }
        let value = self.broadcast_to(value, &pt.shape, src.clone())?;
        let mask = self.mask_for(mask, &pt, what, src)?;
        Ok((ptr, value, mask))
    }

    fn mask_for(
        &mut self,
        mask: Option<ValueId>,
        pt: &Type,
        what: &'static str,
        src: &Src,
    ) -> BResult<Option<ValueId>> {
        let Some(m) = mask else { return Ok(None) };
        let mt = self.ty(m).clone();
        if mt.elem != Elem::Num(DType::Bool) {
            return Err(E::MaskDType { what, ty: mt });
        }
        if broadcast_shapes(&mt.shape, &pt.shape).as_deref() != Some(&pt.shape[..]) {
            return Err(E::MaskShape {
                what,
                mask: mt.shape,
                ptr: pt.shape.clone(),
            });
        }
        Ok(Some(self.broadcast_to(m, &pt.shape, src.clone())?))
    }

    pub fn reduce(&mut self, op: ReduceOp, x: ValueId, axis: i64, src: Src) -> BResult<ValueId> {
        let t = self.ty(x).clone();
        let d = t.elem.num().ok_or(E::ReducePointer { op })?;
        if t.is_scalar() {
            return Err(E::ReduceScalar { op, ty: t });
        }
        if d == DType::Bool {
            return Err(E::ReduceBool { op });
        }
        if axis < 0 || axis as usize >= t.rank() {
            return Err(E::ReduceAxis { op, axis, ty: t });
        }
        let mut shape = t.shape.clone();
        shape.remove(axis as usize);
        let out = match op {
            ReduceOp::Argmax | ReduceOp::Argmin => DType::I32,
            _ => d,
        };
        Ok(self.push(
            Op::Reduce {
                op,
                x,
                axis: axis as u8,
            },
            Type::num(out, shape),
            false,
            src,
        ))
    }

    /// `dot(a, b)` / `dot(a, b, acc)`.
    pub fn dot(
        &mut self,
        a: ValueId,
        b: ValueId,
        acc: Option<ValueId>,
        src: Src,
    ) -> BResult<ValueId> {
        let (ta, tb) = (self.ty(a).clone(), self.ty(b).clone());
        for (operand, t) in [(Operand::A, &ta), (Operand::B, &tb)] {
            let d = t.elem.num();
            if t.rank() != 2 {
                return Err(E::DotRank {
                    operand,
                    ty: t.clone(),
                });
            }
            if !matches!(d, Some(DType::BF16 | DType::F16 | DType::F32)) {
                return Err(E::DotDType {
                    operand,
                    ty: t.clone(),
                });
            }
        }
        if ta.elem != tb.elem {
            return Err(E::DotMixed { a: ta, b: tb });
        }
        if ta.shape[1] != tb.shape[0] {
            return Err(E::DotInner { a: ta, b: tb });
        }
        let shape = vec![ta.shape[0].clone(), tb.shape[1].clone()];
        let out = Type::num(DType::F32, shape.clone());
        if let Some(c) = acc {
            let tc = self.ty(c).clone();
            if tc != out {
                return Err(E::DotAcc { want: out, got: tc });
            }
        }
        Ok(self.push(Op::Dot { a, b, acc }, out, false, src))
    }

    /// `trans(x)` / `x.trans()`: swaps the two dimensions of a 2-D tile.
    pub fn trans(&mut self, x: ValueId, src: Src) -> BResult<ValueId> {
        let t = self.ty(x).clone();
        if t.rank() != 2 {
            return Err(E::TransRank { ty: t });
        }
        if t.elem.num().is_none() {
            return Err(E::TransNotNumbers { ty: t });
        }
        let shape = vec![t.shape[1].clone(), t.shape[0].clone()];
        let weak = self.is_weak(x);
        Ok(self.push(
            Op::Trans(x),
            Type {
                elem: t.elem,
                shape,
            },
            weak,
            src,
        ))
    }

    // ---- variables and control flow ------------------------------------------------------

    pub fn decl_var(&mut self, name: &str, init: ValueId, src: Src) -> BResult<VarId> {
        let t = self.ty(init).clone();
        let var = VarId(self.kernel.vars.len() as u32);
        self.kernel.vars.push(VarInfo {
            name: name.to_string(),
            ty: t,
        });
        self.emit(Stmt::DeclVar { var, init, src });
        Ok(var)
    }

    pub fn var_ty(&self, var: VarId) -> &Type {
        self.kernel.var_ty(var)
    }

    pub fn read_var(&mut self, var: VarId, src: Src) -> BResult<ValueId> {
        let t = self.kernel.var_ty(var).clone();
        Ok(self.push(Op::ReadVar(var), t, false, src))
    }

    pub fn assign(&mut self, var: VarId, value: ValueId, src: Src) -> BResult<()> {
        let VarInfo { name, ty } = self.kernel.vars[var.0 as usize].clone();
        let vt = self.ty(value).clone();
        let value = if vt.elem == ty.elem {
            value
        } else if self.is_weak(value) && ty.elem.num().is_some() {
            self.convert(value, ty.elem.num().unwrap(), src.clone())?
        } else {
            return Err(E::AssignType {
                name,
                from: vt.elem,
                ty,
            });
        };
        if broadcast_shapes(&vt.shape, &ty.shape).as_deref() != Some(&ty.shape[..]) {
            return Err(E::AssignShape {
                name,
                from: vt.shape,
                to: ty.shape,
            });
        }
        let value = self.broadcast_to(value, &ty.shape, src.clone())?;
        self.emit(Stmt::Assign { var, value, src });
        Ok(())
    }

    /// Opens `for iv in (start..end).step_by(step)`; returns the induction variable.
    pub fn begin_for(
        &mut self,
        start: ValueId,
        end: ValueId,
        step: ValueId,
        src: Src,
    ) -> BResult<ValueId> {
        for (v, operand) in [
            (start, Operand::Start),
            (end, Operand::End),
            (step, Operand::Step),
        ] {
            let t = self.ty(v).clone();
            if !t.is_scalar() || t.elem != Elem::Num(DType::I32) {
                return Err(E::LoopBound { operand, ty: t });
            }
        }
        let id = ValueId(self.kernel.values.len() as u32);
        self.kernel.values.push(Type::scalar(Elem::Num(DType::I32)));
        self.weak.push(false);
        self.open.push(Open::For {
            iv: id,
            start,
            end,
            step,
            src,
        });
        self.blocks.push(vec![]);
        Ok(id)
    }

    pub fn end_for(&mut self) -> BResult<()> {
        let body = self.blocks.pop().ok_or(E::Nesting {
            what: "no open block",
        })?;
        match self.open.pop() {
            Some(Open::For {
                iv,
                start,
                end,
                step,
                src,
            }) => {
                self.emit(Stmt::For {
                    iv,
                    start,
                    end,
                    step,
                    body,
                    src,
                });
                Ok(())
            }
            _ => Err(E::Nesting {
                what: "end_for without begin_for",
            }),
        }
    }

    pub fn begin_if(&mut self, cond: ValueId, src: Src) -> BResult<()> {
        let t = self.ty(cond).clone();
        if !t.is_scalar() || t.elem != Elem::Num(DType::Bool) {
            return Err(E::IfCond { ty: t });
        }
        self.open.push(Open::If {
            cond,
            then: None,
            src,
        });
        self.blocks.push(vec![]);
        Ok(())
    }

    pub fn begin_else(&mut self) -> BResult<()> {
        let then = self.blocks.pop().ok_or(E::Nesting {
            what: "no open block",
        })?;
        match self.open.last_mut() {
            Some(Open::If { then: t @ None, .. }) => *t = Some(then),
            _ => {
                return Err(E::Nesting {
                    what: "else without if",
                })
            }
        }
        self.blocks.push(vec![]);
        Ok(())
    }

    pub fn end_if(&mut self) -> BResult<()> {
        let last = self.blocks.pop().ok_or(E::Nesting {
            what: "no open block",
        })?;
        match self.open.pop() {
            Some(Open::If { cond, then, src }) => {
                let (then, els) = match then {
                    Some(t) => (t, last),
                    None => (last, vec![]),
                };
                self.emit(Stmt::If {
                    cond,
                    then,
                    els,
                    src,
                });
                Ok(())
            }
            _ => Err(E::Nesting {
                what: "end_if without begin_if",
            }),
        }
    }

    // ---- helpers ---------------------------------------------------------------------------

    /// Converts to `d`: a weak literal is re-typed in place of a cast.
    fn convert(&mut self, x: ValueId, d: DType, src: Src) -> BResult<ValueId> {
        let t = self.ty(x).clone();
        let from = t.elem.num().ok_or_else(|| E::ConvertPointer {
            ty: t.clone(),
            to: d,
        })?;
        if from == d {
            return Ok(x);
        }
        let weak = self.is_weak(x);
        Ok(self.push(Op::Cast(x), Type::num(d, t.shape), weak, src))
    }
}

fn check_axis3(axis: i64, what: &'static str) -> BResult<u8> {
    if (0..3).contains(&axis) {
        Ok(axis as u8)
    } else {
        Err(E::Axis { what, axis })
    }
}

fn check_rank(shape: &[Dim]) -> BResult<()> {
    if shape.len() > 2 {
        return Err(E::Rank {
            shape: shape.to_vec(),
        });
    }
    Ok(())
}

/// Numpy broadcasting over symbolic dimensions: equal, or one of them is 1.
pub fn broadcast_shapes(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let n = a.len().max(b.len());
    let one = ConstExpr::Lit(1);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let da = if i + a.len() >= n {
            &a[i + a.len() - n]
        } else {
            &one
        };
        let db = if i + b.len() >= n {
            &b[i + b.len() - n]
        } else {
            &one
        };
        out.push(if da == db || *db == one {
            da.clone()
        } else if *da == one {
            db.clone()
        } else {
            return None;
        });
    }
    Some(out)
}

/// The dtype two operands meet at.
pub fn promote(a: DType, a_weak: bool, b: DType, b_weak: bool) -> BResult<DType> {
    if a == b {
        return Ok(a);
    }
    if (a == DType::Bool) != (b == DType::Bool) {
        return Err(E::BoolMix { a, b });
    }
    Ok(match (a_weak, b_weak) {
        // A weak literal takes the other side's type, unless it is a float meeting ints.
        (true, false) if !(a.is_float() && b.is_int()) => b,
        (false, true) if !(b.is_float() && a.is_int()) => a,
        _ if a.is_int() => b,
        _ if b.is_int() => a,
        // Two different float types meet at f32.
        _ => DType::F32,
    })
}
