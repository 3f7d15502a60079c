//! The decoder's ops as `#[kernel]`s, one file per op or small group, and the rule that
//! derives their tile sizes from a model's `Config`.
//!
//! A decode step launches, in order (`dsl_engine.rs`):
//!
//! | op | kernel | grid |
//! |---|---|---|
//! | embedding gather | `embedding` | hidden / BLOCK |
//! | input RMSNorm + fused QKV GEMV | `rmsnorm_gemv` | (q + 2 kv rows) / BM |
//! | q/k RMSNorm + RoPE + KV-cache write | `qk_norm_rope` | heads + kv_heads |
//! | attention, split-KV phase | `attn_split` | (heads, SPLITS) |
//! | attention, merge phase | `attn_merge` | heads |
//! | o_proj GEMV + residual | `gemv_residual` | hidden / BM |
//! | post-attn RMSNorm + gate/up GEMV + SiLU·mul | `rmsnorm_gate_up_silu` | intermediate / BM |
//! | down GEMV + residual | `gemv_residual` | hidden / BM |
//! | final RMSNorm + lm_head + block argmax (Gumbel-max sampling) | `lm_head_argmax` | vocab / BM |
//! | argmax over blocks | `argmax_merge` | 1 |
//!
//! Every kernel takes its dimensions as i32 scalars or constexprs, so one source serves
//! Qwen3-0.6B to 32B and the tiny test checkpoints.
pub mod attention;
pub mod embedding;
pub mod gemv;
pub mod lm_head;
pub mod mlp;
pub mod norm;
pub mod rope;

use crate::config::Config;
use dsl_runtime::{ConstVal, Shipped};

/// Programs a GEMV grid should have at least: ~2 per SM of a 132-SM H100, so the weight
/// stream is spread over the whole GPU (at M = 1 the grid size *is* the speed).
pub const GEMV_MIN_PROGRAMS: usize = 256;
/// Programs the attention split phase aims for (heads × splits).
pub const ATTN_TARGET_PROGRAMS: usize = 256;
/// Warps per program for every op (4 warps = 128 threads; the tiles below are ≤ 8k elements).
pub const NUM_WARPS: u32 = 4;

/// Tile sizes of one GEMV: BM output rows per program, BK columns per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemv {
    pub bm: usize,
    pub bk: usize,
}

impl Gemv {
    /// The rule: BK = min(512, k rounded up to a power of two) (a 1 KB contiguous bf16
    /// segment per row and step; the tail is masked); BM = the largest of 16, 8, 4, 2, 1
    /// that still leaves `GEMV_MIN_PROGRAMS` programs.
    ///
    /// Every real Qwen3 gets BK = 512. Tiles need not be powers of two, but a BK like 160
    /// (a test checkpoint's intermediate size) leaves padding lanes in the CUDA layout
    /// whose shared-memory reads run past the array (an emitter bug, reported); a power
    /// of two avoids it and costs only masked lanes.
    pub fn for_shape(m: usize, k: usize) -> Gemv {
        let mut bm = 16;
        while bm > 1 && m.div_ceil(bm) < GEMV_MIN_PROGRAMS {
            bm /= 2;
        }
        Gemv {
            bm,
            bk: k.next_power_of_two().clamp(1, 512),
        }
    }
    /// Programs for `m` rows.
    pub fn programs(&self, m: usize) -> usize {
        m.div_ceil(self.bm)
    }
}

/// Every constexpr of a decode step, derived from the config (`Tiles::for_config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiles {
    pub embed_block: usize,
    pub qkv: Gemv,
    pub o_proj: Gemv,
    pub gate_up: Gemv,
    pub down: Gemv,
    pub lm_head: Gemv,
    /// Positions per attention tile ([BLOCK_N, head_dim] K and V tiles).
    pub attn_block_n: usize,
    /// Sequence splits per query head (attention phase 1 grid axis 1).
    pub attn_splits: usize,
    /// Tile of the argmax merge over lm_head blocks.
    pub argmax_block: usize,
}

impl Tiles {
    pub fn for_config(cfg: &Config) -> Tiles {
        let h = cfg.hidden_size;
        let lm_head = Gemv::for_shape(cfg.vocab_size, h);
        Tiles {
            embed_block: h.min(1024),
            qkv: Gemv::for_shape(cfg.q_dim() + 2 * cfg.kv_dim(), h),
            o_proj: Gemv::for_shape(h, cfg.q_dim()),
            // m = intermediate: a program owns BM gate rows and the BM matching up rows.
            gate_up: Gemv::for_shape(cfg.intermediate_size, h),
            down: Gemv::for_shape(h, cfg.intermediate_size),
            lm_head,
            attn_block_n: 32,
            attn_splits: (ATTN_TARGET_PROGRAMS / cfg.num_attention_heads).clamp(1, 16),
            argmax_block: lm_head.programs(cfg.vocab_size).min(1024),
        }
    }
}

/// Qwen3-0.6B's shape, for `shipped()`'s default constexprs.
pub fn qwen3_0_6b() -> Config {
    Config {
        vocab_size: 151_936,
        hidden_size: 1024,
        intermediate_size: 3072,
        num_hidden_layers: 28,
        num_attention_heads: 16,
        num_key_value_heads: 8,
        head_dim: 128,
        max_position_embeddings: 40_960,
        rms_norm_eps: 1e-6,
        rope_theta: 1e6,
        tie_word_embeddings: true,
        bos_token_id: None,
        eos_token_ids: vec![151_645, 151_643],
    }
}

/// Every kernel of the decode step, with its constexprs at Qwen3-0.6B's dims.
pub fn shipped() -> Vec<Shipped> {
    let cfg = qwen3_0_6b();
    let t = Tiles::for_config(&cfg);
    let int = |v: usize| ConstVal::Int(v as i64);
    let gemv = |g: Gemv| vec![("BM", int(g.bm)), ("BK", int(g.bk))];
    let hd = cfg.head_dim;
    let k = |kernel, constexprs, about| Shipped {
        kernel,
        constexprs,
        num_warps: NUM_WARPS,
        about,
    };
    vec![
        k(
            &embedding::embedding::KERNEL,
            vec![("BLOCK", int(t.embed_block))],
            "x = embed_tokens[token], token read from a device buffer",
        ),
        k(
            &norm::rmsnorm::KERNEL,
            vec![("BLOCK", int(t.embed_block))],
            "y = x / rms(x) * w (standalone; the step fuses norms into GEMVs)",
        ),
        k(
            &gemv::rmsnorm_gemv::KERNEL,
            gemv(t.qkv),
            "y = W · rmsnorm(x): input norm (redundant per program) + fused QKV GEMV",
        ),
        k(
            &rope::qk_norm_rope::KERNEL,
            vec![("D", int(hd))],
            "per-head q/k RMSNorm + rotate-half RoPE + K/V cache write",
        ),
        k(
            &attention::attn_split::KERNEL,
            vec![
                ("D", int(hd)),
                ("BLOCK_N", int(t.attn_block_n)),
                ("SPLITS", int(t.attn_splits)),
            ],
            "decode attention, split-KV phase: partial (max, sum, acc) per (head, split), GQA",
        ),
        k(
            &attention::attn_merge::KERNEL,
            vec![("D", int(hd)), ("SPLITS", int(t.attn_splits))],
            "decode attention, merge of the split partials (online-softmax rescale)",
        ),
        k(
            &gemv::gemv_residual::KERNEL,
            gemv(t.o_proj),
            "res += W · x: o_proj / down GEMV with the residual add as epilogue",
        ),
        k(
            &mlp::rmsnorm_gate_up_silu::KERNEL,
            gemv(t.gate_up),
            "act = silu(gate·h) * (up·h), h = rmsnorm(x): post-attn norm + fused gate/up",
        ),
        k(
            &lm_head::lm_head_argmax::KERNEL,
            gemv(t.lm_head),
            "final norm + lm_head GEMV + per-block (max, argmax), Gumbel-max when sampling: phase 1",
        ),
        k(
            &lm_head::argmax_merge::KERNEL,
            vec![("BLOCK", int(t.argmax_block))],
            "argmax over the lm_head blocks: greedy phase 2, one int out",
        ),
    ]
}
