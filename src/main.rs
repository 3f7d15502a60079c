//! The `tessera` command line: `generate` (Qwen3 decode), `serve` (an OpenAI-compatible
//! endpoint), `bench` (its speed against the bandwidth floor), `tune` (its speed over tile
//! rules and megakernel options) and `explain` (generated CUDA C, tile IR, or the decode
//! megakernel's schedule).
use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tessera::cli;

#[derive(Parser)]
#[command(
    name = "tessera",
    version,
    about = "Tile DSL kernels and a one-launch Qwen3 decoder"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text with a Qwen3 checkpoint (an embedded random model when --model is absent).
    Generate(cli::generate::GenerateArgs),
    /// Decode speed of the megakernel engine (ms/token at several contexts) against the
    /// memory-bandwidth floor and, with --peers, transformers.
    Bench(cli::bench::BenchArgs),
    /// Decode speed over a grid of tile rules and megakernel options, with a per-stage
    /// profile of each (GPU).
    Tune(cli::tune::TuneArgs),
    /// An OpenAI-compatible HTTP endpoint (chat and text completions, streaming or not)
    /// over one engine; the embedded random model when --model is absent.
    Serve(tessera::serve::ServeArgs),
    /// Print the CUDA C (or tile IR) generated for a kernel tessera ships.
    Explain(cli::explain::ExplainArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), String> = match cli.command {
        Command::Generate(args) => cli::generate::run_generate(args).map_err(|e| e.to_string()),
        Command::Bench(args) => cli::bench::run_bench(args).map_err(|e| e.to_string()),
        Command::Tune(args) => cli::tune::run_tune(args).map_err(|e| e.to_string()),
        Command::Serve(args) => tessera::serve::run(args).map_err(|e| e.to_string()),
        Command::Explain(args) => cli::explain::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}
