//! Compile-fail tests: each user mistake is a compile error at the offending token.
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
