//! What a decoder engine is, as seen by the generation loop.
//!
//! The loop (`generate.rs`) owns the prompt, sampling and stopping; an engine only turns
//! (token, position) into the next distribution. The CPU reference implements it now;
//! the GPU megakernel will later, and may fuse greedy argmax into the step, hence
//! `StepOutput::Token`.
use crate::error::ModelError;

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
}
