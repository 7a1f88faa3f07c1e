//! `uqbench run`: retrain every method on every repetition of every setting, store the
//! results, summarise them, and draw the figures.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use uqbench_engine::{open_device, BackendKind, Resources};

use crate::runner::{self, Event, Plan};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::{prepare_dir, RunMeta};
use uqbench_experiment::summary::ANCHOR;

/// Arguments of `uqbench run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Experiment spec (TOML), e.g. experiments/e1.toml.
    pub spec: PathBuf,
    /// Named profile of the spec: quick (tests, about a minute), cpu (about an hour on two
    /// cores), paper (the paper's settings, for a GPU).
    #[arg(long)]
    pub profile: Option<String>,
    /// SPEC is a spec that `uqbench slurm` pinned (resolved at submission): --profile only
    /// names the profile it was resolved with and is not applied again.
    #[arg(long, hide = true)]
    pub pinned: bool,
    /// Backend: flex (default), ndarray or wgpu.
    #[arg(long, default_value = "flex")]
    pub backend: BackendKind,
    /// Only these methods (comma separated, from the spec's run.methods); BLR always runs.
    #[arg(long, value_delimiter = ',')]
    pub methods: Option<Vec<String>>,
    /// Run directory (default: runs/NAME-PROFILE).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The joint predictions' batch sizes τ, comma separated (e.g. 1,10,100), replacing the
    /// spec's run.joint_tau (default 1,10); `none` turns the joint metrics off.
    #[arg(long, value_name = "LIST")]
    pub joint_tau: Option<String>,
    /// How each repetition's draws (or Gaussian joint) are stored beside its file: i8 (8 bits
    /// per value, within 1/508 of each test input's range), f32 or none, replacing the spec's
    /// run.draws (default i8).
    #[arg(long, value_name = "FORMAT")]
    pub draws: Option<String>,
    /// Continue an interrupted run in --out: finished units are kept, the rest is run.
    #[arg(long)]
    pub resume: bool,
    /// Run only shard I of N (I in 0..N) of the work, for job arrays: the shards balance the
    /// expected cost (units cut into blocks of repetitions where needed); combine the shards'
    /// directories with `uqbench merge` (`uqbench slurm` writes such a job array).
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
    /// and CI use it. Without it (or UQBENCH_ALLOW_SOFTWARE_GPU=1) a software adapter is an
    /// error.
    #[arg(long, env = "UQBENCH_ALLOW_SOFTWARE_GPU", value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_software_gpu: bool,
    #[command(flatten)]
    pub host: super::HostArgs,
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

/// `uqbench run`'s arguments, validated once: the plan (restricted to `--reps`), the run
/// directory, the resources (the device opened: a missing or refused adapter is an error before
/// anything is written) and what `run.json` records.
pub struct RunSettings {
    /// The plan.
    pub plan: Plan,
    /// The run directory.
    pub dir: PathBuf,
    /// Continue a run in `dir`.
    pub resume: bool,
    /// Shard `(i, n)` of the units.
    pub shard: Option<(usize, usize)>,
    /// Repetitions `A..B` only.
    pub reps: Option<std::ops::Range<u64>>,
    /// No progress bars.
    pub quiet: bool,
    /// Where the methods run.
    pub resources: Resources,
    /// `run.json`.
    pub meta: RunMeta,
}

impl RunSettings {
    /// Validates the arguments.
    pub fn from_args(args: &RunArgs) -> Result<RunSettings> {
        let shard = args.shard.as_deref().map(parse_shard).transpose()?;
        let (plan, reps) = plan_of(args)?;
        let dir = out_dir(args, &plan);
        let device = open_device(args.backend, args.allow_software_gpu)?;
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
        args.host.apply(&mut resources);
        let device_name = if args.backend.name() == "cuda" {
            crate::provenance::cuda_device()
        } else if args.backend.is_gpu() {
            uqbench_engine::wgpu_status()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| args.backend.name().to_string())
        } else {
            crate::provenance::cpu_model()
        };
        // A shard records its binary's checksum: merge combines only parts of one build.
        let binary_sha256 = match &args.shard {
            Some(_) => Some(crate::provenance::sha256_file(
                &std::env::current_exe().context("the path of this uqbench binary")?,
            )?),
            None => None,
        };
        let meta = RunMeta {
            binary_sha256,
            shard: args.shard.clone(),
            reps: args.reps.clone(),
            host_loops: (!args.backend.is_gpu()).then_some(resources.host_loops),
            simd: (!args.backend.is_gpu() && resources.host_loops)
                .then(|| format!("{:?}", resources.simd).to_lowercase()),
            ..crate::provenance::run_meta(
                args.profile.clone(),
                args.backend.name(),
                device_name,
                resources.threads,
            )
        };
        Ok(RunSettings {
            plan,
            dir,
            resume: args.resume,
            shard,
            reps,
            quiet: args.quiet,
            resources,
            meta,
        })
    }
}

/// `--joint-tau`: `none`, or batch sizes 1..=MAX_JOINT_TAU.
fn parse_taus(list: &str) -> Result<Vec<usize>> {
    if list.trim() == "none" {
        return Ok(Vec::new());
    }
    let max = uqbench_experiment::spec::MAX_JOINT_TAU;
    list.split(',')
        .map(|t| match t.trim().parse::<usize>() {
            Ok(v) if (1..=max).contains(&v) => Ok(v),
            _ => anyhow::bail!(
                "--joint-tau {list}: `{t}` is not a batch size; valid: `none` or comma-separated \
                 integers 1 to {max}"
            ),
        })
        .collect()
}

/// The plan of `uqbench run`'s arguments (restricted to `--reps`, its spec listing the methods
/// actually run) and the repetitions asked for, without opening a device.
pub fn plan_of(args: &RunArgs) -> Result<(Plan, Option<std::ops::Range<u64>>)> {
    let profile = args.profile.as_deref().filter(|_| !args.pinned);
    let mut spec = ExperimentSpec::load_profile(&args.spec, profile)?;
    if let (Some(list), Some(run)) = (&args.joint_tau, spec.run.as_mut()) {
        run.joint_tau = parse_taus(list)?;
    }
    if let (Some(format), Some(run)) = (&args.draws, spec.run.as_mut()) {
        run.draws = uqbench_experiment::draws::DrawFormat::parse(format)?;
    }
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
    // The tables kept: the methods run and, transitively, the bases of post-hoc ones.
    let keep = plan.spec.tables_used(&plan.methods);
    plan.spec.methods.retain(|k, _| keep.contains(k));
    Ok((plan, reps))
}

/// The run directory: `--out`, else `runs/NAME-PROFILE`.
pub fn out_dir(args: &RunArgs, plan: &Plan) -> PathBuf {
    args.out.clone().unwrap_or_else(|| {
        PathBuf::from("runs").join(match &args.profile {
            Some(p) => format!("{}-{p}", plan.spec.name),
            None => plan.spec.name.clone(),
        })
    })
}

/// Runs `uqbench run`.
pub fn run(args: &RunArgs) -> Result<()> {
    // A spec of the decision track alone (a [decision] section and no [run], after its
    // profiles: a profile may add a [run]) runs it (`uqbench decide`). A pinned spec is
    // resolved already.
    let spec = if args.pinned {
        ExperimentSpec::load(&args.spec)?
    } else {
        ExperimentSpec::load_profile(&args.spec, args.profile.as_deref())?
    };
    if spec.run.is_none() && spec.decision.is_some() {
        return super::decide::run(&super::decide::DecideArgs {
            spec: args.spec.clone(),
            profile: args.profile.clone(),
            out: args.out.clone(),
            quiet: args.quiet,
            backend: args.backend,
            allow_software_gpu: args.allow_software_gpu,
        });
    }
    let s = RunSettings::from_args(args)?;
    let (plan, dir) = (&s.plan, &s.dir);
    // Every method against every setting's problem before the first training.
    runner::check_methods(plan)?;
    prepare_dir(dir, &plan.spec.resolved_toml()?, s.resume)?;
    s.meta.write(dir)?;
    let todo = runner::schedule(plan, dir, s.shard, s.resources.backend.is_gpu())?;
    eprintln!(
        "{}: {} settings × {} methods × {} repetitions, {} of {} work units to run{}{} → {}",
        plan.spec.name,
        plan.settings.len(),
        plan.methods.len(),
        plan.repetitions(),
        todo.len(),
        plan.units.len(),
        s.shard
            .map(|(i, n)| format!(" (shard {i}/{n})"))
            .unwrap_or_default(),
        s.reps
            .as_ref()
            .map(|r| format!(" (repetitions {}..{})", r.start, r.end))
            .unwrap_or_default(),
        dir.display()
    );
    let display = ProgressDisplay::new(s.quiet, plan.repetitions());
    runner::execute(plan, dir, &todo, &s.resources.compute(), &|e| {
        display.show(e)
    })?;
    // A part of the run: "shard I/N", "repetitions A..B" or "shard I/N of repetitions A..B".
    let part: Vec<String> = [
        s.shard.map(|(i, n)| format!("shard {i}/{n}")),
        (s.reps.as_ref()).map(|r| format!("repetitions {}..{}", r.start, r.end)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !part.is_empty() {
        eprintln!(
            "{} finished in {}; combine the parts with `uqbench merge DIR… --out DIR`",
            part.join(" of "),
            dir.display()
        );
        return Ok(());
    }
    runner::finish(dir, plan, &s.meta)
}

/// Progress bars per (setting, method), or one line per finished unit when quiet or not on a
/// terminal.
struct ProgressDisplay {
    multi: MultiProgress,
    style: ProgressStyle,
    lines: bool,
    repetitions: u64,
    bars: Mutex<BTreeMap<(usize, String), (ProgressBar, u64)>>,
}

impl ProgressDisplay {
    fn new(quiet: bool, repetitions: u64) -> ProgressDisplay {
        let multi = MultiProgress::with_draw_target(if quiet {
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
        ProgressDisplay {
            lines: quiet || multi.is_hidden(),
            multi,
            style,
            repetitions,
            bars: Mutex::new(BTreeMap::new()),
        }
    }

    fn show(&self, event: Event<'_>) {
        let mut bars = self.bars.lock().expect("progress lock");
        match event {
            Event::Started {
                unit,
                label,
                done_before,
            } => {
                let (bar, start) = bars
                    .entry((unit.setting, unit.method.clone()))
                    .or_insert_with(|| {
                        let bar = self.multi.add(ProgressBar::new(self.repetitions));
                        bar.set_style(self.style.clone());
                        bar.set_prefix(format!(
                            "{} {}",
                            if label.is_empty() { "-" } else { label },
                            unit.method
                        ));
                        // Count the repetitions finished before (a resumed run).
                        bar.set_position(done_before);
                        bar.reset_eta();
                        (bar, done_before)
                    });
                *start = bar.position();
            }
            Event::Progress { unit, finished } => {
                if let Some((bar, start)) = bars.get(&(unit.setting, unit.method.clone())) {
                    bar.set_position(start + finished);
                }
            }
            Event::Finished {
                unit,
                label,
                seconds,
            } => {
                if let Some((bar, start)) = bars.get(&(unit.setting, unit.method.clone())) {
                    bar.set_position(start + unit.reps.end - unit.reps.start);
                    if bar.position() >= self.repetitions {
                        bar.finish();
                    }
                }
                if self.lines {
                    eprintln!(
                        "done {} {} repetitions {}..{} in {seconds:.1} s",
                        if label.is_empty() { "-" } else { label },
                        unit.method,
                        unit.reps.start,
                        unit.reps.end,
                    );
                }
            }
        }
    }
}
