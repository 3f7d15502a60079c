//! Attention forward, FlashAttention-2 style: O = softmax(Q·Kᵀ · scale [+ causal mask]) · V.
//!
//! Q, K, V, O are bf16 [B, H, S, D], contiguous. A program owns BM query rows of one
//! (batch, head) and walks the keys in BN blocks: S = dot(q, trans(k)) on tensor cores,
//! an online softmax (running row max m and row sum l, in base 2: exp2 with log2(e) folded
//! into the scale), the block's P·V accumulated into f32, one division at the end. With
//! CAUSAL the loop stops at the diagonal block and masks the keys past each query. Q stays
//! in shared memory for the whole loop; the K and V tiles are pipelined by cp.async.
use crate::runtime::prelude::*;
use half::bf16;

#[kernel]
pub fn attention(
    q: Ptr<bf16>,
    k: Ptr<bf16>,
    v: Ptr<bf16>,
    o: Ptr<bf16>,
    seq: i32,
    scale: f32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] D: usize,
    #[constexpr] CAUSAL: bool,
) {
    let start_m = program_id(0) * BM;
    let base = program_id(1) * seq * D; // (batch, head)
    let rows = start_m + arange(0, BM);
    let d = arange(0, D);
    let row_ok = rows.expand_dims(1) < seq;
    let qt = load(
        q + base + rows.expand_dims(1) * D + d.expand_dims(0),
        row_ok,
        0.0,
    );
    let qk_scale = scale * 1.4426950408889634; // log2(e): exp(x) = exp2(x * log2(e))
    let mut m_i = full([BM], f32::NEG_INFINITY, f32);
    let mut l_i = zeros([BM], f32);
    let mut acc = zeros([BM, D], f32);
    let end = where_(CAUSAL, minimum(seq, start_m + BM), seq);
    for n0 in (0..end).step_by(BN) {
        let keys = n0 + arange(0, BN);
        let key_ok = keys.expand_dims(1) < seq;
        let kt = load(
            k + base + keys.expand_dims(1) * D + d.expand_dims(0),
            key_ok,
            0.0,
        );
        let s = dot(qt, trans(kt)) * qk_scale;
        let visible =
            (keys.expand_dims(0) < seq) & (!CAUSAL | (keys.expand_dims(0) <= rows.expand_dims(1)));
        let s = where_(visible, s, f32::NEG_INFINITY);
        let m_new = maximum(m_i, max(s, 1));
        let alpha = exp2(m_i - m_new);
        let p = exp2(s - m_new.expand_dims(1));
        l_i = l_i * alpha + sum(p, 1);
        let vt = load(
            v + base + keys.expand_dims(1) * D + d.expand_dims(0),
            key_ok,
            0.0,
        );
        acc = dot(p.to(bf16), vt, acc * alpha.expand_dims(1));
        m_i = m_new;
    }
    let out = acc / l_i.expand_dims(1);
    store(
        o + base + rows.expand_dims(1) * D + d.expand_dims(0),
        out.to(bf16),
        row_ok,
    );
}

/// The grid of [`attention`]: (query blocks, batch * heads).
pub fn grid(b: usize, h: usize, s: usize, bm: usize) -> (u32, u32) {
    (s.div_ceil(bm) as u32, (b * h) as u32)
}

/// softmax(Q·Kᵀ · scale) · V in f64, [B*H, S, D] flattened.
#[allow(clippy::too_many_arguments)] // the kernel's operands and shape, as it takes them
pub fn attention_ref(
    q: &[bf16],
    k: &[bf16],
    v: &[bf16],
    bh: usize,
    s: usize,
    d: usize,
    scale: f64,
    causal: bool,
) -> Vec<f64> {
    let mut out = vec![0.0f64; bh * s * d];
    for h in 0..bh {
        let at = |x: &[bf16], r: usize, c: usize| x[(h * s + r) * d + c].to_f64();
        for i in 0..s {
            let n = if causal { i + 1 } else { s };
            let sc: Vec<f64> = (0..n)
                .map(|j| (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum::<f64>() * scale)
                .collect();
            let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = sc.iter().map(|x| (x - mx).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..d {
                out[(h * s + i) * d + c] = (0..n).map(|j| e[j] * at(v, j, c)).sum::<f64>() / z;
            }
        }
    }
    out
}
