//! `tessera tune`: the decode megakernel's speed over a grid of tile rules and megakernel
//! options, on one loaded model, with a per-stage profile of any of them.
//!
//! Each configuration re-tiles the same resident weights (`MegakernelEngine::retune`),
//! compiles (NVRTC, or the disk cache), decodes a few warm-up tokens at the given context
//! position, then times `tokens` greedy steps exactly as `generate` runs them. With
//! `profile`, one more step runs with `%globaltimer` stamps per stage and CTA
//! (`MegaOptions::profile`) and the table of where the step's time went is kept.
use crate::runtime::mega::MegaOptions;
use crate::runtime::Device;
use model::kernels::{TileRule, Tiles};
use model::kernels_engine::Output;
use model::megakernel_engine::{decode_step, MegakernelEngine, MegakernelOptions, RetuneOptions};
use model::{Config, Engine, ModelError, Weights};
use serde::Serialize;
use std::time::Instant;

/// One point of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Knobs {
    pub warps: u32,
    pub elems_per_thread: usize,
    pub bk_max: usize,
    /// Persistent CTAs per SM (the tile rule spreads rows over all of them).
    pub ctas_per_sm: u32,
    pub wait_prefetch_bytes: u64,
    /// Attention splits per head; 0: the tile rule's.
    pub attn_splits: usize,
    /// gate/up row tiles per program (`Tiles::gate_up_tiles`); 0: spread over the CTAs.
    pub gate_up_tiles: usize,
    /// lm_head row blocks per program (`Tiles::lm_head_tiles`); 0: spread over the CTAs.
    pub lm_head_tiles: usize,
    /// o_proj and down row tiles per program (`Tiles::with_gemv_tiles`); 0: spread over
    /// the CTAs, 1: one per program (the default).
    pub gemv_tiles: usize,
    /// QKV row tiles per program (`Tiles::with_qkv_tiles`); 0: spread over the CTAs, 1:
    /// one per program; None: the engine's rule (`megakernel_engine::qkv_tiles_rule`).
    pub qkv_tiles: Option<usize>,
    /// o_proj-per-head row blocks per program (`Tiles::o_heads_tiles`); 0: spread over the
    /// CTAs, 1: one per program; None: the engine's rule
    /// (`megakernel_engine::o_heads_tiles_rule`).
    pub o_heads_tiles: Option<usize>,
}

impl Default for Knobs {
    /// What the engines use by default.
    fn default() -> Self {
        let (r, m) = (TileRule::default(), MegakernelOptions::default().mega);
        Knobs {
            warps: r.warps,
            elems_per_thread: r.elems_per_thread,
            bk_max: r.bk_max,
            ctas_per_sm: model::kernels::CTAS_PER_SM,
            wait_prefetch_bytes: m.wait_prefetch_bytes,
            attn_splits: 0,
            gate_up_tiles: 0,
            lm_head_tiles: 0,
            gemv_tiles: model::megakernel_engine::GEMV_TILES,
            qkv_tiles: None,
            o_heads_tiles: MegakernelOptions::default().o_heads_tiles,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TuneRow {
    pub knobs: Knobs,
    pub ms_per_token: Option<f64>,
    /// The timed greedy tokens equal the first configuration's (the sync options change no
    /// arithmetic; other tiles may sum in another order, and the fused MLP's atomics land
    /// in any order, so where two logits nearly tie a run may pick the other).
    pub same_tokens: Option<bool>,
    pub error: Option<String>,
    /// Per-stage profile (one step), when asked for.
    pub profile: Option<String>,
    /// ms per step launched back to back with no token read back between (`Timing::
    /// launch_only`), when asked for.
    #[serde(default)]
    pub ms_per_launch_unread: Option<f64>,
}

/// How each configuration of a tuning run is timed.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Context position the timed tokens start at.
    pub position: usize,
    /// Tokens timed per configuration.
    pub tokens: usize,
    /// Also profile one step of each configuration.
    pub profile: bool,
    /// Every sync of the step left out (`MegaOptions::drop_all_syncs`): a diagnostic whose
    /// tokens are wrong, the time of the stream and the compute without dependency waits.
    pub no_waits: bool,
    /// Also time the same steps launched back to back, no token read back between them
    /// (`MegakernelEngine::run_steps_unread`): what the per-step copy and host loop cost.
    pub launch_only: bool,
    /// The megakernel's wait watchdog (`MegaOptions::timeout_ms`): raised under
    /// compute-sanitizer, whose instrumentation makes a step far slower.
    pub watchdog_ms: u64,
}

/// Runs every configuration; a configuration that fails (it does not fit, say) reports
/// its error and the others go on.
pub fn run(
    cfg: &Config,
    weights: &Weights,
    dev: &Device,
    grid: &[Knobs],
    timing: Timing,
) -> Result<Vec<TuneRow>, ModelError> {
    let Timing {
        position,
        tokens,
        watchdog_ms,
        ..
    } = timing;
    let opts = MegakernelOptions {
        max_seq: Some((position + tokens + 8).min(cfg.max_position_embeddings)),
        output: Output::Token,
        ..Default::default()
    };
    let mut engine = MegakernelEngine::new(cfg.clone(), weights, dev.clone(), opts)?;
    let sms = dev.sm_count().unwrap_or(1);
    let mut rows = vec![];
    let mut first_tokens: Option<Vec<u32>> = None;
    for (i, k) in grid.iter().enumerate() {
        eprintln!("tune {}/{}: {k:?}", i + 1, grid.len());
        let rule = TileRule {
            ctas: (sms * k.ctas_per_sm) as usize,
            warps: k.warps,
            elems_per_thread: k.elems_per_thread,
            bk_max: k.bk_max,
        };
        let mega = RetuneOptions {
            ctas: dev.is_cuda().then_some(sms * k.ctas_per_sm),
            wait_prefetch_bytes: k.wait_prefetch_bytes,
            timeout_ms: watchdog_ms,
            check: false,
        };
        let mut tiles = Tiles::with_rule(cfg, &rule)
            .with_gate_up_tiles(cfg, k.gate_up_tiles)
            .with_lm_head_tiles(cfg, k.lm_head_tiles)
            .with_gemv_tiles(cfg, k.gemv_tiles);
        let qkv = k
            .qkv_tiles
            .unwrap_or_else(|| model::megakernel_engine::qkv_tiles_rule(cfg, &tiles));
        tiles = tiles.with_qkv_tiles(cfg, qkv);
        if k.attn_splits > 0 {
            tiles.attn_splits = k.attn_splits;
        }
        tiles.o_heads_tiles = k
            .o_heads_tiles
            .unwrap_or_else(|| model::megakernel_engine::o_heads_tiles_rule(cfg));
        let res = one(&mut engine, tiles, mega, &timing);
        rows.push(match res {
            Ok(t) => TuneRow {
                knobs: *k,
                ms_per_token: Some(t.ms),
                same_tokens: Some(
                    *first_tokens.get_or_insert_with(|| t.tokens.clone()) == t.tokens,
                ),
                error: None,
                profile: t.profile,
                ms_per_launch_unread: t.unread,
            },
            Err(e) => TuneRow {
                knobs: *k,
                ms_per_token: None,
                same_tokens: None,
                error: Some(e.to_string()),
                profile: None,
                ms_per_launch_unread: None,
            },
        });
    }
    Ok(rows)
}

fn one(
    engine: &mut MegakernelEngine,
    tiles: Tiles,
    mega: RetuneOptions,
    timing: &Timing,
) -> Result<Timed, ModelError> {
    let &Timing {
        position,
        tokens,
        profile,
        no_waits,
        launch_only,
        ..
    } = timing;
    engine.retune(tiles, &mega)?;
    if no_waits {
        // Every sync of whichever specialisation a step launches (their counts differ).
        let o = MegaOptions {
            drop_all_syncs: true,
            ..engine.mega_options().clone()
        };
        engine.set_mega_options(o);
    }
    engine.compile()?;
    engine.assume_cached(position)?;
    let mut t = crate::bench::greedy_steps(engine, 0, position, 3)?;
    engine.assume_cached(position)?;
    let mut out = Vec::with_capacity(tokens);
    let start = Instant::now();
    engine.decode(t, position, tokens, &mut |x| {
        out.push(x);
        Ok(true)
    })?;
    let ms = start.elapsed().as_secs_f64() * 1e3 / tokens as f64;
    t = out.last().copied().unwrap_or(t);
    engine.check_errors()?;
    let mut unread = None;
    if launch_only {
        engine.assume_cached(position)?;
        let start = Instant::now();
        engine.run_steps_unread(t, position, tokens)?;
        unread = Some(start.elapsed().as_secs_f64() * 1e3 / tokens as f64);
    }
    let mut prof = None;
    if profile && engine.mega_options().ctas.is_some() {
        let mut o = engine.mega_options().clone();
        o.profile = true;
        engine.set_mega_options(o.clone());
        engine.assume_cached(position)?;
        engine.step(t, position)?;
        o.profile = false;
        engine.set_mega_options(o);
        prof = decode_step::MEGAKERNEL.take_profile().map(|p| p.summary());
    }
    Ok(Timed {
        ms,
        tokens: out,
        profile: prof,
        unread,
    })
}

/// One configuration's measurements (`one`).
struct Timed {
    ms: f64,
    tokens: Vec<u32>,
    profile: Option<String>,
    unread: Option<f64>,
}

/// The grid's results, fastest first.
pub fn table(rows: &[TuneRow]) -> String {
    let mut sorted: Vec<&TuneRow> = rows.iter().collect();
    sorted.sort_by(|a, b| {
        let key = |r: &TuneRow| r.ms_per_token.unwrap_or(f64::INFINITY);
        key(a).total_cmp(&key(b))
    });
    let per_program = |n: usize| {
        if n == 0 {
            "auto".to_string()
        } else {
            n.to_string()
        }
    };
    let mut s = String::from(
        "| ms/token | warps | elems/thread | bk max | CTAs/SM | wait prefetch MiB | attention splits | gate/up tiles | lm_head tiles | o_proj/down tiles | QKV tiles | o_proj per head tiles | tokens = first config's |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in sorted {
        let k = &r.knobs;
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.ms_per_token.map_or_else(
                || format!("error: {}", r.error.as_deref().unwrap_or("?")),
                |m| format!("{m:.3}")
            ),
            k.warps,
            k.elems_per_thread,
            k.bk_max,
            k.ctas_per_sm,
            k.wait_prefetch_bytes >> 20,
            if k.attn_splits == 0 {
                "rule".to_string()
            } else {
                k.attn_splits.to_string()
            },
            per_program(k.gate_up_tiles),
            per_program(k.lm_head_tiles),
            per_program(k.gemv_tiles),
            k.qkv_tiles.map_or("rule".into(), per_program),
            k.o_heads_tiles.map_or("rule".into(), per_program),
            match r.same_tokens {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "-",
            }
        );
    }
    s
}
