//! `uqbench check`: validate a spec and describe every setting's problem and anchor.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use uqbench_anchor::{Anchor, Noise, Region};

use crate::spec::ExperimentSpec;

/// Arguments of `uqbench check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Experiment spec (TOML).
    pub spec: PathBuf,
}

/// Runs `uqbench check`.
pub fn run(args: &CheckArgs) -> Result<()> {
    let spec = ExperimentSpec::load(&args.spec)?;
    println!("experiment `{}`: {}", spec.name, spec.description);
    for setting in spec.settings() {
        let problem = spec.resolve(&setting)?;
        let anchor = Anchor::fit(&problem)?;
        let count = |r: Region| problem.test.region.iter().filter(|&&x| x == r).count();
        let label = setting.label();
        println!(
            "  {}: d = {}, p = {}, N = {}, M = {} test points ({} in, {} gap, {} out), σ {}, \
             anchor {}, condition {:.3e}",
            if label.is_empty() {
                "(no sweep)".to_string()
            } else {
                label
            },
            problem.d(),
            anchor.p(),
            anchor.n(),
            problem.test.truth.len(),
            count(Region::In),
            count(Region::Gap),
            count(Region::Out),
            match &problem.noise {
                Noise::Constant(s) => format!("= {s}"),
                Noise::Function(e) => format!("= {e}"),
            },
            if problem.sigma_known {
                "normal"
            } else {
                "Student t"
            },
            anchor.condition(),
        );
        let names: Vec<String> = problem.features.terms().iter().map(|t| t.name()).collect();
        println!("      G = ({})", names.join(", "));
        println!(
            "      γ = ({})",
            problem
                .gamma
                .iter()
                .map(|g| format!("{g:.4}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!("ok");
    Ok(())
}
