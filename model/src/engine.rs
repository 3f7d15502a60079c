//! What a decoder engine is, as seen by the generation loop.
//!
//! The loop (`generate.rs`) owns the prompt, sampling and stopping; an engine only turns
//! (token, position) into the next distribution. Device engines fuse the choice of the
//! next token into the step (argmax, or Gumbel-max sampling), hence `StepOutput::Token`.
use crate::error::ModelError;
use crate::sampling::SamplingParams;

/// The result of one decode step.
#[derive(Debug, Clone, PartialEq)]
pub enum StepOutput {
    /// Full next-token logits, `vocab_size` long.
    Logits(Vec<f32>),
    /// The greedy (argmax) next token, for engines that fuse the argmax.
    Token(u32),
}

pub trait Engine {
    /// Short engine name for reports, e.g. "reference".
    fn name(&self) -> &str;
    /// Where it runs, e.g. "cpu".
    fn device(&self) -> String;
    /// Positions the engine can hold (KV cache / rope limit).
    fn max_context(&self) -> usize;
    fn vocab_size(&self) -> usize;
    /// Feeds `token` at absolute position `pos` and returns what comes next.
    /// Positions must be fed in order from 0; `pos` smaller than the cached length
    /// rewinds the cache to `pos` first.
    fn step(&mut self, token: u32, pos: usize) -> Result<StepOutput, ModelError>;
    /// Feeds `tokens` at positions `start_pos..start_pos + tokens.len()` (a prompt, or a
    /// later part of one) and returns what comes after the last, as `step` would there.
    /// The cache then holds every position up to the last, so `step` continues at
    /// `start_pos + tokens.len()`. The default runs `step` once per token; the device
    /// engines run the prompt's rows through the `dot` kernels at once (`crate::prefill`).
    fn prefill(&mut self, tokens: &[u32], start_pos: usize) -> Result<StepOutput, ModelError> {
        let mut out = None;
        for (i, &t) in tokens.iter().enumerate() {
            out = Some(self.step(t, start_pos + i)?);
        }
        out.ok_or_else(|| ModelError::Prompt("empty prompt (no tokens)".into()))
    }
    /// How `prefill` feeds a prompt, for reports ("one step per token" by default).
    fn prompt_mode(&self) -> String {
        "one step per token".into()
    }
    /// Asks the engine to choose tokens itself with `params` (greedy, or temperature
    /// sampling on the device) and return `StepOutput::Token`. Returns false when it
    /// cannot: its steps then return logits (or greedy tokens) for the host to sample.
    fn device_sampling(&mut self, _params: &SamplingParams) -> Result<bool, ModelError> {
        Ok(false)
    }
    /// Decodes on by itself: feeds `token` at `pos`, then each token it chooses, for at
    /// most `max_steps` steps, handing each chosen token to `on_token`, which says whether
    /// to go on. Returns the steps whose tokens `on_token` saw. For an engine whose steps
    /// return `StepOutput::Token` (after `device_sampling` said yes). The default is one
    /// `step` after another; the megakernel engine can queue each step before it reads the
    /// previous one's token back (`MegakernelOptions::run_ahead`).
    fn decode(
        &mut self,
        token: u32,
        pos: usize,
        max_steps: usize,
        on_token: &mut dyn FnMut(u32) -> Result<bool, ModelError>,
    ) -> Result<usize, ModelError> {
        decode_stepwise(self, token, pos, max_steps, on_token)
    }
}

/// [`Engine::decode`] as one `step` after another.
pub fn decode_stepwise<E: Engine + ?Sized>(
    engine: &mut E,
    token: u32,
    pos: usize,
    max_steps: usize,
    on_token: &mut dyn FnMut(u32) -> Result<bool, ModelError>,
) -> Result<usize, ModelError> {
    let mut t = token;
    for i in 0..max_steps {
        t = match engine.step(t, pos + i)? {
            StepOutput::Token(t) => t,
            StepOutput::Logits(_) => {
                return Err(ModelError::Engine {
                    engine: engine.name().to_string(),
                    msg: "decode needs the engine to choose tokens (its steps return logits)"
                        .into(),
                })
            }
        };
        if !on_token(t)? {
            return Ok(i + 1);
        }
    }
    Ok(max_steps)
}
