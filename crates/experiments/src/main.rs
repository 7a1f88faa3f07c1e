//! `uqbench`: benchmark uncertainty quantification in deep regression against exact answers.
//!
//! The binary is thin: it parses arguments into validated settings and calls the library
//! crates (`uqbench-anchor`, `uqbench-models`).

mod commands;
mod spec;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Benchmark uncertainty quantification in deep regression against exact answers.
#[derive(Debug, Parser)]
#[command(name = "uqbench", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print one repetition of a problem with its exact posterior (the anchor).
    Anchor(commands::anchor::AnchorArgs),
    /// Validate a spec and describe the problem and anchor of every setting.
    Check(commands::check::CheckArgs),
    /// List the backends of this build and whether a wgpu adapter is present.
    Backends,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Anchor(args) => commands::anchor::run(args),
        Command::Check(args) => commands::check::run(args),
        Command::Backends => commands::backends::run(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
