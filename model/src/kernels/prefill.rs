//! Prefill: the decoder's ops over T prompt rows at once, as tile matrix products (`dot`).
//!
//! Decode runs one token per step, so its matmuls are GEMVs that read every weight once per
//! token. A prompt's T tokens are independent until attention, so prefill runs each op over
//! all T rows (a chunk of the prompt, `prefill.rs` in the crate root): every weight tile is
//! loaded once per [BM, BN] output tile and feeds BM rows on tensor cores.
//!
//! Launch order per layer (`crate::prefill`):
//!
//! ```text
//! embed_rows                                        x[t]   = embed[tokens[t]]
//! per layer: rmsnorm (norm.rs, one program per row)  xn     = rmsnorm(x) · g       (bf16)
//!            gemm_nt                                 qkv    = xn · W_qkvᵀ
//!            qk_norm_rope_rows                       q, K/V cache at start_pos + t
//!            prefill_attention                       attn   = causal softmax(q·Kᵀ)·V (GQA)
//!            gemm_nt_residual                        x     += attn · W_oᵀ
//!            rmsnorm                                 xn     = rmsnorm(x) · g
//!            gemm_nt_gate_up_silu                    act    = silu(xn·W_gᵀ) · (xn·W_uᵀ)
//!            gemm_nt_residual                        x     += act · W_downᵀ
//!              (gemm_nn_residual                     x     += act · W_downT, down stored
//!                                                                transposed: the megakernel's)
//! last row only: widen (into decode's f32 residual stream), then lm_head_argmax +
//!                argmax_merge (the decode kernels, lm_head.rs)
//! ```
//!
//! - Weights are stored as PyTorch keeps them, `[out, in]` row-major, so a program loads a
//!   `[BN, BK]` weight tile (rows of W are contiguous along k) and multiplies by its
//!   transpose: `dot(x_tile, trans(w_tile), acc)`. On tensor cores `trans` costs nothing
//!   (the tile is stored as its rows and read by a plain `ldmatrix`), and both loads are
//!   pipelined `num_stages` deep.
//! - The input and post-attention RMSNorms are their own pass (`norm::rmsnorm`, one
//!   program per row) writing the normed rows in bf16: tensor cores take bf16 operands, so
//!   a normed row would be rounded to bf16 inside a fused prologue anyway, and a separate
//!   pass keeps the GEMM's operand loads the dot's only readers (what the cp.async pipeline
//!   needs). It reads and writes 2 · T · hidden bf16, against a GEMM of T · hidden · (q + 2
//!   kv) multiply-adds. (Transformers' bf16 path rounds the normed rows the same way.)
//! - Gate and up share the normed rows: the fused `[gate; up]` weight gives a program the
//!   gate rows n..n+BN at `n` and the up rows at `inter + n`; two accumulators, SiLU·mul in
//!   f32 in the epilogue. The x tile is loaded once per `dot` (two loads of the same
//!   addresses, the second from L1/L2), so each load has one reader and is pipelined.
//! - Residual adds are epilogues: a program reads and writes only its own [BM, BN] tile of
//!   the residual stream, so it updates it in place.
//! - Attention is FlashAttention-2 (as `src/kernels/attention.rs`): a program owns BM query
//!   rows of one query head and walks the keys of its KV head (GQA: head / group) in BN
//!   blocks straight from the KV cache, positions 0 ..= its last row's position. With
//!   `start_pos` > 0 (a later chunk of a long prompt) the earlier positions are already in
//!   the cache and every row sees them.
//! - q/k RMSNorm + RoPE + the KV-cache write are the decode kernel's math over [BT, D]
//!   tiles of rows: the same cache layout (`[kv_head][pos][head_dim]`, rope.rs), so decode
//!   continues from the prefilled cache with no copy.
//!
//! Every edge is masked (rows past T, columns past N, k past K, keys past the last
//! position), so any T works. Precision: bf16 in memory (x, the normed rows, qkv, q, the
//! cache, the attention output, the MLP activation), f32 inside (accumulators, norms,
//! softmax). Beyond decode's roundings, prefill rounds the normed rows and the softmax
//! probabilities (P·V on tensor cores) to bf16, as FlashAttention and transformers' bf16 do.
use dsl_runtime::prelude::*;

/// x[t] = embed[tokens[t]] for t < T: grid (hidden / BLOCK, T).
#[kernel]
pub fn embed_rows(
    table: Ptr<bf16>,
    tokens: Ptr<i32>,
    x: Ptr<bf16>,
    hidden: i32,
    #[constexpr] BLOCK: usize,
) {
    let t = program_id(1);
    let tok = load(tokens + t);
    let cols = program_id(0) * BLOCK + arange(0, BLOCK);
    let mask = cols < hidden;
    store(
        x + t * hidden + cols,
        load(table + tok * hidden + cols, mask, 0.0),
        mask,
    );
}

/// x = src as f32: a bf16 row (prefill's residual at the prompt's last token) into the
/// decode step's f32 stream, for the lm_head that picks the first new token.
#[kernel]
pub fn widen(src: Ptr<bf16>, x: Ptr<f32>, n: i32, #[constexpr] BLOCK: usize) {
    let cols = program_id(0) * BLOCK + arange(0, BLOCK);
    let mask = cols < n;
    store(x + cols, load(src + cols, mask, 0.0).to(f32), mask);
}

/// y[m, n] = x[m, k] · w[n, k]ᵀ in bf16 (the QKV projection): grid cdiv(m, BM) · cdiv(n, BN),
/// in grouped order (GROUP_M row blocks share each column block, so its weight tiles are
/// still in L2).
#[kernel]
pub fn gemm_nt(
    x: Ptr<bf16>,
    w: Ptr<bf16>,
    y: Ptr<bf16>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
    #[constexpr] GROUP_M: usize,
) {
    let rows = grouped_rows(m, n, BM, BN, GROUP_M);
    let cols = grouped_cols(m, n, BM, BN, GROUP_M);
    let row_ok = rows.expand_dims(1) < m;
    let wrow_ok = cols.expand_dims(1) < n;
    let mut acc = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let k_ok = ks.expand_dims(0) < k;
        let xt = load(
            x + rows.expand_dims(1) * k + ks.expand_dims(0),
            row_ok & k_ok,
            0.0,
        );
        let wt = load(
            w + cols.expand_dims(1) * k + ks.expand_dims(0),
            wrow_ok & k_ok,
            0.0,
        );
        acc = dot(xt, trans(wt), acc);
    }
    store(
        y + rows.expand_dims(1) * n + cols.expand_dims(0),
        acc.to(bf16),
        row_ok & (cols.expand_dims(0) < n),
    );
}

/// res[m, n] += x[m, k] · w[n, k]ᵀ (o_proj, down): the residual add is the epilogue, in f32,
/// one rounding to bf16. Grid and order as [`gemm_nt`].
#[kernel]
pub fn gemm_nt_residual(
    x: Ptr<bf16>,
    w: Ptr<bf16>,
    res: Ptr<bf16>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
    #[constexpr] GROUP_M: usize,
) {
    let rows = grouped_rows(m, n, BM, BN, GROUP_M);
    let cols = grouped_cols(m, n, BM, BN, GROUP_M);
    let row_ok = rows.expand_dims(1) < m;
    let wrow_ok = cols.expand_dims(1) < n;
    let mut acc = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let k_ok = ks.expand_dims(0) < k;
        let xt = load(
            x + rows.expand_dims(1) * k + ks.expand_dims(0),
            row_ok & k_ok,
            0.0,
        );
        let wt = load(
            w + cols.expand_dims(1) * k + ks.expand_dims(0),
            wrow_ok & k_ok,
            0.0,
        );
        acc = dot(xt, trans(wt), acc);
    }
    let offs = res + rows.expand_dims(1) * n + cols.expand_dims(0);
    let mask = row_ok & (cols.expand_dims(0) < n);
    let r = load(offs, mask, 0.0).to(f32);
    store(offs, (r + acc).to(bf16), mask);
}

/// res[m, n] += x[m, k] · w[k, n]: `gemm_nt_residual` for a weight stored `[in, out]`
/// (down in the megakernel engine, which keeps it transposed for the decode step's fused
/// MLP: `DeviceWeights::down_transposed`). The weight tile `[BK, BN]` is read along its
/// rows (contiguous in n) and fed to the dot as it is; on tensor cores it is the MN-major
/// B operand. Grid and order as [`gemm_nt`].
#[kernel]
pub fn gemm_nn_residual(
    x: Ptr<bf16>,
    w: Ptr<bf16>,
    res: Ptr<bf16>,
    m: i32,
    n: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
    #[constexpr] GROUP_M: usize,
) {
    let rows = grouped_rows(m, n, BM, BN, GROUP_M);
    let cols = grouped_cols(m, n, BM, BN, GROUP_M);
    let row_ok = rows.expand_dims(1) < m;
    let col_ok = cols.expand_dims(0) < n;
    let mut acc = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let xt = load(
            x + rows.expand_dims(1) * k + ks.expand_dims(0),
            row_ok & (ks.expand_dims(0) < k),
            0.0,
        );
        let wt = load(
            w + ks.expand_dims(1) * n + cols.expand_dims(0),
            (ks.expand_dims(1) < k) & col_ok,
            0.0,
        );
        acc = dot(xt, wt, acc);
    }
    let offs = res + rows.expand_dims(1) * n + cols.expand_dims(0);
    let mask = row_ok & col_ok;
    let r = load(offs, mask, 0.0).to(f32);
    store(offs, (r + acc).to(bf16), mask);
}

/// act[m, j] = silu(x · w_gate[j]ᵀ) · (x · w_up[j]ᵀ) for j < inter, with `w` the fused
/// `[gate (inter rows); up (inter rows)]` weight, `[2 inter, k]`. Grid and order as
/// [`gemm_nt`] over (m, inter).
#[kernel]
pub fn gemm_nt_gate_up_silu(
    x: Ptr<bf16>,
    w: Ptr<bf16>,
    act: Ptr<bf16>,
    m: i32,
    inter: i32,
    k: i32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] BK: usize,
    #[constexpr] GROUP_M: usize,
) {
    let rows = grouped_rows(m, inter, BM, BN, GROUP_M);
    let cols = grouped_cols(m, inter, BM, BN, GROUP_M);
    let row_ok = rows.expand_dims(1) < m;
    let wrow_ok = cols.expand_dims(1) < inter;
    let mut acc_gate = zeros([BM, BN], f32);
    let mut acc_up = zeros([BM, BN], f32);
    for k0 in (0..k).step_by(BK) {
        let ks = k0 + arange(0, BK);
        let k_ok = ks.expand_dims(0) < k;
        let x_offs = x + rows.expand_dims(1) * k + ks.expand_dims(0);
        let w_offs = w + cols.expand_dims(1) * k + ks.expand_dims(0);
        // One load per dot (the second hits L1/L2): each has the dot as its only reader.
        let xg = load(x_offs, row_ok & k_ok, 0.0);
        let wg = load(w_offs, wrow_ok & k_ok, 0.0);
        acc_gate = dot(xg, trans(wg), acc_gate);
        let xu = load(x_offs, row_ok & k_ok, 0.0);
        let wu = load(w_offs + inter * k, wrow_ok & k_ok, 0.0);
        acc_up = dot(xu, trans(wu), acc_up);
    }
    store(
        act + rows.expand_dims(1) * inter + cols.expand_dims(0),
        (silu(acc_gate) * acc_up).to(bf16),
        row_ok & (cols.expand_dims(0) < inter),
    );
}

/// Per-head q/k RMSNorm, rotate-half RoPE and the KV-cache write for rows t < T at positions
/// start_pos + t: grid (heads + kv_heads, cdiv(T, BT)). Program (h, b) takes head h of rows
/// b·BT .. b·BT + BT: a query head writes roped q rows (`[T, heads · D]`); a key head writes
/// the roped keys and the matching values into the cache at `[kv_head][pos][D]`. The math
/// is `rope::qk_norm_rope`'s, row by row.
#[kernel]
pub fn qk_norm_rope_rows(
    qkv: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    rope: Ptr<f32>,
    q_out: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    t_len: i32,
    start_pos: i32,
    n_heads: i32,
    n_kv_heads: i32,
    max_seq: i32,
    eps: f32,
    #[constexpr] D: usize,
    #[constexpr] BT: usize,
) {
    let head = program_id(0);
    let rows = program_id(1) * BT + arange(0, BT);
    let row_ok = rows.expand_dims(1) < t_len;
    let d = arange(0, D);
    let half = D / 2;
    let partner = (d + half) % D;
    let qkv_rows = (n_heads + 2 * n_kv_heads) * D;
    // [BT, D] cosines and sines of positions start_pos + t: rows of the host's table.
    let at = (start_pos + rows).expand_dims(1) * D + (d % half).expand_dims(0);
    let cos_a = load(rope + at, row_ok, 0.0);
    let sin_a = load(rope + at + half, row_ok, 0.0);
    let sign = where_(d < half, -1.0, 1.0).expand_dims(0);
    let row_base = rows.expand_dims(1) * qkv_rows;
    if head < n_heads {
        let base = row_base + head * D;
        let x = load(qkv + base + d.expand_dims(0), row_ok, 0.0).to(f32);
        let xp = load(qkv + base + partner.expand_dims(0), row_ok, 0.0).to(f32);
        let inv = rsqrt(sum(x * x, 1) / D as f32 + eps).expand_dims(1);
        let xn = x * inv * load(q_norm + d).to(f32).expand_dims(0);
        let xpn = xp * inv * load(q_norm + partner).to(f32).expand_dims(0);
        store(
            q_out + rows.expand_dims(1) * (n_heads * D) + head * D + d.expand_dims(0),
            (xn * cos_a + sign * xpn * sin_a).to(bf16),
            row_ok,
        );
    } else {
        let kvh = head - n_heads;
        let base = row_base + n_heads * D + kvh * D;
        let x = load(qkv + base + d.expand_dims(0), row_ok, 0.0).to(f32);
        let xp = load(qkv + base + partner.expand_dims(0), row_ok, 0.0).to(f32);
        let inv = rsqrt(sum(x * x, 1) / D as f32 + eps).expand_dims(1);
        let xn = x * inv * load(k_norm + d).to(f32).expand_dims(0);
        let xpn = xp * inv * load(k_norm + partner).to(f32).expand_dims(0);
        let slot = (kvh * max_seq + start_pos + rows.expand_dims(1)) * D + d.expand_dims(0);
        store(
            k_cache + slot,
            (xn * cos_a + sign * xpn * sin_a).to(bf16),
            row_ok,
        );
        // V needs no norm or rope: straight into the cache.
        store(
            v_cache + slot,
            load(qkv + base + n_kv_heads * D + d.expand_dims(0), row_ok, 0.0),
            row_ok,
        );
    }
}

/// Causal attention of T query rows (positions start_pos + t) over the cache's positions
/// 0 ..= start_pos + t, FlashAttention-2 style: grid (cdiv(T, BM), heads). q and out are
/// `[T, heads · D]`; the keys and values of query head h are KV head h / group of the
/// layer's cache (`[kv_head][pos][D]`, capacity max_seq).
#[kernel]
pub fn prefill_attention(
    q: Ptr<bf16>,
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    out: Ptr<bf16>,
    t_len: i32,
    start_pos: i32,
    n_heads: i32,
    group: i32,
    max_seq: i32,
    scale: f32,
    #[constexpr] BM: usize,
    #[constexpr] BN: usize,
    #[constexpr] D: usize,
) {
    let start_m = program_id(0) * BM;
    let head = program_id(1);
    let rows = start_m + arange(0, BM);
    let d = arange(0, D);
    let row_ok = rows.expand_dims(1) < t_len;
    let q_offs = rows.expand_dims(1) * (n_heads * D) + head * D + d.expand_dims(0);
    let qt = load(q + q_offs, row_ok, 0.0);
    let base = (head / group) * max_seq * D;
    let qpos = (start_pos + rows).expand_dims(1);
    let qk_scale = scale * 1.4426950408889634; // log2(e): exp(x) = exp2(x · log2(e))
    let mut m_i = full([BM], f32::NEG_INFINITY, f32);
    let mut l_i = zeros([BM], f32);
    let mut acc = zeros([BM, D], f32);
    // Keys 0 .. end: up to this block's last row (or the chunk's last). Key 0 is in the
    // first block and visible to every row, so no row's max stays -inf past it.
    let end = start_pos + minimum(t_len, start_m + BM);
    for n0 in (0..end).step_by(BN) {
        let keys = n0 + arange(0, BN);
        let key_ok = keys.expand_dims(1) < end;
        let kv_offs = base + keys.expand_dims(1) * D + d.expand_dims(0);
        let kt = load(k_cache + kv_offs, key_ok, 0.0);
        let s = dot(qt, trans(kt)) * qk_scale;
        let s = where_(keys.expand_dims(0) <= qpos, s, f32::NEG_INFINITY);
        let m_new = maximum(m_i, max(s, 1));
        let alpha = exp2(m_i - m_new);
        let p = exp2(s - m_new.expand_dims(1));
        l_i = l_i * alpha + sum(p, 1);
        let vt = load(v_cache + kv_offs, key_ok, 0.0);
        acc = dot(p.to(bf16), vt, acc * alpha.expand_dims(1));
        m_i = m_new;
    }
    store(out + q_offs, (acc / l_i.expand_dims(1)).to(bf16), row_ok);
}

/// Tile sizes and launch options of the prefill kernels, and the chunk length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillTiles {
    /// Prompt rows per chunk (scratch is sized by it).
    pub chunk: usize,
    /// The GEMMs: [BM, BN] output tiles, BK-wide k steps, GROUP_M row blocks per group.
    pub gemm_bm: usize,
    pub gemm_bn: usize,
    pub gemm_bk: usize,
    pub group_m: usize,
    pub gemm_warps: u32,
    pub gemm_stages: u32,
    /// Attention: BM query rows per program, BN keys per step.
    pub attn_bm: usize,
    pub attn_bn: usize,
    pub attn_warps: u32,
    pub attn_stages: u32,
    /// Rows per program of the q/k norm + rope + cache write.
    pub rope_bt: usize,
    /// Warps of the row-wise kernels (embedding, RMSNorm, rope).
    pub row_warps: u32,
}

/// Default chunk on a GPU: long enough that the GEMMs run at full width, short enough that
/// the scratch of Qwen3-8B stays near 140 MB.
pub const GPU_CHUNK: usize = 2048;
/// Default chunk on the interpreter.
pub const INTERPRETER_CHUNK: usize = 512;

impl PrefillTiles {
    /// On a GPU: Triton's mma.sync matmul tiles (128 x 128 x 32, 4 stages, GROUP_M 8) with 8
    /// warps (at 4 ptxas (sm_90) puts the gate/up GEMM's two [128, 128] f32 accumulators at
    /// 255 registers and spills; at 8 gemm takes 159 registers, gate/up 244), and the
    /// attention in 64 x 64 blocks (query rows x keys) on 4 warps, 3 stages: with its softmax
    /// in the fragment's registers (`EmitOptions::frag_rows`; 231 registers with `fast_exp2`,
    /// no spill) each warp holds 16 whole rows, as FlashAttention-2's. On an H200 the fastest of five tiles
    /// at 512 and 2048 prompt tokens (4.3 / 10.4 ms to the first token against 4.6 / 11.2 at
    /// session 34's 128 x 64 on 8 warps) and 1.3% behind 128 x 128 at 8192 (61.7 / 60.9 ms;
    /// docs/PERF.md, session 35). `TESSERA_PREFILL_ATTN` overrides the attention's
    /// ([`PrefillTiles::with_attn_env`]).
    /// On the interpreter: small tiles, so tiny test models do not pay for padding (the GPU
    /// tiles are tested there too).
    pub fn for_device(dev: &Device) -> PrefillTiles {
        if dev.is_cuda() {
            PrefillTiles::gpu().with_attn_env()
        } else {
            PrefillTiles {
                chunk: INTERPRETER_CHUNK,
                gemm_bm: 16,
                gemm_bn: 32,
                gemm_bk: 32,
                group_m: 4,
                gemm_warps: 4,
                gemm_stages: 2,
                attn_bm: 16,
                attn_bn: 16,
                attn_warps: 4,
                attn_stages: 2,
                rope_bt: 4,
                row_warps: 4,
            }
        }
    }

    /// The attention's tiles from `TESSERA_PREFILL_ATTN=BM,BN,WARPS,STAGES` (a knob for an
    /// A/B on the GPU, e.g. `128,128,8,2`, the fastest at 8192 prompt tokens in session 35);
    /// unset or not four numbers, these tiles.
    pub fn with_attn_env(self) -> PrefillTiles {
        let v = std::env::var("TESSERA_PREFILL_ATTN").unwrap_or_default();
        let n: Vec<usize> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        match n[..] {
            [bm, bn, w, st] => PrefillTiles {
                attn_bm: bm,
                attn_bn: bn,
                attn_warps: w as u32,
                attn_stages: st as u32,
                ..self
            },
            _ => self,
        }
    }

    /// The GPU tiles (whatever the device).
    pub fn gpu() -> PrefillTiles {
        PrefillTiles {
            chunk: GPU_CHUNK,
            gemm_bm: 128,
            gemm_bn: 128,
            gemm_bk: 32,
            group_m: 8,
            gemm_warps: 8,
            gemm_stages: 4,
            attn_bm: 64,
            attn_bn: 64,
            attn_warps: 4,
            attn_stages: 3,
            rope_bt: 16,
            row_warps: 4,
        }
    }
}
