//! One line per request, on stderr or appended to `--log FILE`.
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

pub enum Log {
    Stderr,
    File(Mutex<std::fs::File>),
}

impl Log {
    pub fn open(path: Option<&Path>) -> std::io::Result<Log> {
        Ok(match path {
            None => Log::Stderr,
            Some(p) => Log::File(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            )),
        })
    }

    /// Writes one line; a failing log never fails a request.
    pub fn line(&self, s: &str) {
        match self {
            Log::Stderr => eprintln!("{s}"),
            Log::File(f) => {
                if let Ok(mut f) = f.lock() {
                    let _ = writeln!(f, "{s}");
                }
            }
        }
    }
}

/// What is logged about a finished request.
#[derive(Debug, Clone, Default)]
pub struct RequestStats {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub queue_ms: f64,
    /// From the start of its generation (after the queue) to its first token.
    pub ttft_ms: f64,
    /// Tokens after the first, per second of decoding.
    pub decode_tokens_per_s: f64,
}

impl RequestStats {
    pub fn line(&self, id: &str, outcome: &str) -> String {
        format!(
            "serve: {id}: prompt {} tokens | waited {:.1} ms | time to first token {:.1} ms | decode {} tokens, {:.1} tokens/s | {outcome}",
            self.prompt_tokens,
            self.queue_ms,
            self.ttft_ms,
            self.completion_tokens,
            self.decode_tokens_per_s,
        )
    }
}
