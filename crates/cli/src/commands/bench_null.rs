//! `uqbench bench certificate`: the certificate's null. Perfectly mixed chains (stationary
//! AR(1) chains, as many as the reference sampler runs, with its draws and an autocorrelation
//! that gives a chosen ESS) are simulated at independent inputs, and the share that would
//! fail each part of the certificate is printed: nested R̂ at the worst input against its
//! threshold, the rank-normalised R̂ of Vehtari et al. against 1.01 (posteriordb's, for
//! comparison), and bulk and tail ESS against 400. A criterion that fails such chains more
//! than rarely is not a certificate (docs/quartic-002.md uses it to set the nested R̂
//! threshold).

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;
use uqbench_anchor::{Rng, SeedPath};
use uqbench_metrics::mcmc;

/// Arguments of `uqbench bench certificate`.
#[derive(Debug, Args)]
pub struct NullBench {
    /// Chains per data set.
    #[arg(long, default_value_t = 64)]
    chains: usize,
    /// Superchains (groups of chains from one start) for nested R̂.
    #[arg(long, default_value_t = 8)]
    superchains: usize,
    /// Draws per chain.
    #[arg(long, default_value_t = 100)]
    draws: usize,
    /// The total (bulk) ESS the chains have at each input, which sets their lag-one
    /// autocorrelation ρ: chains × draws / ESS = (1 + ρ)/(1 − ρ).
    #[arg(long, default_value_t = 800.0)]
    ess: f64,
    /// Independent inputs (the worst of them is taken, as the sampler's report does).
    #[arg(long, default_value_t = 181)]
    inputs: usize,
    /// Simulated data sets.
    #[arg(long, default_value_t = 200)]
    trials: usize,
    /// Nested R̂'s threshold (default: the certificate's for the superchains,
    /// [`mcmc::nested_threshold`]).
    #[arg(long)]
    threshold: Option<f64>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `uqbench bench certificate`.
pub fn run(args: &NullBench) -> Result<()> {
    let total = (args.chains * args.draws) as f64;
    if !(args.ess > 0.0 && args.ess <= total) {
        bail!(
            "--ess {}: valid is a positive ESS up to chains × draws = {total}",
            args.ess
        );
    }
    let tau = total / args.ess;
    let rho = (tau - 1.0) / (tau + 1.0);
    let mut rng = Rng::new(
        SeedPath {
            base: 0,
            experiment: "bench-certificate",
            setting: "",
            repetition: 0,
            member: 0,
            purpose: "null",
        }
        .seed(),
    );
    let threshold = args
        .threshold
        .unwrap_or_else(|| mcmc::nested_threshold(args.superchains, args.inputs));
    let rates = mcmc::null_rates(
        (args.chains, args.superchains, args.draws),
        (rho, threshold),
        args.inputs,
        args.trials,
        &mut || rng.normal(),
    )?;
    if args.json {
        println!(
            "{}",
            json!({
                "chains": args.chains, "superchains": args.superchains, "draws": args.draws,
                "ess": args.ess, "rho": rho, "inputs": args.inputs, "trials": args.trials,
                "threshold": threshold,
                "fail_nested_rhat": rates.nested_rhat, "fail_nested_rhat_101": rates.nested_rhat_101,
                "fail_rhat": rates.rhat,
                "fail_ess": rates.ess, "fail_certificate": rates.certificate,
                "nested_rhat_q99": rates.nested_rhat_q99,
                "ess_bulk_median": rates.ess_bulk_median, "ess_tail_median": rates.ess_tail_median,
            })
        );
        return Ok(());
    }
    println!(
        "{} chains in {} superchains × {} draws, ESS {} per input (ρ = {rho:.3}), worst of {} \
         independent inputs, {} trials:",
        args.chains, args.superchains, args.draws, args.ess, args.inputs, args.trials
    );
    println!(
        "  nested R̂ ≥ {threshold:.4}: {:.3} of trials; ≥ 1.01: {:.3} (99th percentile of the \
         worst input's: {:.4})",
        rates.nested_rhat, rates.nested_rhat_101, rates.nested_rhat_q99
    );
    println!("  rank-normalised R̂ ≥ 1.01: {:.3}", rates.rhat);
    println!(
        "  bulk or tail ESS ≤ 400: {:.3} (medians of the worst input's: {:.0} / {:.0})",
        rates.ess, rates.ess_bulk_median, rates.ess_tail_median
    );
    println!("  the certificate: {:.3}", rates.certificate);
    Ok(())
}
