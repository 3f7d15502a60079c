//! One error type for the whole crate; every message is one line naming the file,
//! tensor or argument at fault and what was expected.
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: malformed JSON: {msg}")]
    Json { path: PathBuf, msg: String },
    #[error("{path}: {msg}")]
    Config { path: PathBuf, msg: String },
    #[error("unsupported checkpoint: {0}")]
    Unsupported(String),
    #[error("{path}: not a valid safetensors file: {msg}")]
    Safetensors { path: PathBuf, msg: String },
    #[error("tensor {name}: {msg}")]
    Tensor { name: String, msg: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("prompt: {0}")]
    Prompt(String),
    #[error("{0}")]
    Usage(String),
    #[error("engine {engine}: {msg}")]
    Engine { engine: String, msg: String },
}

impl ModelError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ModelError::Io {
            path: path.into(),
            source,
        }
    }
}
