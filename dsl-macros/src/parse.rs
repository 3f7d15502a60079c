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
    Src {
        line,
        text: text_of(tokens),
        name: name.to_string(),
    }
}

/// A `Src` for a statement header (`for i in a..b`, `if c`), whose text we assemble.
pub fn src_text(span: Span, text: String) -> Src {
    Src {
        line: span.start().line as u32,
        text,
        name: String::new(),
    }
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
