//! Attention of one query token over the KV cache (decode), split along the sequence.
//!
//! Phase 1, `attn_split`, grid (n_heads, SPLITS): program (h, s) takes query head h, its
//! KV head h / group (GQA: `group` query heads share a KV head; each query head still
//! gets its own programs: seed 000 measured KV sharing slower, and so did a kernel whose
//! programs load each K/V tile once for the whole group, at every context up to 8192,
//! docs/PERF.md session 11: the per-tile work, not the bytes, bounds this loop), and the s-th chunk of the positions
//! 0..=pos. It streams that chunk in [BLOCK_N, head_dim] tiles of K and V with an online
//! softmax: a running max m, a running sum l of exp(score - m) and an unnormalised
//! accumulator acc, rescaled by exp(m_old - m_new) whenever the max grows. It writes its
//! partial (m, l, acc) in f32.
//!
//! Phase 2, `attn_merge`, grid n_heads: merges the SPLITS partials of a head with the same
//! correction, exp(m_s - max m), and multiplies by the total sum's reciprocal once, at the
//! end (one division a program, not head_dim of them).
//! `attn_split_merge` is both in one grid: the last program of each head merges it.
//!
//! The split count is fixed (a constexpr), and each split's chunk is computed in-kernel
//! from the position read from the device buffer, so the grid never depends on the
//! step: a later split may be empty (it writes m = -3e38, l = 0, which merges to nothing).
//! Scores are q·k * (1/sqrt(head_dim)), in f32, as in the reference.
use super::rope::head_rms_inv;
use dsl_runtime::prelude::*;

/// The online softmax's start: no max yet (-3e38, which any score replaces), nothing summed.
#[tile_fn]
pub fn softmax_start(#[constexpr] D: usize) -> (f32, f32, Tile<f32, D>) {
    (-3.0e38, 0.0, zeros([D], f32))
}

/// A split's partial (m, l, acc) into slot `slot` of the partials (`attn_merge` and
/// `merged_head` read them).
#[tile_fn]
fn store_partial(
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    slot: i32,
    m: f32,
    l: f32,
    acc: Tile<f32, D>,
    // arange(0, D), the caller's
    d: Tile<i32, D>,
) {
    store(part_m + slot, m);
    store(part_l + slot, l);
    store(part_acc + slot * D + d, acc);
}

/// One tile of the online softmax: the running max `m`, sum `l` of exp(score - m) and
/// unnormalised accumulator `acc` after the tile's scores `s` (-3e38 where not `valid`) and
/// values `vt`, each old sum rescaled by exp(m_old - m_new). Every attention loop here
/// takes its steps from it, so their partials agree bit for bit.
#[tile_fn]
pub fn softmax_tile(
    m: f32,
    l: f32,
    acc: Tile<f32, D>,
    s: Tile<f32, N>,
    vt: Tile<f32, N, D>,
    valid: Tile<bool, N>,
) -> (f32, f32, Tile<f32, D>) {
    let m_new = maximum(m, max(s, 0));
    let alpha = exp(m - m_new); // rescales what was summed against the old max
    let pr = where_(valid, exp(s - m_new), 0.0);
    (
        m_new,
        l * alpha + sum(pr, 0),
        acc * alpha + sum(vt * pr.expand_dims(1), 0),
    )
}

/// Program (head, split)'s partial (m, l, acc) of attention over its chunk of 0..=pos.
#[tile_fn]
fn attend_chunk(
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    head: i32,
    split: i32,
    group: i32,
    max_seq: i32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
) {
    let len = load(pos) + 1; // positions 0..=pos, the new token's included
                             // Chunks are whole tiles, so only the last tile of the last busy split is ragged.
    let chunk = split_chunk(len, SPLITS, BLOCK_N);
    let lo = split * chunk;
    let hi = minimum(lo + chunk, len);
    let d = arange(0, D);
    let qv = load(q + head * D + d).to(f32).expand_dims(0);
    let base = (head / group) * max_seq * D;
    let (mut m, mut l, mut acc) = softmax_start(D);
    for start in (lo..hi).step_by(BLOCK_N) {
        let n = start + arange(0, BLOCK_N);
        let valid = n < hi;
        let offs = base + n.expand_dims(1) * D + d.expand_dims(0);
        // K and V in one round trip: V's load is in flight while the scores are reduced
        // (docs/PERF.md, session 11: -1 to -5% per token from context 1 to 8192).
        let kt = load(k_cache + offs, valid.expand_dims(1), 0.0).to(f32);
        let vt = load(v_cache + offs, valid.expand_dims(1), 0.0).to(f32);
        let s = where_(valid, sum(kt * qv, 1) * scale, -3.0e38);
        let (m_new, l_new, acc_new) = softmax_tile(m, l, acc, s, vt, valid);
        l = l_new;
        acc = acc_new;
        m = m_new;
    }
    store_partial(
        part_m,
        part_l,
        part_acc,
        head * SPLITS + split,
        m,
        l,
        acc,
        d,
    );
}

/// A head's attention over all of positions 0..len in one pass, normalised: `attend_chunk`'s
/// online softmax over the whole range, for a program that needs the head itself
/// (`gemv::attn_head_residual`, `attn_rope_head_residual`). q (`qv`) and the row at
/// len - 1 (`k_cur`, `v_cur`) are given, the rows below it come from the cache (`base`: the
/// KV head's first row), so a program that computed the new row need not wait for it to
/// reach the cache. Up to BLOCK_N positions (one tile) it equals the split partials merged
/// (`merged_head`) bit for bit: the splits past the first are empty and merge with weight
/// exp(-3e38 - m) = 0, the first with exp(0) = 1.
#[tile_fn]
pub fn attend_head_cur(
    qv: Tile<f32, D>,
    k_cur: Tile<f32, D>,
    v_cur: Tile<f32, D>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    base: i32,
    len: i32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
) -> Tile<f32, D> {
    let d = arange(0, D);
    let q2 = qv.expand_dims(0);
    let cur = len - 1;
    let (mut m, mut l, mut acc) = softmax_start(D);
    for start in (0..len).step_by(BLOCK_N) {
        let n = start + arange(0, BLOCK_N);
        let valid = n < len;
        let cached = (n < cur).expand_dims(1);
        let now = (n == cur).expand_dims(1);
        let offs = base + n.expand_dims(1) * D + d.expand_dims(0);
        let kt = where_(
            now,
            k_cur.expand_dims(0),
            load(k_cache + offs, cached, 0.0).to(f32),
        );
        let vt = where_(
            now,
            v_cur.expand_dims(0),
            load(v_cache + offs, cached, 0.0).to(f32),
        );
        let s = where_(valid, sum(kt * q2, 1) * scale, -3.0e38);
        let (m_new, l_new, acc_new) = softmax_tile(m, l, acc, s, vt, valid);
        l = l_new;
        acc = acc_new;
        m = m_new;
    }
    acc * (1.0 / l) // one division, not D (as `merged_head`: the same bits)
}

/// `attend_chunk` with the next tile's K and V in flight while one reduces: the same
/// arithmetic in the same order (the partials are equal bit for bit), each tile's loads
/// issued one iteration early, so a long chunk's round trips overlap its reductions. Two
/// tiles are live at once: half `attend_chunk`'s BLOCK_N holds the same registers.
#[tile_fn]
fn attend_chunk_ahead(
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    head: i32,
    split: i32,
    group: i32,
    max_seq: i32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
) {
    let len = load(pos) + 1;
    let chunk = split_chunk(len, SPLITS, BLOCK_N);
    let lo = split * chunk;
    let hi = minimum(lo + chunk, len);
    let d = arange(0, D);
    let base = (head / group) * max_seq * D;
    // The first tile's K and V, then q; each iteration loads the next tile's.
    let n0 = lo + arange(0, BLOCK_N);
    let offs0 = base + n0.expand_dims(1) * D + d.expand_dims(0);
    let mut kt = load(k_cache + offs0, (n0 < hi).expand_dims(1), 0.0);
    let mut vt = load(v_cache + offs0, (n0 < hi).expand_dims(1), 0.0);
    let qv = load(q + head * D + d).to(f32).expand_dims(0);
    let (mut m, mut l, mut acc) = softmax_start(D);
    for start in (lo..hi).step_by(BLOCK_N) {
        let n = start + arange(0, BLOCK_N);
        let valid = n < hi;
        let kf = kt.to(f32);
        let vf = vt.to(f32);
        // The next tile (none past the chunk) streams in while this one reduces.
        let next = n + BLOCK_N;
        let offs = base + next.expand_dims(1) * D + d.expand_dims(0);
        kt = load(k_cache + offs, (next < hi).expand_dims(1), 0.0);
        vt = load(v_cache + offs, (next < hi).expand_dims(1), 0.0);
        let s = where_(valid, sum(kf * qv, 1) * scale, -3.0e38);
        let (m_new, l_new, acc_new) = softmax_tile(m, l, acc, s, vf, valid);
        l = l_new;
        acc = acc_new;
        m = m_new;
    }
    store_partial(
        part_m,
        part_l,
        part_acc,
        head * SPLITS + split,
        m,
        l,
        acc,
        d,
    );
}

/// Head `head`'s SPLITS partials merged: its attention output, in f32 (o_proj per head,
/// `gemv::gemv_head_residual`).
#[tile_fn]
pub fn merged_head(
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    head: i32,
    #[constexpr] D: usize,
    #[constexpr] SPLITS: usize,
) -> Tile<f32, D> {
    let s = head * SPLITS + arange(0, SPLITS);
    let d = arange(0, D);
    // Every load before the first reduction: one round trip, not three.
    let m = load(part_m + s);
    let ls = load(part_l + s);
    let acc = load(part_acc + s.expand_dims(1) * D + d.expand_dims(0));
    let w = exp(m - max(m, 0)); // empty splits: exp(-3e38 - m*) = 0
    let l = sum(ls * w, 0);
    sum(acc * w.expand_dims(1), 0) * (1.0 / l) // one division, not D
}

/// Head `head`'s SPLITS partials merged into its row of `out`: `merged_head`'s arithmetic
/// with each load after the reduction before it, as it was measured (the loads first were
/// not faster here, and slower at context 1: docs/PERF.md, session 21).
#[tile_fn]
fn merge_head(
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    out: Ptr<bf16>,
    head: i32,
    #[constexpr] D: usize,
    #[constexpr] SPLITS: usize,
) {
    let s = head * SPLITS + arange(0, SPLITS);
    let d = arange(0, D);
    let m = load(part_m + s);
    let w = exp(m - max(m, 0)); // empty splits: exp(-3e38 - m*) = 0
    let l = sum(load(part_l + s) * w, 0);
    let acc = load(part_acc + s.expand_dims(1) * D + d.expand_dims(0));
    store(
        out + head * D + d,
        (sum(acc * w.expand_dims(1), 0) * (1.0 / l)).to(bf16),
    );
}

#[kernel(helpers(attend_chunk, softmax_start, softmax_tile, store_partial))]
pub fn attn_split(
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    group: i32,
    max_seq: i32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
) {
    attend_chunk(
        q,
        k_cache,
        v_cache,
        pos,
        part_m,
        part_l,
        part_acc,
        program_id(0),
        program_id(1),
        group,
        max_seq,
        scale,
        D,
        BLOCK_N,
        SPLITS,
    );
}

/// `attn_split` with each tile's K and V loaded one iteration early (`attend_chunk_ahead`):
/// the megakernel's attention with `Tiles::attn_ahead` (a candidate).
#[kernel(helpers(attend_chunk_ahead, softmax_start, softmax_tile, store_partial))]
pub fn attn_split_ahead(
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    group: i32,
    max_seq: i32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
) {
    attend_chunk_ahead(
        q,
        k_cache,
        v_cache,
        pos,
        part_m,
        part_l,
        part_acc,
        program_id(0),
        program_id(1),
        group,
        max_seq,
        scale,
        D,
        BLOCK_N,
        SPLITS,
    );
}

/// `attn_split` reading the QKV stage's rotated pairs (`rope::rmsnorm_qkv_rope_pairs`,
/// `Tiles::qkv_pairs`, a candidate in the split attention): program (h, s) scales head h's q
/// and its KV head's k by their 1/rms (`rope::head_rms_inv`) and rounds them to bf16 as `q`
/// and the cache hold them, takes the new position's K row from registers and every other
/// row from the cache (the QKV stage wrote the new V row there), and the program of the
/// first query head of each KV head whose chunk holds the new position writes that K row
/// into the cache, last (after its own reads of the cache).
#[kernel(helpers(head_rms_inv, softmax_start, softmax_tile, store_partial))]
pub fn attn_split_scaled(
    qk_rot: Ptr<f32>,
    qk_ss: Ptr<f32>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
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
    // The QKV stage's rows a program (`qk_ss` holds D / QBM sums a head).
    #[constexpr] QBM: usize,
) {
    let head = program_id(0);
    let split = program_id(1);
    let cur = load(pos);
    let len = cur + 1;
    let chunk = split_chunk(len, SPLITS, BLOCK_N);
    let lo = split * chunk;
    let hi = minimum(lo + chunk, len);
    let group = n_heads / n_kv_heads;
    let kvh = head / group;
    let ku = n_heads + kvh;
    let d = arange(0, D);
    let qr = load(qk_rot + head * D + d);
    let kr = load(qk_rot + ku * D + d);
    let qv = (qr * head_rms_inv(qk_ss, head, eps, D, QBM))
        .to(bf16)
        .to(f32)
        .expand_dims(0);
    let kn = (kr * head_rms_inv(qk_ss, ku, eps, D, QBM)).to(bf16);
    let base = kvh * max_seq * D;
    let (mut m, mut l, mut acc) = softmax_start(D);
    for start in (lo..hi).step_by(BLOCK_N) {
        let n = start + arange(0, BLOCK_N);
        let valid = n < hi;
        let offs = base + n.expand_dims(1) * D + d.expand_dims(0);
        let kt = where_(
            (n == cur).expand_dims(1),
            kn.to(f32).expand_dims(0),
            load(k_cache + offs, (valid & (n < cur)).expand_dims(1), 0.0).to(f32),
        );
        let vt = load(v_cache + offs, valid.expand_dims(1), 0.0).to(f32);
        let s = where_(valid, sum(kt * qv, 1) * scale, -3.0e38);
        let (m_new, l_new, acc_new) = softmax_tile(m, l, acc, s, vt, valid);
        l = l_new;
        acc = acc_new;
        m = m_new;
    }
    store_partial(
        part_m,
        part_l,
        part_acc,
        head * SPLITS + split,
        m,
        l,
        acc,
        d,
    );
    if head % group == 0 {
        if lo <= cur {
            if cur < hi {
                store(k_cache + base + cur * D + d, kn);
            }
        }
    }
}

#[kernel(helpers(merge_head))]
pub fn attn_merge(
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    out: Ptr<bf16>,
    #[constexpr] D: usize,
    #[constexpr] SPLITS: usize,
) {
    merge_head(part_m, part_l, part_acc, out, program_id(0), D, SPLITS);
}

/// Both phases in one grid (n_heads, SPLITS): every program writes its partial, and the
/// last of a head's programs to finish merges the head. `tickets[head]` counts the head's
/// finished programs; the scalar atomic orders each program's partial before its count and
/// the last one's merge after every count, and the last one puts the ticket back to 0 for
/// the next layer and step (tickets start at 0). One hop less than `attn_split` then
/// `attn_merge`, and the merge runs once per head, on whichever CTA finishes the head.
#[kernel(helpers(attend_chunk, merge_head, softmax_start, softmax_tile, store_partial))]
pub fn attn_split_merge(
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    tickets: Ptr<i32>,
    out: Ptr<bf16>,
    group: i32,
    max_seq: i32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
) {
    let head = program_id(0);
    attend_chunk(
        q,
        k_cache,
        v_cache,
        pos,
        part_m,
        part_l,
        part_acc,
        head,
        program_id(1),
        group,
        max_seq,
        scale,
        D,
        BLOCK_N,
        SPLITS,
    );
    let done = atomic_add(tickets + head, 1);
    if done == SPLITS - 1 {
        store(tickets + head, 0);
        merge_head(part_m, part_l, part_acc, out, head, D, SPLITS);
    }
}
