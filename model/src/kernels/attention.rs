//! Attention of one query token over the KV cache (decode), split along the sequence.
//!
//! Phase 1, `attn_split`, grid (n_heads, SPLITS): program (h, s) takes query head h, its
//! KV head h / group (GQA: `group` query heads share a KV head; each query head still
//! gets its own programs, because at decode attention is starved for parallelism, not for
//! bandwidth: seed 000 measured KV sharing slower), and the s-th chunk of the positions
//! 0..=pos. It streams that chunk in [BLOCK_N, head_dim] tiles of K and V with an online
//! softmax: a running max m, a running sum l of exp(score - m) and an unnormalised
//! accumulator acc, rescaled by exp(m_old - m_new) whenever the max grows. It writes its
//! partial (m, l, acc) in f32.
//!
//! Phase 2, `attn_merge`, grid n_heads: merges the SPLITS partials of a head with the same
//! correction, exp(m_s - max m), and divides by the total sum once, at the end.
//! `attn_split_merge` is both in one grid: the last program of each head merges it.
//!
//! `attn_group_split_merge` is the same with the K/V sharing the other way round: program
//! (kv_head, s) loads each K and V tile of its chunk once and attends every query head of
//! the group with it, so the cache is read once per KV head, not once per query head (an
//! experiment, `TileRule::attn_share_kv`: at long contexts the cache is most of the bytes).
//!
//! The split count is fixed (a constexpr), and each split's chunk is computed in-kernel
//! from the position read from the device buffer, so the grid never depends on the
//! step: a later split may be empty (it writes m = -3e38, l = 0, which merges to nothing).
//! Scores are q·k * (1/sqrt(head_dim)), in f32, as in the reference.
use dsl_runtime::prelude::*;

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
    let mut m = -3.0e38;
    let mut l = 0.0;
    let mut acc = zeros([D], f32);
    for start in (lo..hi).step_by(BLOCK_N) {
        let n = start + arange(0, BLOCK_N);
        let valid = n < hi;
        let offs = base + n.expand_dims(1) * D + d.expand_dims(0);
        // K and V in one round trip: V's load is in flight while the scores are reduced.
        let kt = load(k_cache + offs, valid.expand_dims(1), 0.0).to(f32);
        let vt = load(v_cache + offs, valid.expand_dims(1), 0.0).to(f32);
        let s = where_(valid, sum(kt * qv, 1) * scale, -3.0e38);
        let m_new = maximum(m, max(s, 0));
        let alpha = exp(m - m_new); // rescales what was summed against the old max
        let pr = where_(valid, exp(s - m_new), 0.0);
        l = l * alpha + sum(pr, 0);
        acc = acc * alpha + sum(vt * pr.expand_dims(1), 0);
        m = m_new;
    }
    let slot = head * SPLITS + split;
    store(part_m + slot, m);
    store(part_l + slot, l);
    store(part_acc + slot * D + d, acc);
}

/// Head `head`'s SPLITS partials merged into its row of `out`.
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
        (sum(acc * w.expand_dims(1), 0) / l).to(bf16),
    );
}

/// Program (kv_head, split)'s partials (m, l, acc) for the GROUP query heads sharing KV
/// head `kv_head`, over its chunk of 0..=pos: each K and V tile is loaded once, then every
/// head of the group takes its turn with it. A head's running (m, l, acc) is row `j` of
/// [GROUP] / [GROUP, D] tiles, read and written under `g == j`.
#[tile_fn]
#[allow(clippy::too_many_arguments)]
fn attend_chunk_group(
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    kv_head: i32,
    split: i32,
    max_seq: i32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
    #[constexpr] GROUP: usize,
) {
    let len = load(pos) + 1; // positions 0..=pos, the new token's included
    let chunk = split_chunk(len, SPLITS, BLOCK_N);
    let lo = split * chunk;
    let hi = minimum(lo + chunk, len);
    let d = arange(0, D);
    let g = arange(0, GROUP);
    let heads = kv_head * GROUP + g;
    let qs = load(q + heads.expand_dims(1) * D + d.expand_dims(0)).to(f32);
    let base = kv_head * max_seq * D;
    let mut m = zeros([GROUP], f32) - 3.0e38;
    let mut l = zeros([GROUP], f32);
    let mut acc = zeros([GROUP, D], f32);
    for start in (lo..hi).step_by(BLOCK_N) {
        let n = start + arange(0, BLOCK_N);
        let valid = n < hi;
        let offs = base + n.expand_dims(1) * D + d.expand_dims(0);
        let kt = load(k_cache + offs, valid.expand_dims(1), 0.0).to(f32);
        let vt = load(v_cache + offs, valid.expand_dims(1), 0.0).to(f32);
        for j in 0..GROUP {
            let sel = g == j;
            // Row j of q, m and l (the other rows add zeros: exact).
            let qv = sum(where_(sel.expand_dims(1), qs, 0.0), 0).expand_dims(0);
            let m_j = sum(where_(sel, m, 0.0), 0);
            let s = where_(valid, sum(kt * qv, 1) * scale, -3.0e38);
            let m_new = maximum(m_j, max(s, 0));
            let alpha = exp(m_j - m_new); // rescales what was summed against the old max
            let pr = where_(valid, exp(s - m_new), 0.0);
            let l_j = sum(where_(sel, l, 0.0), 0) * alpha + sum(pr, 0);
            let acc_j = sum(vt * pr.expand_dims(1), 0).expand_dims(0);
            acc = where_(sel.expand_dims(1), acc * alpha + acc_j, acc);
            l = where_(sel, zeros([GROUP], f32) + l_j, l);
            m = where_(sel, zeros([GROUP], f32) + m_new, m);
        }
    }
    let slot = heads * SPLITS + split;
    store(part_m + slot, m);
    store(part_l + slot, l);
    store(part_acc + slot.expand_dims(1) * D + d.expand_dims(0), acc);
}

#[kernel(helpers(attend_chunk))]
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
#[kernel(helpers(attend_chunk, merge_head))]
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

/// `attn_split_merge` with the K/V tiles shared by a KV head's query heads: grid
/// (kv_heads, SPLITS); program (kv_head, s) writes the partials of the GROUP heads of its
/// KV head (`attend_chunk_group`), and the last of a KV head's programs merges its GROUP
/// heads. `tickets[kv_head]` counts them, as `tickets[head]` does there.
#[kernel(helpers(attend_chunk_group, merge_head))]
pub fn attn_group_split_merge(
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    pos: Ptr<i32>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    tickets: Ptr<i32>,
    out: Ptr<bf16>,
    max_seq: i32,
    scale: f32,
    #[constexpr] D: usize,
    #[constexpr] BLOCK_N: usize,
    #[constexpr] SPLITS: usize,
    #[constexpr] GROUP: usize,
) {
    let kv_head = program_id(0);
    attend_chunk_group(
        q,
        k_cache,
        v_cache,
        pos,
        part_m,
        part_l,
        part_acc,
        kv_head,
        program_id(1),
        max_seq,
        scale,
        D,
        BLOCK_N,
        SPLITS,
        GROUP,
    );
    let done = atomic_add(tickets + kv_head, 1);
    if done == SPLITS - 1 {
        store(tickets + kv_head, 0);
        for j in 0..GROUP {
            merge_head(
                part_m,
                part_l,
                part_acc,
                out,
                kv_head * GROUP + j,
                D,
                SPLITS,
            );
        }
    }
}
