//! The CLI's subcommands that do not belong to the model: `explain`. (`generate`, `bench`
//! and `tune` live with the model, in `model::cli`.)
pub mod explain;
