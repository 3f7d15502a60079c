//! The CLI's subcommands other than `generate` (which lives with the model).
pub mod explain;
