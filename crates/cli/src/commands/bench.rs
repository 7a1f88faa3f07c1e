//! `uqbench bench train`: throughput of batched training (`bench hmc`: `bench_hmc.rs`).

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;
use uqbench_anchor::{Rng, SeedPath};
use uqbench_engine::trainer::{self, Job, Resources, TrainSettings};
use uqbench_engine::{open_device, BackendKind, Bernoulli, MlpShape};

/// `uqbench bench …`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Train R replicas of the 1-128-64-32-1 network full-batch and report throughput.
    Train(TrainBench),
    /// Sample C HMC chains of [002]'s Bayesian 1-W-1 network and report gradient
    /// evaluations per second.
    Hmc(super::bench_hmc::HmcBench),
    /// The reference certificate's null: how often perfectly mixed chains would fail it.
    Certificate(super::bench_null::NullBench),
    /// This machine's own f32 peaks: a large product through the host trainer's register
    /// tiles, and independent fused multiply-adds.
    Peak(super::bench_peak::PeakBench),
}

/// Arguments of `uqbench bench train`.
#[derive(Debug, Args)]
pub struct TrainBench {
    /// Replicas R (default: 120 members × 50 repetitions).
    #[arg(long, default_value_t = 6000)]
    replicas: usize,
    /// Epochs E (full batch: one step each).
    #[arg(long, default_value_t = 300)]
    epochs: usize,
    /// Training points N (one-dimensional, uniform on [−4, 4]).
    #[arg(long, default_value_t = 50)]
    n: usize,
    /// Backend: flex, ndarray or wgpu.
    #[arg(long, default_value = "flex")]
    backend: BackendKind,
    /// Replicas per chunk (default: chosen from the backend and the memory budget).
    #[arg(long)]
    chunk: Option<usize>,
    /// Worker threads (default: all cores on the CPU, 1 on wgpu).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Let --backend wgpu run on a software adapter (lavapipe, llvmpipe, SwiftShader); also
    /// UQBENCH_ALLOW_SOFTWARE_GPU=1.
    #[arg(long, env = "UQBENCH_ALLOW_SOFTWARE_GPU", value_parser = clap::builder::FalseyValueParser::new())]
    allow_software_gpu: bool,
    /// The training route: `engine` (the hand-written network) or `autodiff` (the same
    /// network with MC dropout p = 0.1 on its last hidden layer as a `#[derive(Module)]`
    /// module, trained through burn autodiff on the same trainer, one prediction pass).
    #[arg(long, value_enum, default_value = "engine")]
    route: Route,
    /// A registered method (`Ens`, `BD`, `EnsMCD`, `SWAG`, …) trained and predicted through
    /// its own run on the same data: ⌈R / members⌉ repetitions of its default settings,
    /// changed by `--set` (`bench_method.rs`).
    #[arg(long)]
    method: Option<String>,
    /// With `--method`: a setting of its table as KEY=VALUE (a TOML value), repeatable:
    /// `--set members=5 --set hidden=[20]`.
    #[arg(long, requires = "method")]
    set: Vec<String>,
    #[command(flatten)]
    host: super::HostArgs,
}

/// How `bench train` trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Route {
    /// The hand-written network (every built-in method).
    Engine,
    /// burn autodiff on a `#[derive(Module)]` network (`uqbench_engine::autodiff::McdNet`).
    Autodiff,
}

/// Runs `uqbench bench`.
pub fn run(args: &BenchArgs) -> Result<()> {
    match &args.command {
        BenchCommand::Train(t) => train(t),
        BenchCommand::Hmc(h) => super::bench_hmc::run(h),
        BenchCommand::Certificate(c) => super::bench_null::run(c),
        BenchCommand::Peak(p) => super::bench_peak::run(p),
    }
}

/// The resources of the arguments: the backend's device opened, threads, chunk and host
/// settings.
fn resources(args: &TrainBench) -> Result<Resources> {
    let device = open_device(args.backend, args.allow_software_gpu)?;
    let mut res = Resources::new(args.backend, device);
    res.chunk = args.chunk;
    if let Some(t) = args.threads {
        res.threads = t.max(1);
    }
    args.host.apply(&mut res);
    Ok(res)
}

fn train(args: &TrainBench) -> Result<()> {
    if let Some(name) = &args.method {
        return super::bench_method::run(&super::bench_method::MethodBench {
            name,
            set: &args.set,
            replicas: args.replicas,
            epochs: args.epochs,
            n: args.n,
            json: args.json,
            res: resources(args)?,
        });
    }
    let shape = MlpShape::paper(1);
    let seed = |member: usize, purpose: &str| {
        SeedPath {
            base: 0,
            experiment: "bench",
            setting: "",
            repetition: 0,
            member: member as u64,
            purpose,
        }
        .seed()
    };
    // One data set, y = sin(x) + N(0, 0.1²), shared by all replicas; replicas differ by init.
    let mut rng = Rng::new(seed(0, "data"));
    let x: Vec<f32> = (0..args.n)
        .map(|_| rng.uniform_in(-4.0, 4.0) as f32)
        .collect();
    let y: Vec<f32> = x
        .iter()
        .map(|&v| (f64::from(v).sin() + 0.1 * rng.normal()) as f32)
        .collect();
    let targets = vec![y];
    let replica_targets = vec![0usize; args.replicas];
    let init: Vec<u64> = (0..args.replicas).map(|r| seed(r, "init")).collect();
    let batch: Vec<u64> = (0..args.replicas).map(|r| seed(r, "batch")).collect();
    let ids: Vec<u64> = (0..args.replicas as u64).collect();
    let x_test: Vec<f32> = (0..100).map(|i| -6.0 + 12.0 * i as f32 / 99.0).collect();
    let job = Job {
        shape: &shape,
        x_train: &x,
        targets: &targets,
        replica_targets: &replica_targets,
        init_seeds: &init,
        stream_seeds: &batch,
        replica_ids: &ids,
        x_test: &x_test,
        init: None,
        inputs: None,
    };
    let settings = TrainSettings::paper(args.epochs, args.n);
    let res = resources(args)?;
    // Which loops train: the CPU's host trainer (and the instruction set of its products) or
    // the backend's tensors.
    let trainer = match args.route {
        Route::Engine if trainer::trains_on_host(&res) => {
            format!("host, {:?}", res.simd).to_lowercase()
        }
        _ => "tensors".to_string(),
    };
    let start = Instant::now();
    let mut transfers = None;
    let mut ops = None;
    let (chunk, final_objective, diverged) = match args.route {
        Route::Engine => {
            // Operations are counted in burn's fusion server (the GPU backends; `null` on the
            // CPU, see `engine::ops`).
            let (out, counted) = trainer::ops::count(args.backend, &res.device, || {
                trainer::train(&job, &settings, &res, &|_| {})
            })?;
            ops = counted;
            transfers = Some(out.transfers);
            let objective = out.final_objective.iter().sum::<f64>() / args.replicas as f64;
            (
                Some(out.chunk),
                objective,
                out.diverged.iter().filter(|d| **d).count(),
            )
        }
        Route::Autodiff => autodiff(args, &job, &settings, &res)?,
    };
    let seconds = start.elapsed().as_secs_f64();
    // The machine's own peaks at the same level and threads, after the timing (host only:
    // they are what the host loops run on).
    let peak = trainer
        .starts_with("host")
        .then(|| uqbench_engine::cpu::peak::measure(res.simd, res.threads));
    let measured = Measured {
        seconds,
        peak,
        chunk,
        final_objective,
        diverged,
        transfers,
        ops,
        threads: res.threads,
        trainer,
    };
    report(args, &shape, &measured)
}

/// What one benchmark run measured.
struct Measured {
    seconds: f64,
    /// The machine's own peaks (`cpu::peak`), for the host trainer.
    peak: Option<uqbench_engine::cpu::peak::Peak>,
    chunk: Option<usize>,
    final_objective: f64,
    diverged: usize,
    transfers: Option<trainer::Transfers>,
    ops: Option<trainer::OpCounts>,
    threads: usize,
    /// `host, LEVEL` (the CPU's host trainer at that instruction set) or `tensors`.
    trainer: String,
}

/// Prints the figures: one line, or one JSON object with `--json`.
fn report(args: &TrainBench, shape: &MlpShape, m: &Measured) -> Result<()> {
    let Measured {
        seconds,
        peak,
        chunk,
        final_objective,
        diverged,
        transfers,
        ops,
        threads,
        ref trainer,
    } = *m;
    let replica_epochs = (args.replicas * args.epochs) as f64;
    let flops = 6.0 * args.n as f64 * shape.macs_per_point() as f64 * replica_epochs;
    let gflops = flops / seconds / 1e9;
    if args.json {
        outln!(
            "{}",
            json!({
                "backend": args.backend.name(),
                "replicas": args.replicas,
                "epochs": args.epochs,
                "n": args.n,
                "seconds": seconds,
                "replica_epochs_per_s": replica_epochs / seconds,
                // The whole process's peak resident memory (VmHWM), in MiB.
                "peak_memory_mib": crate::provenance::peak_memory_mib(),
                "gflops": gflops,
                // This machine's own large product through the same register tiles and its
                // FMA-bound peak (`bench peak`), and the training's GFLOP/s over each.
                "product_gflops": peak.map(|p| p.product_gflops),
                "fma_peak_gflops": peak.and_then(|p| p.fma_gflops),
                "peak_fraction": peak.map(|p| gflops / p.product_gflops),
                "fma_fraction": peak.and_then(|p| p.fma_gflops).map(|f| gflops / f),
                "final_objective": final_objective,
                "chunk": chunk,
                "route": format!("{:?}", args.route).to_lowercase(),
                "trainer": trainer,
                "threads": threads,
                "diverged": diverged,
                // Host↔device traffic of the whole run (the engine route counts it): chunks,
                // optimiser steps per chunk summed, uploads and reads.
                "chunks": transfers.map(|t| t.chunks),
                "steps": transfers.map(|t| t.steps),
                "uploads": transfers.map(|t| t.uploads),
                "reads": transfers.map(|t| t.reads),
                // Tensor operations and the blocks (fused kernels or single operations) burn
                // ran them in, for the whole run (initialisation, training, prediction), and
                // per optimiser step of a chunk averaged over the run.
                "operations": ops.map(|o| o.operations),
                "blocks": ops.map(|o| o.blocks),
                "operations_per_step": ops.zip(transfers).map(|(o, t)| o.operations as f64 / t.steps.max(1) as f64),
            })
        );
    } else {
        outln!(
            "{} replicas × {} epochs, N = {}, backend {} ({}; {} threads, chunks of {}): {:.2} s, \
             {:.0} replica-epochs/s, {:.1} GFLOP/s{}, peak memory {:.0} MiB, mean final \
             objective {:.6}{}{}",
            args.replicas,
            args.epochs,
            args.n,
            args.backend,
            trainer,
            threads,
            chunk.map_or("auto".to_string(), |c| c.to_string()),
            seconds,
            replica_epochs / seconds,
            gflops,
            peak.map_or(String::new(), |p| super::bench_peak::fractions(gflops, &p)),
            crate::provenance::peak_memory_mib().unwrap_or(f64::NAN),
            final_objective,
            if diverged > 0 {
                format!(", {diverged} diverged")
            } else {
                String::new()
            },
            if args.route == Route::Autodiff {
                " (autodiff route: McdNet, MC dropout p = 0.1)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// The autodiff route: the same job with MC dropout (p = 0.1) on the last hidden layer and one
/// prediction pass, through burn autodiff on `McdNet` (`uqbench_engine::autodiff`). Returns
/// (replicas per chunk if asked for, mean final objective, diverged replicas).
fn autodiff(
    args: &TrainBench,
    job: &Job<'_>,
    settings: &TrainSettings,
    res: &Resources,
) -> Result<(Option<usize>, f64, usize)> {
    let settings = TrainSettings {
        dropout: Some(Arc::new(Bernoulli { p: 0.1 })),
        ..settings.clone()
    };
    let out = uqbench_engine::autodiff::train(job, &settings, res, &|_| {})?;
    let objective = out.final_objective.iter().sum::<f64>() / args.replicas as f64;
    let diverged = out.diverged.iter().filter(|d| **d).count();
    Ok((Some(out.chunk), objective, diverged))
}
