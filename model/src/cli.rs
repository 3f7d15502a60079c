//! `tessera generate`: arguments and the command itself.
use crate::chat::ChatTemplate;
use crate::checkpoint::Checkpoint;
use crate::config::Config;
use crate::embedded;
use crate::engine::Engine;
use crate::error::ModelError;
use crate::generate::{check_prompt, generate, StopReason};
use crate::kernels_engine::{KernelOptions, KernelsEngine, Output};
use crate::megakernel_engine::{MegakernelEngine, MegakernelOptions};
use crate::reference::Reference;
use crate::sampling::{Sampler, SamplingParams};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use crate::weights::Weights;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Auto,
    Cpu,
    Cuda,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// The plain-Rust reference decoder (cpu).
    Reference,
    /// The decoder's `#[kernel]`s, one launch per op (GPU, or the interpreter on the cpu).
    Kernels,
    /// The whole decode step as ONE `#[megakernel]` launch per token (GPU, or the
    /// interpreter on the cpu).
    Megakernel,
}

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// Checkpoint directory in the Hugging Face layout (config.json, model.safetensors, ...).
    /// Without it, an embedded random-weight Qwen3 with a byte tokenizer.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Prompt text; the chat template is applied unless --raw.
    #[arg(long, conflicts_with = "prompt_ids")]
    pub prompt: Option<String>,
    /// Prompt as comma-separated token ids, e.g. 1,2,3.
    #[arg(long, value_name = "IDS")]
    pub prompt_ids: Option<String>,
    /// Use --prompt as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Render the chat template with enable_thinking=false.
    #[arg(long)]
    pub no_thinking: bool,
    #[arg(long, default_value_t = 32)]
    pub max_new_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// 1 = off.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Print one JSON object on stdout instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

/// Which engine runs the model, and where (`generate`, `serve`).
#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    #[arg(long, value_enum, default_value = "auto")]
    pub device: Device,
    /// Default: megakernel when a GPU is used, else reference.
    #[arg(long, value_enum)]
    pub engine: Option<EngineKind>,
    /// KV-cache capacity in positions (kernels and megakernel engines). Default: the
    /// model's max_position_embeddings (kernels: 4096 at most), capped by free GPU memory.
    #[arg(long, value_name = "N")]
    pub max_context: Option<usize>,
}

impl EngineArgs {
    /// The one combination clap cannot reject by itself.
    pub fn check(&self) -> Result<(), ModelError> {
        if self.device == Device::Cuda && self.engine == Some(EngineKind::Reference) {
            return Err(ModelError::Usage(
                "--device cuda: the reference engine runs on the cpu only; use --engine megakernel (or kernels) for the GPU".into(),
            ));
        }
        Ok(())
    }
}

/// Comma-separated ids; rejects anything that is not a non-negative integer.
pub fn parse_ids(s: &str) -> Result<Vec<u32>, ModelError> {
    if s.trim().is_empty() {
        return Err(ModelError::Prompt("empty --prompt-ids".into()));
    }
    s.split(',')
        .map(|part| {
            let p = part.trim();
            p.parse::<u32>().map_err(|_| {
                ModelError::Prompt(format!(
                    "--prompt-ids: \"{p}\" is not a token id (expected comma-separated integers like 1,2,3)"
                ))
            })
        })
        .collect()
}

fn check_sampling(a: &GenerateArgs) -> Result<SamplingParams, ModelError> {
    if a.temperature.is_nan() || a.temperature < 0.0 || !a.temperature.is_finite() {
        return Err(ModelError::Usage(format!(
            "--temperature {} must be ≥ 0",
            a.temperature
        )));
    }
    if a.top_p.is_nan() || a.top_p <= 0.0 || a.top_p > 1.0 {
        return Err(ModelError::Usage(format!(
            "--top-p {} must be in (0, 1]",
            a.top_p
        )));
    }
    Ok(SamplingParams {
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        seed: a.seed,
    })
}

/// A model ready to build an engine from: the embedded random one, or a checkpoint.
pub struct LoadedModel {
    pub cfg: Config,
    pub weights: Weights,
    /// None for a checkpoint without `tokenizer.json`.
    pub tokenizer: Option<Tokenizer>,
    /// None for the embedded model (it takes raw bytes) and checkpoints without one.
    pub chat_template: Option<ChatTemplate>,
    pub eos: Vec<u32>,
    /// True for the embedded random-weight model (its output is noise).
    pub embedded: bool,
}

/// Loads `--model DIR`, or the embedded random model (saying so on stderr) without it.
pub fn load_model(dir: Option<&Path>, progress: bool) -> Result<LoadedModel, ModelError> {
    let Some(dir) = dir else {
        eprintln!("note: no --model given: using the embedded Qwen3 with RANDOM weights (output is noise)");
        let cfg = embedded::config();
        let weights = embedded::weights(&cfg);
        return Ok(LoadedModel {
            eos: cfg.eos_token_ids.clone(),
            cfg,
            weights,
            tokenizer: Some(Tokenizer::Bytes(embedded::byte_tokenizer())),
            chat_template: None,
            embedded: true,
        });
    };
    let ck = Checkpoint::load(dir, progress)?;
    for n in &ck.notes {
        eprintln!("note: {n}");
    }
    Ok(LoadedModel {
        eos: ck.config.eos_token_ids.clone(),
        cfg: ck.config,
        weights: ck.weights,
        tokenizer: ck.tokenizer,
        chat_template: ck.chat_template,
        embedded: false,
    })
}

/// The model, its tokenizer and the prompt ids the arguments ask for.
struct Prepared {
    model: LoadedModel,
    prompt: Vec<u32>,
}

fn prepare(a: &GenerateArgs) -> Result<Prepared, ModelError> {
    let progress = !a.json && std::io::stderr().is_terminal();
    let model = load_model(a.model.as_deref(), progress)?;
    let text = |p: &str| -> Result<(), ModelError> {
        if p.trim().is_empty() {
            Err(ModelError::Prompt("empty prompt".into()))
        } else {
            Ok(())
        }
    };
    let prompt = match (&a.prompt, &a.prompt_ids) {
        (_, Some(ids)) => parse_ids(ids)?,
        (Some(p), None) => {
            text(p)?;
            let dir = a.model.as_deref().unwrap_or(Path::new("<embedded>"));
            let tok = model.tokenizer.as_ref().ok_or_else(|| {
                ModelError::Usage(format!(
                    "{} has no tokenizer.json: give the prompt with --prompt-ids 1,2,3",
                    dir.display()
                ))
            })?;
            let rendered = match (&model.chat_template, a.raw || model.embedded) {
                // The embedded model has no chat template: raw bytes.
                (_, true) => p.clone(),
                (Some(t), false) => t.render_user(p, !a.no_thinking)?,
                (None, false) => {
                    eprintln!(
                        "note: no chat template in {}: using the prompt as raw text",
                        dir.display()
                    );
                    p.clone()
                }
            };
            tok.encode(&rendered)?
        }
        (None, None) => return Err(no_prompt()),
    };
    Ok(Prepared { model, prompt })
}

/// The device `--device` asks for: `auto` is the GPU when one is usable.
fn pick_device(d: Device) -> Result<dsl_runtime::Device, ModelError> {
    Ok(match d {
        Device::Cpu => dsl_runtime::Device::interpreter(),
        Device::Cuda => dsl_runtime::Device::cuda(0)
            .map_err(|e| ModelError::Usage(format!("--device cuda: {e}")))?,
        Device::Auto => dsl_runtime::Device::auto(),
    })
}

/// The engine `--engine` / `--device` ask for. Without `--engine`: the megakernel on a
/// GPU, the reference decoder on the cpu. `greedy`: the kernels engine may then fuse the
/// argmax (it returns no logits to sample from).
pub fn build_engine(
    a: &EngineArgs,
    cfg: Config,
    weights: Weights,
    greedy: bool,
) -> Result<Box<dyn Engine>, ModelError> {
    let dev = match (a.engine, a.device) {
        (Some(EngineKind::Reference), _) | (None, Device::Cpu) => None,
        _ => Some(pick_device(a.device)?),
    };
    let kind = a.engine.unwrap_or(match &dev {
        Some(d) if d.is_cuda() => EngineKind::Megakernel,
        _ => EngineKind::Reference,
    });
    if kind == EngineKind::Reference {
        if a.max_context.is_some() {
            eprintln!("note: --max-context is ignored by the reference engine (it grows its cache as needed)");
        }
        return Ok(Box::new(Reference::new(cfg, Arc::new(weights))));
    }
    let dev = match dev {
        Some(d) => d,
        None => pick_device(a.device)?,
    };
    let name = if kind == EngineKind::Kernels {
        "kernels"
    } else {
        "megakernel"
    };
    if !dev.is_cuda() {
        eprintln!("note: the {name} engine runs on {}", dev.describe());
    }
    match kind {
        EngineKind::Kernels => {
            // Greedy reads back one int (the fused argmax); sampling needs the logits.
            let output = if greedy {
                Output::Token
            } else {
                Output::Logits
            };
            let opts = KernelOptions {
                output,
                max_seq: a.max_context,
                ..Default::default()
            };
            Ok(Box::new(KernelsEngine::new(cfg, &weights, dev, opts)?))
        }
        _ => {
            let opts = MegakernelOptions {
                max_seq: a.max_context,
                ..Default::default()
            };
            let mut m = MegakernelEngine::new(cfg, &weights, dev, opts)?;
            if let Some(note) = m.capacity_note() {
                eprintln!("note: {note}");
            }
            // Compile (or load from the disk cache) now, so the first token does not pay it.
            let t = std::time::Instant::now();
            m.compile()?;
            eprintln!(
                "megakernel: decode step and prefill ready in {:.0} ms (compile or disk cache, load, warm-up); KV cache {} positions",
                t.elapsed().as_secs_f64() * 1e3,
                m.max_context()
            );
            Ok(Box::new(m))
        }
    }
}

fn no_prompt() -> ModelError {
    ModelError::Usage("no prompt: give --prompt TEXT or --prompt-ids 1,2,3".into())
}

fn write_out(s: &str) -> Result<(), ModelError> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| ModelError::io("<stdout>", e))
}

pub fn run_generate(a: GenerateArgs) -> Result<(), ModelError> {
    a.engine.check()?;
    let params = check_sampling(&a)?;
    let Prepared { model, prompt } = prepare(&a)?;
    let LoadedModel {
        cfg,
        weights,
        tokenizer,
        eos,
        ..
    } = model;
    let mut engine = build_engine(&a.engine, cfg, weights, params.is_greedy())?;
    check_prompt(engine.as_ref(), &prompt)?;

    let mut sampler = Sampler::new(params);
    let mut stream = StreamDecoder::new();
    let streaming = !a.json;
    let mut on_token = |id: u32| -> Result<(), ModelError> {
        if !streaming {
            return Ok(());
        }
        match &tokenizer {
            Some(tok) => {
                if let Some(s) = stream.push(tok, id)? {
                    write_out(&s)?;
                }
                Ok(())
            }
            None => write_out(&format!("{id} ")),
        }
    };
    let g = generate(
        engine.as_mut(),
        &prompt,
        a.max_new_tokens,
        &mut sampler,
        &eos,
        &mut on_token,
    )?;
    if streaming {
        if let Some(tok) = &tokenizer {
            if let Some(rest) = stream.flush(tok)? {
                write_out(&rest)?;
            }
        }
        write_out("\n")?;
    }

    let t = &g.timings;
    if g.stop == StopReason::ContextLimit {
        eprintln!(
            "stopped: reached the model's context limit of {} tokens",
            engine.max_context()
        );
    }
    // The device engines prefill the prompt; the reference steps through it one token at a
    // time: the note says which.
    eprintln!(
        "prompt: {} tokens, {:.1} tokens/s ({}) | decode: {} tokens, {:.1} tokens/s | time to first token: {:.1} ms | engine {} on {}",
        t.prompt_tokens, t.prompt_tokens_per_s, engine.prompt_mode(), t.decode_tokens, t.decode_tokens_per_s, t.time_to_first_token_ms,
        engine.name(), engine.device()
    );
    if a.json {
        let text = match &tokenizer {
            Some(tok) => serde_json::Value::String(tok.decode(&g.generated_ids)?),
            None => serde_json::Value::Null,
        };
        let obj = serde_json::json!({
            "prompt_ids": prompt,
            "generated_ids": g.generated_ids,
            "text": text,
            "engine": engine.name(),
            "device": engine.device(),
            "stop_reason": g.stop,
            "timings": t,
        });
        write_out(&format!("{obj}\n"))?;
    }
    Ok(())
}

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
        let svg = crate::plot::svg(&report)?;
        std::fs::write(path, svg).map_err(|e| ModelError::io(path, e))?;
    }
    Ok(())
}

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
    /// MiB of each stage's weights prefetched into L2 while its CTAs wait.
    #[arg(long, value_name = "LIST")]
    pub wait_prefetch_mib: Option<String>,
    /// Following stages idle CTAs prefetch.
    #[arg(long, value_name = "LIST")]
    pub prefetch_depth: Option<String>,
    /// KiB of the staging ring (weights issued ahead into shared memory): `auto` (as much
    /// as the GPU gives), 0 (none) or a size.
    #[arg(long, value_name = "LIST")]
    pub stage_ring_kib: Option<String>,
    /// With a ring: write each copy's range from the load's box (`true`) or reduce every
    /// thread's addresses (`false`).
    #[arg(long, value_name = "LIST")]
    pub stage_boxes: Option<String>,
    /// Also profile one step of every configuration: where the time goes, per stage.
    #[arg(long)]
    pub profile: bool,
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
    use crate::tune::Knobs;
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
        list("prefetch-depth", &a.prefetch_depth, d.prefetch_depth)?,
        |k, v| k.prefetch_depth = v,
    );
    grid = times(
        grid,
        list("stage-ring-kib", &a.stage_ring_kib, d.stage_ring)?,
        |k, v| k.stage_ring = v,
    );
    grid = times(
        grid,
        list("stage-boxes", &a.stage_boxes, d.stage_boxes)?,
        |k, v| k.stage_boxes = v,
    );
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
    let rows = crate::tune::run(&cfg, &weights, &dev, &grid, a.position, a.tokens, a.profile)?;
    let mut out = format!(
        "tessera tune: {} configurations at context {}, {} tokens each, on {}\n\n",
        rows.len(),
        a.position,
        a.tokens,
        dev.describe()
    );
    out += &crate::tune::table(&rows);
    for r in &rows {
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
