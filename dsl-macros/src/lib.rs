//! Placeholder until the macro branch lands.
use proc_macro::TokenStream;
#[proc_macro_attribute]
pub fn kernel(_attr: TokenStream, item: TokenStream) -> TokenStream {
    item
}
