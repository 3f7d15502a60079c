//! `#[megakernel]`: a fn whose body is a sequence of kernel calls (and `for` loops, and
//! `let`s of argument expressions) → Rust that builds a `mega::Program` at run time.
//!
//! The macro cannot see the called kernels' IR (they are other items), so it checks what it
//! can see here (names, expression types, the shape of each statement) and emits, besides
//! the program, a never-called closure that passes every call's arguments to the kernel's
//! typed `launch`: rustc then checks arity, pointer dtypes and scalar kinds at the user's
//! tokens. The runtime checks the same against the IR when it binds the constexprs.
//!
//! ```ignore
//! #[megakernel]
//! pub fn mlp(x: Ptr<bf16>, res: Ptr<bf16>, nw: Ptr<bf16>, w: Ptr<bf16>, h: Ptr<bf16>,
//!            n_layers: i32, eps: f32, #[constexpr] D: usize) {
//!     for layer in 0..n_layers {
//!         add_rmsnorm(grid(1), x, res, &nw[layer * D..(layer + 1) * D], h, D, eps, D);
//!         gemv(grid(cdiv(D, 8)), &w[layer * D * D..(layer + 1) * D * D], h, x, D, D, 8, 256);
//!     }
//! }
//! ```
use crate::parse::{self, KernelSig, PTy};
use dsl_ir::DType;
use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{BinOp, Block, Expr, ItemFn, Lit, Pat, RangeLimits, Stmt, UnOp};

/// Names the generated module's functions use for their own arguments.
const RESERVED: &[&str] = &["dev", "opts", "MEGAKERNEL"];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum STy {
    Int,
    Float,
    Bool,
}

impl STy {
    fn name(self) -> &'static str {
        match self {
            STy::Int => "an integer",
            STy::Float => "an f32",
            STy::Bool => "a bool",
        }
    }
}

/// A typed argument expression: its runtime-constructor tokens.
#[derive(Clone)]
enum V {
    Scalar(STy, TokenStream),
    /// A pointer parameter, an offset (tokens of an `Expr`), and a window end.
    Ptr {
        param: usize,
        dtype: DType,
        offset: Option<TokenStream>,
        end: Option<TokenStream>,
    },
}

struct Cx<'a> {
    sig: &'a KernelSig,
    rt: &'a TokenStream,
    /// Names in scope: loop variables and `let`s, innermost last.
    scope: Vec<(String, V)>,
    next_loop: usize,
    /// Per call: the type-check statement.
    checks: Vec<TokenStream>,
}

fn err<T>(node: &dyn ToTokens, msg: impl std::fmt::Display) -> syn::Result<T> {
    Err(syn::Error::new_spanned(node.to_token_stream(), msg))
}

pub fn expand(attr: TokenStream, item: TokenStream, rt: &TokenStream) -> syn::Result<TokenStream> {
    if !attr.is_empty() {
        return Err(syn::Error::new_spanned(
            attr,
            "#[megakernel] takes no arguments (warps, CTAs and the rest are `MegaOptions`)",
        ));
    }
    let f: ItemFn = syn::parse2(item)?;
    let sig = parse::signature(&f)?;
    for p in &sig.params {
        if RESERVED.contains(&p.ident.to_string().as_str()) {
            return err(
                &p.ident,
                format!(
                    "`{}` is reserved: the generated launcher uses it for its own argument",
                    p.ident
                ),
            );
        }
    }
    let mut cx = Cx {
        sig: &sig,
        rt,
        scope: vec![],
        next_loop: 0,
        checks: vec![],
    };
    let body = cx.block(&f.block)?;
    Ok(emit(&sig, body, &cx.checks, rt))
}

impl Cx<'_> {
    fn block(&mut self, b: &Block) -> syn::Result<Vec<TokenStream>> {
        let depth = self.scope.len();
        let mut items = vec![];
        for s in &b.stmts {
            match s {
                Stmt::Local(l) => {
                    let Pat::Ident(pi) = &l.pat else {
                        return err(&l.pat, "a megakernel `let` binds one plain name");
                    };
                    let Some(init) = &l.init else {
                        return err(l, "a megakernel `let` needs a value");
                    };
                    if init.diverge.is_some() {
                        return err(l, "`let … else` is not supported in a megakernel");
                    }
                    let v = self.expr(&init.expr)?;
                    self.scope.push((pi.ident.to_string(), v));
                }
                Stmt::Expr(Expr::ForLoop(fl), _) => items.push(self.for_loop(fl)?),
                Stmt::Expr(Expr::If(ifx), _) => items.push(self.if_const(ifx)?),
                Stmt::Expr(Expr::Call(c), _) => items.push(self.call(c, &c.attrs)?),
                Stmt::Expr(e, _) => {
                    // `#[barrier] f(...);` parses as an expression with attributes.
                    if let Expr::Call(c) = e {
                        items.push(self.call(c, &c.attrs)?);
                    } else {
                        return err(e, "a megakernel body holds kernel calls `kernel(grid(..), args..)`, `for` loops over ranges, `if`s on constexprs and `let`s");
                    }
                }
                Stmt::Item(i) => return err(i, "items cannot be declared inside a megakernel"),
                Stmt::Macro(m) => {
                    return err(&m.mac, "macros are not supported inside a megakernel")
                }
            }
        }
        self.scope.truncate(depth);
        Ok(items)
    }

    fn for_loop(&mut self, fl: &syn::ExprForLoop) -> syn::Result<TokenStream> {
        let rt = self.rt;
        if let Some(l) = &fl.label {
            return err(l, "loop labels are not supported in a megakernel");
        }
        let var = match &*fl.pat {
            Pat::Ident(pi) if pi.by_ref.is_none() && pi.mutability.is_none() => pi.ident.clone(),
            p => return err(p, "the loop variable must be a plain name"),
        };
        let (start, end) = match &*fl.expr {
            Expr::Range(r) if matches!(r.limits, RangeLimits::HalfOpen(_)) => {
                match (&r.start, &r.end) {
                    (Some(s), Some(e)) => (s, e),
                    _ => return err(r, "a megakernel loop runs over `start..end`"),
                }
            }
            Expr::Paren(p) => {
                return err(
                    p,
                    "a megakernel loop runs over `start..end` (no `.step_by`, no parentheses)",
                )
            }
            e => return err(e, "a megakernel loop runs over `start..end`"),
        };
        let start = self.int(start, "a loop bound")?;
        let end = self.int(end, "a loop bound")?;
        let id = self.next_loop;
        self.next_loop += 1;
        let name = var.to_string();
        self.scope.push((
            name.clone(),
            V::Scalar(STy::Int, quote!(#rt::mega::Expr::var(#id))),
        ));
        let body = self.block(&fl.body)?;
        self.scope.pop();
        Ok(quote! {
            #rt::mega::Item::Loop(#rt::mega::Loop { id: #id, var: #name.into(), start: #start, end: #end, body: vec![#(#body),*] })
        })
    }

    /// `if COND { .. } else { .. }` on a bool of constexprs: `resolve` keeps one branch when
    /// it binds them (both are type-checked here), so a variant of a program is one constexpr.
    fn if_const(&mut self, ifx: &syn::ExprIf) -> syn::Result<TokenStream> {
        let rt = self.rt;
        let cond = match self.expr(&ifx.cond)? {
            V::Scalar(STy::Bool, c) => c,
            V::Scalar(t, _) => {
                return err(
                    &ifx.cond,
                    format!(
                        "an `if` in a megakernel tests a bool constexpr, this is {}",
                        t.name()
                    ),
                )
            }
            V::Ptr { .. } => {
                return err(
                    &ifx.cond,
                    "an `if` in a megakernel tests a bool constexpr, not a pointer",
                )
            }
        };
        let then = self.block(&ifx.then_branch)?;
        let els = match &ifx.else_branch {
            None => vec![],
            Some((_, e)) => match &**e {
                Expr::Block(b) => self.block(&b.block)?,
                Expr::If(i) => vec![self.if_const(i)?],
                e => return err(e, "`else` takes a block or another `if`"),
            },
        };
        Ok(quote! {
            #rt::mega::Item::If(#rt::mega::If { cond: #cond, then: vec![#(#then),*], els: vec![#(#els),*] })
        })
    }

    fn call(&mut self, c: &syn::ExprCall, attrs: &[syn::Attribute]) -> syn::Result<TokenStream> {
        let rt = self.rt;
        let mut barrier = false;
        for a in attrs {
            if a.path().is_ident("barrier") && matches!(a.meta, syn::Meta::Path(_)) {
                barrier = true;
            } else {
                return err(a, "the only attribute on a megakernel call is `#[barrier]`");
            }
        }
        let Expr::Path(fp) = &*c.func else {
            return err(
                &c.func,
                "a megakernel statement calls a `#[kernel]` by name: `kernel(grid(..), args..)`",
            );
        };
        let path = &fp.path;
        let line = path
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line as u32);
        let mut args = c.args.iter();
        let Some(grid) = args.next() else {
            return err(
                c,
                "the first argument is the grid: `kernel(grid(n), args..)`",
            );
        };
        let dims =
            match grid {
                Expr::Call(g) if matches!(&*g.func, Expr::Path(p) if p.path.is_ident("grid")) => {
                    if g.args.is_empty() || g.args.len() > 3 {
                        return err(g, "`grid` takes 1 to 3 dimensions");
                    }
                    let mut d = vec![];
                    for a in &g.args {
                        d.push(self.int(a, "a grid dimension")?);
                    }
                    while d.len() < 3 {
                        d.push(quote!(#rt::mega::Expr::int(1)));
                    }
                    d
                }
                other => return err(
                    other,
                    "the first argument is the grid: `grid(n)`, `grid(x, y)` or `grid(x, y, z)`",
                ),
            };
        let mut built = vec![];
        let mut checks = vec![];
        for a in args {
            let v = self.expr(a)?;
            let span = a.span();
            match v {
                V::Ptr {
                    param,
                    dtype,
                    offset,
                    end,
                } => {
                    let off = offset.unwrap_or_else(|| quote!(#rt::mega::Expr::int(0)));
                    let end = match end {
                        Some(e) => quote!(::core::option::Option::Some(#e)),
                        None => quote!(::core::option::Option::None),
                    };
                    built.push(
                        quote!(#rt::mega::ArgExpr::Ptr { param: #param, offset: #off, end: #end }),
                    );
                    let t = crate::named::elem_type(dtype, rt);
                    checks.push(respan(quote!(#rt::mega::typecheck::ptr::<#t>()), span));
                }
                V::Scalar(t, e) => {
                    built.push(quote!(#rt::mega::ArgExpr::Value(#e)));
                    checks.push(respan(
                        match t {
                            STy::Int => quote!(#rt::mega::typecheck::int()),
                            STy::Float => quote!(0f32),
                            STy::Bool => quote!(false),
                        },
                        span,
                    ));
                }
            }
        }
        // The kernel's module, spanned at the user's path so a name that is not a
        // `#[kernel]` is an error there.
        let pspan = path.span();
        let kernel = quote_spanned!(pspan=> #path::KERNEL);
        let launch = quote_spanned!(pspan=> #path::launch);
        let ctx = respan(quote!(__dev, __launch), pspan);
        self.checks
            .push(quote! { let _ = #launch(#ctx, #(#checks),*); });
        Ok(quote! {
            #rt::mega::Item::Call(#rt::mega::Call {
                kernel: &#kernel,
                line: #line,
                grid: [#(#dims),*],
                args: vec![#(#built),*],
                hints: #rt::mega::Hints { barrier: #barrier },
            })
        })
    }

    fn int(&mut self, e: &Expr, what: &str) -> syn::Result<TokenStream> {
        match self.expr(e)? {
            V::Scalar(STy::Int, t) => Ok(t),
            V::Scalar(t, _) => err(
                e,
                format!("{what} must be an integer, this is {}", t.name()),
            ),
            V::Ptr { .. } => err(e, format!("{what} must be an integer, this is a pointer")),
        }
    }

    fn lookup(&self, name: &str) -> Option<V> {
        if let Some((_, v)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return Some(v.clone());
        }
        let rt = self.rt;
        let (i, p) = self
            .sig
            .params
            .iter()
            .enumerate()
            .find(|(_, p)| p.ident == name)?;
        let e = quote!(#rt::mega::Expr::param(#i));
        Some(match &p.ty {
            PTy::Ptr(d) => V::Ptr {
                param: i,
                dtype: *d,
                offset: None,
                end: None,
            },
            PTy::Scalar(d) if d.is_float() => V::Scalar(STy::Float, e),
            PTy::Scalar(_) | PTy::ConstInt(_) => V::Scalar(STy::Int, e),
            PTy::ConstBool => V::Scalar(STy::Bool, e),
        })
    }

    fn expr(&mut self, e: &Expr) -> syn::Result<V> {
        let rt = self.rt.clone();
        let scalar = |this: &mut Self, e: &Expr| -> syn::Result<(STy, TokenStream)> {
            match this.expr(e)? {
                V::Scalar(t, x) => Ok((t, x)),
                V::Ptr { .. } => err(e, "a pointer cannot be used as a number here"),
            }
        };
        match e {
            Expr::Lit(l) => match &l.lit {
                Lit::Int(i) => {
                    let v: i64 = i.base10_parse()?;
                    Ok(V::Scalar(STy::Int, quote!(#rt::mega::Expr::int(#v))))
                }
                Lit::Float(f) => {
                    let v: f64 = f.base10_parse()?;
                    Ok(V::Scalar(STy::Float, quote!(#rt::mega::Expr::float(#v))))
                }
                Lit::Bool(b) => {
                    let v = b.value;
                    Ok(V::Scalar(STy::Bool, quote!(#rt::mega::Expr::Bool(#v))))
                }
                other => err(other, "only integer, float and bool literals are megakernel arguments"),
            },
            Expr::Path(p) => {
                let Some(id) = p.path.get_ident() else {
                    return err(p, "a megakernel argument names a parameter, a loop variable or a `let`");
                };
                self.lookup(&id.to_string()).ok_or_else(|| {
                    syn::Error::new(id.span(), format!("unknown name `{id}`: a megakernel argument may use its parameters, loop variables and `let`s"))
                })
            }
            Expr::Paren(p) => self.expr(&p.expr),
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => {
                let (t, x) = scalar(self, &u.expr)?;
                if t == STy::Bool {
                    return err(u, "cannot negate a bool");
                }
                Ok(V::Scalar(t, quote!(#rt::mega::Expr::neg(#x))))
            }
            Expr::Cast(c) => {
                let (_, x) = scalar(self, &c.expr)?;
                match parse::dtype_of_type(&c.ty).map(|d| d.name()).or_else(|| {
                    if let syn::Type::Path(tp) = &*c.ty {
                        tp.path.get_ident().map(|i| i.to_string()).filter(|s| ["usize", "u32", "i64", "isize"].contains(&s.as_str())).map(|_| "i32")
                    } else {
                        None
                    }
                }) {
                    Some("f32") => Ok(V::Scalar(STy::Float, quote!(#rt::mega::Expr::to_f32(#x)))),
                    Some("i32") => Ok(V::Scalar(STy::Int, quote!(#rt::mega::Expr::to_int(#x)))),
                    _ => err(&c.ty, "casts in a megakernel are `as f32`, `as i32` or `as usize`"),
                }
            }
            Expr::Call(c) => {
                let name = match &*c.func {
                    Expr::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                    _ => None,
                };
                let op = match name.as_deref() {
                    Some("cdiv") => quote!(Cdiv),
                    Some("min") => quote!(Min),
                    Some("max") => quote!(Max),
                    _ => return err(c, "in an argument, the functions are `cdiv(a, b)`, `min(a, b)`, `max(a, b)`; kernel calls are statements"),
                };
                if c.args.len() != 2 {
                    return err(c, "takes two arguments");
                }
                let (ta, a) = scalar(self, &c.args[0])?;
                let (tb, b) = scalar(self, &c.args[1])?;
                if ta != tb || ta == STy::Bool || (ta == STy::Float && name.as_deref() == Some("cdiv")) {
                    return err(c, format!("`{}` needs two integers{}", name.clone().unwrap_or_default(), if name.as_deref() == Some("cdiv") { "" } else { " or two f32s" }));
                }
                Ok(V::Scalar(ta, quote!(#rt::mega::Expr::bin(#rt::mega::Op::#op, #a, #b))))
            }
            Expr::Binary(b) => {
                let op = match b.op {
                    BinOp::Add(_) => quote!(Add),
                    BinOp::Sub(_) => quote!(Sub),
                    BinOp::Mul(_) => quote!(Mul),
                    BinOp::Div(_) => quote!(Div),
                    BinOp::Rem(_) => quote!(Rem),
                    _ => return err(&b.op, "megakernel arguments use `+ - * / %` (and `cdiv`, `min`, `max`)"),
                };
                let lhs = self.expr(&b.left)?;
                if let V::Ptr { param, dtype, offset, end } = lhs {
                    // Pointer arithmetic: `p + i`, `p - i`.
                    let is_add = matches!(b.op, BinOp::Add(_));
                    if !(is_add || matches!(b.op, BinOp::Sub(_))) {
                        return err(&b.op, "a pointer takes `+` or `-` an integer offset");
                    }
                    if end.is_some() {
                        return err(b, "offset the pointer inside the slice instead: `&w[a + i..b]`");
                    }
                    let (t, x) = scalar(self, &b.right)?;
                    if t != STy::Int {
                        return err(&b.right, format!("a pointer offset must be an integer, this is {}", t.name()));
                    }
                    let x = if is_add { x } else { quote!(#rt::mega::Expr::neg(#x)) };
                    let offset = Some(match offset {
                        Some(o) => quote!(#rt::mega::Expr::bin(#rt::mega::Op::Add, #o, #x)),
                        None => x,
                    });
                    return Ok(V::Ptr { param, dtype, offset, end: None });
                }
                let V::Scalar(ta, a) = lhs else { unreachable!() };
                let (tb, y) = scalar(self, &b.right)?;
                if ta != tb || ta == STy::Bool {
                    return err(b, format!("`{}` mixes {} and {}: convert one with `as f32` / `as i32`", b.op.to_token_stream(), ta.name(), tb.name()));
                }
                if ta == STy::Float && matches!(b.op, BinOp::Rem(_)) {
                    return err(&b.op, "`%` is for integers");
                }
                Ok(V::Scalar(ta, quote!(#rt::mega::Expr::bin(#rt::mega::Op::#op, #a, #y))))
            }
            Expr::Reference(r) => {
                // `&w[a..b]`: a window of a pointer parameter.
                let Expr::Index(ix) = &*r.expr else {
                    return err(r, "a window of a pointer is written `&w[start..end]`");
                };
                let V::Ptr { param, dtype, offset, end } = self.expr(&ix.expr)? else {
                    return err(&ix.expr, "only pointer parameters can be sliced");
                };
                if offset.is_some() || end.is_some() {
                    return err(&ix.expr, "slice the parameter itself: `&w[a..b]`");
                }
                let Expr::Range(rg) = &*ix.index else {
                    return err(&ix.index, "a window is a range: `&w[start..end]` or `&w[start..]`");
                };
                if !matches!(rg.limits, RangeLimits::HalfOpen(_)) {
                    return err(rg, "a window is a half-open range `start..end`");
                }
                let start = match &rg.start {
                    Some(s) => self.int(s, "a window's start")?,
                    None => quote!(#rt::mega::Expr::int(0)),
                };
                let end = match &rg.end {
                    Some(x) => Some(self.int(x, "a window's end")?),
                    None => None,
                };
                Ok(V::Ptr { param, dtype, offset: Some(start), end })
            }
            Expr::MethodCall(mc) if mc.method == "layer" => {
                // `w.layer(i, n)`: layer i of a stacked weight, `&w[i * n..(i + 1) * n]`.
                let V::Ptr { param, dtype, offset, end } = self.expr(&mc.receiver)? else {
                    return err(&mc.receiver, "only pointer parameters have layers: `w.layer(i, n)`");
                };
                if offset.is_some() || end.is_some() {
                    return err(&mc.receiver, "take the layer of the parameter itself: `w.layer(i, n)`");
                }
                if mc.args.len() != 2 {
                    return err(&mc.args, "`w.layer(i, n)` takes the layer index and the elements per layer");
                }
                let i = self.int(&mc.args[0], "a layer index")?;
                let ex = quote!(#rt::mega::Expr);
                let op = quote!(#rt::mega::Op);
                // Exactly `&w[i * a * b..(i + 1) * a * b]` for `n` written `a * b`: the same
                // expression (and generated C) as the window written out.
                let (mut start, mut end) = (i.clone(), quote!(#ex::bin(#op::Add, #i, #ex::int(1))));
                for f in mul_factors(&mc.args[1]) {
                    let f = self.int(f, "the elements per layer")?;
                    start = quote!(#ex::bin(#op::Mul, #start, #f));
                    end = quote!(#ex::bin(#op::Mul, #end, #f));
                }
                Ok(V::Ptr { param, dtype, offset: Some(start), end: Some(end) })
            }
            other => err(other, "not a megakernel argument: use parameters, loop variables, literals, `+ - * / %`, `cdiv`, `as`, `p + offset`, `&p[a..b]` and `p.layer(i, n)`"),
        }
    }
}

/// `a * b * c` as its factors `[a, b, c]` (left to right, as Rust groups them); anything
/// else, parenthesised products included, as one factor.
fn mul_factors(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Binary(b) if matches!(b.op, BinOp::Mul(_)) => {
            let mut f = mul_factors(&b.left);
            f.push(&b.right);
            f
        }
        _ => vec![e],
    }
}

/// The same tokens, every one at `span`: rustc then reports a type error in a check at the
/// user's argument, not at the attribute.
fn respan(ts: TokenStream, span: Span) -> TokenStream {
    ts.into_iter()
        .map(|t| match t {
            proc_macro2::TokenTree::Group(g) => {
                let mut n = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                n.set_span(span);
                proc_macro2::TokenTree::Group(n)
            }
            mut t => {
                t.set_span(span);
                t
            }
        })
        .collect()
}

fn emit(
    sig: &KernelSig,
    body: Vec<TokenStream>,
    checks: &[TokenStream],
    rt: &TokenStream,
) -> TokenStream {
    let KernelSig {
        vis,
        name,
        docs,
        params,
    } = sig;
    let name_str = name.to_string();
    let builder = format_ident!("__tessera_megakernel_{}", name);
    let mut mparams = vec![];
    let (mut decls, mut args, mut const_decls, mut consts, mut signature) =
        (vec![], vec![], vec![], vec![], vec![]);

    let prim = |s: &str| {
        let i = format_ident!("{}", s);
        quote!(::core::primitive::#i)
    };
    let dtype = |d: &DType| {
        let v = format_ident!("{}", format!("{d:?}"));
        quote!(#rt::ir::DType::#v)
    };
    for p in params {
        let id = &p.ident;
        let id_str = id.to_string();
        let kind = match &p.ty {
            PTy::Ptr(d) => {
                let t = crate::named::elem_type(*d, rt);
                decls.push(quote!(#id: &impl #rt::AsPtr<#t>));
                args.push(quote!(#rt::Arg::Ptr(#rt::AsPtr::<#t>::as_ptr_arg(#id))));
                signature.push(format!("{id_str}: Ptr<{d}>"));
                let dt = dtype(d);
                quote!(#rt::ir::ParamKind::Ptr(#dt))
            }
            PTy::Scalar(d) => {
                let t = prim(d.name());
                decls.push(quote!(#id: #t));
                args.push(match d {
                    DType::F32 => quote!(#rt::Arg::F32(#id)),
                    _ => quote!(#rt::Arg::I32(#id)),
                });
                signature.push(format!("{id_str}: {d}"));
                let dt = dtype(d);
                quote!(#rt::ir::ParamKind::Scalar(#dt))
            }
            PTy::ConstInt(t) => {
                let t = prim(&t.to_string());
                const_decls.push(quote!(#id: #t));
                consts.push(quote!((#id_str, #rt::ConstVal::Int(#id as ::core::primitive::i64))));
                signature.push(format!("#[constexpr] {id_str}"));
                quote!(#rt::ir::ParamKind::Constexpr(#rt::ir::ConstKind::Int))
            }
            PTy::ConstBool => {
                const_decls.push(quote!(#id: ::core::primitive::bool));
                consts.push(quote!((#id_str, #rt::ConstVal::Bool(#id))));
                signature.push(format!("#[constexpr] {id_str}: bool"));
                quote!(#rt::ir::ParamKind::Constexpr(#rt::ir::ConstKind::Bool))
            }
        };
        mparams.push(quote!(#rt::mega::MParam { name: #id_str.into(), kind: #kind }));
    }
    let sig_doc = format!(
        " Megakernel `{name_str}({})`, generated by `#[megakernel]`: one persistent launch.",
        signature.join(", ")
    );
    let const_names: Vec<_> = params
        .iter()
        .filter(|p| matches!(p.ty, PTy::ConstInt(_) | PTy::ConstBool))
        .map(|p| &p.ident)
        .collect();
    let _ = Span::call_site();
    let named = crate::named::structs(params, rt);
    quote! {
        #[doc(hidden)]
        #[allow(non_snake_case, unused, clippy::all)]
        fn #builder() -> #rt::mega::Program {
            // Never runs: rustc checks every call against the kernel's typed launcher.
            if false {
                let _ = |__dev: &#rt::Device, __launch: &#rt::Launch| {
                    #(#checks)*
                };
            }
            #rt::mega::Program::new(#name_str, ::core::file!(), vec![#(#mparams),*], vec![#(#body),*])
        }

        #(#docs)*
        #[doc = #sig_doc]
        #[allow(non_snake_case)]
        #vis mod #name {
            /// The megakernel: its program, for the runtime to schedule, explain and launch.
            pub static MEGAKERNEL: #rt::mega::MegaDef = #rt::mega::MegaDef::new(super::#builder);

            /// Runs the whole program as one persistent launch (or through the interpreter).
            #[allow(clippy::too_many_arguments)]
            pub fn launch(
                dev: &#rt::Device,
                opts: &#rt::mega::MegaOptions,
                #(#decls,)*
                #(#const_decls,)*
            ) -> ::std::result::Result<(), #rt::Error> {
                MEGAKERNEL.launch(dev, opts, &[#(#args),*], &[#(#consts),*])
            }

            /// The schedule for these constexprs: stages, syncs and why, prefetches.
            #[allow(clippy::too_many_arguments)]
            pub fn explain(opts: &#rt::mega::MegaOptions, #(#const_decls),*) -> ::std::result::Result<::std::string::String, #rt::Error> {
                MEGAKERNEL.explain(&[#(#consts),*], opts)
            }

            /// The constexpr bindings, as `MEGAKERNEL`'s methods take them.
            #[allow(clippy::too_many_arguments)]
            pub fn constexprs(#(#const_decls),*) -> ::std::vec::Vec<#rt::Binding> {
                let _ = (#(&#const_names,)*);
                vec![#(#consts),*]
            }

            #named

            /// [`launch`] with named arguments and constexprs.
            pub fn launch_with(
                dev: &#rt::Device,
                opts: &#rt::mega::MegaOptions,
                args: &Args<'_>,
                consts: &Consts,
            ) -> ::std::result::Result<(), #rt::Error> {
                MEGAKERNEL.launch(dev, opts, &args.list(), &consts.bindings())
            }
        }
    }
}
