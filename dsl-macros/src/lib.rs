//! `#[kernel]`: tile-level Rust → tile IR, checked at compile time; and `#[megakernel]`
//! (`mega.rs`): a sequence of kernel calls → a stage program built at run time.
//!
//! The attribute parses the fn with syn (`parse`), drives `dsl_ir::Builder` over its body
//! (`lower`), which applies every typing rule, and on success emits a module holding the
//! IR as JSON and typed launchers (`emit`). Every user mistake is a `compile_error!` at the
//! offending token; nothing here panics on user input.
//!
//! The language (Triton's names):
//! - parameters: `Ptr<bf16|f16|f32|i32>`, `i32`, `f32`, `#[constexpr] usize|i32|u32|bool`;
//! - statements: `let` / `let mut` (shadowing, block scoping), `let (a, mut b, _) = f(..)`
//!   (the values of a tile function that returns several), `x = e`, `x op= e` (mut
//!   only), `store` / `atomic_*` calls, `for i in a..b` and `(a..b).step_by(s)`,
//!   `if c {} else if d {} else {}` on bool scalars;
//! - expressions: literals, names, `+ - * / % & | ^ << >> < <= > >= == !=`, unary `-` `!`,
//!   `e as dtype`, `e.to(dtype)`, primitives `f(args)` and their method form `x.f(args)`;
//! - primitives: program_id num_programs arange zeros full load store prefetch atomic_add
//!   atomic_max atomic_min where_ maximum minimum exp exp2 log log2 sqrt rsqrt sigmoid silu
//!   abs sin cos tanh sum max min argmax argmin expand_dims broadcast_to cdiv.
//!   `where` is a Rust keyword (syn cannot parse `where(..)` as a call), hence `where_`.
//! - tile functions: `#[tile_fn]` helpers listed in `#[kernel(helpers(..))]`, and the tile
//!   library (`stdlib.rs`), inlined by `lower` at each call.
mod emit;
mod lower;
mod mega;
mod named;
mod parse;
mod stdlib;

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;

/// Turns a tile-level fn into a kernel module: `name::KERNEL`, `name::ir_json()`,
/// `name::launch(dev, launch, args.., constexprs..)` and `name::autotune(dev, tune, args..)`.
///
/// ```ignore
/// #[kernel]
/// pub fn add(x: Ptr<f32>, y: Ptr<f32>, out: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
///     let offs = program_id(0) * BLOCK as i32 + arange(0, BLOCK);
///     let mask = offs < n;
///     store(out + offs, load(x + offs, mask, 0.0) + load(y + offs, mask, 0.0), mask);
/// }
/// ```
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(attr.into(), item.into())
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

/// Turns a fn whose body is a sequence of `#[kernel]` calls (with `for` loops and `let`s)
/// into ONE persistent kernel: `name::MEGAKERNEL`, `name::launch(dev, opts, args..,
/// constexprs..)`, `name::explain(opts, constexprs..)`. See `dsl_runtime::mega`.
///
/// ```ignore
/// #[megakernel]
/// pub fn mlp(x: Ptr<bf16>, res: Ptr<bf16>, nw: Ptr<bf16>, w: Ptr<bf16>, h: Ptr<bf16>,
///            n_layers: i32, eps: f32, #[constexpr] D: usize) {
///     for layer in 0..n_layers {
///         add_rmsnorm(grid(1), x, res, &nw[layer * D..(layer + 1) * D], h, D, eps, D);
///         gemv(grid(cdiv(D, 8)), &w[layer * D * D..(layer + 1) * D * D], h, x, D, D, 8, 256);
///     }
/// }
/// ```
#[proc_macro_attribute]
pub fn megakernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    runtime_path()
        .map_err(|m| syn::Error::new(proc_macro2::Span::call_site(), m))
        .and_then(|rt| mega::expand(attr.into(), item.into(), &rt))
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

/// A tile function: called from kernels (and other tile functions) like a primitive,
/// type-checked against its signature at each call, and inlined when the kernel is lowered,
/// so the IR, the interpreter and the CUDA emitter never see a call. A kernel lists the
/// ones it calls, directly or through another: `#[kernel(helpers(rms, path::to::other))]`.
/// The tile standard library's (`rms_inv`, `split_chunk`, `gemv_rows`, `grouped_rows`, ...)
/// need no listing.
///
/// ```ignore
/// #[tile_fn]
/// fn scaled_sum(x: Tile<f32, N>, s: f32) -> f32 {
///     sum(x, 0) * s
/// }
/// ```
///
/// Parameters are `Ptr<T>`, `i32`, `f32`, `bool`, `Tile<dtype, N>` / `Tile<dtype, M, N>`
/// (a name in a shape that is not a `#[constexpr]` parameter is inferred from the first
/// argument it appears in), or `#[constexpr]` integers and bools. It returns nothing (a
/// call is a statement), one value of those types (the body ends with it, no `;`), or
/// several: `-> (A, B, ..)`, the body ending with a tuple `(a, b, ..)`, each value checked
/// against its type, and every call binding them with `let (a, mut b, _) = f(..);` (a call
/// anywhere else is an error: an expression has one value):
///
/// ```ignore
/// #[tile_fn]
/// fn online_max(m: f32, s: Tile<f32, N>) -> (f32, f32) {
///     let m_new = maximum(m, max(s, 0));
///     (m_new, exp(m - m_new)) // the new max, and the factor that rescales the old sums
/// }
/// // in a kernel: let (m_new, alpha) = online_max(m, s);
/// ```
///
/// It expands to a
/// `macro_rules!` of the same name that hands its source to the kernels that list it
/// (visible where a `macro_rules!` is: this module and below, or by path through the
/// `pub(crate) use` it makes).
#[proc_macro_attribute]
pub fn tile_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    tile_fn_expand(attr.into(), item.into())
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

fn tile_fn_expand(attr: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    if !attr.is_empty() {
        return Err(syn::Error::new_spanned(
            attr,
            "#[tile_fn] takes no arguments",
        ));
    }
    let f: syn::ItemFn = syn::parse2(item)?;
    let sig = parse::helper_signature(&f)?;
    let name = &sig.name;
    if lower::is_primitive(&name.to_string()) {
        return Err(syn::Error::new_spanned(
            name,
            format!("`{name}` is a primitive: a tile function needs another name"),
        ));
    }
    let rt = runtime_path().map_err(|m| syn::Error::new_spanned(name, m))?;
    let vis = &f.vis;
    // The source travels without the fn's visibility and outer attributes.
    let (sig_tokens, block) = (&f.sig, &f.block);
    let me = quote!({ #sig_tokens #block });
    let vis_use = match vis {
        syn::Visibility::Inherited => quote!(),
        _ => quote!(#[allow(unused_imports)] pub(crate) use #name;),
    };
    Ok(quote! {
        #[doc(hidden)]
        #[allow(unused_macros)]
        macro_rules! #name {
            (@tessera_helpers [$next:path $(, $rest:path)*] [$($done:tt)*] $($kernel:tt)*) => {
                $next! { @tessera_helpers [$($rest),*] [$($done)* #me] $($kernel)* }
            };
            (@tessera_helpers [] [$($done:tt)*] $($kernel:tt)*) => {
                #rt::__kernel_with_helpers! { [$($done)* #me] $($kernel)* }
            };
        }
        #vis_use
    })
}

/// The end of a `#[kernel(helpers(..))]` expansion: every listed helper's source, then the
/// kernel. Not for direct use.
#[doc(hidden)]
#[proc_macro]
pub fn __kernel_with_helpers(input: TokenStream) -> TokenStream {
    let parsed = syn::parse::Parser::parse(
        |input: syn::parse::ParseStream| {
            let list;
            syn::bracketed!(list in input);
            let mut helpers = vec![];
            while !list.is_empty() {
                let body;
                syn::braced!(body in list);
                let sig: syn::Signature = body.parse()?;
                let block: syn::Block = body.parse()?;
                helpers.push((sig, block));
            }
            let f: syn::ItemFn = input.parse()?;
            Ok((helpers, f))
        },
        input,
    );
    parsed
        .and_then(|(helpers, f)| {
            let helpers = helpers
                .into_iter()
                .map(|(sig, block)| {
                    let f = syn::ItemFn {
                        attrs: vec![],
                        vis: syn::Visibility::Inherited,
                        sig,
                        block: Box::new(block),
                    };
                    Ok(parse::Helper {
                        sig: parse::helper_signature(&f)?,
                        body: *f.block,
                        library: false,
                    })
                })
                .collect::<syn::Result<Vec<_>>>()?;
            expand_kernel(f, helpers)
        })
        .unwrap_or_else(|e| e.to_compile_error())
        .into()
}

fn expand(attr: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let listed = helpers_arg(attr)?;
    let f: syn::ItemFn = syn::parse2(item)?;
    let Some((first, rest)) = listed.split_first() else {
        return expand_kernel(f, vec![]);
    };
    // Each listed helper's macro adds its source and hands on to the next; the last one
    // calls `__kernel_with_helpers`.
    Ok(quote! {
        #first! { @tessera_helpers [#(#rest),*] [] #f }
    })
}

/// `#[kernel]` or `#[kernel(helpers(a, path::b))]`.
fn helpers_arg(attr: TokenStream2) -> syn::Result<Vec<syn::Path>> {
    if attr.is_empty() {
        return Ok(vec![]);
    }
    let help = "#[kernel] takes no arguments but `helpers(..)`: the `#[tile_fn]`s it calls";
    let meta: syn::Meta =
        syn::parse2(attr.clone()).map_err(|_| syn::Error::new_spanned(&attr, help))?;
    match meta {
        syn::Meta::List(l) if l.path.is_ident("helpers") => {
            let paths = l.parse_args_with(
                syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
            )?;
            Ok(paths.into_iter().collect())
        }
        _ => Err(syn::Error::new_spanned(attr, help)),
    }
}

fn expand_kernel(f: syn::ItemFn, helpers: Vec<parse::Helper>) -> syn::Result<TokenStream2> {
    let sig = parse::signature(&f)?;
    // The file of the kernel's own tokens (a kernel with helpers is expanded from inside
    // the last helper's macro).
    let file = f.sig.ident.span().file();
    let mut all = stdlib::helpers()?;
    all.extend(helpers);
    let kernel = lower::lower(&sig, &f.block, &file, all)?;
    let rt = runtime_path().map_err(|m| syn::Error::new_spanned(&f.sig.ident, m))?;
    Ok(emit::module(&sig, &kernel.to_json(), &rt))
}

/// The runtime crate as the calling crate names it: `dsl-runtime` if it depends on it,
/// else the `tessera` facade's `runtime` module.
fn runtime_path() -> Result<TokenStream2, String> {
    use proc_macro_crate::{crate_name, FoundCrate};
    // `FoundCrate::Itself` also covers the package's tests, examples and binaries, where
    // `crate` is not the library: only the library itself says `crate`.
    let in_lib = |krate: &str| {
        std::env::var("CARGO_CRATE_NAME").as_deref() == Ok(krate)
            && std::env::var_os("CARGO_BIN_NAME").is_none()
    };
    let ident = |n: &str| proc_macro2::Ident::new(n, proc_macro2::Span::call_site());
    match crate_name("dsl-runtime") {
        Ok(FoundCrate::Name(n)) => {
            let n = ident(&n);
            return Ok(quote!(::#n));
        }
        Ok(FoundCrate::Itself) if in_lib("dsl_runtime") => return Ok(quote!(crate)),
        Ok(FoundCrate::Itself) => return Ok(quote!(::dsl_runtime)),
        Err(_) => {}
    }
    match crate_name("tessera") {
        Ok(FoundCrate::Name(n)) => {
            let n = ident(&n);
            Ok(quote!(::#n::runtime))
        }
        Ok(FoundCrate::Itself) if in_lib("tessera") => Ok(quote!(crate::runtime)),
        Ok(FoundCrate::Itself) => Ok(quote!(::tessera::runtime)),
        Err(_) => Err(
            "#[kernel] needs the runtime: add `dsl-runtime` (or `tessera`) to [dependencies]"
                .into(),
        ),
    }
}
