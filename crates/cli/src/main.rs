//! `uqbench`: benchmark uncertainty quantification in deep regression against exact answers.
//!
//! The binary is thin: it parses arguments into validated settings and calls the library
//! crates (`uqbench-anchor`, `uqbench-models`).

/// `println!` for the commands: writes a line to stdout and returns the I/O error instead of
/// panicking, so that a closed pipe (`uqbench check … | head -1`) ends the command quietly
/// (`main` exits 0 on a broken pipe, as ripgrep does).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod commands;
mod figures;
mod provenance;
mod ranking;
mod report;
mod runner;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator: burn allocates a fresh buffer for every tensor
/// operation, and glibc returns large freed buffers to the kernel, so every step paid for page
/// faults and zeroing. mimalloc keeps and reuses them (measured with `uqbench bench train`:
/// see docs/performance.md's benchmark section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Benchmark uncertainty quantification in deep regression against exact answers.
#[derive(Debug, Parser)]
#[command(name = "uqbench", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an experiment: train every method on every repetition, summarise, draw figures.
    Run(commands::run::RunArgs),
    /// Redraw a run's summaries, figures and report from its stored results.
    Report(commands::report::ReportArgs),
    /// Combine the directories of a sharded run into one run.
    Merge(commands::merge::MergeArgs),
    /// Write (and with --submit, submit) a Slurm job array of balanced shards and its merge.
    Slurm(commands::slurm::SlurmArgs),
    /// Print what a run directory holds and lacks (and which Slurm tasks to resubmit).
    Status(commands::status::StatusArgs),
    /// Print one repetition of a problem with its exact posterior (the anchor).
    Anchor(commands::anchor::AnchorArgs),
    /// Validate a spec and describe the problem and anchor of every setting.
    Check(commands::check::CheckArgs),
    /// List the backends of this build and whether a wgpu adapter is present.
    Backends,
    /// List the method kinds a spec may name, by room.
    Methods(commands::methods::MethodsArgs),
    /// Measure the speed of batched training.
    Bench(commands::bench::BenchArgs),
    /// Print every applicable metric of a JSON file of predictions.
    Metrics(commands::metrics::MetricsArgs),
    /// Write a problem's training data and test inputs per repetition (CSV and JSON).
    Export(commands::export::ExportArgs),
    /// Summarise predictions made by another tool against the truth and the anchor.
    Score(commands::score::ScoreArgs),
    /// Write a run's stored draws (or Gaussian joints) of one method as `score`'s input.
    Draws(commands::draws::DrawsArgs),
    /// Compare every pair of methods repetition by repetition: paired differences, t
    /// intervals, bootstrap, Holm, and rankings whose ties the data do not separate.
    Compare(commands::compare::CompareArgs),
    /// The decision track of a spec's [decision] section: the exact Thompson sampler (or the
    /// exact active learner) and the baselines on every repetition, their regret (al_auc)
    /// and its ratio to the exact policy's.
    Decide(commands::decide::DecideArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(args) => commands::run::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::Merge(args) => commands::merge::run(args),
        Command::Slurm(args) => commands::slurm::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Anchor(args) => commands::anchor::run(args),
        Command::Check(args) => commands::check::run(args),
        Command::Backends => commands::backends::run(),
        Command::Methods(args) => commands::methods::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Metrics(args) => commands::metrics::run(args),
        Command::Export(args) => commands::export::run(args),
        Command::Score(args) => commands::score::run(args),
        Command::Draws(args) => commands::draws::run(args),
        Command::Compare(args) => commands::compare::run(args),
        Command::Decide(args) => commands::decide::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`| head`): nothing more to say.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
