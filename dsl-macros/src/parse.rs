//! The kernel's signature (syn → checked parameter list) and source-location helpers.
//!
//! The body is not turned into an AST of our own: `lower.rs` walks syn's directly, which
//! keeps every node's span at hand for errors.
use dsl_ir::{ConstKind, DType, ParamKind, Src};
use proc_macro2::{Delimiter, LineColumn, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::{Attribute, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, Type, Visibility};

/// What the generated launcher needs to know about the user's fn.
pub struct KernelSig {
    pub vis: Visibility,
    pub name: Ident,
    pub docs: Vec<Attribute>,
    pub params: Vec<KParam>,
}

pub struct KParam {
    pub ident: Ident,
    pub ty: PTy,
}

/// A parameter's Rust type, as the launcher spells it.
#[derive(Clone)]
pub enum PTy {
    Ptr(DType),
    Scalar(DType),
    /// `#[constexpr] N: usize | i32 | u32`: the launcher takes that Rust type.
    ConstInt(Ident),
    ConstBool,
}

impl PTy {
    pub fn kind(&self) -> ParamKind {
        match self {
            PTy::Ptr(d) => ParamKind::Ptr(*d),
            PTy::Scalar(d) => ParamKind::Scalar(*d),
            PTy::ConstInt(_) => ParamKind::Constexpr(ConstKind::Int),
            PTy::ConstBool => ParamKind::Constexpr(ConstKind::Bool),
        }
    }
}

/// Names the generated launcher uses for its own arguments.
const RESERVED: &[&str] = &["dev", "launch", "tune", "KERNEL", "IR_JSON"];

const PARAM_HELP: &str = "kernel parameters are `Ptr<T>` (T: bf16, f16, f32, i32), `i32`, `f32`, \
     or `#[constexpr]` `usize` / `i32` / `u32` / `bool`";

pub fn signature(f: &ItemFn) -> syn::Result<KernelSig> {
    let sig = &f.sig;
    if let Some(t) = &sig.asyncness {
        return Err(syn::Error::new(t.span, "kernels cannot be async"));
    }
    if let Some(t) = &sig.unsafety {
        return Err(syn::Error::new(t.span, "kernels are not `unsafe` fns"));
    }
    if let Some(t) = &sig.constness {
        return Err(syn::Error::new(t.span, "kernels are not `const` fns"));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "kernels are not generic: use `#[constexpr]` parameters",
        ));
    }
    if let syn::ReturnType::Type(_, t) = &sig.output {
        return Err(syn::Error::new_spanned(
            t,
            "kernels return nothing: write results with `store`",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(syn::Error::new_spanned(v, "kernels are not variadic"));
    }
    let mut params = vec![];
    for arg in &sig.inputs {
        let pt = match arg {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new_spanned(
                    r,
                    "kernels are free functions, not methods",
                ))
            }
            FnArg::Typed(pt) => pt,
        };
        let ident = match &*pt.pat {
            Pat::Ident(pi)
                if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() =>
            {
                pi.ident.clone()
            }
            p => {
                return Err(syn::Error::new_spanned(
                    p,
                    "a kernel parameter is a plain name",
                ))
            }
        };
        if RESERVED.contains(&ident.to_string().as_str()) {
            return Err(syn::Error::new(
                ident.span(),
                format!(
                    "`{ident}` is reserved: the generated launcher uses it for its own argument"
                ),
            ));
        }
        let mut constexpr = false;
        for a in &pt.attrs {
            if a.path().is_ident("constexpr") && matches!(a.meta, syn::Meta::Path(_)) {
                constexpr = true;
            } else {
                return Err(syn::Error::new_spanned(
                    a,
                    "the only parameter attribute is `#[constexpr]`",
                ));
            }
        }
        let ty = param_type(&pt.ty, constexpr)?;
        params.push(KParam { ident, ty });
    }
    let docs = f
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .cloned()
        .collect();
    Ok(KernelSig {
        vis: f.vis.clone(),
        name: sig.ident.clone(),
        docs,
        params,
    })
}

fn param_type(ty: &Type, constexpr: bool) -> syn::Result<PTy> {
    let err = || syn::Error::new_spanned(ty, PARAM_HELP);
    let Type::Path(tp) = ty else {
        return Err(err());
    };
    if tp.qself.is_some() || tp.path.segments.len() != 1 {
        return Err(err());
    }
    let seg = &tp.path.segments[0];
    let name = seg.ident.to_string();
    if name == "Ptr" {
        if constexpr {
            return Err(syn::Error::new_spanned(
                ty,
                "a pointer cannot be `#[constexpr]`",
            ));
        }
        let PathArguments::AngleBracketed(args) = &seg.arguments else {
            return Err(err());
        };
        let inner = match args.args.iter().collect::<Vec<_>>()[..] {
            [GenericArgument::Type(t)] => t,
            _ => return Err(err()),
        };
        return match dtype_of_type(inner) {
            Some(d) if d != DType::Bool => Ok(PTy::Ptr(d)),
            _ => Err(syn::Error::new_spanned(
                inner,
                "pointers are to bf16, f16, f32 or i32",
            )),
        };
    }
    if !seg.arguments.is_none() {
        return Err(err());
    }
    match (constexpr, name.as_str()) {
        (false, "i32") => Ok(PTy::Scalar(DType::I32)),
        (false, "f32") => Ok(PTy::Scalar(DType::F32)),
        (true, "usize" | "i32" | "u32") => Ok(PTy::ConstInt(seg.ident.clone())),
        (true, "bool") => Ok(PTy::ConstBool),
        (false, "usize" | "u32" | "bool") => Err(syn::Error::new_spanned(
            ty,
            format!(
                "a `{name}` parameter must be `#[constexpr]` (run-time scalars are i32 or f32)"
            ),
        )),
        _ => Err(err()),
    }
}

/// `bf16`, `f32`, ... written as a type.
pub fn dtype_of_type(ty: &Type) -> Option<DType> {
    match ty {
        Type::Path(tp) if tp.qself.is_none() => tp
            .path
            .get_ident()
            .and_then(|i| DType::from_name(&i.to_string())),
        Type::Group(g) => dtype_of_type(&g.elem),
        Type::Paren(p) => dtype_of_type(&p.elem),
        _ => None,
    }
}

/// The `Src` of a syntax node: its start line and its text as written.
pub fn src_of(node: &dyn ToTokens, name: &str) -> Src {
    let tokens = node.to_token_stream();
    let line = tokens
        .clone()
        .into_iter()
        .next()
        .map_or(0, |t| first_span(&t).start().line as u32);
    let (line, via) = located(line, one_location(tokens.clone()));
    Src {
        line,
        text: text_of(tokens),
        name: name.to_string(),
        via,
    }
}

/// A `Src` for a statement header (`for i in a..b`, `if c`), whose text we assemble.
pub fn src_text(span: Span, text: String) -> Src {
    let (line, via) = located(span.start().line as u32, false);
    Src {
        line,
        text,
        via,
        ..Src::default()
    }
}

/// A statement at `own` (its line where it is written) as a `Src` locates it: inside an
/// inlined `#[tile_fn]`, on the outermost call's line, with the helper and `own` as `via`
/// (`own` left out where `unknown`: tokens parsed from a string, all at one place).
fn located(own: u32, unknown: bool) -> (u32, String) {
    match (
        INLINED_AT.with(|l| l.get()),
        INLINING.with(|h| h.borrow().clone()),
    ) {
        (Some(call), Some((helper, lines))) if lines && !unknown && own != 0 => {
            (call, format!("{helper}:{own}"))
        }
        (Some(call), Some((helper, _))) => (call, helper),
        _ => (own, String::new()),
    }
}

thread_local! {
    /// While a `#[tile_fn]` body is inlined: the line of the outermost call, which every
    /// `Src` built meanwhile takes (the generated C and the interpreter's errors name the
    /// kernel's file, so they quote the line of the call in it) ...
    static INLINED_AT: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    /// ... and the innermost helper being inlined, whose own lines go in `Src::via`.
    /// (Its name, and whether its tokens carry their own lines.)
    static INLINING: std::cell::RefCell<Option<(String, bool)>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` (the inlining of helper `name`, whose tokens carry their own lines unless it
/// comes from the tile library) with every `Src` on `line` (the outermost call's, if one
/// is already set) and `via` the helper.
pub fn inlined_at<T>(line: u32, name: &str, lines: bool, f: impl FnOnce() -> T) -> T {
    let outer = INLINED_AT.with(|l| l.get());
    let outer_helper = INLINING.with(|h| h.replace(Some((name.to_string(), lines))));
    INLINED_AT.with(|l| l.set(Some(outer.unwrap_or(line))));
    let out = f();
    INLINED_AT.with(|l| l.set(outer));
    INLINING.with(|h| h.replace(outer_helper));
    out
}

fn first_span(t: &TokenTree) -> Span {
    match t {
        TokenTree::Group(g) => g.span_open(),
        t => t.span(),
    }
}

/// The source text of a token stream, whitespace normalised: tokens are re-joined with one
/// space wherever the source had a gap. (`Span::join` is nightly-only, so the span of a
/// whole expression is not available; per-token locations are, on stable.)
pub fn text_of(tokens: TokenStream) -> String {
    let mut leaves: Vec<(String, LineColumn, LineColumn)> = vec![];
    flatten(tokens.clone(), &mut leaves);
    // Tokens parsed from a string (the tile standard library) all share one location.
    if one_location(tokens.clone()) {
        return layout(tokens);
    }
    let key = |l: LineColumn| (l.line, l.column);
    let mut out = String::new();
    let mut prev: Option<(LineColumn, LineColumn)> = None;
    for (text, start, end) in &leaves {
        if let Some((p_start, p_end)) = prev {
            if key(*start) < key(p_start) || start.line == 0 {
                // Locations are not usable (tokens from another macro): plain printing.
                return tokens.to_string();
            }
            // Overlap is normal: the puncts of `..` or `<=` may each carry the whole token's span.
            if key(*start) > key(p_end) {
                out.push(' ');
            }
        }
        out.push_str(text);
        prev = Some((*start, *end));
    }
    out
}

/// Whether every token (delimiters aside) has one and the same location: more than one.
fn one_location(tokens: TokenStream) -> bool {
    fn spans(tokens: TokenStream, out: &mut Vec<(LineColumn, LineColumn)>) {
        for t in tokens {
            match t {
                TokenTree::Group(g) => spans(g.stream(), out),
                t => out.push((t.span().start(), t.span().end())),
            }
        }
    }
    let mut v = vec![];
    spans(tokens, &mut v);
    v.len() > 1 && v.iter().all(|s| *s == v[0])
}

/// Source text for tokens without locations, spaced as rustfmt would for the DSL's
/// expressions: `cdiv(len, SPLITS)`, `x.to(f32)`, `sum(x, 0) / n as f32 + eps`.
fn layout(tokens: TokenStream) -> String {
    fn go(tokens: TokenStream, out: &mut String, glue: &mut bool) {
        for t in tokens {
            let tight = match &t {
                TokenTree::Punct(p) => matches!(p.as_char(), ',' | '.' | ';'),
                // A call's or an index's opening delimiter follows its name.
                TokenTree::Group(g) => {
                    matches!(g.delimiter(), Delimiter::Parenthesis | Delimiter::Bracket)
                        && out.ends_with(|c: char| c.is_alphanumeric() || c == '_')
                }
                _ => false,
            };
            if !out.is_empty() && !*glue && !tight && !out.ends_with(['(', '[', '.']) {
                out.push(' ');
            }
            *glue = false;
            match &t {
                TokenTree::Group(g) => {
                    let (open, close) = match g.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::Brace => ("{ ", " }"),
                        Delimiter::None => ("", ""),
                    };
                    out.push_str(open);
                    go(g.stream(), out, &mut true);
                    out.push_str(close);
                }
                TokenTree::Punct(p) => {
                    out.push(p.as_char());
                    // `..`, `<=`: a joint punct glues to the next.
                    *glue = p.spacing() == proc_macro2::Spacing::Joint || p.as_char() == '.';
                }
                t => out.push_str(&t.to_string()),
            }
        }
    }
    let mut out = String::new();
    go(tokens, &mut out, &mut false);
    out
}

fn flatten(tokens: TokenStream, out: &mut Vec<(String, LineColumn, LineColumn)>) {
    for t in tokens {
        match t {
            TokenTree::Group(g) => {
                let (o, c) = match g.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::None => {
                        flatten(g.stream(), out);
                        continue;
                    }
                };
                // `span_open` / `span_close` can report the whole group, so the delimiters'
                // own locations are derived from the group's ends.
                let (start, end) = (g.span().start(), g.span().end());
                let after_open = LineColumn {
                    line: start.line,
                    column: start.column + 1,
                };
                let before_close = LineColumn {
                    line: end.line,
                    column: end.column.saturating_sub(1),
                };
                out.push((o.to_string(), start, after_open));
                flatten(g.stream(), out);
                out.push((c.to_string(), before_close, end));
            }
            t => out.push((t.to_string(), t.span().start(), t.span().end())),
        }
    }
}

/// A `#[tile_fn]`: its checked signature and its body, inlined at each call.
pub struct Helper {
    pub sig: HelperSig,
    pub body: syn::Block,
    /// From the tile library (parsed from a string: its tokens carry no lines of their own).
    pub library: bool,
}

/// A `#[tile_fn]` helper's signature: what a call must pass, and what it returns.
pub struct HelperSig {
    pub name: Ident,
    pub params: Vec<HParam>,
    pub ret: HRet,
}

/// What a helper returns, which decides where a call may stand.
pub enum HRet {
    /// Nothing (it stores): a call is a statement.
    Unit,
    /// One value: a call is an expression.
    One(HTy),
    /// `-> (A, B, ..)`, two or more values: a call only initialises `let (a, b, ..) = f(..);`.
    Tuple(Vec<HTy>),
}

pub struct HParam {
    pub ident: Ident,
    pub ty: HTy,
}

/// A helper parameter's (or result's) type. Tile shapes name constexpr expressions over the
/// helper's `#[constexpr]` parameters, literals, and *shape variables*: a name that is
/// neither is bound by the first argument whose shape it appears in (`Tile<f32, N>`).
#[derive(Clone)]
pub enum HTy {
    Ptr(DType),
    Scalar(DType),
    Tile(DType, Vec<syn::Expr>),
    ConstInt,
    ConstBool,
}

const HELPER_PARAM_HELP: &str = "tile_fn parameters are `Ptr<T>`, `i32`, `f32`, `bool`, \
     `Tile<dtype, N>` / `Tile<dtype, M, N>`, or `#[constexpr]` `usize` / `i32` / `u32` / `bool`";

pub fn helper_signature(f: &ItemFn) -> syn::Result<HelperSig> {
    let sig = &f.sig;
    if let Some(t) = &sig.asyncness {
        return Err(syn::Error::new(t.span, "tile functions cannot be async"));
    }
    if let Some(t) = &sig.unsafety {
        return Err(syn::Error::new(
            t.span,
            "tile functions are not `unsafe` fns",
        ));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "tile functions are not generic: shapes in `Tile<dtype, N>` are inferred from the arguments",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(syn::Error::new_spanned(
            v,
            "tile functions are not variadic",
        ));
    }
    let mut params: Vec<HParam> = vec![];
    for arg in &sig.inputs {
        let FnArg::Typed(pt) = arg else {
            return Err(syn::Error::new_spanned(
                arg,
                "tile functions are free functions, not methods",
            ));
        };
        let ident = match &*pt.pat {
            Pat::Ident(pi)
                if pi.by_ref.is_none() && pi.mutability.is_none() && pi.subpat.is_none() =>
            {
                pi.ident.clone()
            }
            p => {
                return Err(syn::Error::new_spanned(
                    p,
                    "a tile function parameter is a plain name",
                ))
            }
        };
        if params.iter().any(|p| p.ident == ident) {
            return Err(syn::Error::new(
                ident.span(),
                format!("parameter `{ident}` is declared twice"),
            ));
        }
        let mut constexpr = false;
        for a in &pt.attrs {
            if a.path().is_ident("constexpr") && matches!(a.meta, syn::Meta::Path(_)) {
                constexpr = true;
            } else {
                return Err(syn::Error::new_spanned(
                    a,
                    "the only parameter attribute is `#[constexpr]`",
                ));
            }
        }
        let ty = if constexpr {
            match param_type(&pt.ty, true)? {
                PTy::ConstBool => HTy::ConstBool,
                _ => HTy::ConstInt,
            }
        } else {
            helper_type(&pt.ty)?
        };
        params.push(HParam { ident, ty });
    }
    let ret = match &sig.output {
        syn::ReturnType::Default => HRet::Unit,
        syn::ReturnType::Type(_, t) => helper_result(t)?,
    };
    Ok(HelperSig {
        name: sig.ident.clone(),
        params,
        ret,
    })
}

/// A helper's result type: one type, or a tuple of two or more (`()` is left to
/// `helper_type`, which rejects it as before).
fn helper_result(ty: &Type) -> syn::Result<HRet> {
    match ty {
        Type::Tuple(t) if t.elems.len() == 1 => Err(syn::Error::new_spanned(
            ty,
            "a tile function returns one value `T` or a tuple of two or more `(A, B)`, not a 1-tuple",
        )),
        Type::Tuple(t) if t.elems.len() >= 2 => Ok(HRet::Tuple(
            t.elems.iter().map(helper_type).collect::<syn::Result<_>>()?,
        )),
        t => helper_type(t).map(HRet::One),
    }
}

fn helper_type(ty: &Type) -> syn::Result<HTy> {
    let err = || syn::Error::new_spanned(ty, HELPER_PARAM_HELP);
    if let Some(d) = dtype_of_type(ty) {
        return match d {
            DType::I32 | DType::F32 | DType::Bool => Ok(HTy::Scalar(d)),
            _ => Err(syn::Error::new_spanned(
                ty,
                "scalars are i32, f32 or bool (bf16 / f16 values are tiles: `Tile<bf16, N>`)",
            )),
        };
    }
    let Type::Path(tp) = ty else {
        return Err(err());
    };
    if tp.qself.is_some() || tp.path.segments.len() != 1 {
        return Err(err());
    }
    let seg = &tp.path.segments[0];
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return Err(err());
    };
    let args: Vec<&GenericArgument> = args.args.iter().collect();
    match (seg.ident.to_string().as_str(), &args[..]) {
        ("Ptr", _) => match param_type(ty, false)? {
            PTy::Ptr(d) => Ok(HTy::Ptr(d)),
            _ => Err(err()),
        },
        ("Tile", [GenericArgument::Type(t), dims @ ..]) => {
            let Some(d) = dtype_of_type(t) else {
                return Err(syn::Error::new_spanned(
                    t,
                    "expected a dtype: bf16, f16, f32, i32 or bool",
                ));
            };
            if dims.is_empty() || dims.len() > 2 {
                return Err(syn::Error::new_spanned(
                    ty,
                    "a tile has 1 or 2 dimensions: `Tile<f32, N>` or `Tile<f32, M, N>`",
                ));
            }
            // Each dimension is a name, a literal, or `{ expr }` (Rust's const-generic forms).
            let dims = dims
                .iter()
                .map(|g| match g {
                    GenericArgument::Type(Type::Path(p)) if p.path.get_ident().is_some() => {
                        Ok(syn::Expr::Path(syn::ExprPath {
                            attrs: vec![],
                            qself: None,
                            path: p.path.clone(),
                        }))
                    }
                    GenericArgument::Const(syn::Expr::Block(b)) => match b.block.stmts.as_slice() {
                        [syn::Stmt::Expr(e, None)] => Ok(e.clone()),
                        _ => Err(syn::Error::new_spanned(g, "a dimension is one expression")),
                    },
                    GenericArgument::Const(e) => Ok(e.clone()),
                    g => Err(syn::Error::new_spanned(
                        g,
                        "a dimension is a constexpr name, an integer, or `{ expr }`",
                    )),
                })
                .collect::<syn::Result<Vec<_>>>()?;
            Ok(HTy::Tile(d, dims))
        }
        _ => Err(err()),
    }
}
