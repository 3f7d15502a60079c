use dsl_runtime::prelude::*;

// Q·K for keys stored [BN, D]: the inner dimensions differ; `trans(k)` is the fix.
#[kernel]
fn scores(q: Ptr<bf16>, k: Ptr<bf16>, s: Ptr<f32>, #[constexpr] BM: usize, #[constexpr] BN: usize, #[constexpr] D: usize) {
    let d = arange(0, D);
    let qt = load(q + arange(0, BM).expand_dims(1) * D + d.expand_dims(0));
    let kt = load(k + arange(0, BN).expand_dims(1) * D + d.expand_dims(0));
    let sc = dot(qt, kt);
    store(s + arange(0, BM).expand_dims(1) * BN + arange(0, BN).expand_dims(0), sc);
}

fn main() {}
