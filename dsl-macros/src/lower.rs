//! Walks the kernel body (syn) and drives `dsl_ir::Builder`, which applies every typing
//! rule. Each Builder error becomes a compile error at the token of the operand it names
//! (`BuildError::operand`, mapped by [`blame`]), or at the whole node being built.
//!
//! Scoping follows Rust: a block's `let`s die with it; only `let mut` variables declared
//! outside a block carry values out of it (through `Builder::assign`).
use crate::parse::{dtype_of_type, src_of, src_text, HRet, HTy, Helper, HelperSig, KernelSig, PTy};
use dsl_ir::*;
use quote::ToTokens;
use std::collections::HashMap;
use std::rc::Rc;
use syn::{Block, Expr, ExprLit, Ident, Lit as SynLit, Pat, Stmt as SynStmt, UnOp};

/// Every primitive, for the "unknown primitive" message.
const PRIMITIVES: &str = "program_id, num_programs, arange, zeros, full, load, store, \
     prefetch, atomic_add, atomic_max, atomic_min, where_, maximum, minimum, exp, exp2, log, log2, sqrt, \
     rsqrt, sigmoid, silu, abs, sin, cos, tanh, sum, max, min, argmax, argmin, expand_dims, \
     broadcast_to, cdiv, dot, trans, and the methods `.to(dtype)` and `.trans()`";

const CONST_HELP: &str = "must be a constexpr integer expression: integer literals, \
     `#[constexpr]` parameters, and `+ - * / %` of them";

/// A failed lowering step: `Some` is a new error to report; `None` means the failure was
/// already reported (a use of a binding whose definition failed), so it is not repeated.
pub struct Fail(Option<syn::Error>);

impl From<syn::Error> for Fail {
    fn from(e: syn::Error) -> Self {
        Fail(Some(e))
    }
}

type LResult<T> = Result<T, Fail>;

fn err<T>(node: &dyn ToTokens, msg: impl std::fmt::Display) -> LResult<T> {
    Err(syn::Error::new_spanned(node, msg).into())
}

#[derive(Clone)]
enum Bind {
    /// An immutable `let` (or a loop's induction variable).
    Val(ValueId),
    /// A `let mut`: every read goes through `read_var`, so loops see the current value.
    Var(VarId),
    Param(usize, PTy),
    /// Inside an inlined `#[tile_fn]`: a constexpr parameter or shape variable, bound to the
    /// caller's constexpr expression.
    Const(ConstExpr),
    /// A binding whose initializer failed to build (its error is already reported).
    Poisoned,
}

pub struct Lower {
    b: Builder,
    scopes: Vec<HashMap<String, Bind>>,
    /// The `let` name each value is bound to, applied to `Src.name` when done (first wins,
    /// so `let y = x;` does not rename `x`).
    names: HashMap<ValueId, String>,
    errors: Vec<syn::Error>,
    /// The `#[tile_fn]`s a call may inline, by name: the tile standard library's, then the
    /// kernel's `helpers(..)` (which shadow them).
    helpers: HashMap<String, Rc<Helper>>,
    /// The helpers being inlined, outermost first (a call to one of them is recursion).
    inlining: Vec<String>,
}

/// Lowers the kernel; returns its IR or every error found.
pub fn lower(
    sig: &KernelSig,
    body: &Block,
    file: &str,
    helpers: Vec<Helper>,
) -> Result<Kernel, syn::Error> {
    let mut l = Lower {
        b: Builder::new(&sig.name.to_string(), file),
        scopes: vec![HashMap::new()],
        names: HashMap::new(),
        errors: vec![],
        helpers: helpers
            .into_iter()
            .map(|h| (h.sig.name.to_string(), Rc::new(h)))
            .collect(),
        inlining: vec![],
    };
    for p in &sig.params {
        let name = p.ident.to_string();
        match l.b.param(&name, p.ty.kind()) {
            Ok(i) => {
                l.scopes[0].insert(name, Bind::Param(i, p.ty.clone()));
            }
            Err(m) => l.errors.push(syn::Error::new(p.ident.span(), m)),
        }
    }
    l.scopes.push(HashMap::new());
    l.block_stmts(&body.stmts);
    let Lower {
        b,
        names,
        mut errors,
        ..
    } = l;
    if !errors.is_empty() {
        let mut first = errors.remove(0);
        for e in errors {
            first.combine(e);
        }
        return Err(first);
    }
    let mut k = b
        .finish()
        .map_err(|m| syn::Error::new_spanned(&sig.name, m))?;
    apply_names(&mut k.body, &names);
    Ok(k)
}

fn apply_names(body: &mut [Stmt], names: &HashMap<ValueId, String>) {
    for s in body {
        match s {
            Stmt::Let { id, src, .. }
            | Stmt::Atomic {
                old: Some(id), src, ..
            } => {
                if let Some(n) = names.get(id) {
                    src.name = n.clone();
                }
            }
            Stmt::For { body, .. } => apply_names(body, names),
            Stmt::If { then, els, .. } => {
                apply_names(then, names);
                apply_names(els, names);
            }
            _ => {}
        }
    }
}

impl Lower {
    // ---- scopes ----------------------------------------------------------------------------

    fn lookup(&self, name: &str) -> Option<&Bind> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn bind(&mut self, name: String, b: Bind) {
        self.scopes
            .last_mut()
            .expect("a scope is always open")
            .insert(name, b);
    }

    fn scoped(&mut self, stmts: &[SynStmt]) {
        self.scopes.push(HashMap::new());
        self.block_stmts(stmts);
        self.scopes.pop();
    }

    fn report(&mut self, f: Fail) {
        if let Some(e) = f.0 {
            self.errors.push(e);
        }
    }

    // ---- statements ------------------------------------------------------------------------

    fn block_stmts(&mut self, stmts: &[SynStmt]) {
        for s in stmts {
            if let Err(f) = self.stmt(s) {
                self.report(f);
            }
        }
    }

    fn stmt(&mut self, s: &SynStmt) -> LResult<()> {
        match s {
            SynStmt::Local(local) => self.local(local),
            SynStmt::Expr(e, _) => self.expr_stmt(e),
            SynStmt::Item(i) => err(
                i,
                "items (fn, struct, use, ...) are not allowed inside a kernel",
            ),
            SynStmt::Macro(m) => err(m, "macros are not supported inside a kernel"),
        }
    }

    fn local(&mut self, local: &syn::Local) -> LResult<()> {
        let (ident, mutable) = match &local.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                (Some(&pi.ident), pi.mutability.is_some())
            }
            Pat::Wild(_) => (None, false),
            Pat::Type(pt) => {
                return err(
                    &pt.ty,
                    "type annotations are not supported in kernels: types are inferred",
                )
            }
            Pat::Tuple(t) => return self.tuple_local(local, t),
            p => {
                return err(
                    p,
                    "a `let` binds one name (no patterns but `let (a, b) = f(..)`, for the values of a tile function that returns several)",
                )
            }
        };
        let init = local_init(local)?;
        let Some(ident) = ident else {
            self.expr(init).map(|_| ())?;
            return Ok(());
        };
        let v = match self.expr(init) {
            Ok(v) => v,
            Err(f) => {
                // Later uses of the name stay quiet: the one error is enough.
                self.bind(ident.to_string(), Bind::Poisoned);
                return Err(f);
            }
        };
        self.bind_let(local, ident, mutable, v)
    }

    /// Binds `ident` (of `let` statement `local`) to `v`: a value, or for `let mut` a
    /// variable initialised to it.
    fn bind_let(
        &mut self,
        local: &syn::Local,
        ident: &Ident,
        mutable: bool,
        v: ValueId,
    ) -> LResult<()> {
        let name = ident.to_string();
        self.names.entry(v).or_insert_with(|| name.clone());
        if mutable {
            let mut src = src_of(local, &name);
            src.text = src.text.trim_end_matches(';').trim_end().to_string();
            let var = self
                .b
                .decl_var(&name, v, src)
                .map_err(|m| blame(m, local, &[]))?;
            self.bind(name, Bind::Var(var));
        } else {
            self.bind(name, Bind::Val(v));
        }
        Ok(())
    }

    /// `let (a, mut b, _) = f(..);`: binds the values of a tile function that returns
    /// several, in order. On any failure every name is poisoned, so the one error stands alone.
    fn tuple_local(&mut self, local: &syn::Local, pat: &syn::PatTuple) -> LResult<()> {
        let (slots, bad) = tuple_slots(pat);
        let values = match bad {
            Some(e) => Err(e.into()),
            None => local_init(local).and_then(|init| {
                let call = strip_parens(init);
                let (h, fname, args) = self.tuple_callee(call, pat)?;
                self.inline(&h, fname, &args, call)
            }),
        };
        let values = match values {
            Ok(values) => values,
            Err(f) => {
                for (id, _) in slots.iter().flatten() {
                    self.bind(id.to_string(), Bind::Poisoned);
                }
                return Err(f);
            }
        };
        for (slot, v) in slots.iter().zip(values) {
            let Some((id, mutable)) = slot else { continue };
            if let Err(f) = self.bind_let(local, id, *mutable, v) {
                self.report(f);
                self.bind(id.to_string(), Bind::Poisoned);
            }
        }
        Ok(())
    }

    /// The tile function a tuple pattern's initialiser `call` calls, with its name and
    /// arguments: one that returns as many values as `pat` has places.
    fn tuple_callee<'e>(
        &self,
        call: &'e Expr,
        pat: &syn::PatTuple,
    ) -> LResult<(Rc<Helper>, &'e Ident, Vec<&'e Expr>)> {
        let found = match call {
            Expr::Call(_) | Expr::MethodCall(_) => {
                let (fname, args) = callee(call)?;
                self.helpers
                    .get(&fname.to_string())
                    .map(|h| (h.clone(), fname, args))
            }
            _ => None,
        };
        let Some((h, fname, args)) = found else {
            return err(
                call,
                "a tuple pattern takes the values of a tile function that returns several: `let (a, b) = f(..)`",
            );
        };
        let n = pat.elems.len();
        match &h.sig.ret {
            HRet::Tuple(tys) if tys.len() == n => Ok((h, fname, args)),
            HRet::Tuple(tys) => err(
                pat,
                format!(
                    "`{fname}` returns {} values, but this pattern has {n}",
                    tys.len()
                ),
            ),
            HRet::One(_) => err(
                pat,
                format!("`{fname}` returns one value: bind it with `let name = {fname}(..)`"),
            ),
            HRet::Unit => err(
                pat,
                format!("`{fname}` returns nothing: call it as a statement"),
            ),
        }
    }

    fn expr_stmt(&mut self, e: &Expr) -> LResult<()> {
        match e {
            Expr::Assign(a) => {
                let var = self.assignee(&a.left)?;
                let v = self.expr(&a.right)?;
                self.b
                    .assign(var, v, src_of(e, ""))
                    .map_err(|m| blame(m, e, &[(Operand::Value, &a.right)]))?;
                Ok(())
            }
            Expr::Binary(bin) if compound_op(&bin.op).is_some() => {
                let op = compound_op(&bin.op).expect("checked");
                let var = self.assignee(&bin.left)?;
                let cur = self
                    .b
                    .read_var(var, src_of(&bin.left, ""))
                    .map_err(|m| blame(m, &bin.left, &[]))?;
                let rhs = self.expr(&bin.right)?;
                let v = self
                    .b
                    .binary(op, cur, rhs, src_of(e, ""))
                    .map_err(|m| blame(m, e, &[]))?;
                // `acc += x` assigns `acc + x`: a dtype or shape it cannot take comes from x.
                self.b
                    .assign(var, v, src_of(e, ""))
                    .map_err(|m| blame(m, e, &[(Operand::Value, &bin.right)]))?;
                Ok(())
            }
            Expr::ForLoop(f) => self.for_loop(f),
            Expr::If(i) => self.if_stmt(i),
            Expr::Block(b) => {
                if let Some(l) = &b.label {
                    return err(l, "labels are not supported in kernels");
                }
                self.scoped(&b.block.stmts);
                Ok(())
            }
            Expr::While(w) => err(&w.while_token, "only `for` loops over ranges are supported"),
            Expr::Loop(l) => err(&l.loop_token, "only `for` loops over ranges are supported"),
            Expr::Break(_) | Expr::Continue(_) | Expr::Return(_) => err(
                e,
                "early exits (break / continue / return) are not supported in kernels",
            ),
            Expr::Call(_) | Expr::MethodCall(_) => self.call_expr(e).map(|_| ()),
            // A value computed for nothing; still type-checked.
            _ => self.expr(e).map(|_| ()),
        }
    }

    /// The `let mut` variable on the left of `=` / `+=`.
    fn assignee(&mut self, lhs: &Expr) -> LResult<VarId> {
        let Some(id) = plain_ident(lhs) else {
            return err(lhs, "only `let mut` names can be assigned to");
        };
        match self.lookup(&id.to_string()) {
            Some(Bind::Var(v)) => Ok(*v),
            Some(Bind::Poisoned) => Err(Fail(None)),
            Some(Bind::Param(..) | Bind::Const(_)) => err(
                lhs,
                format!("cannot assign to parameter `{id}`: bind a copy with `let mut`"),
            ),
            Some(Bind::Val(_)) => err(
                lhs,
                format!("cannot assign twice to immutable `{id}`: declare it with `let mut {id}`"),
            ),
            None => err(lhs, format!("cannot find `{id}` in this kernel")),
        }
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop) -> LResult<()> {
        if let Some(l) = &f.label {
            return err(l, "labels are not supported in kernels");
        }
        let iv_name = match &*f.pat {
            Pat::Ident(pi)
                if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() =>
            {
                Some(pi.ident.to_string())
            }
            Pat::Wild(_) => None,
            p => return err(p, "a loop variable is a plain name"),
        };
        // `a..b` or `(a..b).step_by(s)`.
        let (range, step) = match &*f.expr {
            Expr::MethodCall(m) if m.method == "step_by" => {
                if m.args.len() != 1 || m.turbofish.is_some() {
                    return err(&f.expr, "`step_by` takes one i32 step");
                }
                (strip_parens(&m.receiver), Some(&m.args[0]))
            }
            e => (strip_parens(e), None),
        };
        let Expr::Range(r) = range else {
            return err(&f.expr, "loops run over `a..b` or `(a..b).step_by(s)`");
        };
        let (Some(start), Some(end), syn::RangeLimits::HalfOpen(_)) = (&r.start, &r.end, &r.limits)
        else {
            return err(r, "loop ranges are half-open with both bounds: `a..b`");
        };
        let s = self.expr(start)?;
        let e = self.expr(end)?;
        let st = match step {
            Some(st) => {
                if let Some(v) = int_literal(st) {
                    if v <= 0 {
                        return err(st, "the loop step must be positive");
                    }
                }
                self.expr(st)?
            }
            None => self
                .b
                .lit_int(1, src_of(r, ""))
                .map_err(|m| blame(m, r, &[]))?,
        };
        let pat = f.pat.to_token_stream();
        let header = format!(
            "for {} in {}",
            crate::parse::text_of(pat),
            crate::parse::text_of(f.expr.to_token_stream())
        );
        let iv = self
            .b
            .begin_for(s, e, st, src_text(f.for_token.span, header))
            .map_err(|m| {
                let step: &dyn ToTokens = match step {
                    Some(st) => st,
                    None => r,
                };
                blame(
                    m,
                    &f.expr,
                    &[
                        (Operand::Start, start),
                        (Operand::End, end),
                        (Operand::Step, step),
                    ],
                )
            })?;
        self.scopes.push(HashMap::new());
        if let Some(n) = iv_name {
            self.bind(n, Bind::Val(iv));
        }
        self.block_stmts(&f.body.stmts);
        self.scopes.pop();
        self.b.end_for().map_err(|m| blame(m, &f.for_token, &[]))?;
        Ok(())
    }

    fn if_stmt(&mut self, i: &syn::ExprIf) -> LResult<()> {
        if let Expr::Let(l) = &*i.cond {
            return err(l, "`if let` is not supported in kernels");
        }
        let c = self.expr(&i.cond)?;
        let header = format!("if {}", crate::parse::text_of(i.cond.to_token_stream()));
        self.b
            .begin_if(c, src_text(i.if_token.span, header))
            .map_err(|m| blame(m, &i.cond, &[(Operand::Cond, &i.cond)]))?;
        self.scoped(&i.then_branch.stmts);
        if let Some((else_tok, els)) = &i.else_branch {
            self.b.begin_else().map_err(|m| blame(m, else_tok, &[]))?;
            self.scopes.push(HashMap::new());
            // `else if` is an `if` statement inside the else block.
            match &**els {
                Expr::Block(b) => self.block_stmts(&b.block.stmts),
                Expr::If(inner) => {
                    if let Err(f) = self.if_stmt(inner) {
                        self.report(f);
                    }
                }
                e => {
                    if let Err(f) = self.expr_stmt(e) {
                        self.report(f);
                    }
                }
            }
            self.scopes.pop();
        }
        self.b.end_if().map_err(|m| blame(m, &i.if_token, &[]))?;
        Ok(())
    }

    // ---- expressions -----------------------------------------------------------------------

    fn expr(&mut self, e: &Expr) -> LResult<ValueId> {
        let src = || src_of(e, "");
        let at = |m: BuildError| blame(m, e, &[]);
        match e {
            Expr::Lit(l) => self.literal(l, false),
            Expr::Unary(u) => match u.op {
                UnOp::Neg(_) => match &*u.expr {
                    // `-1` is one literal (so i32::MIN fits, and it stays weak).
                    Expr::Lit(l) => self.literal(l, true).map_err(|f| self.respan(f, e)),
                    x => {
                        let v = self.expr(x)?;
                        self.b.unary(UnaryOp::Neg, v, src()).map_err(at)
                    }
                },
                UnOp::Not(_) => {
                    let v = self.expr(&u.expr)?;
                    self.b.unary(UnaryOp::Not, v, src()).map_err(at)
                }
                _ => err(e, "dereferencing is not supported in kernels"),
            },
            Expr::Path(p) => {
                if let Some(v) = float_const(p) {
                    return self.b.lit_float(v, src()).map_err(at);
                }
                let Some(id) = plain_ident(e) else {
                    return err(
                        e,
                        "expected a name (the only paths in kernels are f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN and f32::NAN)",
                    );
                };
                self.name_value(id, e)
            }
            Expr::Binary(bin) => {
                let op = match binop(&bin.op) {
                    Some(op) => op,
                    None if matches!(bin.op, syn::BinOp::And(_) | syn::BinOp::Or(_)) => {
                        return err(&bin.op, "tiles do not short-circuit: use `&` / `|`");
                    }
                    None => return err(e, "assignment is a statement, not a value"),
                };
                let a = self.expr(&bin.left)?;
                let b = self.expr(&bin.right)?;
                self.b.binary(op, a, b, src()).map_err(at)
            }
            Expr::Cast(c) => {
                let Some(d) = dtype_of_type(&c.ty) else {
                    return err(&c.ty, "casts are to bf16, f16, f32, i32 or bool");
                };
                let v = self.expr(&c.expr)?;
                self.b.cast(v, d, src()).map_err(at)
            }
            Expr::Paren(p) => self.expr(&p.expr),
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Call(_) | Expr::MethodCall(_) => self.call_expr(e).and_then(|v| match v {
                Some(v) => Ok(v),
                None => err(e, "this call returns nothing: use it as a statement"),
            }),
            Expr::Range(_) => err(e, "ranges are only allowed as `for` loop bounds"),
            Expr::Assign(_) => err(e, "assignment is a statement, not a value"),
            Expr::If(_) => err(
                e,
                "`if` is a statement in kernels; to select per element use `where_(c, a, b)`",
            ),
            Expr::Array(_) => err(
                e,
                "`[..]` is only allowed as the shape argument of zeros / full / broadcast_to",
            ),
            Expr::Index(_) => err(
                e,
                "indexing is not supported: address memory with `load(ptr + offsets)`",
            ),
            Expr::Closure(_) => err(e, "closures are not supported in kernels"),
            _ => err(e, "this expression is not supported in kernels"),
        }
    }

    /// Gives a literal error the span of the whole `-lit`.
    fn respan(&self, f: Fail, e: &Expr) -> Fail {
        match f.0 {
            Some(x) => Fail(Some(syn::Error::new_spanned(e, x.to_string()))),
            None => f,
        }
    }

    fn literal(&mut self, l: &ExprLit, neg: bool) -> LResult<ValueId> {
        let src = if neg {
            Src {
                text: format!("-{}", l.lit.to_token_stream()),
                ..src_of(l, "")
            }
        } else {
            src_of(l, "")
        };
        let at = |m: String| Fail::from(syn::Error::new_spanned(l, m));
        let built = |m: BuildError| blame(m, l, &[]);
        match &l.lit {
            SynLit::Int(i) => match i.suffix() {
                "" | "i32" => {
                    let v: i64 = i
                        .base10_parse()
                        .map_err(|_| at("integer literal does not fit in i32".into()))?;
                    self.b.lit_int(if neg { -v } else { v }, src).map_err(built)
                }
                "f32" => {
                    let v: f64 = i.base10_parse().map_err(|x| at(x.to_string()))?;
                    self.b
                        .lit_float(if neg { -v } else { v }, src)
                        .map_err(built)
                }
                s => err(
                    l,
                    format!("unsupported literal suffix `{s}`: kernel literals are i32 or f32"),
                ),
            },
            SynLit::Float(f) => match f.suffix() {
                "" | "f32" => {
                    let v: f64 = f.base10_parse().map_err(|x| at(x.to_string()))?;
                    self.b
                        .lit_float(if neg { -v } else { v }, src)
                        .map_err(built)
                }
                s => err(
                    l,
                    format!("unsupported literal suffix `{s}`: kernel literals are i32 or f32"),
                ),
            },
            SynLit::Bool(b) if !neg => self.b.lit_bool(b.value, src).map_err(built),
            _ => err(l, "kernel literals are integers, floats and booleans"),
        }
    }

    fn name_value(&mut self, id: &Ident, e: &Expr) -> LResult<ValueId> {
        let name = id.to_string();
        let at = |m: BuildError| blame(m, e, &[]);
        match self.lookup(&name).cloned() {
            Some(Bind::Val(v)) => Ok(v),
            Some(Bind::Var(var)) => self.b.read_var(var, src_of(e, "")).map_err(at),
            Some(Bind::Param(i, _)) => self.b.param_value(i, src_of(e, "")).map_err(at),
            Some(Bind::Const(c)) => self.b.const_expr(c, src_of(e, "")).map_err(at),
            Some(Bind::Poisoned) => Err(Fail(None)),
            None if DType::from_name(&name).is_some() => err(
                e,
                format!("`{name}` is a type: convert with `x.to({name})` or `x as {name}`"),
            ),
            None => err(e, format!("cannot find `{name}` in this kernel")),
        }
    }

    // ---- calls -------------------------------------------------------------------------------

    /// A primitive call, `f(args)` or the method form `x.f(args)` ≡ `f(x, args)`.
    /// Returns `None` for the primitives that produce nothing (store, tile atomics).
    fn call_expr(&mut self, e: &Expr) -> LResult<Option<ValueId>> {
        match e {
            // `x.to(f32)`: the conversion method.
            Expr::MethodCall(m) if m.turbofish.is_none() && m.method == "to" => {
                if m.args.len() != 1 {
                    return err(e, "`.to` takes one dtype: `x.to(f32)`");
                }
                let d = self.dtype_arg(&m.args[0])?;
                let v = self.expr(&m.receiver)?;
                self.b
                    .cast(v, d, src_of(e, ""))
                    .map(Some)
                    .map_err(|x| blame(x, e, &[]))
            }
            _ => {
                let (fname, args) = callee(e)?;
                self.primitive(fname, &args, e)
            }
        }
    }

    fn primitive(&mut self, fname: &Ident, args: &[&Expr], e: &Expr) -> LResult<Option<ValueId>> {
        let name = fname.to_string();
        let src = || src_of(e, "");
        let at = |m: BuildError| blame(m, e, &[]);
        // The operands of a builder call, each at the argument the user wrote for it.
        let roles = |ops: &[Operand]| -> Vec<(Operand, &dyn ToTokens)> {
            ops.iter()
                .zip(args)
                .map(|(o, a)| (*o, *a as &dyn ToTokens))
                .collect()
        };
        let arity = |ok: &[usize], sig: &str| -> LResult<()> {
            if ok.contains(&args.len()) {
                Ok(())
            } else {
                err(
                    e,
                    format!(
                        "`{name}` takes {sig}; got {} argument{}",
                        args.len(),
                        if args.len() == 1 { "" } else { "s" }
                    ),
                )
            }
        };
        let v = match name.as_str() {
            "program_id" | "num_programs" => {
                arity(&[1], "(axis)")?;
                let axis = self.axis_arg(args[0])?;
                if name == "program_id" {
                    self.b.program_id(axis, src())
                } else {
                    self.b.num_programs(axis, src())
                }
                .map_err(|m| blame(m, e, &roles(&[Operand::Axis])))?
            }
            "arange" => {
                arity(&[2], "(start, end)")?;
                let s = self.const_expr(args[0])?;
                let t = self.const_expr(args[1])?;
                self.b.arange(s, t, src()).map_err(at)?
            }
            "zeros" => {
                arity(&[2], "([dims], dtype)")?;
                let shape = self.shape_arg(args[0])?;
                let d = self.dtype_arg(args[1])?;
                let zero = match d {
                    DType::Bool => self.b.lit_bool(false, src()),
                    DType::I32 => self.b.lit_int(0, src()),
                    _ => self.b.lit_float(0.0, src()),
                }
                .map_err(at)?;
                self.b
                    .full(shape, zero, d, src())
                    .map_err(|m| blame(m, e, &roles(&[Operand::Shape])))?
            }
            "full" => {
                arity(&[3], "([dims], value, dtype)")?;
                let shape = self.shape_arg(args[0])?;
                let v = self.expr(args[1])?;
                let d = self.dtype_arg(args[2])?;
                self.b
                    .full(shape, v, d, src())
                    .map_err(|m| blame(m, e, &roles(&[Operand::Shape, Operand::Value])))?
            }
            "load" => {
                arity(&[1, 2, 3], "(ptr), (ptr, mask) or (ptr, mask, other)")?;
                let p = self.expr(args[0])?;
                let m = args.get(1).map(|a| self.expr(a)).transpose()?;
                let o = args.get(2).map(|a| self.expr(a)).transpose()?;
                self.b.load(p, m, o, src()).map_err(|m| {
                    blame(m, e, &roles(&[Operand::Ptr, Operand::Mask, Operand::Other]))
                })?
            }
            "store" => {
                arity(&[2, 3], "(ptr, value) or (ptr, value, mask)")?;
                let p = self.expr(args[0])?;
                let v = self.expr(args[1])?;
                let m = args.get(2).map(|a| self.expr(a)).transpose()?;
                self.b.store(p, v, m, src()).map_err(|m| {
                    blame(m, e, &roles(&[Operand::Ptr, Operand::Value, Operand::Mask]))
                })?;
                return Ok(None);
            }
            "prefetch" => {
                arity(&[1, 2], "(ptr) or (ptr, mask)")?;
                let p = self.expr(args[0])?;
                let m = args.get(1).map(|a| self.expr(a)).transpose()?;
                self.b
                    .prefetch(p, m, src())
                    .map_err(|m| blame(m, e, &roles(&[Operand::Ptr, Operand::Mask])))?;
                return Ok(None);
            }
            "atomic_add" | "atomic_max" | "atomic_min" => {
                arity(&[2, 3], "(ptr, value) or (ptr, value, mask)")?;
                let op = match name.as_str() {
                    "atomic_add" => AtomicOp::Add,
                    "atomic_max" => AtomicOp::Max,
                    _ => AtomicOp::Min,
                };
                let p = self.expr(args[0])?;
                let v = self.expr(args[1])?;
                let m = args.get(2).map(|a| self.expr(a)).transpose()?;
                // A scalar atomic returns the old value; a tile atomic returns nothing.
                return self.b.atomic(op, p, v, m, src()).map_err(|m| {
                    blame(m, e, &roles(&[Operand::Ptr, Operand::Value, Operand::Mask]))
                });
            }
            // `where` is a Rust keyword, so the primitive is `where_` (as `r#where` would
            // be unpleasant to write).
            "where_" => {
                arity(&[3], "(cond, a, b)")?;
                let c = self.expr(args[0])?;
                let a = self.expr(args[1])?;
                let b = self.expr(args[2])?;
                self.b
                    .select(c, a, b, src())
                    .map_err(|m| blame(m, e, &roles(&[Operand::Cond, Operand::A, Operand::B])))?
            }
            "maximum" | "minimum" => {
                arity(&[2], "(a, b)")?;
                let a = self.expr(args[0])?;
                let b = self.expr(args[1])?;
                let op = if name == "maximum" {
                    BinOp::Max
                } else {
                    BinOp::Min
                };
                self.b.binary(op, a, b, src()).map_err(at)?
            }
            "expand_dims" => {
                arity(&[2], "(x, axis)")?;
                let x = self.expr(args[0])?;
                let axis = self.axis_arg(args[1])?;
                self.b
                    .expand_dims(x, axis, src())
                    .map_err(|m| blame(m, e, &roles(&[Operand::A, Operand::Axis])))?
            }
            "broadcast_to" => {
                arity(&[2], "(x, [dims])")?;
                let x = self.expr(args[0])?;
                let shape = self.shape_arg(args[1])?;
                self.b
                    .broadcast_to(x, &shape, src())
                    .map_err(|m| blame(m, e, &roles(&[Operand::A, Operand::Shape])))?
            }
            "cdiv" => {
                arity(&[2], "(a, b)")?;
                let a = self.expr(args[0])?;
                let b = self.expr(args[1])?;
                for (v, arg) in [(a, args[0]), (b, args[1])] {
                    if self.b.ty(v).elem != Elem::Num(DType::I32) {
                        return err(arg, format!("cdiv takes i32 values, got {}", self.b.ty(v)));
                    }
                }
                // (a + b - 1) / b, from the builder's own integer ops.
                let one = self.b.lit_int(1, src()).map_err(at)?;
                let s = self.b.binary(BinOp::Add, a, b, src()).map_err(at)?;
                let s = self.b.binary(BinOp::Sub, s, one, src()).map_err(at)?;
                self.b.binary(BinOp::Div, s, b, src()).map_err(at)?
            }
            "dot" => {
                arity(&[2, 3], "(a, b) or (a, b, acc)")?;
                let a = self.expr(args[0])?;
                let b = self.expr(args[1])?;
                let acc = args.get(2).map(|x| self.expr(x)).transpose()?;
                self.b
                    .dot(a, b, acc, src())
                    .map_err(|m| blame(m, e, &roles(&[Operand::A, Operand::B, Operand::Acc])))?
            }
            "trans" => {
                arity(&[1], "(x)")?;
                let x = self.expr(args[0])?;
                self.b
                    .trans(x, src())
                    .map_err(|m| blame(m, e, &roles(&[Operand::A])))?
            }
            "where" | "r#where" => {
                return err(
                    fname,
                    "`where` is a Rust keyword: the primitive is `where_(cond, a, b)`",
                )
            }
            _ => {
                if let Some(op) = UnaryOp::from_name(&name) {
                    arity(&[1], "(x)")?;
                    let x = self.expr(args[0])?;
                    self.b.unary(op, x, src()).map_err(at)?
                } else if let Some(op) = ReduceOp::from_name(&name) {
                    arity(&[2], "(x, axis)")?;
                    let x = self.expr(args[0])?;
                    let axis = self.axis_arg(args[1])?;
                    self.b
                        .reduce(op, x, axis, src())
                        .map_err(|m| blame(m, e, &roles(&[Operand::A, Operand::Axis])))?
                } else if let Some(h) = self.helpers.get(&name).cloned() {
                    // Several values have no place in an expression: only `let (..)` takes them.
                    if let HRet::Tuple(tys) = &h.sig.ret {
                        return err(
                            e,
                            format!(
                                "`{name}` returns {} values: bind them with `let ({}) = {name}(..);`",
                                tys.len(),
                                placeholders(tys.len())
                            ),
                        );
                    }
                    return self
                        .inline(&h, fname, args, e)
                        .map(|vs| vs.first().copied());
                } else {
                    return err(
                        fname,
                        format!("unknown primitive `{name}`; the primitives are: {PRIMITIVES}; the tile library's functions are: {}; a `#[tile_fn]` is called once listed in `#[kernel(helpers(..))]`", crate::stdlib::NAMES),
                    );
                }
            }
        };
        Ok(Some(v))
    }

    // ---- compile-time arguments ---------------------------------------------------------------

    /// Tile shapes and arange bounds: symbolic integer expressions over constexpr params.
    fn const_expr(&self, e: &Expr) -> LResult<ConstExpr> {
        match e {
            Expr::Lit(_) | Expr::Unary(_) if int_literal(e).is_some() => {
                Ok(ConstExpr::Lit(int_literal(e).expect("checked")))
            }
            Expr::Paren(p) => self.const_expr(&p.expr),
            Expr::Group(g) => self.const_expr(&g.expr),
            Expr::Path(_) => {
                let Some(id) = plain_ident(e) else {
                    return err(e, format!("a tile shape {CONST_HELP}"));
                };
                match self.lookup(&id.to_string()) {
                    Some(Bind::Param(_, PTy::ConstInt(_))) => Ok(ConstExpr::Param(id.to_string())),
                    Some(Bind::Const(c)) => Ok(c.clone()),
                    Some(Bind::Poisoned) => Err(Fail(None)),
                    None => err(e, format!("cannot find `{id}` in this kernel")),
                    Some(_) => err(
                        e,
                        format!("`{id}` is not a constexpr: tile shapes are fixed at compile time, so they are built from `#[constexpr]` parameters"),
                    ),
                }
            }
            Expr::Binary(b) => {
                let op = match b.op {
                    syn::BinOp::Add(_) => ConstOp::Add,
                    syn::BinOp::Sub(_) => ConstOp::Sub,
                    syn::BinOp::Mul(_) => ConstOp::Mul,
                    syn::BinOp::Div(_) => ConstOp::Div,
                    syn::BinOp::Rem(_) => ConstOp::Rem,
                    _ => return err(&b.op, format!("a tile shape {CONST_HELP}")),
                };
                Ok(ConstExpr::bin(
                    op,
                    self.const_expr(&b.left)?,
                    self.const_expr(&b.right)?,
                ))
            }
            _ => err(e, format!("a tile shape {CONST_HELP}")),
        }
    }

    fn axis_arg(&self, e: &Expr) -> LResult<i64> {
        match self.const_expr(e)?.as_lit() {
            Some(a) => Ok(a),
            None => err(e, "an axis is an integer literal"),
        }
    }

    fn shape_arg(&self, e: &Expr) -> LResult<Vec<Dim>> {
        match strip_parens(e) {
            Expr::Array(a) => a.elems.iter().map(|d| self.const_expr(d)).collect(),
            _ => err(
                e,
                "a shape is written `[d0]` or `[d0, d1]` (constexpr integer expressions)",
            ),
        }
    }

    fn dtype_arg(&self, e: &Expr) -> LResult<DType> {
        match plain_ident(e).and_then(|i| DType::from_name(&i.to_string())) {
            Some(d) => Ok(d),
            None => err(e, "expected a dtype: bf16, f16, f32, i32 or bool"),
        }
    }
}

// ---- tile functions ------------------------------------------------------------------------

impl Lower {
    /// Inlines a call of a `#[tile_fn]`: checks the arguments against its signature (at
    /// the argument's token), lowers its body in a scope that sees only its parameters
    /// (every `Src` on the call's line), and checks what it returns: its values, in order.
    fn inline(
        &mut self,
        h: &Rc<Helper>,
        fname: &Ident,
        args: &[&Expr],
        e: &Expr,
    ) -> LResult<Vec<ValueId>> {
        let name = fname.to_string();
        if self.inlining.contains(&name) {
            let chain: Vec<&str> = self.inlining.iter().map(|s| s.as_str()).collect();
            return err(
                fname,
                format!(
                    "`{name}` calls itself ({} → {name}): tile functions are inlined, so they cannot recurse",
                    chain.join(" → ")
                ),
            );
        }
        let sig = &h.sig;
        if args.len() != sig.params.len() {
            let list: Vec<String> = sig.params.iter().map(|p| p.ident.to_string()).collect();
            return err(
                e,
                format!(
                    "`{name}` takes {} argument{} ({}); got {}",
                    list.len(),
                    if list.len() == 1 { "" } else { "s" },
                    list.join(", "),
                    args.len()
                ),
            );
        }
        // The arguments, in the caller's scope: constexprs as expressions, values built.
        let mut scope: HashMap<String, Bind> = HashMap::new();
        let mut values = vec![];
        for (p, a) in sig.params.iter().zip(args) {
            match p.ty {
                HTy::ConstInt => {
                    let c = self.const_expr(a)?;
                    scope.insert(p.ident.to_string(), Bind::Const(c));
                }
                _ => values.push((p, *a, self.expr(a)?)),
            }
        }
        let line = src_of(e, "").line;
        let saved = std::mem::replace(&mut self.scopes, vec![scope]);
        self.inlining.push(name.clone());
        let out = crate::parse::inlined_at(line, &name, !h.library, || {
            for (p, a, v) in values {
                let v = self.check_arg(&name, &p.ident, &p.ty, a, v)?;
                self.bind(p.ident.to_string(), Bind::Val(v));
            }
            self.scopes.push(HashMap::new());
            self.helper_body(h, e)
        });
        self.inlining.pop();
        self.scopes = saved;
        out
    }

    /// An argument checked against its parameter's type (in the helper's scope, where a
    /// shape variable is bound by its first use). A weak literal adopts the dtype.
    fn check_arg(
        &mut self,
        fname: &str,
        param: &Ident,
        ty: &HTy,
        arg: &Expr,
        v: ValueId,
    ) -> LResult<ValueId> {
        let got = self.b.ty(v).clone();
        if let HTy::Tile(d, dims) = ty {
            if got.rank() != dims.len() {
                let dims: Vec<String> = dims
                    .iter()
                    .map(|e| crate::parse::text_of(e.to_token_stream()))
                    .collect();
                return err(
                    arg,
                    format!(
                        "`{fname}`'s parameter `{param}` is a {}-D tile {d}[{}]; this argument is {got}",
                        dims.len(),
                        dims.join(", ")
                    ),
                );
            }
        }
        let want = self.expect_type(ty, Some(&got))?;
        let mismatch = |want: &Type| {
            err(
                arg,
                format!("`{fname}`'s parameter `{param}` is {want}; this argument is {got}"),
            )
        };
        if got.shape != want.shape {
            return mismatch(&want);
        }
        if got.elem == want.elem {
            return Ok(v);
        }
        match (want.elem.num(), got.elem.num()) {
            (Some(d), Some(_)) if self.b.is_weak(v) => self
                .b
                .cast(v, d, src_of(arg, ""))
                .map_err(|m| blame(m, arg, &[])),
            _ => mismatch(&want),
        }
    }

    /// A parameter's or result's type, its shape evaluated in the helper's scope. With
    /// `got`, a shape variable not bound yet takes `got`'s dimension.
    fn expect_type(&mut self, ty: &HTy, got: Option<&Type>) -> LResult<Type> {
        Ok(match ty {
            HTy::Ptr(d) => Type::scalar(Elem::Ptr(*d)),
            HTy::Scalar(d) => Type::scalar(Elem::Num(*d)),
            HTy::ConstBool => Type::scalar(Elem::Num(DType::Bool)),
            HTy::ConstInt => Type::scalar(Elem::Num(DType::I32)),
            HTy::Tile(d, dims) => {
                let mut shape = vec![];
                for (i, dim) in dims.iter().enumerate() {
                    if let Some(id) = plain_ident(dim) {
                        if self.lookup(&id.to_string()).is_none() {
                            // A shape variable: bound by the first argument it appears in.
                            let Some(g) = got.filter(|g| g.rank() == dims.len()) else {
                                return err(
                                    dim,
                                    format!("`{id}` is not a parameter of this tile function, and no argument before it binds it"),
                                );
                            };
                            self.bind(id.to_string(), Bind::Const(g.shape[i].clone()));
                        }
                    }
                    shape.push(self.const_expr(dim)?);
                }
                Type::num(*d, shape)
            }
        })
    }

    /// The body's statements, then its tail expression: the values the call returns (none
    /// for a helper that returns nothing, the tail's elements for one that returns a tuple).
    fn helper_body(&mut self, h: &Helper, call: &Expr) -> LResult<Vec<ValueId>> {
        let before = self.errors.len();
        let sig = &h.sig;
        let stmts = &h.body.stmts;
        let tail = match (&sig.ret, stmts.last()) {
            (HRet::Unit, _) => None,
            (_, Some(SynStmt::Expr(t, None))) => Some(t),
            (HRet::One(_), _) => {
                return err(
                    &sig.name,
                    format!(
                        "`{}` returns a value: end its body with that expression (no `;`)",
                        sig.name
                    ),
                )
            }
            (HRet::Tuple(tys), _) => {
                return err(
                    &sig.name,
                    format!(
                    "`{}` returns {} values: end its body with a tuple of them, `({})` (no `;`)",
                    sig.name,
                    tys.len(),
                    placeholders(tys.len())
                ),
                )
            }
        };
        // Checked before the body is lowered, as a missing tail is.
        let results = tail.map(|t| tail_results(sig, t)).transpose()?;
        let n = stmts.len() - usize::from(tail.is_some());
        self.block_stmts(&stmts[..n]);
        let Some(results) = results else {
            return if self.errors.len() > before {
                Err(Fail(None))
            } else {
                Ok(vec![])
            };
        };
        let mut values = vec![];
        for (e, _) in &results {
            values.push(self.expr(e)?);
        }
        if self.errors.len() > before {
            return Err(Fail(None));
        }
        let several = matches!(sig.ret, HRet::Tuple(_));
        for (i, (v, (_, ty))) in values.iter().zip(&results).enumerate() {
            let want = self.expect_type(ty, None)?;
            let got = self.b.ty(*v).clone();
            if got != want {
                let which = if several {
                    format!(" as its {} value", ordinal(i + 1))
                } else {
                    String::new()
                };
                return err(
                    call,
                    format!(
                        "`{}` returns {got}{which} here, but its signature says {want}",
                        sig.name
                    ),
                );
            }
        }
        Ok(values)
    }
}

/// The expressions a helper's `tail` returns, each with its declared type: the tail itself,
/// or the elements of the tuple it must be.
fn tail_results<'a>(sig: &'a HelperSig, tail: &'a Expr) -> LResult<Vec<(&'a Expr, &'a HTy)>> {
    let tys = match &sig.ret {
        HRet::Unit => return Ok(vec![]),
        HRet::One(ty) => return Ok(vec![(tail, ty)]),
        HRet::Tuple(tys) => tys,
    };
    let name = &sig.name;
    match strip_parens(tail) {
        Expr::Tuple(t) if t.elems.len() == tys.len() => Ok(t.elems.iter().zip(tys).collect()),
        Expr::Tuple(t) => err(
            tail,
            format!(
                "`{name}` returns {} values, but this tuple has {}",
                tys.len(),
                t.elems.len()
            ),
        ),
        _ => err(
            tail,
            format!(
                "`{name}` returns {} values: its body ends with a tuple of them, `({})`",
                tys.len(),
                placeholders(tys.len())
            ),
        ),
    }
}

/// `a, b, c`: names for `n` values in a message's example.
fn placeholders(n: usize) -> String {
    let names: Vec<String> = (0..n)
        .map(|i| match (b'a'..=b'z').nth(i) {
            Some(c) => char::from(c).to_string(),
            None => format!("v{i}"),
        })
        .collect();
    names.join(", ")
}

/// `1st`, `2nd`, `3rd`, `4th`, ..., `11th`, `21st`.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// A `let`'s initialiser (`let x;` and `let .. else` are errors).
fn local_init(local: &syn::Local) -> LResult<&Expr> {
    let Some(init) = &local.init else {
        return err(
            local,
            "`let` needs an initializer: every kernel value is defined once",
        );
    };
    if let Some((_, e)) = &init.diverge {
        return err(e, "`let ... else` is not supported in kernels");
    }
    Ok(&init.expr)
}

/// A tuple pattern's places: `Some((name, mutable))`, or `None` for `_`; and the error of
/// the first place that is none of `name`, `mut name`, `_` (or a name bound twice). The
/// good places come back either way, so the caller can silence their later uses.
fn tuple_slots(pat: &syn::PatTuple) -> (Vec<Option<(Ident, bool)>>, Option<syn::Error>) {
    let mut slots: Vec<Option<(Ident, bool)>> = vec![];
    let mut bad = None;
    for p in &pat.elems {
        let slot = match p {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                Some((pi.ident.clone(), pi.mutability.is_some()))
            }
            Pat::Wild(_) => None,
            p => {
                let msg = "a tuple pattern holds names, `mut` names or `_`";
                bad = bad.or_else(|| Some(syn::Error::new_spanned(p, msg)));
                continue;
            }
        };
        if let Some((id, _)) = &slot {
            if slots.iter().flatten().any(|(other, _)| other == id) {
                let msg = format!("`{id}` is bound more than once in this pattern");
                bad = bad.or_else(|| Some(syn::Error::new(id.span(), msg)));
                continue;
            }
        }
        slots.push(slot);
    }
    (slots, bad)
}

/// `f(args)` or the method form `x.f(args)`: the name and the arguments, `x` first.
fn callee(e: &Expr) -> LResult<(&Ident, Vec<&Expr>)> {
    match e {
        Expr::Call(c) => {
            let Some(id) = plain_ident(&c.func) else {
                return err(
                    &c.func,
                    format!("expected a primitive name; the primitives are: {PRIMITIVES}"),
                );
            };
            Ok((id, c.args.iter().collect()))
        }
        Expr::MethodCall(m) => {
            if let Some(t) = &m.turbofish {
                return err(t, "type arguments are not supported in kernels");
            }
            let mut args = vec![&*m.receiver];
            args.extend(m.args.iter());
            Ok((&m.method, args))
        }
        _ => unreachable!("callee is only called on calls"),
    }
}

/// Points a builder error at the token the user wrote for the operand it is about
/// (`BuildError::operand`): `roles` pairs the builder call's operands with their tokens;
/// `Operand::Op`, and an operand the user did not write, point at `whole`.
fn blame(e: BuildError, whole: &dyn ToTokens, roles: &[(Operand, &dyn ToTokens)]) -> Fail {
    let node = roles
        .iter()
        .find(|(o, _)| *o == e.operand())
        .map_or(whole, |(_, n)| *n);
    syn::Error::new_spanned(node, e).into()
}

/// A name the language reserves for a primitive (a tile function cannot take it).
pub fn is_primitive(name: &str) -> bool {
    name == "to"
        || name == "where"
        || UnaryOp::from_name(name).is_some()
        || ReduceOp::from_name(name).is_some()
        || PRIMITIVES.split(", ").any(|p| p == name)
}

fn binop(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as S;
    Some(match op {
        S::Add(_) => BinOp::Add,
        S::Sub(_) => BinOp::Sub,
        S::Mul(_) => BinOp::Mul,
        S::Div(_) => BinOp::Div,
        S::Rem(_) => BinOp::Rem,
        S::BitAnd(_) => BinOp::And,
        S::BitOr(_) => BinOp::Or,
        S::BitXor(_) => BinOp::Xor,
        S::Shl(_) => BinOp::Shl,
        S::Shr(_) => BinOp::Shr,
        S::Lt(_) => BinOp::Lt,
        S::Le(_) => BinOp::Le,
        S::Gt(_) => BinOp::Gt,
        S::Ge(_) => BinOp::Ge,
        S::Eq(_) => BinOp::Eq,
        S::Ne(_) => BinOp::Ne,
        _ => return None,
    })
}

/// `+=` and friends, as the binary op they apply.
fn compound_op(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as S;
    Some(match op {
        S::AddAssign(_) => BinOp::Add,
        S::SubAssign(_) => BinOp::Sub,
        S::MulAssign(_) => BinOp::Mul,
        S::DivAssign(_) => BinOp::Div,
        S::RemAssign(_) => BinOp::Rem,
        S::BitAndAssign(_) => BinOp::And,
        S::BitOrAssign(_) => BinOp::Or,
        S::BitXorAssign(_) => BinOp::Xor,
        S::ShlAssign(_) => BinOp::Shl,
        S::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}

fn plain_ident(e: &Expr) -> Option<&Ident> {
    match e {
        Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => p.path.get_ident(),
        Expr::Group(g) => plain_ident(&g.expr),
        _ => None,
    }
}

fn strip_parens(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip_parens(&p.expr),
        Expr::Group(g) => strip_parens(&g.expr),
        e => e,
    }
}

/// An integer literal, possibly negated.
fn int_literal(e: &Expr) -> Option<i64> {
    match strip_parens(e) {
        Expr::Lit(ExprLit {
            lit: SynLit::Int(i),
            ..
        }) if matches!(i.suffix(), "" | "i32" | "usize" | "u32") => i.base10_parse().ok(),
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => int_literal(&u.expr).map(|v| -v),
        _ => None,
    }
}

/// `f32::INFINITY` and its kin: weak float literals (a masked softmax lane's `-inf`).
fn float_const(p: &syn::ExprPath) -> Option<f64> {
    let segs: Vec<String> = p
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    let [ty, name] = segs.as_slice() else {
        return None;
    };
    if ty != "f32" || p.qself.is_some() {
        return None;
    }
    Some(match name.as_str() {
        "INFINITY" => f64::INFINITY,
        "NEG_INFINITY" => f64::NEG_INFINITY,
        "MAX" => f32::MAX as f64,
        "MIN" => f32::MIN as f64,
        "NAN" => f64::NAN,
        _ => return None,
    })
}
