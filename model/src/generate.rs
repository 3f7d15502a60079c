//! The engine-agnostic generation loop: feed the prompt through `Engine::prefill` (all of
//! it at once on the device engines), then sample, stream and stop (EOS, token budget,
//! context limit), one `Engine::step` per generated token.
use crate::engine::{Engine, StepOutput};
use crate::error::ModelError;
use crate::sampling::Sampler;
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Eos,
    MaxNewTokens,
    ContextLimit,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    pub prompt_tokens: usize,
    pub prompt_ms: f64,
    pub prompt_tokens_per_s: f64,
    /// Steps after the prompt (each yields one more token).
    pub decode_tokens: usize,
    pub decode_ms: f64,
    pub decode_tokens_per_s: f64,
    /// From the start of the prompt to the first generated token.
    pub time_to_first_token_ms: f64,
    pub total_ms: f64,
}

#[derive(Debug, Clone)]
pub struct Generation {
    /// Includes the EOS id when generation stopped at one.
    pub generated_ids: Vec<u32>,
    pub stop: StopReason,
    pub timings: Timings,
}

fn per_s(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1000.0 / ms
    } else {
        0.0
    }
}

/// Validates `prompt` against the engine (non-empty, ids < vocab, fits the context).
pub fn check_prompt(engine: &dyn Engine, prompt: &[u32]) -> Result<(), ModelError> {
    if prompt.is_empty() {
        return Err(ModelError::Prompt("empty prompt (no tokens)".into()));
    }
    let vocab = engine.vocab_size();
    if let Some(&bad) = prompt.iter().find(|&&id| id as usize >= vocab) {
        return Err(ModelError::Prompt(format!(
            "token id {bad} is out of range (vocab_size {vocab})"
        )));
    }
    if prompt.len() > engine.max_context() {
        return Err(ModelError::Prompt(format!(
            "{} tokens is longer than the model's context of {}",
            prompt.len(),
            engine.max_context()
        )));
    }
    Ok(())
}

/// Runs one generation; `on_token` sees each new id as soon as it is chosen.
pub fn generate(
    engine: &mut dyn Engine,
    prompt: &[u32],
    max_new_tokens: usize,
    sampler: &mut Sampler,
    eos_ids: &[u32],
    on_token: &mut dyn FnMut(u32) -> Result<(), ModelError>,
) -> Result<Generation, ModelError> {
    check_prompt(engine, prompt)?;
    let name = engine.name().to_string();
    // An engine that samples on the device returns the chosen token itself.
    let on_device = engine.device_sampling(sampler.params())?;
    let pick = |out: StepOutput, sampler: &mut Sampler| match out {
        StepOutput::Logits(l) => Ok(sampler.sample(&l)),
        StepOutput::Token(t) if on_device || sampler.params().is_greedy() => Ok(t),
        StepOutput::Token(_) => Err(ModelError::Engine {
            engine: name.clone(),
            msg: "returns argmax tokens only; sampling (temperature > 0) needs logits".into(),
        }),
    };

    let start = Instant::now();
    // The whole prompt at once (the device engines' prefill; one step per token for the
    // reference).
    let out = engine.prefill(prompt, 0)?;
    let prompt_ms = start.elapsed().as_secs_f64() * 1e3;

    let mut generated = Vec::new();
    let mut pos = prompt.len();
    let mut ttft_ms = 0.0;
    let decode_start = Instant::now();
    let mut decode_steps = 0;
    let mut stop = (max_new_tokens == 0).then_some(StopReason::MaxNewTokens);
    let first = match stop {
        None => Some(pick(out, sampler)?),
        Some(_) => None,
    };
    // Takes one chosen token: records and streams it, and says whether to go on.
    let mut accept = |tok: u32, generated: &mut Vec<u32>| -> Result<bool, ModelError> {
        generated.push(tok);
        on_token(tok)?;
        if eos_ids.contains(&tok) {
            stop = Some(StopReason::Eos);
        } else if generated.len() >= max_new_tokens {
            stop = Some(StopReason::MaxNewTokens);
        }
        Ok(stop.is_none())
    };
    let go_on = match first {
        Some(tok) => {
            ttft_ms = start.elapsed().as_secs_f64() * 1e3;
            accept(tok, &mut generated)?
        }
        None => false,
    };
    if go_on {
        let budget = engine.max_context().saturating_sub(pos);
        if on_device {
            // The engine chooses each token itself: it may queue a step before the
            // previous token reaches the host (`Engine::decode`); never one past the
            // token budget.
            let tok = *generated.last().expect("one token accepted");
            let steps = budget.min(max_new_tokens - generated.len());
            decode_steps = engine.decode(tok, pos, steps, &mut |t| accept(t, &mut generated))?;
        } else {
            while decode_steps < budget {
                let tok = *generated.last().expect("one token accepted");
                let out = engine.step(tok, pos)?;
                pos += 1;
                decode_steps += 1;
                if !accept(pick(out, sampler)?, &mut generated)? {
                    break;
                }
            }
        }
    }
    let stop = stop.unwrap_or(StopReason::ContextLimit);
    let decode_ms = decode_start.elapsed().as_secs_f64() * 1e3;
    let timings = Timings {
        prompt_tokens: prompt.len(),
        prompt_ms,
        prompt_tokens_per_s: per_s(prompt.len(), prompt_ms),
        decode_tokens: decode_steps,
        decode_ms,
        decode_tokens_per_s: per_s(decode_steps, decode_ms),
        time_to_first_token_ms: ttft_ms,
        total_ms: start.elapsed().as_secs_f64() * 1e3,
    };
    Ok(Generation {
        generated_ids: generated,
        stop,
        timings,
    })
}
