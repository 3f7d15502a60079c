//! The megakernel engine: a whole decode step (embedding, every layer, the output head and
//! its fused argmax) as ONE `#[megakernel]` launch per token.
//!
//! `decode_step` below is the same sequence of kernels the kernels engine launches one by
//! one (`kernels_engine.rs`); `#[megakernel]` turns it into one persistent cooperative kernel,
//! with a counter wait only where a stage reads what an earlier one wrote. Layer `l`'s
//! weights are windows `&w[l * n..(l + 1) * n]` into buffers stacked over layers, so the
//! scheduler sees which layer a stage touches, and CTAs with no program in a stage (the
//! embedding's few programs, say) prefetch the next stages' windows into L2.
//!
//! Every dimension and tile size is a constexpr taken from config.json (`Tiles::for_config`),
//! so this one source serves every dense Qwen3: the engine binds them at startup, NVRTC
//! compiles the specialised kernel once, and the disk cache keeps it for the next run. The
//! KV-cache capacity is a run-time scalar: `--max-context` does not recompile.
//!
//! Every kernel reads the token id and the position from device buffers, so the launch's
//! arguments never change, and the step's last stage (`argmax_merge`) sets them for the
//! next step itself. A step launches once and reads back the 4-byte token that the lm_head's
//! fused argmax chose (greedy, or a Gumbel-max draw for temperature sampling); it copies
//! a token id in only when the host chooses the token (a prompt token, or top-k / top-p
//! sampling, which reads the logits instead). Nothing else goes on the stream per token:
//! the kernel leaves its sync words zeroed for the next launch, and the watchdog's error
//! word is read every `CHECK_EVERY` steps (a hang is a bug; it is reported that late).
use crate::config::Config;
use crate::device_model::DeviceModel;
use crate::engine::{Engine, StepOutput};
use crate::error::ModelError;
use crate::kernels::attention::{
    attn_split, attn_split_ahead, attn_split_merge, attn_split_scaled,
};
use crate::kernels::embedding::embedding;
use crate::kernels::gemv::{
    attn_head_residual, attn_rope_head_residual, attn_scale_head_residual, gemv_head_residual,
    gemv_head_residual_tiles, gemv_residual, gemv_residual_copy, gemv_residual_tiles,
};
use crate::kernels::lm_head::{argmax_merge, lm_head_argmax, lm_head_argmax_tiles};
use crate::kernels::mlp::{rmsnorm_gate_up_silu, rmsnorm_gate_up_silu_tiles, rmsnorm_mlp_tiles};
use crate::kernels::rope::{rmsnorm_qkv_rope, rmsnorm_qkv_rope_pairs, rmsnorm_qkv_rope_tiles};
use crate::kernels::{TileRule, Tiles};
use crate::kernels_engine::Output;
use crate::sampling::SamplingParams;
use crate::weights::Weights;
use dsl_runtime::mega::MegaOptions;
use dsl_runtime::prelude::*;
use dsl_runtime::{ptr, Binding, Readback};

/// One decode step of a dense Qwen3. Inputs: `token` and `pos` (one i32 each); outputs:
/// `next` (the chosen token), `logits`, and the K/V of `pos` written into the caches.
#[megakernel]
pub fn decode_step(
    // Per-step inputs, and the lm_head's sampling state (seed, 1 / temperature; 0 = greedy).
    token: Ptr<i32>,
    pos: Ptr<i32>,
    seed: Ptr<i32>,
    inv_temp: Ptr<f32>,
    // Weights; the per-layer ones stacked over layers.
    embed_tokens: Ptr<bf16>,
    lm_head: Ptr<bf16>,
    norm: Ptr<bf16>,
    // Each position's rotary cosines and sines ([max_seq, HEAD_DIM], the host's table).
    rope: Ptr<f32>,
    input_layernorm: Ptr<bf16>,
    qkv_proj: Ptr<bf16>,
    q_norm: Ptr<bf16>,
    k_norm: Ptr<bf16>,
    o_proj: Ptr<bf16>,
    post_attention_layernorm: Ptr<bf16>,
    gate_up_proj: Ptr<bf16>,
    // [L, hidden, inter]; with FUSED_MLP transposed, [L, inter, hidden] (`rmsnorm_mlp_tiles`).
    down_proj: Ptr<bf16>,
    // [layer, kv_head, position (max_seq of them), head_dim]
    k_cache: Ptr<bf16>,
    v_cache: Ptr<bf16>,
    // Activations (the residual stream `x` in f32) and the two-phase ops' scratch.
    x: Ptr<f32>,
    // With FUSED_MLP: the MLP's input, a copy of `x` (o_proj's by rows, or QKV's that o_proj
    // per head adds into), which its norm reads while it adds into `x`.
    x_mlp: Ptr<f32>,
    qkv: Ptr<bf16>,
    q: Ptr<bf16>,
    // With QKV_PAIRS: the q and k heads weighted and rotated, not yet scaled by their 1/rms,
    // and each QKV program's sum of squares (`rmsnorm_qkv_rope_pairs`).
    qk_rot: Ptr<f32>,
    qk_ss: Ptr<f32>,
    attn: Ptr<bf16>,
    act: Ptr<bf16>,
    part_m: Ptr<f32>,
    part_l: Ptr<f32>,
    part_acc: Ptr<f32>,
    tickets: Ptr<i32>,
    logits: Ptr<f32>,
    part_max: Ptr<f32>,
    part_idx: Ptr<i32>,
    next: Ptr<i32>,
    max_seq: i32,
    eps: f32,
    scale: f32,
    // The model's shape (config.json) ...
    #[constexpr] LAYERS: usize,
    #[constexpr] HIDDEN: usize,
    #[constexpr] INTER: usize,
    #[constexpr] VOCAB: usize,
    #[constexpr] HEADS: usize,
    #[constexpr] KV_HEADS: usize,
    #[constexpr] HEAD_DIM: usize,
    // ... and the tiles derived from it (`Tiles::for_config`).
    #[constexpr] EMBED_BLOCK: usize,
    #[constexpr] QKV_BM: usize,
    #[constexpr] QKV_BK: usize,
    #[constexpr] QKV_TILED: bool,
    #[constexpr] QKV_TILES: usize,
    #[constexpr] O_BM: usize,
    #[constexpr] O_BK: usize,
    #[constexpr] O_TILED: bool,
    #[constexpr] O_TILES: usize,
    // The fused MLP's o_proj loads its weights first (`Tiles::o_weights_first`).
    #[constexpr] O_WEIGHTS_FIRST: bool,
    #[constexpr] GU_BM: usize,
    #[constexpr] GU_BK: usize,
    #[constexpr] GU_NORM_ONCE: bool,
    #[constexpr] GU_TILES: usize,
    #[constexpr] DOWN_BM: usize,
    #[constexpr] DOWN_BK: usize,
    #[constexpr] DOWN_TILED: bool,
    #[constexpr] DOWN_TILES: usize,
    // The MLP as one stage (`rmsnorm_mlp_tiles`, o_proj as `gemv_head_residual` or
    // `gemv_residual_copy`), the engine's default (`MegakernelOptions::fused_mlp`).
    #[constexpr] FUSED_MLP: bool,
    #[constexpr] MLP_BM: usize,
    #[constexpr] MLP_BK: usize,
    #[constexpr] MLP_TILES: usize,
    // Copies of the residual stream the fused MLP adds into (`Tiles::resid_copies`; 1
    // unless fused): every reader sums them, o_proj by rows folds them, the embedding
    // zeroes them.
    #[constexpr] RESID_COPIES: usize,
    // o_proj split over the query heads, each program merging its head's attention
    // partials (`gemv_head_residual`, OH_BM rows a program; attention then writes partials
    // only, and QKV leaves `x_mlp` holding the residual in QKV_COPY_ROWS-row pieces): the
    // default up to hidden 2560 (`o_heads_rule`). Needs FUSED_MLP.
    #[constexpr] O_HEADS: bool,
    #[constexpr] OH_BM: usize,
    // Row blocks per o_proj-per-head program (`gemv_head_residual_tiles` when OH_TILED).
    #[constexpr] OH_TILED: bool,
    #[constexpr] OH_TILES: usize,
    #[constexpr] QKV_COPY_ROWS: usize,
    // The attention's next K/V tile in flight while one reduces (`attn_split_ahead`, with
    // O_HEADS; `Tiles::attn_ahead`, a candidate).
    #[constexpr] ATTN_AHEAD: bool,
    // The attention computed by o_proj's programs, each head's whole (`attn_head_residual`,
    // with O_HEADS; `Tiles::attn_in_o`, a specialisation for short contexts).
    #[constexpr] ATTN_IN_O: bool,
    // With ATTN_IN_O: o_proj's programs norm and rope the raw heads too
    // (`attn_rope_head_residual`), and the QKV stage leaves them raw (QKV_FINISH false).
    #[constexpr] ATTN_ROPE: bool,
    #[constexpr] QKV_FINISH: bool,
    // Each QKV program ropes its own half-head pairs and the attention applies each head's
    // 1/rms (`rmsnorm_qkv_rope_pairs`, then `attn_scale_head_residual` with ATTN_IN_O or
    // `attn_split_scaled`; `Tiles::qkv_pairs`): no ticket, no head finished.
    #[constexpr] QKV_PAIRS: bool,
    #[constexpr] LM_BM: usize,
    #[constexpr] LM_BK: usize,
    #[constexpr] LM_NORM_ONCE: bool,
    #[constexpr] LM_TILES: usize,
    #[constexpr] ATTN_BLOCK_N: usize,
    #[constexpr] ATTN_SPLITS: usize,
    #[constexpr] ARGMAX_BLOCK: usize,
) {
    let q_dim = HEADS * HEAD_DIM;
    let qkv_rows = (HEADS + 2 * KV_HEADS) * HEAD_DIM;
    let kv_layer = KV_HEADS * max_seq * HEAD_DIM;

    embedding(
        grid(cdiv(HIDDEN, EMBED_BLOCK)),
        embed_tokens,
        token,
        x,
        HIDDEN,
        EMBED_BLOCK,
        RESID_COPIES,
    );
    for layer in 0..LAYERS {
        // Attention block: input norm + QKV with each head's q/k norm + rope + KV write
        // done by its last program, then split-KV attention, each head merged by o_proj
        // per head (O_HEADS) or by its last split.
        if QKV_PAIRS {
            rmsnorm_qkv_rope_pairs(
                grid(cdiv(qkv_rows, QKV_BM)),
                x,
                x_mlp,
                input_layernorm.layer(layer, HIDDEN),
                qkv_proj.layer(layer, qkv_rows * HIDDEN),
                q_norm.layer(layer, HEAD_DIM),
                k_norm.layer(layer, HEAD_DIM),
                rope,
                pos,
                qk_rot,
                qk_ss,
                v_cache.layer(layer, kv_layer),
                qkv_rows,
                HIDDEN,
                HEADS,
                KV_HEADS,
                max_seq,
                eps,
                QKV_BM,
                QKV_BK,
                HEAD_DIM,
                RESID_COPIES,
                O_HEADS,
                QKV_COPY_ROWS,
            );
        } else if QKV_TILED {
            // QKV_TILES row tiles per program, the norm once (`Tiles::qkv_tiles`).
            rmsnorm_qkv_rope_tiles(
                grid(cdiv(qkv_rows, QKV_BM * QKV_TILES)),
                x,
                x_mlp,
                input_layernorm.layer(layer, HIDDEN),
                qkv_proj.layer(layer, qkv_rows * HIDDEN),
                qkv,
                q_norm.layer(layer, HEAD_DIM),
                k_norm.layer(layer, HEAD_DIM),
                rope,
                pos,
                q,
                k_cache.layer(layer, kv_layer),
                v_cache.layer(layer, kv_layer),
                &tickets[HEADS..2 * HEADS + 2 * KV_HEADS],
                qkv_rows,
                HIDDEN,
                HEADS,
                KV_HEADS,
                max_seq,
                eps,
                QKV_BM,
                QKV_BK,
                HEAD_DIM,
                QKV_TILES,
                RESID_COPIES,
                O_HEADS,
                QKV_COPY_ROWS,
                QKV_FINISH,
            );
        } else {
            rmsnorm_qkv_rope(
                grid(cdiv(qkv_rows, QKV_BM)),
                x,
                x_mlp,
                input_layernorm.layer(layer, HIDDEN),
                qkv_proj.layer(layer, qkv_rows * HIDDEN),
                qkv,
                q_norm.layer(layer, HEAD_DIM),
                k_norm.layer(layer, HEAD_DIM),
                rope,
                pos,
                q,
                k_cache.layer(layer, kv_layer),
                v_cache.layer(layer, kv_layer),
                &tickets[HEADS..2 * HEADS + 2 * KV_HEADS],
                qkv_rows,
                HIDDEN,
                HEADS,
                KV_HEADS,
                max_seq,
                eps,
                QKV_BM,
                QKV_BK,
                HEAD_DIM,
                RESID_COPIES,
                O_HEADS,
                QKV_COPY_ROWS,
                QKV_FINISH,
            );
        }
        if O_HEADS {
            if ATTN_IN_O {
                if QKV_PAIRS {
                    attn_scale_head_residual(
                        grid(HEADS, cdiv(HIDDEN, OH_BM)),
                        o_proj.layer(layer, HIDDEN * q_dim),
                        qk_rot,
                        qk_ss,
                        k_cache.layer(layer, kv_layer),
                        v_cache.layer(layer, kv_layer),
                        pos,
                        x,
                        x_mlp,
                        HEADS,
                        KV_HEADS,
                        max_seq,
                        eps,
                        scale,
                        HIDDEN,
                        q_dim,
                        OH_BM,
                        HEAD_DIM,
                        ATTN_BLOCK_N,
                        RESID_COPIES,
                        QKV_BM,
                    );
                } else if ATTN_ROPE {
                    attn_rope_head_residual(
                        grid(HEADS, cdiv(HIDDEN, OH_BM * OH_TILES)),
                        o_proj.layer(layer, HIDDEN * q_dim),
                        qkv,
                        q_norm.layer(layer, HEAD_DIM),
                        k_norm.layer(layer, HEAD_DIM),
                        rope,
                        k_cache.layer(layer, kv_layer),
                        v_cache.layer(layer, kv_layer),
                        pos,
                        x,
                        x_mlp,
                        HEADS,
                        KV_HEADS,
                        max_seq,
                        eps,
                        scale,
                        HIDDEN,
                        q_dim,
                        OH_BM,
                        HEAD_DIM,
                        ATTN_BLOCK_N,
                        RESID_COPIES,
                        OH_TILES,
                    );
                } else {
                    // One stage: each o_proj program attends its head over every position.
                    attn_head_residual(
                        grid(HEADS, cdiv(HIDDEN, OH_BM)),
                        o_proj.layer(layer, HIDDEN * q_dim),
                        q,
                        k_cache.layer(layer, kv_layer),
                        v_cache.layer(layer, kv_layer),
                        pos,
                        x,
                        x_mlp,
                        HEADS / KV_HEADS,
                        max_seq,
                        scale,
                        HIDDEN,
                        q_dim,
                        OH_BM,
                        HEAD_DIM,
                        ATTN_BLOCK_N,
                        RESID_COPIES,
                    );
                }
            } else {
                // Partials only: o_proj merges each head (`gemv_head_residual`).
                if ATTN_AHEAD {
                    attn_split_ahead(
                        grid(HEADS, ATTN_SPLITS),
                        q,
                        k_cache.layer(layer, kv_layer),
                        v_cache.layer(layer, kv_layer),
                        pos,
                        part_m,
                        part_l,
                        part_acc,
                        HEADS / KV_HEADS,
                        max_seq,
                        scale,
                        HEAD_DIM,
                        ATTN_BLOCK_N,
                        ATTN_SPLITS,
                    );
                } else if QKV_PAIRS {
                    attn_split_scaled(
                        grid(HEADS, ATTN_SPLITS),
                        qk_rot,
                        qk_ss,
                        k_cache.layer(layer, kv_layer),
                        v_cache.layer(layer, kv_layer),
                        pos,
                        part_m,
                        part_l,
                        part_acc,
                        HEADS,
                        KV_HEADS,
                        max_seq,
                        eps,
                        scale,
                        HEAD_DIM,
                        ATTN_BLOCK_N,
                        ATTN_SPLITS,
                        QKV_BM,
                    );
                } else {
                    attn_split(
                        grid(HEADS, ATTN_SPLITS),
                        q,
                        k_cache.layer(layer, kv_layer),
                        v_cache.layer(layer, kv_layer),
                        pos,
                        part_m,
                        part_l,
                        part_acc,
                        HEADS / KV_HEADS,
                        max_seq,
                        scale,
                        HEAD_DIM,
                        ATTN_BLOCK_N,
                        ATTN_SPLITS,
                    );
                }
                if OH_TILED {
                    gemv_head_residual_tiles(
                        grid(HEADS, cdiv(HIDDEN, OH_BM * OH_TILES)),
                        o_proj.layer(layer, HIDDEN * q_dim),
                        part_m,
                        part_l,
                        part_acc,
                        x,
                        x_mlp,
                        HIDDEN,
                        q_dim,
                        OH_BM,
                        HEAD_DIM,
                        ATTN_SPLITS,
                        RESID_COPIES,
                        OH_TILES,
                    );
                } else {
                    gemv_head_residual(
                        grid(HEADS, cdiv(HIDDEN, OH_BM)),
                        o_proj.layer(layer, HIDDEN * q_dim),
                        part_m,
                        part_l,
                        part_acc,
                        x,
                        x_mlp,
                        HIDDEN,
                        q_dim,
                        OH_BM,
                        HEAD_DIM,
                        ATTN_SPLITS,
                        RESID_COPIES,
                    );
                }
            }
        } else {
            attn_split_merge(
                grid(HEADS, ATTN_SPLITS),
                q,
                k_cache.layer(layer, kv_layer),
                v_cache.layer(layer, kv_layer),
                pos,
                part_m,
                part_l,
                part_acc,
                &tickets[0..HEADS],
                attn,
                HEADS / KV_HEADS,
                max_seq,
                scale,
                HEAD_DIM,
                ATTN_BLOCK_N,
                ATTN_SPLITS,
            );
            if FUSED_MLP {
                // The residual add, and a copy of the new x for the fused MLP's norm; one tile
                // per program (O_TILES applies to the two-stage MLP's o_proj only).
                gemv_residual_copy(
                    grid(cdiv(HIDDEN, O_BM)),
                    o_proj.layer(layer, HIDDEN * q_dim),
                    attn,
                    x,
                    x_mlp,
                    HIDDEN,
                    q_dim,
                    O_BM,
                    O_BK,
                    RESID_COPIES,
                    O_WEIGHTS_FIRST,
                );
            } else if O_TILED {
                // O_TILES row tiles per program, x once (`Tiles::o_proj_tiles`; one k step).
                gemv_residual_tiles(
                    grid(cdiv(HIDDEN, O_BM * O_TILES)),
                    o_proj.layer(layer, HIDDEN * q_dim),
                    attn,
                    x,
                    HIDDEN,
                    q_dim,
                    O_BM,
                    O_BK,
                    O_TILES,
                );
            } else {
                gemv_residual(
                    grid(cdiv(HIDDEN, O_BM)),
                    o_proj.layer(layer, HIDDEN * q_dim),
                    attn,
                    x,
                    HIDDEN,
                    q_dim,
                    O_BM,
                    O_BK,
                );
            }
        }
        // MLP block: post-attention norm + gate/up + SiLU·mul, then down + residual; with
        // FUSED_MLP all of it in one stage, split over the intermediate dimension.
        if FUSED_MLP {
            rmsnorm_mlp_tiles(
                grid(cdiv(INTER, MLP_BM * MLP_TILES)),
                x_mlp,
                post_attention_layernorm.layer(layer, HIDDEN),
                gate_up_proj.layer(layer, 2 * INTER * HIDDEN),
                down_proj.layer(layer, HIDDEN * INTER),
                x,
                INTER,
                HIDDEN,
                eps,
                MLP_BM,
                MLP_BK,
                MLP_TILES,
                RESID_COPIES,
            );
        } else {
            if GU_NORM_ONCE {
                // GU_TILES row tiles per program, the norm once (`Tiles::gate_up_tiles`): one
                // k step covers the hidden size, as at every Qwen3 size up to 8B.
                rmsnorm_gate_up_silu_tiles(
                    grid(cdiv(INTER, GU_BM * GU_TILES)),
                    x,
                    post_attention_layernorm.layer(layer, HIDDEN),
                    gate_up_proj.layer(layer, 2 * INTER * HIDDEN),
                    act,
                    INTER,
                    HIDDEN,
                    eps,
                    GU_BM,
                    GU_BK,
                    GU_TILES,
                );
            } else {
                rmsnorm_gate_up_silu(
                    grid(cdiv(INTER, GU_BM)),
                    x,
                    post_attention_layernorm.layer(layer, HIDDEN),
                    gate_up_proj.layer(layer, 2 * INTER * HIDDEN),
                    act,
                    INTER,
                    HIDDEN,
                    eps,
                    GU_BM,
                    GU_BK,
                );
            }
            if DOWN_TILED {
                // As o_proj (`Tiles::down_tiles`).
                gemv_residual_tiles(
                    grid(cdiv(HIDDEN, DOWN_BM * DOWN_TILES)),
                    down_proj.layer(layer, HIDDEN * INTER),
                    act,
                    x,
                    HIDDEN,
                    INTER,
                    DOWN_BM,
                    DOWN_BK,
                    DOWN_TILES,
                );
            } else {
                gemv_residual(
                    grid(cdiv(HIDDEN, DOWN_BM)),
                    down_proj.layer(layer, HIDDEN * INTER),
                    act,
                    x,
                    HIDDEN,
                    INTER,
                    DOWN_BM,
                    DOWN_BK,
                );
            }
        }
    }
    // Final norm + lm_head + per-block (max, argmax), then the argmax over blocks.
    if LM_NORM_ONCE {
        // LM_TILES blocks per program, the norm once (`Tiles::lm_head_tiles`), as gate/up.
        lm_head_argmax_tiles(
            grid(cdiv(VOCAB, LM_BM * LM_TILES)),
            x,
            norm,
            lm_head,
            logits,
            part_max,
            part_idx,
            pos,
            seed,
            inv_temp,
            VOCAB,
            HIDDEN,
            eps,
            LM_BM,
            LM_BK,
            LM_TILES,
            RESID_COPIES,
        );
    } else {
        lm_head_argmax(
            grid(cdiv(VOCAB, LM_BM)),
            x,
            norm,
            lm_head,
            logits,
            part_max,
            part_idx,
            pos,
            seed,
            inv_temp,
            VOCAB,
            HIDDEN,
            eps,
            LM_BM,
            LM_BK,
            RESID_COPIES,
        );
    }
    argmax_merge(
        grid(1),
        part_max,
        part_idx,
        next,
        token,
        pos,
        cdiv(VOCAB, LM_BM),
        ARGMAX_BLOCK,
    );
}

/// `decode_step`'s constexprs for a model and its tiles.
pub fn consts(cfg: &Config, t: &Tiles) -> decode_step::Consts {
    // `gemv_residual_tiles` computes one k step (`Tiles::with_gemv_tiles` sees to it).
    for (what, g, tiles, k) in [
        ("QKV", t.qkv, t.qkv_tiles, cfg.hidden_size),
        ("o_proj", t.o_proj, t.o_proj_tiles, cfg.q_dim()),
        ("down", t.down, t.down_tiles, cfg.intermediate_size),
    ] {
        assert!(
            tiles <= 1 || g.bk >= k,
            "{what}: {tiles} row tiles per program need one k step ({g:?}, k = {k})"
        );
    }
    let oh_tiles = o_heads_tiles(cfg, t);
    let in_o = t.attn_in_o && t.o_heads;
    // The split attention's form only in the plain loop (not `attn_split_ahead`).
    let pairs = t.qkv_pairs && t.o_heads && (in_o || !t.attn_ahead) && qkv_pairs_fit(cfg, t);
    decode_step::Consts {
        LAYERS: cfg.num_hidden_layers,
        HIDDEN: cfg.hidden_size,
        INTER: cfg.intermediate_size,
        VOCAB: cfg.vocab_size,
        HEADS: cfg.num_attention_heads,
        KV_HEADS: cfg.num_key_value_heads,
        HEAD_DIM: cfg.head_dim,
        EMBED_BLOCK: t.embed_block,
        QKV_BM: t.qkv.bm,
        QKV_BK: t.qkv.bk,
        QKV_TILED: t.qkv_tiles > 1,
        QKV_TILES: t.qkv_tiles,
        O_BM: t.o_proj.bm,
        O_BK: t.o_proj.bk,
        O_TILED: t.o_proj_tiles > 1,
        O_TILES: t.o_proj_tiles,
        O_WEIGHTS_FIRST: t.o_weights_first,
        GU_BM: t.gate_up.bm,
        GU_BK: t.gate_up.bk,
        GU_NORM_ONCE: t.gate_up.bk >= cfg.hidden_size,
        GU_TILES: t.gate_up_tiles,
        DOWN_BM: t.down.bm,
        DOWN_BK: t.down.bk,
        DOWN_TILED: t.down_tiles > 1,
        DOWN_TILES: t.down_tiles,
        FUSED_MLP: t.fused_mlp,
        MLP_BM: t.mlp.bm,
        MLP_BK: t.mlp.bk,
        MLP_TILES: t.mlp_tiles,
        RESID_COPIES: t.resid_copies,
        O_HEADS: t.o_heads,
        OH_BM: o_heads_bm(cfg, t),
        OH_TILED: oh_tiles > 1,
        OH_TILES: oh_tiles,
        QKV_COPY_ROWS: qkv_copy_rows(cfg, t),
        LM_BM: t.lm_head.bm,
        LM_BK: t.lm_head.bk,
        LM_NORM_ONCE: t.lm_head.bk >= cfg.hidden_size,
        LM_TILES: t.lm_head_tiles,
        ATTN_BLOCK_N: t.attn_block_n,
        ATTN_SPLITS: t.attn_splits,
        ATTN_AHEAD: t.attn_ahead && t.o_heads,
        ATTN_IN_O: t.attn_in_o && t.o_heads,
        ATTN_ROPE: in_o && t.attn_rope && !pairs,
        QKV_FINISH: !(pairs || in_o && t.attn_rope),
        QKV_PAIRS: pairs,
        ARGMAX_BLOCK: t.argmax_block,
    }
}

/// Rows per program of `gemv_head_residual` (`Tiles::o_heads`): the fewest whose
/// (head, row block) programs fit in one round over the CTAs, at most a [BM, head_dim]
/// weight tile of the rule's elements per thread.
pub fn o_heads_bm(cfg: &Config, t: &Tiles) -> usize {
    let cap = crate::kernels::floor_pow2(
        (32 * t.warps as usize * t.elems_per_thread / cfg.head_dim.max(1)).max(1),
    );
    let mut bm = 1;
    while bm < cap && cfg.num_attention_heads * cfg.hidden_size.div_ceil(bm) > t.ctas {
        bm *= 2;
    }
    bm
}

/// Row blocks per o_proj-per-head program (`Tiles::o_heads_tiles`; 0: as many as put one
/// round of programs over the CTAs), at most a head's blocks.
pub fn o_heads_tiles(cfg: &Config, t: &Tiles) -> usize {
    let blocks = cfg.hidden_size.div_ceil(o_heads_bm(cfg, t));
    match t.o_heads_tiles {
        0 => (cfg.num_attention_heads * blocks).div_ceil(t.ctas.max(1)),
        n => n,
    }
    .clamp(1, blocks.max(1))
}

/// Rows of the residual each QKV program copies into `x_mlp` with `Tiles::o_heads`
/// (a power of two; the programs together cover the hidden size).
pub fn qkv_copy_rows(cfg: &Config, t: &Tiles) -> usize {
    let rows = cfg.q_dim() + 2 * cfg.kv_dim();
    let programs = rows.div_ceil(t.qkv.bm * t.qkv_tiles.max(1));
    cfg.hidden_size
        .div_ceil(programs.max(1))
        .next_power_of_two()
}

/// Whether QKV's programs can rope their own rows (`Tiles::qkv_pairs`,
/// `rope::rmsnorm_qkv_rope_pairs`): one program a tile, one k step over the hidden size, an
/// even number of rows a program that divides the head; and o_proj per head one row block a
/// program (`gemv::attn_scale_head_residual`).
pub fn qkv_pairs_fit(cfg: &Config, t: &Tiles) -> bool {
    let bm = t.qkv.bm;
    t.qkv_tiles <= 1
        && t.qkv.bk >= cfg.hidden_size
        && bm.is_multiple_of(2)
        && cfg.head_dim.is_multiple_of(bm)
        && o_heads_tiles(cfg, t) == 1
}

/// The same as bindings (`MEGAKERNEL`'s methods: explain, the CUDA source, launch).
pub fn constexprs(cfg: &Config, t: &Tiles) -> Vec<Binding> {
    consts(cfg, t).bindings().to_vec()
}

/// How to build a [`MegakernelEngine`].
#[derive(Debug, Clone)]
pub struct MegakernelOptions {
    /// KV-cache capacity in positions; None: the model's max_position_embeddings, capped
    /// by free GPU memory (`device_model::kv_capacity`).
    pub max_seq: Option<usize>,
    pub output: Output,
    /// Tile sizes; None: `Tiles::for_config`.
    pub tiles: Option<Tiles>,
    /// Persistent grid, watchdog, prefetch, interpreter mode (adversarial in tests).
    pub mega: MegaOptions,
    /// The MLP as one stage split over the intermediate dimension ([`Tiles::with_fused_mlp`];
    /// down is stored transposed on the device, and prefill reads it so). On by default: 1-4% faster from
    /// 0.6B to 8B on an H100 (docs/PERF.md, session 17); `TESSERA_FUSED_MLP=0` turns it off.
    pub fused_mlp: bool,
    /// Copies of the residual stream the fused MLP adds into (`Tiles::resid_copies`); None:
    /// [`resid_copies_rule`]. `TESSERA_RESID_COPIES=N` sets it.
    pub resid_copies: Option<usize>,
    /// Each stage's wait inside its bodies, after their first weight loads
    /// (`MegaOptions::wait_in_body`; `mega.wait_in_body_only` may name the stages' kernels);
    /// None: [`wait_in_body_rule`] (and its stages, [`wait_in_body_only_rule`]).
    /// `TESSERA_WAIT_IN_BODY=1` (or `0`) sets it, in every stage, and
    /// `TESSERA_WAIT_IN_BODY=kernel,kernel` puts it in those stages only.
    pub wait_in_body: Option<bool>,
    /// o_proj split over the query heads, merging each head's attention partials
    /// (`Tiles::o_heads`); None: [`o_heads_rule`]. `TESSERA_O_HEADS=0` (or `1`) sets it.
    /// Needs the fused MLP.
    pub o_heads: Option<bool>,
    /// Row blocks per o_proj-per-head program (`Tiles::o_heads_tiles`; 0: spread over the
    /// CTAs); None: [`o_heads_tiles_rule`]. `TESSERA_O_HEADS_TILES=N` sets it.
    pub o_heads_tiles: Option<usize>,
    /// From which position a step launches the decode step whose attention loads each K/V
    /// tile one iteration early (`Tiles::attn_ahead`, a second specialisation of the same
    /// source; the same arithmetic): None, [`attn_ahead_from`]'s rule; Some(false) never;
    /// Some(true) from position 0. `TESSERA_ATTN_AHEAD=0` (or `1`) sets it. Only where o_proj
    /// runs per head.
    pub attn_ahead: Option<bool>,
    /// Below which position a step launches the decode step whose o_proj programs compute
    /// the attention themselves (`Tiles::attn_in_o`, `gemv::attn_head_residual`: one hop
    /// less a layer; a third specialisation of the same source): None, [`attn_in_o_until`]'s
    /// rule (below one attention tile, at every Qwen3 size); Some(0) never.
    /// `TESSERA_ATTN_IN_O=N` sets it. o_proj runs per head there (with the fused MLP only).
    pub attn_in_o: Option<usize>,
    /// Whether, there, o_proj's programs also norm and rope the raw QKV heads and write the
    /// new K/V row (`Tiles::attn_rope`, `gemv::attn_rope_head_residual`): None,
    /// [`attn_rope_rule`]. `TESSERA_ATTN_ROPE=0` (or `1`) sets it.
    pub attn_rope: Option<bool>,
    /// Whether, there, the QKV stage's programs rope their own half-head pairs and o_proj's
    /// programs apply each head's 1/rms (`Tiles::qkv_pairs`, `rope::rmsnorm_qkv_rope_pairs`,
    /// `gemv::attn_scale_head_residual`; in `attn_rope`'s place, where [`qkv_pairs_fit`]):
    /// None, [`qkv_pairs_rule`]. `TESSERA_QKV_PAIRS=0` (or `1`) sets it.
    pub qkv_pairs: Option<bool>,
    /// The same in the plain step, its split attention scaling the heads
    /// (`attention::attn_split_scaled`; not in the step that loads the tiles ahead): None,
    /// [`qkv_pairs_split_rule`]. `TESSERA_QKV_PAIRS_SPLIT=0` (or `1`) sets it.
    pub qkv_pairs_split: Option<bool>,
    /// `Engine::decode` queues each step before it reads the previous step's token back,
    /// so the GPU never waits for the host between steps. On by default: on an H100 it was
    /// 5.7% / 6.3% faster at 0.6B (contexts 1 / 512), 6.2% / 3.4% at 1.7B, 1.8% / 1.6% at
    /// 4B and 1.4% / 1.3% at 8B (docs/PERF.md, session 22). `TESSERA_RUN_AHEAD=0` turns it
    /// off.
    pub run_ahead: bool,
    /// With `run_ahead`: after the first step's token (read back alone, as soon as it is
    /// chosen), the tokens of this many steps come back in one copy (each step writes its
    /// token into a device ring; the host reads a batch while the next one runs), so the
    /// launches of a batch follow each other with no copy between them. The caller sees a
    /// token up to this many steps later, and a caller that stops leaves up to twice this
    /// many steps launched beyond it. 4 by default: on an H100 1.2% / 1.1% faster than 1 at
    /// 0.6B (contexts 1 / 512), level at 1.7B (docs/PERF.md, session 25);
    /// `TESSERA_TOKENS_PER_READBACK=N` sets it (1: a copy a step).
    pub tokens_per_readback: usize,
}

/// `TESSERA_WAIT_PREFETCH=kernel=MiB,kernel=MiB`: the wait prefetch of those kernels'
/// stages (`MegaOptions::wait_prefetch_by_kernel`), instead of [`wait_prefetch_rule`];
/// entries that do not parse are left out.
fn wait_prefetch_env() -> Vec<(String, u64)> {
    let v = std::env::var("TESSERA_WAIT_PREFETCH").unwrap_or_default();
    v.split(',')
        .filter_map(|e| {
            let (k, mib) = e.split_once('=')?;
            Some((k.trim().to_string(), mib.trim().parse::<u64>().ok()? << 20))
        })
        .collect()
}

/// `MegakernelOptions::tokens_per_readback` by default.
pub const TOKENS_PER_READBACK: usize = 4;

impl Default for MegakernelOptions {
    fn default() -> Self {
        let wib = std::env::var("TESSERA_WAIT_IN_BODY").ok();
        let only: Vec<String> = match wib.as_deref() {
            None | Some("0" | "1") => vec![],
            Some(list) => list.split(',').map(|k| k.trim().to_string()).collect(),
        };
        MegakernelOptions {
            max_seq: None,
            output: Output::Token,
            tiles: None,
            // The warps come from the tiles (`MegakernelEngine::new`).
            mega: MegaOptions {
                wait_in_body_only: only,
                early_loads: std::env::var("TESSERA_EARLY_LOADS").map_or(true, |v| v != "0"),
                wait_prefetch_by_kernel: wait_prefetch_env(),
                ..MegaOptions::default()
            },
            fused_mlp: std::env::var("TESSERA_FUSED_MLP").map_or(true, |v| v != "0"),
            resid_copies: std::env::var("TESSERA_RESID_COPIES")
                .ok()
                .and_then(|v| v.parse().ok()),
            wait_in_body: wib.map(|v| v != "0"),
            o_heads: std::env::var("TESSERA_O_HEADS").ok().map(|v| v != "0"),
            o_heads_tiles: std::env::var("TESSERA_O_HEADS_TILES")
                .ok()
                .and_then(|v| v.parse().ok()),
            run_ahead: std::env::var("TESSERA_RUN_AHEAD").map_or(true, |v| v != "0"),
            tokens_per_readback: std::env::var("TESSERA_TOKENS_PER_READBACK")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(TOKENS_PER_READBACK),
            attn_ahead: std::env::var("TESSERA_ATTN_AHEAD").ok().map(|v| v != "0"),
            attn_in_o: std::env::var("TESSERA_ATTN_IN_O")
                .ok()
                .and_then(|v| v.parse().ok()),
            attn_rope: std::env::var("TESSERA_ATTN_ROPE").ok().map(|v| v != "0"),
            qkv_pairs: std::env::var("TESSERA_QKV_PAIRS").ok().map(|v| v != "0"),
            qkv_pairs_split: std::env::var("TESSERA_QKV_PAIRS_SPLIT")
                .ok()
                .map(|v| v != "0"),
        }
    }
}

/// o_proj and down row tiles per program by default (`Tiles::with_gemv_tiles`): 1,
/// `gemv_residual`, one per program. 0 (spread over the CTAs, `gemv_residual_tiles`) was
/// 0.6-2% faster from 1.7B to 8B on an H100, but down then sums k in one step of 16384
/// instead of steps of 4096, and at 4B that arithmetic failed the real-shape test's greedy
/// criterion (3.25 steps agreeing with the fp32 oracle against transformers' 5.50; 5.75
/// with one tile per program): docs/PERF.md, session 15.
pub const GEMV_TILES: usize = 1;

/// QKV row tiles per program by default (`Tiles::with_qkv_tiles`): spread over the CTAs
/// (0, `rmsnorm_qkv_rope_tiles`: one program per CTA, the norm once, the next tile's weights
/// in flight while one reduces) where one tile per program would put 4 or more QKV
/// programs on a CTA (4B and 8B: 6), else 1 (`rmsnorm_qkv_rope`; 0.6B: 1, 1.7B: 2). With the
/// fused MLP, spreading was 1-2% faster at 4B and 8B in 8 of 8 pairs and 3.5% slower at
/// 1.7B (docs/PERF.md, session 17). The same bits either way.
pub fn qkv_tiles_rule(cfg: &Config, t: &Tiles) -> usize {
    let per_cta = t
        .qkv
        .programs(cfg.q_dim() + 2 * cfg.kv_dim())
        .div_ceil(t.ctas.max(1));
    if per_cta >= 4 {
        0
    } else {
        1
    }
}

/// Copies of the residual stream the fused MLP adds into by default (`Tiles::resid_copies`:
/// program p adds into copy p % N, so N times fewer atomics queue on each address, and
/// every reader sums the copies): 2 up to hidden 2048, else 1. On an H100 two copies cut
/// the stage's publish from 1.6 to 0.7 µs per layer at 0.6B and were 4-5% faster there
/// and 1.4-2% at 1.7B; at 4B (hidden 2560) 1-3% slower and at 8B 0-1% slower, where reading
/// and folding the wider copies costs more than the shorter queues save; 4 and 8 copies
/// were no better at 0.6B (docs/PERF.md, session 17).
pub fn resid_copies_rule(cfg: &Config) -> usize {
    if cfg.hidden_size <= 2048 {
        2
    } else {
        1
    }
}

/// Whether o_proj runs per query head by default (`Tiles::o_heads`, with the fused MLP: each
/// program merges its head's attention partials and adds its rows into the residual with
/// f32 atomics, so attention has no merge and no ticket): up to hidden 2560. On an H100 it
/// was 2.0% and 3.7% faster at 0.6B (contexts 1 and 512), 1.5% and 2.1% at 1.7B, 1.5% and
/// 1.2% at 4B, and 1.5% and 0.8% slower at 8B, where its 512 programs put four merges on
/// each CTA (docs/PERF.md, session 21).
pub fn o_heads_rule(cfg: &Config) -> bool {
    cfg.hidden_size <= 2560
}

/// Which specialisation of the decode step a launch runs; the engine picks by position
/// ([`Specialisations::at`]). The same source and the same sync protocol each time, only
/// constexprs differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The tiles' own constexprs.
    Plain,
    /// The attention loads each K/V tile one iteration early (`Tiles::attn_ahead`,
    /// `attention::attn_split_ahead`: the same partials bit for bit).
    Ahead,
    /// o_proj's programs compute the attention (`Tiles::attn_in_o`,
    /// `gemv::attn_head_residual`, or `attn_rope_head_residual` with `Tiles::attn_rope`;
    /// the same bits up to ATTN_BLOCK_N positions).
    AttnInO,
}

/// The options that choose the specialisations (`MegakernelOptions`' fields of these
/// names, each None: its rule), kept for a retune.
#[derive(Debug, Clone, Copy)]
struct SpecOptions {
    attn_ahead: Option<bool>,
    attn_in_o: Option<usize>,
    attn_rope: Option<bool>,
    qkv_pairs: Option<bool>,
    qkv_pairs_split: Option<bool>,
}

/// The decode step's specialisations, and the positions whose steps launch each: the
/// engine's choice per launch, and what `tessera explain` says of it.
pub struct Specialisations {
    /// The first position whose step launches `Variant::Ahead`; None: no step does.
    ahead_from: Option<usize>,
    /// Steps at positions below this launch `Variant::AttnInO` (0: none), with the heads
    /// normed and roped inside it or not.
    in_o_until: usize,
    rope: bool,
    /// Whether the QKV programs rope their own pairs (`Tiles::qkv_pairs`) there (in `rope`'s
    /// place), and in the plain step.
    pairs: bool,
    pairs_split: bool,
    /// Each variant's constexprs (empty where no step launches it).
    plain: Vec<Binding>,
    ahead: Vec<Binding>,
    in_o: Vec<Binding>,
    options: SpecOptions,
    /// Launches so far of `Variant::Ahead` and of `Variant::AttnInO`, and the last one's
    /// variant.
    launches: [u64; 2],
    last: Variant,
}

impl Specialisations {
    /// The specialisations for tiles `t` by `o`'s `attn_ahead`, `attn_in_o`, `attn_rope`,
    /// `qkv_pairs` and `qkv_pairs_split` (each None: its rule).
    pub fn new(cfg: &Config, t: &Tiles, o: &MegakernelOptions) -> Specialisations {
        let options = SpecOptions {
            attn_ahead: o.attn_ahead,
            attn_in_o: o.attn_in_o,
            attn_rope: o.attn_rope,
            qkv_pairs: o.qkv_pairs,
            qkv_pairs_split: o.qkv_pairs_split,
        };
        Self::with_options(cfg, t, options)
    }

    /// The same options' specialisations for new tiles (`MegakernelEngine::retune`).
    pub fn retiled(&self, cfg: &Config, t: &Tiles) -> Specialisations {
        Self::with_options(cfg, t, self.options)
    }

    fn with_options(cfg: &Config, t: &Tiles, options: SpecOptions) -> Specialisations {
        let SpecOptions {
            attn_ahead,
            attn_in_o,
            attn_rope,
            qkv_pairs,
            qkv_pairs_split,
        } = options;
        let pairs = qkv_pairs.unwrap_or_else(|| qkv_pairs_rule(cfg)) && qkv_pairs_fit(cfg, t);
        // In the plain step too (its split attention, `attn_split_scaled`), not the ahead one.
        let pairs_split = qkv_pairs_split.unwrap_or_else(|| qkv_pairs_split_rule(cfg))
            && t.o_heads
            && qkv_pairs_fit(cfg, t);
        let rope = attn_rope.unwrap_or_else(|| attn_rope_rule(cfg));
        let ahead_from = attn_ahead_from(t, attn_ahead);
        let in_o_until = attn_in_o_until(cfg, t, attn_in_o, rope || pairs);
        let with = |on: bool, t: Tiles| match on {
            true => constexprs(cfg, &t),
            false => vec![],
        };
        Specialisations {
            ahead_from,
            in_o_until,
            rope,
            pairs,
            pairs_split,
            plain: constexprs(
                cfg,
                &Tiles {
                    qkv_pairs: pairs_split,
                    ..t.clone()
                },
            ),
            ahead: with(
                ahead_from.is_some(),
                Tiles {
                    attn_ahead: true,
                    ..t.clone()
                },
            ),
            in_o: with(
                in_o_until > 0,
                Tiles {
                    attn_in_o: true,
                    attn_rope: rope,
                    qkv_pairs: pairs,
                    // o_proj per head there even where the other steps run it by rows
                    // (8B), its blocks spread over the CTAs.
                    o_heads: true,
                    o_heads_tiles: if t.o_heads { t.o_heads_tiles } else { 0 },
                    ..t.clone()
                },
            ),
            options,
            launches: [0; 2],
            last: Variant::Plain,
        }
        .first_at_zero()
    }

    /// `last` as the step at position 0's variant (what `check_errors` reads before any
    /// launch).
    fn first_at_zero(mut self) -> Specialisations {
        self.last = self.at(0);
        self
    }

    /// The variant a step at `pos` launches.
    pub fn at(&self, pos: usize) -> Variant {
        if pos < self.in_o_until {
            Variant::AttnInO
        } else if self.ahead_from.is_some_and(|from| pos >= from) {
            Variant::Ahead
        } else {
            Variant::Plain
        }
    }

    /// The constexprs of variant `v` (empty if no step launches it).
    pub fn constexprs(&self, v: Variant) -> &[Binding] {
        match v {
            Variant::Plain => &self.plain,
            Variant::Ahead => &self.ahead,
            Variant::AttnInO => &self.in_o,
        }
    }

    /// The variants that steps below position `max_seq` launch.
    pub fn used(&self, max_seq: usize) -> Vec<Variant> {
        let ahead = self.ahead_from.map(|from| from.max(self.in_o_until));
        let plain_until = ahead.unwrap_or(usize::MAX).min(max_seq);
        [
            (Variant::AttnInO, self.in_o_until > 0 && max_seq > 0),
            (Variant::Plain, self.in_o_until < plain_until),
            (Variant::Ahead, ahead.is_some_and(|from| from < max_seq)),
        ]
        .into_iter()
        .filter_map(|(v, on)| on.then_some(v))
        .collect()
    }

    /// Which positions launch which variant, in words (for `explain`; empty when every
    /// step launches the plain one).
    pub fn describe(&self) -> String {
        let mut text = String::new();
        if self.in_o_until > 0 {
            text += &format!(
                "Steps below position {0} launch this program with ATTN_IN_O=true (o_proj's programs compute the attention, each its head's whole: {1}, one stage and one hop a layer less); from position {0} on, the same with ATTN_IN_O=false (the split attention in its own stage{2}).\n",
                self.in_o_until,
                match (self.pairs, self.rope) {
                    (true, _) => "attn_scale_head_residual, which scales the heads the QKV stage's programs roped in pairs (rmsnorm_qkv_rope_pairs) by their 1/rms, so the QKV stage runs no ticket",
                    (false, true) => "attn_rope_head_residual, which norms and ropes the raw QKV heads too, so the QKV stage runs no ticket",
                    (false, false) => "attn_head_residual",
                },
                match self.pairs_split {
                    true => ": attn_split_scaled, which scales the heads the QKV stage's programs roped in pairs",
                    false => "",
                }
            );
        }
        if let Some(from) = self.ahead_from {
            text += &format!(
                "From position {} on, a step launches the same program with ATTN_AHEAD=true (the attention loads each K/V tile one iteration early: attn_split_ahead).\n",
                from.max(self.in_o_until)
            );
        }
        text
    }

    fn count(&mut self, v: Variant) {
        match v {
            Variant::Plain => {}
            Variant::Ahead => self.launches[0] += 1,
            Variant::AttnInO => self.launches[1] += 1,
        }
        self.last = v;
    }
}

/// From which position a step launches the decode step whose attention loads its tiles
/// ahead ([`MegakernelOptions::attn_ahead`]; only with o_proj per head, whose attention is
/// `attn_split`): by default where every split streams more than one tile (SPLITS x BLOCK_N
/// positions, 1024 at 0.6B). With a tile a split, loading ahead was 1.6% slower at 0.6B's
/// context 512 (level at 1); launched from here on it was 1.0% faster at 2048 and 4.6% at
/// 8192, 2.3% at 1.7B's 8192 and 2.2% at 4B's, on an H100 (docs/PERF.md, session 22).
pub fn attn_ahead_from(t: &Tiles, option: Option<bool>) -> Option<usize> {
    if !t.o_heads {
        return None;
    }
    match option {
        Some(false) => None,
        Some(true) => Some(0),
        None => Some(t.attn_splits * t.attn_block_n),
    }
}

/// Below which position a step launches the decode step whose o_proj programs compute the
/// attention themselves ([`MegakernelOptions::attn_in_o`]; o_proj runs per head there, so
/// only with the fused MLP): by default below one attention tile (ATTN_BLOCK_N positions,
/// 128 at every Qwen3 size: the same bits as the split attention there), where o_proj per
/// head runs one row block a program (0.6B) or its programs norm and rope the heads too
/// (`rope`, [`attn_rope_rule`]: 1.7B, 4B, and 8B, whose other steps run o_proj by rows). On
/// an H100 it was 8.0% faster at 0.6B's context 1 and 3.7% at 1.7B's, and with the rope
/// 6.9% at 4B's and 3.7% at 8B's (every repetition); up to four tiles it was 16% and 8%
/// slower at position 256, where every program of a head reads the head's whole context;
/// at 4B without the rope, 3.9% slower (docs/PERF.md, session 23).
pub fn attn_in_o_until(cfg: &Config, t: &Tiles, option: Option<usize>, rope: bool) -> usize {
    // Its stage is o_proj per head, which needs the fused MLP.
    if !t.fused_mlp {
        return 0;
    }
    match option {
        Some(n) => n,
        None if rope || (t.o_heads && o_heads_tiles(cfg, t) == 1) => t.attn_block_n,
        None => 0,
    }
}

/// Whether, inside o_proj's stage ([`attn_in_o_until`]), the QKV stage's programs rope their
/// own half-head pairs and leave their rows' sums of squares, and o_proj's programs apply
/// each head's 1/rms (`rope::rmsnorm_qkv_rope_pairs`, `gemv::attn_scale_head_residual`: no
/// ticket, no head finisher, no norm over a head in o_proj), where [`qkv_pairs_fit`]: up to
/// hidden 1024, where the heads are not normed and roped in o_proj ([`attn_rope_rule`]). On
/// an H100 2.5% faster at 0.6B's context 1 (6 of 6 repetitions; 1.3% with the rotation's
/// inputs loaded after the first half's reduction, 0.3% with o_proj's programs waiting in
/// their bodies), level at 1.7B against `attn_rope` (+0.3%), and 5-7% slower where ptxas
/// spilled (docs/PERF.md, session 29).
pub fn qkv_pairs_rule(cfg: &Config) -> bool {
    cfg.hidden_size <= 1024
}

/// Whether the plain step (the split attention in its own stage, o_proj per head merging it;
/// not the step that loads the tiles ahead) runs the QKV pairs too, its split attention
/// scaling the heads (`attention::attn_split_scaled`), where [`qkv_pairs_fit`]: up to hidden
/// 2048. On an H100 3.6% faster at 0.6B's context 512 (every one of 6 repetitions; 1.7%
/// with no stage waiting in its body) and 2.0% at 1.7B's (4 of 4) (docs/PERF.md, session 29).
pub fn qkv_pairs_split_rule(cfg: &Config) -> bool {
    cfg.hidden_size <= 2048
}

/// Whether, inside o_proj's stage ([`attn_in_o_until`]), its programs also norm and rope
/// the raw QKV heads and write the new K/V row (`gemv::attn_rope_head_residual`; the QKV
/// stage then runs no ticket): above hidden 1024. On an H100 2.3-2.4% faster at 1.7B's
/// context 1 (two calls) and, with o_proj per head's three blocks a program, 6.9% at 4B's;
/// 2.7-4.7% slower at 0.6B's, where the QKV stage's ticket chain is shorter than the two
/// norms it moves into the attention's critical path (docs/PERF.md, session 23).
pub fn attn_rope_rule(cfg: &Config) -> bool {
    cfg.hidden_size > 1024
}

/// Row blocks per o_proj-per-head program by default (`Tiles::o_heads_tiles`): spread over
/// the CTAs (0) above hidden 2048, else one (1). At 4B (hidden 2560: 320 blocks, 3 a
/// program) spreading was 1.8% / 2.5% faster at contexts 1 / 512 on an H100 (4 of 4 pairs
/// each; 2.5% / 1.1% in 2 more) and passed the real-shape test (docs/PERF.md, session 22).
/// Not measured at 1.7B, where it would put 2 blocks on a program.
pub fn o_heads_tiles_rule(cfg: &Config) -> usize {
    if cfg.hidden_size > 2048 {
        0
    } else {
        1
    }
}

/// Whether stages wait inside their bodies by default (`MegaOptions::wait_in_body`: the
/// first weight tiles of a CTA's program in flight while it waits for the stage's
/// producers): above hidden 1024, in every stage above hidden 2048 and in QKV's and
/// o_proj's only up to it ([`wait_in_body_only_rule`]). On an H100, every stage's was
/// 1.4-3% faster at 8B and 4-6% at 4B (8 of 8 pairs), neutral at 1.7B and 1.5-3% slower at
/// 0.6B, where the MLP's early loads slow o_proj's stage, which they now overlap
/// (docs/PERF.md, session 18); QKV's and o_proj's only were 1-6% faster at 1.7B (11 of 12
/// pairs) and no faster at 0.6B (session 19). Wherever o_proj runs per head (`Tiles::o_heads`):
/// its stage's (`gemv_head_residual`) was 1.4% faster at 0.6B (session 21).
pub fn wait_in_body_rule(cfg: &Config, o_heads: bool) -> bool {
    cfg.hidden_size > 1024 || o_heads
}

/// The stages' kernels that wait inside their bodies by the rule (empty: all of them):
/// o_proj per head's up to hidden 2048, QKV's and o_proj's above hidden 1024, and the split
/// attention's up to it ([`wait_in_body_rule`]); `Tiles::qkv_pairs`' QKV where QKV's does.
/// (`attn_scale_head_residual` waiting in its body was 1% slower at 0.6B than outside,
/// where `attn_head_residual`'s is faster: docs/PERF.md, session 29.)
pub fn wait_in_body_only_rule(cfg: &Config) -> Vec<String> {
    if cfg.hidden_size > 2048 {
        return vec![];
    }
    let mut k = vec![
        "gemv_head_residual",
        "gemv_head_residual_tiles",
        "attn_head_residual",
    ];
    if cfg.hidden_size > 1024 {
        k.extend([
            "rmsnorm_qkv_rope",
            "rmsnorm_qkv_rope_tiles",
            "rmsnorm_qkv_rope_pairs",
            "gemv_residual_copy",
        ]);
    } else {
        // The split attention's stage too: with `MegaOptions::early_loads` its position is
        // loaded before the wait (-1.3% / -2.2% at 0.6B's contexts 512 / 2048; +0.6% at
        // 1.7B's 512, docs/PERF.md session 25).
        k.extend(["attn_split", "attn_split_ahead"]);
    }
    k.into_iter().map(String::from).collect()
}

/// The tiles and megakernel options the engine runs `decode_step` with for `cfg`, from
/// `t` and `o.mega`: each stage's wait in its bodies or not (`o.wait_in_body` and
/// `o.mega.wait_in_body_only`, else [`wait_in_body_rule`] and [`wait_in_body_only_rule`]),
/// and o_proj's weights first where o_proj waits in its body
/// (`Tiles::o_weights_first`).
pub fn with_wait_in_body(cfg: &Config, t: Tiles, o: &MegakernelOptions) -> (Tiles, MegaOptions) {
    // The rule picks the stages too, unless they are named.
    let by_rule = o.wait_in_body.is_none() && o.mega.wait_in_body_only.is_empty();
    let mega = MegaOptions {
        wait_in_body: o
            .wait_in_body
            .unwrap_or_else(|| wait_in_body_rule(cfg, t.o_heads)),
        wait_in_body_only: match by_rule {
            true => wait_in_body_only_rule(cfg),
            false => o.mega.wait_in_body_only.clone(),
        },
        ..o.mega.clone()
    };
    let t = Tiles {
        o_weights_first: mega.waits_in_body("gemv_residual_copy"),
        ..t
    };
    (t, mega)
}

/// The tiles and megakernel options the engine runs `decode_step` with, from tiles `t` and
/// the options `o`: the MLP fused or not ([`with_mlp`]), each stage's wait
/// ([`with_wait_in_body`]) and its wait prefetch ([`wait_prefetch_rule`] unless
/// `o.mega.wait_prefetch_by_kernel` names some). A `Tiles` field set here from `o` must
/// also be kept by [`MegakernelEngine::retune`], which re-tiles from the rule: a field it
/// does not copy is dropped in every `tessera tune` run (docs/PERF.md, session 26).
pub fn with_options(cfg: &Config, t: Tiles, o: &MegakernelOptions) -> (Tiles, MegaOptions) {
    let t = Tiles {
        o_heads: o.o_heads.unwrap_or_else(|| o_heads_rule(cfg)) && o.fused_mlp,
        o_heads_tiles: o.o_heads_tiles.unwrap_or_else(|| o_heads_tiles_rule(cfg)),
        ..with_mlp(t, cfg, o.fused_mlp, o.resid_copies)
    };
    let (t, mut mega) = with_wait_in_body(cfg, t, o);
    if mega.wait_prefetch_by_kernel.is_empty() {
        mega.wait_prefetch_by_kernel = wait_prefetch_rule();
    }
    (t, mega)
}

/// The wait prefetch of some stages by default (`MegaOptions::wait_prefetch_by_kernel`; the
/// others prefetch `MegaOptions::wait_prefetch_bytes`, 4 MiB): the fused MLP's and o_proj per
/// head's (`gemv_head_residual`, the steps from 128 positions up to 1.7B) 2 MiB. The MLP's: on
/// an H100, 2 MiB against 4 was 2.6% / 1.9% faster at 0.6B (contexts 1 / 512), 1.4% / 0.3% at
/// 1.7B, 0.9% at 4B (context 1) and 0.5% / 0.7% at 8B; 1 and 3 MiB between (1 0.3% ahead at
/// 8B), 0 and 8 slower; QKV's at 2 or 8 no faster (docs/PERF.md, session 26). o_proj per
/// head's: on an H200 0.2% / 1.1% faster at 0.6B's contexts 512 / 2048 (1 MiB the same), 0.1%
/// / 0.6% at 1.7B's (session 34). `TESSERA_WAIT_PREFETCH=kernel=MiB,...` replaces it.
pub fn wait_prefetch_rule() -> Vec<(String, u64)> {
    vec![
        ("rmsnorm_mlp_tiles".to_string(), 2 << 20),
        ("gemv_head_residual".to_string(), 2 << 20),
    ]
}

/// The tiles the engine picks when it is given none: `rule`'s, o_proj and down at
/// `gemv_tiles` row tiles per program (the engine: [`GEMV_TILES`]), QKV by
/// [`qkv_tiles_rule`]. The MLP as two stages until [`with_mlp`].
pub fn default_tiles(cfg: &Config, rule: &TileRule, gemv_tiles: usize) -> Tiles {
    let t = Tiles::with_rule(cfg, rule).with_gemv_tiles(cfg, gemv_tiles);
    let qkv = qkv_tiles_rule(cfg, &t);
    t.with_qkv_tiles(cfg, qkv)
}

/// `t` with the MLP fused into one stage or not ([`Tiles::with_fused_mlp`]); fused, the
/// residual in `copies` copies (None: [`resid_copies_rule`]), else in one.
pub fn with_mlp(t: Tiles, cfg: &Config, fused: bool, copies: Option<usize>) -> Tiles {
    let mut t = t.with_fused_mlp(fused);
    t.resid_copies = match fused {
        true => copies.unwrap_or_else(|| resid_copies_rule(cfg)).max(1),
        false => 1,
    };
    t
}

/// Steps between two reads of the watchdog's error word (each read waits for the stream).
pub const CHECK_EVERY: u64 = 16;

pub struct MegakernelEngine {
    m: DeviceModel,
    output: Output,
    opts: MegaOptions,
    /// The decode step's specialisations, and the positions that launch them.
    variants: Specialisations,
    /// Megakernel launches so far: exactly one per step.
    launches: u64,
    /// Why the KV cache is smaller than asked, if it is.
    note: Option<String>,
    /// `MegakernelOptions::run_ahead` and `tokens_per_readback`, and the ring the chosen
    /// tokens go through (made at the first such decode).
    run_ahead: bool,
    per_readback: usize,
    ring: Option<TokenRing>,
}

/// The megakernel options a tune varies ([`MegakernelEngine::retune`]); the defaults are
/// `MegaOptions`'s.
#[derive(Clone, Debug)]
pub struct RetuneOptions {
    /// `MegaOptions::ctas` (None: as many as fit).
    pub ctas: Option<u32>,
    /// `MegaOptions::wait_prefetch_bytes`.
    pub wait_prefetch_bytes: u64,
    /// `MegaOptions::timeout_ms`.
    pub timeout_ms: u64,
    /// `MegaOptions::check`.
    pub check: bool,
}

impl Default for RetuneOptions {
    fn default() -> Self {
        let d = MegaOptions::default();
        RetuneOptions {
            ctas: d.ctas,
            wait_prefetch_bytes: d.wait_prefetch_bytes,
            timeout_ms: d.timeout_ms,
            check: d.check,
        }
    }
}

/// Where `decode_ahead`'s steps leave their tokens: two halves of `per` slots on the
/// device, one filled while the other's copy is read, and a host readback per half. A
/// slot is 16 bytes (its token first), so every slot's pointer is as aligned as `next`
/// and the step compiles once.
struct TokenRing {
    dev: [Buffer<i32>; 2],
    host: [Readback<i32>; 2],
}

/// i32 words per ring slot (16 bytes).
const SLOT_WORDS: usize = 4;

impl TokenRing {
    fn new(m: &DeviceModel, per: usize) -> Result<TokenRing, ModelError> {
        let n = per * SLOT_WORDS;
        let dev = || m.dev.zeros::<i32>(n).map_err(|e| m.err(e));
        let host = || m.dev.readback::<i32>(n).map_err(|e| m.err(e));
        Ok(TokenRing {
            dev: [dev()?, dev()?],
            host: [host()?, host()?],
        })
    }
}

impl MegakernelEngine {
    pub fn new(
        cfg: Config,
        weights: &Weights,
        dev: Device,
        opts: MegakernelOptions,
    ) -> Result<MegakernelEngine, ModelError> {
        let name = "megakernel";
        let err = |m: String| crate::device_model::engine_err(name, m);
        let tiles = opts
            .tiles
            .clone()
            .unwrap_or_else(|| default_tiles(&cfg, &TileRule::for_device(&dev), GEMV_TILES));
        // The options decide (given tiles or not).
        if opts.fused_mlp && tiles.mlp.bk < cfg.hidden_size {
            return Err(err(format!(
                "the fused MLP needs one k step over the hidden size ({}), its tiles take {}",
                cfg.hidden_size, tiles.mlp.bk
            )));
        }
        let (tiles, mut mega) = with_options(&cfg, tiles, &opts);
        // The KV cache gets the memory the weights leave.
        let (max_seq, note) = crate::device_model::kv_capacity(
            &cfg,
            opts.max_seq,
            &dev,
            crate::device_model::resident_weight_bytes(&cfg),
        )
        .map_err(err)?;
        let m = DeviceModel::new(name, cfg, weights, dev, max_seq, Some(tiles))?;
        let variants = Specialisations::new(&m.cfg, &m.tiles, &opts);
        // Every stage is lowered for the tiles' block size; on a GPU the persistent grid
        // is the CTAs the tiles spread their rows over, unless asked otherwise.
        mega.num_warps = m.tiles.warps;
        mega.check = false;
        if mega.ctas.is_none() && m.dev.is_cuda() {
            mega.ctas = Some(m.tiles.ctas as u32);
        }
        Ok(MegakernelEngine {
            m,
            output: opts.output,
            opts: mega,
            variants,
            launches: 0,
            note,
            run_ahead: opts.run_ahead,
            per_readback: opts.tokens_per_readback.max(1),
            ring: None,
        })
    }

    pub fn config(&self) -> &Config {
        &self.m.cfg
    }
    pub fn tiles(&self) -> &Tiles {
        &self.m.tiles
    }
    pub fn set_output(&mut self, output: Output) {
        self.output = output;
    }
    /// Steps so far that copied a token id (and position) in: the host chose the token (a
    /// prompt token, top-k / top-p); a step that decodes its own token copies nothing.
    pub fn steps_copied_in(&self) -> u64 {
        self.m.steps_copied_in
    }
    /// Megakernel launches so far (one per step: the test of "one launch per token").
    pub fn launches(&self) -> u64 {
        self.launches
    }
    /// Of those, the launches of the step whose attention loads its tiles ahead.
    pub fn ahead_launches(&self) -> u64 {
        self.variants.launches[0]
    }
    /// Of those, the launches of the step whose o_proj computes the attention.
    pub fn attn_in_o_launches(&self) -> u64 {
        self.variants.launches[1]
    }
    /// Why the KV cache holds fewer positions than the model allows, if it does.
    pub fn capacity_note(&self) -> Option<&str> {
        self.note.as_deref()
    }
    pub fn mega_options(&self) -> &MegaOptions {
        &self.opts
    }
    pub fn set_mega_options(&mut self, opts: MegaOptions) {
        self.opts = opts;
    }
    /// The bound constexprs of the plain specialisation (for `explain`, the CUDA source,
    /// compile timing).
    pub fn constexprs(&self) -> &[Binding] {
        self.variants.constexprs(Variant::Plain)
    }

    /// Reads the watchdog's error word: Err if a wait of some launch so far gave up.
    pub fn check_errors(&self) -> Result<(), ModelError> {
        decode_step::MEGAKERNEL
            .check_errors(
                &self.m.dev,
                self.constexprs_for(self.variants.last),
                &self.opts,
            )
            .map_err(|e| self.m.err(e))
    }

    /// New tiles and the megakernel options a tune varies (same weights; the activations
    /// are reallocated). The warps come from the tiles, as in `new`; every other megakernel
    /// option stays the engine's (the waits in the bodies, the interpreter's mode...), so a
    /// tune cannot drop one. The MLP stays fused or not as the engine was built (down's
    /// transposed copy is uploaded only then), and o_proj per head or not;
    /// `tiles.o_heads_tiles` is taken as given. The attention loads ahead from where the
    /// options said, by the new tiles.
    pub fn retune(&mut self, tiles: Tiles, o: &RetuneOptions) -> Result<(), ModelError> {
        let t = &self.m.tiles;
        let (fused, copies, weights_first) = (t.fused_mlp, t.resid_copies, t.o_weights_first);
        let o_heads = t.o_heads;
        self.m.set_tiles(Tiles {
            o_weights_first: weights_first,
            o_heads,
            ..with_mlp(tiles, &self.m.cfg, fused, Some(copies))
        })?;
        self.variants = self.variants.retiled(&self.m.cfg, &self.m.tiles);
        self.opts = MegaOptions {
            num_warps: self.m.tiles.warps,
            ctas: o.ctas,
            wait_prefetch_bytes: o.wait_prefetch_bytes,
            timeout_ms: o.timeout_ms,
            check: o.check,
            ..self.opts.clone()
        };
        Ok(())
    }

    /// The schedule: stages, syncs and the hazards behind them, prefetches.
    pub fn explain(&self) -> Result<String, ModelError> {
        decode_step::MEGAKERNEL
            .explain(self.constexprs(), &self.opts)
            .map_err(|e| self.m.err(e))
    }

    /// The f32 logits of the last step (written by every step, whatever the output mode).
    pub fn logits(&self) -> Result<Vec<f32>, ModelError> {
        self.m.logits()
    }
    /// The token the lm_head chose at the last step (written whatever the output mode).
    pub fn next_token(&self) -> Result<u32, ModelError> {
        self.m.next_token()
    }
    /// The (token, position) the device holds for the next step (`argmax_merge` sets them).
    pub fn next_inputs(&self) -> Result<(u32, usize), ModelError> {
        let e = |x| self.m.err(x);
        let t = self.m.a.token.to_vec().map_err(e)?[0];
        let p = self.m.a.pos.to_vec().map_err(e)?[0];
        Ok((t as u32, p as usize))
    }
    /// The residual stream after the last step's last layer (for checks).
    pub fn hidden(&self) -> Result<Vec<f32>, ModelError> {
        self.m.hidden()
    }

    /// Temperature sampling on the device (Gumbel-max in the lm_head) from now on;
    /// `temperature` ≤ 0 is greedy.
    pub fn set_sampling(&mut self, temperature: f32, seed: u64) -> Result<(), ModelError> {
        self.m.set_sampling(temperature, seed)
    }

    /// Compiles the megakernel (NVRTC, or the disk cache) and loads it, by running one
    /// step at position 0 (and one of its specialisation that loads attention tiles ahead,
    /// where a step will run it), and on a GPU the prefill kernels, by two short prefills;
    /// the KV cache counts as empty afterwards. Lets a caller pay the compile at startup
    /// instead of in the first token, or the first long context's. Counts as one launch or
    /// two.
    pub fn compile(&mut self) -> Result<(), ModelError> {
        for v in self.variants.used(self.m.max_seq) {
            self.m.begin_step(0, 0)?;
            self.launch_as(v, None).map_err(|e| self.m.err(e))?;
        }
        self.m.dev.synchronize().map_err(|e| self.m.err(e))?;
        // On a GPU, the prefill kernels too: a prompt of 16 rows and one of 17 (their row
        // count's divisibility by 16 is part of a compiled kernel's key, as in Triton).
        if self.m.dev.is_cuda() {
            let max_seq = self.m.max_seq;
            for n in [16, 17].into_iter().filter(|&n| n <= max_seq) {
                crate::prefill::run(&mut self.m, &vec![0; n], 0)?;
            }
            self.m.dev.synchronize().map_err(|e| self.m.err(e))?;
        }
        self.m.cached = 0;
        self.m.on_device = None;
        Ok(())
    }

    /// Benchmarks only: see [`DeviceModel::assume_cached`].
    pub fn assume_cached(&mut self, n: usize) -> Result<(), ModelError> {
        self.m.assume_cached(n)
    }

    /// What the last step (or prefill) left, as the output mode asks; `next_pos` is the
    /// position the device's buffers hold for the next step.
    fn output(&mut self, next_pos: usize) -> Result<StepOutput, ModelError> {
        match self.output {
            Output::Token => {
                let next = self.next_token()?;
                if next as usize >= self.m.cfg.vocab_size {
                    // Only a launch that did not finish leaves this: say why.
                    self.check_errors()?;
                    return Err(self.m.err(format!(
                        "the step chose token {next}, beyond the vocabulary"
                    )));
                }
                self.m.on_device = Some((next, next_pos));
                Ok(StepOutput::Token(next))
            }
            Output::Logits => Ok(StepOutput::Logits(self.logits()?)),
        }
    }

    /// Prefill tiles and chunk length (see [`crate::kernels::prefill::PrefillTiles`]).
    pub fn set_prefill_tiles(
        &mut self,
        tiles: crate::kernels::prefill::PrefillTiles,
    ) -> Result<(), ModelError> {
        self.m.set_prefill_tiles(tiles)
    }
    pub fn prefill_tiles(&self) -> &crate::kernels::prefill::PrefillTiles {
        &self.m.prefill.tiles
    }
    /// The KV cache as (K, V), `[layer][kv_head][pos][head_dim]` (for checks).
    pub fn kv_cache(&self) -> Result<(Vec<bf16>, Vec<bf16>), ModelError> {
        self.m.kv_cache()
    }

    /// [`Engine::decode`] ahead: the steps go in batches (the first step alone, then
    /// `tokens_per_readback` each), each batch's tokens copied back at once, and batch b + 1
    /// is queued before the host waits for batch b's tokens, so the GPU runs step after step
    /// while the host reads, streams and decides. When `on_token` stops, the steps queued
    /// beyond are left unread (their KV rows are rewritten when those positions are fed).
    fn decode_ahead(
        &mut self,
        token: u32,
        pos: usize,
        max_steps: usize,
        on_token: &mut dyn FnMut(u32) -> Result<bool, ModelError>,
    ) -> Result<usize, ModelError> {
        if max_steps == 0 {
            return Ok(0);
        }
        self.check_steps_fit(pos, max_steps)?;
        let per = self.per_readback;
        if self.ring.is_none() {
            self.ring = Some(TokenRing::new(&self.m, per)?);
        }
        self.m.begin_step(token, pos)?;
        // Batch 0 is the first step alone (its token as soon as it is chosen), then batch b
        // is steps 1 + (b - 1)·per.. (the last one shorter); its tokens in ring half b % 2.
        let batch = |b: usize| {
            let start = if b == 0 { 0 } else { 1 + (b - 1) * per };
            start.min(max_steps)..(1 + b * per).min(max_steps)
        };
        let batches = 1 + (max_steps - 1).div_ceil(per);
        self.queue_batch(pos, batch(0), 0)?;
        for b in 0..batches {
            let ahead = b + 1 < batches;
            if ahead {
                // Its first step reads its token and position where the last one left them.
                self.queue_batch(pos, batch(b + 1), (b + 1) % 2)?;
            }
            // Steps queued so far: the device's token is the last one's.
            let queued = if ahead { batch(b + 1).end } else { max_steps };
            let ring = self.ring.as_ref().expect("made above");
            let words = ring.host[b % 2].get().map_err(|e| self.m.err(e))?;
            let steps = batch(b);
            for i in steps.clone() {
                let t = words[(i - steps.start) * SLOT_WORDS] as u32;
                if t as usize >= self.m.cfg.vocab_size {
                    // Only a launch that did not finish leaves this: say why.
                    self.check_errors()?;
                    return Err(self
                        .m
                        .err(format!("the step chose token {t}, beyond the vocabulary")));
                }
                if (i as u64 + 1).is_multiple_of(CHECK_EVERY) {
                    self.check_errors()?;
                }
                let go = on_token(t);
                if !matches!(go, Ok(true)) || i + 1 == max_steps {
                    // What the caller has seen (also when it failed): positions up to
                    // pos + i are cached; the device holds this token for the next step
                    // unless a step beyond was queued.
                    self.m.end_step(pos + i);
                    self.m.on_device = (queued == i + 1).then_some((t, pos + i + 1));
                    return go.map(|_| i + 1);
                }
            }
        }
        Ok(max_steps) // not reached: the last step returns above
    }

    /// Queues `n` steps from `pos` (`token` uploaded first) with nothing between the
    /// launches: each step reads the token and position the last one left on the device,
    /// and no token is read back. Waits for them. A diagnostic (`tessera tune
    /// --launch-only`): the steps' GPU time without the per-step token copy and host loop.
    pub fn run_steps_unread(&mut self, token: u32, pos: usize, n: usize) -> Result<(), ModelError> {
        self.check_steps_fit(pos, n)?;
        self.m.begin_step(token, pos)?;
        for i in 0..n {
            self.launch(pos + i).map_err(|e| self.m.err(e))?;
            self.m.end_step(pos + i);
        }
        self.m.dev.synchronize().map_err(|e| self.m.err(e))?;
        // Which token the device holds now is not known here.
        self.m.on_device = None;
        self.check_errors()
    }

    /// Err unless `n` steps from position `pos` fit the KV cache.
    fn check_steps_fit(&self, pos: usize, n: usize) -> Result<(), ModelError> {
        if pos + n > self.m.max_seq {
            return Err(self.m.err(format!(
                "{n} steps from position {pos} pass the KV cache's {} positions",
                self.m.max_seq
            )));
        }
        Ok(())
    }

    /// Launches the steps `steps` after `pos` (the first one's token and position already
    /// on the device), each writing its token into its slot of ring half `half`, and
    /// queues the copy of that half to the host.
    fn queue_batch(
        &mut self,
        pos: usize,
        steps: std::ops::Range<usize>,
        half: usize,
    ) -> Result<(), ModelError> {
        let first = steps.start;
        for i in steps {
            self.launch_as(self.variants.at(pos + i), Some((half, i - first)))
                .map_err(|e| self.m.err(e))?;
            self.m.end_step(pos + i);
        }
        let ring = self.ring.as_mut().expect("made by decode_ahead");
        ring.dev[half]
            .copy_to_readback(&mut ring.host[half])
            .map_err(|e| self.m.err(e))
    }

    /// The one launch of the step at `pos`; its token id and position are already on the
    /// device.
    fn launch(&mut self, pos: usize) -> Result<(), dsl_runtime::Error> {
        self.launch_as(self.variants.at(pos), None)
    }

    /// One launch of the decode step's specialisation `v` ([`Variant`]); its token goes to
    /// `next`, or to slot j of token ring half h (`Some((h, j))`, `decode_ahead`).
    fn launch_as(
        &mut self,
        v: Variant,
        ring_slot: Option<(usize, usize)>,
    ) -> Result<(), dsl_runtime::Error> {
        self.launches += 1;
        self.variants.count(v);
        let (m, w, a) = (&self.m, &self.m.w, &self.m.a);
        let slot_view = match (ring_slot, &self.ring) {
            (Some((h, j)), Some(r)) => Some(r.dev[h].slice(j * SLOT_WORDS..j * SLOT_WORDS + 1)),
            _ => None,
        };
        let cfg = &m.cfg;
        let args = decode_step::Args {
            token: ptr(&a.token),
            pos: ptr(&a.pos),
            seed: ptr(&a.seed),
            inv_temp: ptr(&a.inv_temp),
            embed_tokens: ptr(&w.embed_tokens),
            lm_head: ptr(w.head()),
            norm: ptr(&w.norm),
            rope: ptr(&w.rope),
            input_layernorm: ptr(&w.input_layernorm),
            qkv_proj: ptr(&w.qkv_proj),
            q_norm: ptr(&w.q_norm),
            k_norm: ptr(&w.k_norm),
            o_proj: ptr(&w.o_proj),
            post_attention_layernorm: ptr(&w.post_attention_layernorm),
            gate_up_proj: ptr(&w.gate_up_proj),
            // Transposed when the MLP is fused (`DeviceModel::new` uploads it so).
            down_proj: ptr(&w.down_proj),
            k_cache: ptr(&m.k_cache),
            v_cache: ptr(&m.v_cache),
            x: ptr(&a.x),
            x_mlp: ptr(&a.x_mlp),
            qkv: ptr(&a.qkv),
            q: ptr(&a.q),
            qk_rot: ptr(&a.qk_rot),
            qk_ss: ptr(&a.qk_ss),
            attn: ptr(&a.attn),
            act: ptr(&a.act),
            part_m: ptr(&a.part_m),
            part_l: ptr(&a.part_l),
            part_acc: ptr(&a.part_acc),
            tickets: ptr(&a.tickets),
            logits: ptr(&a.logits),
            part_max: ptr(&a.part_max),
            part_idx: ptr(&a.part_idx),
            next: match &slot_view {
                Some(v) => ptr(v),
                None => ptr(&a.next),
            },
            max_seq: m.max_seq as i32,
            eps: cfg.rms_norm_eps as f32,
            scale: 1.0 / (cfg.head_dim as f32).sqrt(),
        };
        let constexprs = self.constexprs_for(v);
        decode_step::MEGAKERNEL.launch(&m.dev, &self.opts, &args.list(), constexprs)
    }

    /// The bound constexprs (`new`, `retune`; not rebuilt per step) of the decode step's
    /// specialisation `v` (empty where no step launches it).
    pub fn constexprs_for(&self, v: Variant) -> &[Binding] {
        self.variants.constexprs(v)
    }
}

impl Engine for MegakernelEngine {
    fn name(&self) -> &str {
        "megakernel"
    }
    fn device(&self) -> String {
        self.m.dev.describe()
    }
    fn max_context(&self) -> usize {
        self.m.max_seq
    }
    fn vocab_size(&self) -> usize {
        self.m.cfg.vocab_size
    }
    fn step(&mut self, token: u32, pos: usize) -> Result<StepOutput, ModelError> {
        self.m.begin_step(token, pos)?;
        self.launch(pos).map_err(|e| self.m.err(e))?;
        self.m.end_step(pos);
        if self.launches.is_multiple_of(CHECK_EVERY) {
            self.check_errors()?;
        }
        self.output(pos + 1)
    }
    fn prompt_mode(&self) -> String {
        crate::prefill::prompt_mode(&self.m)
    }
    /// A prompt of one token is a decode step; longer ones go through `crate::prefill`
    /// (ordinary kernel launches, not the megakernel), which leaves the next token and
    /// position in the device buffers as a step does: decode continues with no copy.
    fn prefill(&mut self, tokens: &[u32], start_pos: usize) -> Result<StepOutput, ModelError> {
        if let [t] = tokens {
            return self.step(*t, start_pos);
        }
        crate::prefill::run(&mut self.m, tokens, start_pos)?;
        self.output(start_pos + tokens.len())
    }
    fn decode(
        &mut self,
        token: u32,
        pos: usize,
        max_steps: usize,
        on_token: &mut dyn FnMut(u32) -> Result<bool, ModelError>,
    ) -> Result<usize, ModelError> {
        if self.run_ahead && self.output == Output::Token {
            self.decode_ahead(token, pos, max_steps, on_token)
        } else {
            crate::engine::decode_stepwise(self, token, pos, max_steps, on_token)
        }
    }
    /// Greedy and plain temperature sampling happen in the lm_head (one int read back);
    /// top-k / top-p need the logits on the host.
    fn device_sampling(&mut self, p: &SamplingParams) -> Result<bool, ModelError> {
        if p.is_greedy() || (p.top_k == 0 && p.top_p >= 1.0) {
            self.set_sampling(p.temperature, p.seed)?;
            self.output = Output::Token;
            Ok(true)
        } else {
            self.set_sampling(0.0, 0)?;
            self.output = Output::Logits;
            Ok(false)
        }
    }
}
