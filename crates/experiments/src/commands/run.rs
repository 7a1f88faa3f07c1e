//! `uqbench run`: retrain every method on every repetition of every setting, store the
//! results, summarise them, and draw the figures.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use uqbench_models::{allow_software_gpu, open_device, BackendKind, Resources};

use crate::registry;
use crate::runner::{self, Plan, Resolved};
use uqbench_eval::spec::ExperimentSpec;
use uqbench_eval::store::{prepare_dir, RunMeta};
use uqbench_eval::summary::ANCHOR;

/// Arguments of `uqbench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Experiment spec (TOML), e.g. experiments/e1.toml.
    pub spec: PathBuf,
    /// Named profile of the spec: quick (tests, about a minute), cpu (about an hour on two
    /// cores), paper (the paper's settings, for a GPU).
    #[arg(long)]
    pub profile: Option<String>,
    /// Backend: flex (default), ndarray or wgpu.
    #[arg(long, default_value = "flex")]
    pub backend: BackendKind,
    /// Only these methods (comma separated, from the spec's run.methods); BLR always runs.
    #[arg(long, value_delimiter = ',')]
    pub methods: Option<Vec<String>>,
    /// Run directory (default: runs/NAME-PROFILE).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue an interrupted run in --out: finished units are kept, the rest is run.
    #[arg(long)]
    pub resume: bool,
    /// Run only shard I of N (I in 0..N) of the work units, for job arrays; combine the
    /// shards' directories with `uqbench merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Run only repetitions A..B (half-open, 0-based) of every setting and method, e.g.
    /// `--reps 0..25`; combine runs of disjoint repetitions with `uqbench merge`.
    #[arg(long, value_name = "A..B")]
    pub reps: Option<String>,
    /// No progress bars: one line per finished work unit.
    #[arg(long)]
    pub quiet: bool,
    /// Worker threads for training (default: all cores on the CPU).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Memory budget per training chunk, in MiB (default: 2048 on the CPU; on wgpu, half of
    /// --device-memory-mb when given, else 2048).
    #[arg(long)]
    pub memory_mb: Option<usize>,
    /// The GPU's memory in MiB, for the chunk plan on wgpu (burn does not report it): the
    /// budget defaults to half of it.
    #[arg(long)]
    pub device_memory_mb: Option<usize>,
    /// Replicas per training chunk (default: from the memory plan).
    #[arg(long)]
    pub chunk: Option<usize>,
    /// Let --backend wgpu run on a software adapter (lavapipe, llvmpipe, SwiftShader); tests
    /// and CI use it. Without it a software adapter is an error.
    #[arg(long)]
    pub allow_software_gpu: bool,
}

fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let parsed = s.split_once('/').and_then(|(i, n)| {
        Some((
            i.trim().parse::<usize>().ok()?,
            n.trim().parse::<usize>().ok()?,
        ))
    });
    match parsed {
        Some((i, n)) if n >= 1 && i < n => Ok((i, n)),
        _ => bail!("--shard {s}: expected I/N with 0 ≤ I < N, e.g. --shard 0/4"),
    }
}

/// Parses `--reps A..B` (half-open, 0-based) against the spec's `total` repetitions.
pub fn parse_reps(s: &str, total: u64) -> Result<std::ops::Range<u64>> {
    let parsed = s
        .split_once("..")
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)));
    match parsed {
        Some((a, b)) if a < b && b <= total => Ok(a..b),
        _ => bail!(
            "--reps {s}: expected A..B with 0 ≤ A < B ≤ {total} (the spec's run.repetitions), \
             e.g. --reps 0..{}",
            total.clamp(1, 10)
        ),
    }
}

/// Runs `uqbench run`.
pub fn run(args: &RunArgs) -> Result<()> {
    let spec = ExperimentSpec::load_profile(&args.spec, args.profile.as_deref())?;
    let shard = args.shard.as_deref().map(parse_shard).transpose()?;
    let mut plan = Plan::new(spec, args.methods.as_deref())?;
    let reps = args
        .reps
        .as_deref()
        .map(|r| parse_reps(r, plan.repetitions()))
        .transpose()?;
    if let Some(r) = &reps {
        plan.restrict(r.clone());
    }
    // The recorded spec lists the methods actually run.
    if let Some(run) = plan.spec.run.as_mut() {
        run.methods = plan
            .methods
            .iter()
            .filter(|m| *m != ANCHOR)
            .cloned()
            .collect();
    }
    plan.spec.methods.retain(|k, _| plan.methods.contains(k));
    let dir = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(match &args.profile {
            Some(p) => format!("{}-{p}", plan.spec.name),
            None => plan.spec.name.clone(),
        })
    });
    // Open the device before touching the run directory: a missing or refused adapter leaves
    // nothing behind.
    if args.allow_software_gpu {
        allow_software_gpu();
    }
    let device = open_device(args.backend)?;
    prepare_dir(&dir, &plan.spec.resolved_toml()?, args.resume)?;
    let mut resources = Resources::new(args.backend, device);
    if let Some(t) = args.threads {
        resources.threads = t.max(1);
    }
    if let Some(mb) = args.device_memory_mb {
        resources = resources.with_device_memory(mb << 20);
    }
    if let Some(mb) = args.memory_mb {
        resources.memory_budget = mb << 20;
    }
    resources.chunk = args.chunk;
    let device_name = if args.backend.is_gpu() {
        uqbench_models::wgpu_status()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| args.backend.name().to_string())
    } else {
        crate::provenance::cpu_model()
    };
    let compute = resources.compute();
    let meta = RunMeta {
        shard: args.shard.clone(),
        reps: args.reps.clone(),
        ..crate::provenance::run_meta(
            args.profile.clone(),
            args.backend.name(),
            device_name,
            resources.threads,
        )
    };
    meta.write(&dir)?;

    let todo: Vec<&runner::Unit> = plan
        .units
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|(s, n)| i % n == s))
        .map(|(_, u)| u)
        .filter(|u| !runner::unit_done(&dir, &plan, u))
        .collect();
    // On a GPU, small jobs (the dropout methods: one replica per repetition) are merged so that
    // a chunk can hold as many replicas as memory allows.
    let todo: Vec<runner::Unit> = if args.backend.is_gpu() {
        let per_rep = |method: &str| -> usize {
            let setting = &plan.settings[0];
            plan.spec
                .method_table(method, setting)
                .ok()
                .and_then(|t| registry::build(method, t.as_ref()).ok())
                .map_or(1, |m| m.replicas_per_repetition())
        };
        runner::merge_for_gpu(&todo, &per_rep, runner::GPU_MIN_REPLICAS)
    } else {
        todo.into_iter().cloned().collect()
    };
    let k = plan.repetitions();
    let multi = MultiProgress::with_draw_target(if args.quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    });
    let style = ProgressStyle::with_template(
        "{prefix:>28} [{bar:30}] {pos:>4}/{len} reps {elapsed:>4} ETA {eta:>4} {rate}",
    )
    .expect("a valid template")
    .with_key(
        "rate",
        |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.2} reps/s", state.per_sec());
        },
    )
    .progress_chars("=> ");
    let show_lines = args.quiet || multi.is_hidden();
    eprintln!(
        "{}: {} settings × {} methods × {k} repetitions, {} of {} work units to run{}{} → {}",
        plan.spec.name,
        plan.settings.len(),
        plan.methods.len(),
        todo.len(),
        plan.units.len(),
        shard
            .map(|(i, n)| format!(" (shard {i}/{n})"))
            .unwrap_or_default(),
        reps.as_ref()
            .map(|r| format!(" (repetitions {}..{})", r.start, r.end))
            .unwrap_or_default(),
        dir.display()
    );

    let mut resolved: Vec<Option<Resolved>> = (0..plan.settings.len()).map(|_| None).collect();
    let mut bars: std::collections::BTreeMap<(usize, String), ProgressBar> = Default::default();
    for unit in &todo {
        if resolved[unit.setting].is_none() {
            resolved[unit.setting] = Some(Resolved::new(&plan.spec, &plan.settings[unit.setting])?);
        }
        let label = plan.settings[unit.setting].label();
        let bar = bars
            .entry((unit.setting, unit.method.clone()))
            .or_insert_with(|| {
                let bar = multi.add(ProgressBar::new(k));
                bar.set_style(style.clone());
                bar.set_prefix(format!(
                    "{} {}",
                    if label.is_empty() { "-" } else { &label },
                    unit.method
                ));
                // Count the repetitions finished before (a resumed run).
                let done = (0..k)
                    .filter(|&r| {
                        uqbench_eval::store::rep_path(
                            &dir,
                            &plan.settings[unit.setting],
                            &unit.method,
                            r,
                        )
                        .is_file()
                    })
                    .count();
                bar.set_position(done as u64);
                bar.reset_eta();
                bar
            })
            .clone();
        let start_pos = bar.position();
        let len = unit.reps.end - unit.reps.start;
        let started = Instant::now();
        let last = Mutex::new(0u64);
        runner::run_unit(
            &dir,
            &plan,
            unit,
            resolved[unit.setting].as_ref().expect("resolved above"),
            &compute,
            &|f| {
                let step = (f * len as f64).floor() as u64;
                let mut last = last.lock().expect("progress lock");
                if step > *last {
                    *last = step;
                    bar.set_position(start_pos + step);
                }
            },
        )?;
        bar.set_position(start_pos + len);
        if bar.position() >= k {
            bar.finish();
        }
        if show_lines {
            eprintln!(
                "done {} {} repetitions {}..{} in {:.1} s",
                if label.is_empty() { "-" } else { &label },
                unit.method,
                unit.reps.start,
                unit.reps.end,
                started.elapsed().as_secs_f64()
            );
        }
    }
    if shard.is_some() || reps.is_some() {
        eprintln!(
            "{} finished in {}; combine the parts with `uqbench merge DIR… --out DIR`",
            match (&args.shard, &args.reps) {
                (Some(s), Some(r)) => format!("shard {s} of repetitions {r}"),
                (Some(s), None) => format!("shard {s}"),
                (None, Some(r)) => format!("repetitions {r}"),
                (None, None) => unreachable!("checked above"),
            },
            dir.display()
        );
        return Ok(());
    }
    runner::finish(&dir, &plan, &meta)
}
