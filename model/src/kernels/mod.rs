//! The decoder's ops as `#[kernel]`s, one file per op or small group, and the rule that
//! derives their tile sizes from a model's `Config`.
//!
//! A decode step launches, in order (`kernels_engine.rs`):
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
//! The megakernel engine (`megakernel_engine.rs`) runs the same ops as one launch, with
//! three changes: QKV finishes each head's q/k norm + RoPE in its last program
//! (`rmsnorm_qkv_rope`), o_proj runs per query head and merges that head's attention
//! partials itself (`gemv_head_residual`; attention is `attn_split` alone), and the MLP is
//! one stage, `rmsnorm_mlp_tiles` (gate, up, SiLU·mul and down together, split over the
//! intermediate dimension, down's partial sums added into the residual with f32 atomics).
//! With `TESSERA_O_HEADS=0`, attention merges each head in its last split
//! (`attn_split_merge`) and o_proj is `gemv_residual_copy`.
//!
//! Every kernel takes its dimensions as i32 scalars or constexprs, so one source serves
//! Qwen3-0.6B to 32B and the tiny test checkpoints.
pub mod attention;
pub mod embedding;
pub mod gemv;
pub mod lm_head;
pub mod mlp;
pub mod norm;
pub mod prefill;
pub mod rope;

use crate::config::Config;
use dsl_runtime::{ConstVal, Shipped};

/// Programs the attention split phase aims for at least (heads × splits ≥ half of it).
pub const ATTN_TARGET_PROGRAMS: usize = 256;
/// Warps per program for every op, in both engines (the megakernel lowers every stage for
/// one block size). Chosen with `tessera tune` on an H200 (docs/PERF.md).
pub const NUM_WARPS: u32 = 16;
/// Persistent CTAs per SM of the megakernel on a GPU (the tiles spread rows over them).
pub const CTAS_PER_SM: u32 = 1;

/// What the tile sizes are chosen for. At M = 1 a GEMV's speed is the bytes each SM has in
/// flight (Little's law: ~4 TB/s × ~1 µs of DRAM latency is ~32 KB per SM of an H100/H200),
/// so a program loads one big tile per step, and the rows are spread so the busiest CTA
/// of the persistent grid streams as few bytes as possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileRule {
    /// CTAs the rows are spread over (the GPU's SMs: one persistent CTA each).
    pub ctas: usize,
    /// Warps per program.
    pub warps: u32,
    /// Elements of a weight tile per thread (registers: this many bf16 loads in flight).
    pub elems_per_thread: usize,
    /// The widest k step: k up to this is one step, one round trip to memory.
    pub bk_max: usize,
}

impl Default for TileRule {
    /// A 132-SM H100 / H200.
    fn default() -> Self {
        TileRule {
            ctas: 132,
            warps: NUM_WARPS,
            elems_per_thread: 64,
            bk_max: 4096,
        }
    }
}

impl TileRule {
    /// The default rule, spread over this device's SMs (132 for the interpreter), with
    /// `CTAS_PER_SM` persistent CTAs each.
    pub fn for_device(dev: &dsl_runtime::Device) -> TileRule {
        TileRule {
            ctas: dev.sm_count().map_or(132, |n| (n * CTAS_PER_SM) as usize),
            ..TileRule::default()
        }
    }
}

/// Tile sizes of one GEMV: BM output rows per program, BK columns per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemv {
    pub bm: usize,
    pub bk: usize,
}

impl Gemv {
    /// [`Gemv::with_rule`] with the default rule, one weight tile per program.
    pub fn for_shape(m: usize, k: usize) -> Gemv {
        Gemv::with_rule(m, k, 1, &TileRule::default())
    }

    /// BK = k rounded up to a power of two, at most `bk_max` (the tail is masked; a power
    /// of two keeps every lane of the CUDA layout busy). BM: a power of two such that the
    /// `tiles` weight tiles of a program (2 for gate/up) hold at most `elems_per_thread`
    /// elements per thread, the largest unless a smaller one makes the busiest CTA stream
    /// at least 1/8 fewer rows (`⌈programs / ctas⌉ · BM`). A program costs a round trip
    /// and a CTA-wide reduction whatever its size: at 8B, 1-row QKV programs (47 rows on
    /// the busiest CTA against 48 in 8-row ones) made the step 4.4x its floor.
    pub fn with_rule(m: usize, k: usize, tiles: usize, r: &TileRule) -> Gemv {
        let bk = k.next_power_of_two().clamp(1, r.bk_max.max(1));
        let threads = 32 * r.warps as usize;
        let cap = floor_pow2(threads * r.elems_per_thread / (bk * tiles.max(1)));
        let busiest = |bm: usize| m.div_ceil(bm).div_ceil(r.ctas.max(1)) * bm;
        let mut bm = cap;
        let mut c = cap;
        while c > 1 {
            c /= 2;
            if busiest(c) * 8 <= busiest(bm) * 7 {
                bm = c;
            }
        }
        Gemv { bm, bk }
    }
    /// Programs for `m` rows.
    pub fn programs(&self, m: usize) -> usize {
        m.div_ceil(self.bm)
    }
}

/// Every constexpr of a decode step, derived from the config (`Tiles::for_config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiles {
    /// Warps per program (both engines launch every op with this many).
    pub warps: u32,
    /// CTAs the rows were spread over: the megakernel's persistent grid on a GPU.
    pub ctas: usize,
    /// The rule's elements of a weight tile per thread (`TileRule::elems_per_thread`), for
    /// re-deriving a GEMV's tiles ([`Tiles::with_gemv_tiles`]).
    pub elems_per_thread: usize,
    pub embed_block: usize,
    pub qkv: Gemv,
    /// QKV row tiles per program in the megakernel (`rmsnorm_qkv_rope_tiles`: the norm once
    /// per program, the next tile's weights loaded while one reduces), when one k step
    /// covers the hidden size; 1: `rmsnorm_qkv_rope`, one tile per program (the kernels
    /// engine's, and the rule's here; the megakernel engine applies
    /// `megakernel_engine::qkv_tiles_rule`). See [`Tiles::with_qkv_tiles`].
    pub qkv_tiles: usize,
    pub o_proj: Gemv,
    /// o_proj row tiles per program in the megakernel (`gemv_residual_tiles`: x once per
    /// program, the next tile's weights loaded while one reduces), when one k step covers
    /// its k; 1: `gemv_residual`, one tile per program (the kernels engine's, and the rule's
    /// here; the megakernel engine applies `megakernel_engine::GEMV_TILES`). See
    /// [`Tiles::with_gemv_tiles`].
    pub o_proj_tiles: usize,
    /// The fused MLP's o_proj (`gemv_residual_copy`) loads its weight tile before the
    /// residual rows, so that with the stage's wait in the body (`MegaOptions::wait_in_body`)
    /// the weights are in flight while it waits. The rule says no; the megakernel engine
    /// sets it with the wait (`megakernel_engine::with_wait_in_body`).
    pub o_weights_first: bool,
    pub gate_up: Gemv,
    /// gate/up row tiles per program in the megakernel (`rmsnorm_gate_up_silu_tiles`: the
    /// norm once per program, the next tile's weights loaded while one reduces), when one k
    /// step covers the hidden size (`gate_up.bk >= hidden`; else the k-looped
    /// `rmsnorm_gate_up_silu`, one program per tile). The default spreads the tiles over
    /// the CTAs (faster than one per program on an H100, docs/PERF.md session 13): see
    /// [`Tiles::with_gate_up_tiles`].
    pub gate_up_tiles: usize,
    pub down: Gemv,
    /// down row tiles per program in the megakernel, as `o_proj_tiles`.
    pub down_tiles: usize,
    /// The MLP as one stage of the megakernel (`rmsnorm_mlp_tiles`, with
    /// `fused_mlp`): three weight tiles per row tile (gate, up and down's
    /// transposed rows), so BM is chosen for three where gate/up's is chosen for two.
    pub mlp: Gemv,
    /// Its row tiles per program, spread over the CTAs (1 unless one k step covers the
    /// hidden size, which the fused stage needs).
    pub mlp_tiles: usize,
    /// Whether the megakernel runs the MLP as that one stage (the rule says no; the
    /// megakernel engine sets it from `MegakernelOptions::fused_mlp`, on by default: see
    /// [`Tiles::with_fused_mlp`]).
    pub fused_mlp: bool,
    /// Copies of the residual stream the fused MLP's programs add into (program p into
    /// copy p % copies): fewer atomics queue on each address, and every reader sums the
    /// copies (`gemv::resid_load`). 1 in the rule; the megakernel engine sets it with
    /// `fused_mlp` (`megakernel_engine::resid_copies_rule`: 2 up to hidden 2048).
    pub resid_copies: usize,
    /// The megakernel's o_proj split over the query heads, each program merging its head's
    /// attention partials and adding into the residual with atomics
    /// (`gemv::gemv_head_residual`; attention writes partials only, `attn_split`). Needs
    /// `fused_mlp`. Off in the rule; the megakernel engine sets it
    /// (`megakernel_engine::o_heads_rule`, `MegakernelOptions::o_heads`).
    pub o_heads: bool,
    /// Row blocks per o_proj-per-head program (`gemv::gemv_head_residual_tiles` above 1: the
    /// head merged once per program; 0: spread over the CTAs). 1 in the rule;
    /// `MegakernelOptions::o_heads_tiles` (a candidate).
    pub o_heads_tiles: usize,
    pub lm_head: Gemv,
    /// lm_head row blocks per program in the megakernel (`lm_head_argmax_tiles`), as
    /// `gate_up_tiles` (spread over the CTAs by default; `lm_head_argmax` with a k loop).
    pub lm_head_tiles: usize,
    /// Positions per attention tile ([BLOCK_N, head_dim] K and V tiles).
    pub attn_block_n: usize,
    /// Sequence splits per query head (attention phase 1 grid axis 1).
    pub attn_splits: usize,
    /// The megakernel's attention loads each K/V tile one iteration early
    /// (`attention::attn_split_ahead`, with o_proj per head): off in the rule; the engine
    /// launches a second specialisation with it on from some position
    /// (`megakernel_engine::attn_ahead_from`).
    pub attn_ahead: bool,
    /// The megakernel's attention computed inside o_proj per head, each program its head's
    /// whole (`gemv::attn_head_residual`: one stage and one hop less, the K/V read once per
    /// program): off in the rule; the megakernel engine launches a specialisation with it
    /// on below one tile of context (`megakernel_engine::attn_in_o_until`).
    pub attn_in_o: bool,
    /// With `attn_in_o`: o_proj's programs also norm and rope the raw QKV heads and write
    /// the new K/V row (`gemv::attn_rope_head_residual`), the QKV stage no ticket. Off in
    /// the rule; the megakernel engine sets it in that specialisation
    /// (`megakernel_engine::attn_rope_rule`).
    pub attn_rope: bool,
    /// With `attn_in_o`: each QKV program ropes its own half-head pairs and leaves its
    /// rows' sum of squares, and o_proj's programs apply each head's 1/rms
    /// (`rope::rmsnorm_qkv_rope_pairs`, `gemv::attn_scale_head_residual`): no ticket, no
    /// head finisher, no norm in o_proj. Off in the rule; the megakernel engine sets it in
    /// that specialisation (`megakernel_engine::qkv_pairs_rule`, where `qkv_pairs_fit`),
    /// in `attn_rope`'s place.
    pub qkv_pairs: bool,
    /// Tile of the argmax merge over lm_head blocks.
    pub argmax_block: usize,
}

impl Tiles {
    /// The default rule (a 132-SM GPU).
    pub fn for_config(cfg: &Config) -> Tiles {
        Tiles::with_rule(cfg, &TileRule::default())
    }

    pub fn with_rule(cfg: &Config, r: &TileRule) -> Tiles {
        let h = cfg.hidden_size;
        let gemv = |m, k, tiles| Gemv::with_rule(m, k, tiles, r);
        let lm_head = gemv(cfg.vocab_size, h, 1);
        let tiles = Tiles {
            warps: r.warps,
            ctas: r.ctas,
            elems_per_thread: r.elems_per_thread,
            embed_block: h.min(1024),
            // Whole heads per D / BM programs: the last of them finishes the head
            // (`rmsnorm_qkv_rope`), so BM divides head_dim.
            qkv: {
                let g = gemv(cfg.q_dim() + 2 * cfg.kv_dim(), h, 1);
                Gemv {
                    bm: g.bm.min(1 << cfg.head_dim.max(1).trailing_zeros()),
                    ..g
                }
            },
            qkv_tiles: 1,
            o_proj: gemv(h, cfg.q_dim(), 1),
            o_proj_tiles: 1,
            o_weights_first: false,
            // m = intermediate: a program owns BM gate rows and the BM matching up rows.
            gate_up: gemv(cfg.intermediate_size, h, 2),
            gate_up_tiles: 1,
            down: gemv(h, cfg.intermediate_size, 1),
            down_tiles: 1,
            mlp: gemv(cfg.intermediate_size, h, 3),
            mlp_tiles: 1,
            fused_mlp: false,
            resid_copies: 1,
            o_heads: false,
            o_heads_tiles: 1,
            lm_head,
            lm_head_tiles: 1,
            // A [BLOCK_N, head_dim] K (then V) tile of elems_per_thread per thread: at long
            // contexts each program's chunk is a few big round trips, not many small ones.
            attn_block_n: floor_pow2(
                32 * r.warps as usize * r.elems_per_thread / cfg.head_dim.max(1),
            )
            .clamp(16, 128),
            // One round of split programs over the CTAs.
            attn_splits: (r.ctas.max(ATTN_TARGET_PROGRAMS / 2) / cfg.num_attention_heads)
                .clamp(1, 32),
            attn_ahead: false,
            attn_in_o: false,
            attn_rope: false,
            qkv_pairs: false,
            // The whole merge in one tile (one round trip, not one per 1024 blocks).
            argmax_block: lm_head
                .programs(cfg.vocab_size)
                .next_power_of_two()
                .min(8192),
        };
        let mlp_tiles =
            tiles.tiles_per_program(tiles.mlp, cfg.intermediate_size, cfg.hidden_size, 0);
        Tiles { mlp_tiles, ..tiles }
            .with_gate_up_tiles(cfg, 0)
            .with_lm_head_tiles(cfg, 0)
    }
}

impl Tiles {
    /// gate/up with `tiles` row tiles per program (0: as many as spread the rows over
    /// `ctas` programs), when one k step covers the hidden size; else unchanged (one tile
    /// per program), as `rmsnorm_gate_up_silu_tiles` needs.
    pub fn with_gate_up_tiles(mut self, cfg: &Config, tiles: usize) -> Tiles {
        self.gate_up_tiles =
            self.tiles_per_program(self.gate_up, cfg.intermediate_size, cfg.hidden_size, tiles);
        self
    }

    /// The megakernel's MLP as one stage (`mlp::rmsnorm_mlp_tiles`, o_proj as
    /// `gemv_residual_copy`) or as gate/up then down. Fused, it needs one k step over the
    /// hidden size (`mlp.bk >= hidden`, every Qwen3 up to 8B) and down stored transposed
    /// (`DeviceWeights::down_t`).
    pub fn with_fused_mlp(mut self, on: bool) -> Tiles {
        self.fused_mlp = on;
        self
    }

    /// QKV with `tiles` row tiles per program, as [`Tiles::with_gate_up_tiles`]
    /// (`rmsnorm_qkv_rope_tiles`).
    pub fn with_qkv_tiles(mut self, cfg: &Config, tiles: usize) -> Tiles {
        self.qkv_tiles = self.tiles_per_program(
            self.qkv,
            cfg.q_dim() + 2 * cfg.kv_dim(),
            cfg.hidden_size,
            tiles,
        );
        self
    }

    /// The lm_head with `tiles` row blocks per program, as [`Tiles::with_gate_up_tiles`]
    /// (`lm_head_argmax_tiles`).
    pub fn with_lm_head_tiles(mut self, cfg: &Config, tiles: usize) -> Tiles {
        self.lm_head_tiles =
            self.tiles_per_program(self.lm_head, cfg.vocab_size, cfg.hidden_size, tiles);
        self
    }

    /// o_proj and down with `tiles` row tiles per program each (`gemv_residual_tiles`; 0:
    /// as many as spread the rows over `ctas` programs, 1: `gemv_residual`). The tiles
    /// kernel needs one k step: a GEMV whose k is wider than its BK (down at 8B: 12288
    /// against 4096) is re-derived with k steps up to 16384 ([`GEMV_TILES_BK_MAX`]; BM
    /// shrinks to keep the elements per thread, BM = 2 at 8B); where k is wider still, it
    /// keeps its tiles and one tile per program. `tiles = 1` changes nothing.
    pub fn with_gemv_tiles(mut self, cfg: &Config, tiles: usize) -> Tiles {
        let one_step = |g: Gemv, m: usize, k: usize| {
            if tiles == 1 || g.bk >= k {
                return g;
            }
            let r = TileRule {
                ctas: self.ctas,
                warps: self.warps,
                elems_per_thread: self.elems_per_thread,
                bk_max: GEMV_TILES_BK_MAX,
            };
            let wide = Gemv::with_rule(m, k, 1, &r);
            if wide.bk >= k {
                wide
            } else {
                g
            }
        };
        let h = cfg.hidden_size;
        self.o_proj = one_step(self.o_proj, h, cfg.q_dim());
        self.down = one_step(self.down, h, cfg.intermediate_size);
        self.o_proj_tiles = self.tiles_per_program(self.o_proj, h, cfg.q_dim(), tiles);
        self.down_tiles = self.tiles_per_program(self.down, h, cfg.intermediate_size, tiles);
        self
    }

    /// Row tiles per program of a GEMV of `m` rows of length `k`: `tiles`, or with 0 as
    /// many as spread them over the CTAs; 1 unless one k step covers k.
    fn tiles_per_program(&self, g: Gemv, m: usize, k: usize, tiles: usize) -> usize {
        if g.bk < k {
            return 1;
        }
        let programs = g.programs(m);
        match tiles {
            0 => programs.div_ceil(self.ctas.max(1)),
            n => n,
        }
        .clamp(1, programs.max(1))
    }
}

/// The widest k step [`Tiles::with_gemv_tiles`] gives o_proj and down so that one step
/// covers k (down at Qwen3-8B: 12288).
pub const GEMV_TILES_BK_MAX: usize = 16384;

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
    // o_proj per head's constexprs (`megakernel_engine::o_heads_bm`).
    let head_gemv = vec![
        ("BM", int(crate::megakernel_engine::o_heads_bm(&cfg, &t))),
        ("D", int(hd)),
        ("SPLITS", int(t.attn_splits)),
        ("COPIES", int(1)),
    ];
    let k = |kernel, constexprs, about| Shipped {
        kernel,
        constexprs,
        num_warps: t.warps,
        about,
    };
    vec![
        k(
            &embedding::embedding::KERNEL,
            vec![("BLOCK", int(t.embed_block)), ("COPIES", int(1))],
            "x = embed_tokens[token] (f32 residual stream), token read from a device buffer",
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
            &attention::attn_split_ahead::KERNEL,
            vec![
                ("D", int(hd)),
                ("BLOCK_N", int(t.attn_block_n)),
                ("SPLITS", int(t.attn_splits)),
            ],
            "attn_split with the next K/V tile in flight while one reduces (the megakernel's from SPLITS x BLOCK_N positions on)",
        ),
        k(
            &attention::attn_merge::KERNEL,
            vec![("D", int(hd)), ("SPLITS", int(t.attn_splits))],
            "decode attention, merge of the split partials (online-softmax rescale)",
        ),
        k(
            &attention::attn_split_merge::KERNEL,
            vec![
                ("D", int(hd)),
                ("BLOCK_N", int(t.attn_block_n)),
                ("SPLITS", int(t.attn_splits)),
            ],
            "decode attention in one grid (the megakernel's with TESSERA_O_HEADS=0): the split phase, then the last program of each head merges it",
        ),
        k(
            &gemv::gemv_residual::KERNEL,
            gemv(t.o_proj),
            "res += W · x: o_proj / down GEMV with the residual add as epilogue",
        ),
        k(
            &gemv::gemv_residual_tiles::KERNEL,
            {
                // The megakernel's candidate (off by default), 2 of o_proj's tiles a program
                // (spread over the CTAs they are 1 at 0.6B: 128 programs fit 132 CTAs).
                let on = t.clone().with_gemv_tiles(&cfg, 2);
                let mut c = gemv(on.o_proj);
                c.push(("TILES", int(on.o_proj_tiles)));
                c
            },
            "the megakernel's candidate gemv_residual: TILES row tiles per program, x once, the next tile's weights loaded while one reduces",
        ),
        k(
            &mlp::rmsnorm_gate_up_silu::KERNEL,
            gemv(t.gate_up),
            "act = silu(gate·h) * (up·h), h = rmsnorm(x): post-attn norm + fused gate/up",
        ),
        k(
            &mlp::rmsnorm_gate_up_silu_tiles::KERNEL,
            {
                let mut c = gemv(t.gate_up);
                c.push(("TILES", int(t.gate_up_tiles)));
                c
            },
            "the megakernel's: TILES row tiles per program, the norm once, the next tile's weights loaded while one reduces",
        ),
        k(
            &gemv::gemv_residual_copy::KERNEL,
            {
                let mut c = gemv(t.o_proj);
                c.push(("COPIES", int(1)));
                c.push(("WEIGHTS_FIRST", ConstVal::Bool(false)));
                c
            },
            "the megakernel's o_proj by rows with TESSERA_O_HEADS=0: res += W · x, and a copy of the new rows",
        ),
        k(
            &gemv::gemv_head_residual::KERNEL,
            head_gemv.clone(),
            "the megakernel's o_proj: program (head, row block) merges the head's attention partials, res += W[rows, head] · a and the MLP's copy too (f32 atomics)",
        ),
        k(
            &gemv::attn_head_residual::KERNEL,
            vec![
                ("BM", int(crate::megakernel_engine::o_heads_bm(&cfg, &t))),
                ("D", int(hd)),
                ("BLOCK_N", int(t.attn_block_n)),
                ("COPIES", int(1)),
            ],
            "the megakernel's below one tile of context at 0.6B: o_proj per head whose programs attend their head over every position themselves (one stage, no partials)",
        ),
        k(
            &gemv::attn_rope_head_residual::KERNEL,
            vec![
                ("BM", int(crate::megakernel_engine::o_heads_bm(&cfg, &t))),
                ("D", int(hd)),
                ("BLOCK_N", int(t.attn_block_n)),
                ("COPIES", int(1)),
                ("TILES", int(1)),
            ],
            "the megakernel's below one tile of context from 1.7B up: attn_head_residual that norms and ropes the raw QKV heads and writes the new K/V row itself (no QKV ticket)",
        ),
        k(
            &gemv::gemv_head_residual_tiles::KERNEL,
            [head_gemv, vec![("TILES", int(2))]].concat(),
            "the megakernel's candidate o_proj per head: TILES row blocks a program, the head merged once, the next block's weights loaded while one adds",
        ),
        k(
            &mlp::rmsnorm_mlp_tiles::KERNEL,
            {
                let mut c = gemv(t.mlp);
                c.push(("TILES", int(t.mlp_tiles)));
                c.push(("COPIES", int(1)));
                c
            },
            "the megakernel's candidate MLP in one stage: gate/up as the tiles kernel, times down's transposed rows, f32 atomics into x",
        ),
        k(
            &lm_head::lm_head_argmax_tiles::KERNEL,
            {
                let mut c = gemv(t.lm_head);
                c.push(("TILES", int(t.lm_head_tiles)));
                c.push(("COPIES", int(1)));
                c
            },
            "the megakernel's lm_head_argmax: TILES blocks per program, the norm once, the next block's weights loaded while one reduces",
        ),
        k(
            &lm_head::lm_head_argmax::KERNEL,
            {
                let mut c = gemv(t.lm_head);
                c.push(("COPIES", int(1)));
                c
            },
            "final norm + lm_head GEMV + per-block (max, argmax), Gumbel-max when sampling: phase 1",
        ),
        k(
            &lm_head::argmax_merge::KERNEL,
            vec![("BLOCK", int(t.argmax_block))],
            "argmax over the lm_head blocks: greedy phase 2, one int out",
        ),
    ]
}

/// The prefill kernels (`prefill.rs`) at the GPU tiles of
/// `crate::kernels::prefill::PrefillTiles::gpu` and Qwen3-0.6B's dims, for `tessera explain`. Apart
/// from [`shipped`]: `tests/kernels_nvrtc.rs` also compiles every shipped kernel with each
/// tile made odd at one warp, which for a 128 x 128 `dot` is an FMA fallback holding 16K
/// f32 per thread (about 35 s of NVRTC per kernel and arch). `megakernel_nvrtc.rs`
/// compiles these at the tiles they run with.
pub fn prefill_shipped() -> Vec<Shipped> {
    let t = Tiles::for_config(&qwen3_0_6b());
    let int = |v: usize| ConstVal::Int(v as i64);
    let hd = qwen3_0_6b().head_dim;
    let p = crate::kernels::prefill::PrefillTiles::gpu();
    let gemm = vec![
        ("BM", int(p.gemm_bm)),
        ("BN", int(p.gemm_bn)),
        ("BK", int(p.gemm_bk)),
        ("GROUP_M", int(p.group_m)),
    ];
    let pk = |kernel, constexprs, num_warps, about| Shipped {
        kernel,
        constexprs,
        num_warps,
        about,
    };
    vec![
        pk(
            &prefill::embed_rows::KERNEL,
            vec![("BLOCK", int(t.embed_block))],
            p.row_warps,
            "prefill: x[t] = embed_tokens[tokens[t]] for a chunk's rows",
        ),
        pk(
            &prefill::widen::KERNEL,
            vec![("BLOCK", int(t.embed_block))],
            p.row_warps,
            "prefill: the last row as f32, into decode's residual stream (for the lm_head)",
        ),
        pk(
            &prefill::gemm_nt::KERNEL,
            gemm.clone(),
            p.gemm_warps,
            "prefill: Y = X · Wᵀ (QKV) on tensor cores, W stored [out, in], grouped order",
        ),
        pk(
            &prefill::gemm_nt_residual::KERNEL,
            gemm.clone(),
            p.gemm_warps,
            "prefill: res += X · Wᵀ (o_proj, down), the residual add as epilogue",
        ),
        pk(
            &prefill::gemm_nn_residual::KERNEL,
            gemm.clone(),
            p.gemm_warps,
            "prefill: res += X · W, W stored [in, out] (down in the megakernel engine), the residual add as epilogue",
        ),
        pk(
            &prefill::gemm_nt_gate_up_silu::KERNEL,
            gemm,
            p.gemm_warps,
            "prefill: act = silu(X · W_gateᵀ) · (X · W_upᵀ), fused [gate; up] weight",
        ),
        pk(
            &prefill::qk_norm_rope_rows::KERNEL,
            vec![("D", int(hd)), ("BT", int(p.rope_bt))],
            p.row_warps,
            "prefill: q/k RMSNorm + RoPE + K/V cache write for BT rows at start_pos + t",
        ),
        pk(
            &prefill::prefill_attention::KERNEL,
            vec![
                ("BM", int(p.attn_bm)),
                ("BN", int(p.attn_bn)),
                ("D", int(hd)),
            ],
            p.attn_warps,
            "prefill: causal FlashAttention over the KV cache, GQA, dot(q, trans(k))",
        ),
    ]
}

/// The largest power of two ≤ n (1 for 0).
pub fn floor_pow2(n: usize) -> usize {
    1usize << n.max(1).ilog2()
}
