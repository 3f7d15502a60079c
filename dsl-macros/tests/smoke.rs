use dsl_runtime::prelude::*;

#[kernel]
pub fn rmsnorm(
    x: Ptr<bf16>,
    w: Ptr<bf16>,
    y: Ptr<bf16>,
    n_cols: i32,
    eps: f32,
    #[constexpr] BLOCK: usize,
) {
    let row = program_id(0);
    let cols = arange(0, BLOCK);
    let mask = cols < n_cols;
    let x = load(x + row * n_cols + cols, mask, 0.0).to(f32);
    let inv = rsqrt(sum(x * x, 0) / n_cols as f32 + eps);
    let w = load(w + cols, mask, 0.0).to(f32);
    store(y + row * n_cols + cols, (x * inv * w).to(bf16), mask);
}

#[test]
fn smoke() {
    let k = dsl_ir::Kernel::from_json(rmsnorm::ir_json()).unwrap();
    println!("{}", k.to_text());
    println!("{:#?}", &k.body[..3]);
    println!("{}", k.file);
}
