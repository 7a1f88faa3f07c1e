//! `uqbench bench train --method NAME`: the throughput of one registered method, trained and
//! predicted through its own `Method::run` on a synthetic one-dimensional task, so that every
//! engine method (and any other) is measured on the path a run takes, its prediction passes
//! and by-products included.

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::json;
use uqbench_anchor::{Rng, SeedPath};
use uqbench_core::{Compute, Likelihood, NoiseInfo, SeedBase, Task};

use uqbench_engine::Resources;

/// The noise sd of the synthetic targets y = sin(x) + N(0, σ²).
const SIGMA: f64 = 0.1;

/// The method's table from `--set KEY=VALUE` pairs (each VALUE a TOML value: `hidden=[20]`,
/// `members=5`, `p=0.2`).
fn table(sets: &[String]) -> Result<toml::Table> {
    let mut table = toml::Table::new();
    for set in sets {
        let (key, value) = set
            .split_once('=')
            .with_context(|| format!("--set {set}: expected KEY=VALUE, e.g. members=5"))?;
        let parsed: toml::Table = format!("v = {value}")
            .parse()
            .with_context(|| format!("--set {set}: VALUE must be a TOML value"))?;
        table.insert(key.trim().to_string(), parsed["v"].clone());
    }
    Ok(table)
}

/// What `bench train --method` measures.
pub struct MethodBench<'a> {
    /// The method's name (a registered kind).
    pub name: &'a str,
    /// `--set KEY=VALUE` pairs of its table.
    pub set: &'a [String],
    /// Replicas wanted (rounded up to whole repetitions).
    pub replicas: usize,
    /// Epochs.
    pub epochs: usize,
    /// Training points.
    pub n: usize,
    /// One JSON line instead of text.
    pub json: bool,
    /// Where it runs.
    pub res: Resources,
}

/// Runs the method on ⌈replicas / replicas per repetition⌉ repetitions of N points for
/// `epochs` epochs and prints replica-epochs per second and the peak memory.
pub fn run(args: &MethodBench<'_>) -> Result<()> {
    let (name, res) = (args.name, &args.res);
    let method = uqbench_methods::build(name, Some(&table(args.set)?))?;
    let members = method.replicas_per_repetition().max(1);
    let reps = args.replicas.div_ceil(members);
    let seed = |repetition: u64, purpose: &str| {
        SeedPath {
            base: 0,
            experiment: "bench",
            setting: "",
            repetition,
            member: 0,
            purpose,
        }
        .seed()
    };
    // The data of `bench train`: x ~ U(−4, 4), y = sin(x) + N(0, 0.1²), fresh noise per
    // repetition; 100 test inputs on [−6, 6].
    let mut rng = Rng::new(seed(0, "data"));
    let x: Vec<f64> = (0..args.n).map(|_| rng.uniform_in(-4.0, 4.0)).collect();
    let y: Vec<Vec<f64>> = (0..reps as u64)
        .map(|k| {
            let mut rng = Rng::new(seed(k, "noise"));
            x.iter().map(|&v| v.sin() + SIGMA * rng.normal()).collect()
        })
        .collect();
    let x_test: Vec<f64> = (0..100)
        .map(|i| -6.0 + 12.0 * f64::from(i) / 99.0)
        .collect();
    let repetitions: Vec<u64> = (0..reps as u64).collect();
    let (sd_train, sd_test) = (vec![SIGMA; args.n], vec![SIGMA; x_test.len()]);
    let task = Task {
        d: 1,
        x_train: &x,
        y_train: &y,
        repetitions: &repetitions,
        x_test: &x_test,
        epochs: args.epochs,
        known_sigma: Some(SIGMA),
        seeds: SeedBase {
            base: 0,
            experiment: "bench".into(),
            setting: String::new(),
        },
        features: None,
        noise: NoiseInfo {
            train: &sd_train,
            test: &sd_test,
            known: true,
        },
        likelihood: Likelihood::Gaussian,
    };
    let compute: Compute = res.compute();
    let start = Instant::now();
    let predictions = method.run(&task, &compute, false, &|_| {})?;
    let seconds = start.elapsed().as_secs_f64();
    let replicas = reps * members;
    let replica_epochs = (replicas * args.epochs) as f64;
    let diverged = predictions.iter().filter(|p| p.diverged).count();
    let peak = crate::provenance::peak_memory_mib();
    if args.json {
        outln!(
            "{}",
            json!({
                "method": name,
                "backend": res.backend.name(),
                "replicas": replicas,
                "members": members,
                "repetitions": reps,
                "epochs": args.epochs,
                "n": args.n,
                "seconds": seconds,
                "replica_epochs_per_s": replica_epochs / seconds,
                "peak_memory_mib": peak,
                "threads": res.threads,
                "diverged_repetitions": diverged,
            })
        );
    } else {
        outln!(
            "{name}: {replicas} replicas ({reps} repetitions × {members}) × {} epochs, N = {}, \
             backend {} ({} threads): {seconds:.2} s, {:.0} replica-epochs/s, peak memory {:.0} \
             MiB{}",
            args.epochs,
            args.n,
            res.backend,
            res.threads,
            replica_epochs / seconds,
            peak.unwrap_or(f64::NAN),
            if diverged > 0 {
                format!(", {diverged} repetitions diverged")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}
