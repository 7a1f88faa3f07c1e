//! `uqbench bench hmc`: throughput of HMC sampling on [002]'s Bayesian 1-W-1 network, the
//! workload `../shared/bench/peers.py --which hmc_jax` states: 200 quartic points
//! (f = 0.5x − 8x² − x³ + 2x⁴ on [−2, 2.5], σ = 1 known), a N(0, 10²) prior on every weight and
//! bias, leaky ReLU 0.01, a fixed step size (no adaptation, no jitter), L leapfrog steps and a
//! Metropolis accept per iteration. `grad_evals_per_s` = chains × iterations × L / seconds;
//! `ess_bulk_per_s` and `ess_tail_per_s` are the draws' bulk and tail ESS at the worst of the
//! 20 test inputs per second (with `--warmup`, the step adapted first and the warm-up timed).
//! The run is the `HMC` method itself (one repetition of C chains), so it also records every
//! draw of f at the 200 training and 20 test inputs, which the peer does not.

use std::time::Instant;

use anyhow::Result;
use clap::Args;
use serde_json::json;
use uqbench_anchor::{Rng, SeedPath};
use uqbench_core::noise::Tau;
use uqbench_core::{Likelihood, Method, SeedBase, Task};
use uqbench_engine::trainer::Resources;
use uqbench_engine::{open_device, BackendKind, NetConfig};
use uqbench_metrics::mcmc;
use uqbench_samplers::{Algorithm, Hmc, HmcConfig, HmcSettings, Trajectory};

/// Arguments of `uqbench bench hmc`.
#[derive(Debug, Args)]
pub struct HmcBench {
    /// Chains C.
    #[arg(long, default_value_t = 400)]
    chains: usize,
    /// Hidden width W of the 1-W-1 network.
    #[arg(long, default_value_t = 20)]
    width: usize,
    /// Leapfrog steps L per iteration.
    #[arg(long, default_value_t = 10)]
    leapfrog: usize,
    /// Iterations I per chain (every one kept: no warm-up).
    #[arg(long, default_value_t = 200)]
    iters: usize,
    /// Step size ε, fixed (with `--warmup`, the start of its adaptation).
    #[arg(long, default_value_t = 1e-3)]
    step: f64,
    /// Warm-up iterations per chain that adapt ε (dual averaging) and are discarded; 0 (the
    /// peers' workload) keeps ε fixed. Timed with the rest.
    #[arg(long, default_value_t = 0)]
    warmup: usize,
    /// The No-U-Turn sampler instead of `--leapfrog` fixed steps (`algorithm = "nuts"`), with
    /// trajectories of at most 2^`--max-depth` steps; give it a `--warmup` to adapt its step
    /// and diagonal metric.
    #[arg(long)]
    nuts: bool,
    /// NUTS's largest tree depth.
    #[arg(long, default_value_t = 10)]
    max_depth: usize,
    /// Integrate the output layer out (`marginalise_output = true`): the move on the hidden
    /// layer under the marginal likelihood, the output layer drawn exactly.
    #[arg(long)]
    marginalise_output: bool,
    /// Parallel-tempering rungs per chain (`temperatures`; 1: none). Gradient evaluations
    /// count every rung's.
    #[arg(long, default_value_t = 1)]
    temperatures: usize,
    /// The many-chain reference (`algorithm = "chees"`, docs/quartic-002.md): the chains of
    /// the data set in lockstep, in superchains of 8, with the output layer integrated out,
    /// `--leapfrog` jittered steps per iteration (`trajectory = "fixed"`), `--unit-sweeps` sweeps
    /// of unit moves, `--warmup` iterations adapting the step from all chains, and `--iters`
    /// kept draws every `--thin` iterations. Reports the gradient and unit-move evaluations
    /// per second and the certificate (nested R̂, ESS, divergences).
    #[arg(long, conflicts_with = "nuts")]
    ensemble: bool,
    /// With `--ensemble`: sweeps of unit moves per iteration.
    #[arg(long, default_value_t = 1)]
    unit_sweeps: usize,
    /// With `--ensemble` and `--temperatures` above 1: sweeps of unit moves on the rungs
    /// above the cold one (`hot_unit_sweeps`; unset: `--unit-sweeps`).
    #[arg(long)]
    hot_unit_sweeps: Option<usize>,
    /// With `--ensemble`: iterations per kept draw.
    #[arg(long, default_value_t = 1)]
    thin: usize,
    /// With `--ensemble`: doublings of the sampling stage while the chains are not certified
    /// (`doublings`); the rates count the iterations run.
    #[arg(long, default_value_t = 0)]
    doublings: usize,
    /// Backend: flex, ndarray or wgpu.
    #[arg(long, default_value = "flex")]
    backend: BackendKind,
    /// Chains per chunk (default: from the memory plan).
    #[arg(long)]
    chunk: Option<usize>,
    /// Worker threads (default: all cores on the CPU, 1 on wgpu).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Let --backend wgpu run on a software adapter (also UQBENCH_ALLOW_SOFTWARE_GPU=1).
    #[arg(long, env = "UQBENCH_ALLOW_SOFTWARE_GPU", value_parser = clap::builder::FalseyValueParser::new())]
    allow_software_gpu: bool,
}

/// The quartic of [002] at `n` points uniform on [−2, 2.5], with N(0, 1) noise.
fn quartic(n: usize) -> (Vec<f64>, Vec<f64>) {
    let seed = |purpose: &str| {
        SeedPath {
            base: 0,
            experiment: "bench-hmc",
            setting: "",
            repetition: 0,
            member: 0,
            purpose,
        }
        .seed()
    };
    let mut rng = Rng::new(seed("data"));
    let x: Vec<f64> = (0..n).map(|_| rng.uniform_in(-2.0, 2.5)).collect();
    let y = x
        .iter()
        .map(|&v| 0.5 * v - 8.0 * v * v - v.powi(3) + 2.0 * v.powi(4) + rng.normal())
        .collect();
    (x, y)
}

/// The `HMC` method's settings for the benchmark: σ = 1 known, N(0, 10²) priors, no jitter.
fn config(args: &HmcBench) -> HmcConfig {
    HmcConfig {
        own: HmcSettings {
            chains: args.chains,
            warmup: args.warmup,
            draws: args.iters,
            leapfrog_steps: args.leapfrog,
            step_size: args.step,
            prior_sd: 10.0,
            noise_sd: Some(Tau::Value(1.0)),
            jitter: false,
            algorithm: if args.nuts {
                Algorithm::Nuts
            } else if args.ensemble {
                Algorithm::Chees
            } else {
                Algorithm::Hmc
            },
            max_tree_depth: args.max_depth,
            marginalise_output: args.marginalise_output || args.ensemble,
            temperatures: args.temperatures,
            superchains: if args.ensemble { args.chains / 8 } else { 0 },
            unit_sweeps: if args.ensemble { args.unit_sweeps } else { 0 },
            hot_unit_sweeps: args.hot_unit_sweeps.filter(|_| args.ensemble),
            thin: if args.ensemble { args.thin } else { 1 },
            doublings: if args.ensemble { args.doublings } else { 0 },
            trajectory: Trajectory::Fixed,
            ..HmcSettings::default()
        },
        net: NetConfig {
            hidden: vec![args.width],
            negative_slope: 0.01,
            standardize: false,
        },
        ..HmcConfig::default()
    }
}

/// Runs `uqbench bench hmc`.
pub fn run(args: &HmcBench) -> Result<()> {
    let device = open_device(args.backend, args.allow_software_gpu)?;
    let (x, y) = quartic(200);
    let y = vec![y];
    let x_test: Vec<f64> = (0..20).map(|i| -2.0 + 4.5 * f64::from(i) / 19.0).collect();
    let task = Task {
        d: 1,
        x_train: &x,
        y_train: &y,
        repetitions: &[0],
        x_test: &x_test,
        epochs: 1, // unused by HMC (its iterations are its settings)
        known_sigma: Some(1.0),
        seeds: SeedBase {
            base: 0,
            experiment: "bench-hmc".into(),
            setting: String::new(),
        },
        features: None,
        noise: Default::default(),
        likelihood: Likelihood::Gaussian,
    };
    let method = Hmc::new("HMC", config(args))?;
    let mut res = Resources::new(args.backend, device);
    res.chunk = args.chunk;
    if let Some(t) = args.threads {
        res.threads = t.max(1);
    }
    let start = Instant::now();
    let out = method.run(&task, &res.compute(), false, &|_| {})?;
    let seconds = start.elapsed().as_secs_f64();
    let scalar = |k: &str| out[0].scalars.get(k).copied().unwrap_or(f64::NAN);
    // Every chain's gradient evaluations, warm-up included (NUTS's trajectories vary), and the
    // ensemble's unit-move evaluations of the collapsed likelihood (W per sweep and rung).
    let doubled = scalar("sampling_doublings").max(0.0) as u32; // NaN (none) → 0
    let sampling = args.iters * args.thin * (1usize << doubled);
    let iterations = (args.chains * (args.warmup + sampling)) as f64;
    let evals = iterations * scalar("leapfrogs_per_iteration");
    let unit_evals = if args.ensemble {
        let hot = args.hot_unit_sweeps.unwrap_or(args.unit_sweeps);
        iterations
            * ((args.unit_sweeps + hot * args.temperatures.saturating_sub(1)) * args.width) as f64
    } else {
        0.0
    };
    let certified = scalar("reference_grade") == 1.0;
    let accept = scalar("accept_rate");
    let rhat = scalar("rhat_max");
    // The draws' effective sample size per second at the worst test input (the smallest bulk
    // and the smallest tail ESS over the 20 test inputs), warm-up included in the time.
    let (ess_bulk, ess_tail) = (scalar("ess_bulk_min"), scalar("ess_tail_min"));
    if args.json {
        // Only the JSON reports the chains at the worst input (R̂ of every input: costly).
        let modes = worst_input_chains(
            out[0].samples.as_deref().unwrap_or(&[]),
            args.iters,
            &x_test,
        );
        outln!(
            "{}",
            json!({
                "backend": args.backend.name(),
                "chains": args.chains,
                "width": args.width,
                "leapfrog": args.leapfrog,
                "iters": args.iters,
                "warmup": args.warmup,
                "n": 200,
                "step": args.step,
                "threads": res.threads,
                "seconds": seconds,
                "grad_evals_per_s": evals / seconds,
                "unit_evals_per_s": unit_evals / seconds,
                "nested_rhat_max": scalar("nested_rhat_max"),
                "nested_rhat_threshold": scalar("nested_rhat_threshold"),
                "reference_grade": certified,
                "certified_ess_bulk_per_s": if certified { ess_bulk / seconds } else { 0.0 },
                "certified_ess_tail_per_s": if certified { ess_tail / seconds } else { 0.0 },
                "peak_memory_mib": crate::provenance::peak_memory_mib(),
                "accept_rate": accept,
                "rhat_max": rhat,
                "ess_bulk_min": ess_bulk,
                "ess_tail_min": ess_tail,
                "ess_bulk_per_s": ess_bulk / seconds,
                "ess_tail_per_s": ess_tail / seconds,
                "worst_input": modes.x,
                "between_over_within_sd": modes.ratio,
                "chain_means": (args.chains <= 16).then_some(&modes.means),
                "chain_sds": (args.chains <= 16).then_some(&modes.sds),
                "diverged": out[0].diverged,
                "algorithm": if args.nuts { "nuts" } else if args.ensemble { "chees" } else { "hmc" },
                "unit_sweeps": args.unit_sweeps,
                "hot_unit_sweeps": args.hot_unit_sweeps,
                "thin": args.thin,
                "doublings": doubled,
                "marginalise_output": args.marginalise_output,
                "temperatures": args.temperatures,
                "leapfrogs_per_iteration": scalar("leapfrogs_per_iteration"),
                "divergent_transitions": scalar("divergent_transitions"),
            })
        );
    } else {
        let rates = (seconds, evals, unit_evals);
        outln!("{}", text_line(args, res.threads, rates, &scalar));
    }
    Ok(())
}

/// The text line of `bench hmc` (without `--json`): `rates` = (seconds, gradient evaluations,
/// unit-move evaluations), `scalar` the repetition's scalars.
fn text_line(
    args: &HmcBench,
    threads: usize,
    (seconds, evals, unit_evals): (f64, f64, f64),
    scalar: &dyn Fn(&str) -> f64,
) -> String {
    let certified = scalar("reference_grade") == 1.0;
    let (ess_bulk, ess_tail) = (scalar("ess_bulk_min"), scalar("ess_tail_min"));
    if args.ensemble {
        format!(
            "{} chains ({} superchains) × ({} + {}×{}×2^{}) iterations, {} jittered leapfrog steps and \
             {} unit sweeps each{}, 1-{}-1 network, N = 200 ({} threads): {:.2} s, {:.0} gradient \
             and {:.0} unit-move evaluations/s; nested R̂ {:.4} (threshold {:.4}), bulk/tail ESS \
             {:.0} / {:.0} at the worst test input ({:.1} / {:.1} per second), {} divergent: {}",
            args.chains,
            args.chains / 8,
            args.warmup,
            args.iters,
            args.thin,
            scalar("sampling_doublings").max(0.0),
            args.leapfrog,
            args.unit_sweeps,
            match args.hot_unit_sweeps {
                Some(hot) => format!(" ({hot} on the hot rungs)"),
                None => String::new(),
            },
            args.width,
            threads,
            seconds,
            evals / seconds,
            unit_evals / seconds,
            scalar("nested_rhat_max"),
            scalar("nested_rhat_threshold"),
            ess_bulk,
            ess_tail,
            ess_bulk / seconds,
            ess_tail / seconds,
            scalar("divergent_transitions"),
            if certified {
                "certified"
            } else {
                "not certified"
            },
        )
    } else {
        format!(
            "{} chains × {} iterations × {} leapfrog steps, 1-{}-1 network, N = 200, backend {} \
             ({} threads): {:.2} s, {:.0} gradient evaluations/s, acceptance {:.2}, worst R̂ {:.2}, \
             bulk/tail ESS per second at the worst test input {:.1} / {:.1}",
            args.chains,
            args.iters,
            args.leapfrog,
            args.width,
            args.backend,
            threads,
            seconds,
            evals / seconds,
            scalar("accept_rate"),
            scalar("rhat_max"),
            ess_bulk / seconds,
            ess_tail / seconds
        )
    }
}

/// The chains at the test input of the largest R̂: each chain's mean and sd of f there, and
/// the sd of the chain means over the mean within-chain sd (≫ 1: the chains sit in different
/// modes of f; ≈ 1/√draws-ish: they agree).
struct Modes {
    x: f64,
    means: Vec<f64>,
    sds: Vec<f64>,
    ratio: f64,
}

fn worst_input_chains(rows: &[Vec<f64>], t: usize, x_test: &[f64]) -> Modes {
    let mut best = (f64::NEG_INFINITY, 0);
    for i in 0..x_test.len() {
        let rhat = mcmc::diagnose(&mcmc::chains_at(rows, i, t)).map_or(f64::INFINITY, |d| d.rhat);
        let rhat = if rhat.is_nan() { f64::INFINITY } else { rhat };
        if rhat > best.0 {
            best = (rhat, i);
        }
    }
    let i = best.1;
    let (means, sds): (Vec<f64>, Vec<f64>) = mcmc::chains_at(rows, i, t)
        .iter()
        .map(|c| {
            let mean = c.iter().sum::<f64>() / c.len() as f64;
            let var = c.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / c.len() as f64;
            (mean, var.sqrt())
        })
        .unzip();
    let k = means.len().max(1) as f64;
    let grand = means.iter().sum::<f64>() / k;
    let between = (means.iter().map(|m| (m - grand).powi(2)).sum::<f64>() / k).sqrt();
    let within = sds.iter().sum::<f64>() / k;
    Modes {
        x: x_test.get(i).copied().unwrap_or(f64::NAN),
        means,
        sds,
        ratio: between / within,
    }
}
