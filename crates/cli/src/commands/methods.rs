//! `uqbench methods`: the method kinds a spec may name, from the registry's catalogue.

use anyhow::Result;
use clap::Args;
use uqbench_experiment::kinds::METHOD_KINDS;

/// Arguments of `uqbench methods`.
#[derive(Debug, Args)]
pub struct MethodsArgs {
    /// Print the catalogue as JSON (a list of {name, room, summary}).
    #[arg(long)]
    pub json: bool,
}

/// Runs `uqbench methods`.
pub fn run(args: &MethodsArgs) -> Result<()> {
    if args.json {
        outln!("{}", serde_json::to_string_pretty(METHOD_KINDS)?);
        return Ok(());
    }
    outln!(
        "method kinds (run.methods names a table; a table's kind is `kind = \"…\"` or its name; \
         settings in docs/methods.md):"
    );
    for room in ["exact", "network", "sampler", "post-hoc"] {
        outln!("{room}:");
        for k in METHOD_KINDS.iter().filter(|k| k.room == room) {
            outln!("  {:<20} {}", k.name, k.summary);
        }
    }
    Ok(())
}
