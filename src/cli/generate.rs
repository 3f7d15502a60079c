//! `tessera generate`: arguments and the command itself.
use super::engine_args::{build_engine, load_model, parse_ids, EngineArgs, LoadedModel};
use super::write_out;
use model::generate::{check_prompt, generate, StopReason};
use model::sampling::{Sampler, SamplingParams};
use model::tokenizer::StreamDecoder;
use model::ModelError;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

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

fn no_prompt() -> ModelError {
    ModelError::Usage("no prompt: give --prompt TEXT or --prompt-ids 1,2,3".into())
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
