//! The named forms of a launch, generated beside the positional launchers of both
//! `#[kernel]` and `#[megakernel]`: `Args` (the run-time parameters by name; a pointer as
//! `ptr(&buffer)`, its element type checked at compile time) and `Consts` (the constexprs
//! by name). Long signatures (the Qwen3 decode step has 34 run-time parameters and 21
//! constexprs) read by name at the call site instead of by position.
use crate::parse::{KParam, PTy};
use dsl_ir::DType;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// A parameter's element type as the launchers spell it.
pub fn elem_type(d: DType, rt: &TokenStream) -> TokenStream {
    match d {
        DType::BF16 => quote!(#rt::bf16),
        DType::F16 => quote!(#rt::f16),
        other => {
            let i = format_ident!("{}", other.name());
            quote!(::core::primitive::#i)
        }
    }
}

/// `pub struct Args<'a>` with `list()` (the launch arguments in order) and `pub struct
/// Consts` with `bindings()`, for the generated module of a kernel or megakernel.
pub fn structs(params: &[KParam], rt: &TokenStream) -> TokenStream {
    let (mut fields, mut values, mut consts, mut bindings) = (vec![], vec![], vec![], vec![]);
    for p in params {
        let id = &p.ident;
        let id_str = id.to_string();
        match &p.ty {
            PTy::Ptr(d) => {
                let t = elem_type(*d, rt);
                fields.push(quote!(pub #id: #rt::TypedPtr<'a, #t>));
                values.push(quote!(self.#id.arg()));
            }
            PTy::Scalar(d) => {
                let t = elem_type(*d, rt);
                fields.push(quote!(pub #id: #t));
                values.push(match d {
                    DType::F32 => quote!(#rt::Arg::F32(self.#id)),
                    _ => quote!(#rt::Arg::I32(self.#id)),
                });
            }
            PTy::ConstInt(t) => {
                let t = format_ident!("{}", t.to_string());
                consts.push(quote!(pub #id: ::core::primitive::#t));
                bindings.push(
                    quote!((#id_str, #rt::ConstVal::Int(self.#id as ::core::primitive::i64))),
                );
            }
            PTy::ConstBool => {
                consts.push(quote!(pub #id: ::core::primitive::bool));
                bindings.push(quote!((#id_str, #rt::ConstVal::Bool(self.#id))));
            }
        }
    }
    // `Args<'a>` needs its lifetime in a field: a pointer's, or (no pointer parameter) this.
    let no_ptr_field = if params.iter().any(|p| matches!(p.ty, PTy::Ptr(_))) {
        quote!()
    } else {
        quote!(pub _no_buffers: ::core::marker::PhantomData<&'a ()>,)
    };
    // Arrays, not Vecs: a launch in a per-token loop allocates nothing for them.
    let (n_args, n_consts) = (values.len(), bindings.len());
    quote! {
        /// The run-time arguments by name (pointers as `ptr(&buffer)`), for `launch_with`.
        pub struct Args<'a> {
            #(#fields,)*
            #no_ptr_field
        }

        impl<'a> Args<'a> {
            /// The launch arguments, in the parameters' order.
            pub fn list(&self) -> [#rt::Arg<'a>; #n_args] {
                [#(#values),*]
            }
        }

        /// The constexprs by name, for `launch_with`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct Consts {
            #(#consts,)*
        }

        impl Consts {
            /// The constexpr bindings, as the runtime's methods take them.
            pub fn bindings(&self) -> [#rt::Binding; #n_consts] {
                [#(#bindings),*]
            }
        }
    }
}
