//! Per-head q/k RMSNorm, rotary embedding and the KV-cache write, one program per head.
//!
//! Programs 0..n_heads take the query heads of the fused QKV output and write the roped
//! queries; programs n_heads..n_heads + n_kv_heads take the key heads, write the roped key
//! into the K cache and copy the matching value head into the V cache.
//!
//! - The norm needs a whole head (it reduces over head_dim), so a head is the unit here;
//!   fusing it into the QKV GEMV would shrink that GEMV's grid to one program per head
//!   (seed 000 measured 14-19x slower), so the GEMV writes raw q/k/v and this op follows.
//! - Rotate-half needs, for element d, its partner d ± head_dim/2. Tiles cannot be indexed,
//!   so the head is loaded twice: once in order and once at the partners' offsets (the
//!   second load hits L1/L2), and both copies are normed with the same 1/rms.
//! - cos/sin are a row of a host-computed table (`reference::rope_table`, [max_seq,
//!   head_dim] f32: the cosines of the position's head_dim/2 angles, then the sines), the
//!   angle `pos * inv_freq` an f32 product and each value Rust's `sin_cos`, as in the
//!   reference, so the rotation is the reference's to the bit. Evaluated in-kernel, sin and
//!   cos cost every thread 8 of each (a [head_dim] tile sits in 8-element chunks, held in
//!   replicas by the program's 512 threads): ~1 µs of a 2.5 µs program on an H100. The
//!   table is 128 · 4 bytes per position (21 MB at 40k), and a step reads one row.
//!
//! KV-cache layout (per layer): `[kv_head][pos][head_dim]`, capacity `max_seq` positions.
//! A head's keys are then one contiguous `[len, head_dim]` block, so attention streams it
//! with full-width, coalesced tile loads; the whole cache is `[layer][kv_head][pos][dim]`
//! and a layer's part is a `Buffer::slice`.
use dsl_runtime::prelude::*;

#[kernel]
pub fn qk_norm_rope(
    qkv: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    rope: Ptr<f32>,
    pos: Ptr<i32>,
    q_out: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    #[constexpr] D: usize,
) {
    let head = program_id(0);
    let p = load(pos);
    let d = arange(0, D);
    let half = D / 2;
    let partner = (d + half) % D;
    // This position's cosines and sines: a row of the host's table.
    let cs = rope + p * D;
    let cos_a = load(cs + d % half);
    let sin_a = load(cs + half + d % half);
    // rotate_half: the first half takes -x2 sin, the second half +x1 sin.
    let sign = where_(d < half, -1.0, 1.0);
    if head < n_heads {
        let base = head * D;
        let x = load(qkv + base + d).to(f32);
        let xp = load(qkv + base + partner).to(f32);
        let inv = rsqrt(sum(x * x, 0) / D as f32 + eps);
        let xn = x * inv * load(q_norm + d).to(f32);
        let xpn = xp * inv * load(q_norm + partner).to(f32);
        store(q_out + base + d, (xn * cos_a + sign * xpn * sin_a).to(bf16));
    } else {
        let kvh = head - n_heads;
        let base = n_heads * D + kvh * D;
        let x = load(qkv + base + d).to(f32);
        let xp = load(qkv + base + partner).to(f32);
        let inv = rsqrt(sum(x * x, 0) / D as f32 + eps);
        let xn = x * inv * load(k_norm + d).to(f32);
        let xpn = xp * inv * load(k_norm + partner).to(f32);
        let slot = (kvh * max_seq + p) * D;
        store(
            k_cache + slot + d,
            (xn * cos_a + sign * xpn * sin_a).to(bf16),
        );
        // V needs no norm or rope: straight into the cache.
        store(v_cache + slot + d, load(qkv + base + n_kv_heads * D + d));
    }
}
