//! The `tessera` binary's commands: `generate`, `bench`, `tune` (the model's decode, run
//! and measured) and `explain` (generated code); `serve` is `crate::serve`. The model
//! library (`model`) has no CLI of its own.
pub mod bench;
pub mod engine_args;
pub mod explain;
pub mod generate;
pub mod tune;

use model::ModelError;
use std::io::Write;

/// Writes to stdout now (flushed), so a closed pipe is an error, not a panic.
pub(crate) fn write_out(s: &str) -> Result<(), ModelError> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| ModelError::io("<stdout>", e))
}
