//! `tessera tune`: arguments and the command itself (the grid runner is `crate::bench::tune`).
use super::engine_args::{pick_device, Device};
use super::write_out;
use model::{embedded, Checkpoint, ModelError};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct TuneArgs {
    /// Checkpoint directory (Hugging Face layout). Without it, the embedded random model.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: Device,
    /// Context position the timed tokens start at.
    #[arg(long, default_value_t = 1)]
    pub position: usize,
    /// Tokens timed per configuration.
    #[arg(long, default_value_t = 64)]
    pub tokens: usize,
    /// Warps per program (comma-separated values: every combination of the lists runs).
    #[arg(long, value_name = "LIST")]
    pub warps: Option<String>,
    /// Weight-tile elements per thread.
    #[arg(long, value_name = "LIST")]
    pub elems: Option<String>,
    /// Widest k step of a GEMV tile.
    #[arg(long, value_name = "LIST")]
    pub bk_max: Option<String>,
    /// Persistent CTAs per SM.
    #[arg(long, value_name = "LIST")]
    pub ctas_per_sm: Option<String>,
    /// MiB of each stage's weights prefetched into L2 while its CTAs wait (stages with a
    /// size of their own keep it: the MLP's 2 MiB, `TESSERA_WAIT_PREFETCH`).
    #[arg(long, value_name = "LIST")]
    pub wait_prefetch_mib: Option<String>,
    /// Attention splits per head (0: the tile rule's).
    #[arg(long, value_name = "LIST")]
    pub attn_splits: Option<String>,
    /// gate/up row tiles per program: the norm once per program, the next tile's weights
    /// loaded while one reduces (0: spread over the CTAs, the default; 1: one per program).
    /// Needs one k step (bk max at least the hidden size).
    #[arg(long, value_name = "LIST")]
    pub gate_up_tiles: Option<String>,
    /// lm_head row blocks per program, the same way (0: spread over the CTAs, the default).
    #[arg(long, value_name = "LIST")]
    pub lm_head_tiles: Option<String>,
    /// o_proj and down row tiles per program: x once per program, the next tile's weights
    /// loaded while one reduces (1: one per program, the default; 0: spread over the CTAs).
    /// A GEMV whose k one step does not cover (down at 8B) gets k steps up to 16384 first.
    /// Only with the MLP as two stages (`TESSERA_FUSED_MLP=0`): the fused MLP has no down
    /// GEMV, and its o_proj (`gemv_head_residual` or `gemv_residual_copy`) runs one tile per
    /// program.
    #[arg(long, value_name = "LIST")]
    pub gemv_tiles: Option<String>,
    /// QKV row tiles per program (`rmsnorm_qkv_rope_tiles`: the norm once, the next tile's
    /// weights loaded while one reduces): 0 spreads them over the CTAs, 1 is one per
    /// program (`rmsnorm_qkv_rope`). Default: the engine's rule (spread where one per program
    /// would put 4 or more on a CTA).
    #[arg(long, value_name = "LIST")]
    pub qkv_tiles: Option<String>,
    /// Row blocks per program of o_proj per head (`gemv_head_residual_tiles`: the head's
    /// merge once a program): 1 is one per program, 0 spreads them over the CTAs. Default:
    /// the engine's rule (spread above hidden 2048). Only where o_proj runs per head (up to
    /// hidden 2560, or `TESSERA_O_HEADS=1`).
    #[arg(long, value_name = "LIST")]
    pub o_heads_tiles: Option<String>,
    /// Also profile one step of every configuration: where the time goes, per stage.
    #[arg(long)]
    pub profile: bool,
    /// A diagnostic: leave out every sync of the step, so its stages race (the tokens are
    /// wrong): what the weight stream and the compute cost without the dependency waits.
    #[arg(long)]
    pub no_waits: bool,
    /// A diagnostic: also time each configuration's steps launched back to back with no
    /// token read back between them (the tokens still chain on the device): what the
    /// per-step copy and the host's loop cost beside the step itself.
    #[arg(long)]
    pub launch_only: bool,
    /// Milliseconds a megakernel wait may last before the launch gives up with an error
    /// naming it (raise it under compute-sanitizer).
    #[arg(long, value_name = "MS", default_value_t = crate::runtime::mega::MegaOptions::default().timeout_ms)]
    pub watchdog_ms: u64,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

fn list<T: std::str::FromStr + Copy>(
    flag: &str,
    v: &Option<String>,
    default: T,
) -> Result<Vec<T>, ModelError> {
    match v {
        None => Ok(vec![default]),
        Some(s) => s
            .split(',')
            .map(|x| {
                x.trim().parse::<T>().map_err(|_| {
                    ModelError::Usage(format!(
                        "--{flag}: \"{}\" is not a value of this list",
                        x.trim()
                    ))
                })
            })
            .collect(),
    }
}

/// `tessera tune`: decode speed over a grid of tile rules and megakernel options.
pub fn run_tune(a: TuneArgs) -> Result<(), ModelError> {
    use crate::bench::tune::Knobs;
    let d = Knobs::default();
    // Every combination of the lists: each flag multiplies the grid by its values.
    fn times<T: Copy>(grid: Vec<Knobs>, values: Vec<T>, set: fn(&mut Knobs, T)) -> Vec<Knobs> {
        grid.iter()
            .flat_map(|k| {
                values.iter().map(move |&v| {
                    let mut k = *k;
                    set(&mut k, v);
                    k
                })
            })
            .collect()
    }
    let mut grid = vec![d];
    grid = times(grid, list("warps", &a.warps, d.warps)?, |k, v| k.warps = v);
    grid = times(
        grid,
        list("elems", &a.elems, d.elems_per_thread)?,
        |k, v| k.elems_per_thread = v,
    );
    grid = times(grid, list("bk-max", &a.bk_max, d.bk_max)?, |k, v| {
        k.bk_max = v
    });
    grid = times(
        grid,
        list("ctas-per-sm", &a.ctas_per_sm, d.ctas_per_sm)?,
        |k, v| k.ctas_per_sm = v,
    );
    grid = times(
        grid,
        list(
            "wait-prefetch-mib",
            &a.wait_prefetch_mib,
            d.wait_prefetch_bytes >> 20,
        )?,
        |k, v| k.wait_prefetch_bytes = v << 20,
    );
    grid = times(
        grid,
        list("attn-splits", &a.attn_splits, d.attn_splits)?,
        |k, v| k.attn_splits = v,
    );
    grid = times(
        grid,
        list("gate-up-tiles", &a.gate_up_tiles, d.gate_up_tiles)?,
        |k, v| k.gate_up_tiles = v,
    );
    grid = times(
        grid,
        list("lm-head-tiles", &a.lm_head_tiles, d.lm_head_tiles)?,
        |k, v| k.lm_head_tiles = v,
    );
    grid = times(
        grid,
        list("gemv-tiles", &a.gemv_tiles, d.gemv_tiles)?,
        |k, v| k.gemv_tiles = v,
    );
    // Without the flag, the engine's rule (`megakernel_engine::o_heads_tiles_rule`,
    // `TESSERA_O_HEADS_TILES`).
    if a.o_heads_tiles.is_some() {
        grid = times(grid, list("o-heads-tiles", &a.o_heads_tiles, 1)?, |k, v| {
            k.o_heads_tiles = Some(v)
        });
    }
    // Without the flag, the engine's rule (`megakernel_engine::qkv_tiles_rule`).
    if a.qkv_tiles.is_some() {
        grid = times(grid, list("qkv-tiles", &a.qkv_tiles, 1)?, |k, v| {
            k.qkv_tiles = Some(v)
        });
    }
    if grid.iter().any(|k| {
        !(1..=32).contains(&k.warps)
            || k.elems_per_thread == 0
            || k.bk_max == 0
            || k.ctas_per_sm == 0
    }) {
        return Err(ModelError::Usage(
            "tune: warps must be 1..=32; elems, bk-max and ctas-per-sm at least 1".into(),
        ));
    }
    if a.tokens == 0 {
        return Err(ModelError::Usage("--tokens must be at least 1".into()));
    }
    let (cfg, weights) = match &a.model {
        Some(dir) => {
            let ck = Checkpoint::load(dir, std::io::stderr().is_terminal())?;
            (ck.config, ck.weights)
        }
        None => {
            eprintln!("note: no --model given: tuning the embedded random Qwen3 (tiny)");
            let cfg = embedded::config();
            let w = embedded::weights(&cfg);
            (cfg, w)
        }
    };
    let dev = pick_device(a.device)?;
    if !dev.is_cuda() {
        eprintln!("note: no GPU: the interpreter runs, so times say nothing about speed (and nothing is profiled)");
    }
    let rows = crate::bench::tune::run(
        &cfg,
        &weights,
        &dev,
        &grid,
        crate::bench::tune::Timing {
            position: a.position,
            tokens: a.tokens,
            profile: a.profile,
            no_waits: a.no_waits,
            launch_only: a.launch_only,
            watchdog_ms: a.watchdog_ms,
        },
    )?;
    let mut out = format!(
        "tessera tune: {} configurations at context {}, {} tokens each, on {}\n\n",
        rows.len(),
        a.position,
        a.tokens,
        dev.describe()
    );
    out += &crate::bench::tune::table(&rows);
    for r in &rows {
        if let Some(ms) = r.ms_per_launch_unread {
            out += &format!(
                "\nlaunched back to back, no token read back between steps: {ms:.3} ms/step ({:?})\n",
                r.knobs
            );
        }
        if let Some(p) = &r.profile {
            out += &format!("\nprofile of {:?}:\n{p}", r.knobs);
        }
    }
    write_out(&out)?;
    if let Some(path) = &a.json {
        let text =
            serde_json::to_string_pretty(&rows).map_err(|e| ModelError::Usage(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| ModelError::io(path, e))?;
    }
    Ok(())
}
