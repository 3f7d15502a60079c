//! What `generate`, `serve`, `bench` and `tune` share: the model to load (`--model`, or
//! the embedded random one) and the engine and device to run it on.
use model::chat::ChatTemplate;
use model::kernels_engine::{KernelOptions, KernelsEngine, Output};
use model::megakernel_engine::{MegakernelEngine, MegakernelOptions};
use model::tokenizer::Tokenizer;
use model::{embedded, Checkpoint, Config, Engine, ModelError, Reference, Weights};
use std::path::Path;
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

/// The device `--device` asks for: `auto` is the GPU when one is usable.
pub(crate) fn pick_device(d: Device) -> Result<dsl_runtime::Device, ModelError> {
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

#[cfg(test)]
mod tests {
    use super::parse_ids;
    use model::ModelError;

    #[test]
    fn prompt_id_parsing() {
        assert_eq!(parse_ids("1, 2,3").unwrap(), vec![1, 2, 3]);
        for bad in ["1,x,3", "1,,2", "-1", "1.5", "99999999999"] {
            let e = parse_ids(bad).unwrap_err();
            assert!(matches!(e, ModelError::Prompt(_)), "{bad}: {e}");
            assert!(e.to_string().contains("is not a token id"), "{bad}: {e}");
        }
        let e = parse_ids(" ").unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
    }
}
