//! Attention of one query token over the KV cache (decode), split along the sequence,
//! with the per-head q/k RMSNorm, the rotary embedding and the KV-cache write fused into
//! its first phase (one stage, one synchronisation less per layer than a separate op).
//!
//! Phase 1, `attn_split`, grid (n_heads, SPLITS): program (h, s) takes query head h, its
//! KV head h / group (GQA: `group` query heads share a KV head; each query head still
//! gets its own programs, because at decode attention is starved for parallelism, not for
//! bandwidth: seed 000 measured KV sharing slower), and the s-th chunk of the positions
//! 0..=pos. From the fused QKV GEMV's raw output it computes, in registers:
//! - its query: RMSNorm over the head (weights `q_norm`), then rotate-half RoPE;
//! - this position's key (RMSNorm with `k_norm`, RoPE) and value, rounded to bf16 as the
//!   cache keeps them. The program of the KV head's first query head whose chunk holds
//!   `pos` writes them into the cache; every program that needs position `pos` takes it
//!   from its registers, and reads only positions before `pos` from the cache, so no
//!   program reads what another writes in the same stage.
//!
//! It then streams its chunk in [BLOCK_N, head_dim] tiles of K and V with an online
//! softmax: a running max m, a running sum l of exp(score - m) and an unnormalised
//! accumulator acc, rescaled by exp(m_old - m_new) whenever the max grows. It writes its
//! partial (m, l, acc) in f32.
//!
//! RoPE details: rotate-half needs, for element d, its partner d ± head_dim/2. Tiles cannot
//! be indexed, so the head is loaded twice: once in order and once at the partners'
//! offsets (the second load hits L1/L2), and both copies are normed with the same 1/rms.
//! cos/sin are computed in-kernel from the position (read from a device buffer) and the
//! reference's `inv_freq` table (head_dim/2 f32s, computed in f64 on the host and rounded to
//! f32, as transformers keeps them); the angle `pos * inv_freq` is an f32 product.
//!
//! Phase 2, the merge, is the prologue of the o_proj GEMV (`attn_o_proj`): each column of
//! the attention output takes its head's partials with the same correction, exp(m_s - max
//! m), and divides by the total sum once, at the end.
//!
//! The split count is fixed (a constexpr), and each split's chunk is computed in-kernel
//! from the position read from the device buffer, so the grid never depends on the
//! step: a later split may be empty (it writes m = -3e38, l = 0), and the merge reads
//! only the splits that hold positions.
//! Scores are q·k * (1/sqrt(head_dim)), in f32, as in the reference.
//!
//! KV-cache layout (per layer): `[kv_head][pos][head_dim]`, capacity `max_seq` positions. A
//! head's keys are then one contiguous `[len, head_dim]` block, so attention streams it with
//! full-width, coalesced tile loads; a layer's part of the cache is a `Buffer::slice`.
use dsl_runtime::prelude::*;

#[kernel]
pub fn attn_split(
    qkv: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    inv_freq: Ptr<f32>,
    pos: Ptr<i32>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
) {
    let head = program_id(0);
    let split = program_id(1);
    let p = load(pos);
    let len = p + 1; // positions 0..=pos, the new token's included
                     // Chunks are whole tiles, so only the last tile of the last busy split is ragged.
    let chunk = cdiv(cdiv(len, SPLITS), BLOCK_N) * BLOCK_N;
    let lo = split * chunk;
    let hi = minimum(lo + chunk, len);
    let group = n_heads / n_kv_heads;
    let kvh = head / group;
    let d = arange(0, D);
    let half = D / 2;
    let partner = (d + half) % D;
    let angle = p.to(f32) * load(inv_freq + d % half);
    let cos_a = cos(angle);
    let sin_a = sin(angle);
    // rotate_half: the first half takes -x2 sin, the second half +x1 sin.
    let sign = where_(d < half, -1.0, 1.0);
    // The query: RMSNorm over the head, then RoPE (rounded to bf16, as q was stored).
    let qb = head * D;
    let x = load(qkv + qb + d).to(f32);
    let xp = load(qkv + qb + partner).to(f32);
    let inv = rsqrt(sum(x * x, 0) / D as f32 + eps);
    let xn = x * inv * load(q_norm + d).to(f32);
    let xpn = xp * inv * load(q_norm + partner).to(f32);
    let qv = (xn * cos_a + sign * xpn * sin_a)
        .to(bf16)
        .to(f32)
        .expand_dims(0);
    // This position's key (normed, roped) and value, of this head's KV head.
    let kb = n_heads * D + kvh * D;
    let kx = load(qkv + kb + d).to(f32);
    let kxp = load(qkv + kb + partner).to(f32);
    let kinv = rsqrt(sum(kx * kx, 0) / D as f32 + eps);
    let kn = kx * kinv * load(k_norm + d).to(f32);
    let kpn = kxp * kinv * load(k_norm + partner).to(f32);
    let k_new = (kn * cos_a + sign * kpn * sin_a).to(bf16);
    let v_new = load(qkv + kb + n_kv_heads * D + d);
    let k_now = k_new.to(f32).expand_dims(0);
    let v_now = v_new.to(f32).expand_dims(0);
    let base = kvh * max_seq * D;
    let mut m = -3.0e38;
    let mut l = 0.0;
    let mut acc = zeros([D], f32);
    for start in (lo..hi).step_by(BLOCK_N) {
        let n = start + arange(0, BLOCK_N);
        let valid = n < hi;
        // Earlier positions from the cache; `pos` itself from the registers above.
        let cached = (n < p).expand_dims(1);
        let now = (n == p).expand_dims(1);
        let offs = base + n.expand_dims(1) * D + d.expand_dims(0);
        let kt = where_(now, k_now, load(k_cache + offs, cached, 0.0).to(f32));
        let s = where_(valid, sum(kt * qv, 1) * scale, -3.0e38);
        let m_new = maximum(m, max(s, 0));
        let alpha = exp(m - m_new); // rescales what was summed against the old max
        let pr = where_(valid, exp(s - m_new), 0.0);
        let vt = where_(now, v_now, load(v_cache + offs, cached, 0.0).to(f32));
        l = l * alpha + sum(pr, 0);
        acc = acc * alpha + sum(vt * pr.expand_dims(1), 0);
        m = m_new;
    }
    let slot = head * SPLITS + split;
    store(part_m + slot, m);
    store(part_l + slot, l);
    store(part_acc + slot * D + d, acc);
    // The cache gets this position's key and value from one program: the KV head's first
    // query head, in the split whose chunk holds `pos`.
    if (head % group == 0) & (p >= lo) & (p < hi) {
        store(k_cache + base + p * D + d, k_new);
        store(v_cache + base + p * D + d, v_new);
    }
}

/// res += W_o · attention: the o_proj GEMV with phase 2, the merge of the splits'
/// partials, as its prologue (one stage and one synchronisation less per layer than a
/// separate merge). The merge is elementwise per column of the attention output (column c
/// is head c / D, element c % D): for each column, the max of its head's partial maxima,
/// then the partial sums and accumulators rescaled by exp(m_s - max), and one division.
/// Every program merges the columns of its K step redundantly, from L2, over the splits
/// that hold positions only (one at contexts up to a chunk), after its weight tile's loads
/// are issued, so the merge hides behind the weights' DRAM latency.
#[kernel]
pub fn attn_o_proj(
    w: Ptr<bf16>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    pos: Ptr<i32>,
    res: Ptr<bf16>,
    m: i32,
    k: i32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
    #[constexpr] BM: usize,
    #[constexpr] BK: usize,
) {
    let rows = program_id(0) * BM + arange(0, BM);
    let row_mask = rows < m;
    // The splits that hold positions, as `attn_split` chunks them.
    let len = load(pos) + 1;
    let chunk = cdiv(cdiv(len, SPLITS), BLOCK_N) * BLOCK_N;
    let busy = cdiv(len, chunk);
    let mut acc = zeros([BM, BK], f32);
    for k0 in (0..k).step_by(BK) {
        let cols = k0 + arange(0, BK);
        let col_mask = cols < k;
        let tile_mask = row_mask.expand_dims(1) & col_mask.expand_dims(0);
        // The weight tile first: nothing it needs waits on the merge.
        let wv = load(
            w + rows.expand_dims(1) * k + cols.expand_dims(0),
            tile_mask,
            0.0,
        )
        .to(f32);
        let first = (cols / D) * SPLITS; // this column's head's first partial
        let mut mx = full([BK], -3.0e38, f32);
        for s in 0..busy {
            mx = maximum(mx, load(part_m + first + s, col_mask, -3.0e38));
        }
        let mut l = zeros([BK], f32);
        let mut o = zeros([BK], f32);
        for s in 0..busy {
            let wgt = exp(load(part_m + first + s, col_mask, -3.0e38) - mx);
            l = l + load(part_l + first + s, col_mask, 0.0) * wgt;
            o = o + load(part_acc + (first + s) * D + cols % D, col_mask, 0.0) * wgt;
        }
        // The attention output, rounded to bf16 (as an activation between ops is).
        let attn = where_(col_mask, o / l, 0.0).to(bf16).to(f32);
        acc += wv * attn.expand_dims(0);
    }
    // Epilogue: the add happens in f32, one rounding to bf16 per update of the stream.
    let r = load(res + rows, row_mask, 0.0).to(f32);
    store(res + rows, (r + sum(acc, 1)).to(bf16), row_mask);
}
