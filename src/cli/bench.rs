//! `tessera bench`: arguments and the command itself (the measuring is `crate::bench`).
use super::engine_args::{pick_device, Device};
use super::write_out;
use model::{embedded, Checkpoint, ModelError};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Checkpoint directory (Hugging Face layout). Without it, the embedded random model.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// peers.json from scripts/hf_peers.py (transformers on the same GPU): adds its columns.
    #[arg(long, value_name = "FILE")]
    pub peers: Option<PathBuf>,
    /// Also write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto")]
    pub device: Device,
    /// Context positions to decode from, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "1,512,2048,8192")]
    pub positions: String,
    /// Tokens decoded (and timed) per position.
    #[arg(long, default_value_t = 128)]
    pub tokens: usize,
    /// MiB the read-bandwidth probe streams.
    #[arg(long, default_value_t = 1024)]
    pub probe_mib: usize,
    /// Skip timing the kernels engine (one launch per op) beside the megakernel.
    #[arg(long)]
    pub no_kernels: bool,
    /// Prompt lengths whose time to first token (prefill) is measured, comma-separated;
    /// "none" skips the prefill bench.
    #[arg(long, value_name = "LIST", default_value = "128,512,2048,8192")]
    pub prompts: String,
    /// Timed prefills per prompt length (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub prefill_repeats: usize,
    /// Prefill chunk length in tokens (default: the engine's, 2048 on a GPU).
    #[arg(long, value_name = "N")]
    pub prefill_chunk: Option<usize>,
    /// Also feed prompts up to N tokens one decode step per token (the way `generate` fed
    /// them before prefill), timed twice, beside the prefill. Default 0: not at all.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub stepwise_max: usize,
    /// Also draw decode ms/token against context and time to first token against prompt
    /// length, beside the floors and transformers, as an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// `tessera bench`: the megakernel decoder's ms/token at several context positions,
/// against the bandwidth floor (and transformers with --peers).
pub fn run_bench(a: BenchArgs) -> Result<(), ModelError> {
    let list = |flag: &str, text: &str| {
        if text.trim() == "none" {
            return Ok(vec![]);
        }
        text.split(',')
            .map(|p| {
                p.trim().parse::<usize>().map_err(|_| {
                    ModelError::Usage(format!(
                        "--{flag}: \"{}\" is not a number (expected e.g. 1,512,2048)",
                        p.trim()
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let positions = list("positions", &a.positions)?;
    let prompts = list("prompts", &a.prompts)?;
    if a.prefill_repeats == 0 {
        return Err(ModelError::Usage(
            "--prefill-repeats must be at least 1".into(),
        ));
    }
    if a.prefill_chunk == Some(0) {
        return Err(ModelError::Usage(
            "--prefill-chunk must be at least 1".into(),
        ));
    }
    if a.tokens == 0 {
        return Err(ModelError::Usage("--tokens must be at least 1".into()));
    }
    if a.probe_mib == 0 || a.probe_mib > 4096 {
        return Err(ModelError::Usage("--probe-mib must be in 1..=4096".into()));
    }
    let peers = match &a.peers {
        None => None,
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| ModelError::io(p, e))?;
            Some(
                serde_json::from_str::<serde_json::Value>(&text).map_err(|e| ModelError::Json {
                    path: p.clone(),
                    msg: e.to_string(),
                })?,
            )
        }
    };
    let (name, cfg, weights) = match &a.model {
        Some(dir) => {
            let ck = Checkpoint::load(dir, std::io::stderr().is_terminal())?;
            (dir.display().to_string(), ck.config, ck.weights)
        }
        None => {
            eprintln!("note: no --model given: benchmarking the embedded random Qwen3 (tiny)");
            let cfg = embedded::config();
            let w = embedded::weights(&cfg);
            ("embedded".to_string(), cfg, w)
        }
    };
    let dev = pick_device(a.device)?;
    if !dev.is_cuda() {
        eprintln!(
            "note: no GPU ({}): the interpreter runs the bench, so times say nothing about speed",
            dev.describe()
        );
    }
    let plan = crate::bench::BenchPlan {
        positions,
        tokens: a.tokens,
        probe_bytes: a.probe_mib << 20,
        kernels_engine: !a.no_kernels,
        prompts,
        prefill_repeats: a.prefill_repeats,
        prefill_chunk: a.prefill_chunk,
        stepwise_max: a.stepwise_max,
    };
    let report = crate::bench::run(&name, cfg, &weights, dev, &plan, peers)?;
    write_out(&crate::bench::table(&report))?;
    if let Some(path) = &a.json {
        let text =
            serde_json::to_string_pretty(&report).map_err(|e| ModelError::Usage(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| ModelError::io(path, e))?;
    }
    if let Some(path) = &a.plot {
        let svg = crate::bench::plot::svg(&report)?;
        std::fs::write(path, svg).map_err(|e| ModelError::io(path, e))?;
    }
    Ok(())
}
