//! Qwen3 from Hugging Face files: config, weights, tokenizer and chat template, a
//! plain-Rust reference decoder, the decoder's ops as `#[kernel]`s, two device engines (one
//! launch per op: `kernels_engine`; one `#[megakernel]` launch per step: `megakernel_engine`),
//! sampling and generation. The commands that run and measure it (`generate`, `bench`,
//! `tune`, `serve`) are the `tessera` binary's (`src/cli`, `src/bench`, `src/serve`).
//!
//! The reference decoder is the oracle for the GPU decoder; it is checked against
//! transformers' outputs in `tests/goldens.rs`.
pub mod chat;
pub mod checkpoint;
pub mod config;
pub mod device_model;
pub mod embedded;
pub mod engine;
pub mod error;
pub mod generate;
pub mod kernels;
pub mod kernels_engine;
pub mod megakernel_engine;
pub mod prefill;
pub mod reference;
pub mod sampling;
pub mod tokenizer;
pub mod weights;

pub use checkpoint::Checkpoint;
pub use config::Config;
pub use engine::{Engine, StepOutput};
pub use error::ModelError;
pub use reference::Reference;
pub use weights::{LayerWeights, Tensor, Weights};
