//! `uqbench slurm`: write (and optionally submit) a Slurm job array that runs one experiment as
//! N balanced shards, and the merge job that combines them into the run directory.
//!
//! Layout of `DIR` (the run's `--out`):
//! - `DIR/slurm/run.sbatch`: the array; task `I` runs `uqbench run … --shard I/N --resume
//!   --quiet --out DIR/slurm/parts/task-I`, so a requeued or resubmitted task keeps what it
//!   finished;
//! - `DIR/slurm/merge.sbatch`: `uqbench merge DIR/slurm/parts/task-* --out DIR` (merge checks
//!   completeness, then summarises, draws the figures and writes the report into `DIR`);
//! - `DIR/slurm/slurm.json`: the number of tasks, the pinned binary's checksum and every
//!   submitted job id (resubmissions included), read by `uqbench status DIR`;
//! - `DIR/slurm/bin/uqbench`: a copy of this binary, stripped of its symbols (written once per
//!   run, its SHA-256 in slurm.json). Both scripts call the copy, so a rebuild while jobs wait
//!   changes nothing, and every part records its checksum (merge refuses parts of different
//!   builds);
//! - `DIR/slurm/spec.resolved.toml`: the spec as resolved at submission (profile, --methods,
//!   --joint-tau, --draws applied), with the data files it names copied into `DIR/slurm/data/`.
//!   Tasks read it (`uqbench run … --pinned`), so an edit of the spec file while jobs wait
//!   changes nothing and the parts stay mergeable;
//! - `DIR/slurm/logs/`: one log per task and one for the merge.
//!
//! Both scripts run in the directory `uqbench slurm` was called from (`#SBATCH --chdir`), so
//! the spec's relative paths mean what they meant here.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use super::run::{out_dir, plan_of, RunArgs};
use super::slurm_queue::{max_array_size, sbatch};
use crate::runner::shards;
use uqbench_experiment::store::SPEC_FILE;
use uqbench_experiment::store::{prepare_dir, write_atomic};

/// Arguments of `uqbench slurm`.
#[derive(Debug, Args)]
pub struct SlurmArgs {
    /// The run: spec, --profile, --backend, --methods, --out, --threads, memory and chunk
    /// options, as for `uqbench run` (--shard and --reps are chosen here, not given).
    #[command(flatten)]
    pub run: RunArgs,
    /// Number of array tasks (shards of balanced expected cost).
    #[arg(long)]
    pub tasks: usize,
    /// Slurm partition (`#SBATCH --partition`); default: the cluster's.
    #[arg(long)]
    pub partition: Option<String>,
    /// Wall-clock limit per task (`#SBATCH --time`, e.g. 02:00:00); default: the partition's.
    #[arg(long)]
    pub time: Option<String>,
    /// CPU cores per task (`#SBATCH --cpus-per-task`); also the task's --threads unless given.
    #[arg(long)]
    pub cpus_per_task: Option<usize>,
    /// GPUs per task (`#SBATCH --gpus-per-task`), for --backend wgpu or cuda (never the merge).
    #[arg(long)]
    pub gpus_per_task: Option<usize>,
    /// Account to charge (`#SBATCH --account`), both jobs.
    #[arg(long)]
    pub account: Option<String>,
    /// Quality of service (`#SBATCH --qos`), both jobs.
    #[arg(long)]
    pub qos: Option<String>,
    /// Memory per task's node (`#SBATCH --mem`, e.g. 8G), the array's tasks.
    #[arg(long)]
    pub mem: Option<String>,
    /// Node features the tasks need (`#SBATCH --constraint`, e.g. "a100|h100").
    #[arg(long)]
    pub constraint: Option<String>,
    /// Generic resources per task (`#SBATCH --gres`, e.g. gpu:a100:1), the array's tasks.
    #[arg(long)]
    pub gres: Option<String>,
    /// At most K tasks of the array at once (`--array=0-N%K`).
    #[arg(long, value_name = "K")]
    pub array_throttle: Option<usize>,
    /// One more `#SBATCH` option for the array's tasks (repeatable), e.g.
    /// --sbatch-arg=--exclusive; the merge job takes its own through --merge-sbatch-arg.
    #[arg(long = "sbatch-arg", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
    /// One more `#SBATCH` option for the merge job (repeatable), e.g.
    /// --merge-sbatch-arg=--mail-type=END.
    #[arg(
        long = "merge-sbatch-arg",
        value_name = "OPTION",
        allow_hyphen_values = true
    )]
    pub merge_sbatch_args: Vec<String>,
    /// A shell line both scripts run before uqbench (repeatable), after `set -euo pipefail`
    /// (a failing line stops the job), e.g. --setup "module load cuda".
    #[arg(long = "setup", value_name = "LINE")]
    pub setup: Vec<String>,
    /// Memory of the merge job's node (`#SBATCH --mem`, e.g. 4G); default: the partition's.
    #[arg(long)]
    pub merge_mem: Option<String>,
    /// Wall-clock limit of the merge job (default: --time).
    #[arg(long)]
    pub merge_time: Option<String>,
    /// Partition of the merge job (default: --partition).
    #[arg(long)]
    pub merge_partition: Option<String>,
    /// Submit the array and the merge job (it waits for every task: afterok) with sbatch.
    #[arg(long)]
    pub submit: bool,
}

#[path = "slurm_pin.rs"]
mod pin;

/// `DIR/slurm/slurm.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SlurmMeta {
    /// Array tasks, i.e. shards.
    pub tasks: usize,
    /// The spec's profile (the merged run.json records it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The array's job id, once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job: Option<String>,
    /// The merge job's id, once submitted (the latest, after a resubmission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_job: Option<String>,
    /// `--array-throttle`, kept for resubmissions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_throttle: Option<usize>,
    /// The SHA-256 of the pinned binary `slurm/bin/uqbench`.
    #[serde(default)]
    pub binary_sha256: String,
    /// Where the pinned binary was copied from.
    #[serde(default)]
    pub binary_source: String,
    /// The SHA-256 of the binary it was copied from (the pinned copy is stripped of its
    /// symbols, so the two differ): `--resume` from that binary or from the pinned one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub binary_source_sha256: String,
    /// The spec the tasks and the merge read: resolved at submission (profile, --methods,
    /// --joint-tau and --draws applied) and copied with the data files it names, so that an
    /// edit of the spec after submission changes nothing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub spec: String,
    /// Each `uqbench status --resubmit`: the tasks, and the array and merge jobs it submitted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resubmissions: Vec<Resubmission>,
}

/// One resubmission of some of the array's tasks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resubmission {
    /// The array tasks resubmitted.
    pub tasks: Vec<usize>,
    /// Their new array job.
    pub array_job: String,
    /// The new merge job.
    pub merge_job: String,
}

impl SlurmMeta {
    /// Every array job of this run, the first submission first.
    pub fn array_jobs(&self) -> Vec<String> {
        self.array_job
            .iter()
            .cloned()
            .chain(self.resubmissions.iter().map(|r| r.array_job.clone()))
            .collect()
    }
}

/// The files of a Slurm run directory.
pub struct SlurmDir {
    /// `DIR/slurm`.
    pub root: PathBuf,
}

impl SlurmDir {
    /// The Slurm files of run directory `dir`.
    pub fn of(dir: &Path) -> SlurmDir {
        SlurmDir {
            root: dir.join("slurm"),
        }
    }
    /// The array script.
    pub fn run_script(&self) -> PathBuf {
        self.root.join("run.sbatch")
    }
    /// The merge script.
    pub fn merge_script(&self) -> PathBuf {
        self.root.join("merge.sbatch")
    }
    /// `slurm.json`.
    pub fn meta_path(&self) -> PathBuf {
        self.root.join("slurm.json")
    }
    /// The parts' parent directory.
    pub fn parts(&self) -> PathBuf {
        self.root.join("parts")
    }
    /// Task `i`'s run directory.
    pub fn part(&self, i: usize) -> PathBuf {
        self.parts().join(format!("task-{i}"))
    }
    /// The pinned binary both scripts call.
    pub fn spec(&self) -> PathBuf {
        self.root.join(SPEC_FILE)
    }

    pub fn binary(&self) -> PathBuf {
        self.root.join("bin").join("uqbench")
    }
    /// `slurm.json`, when this is a Slurm run directory.
    pub fn meta(&self) -> Option<SlurmMeta> {
        let text = std::fs::read_to_string(self.meta_path()).ok()?;
        serde_json::from_str(&text).ok()
    }
    /// Writes `slurm.json` atomically.
    pub fn write_meta(&self, meta: &SlurmMeta) -> Result<()> {
        write_atomic(
            &self.meta_path(),
            serde_json::to_string_pretty(meta)?.as_bytes(),
        )?;
        Ok(())
    }
}

/// `s` quoted for bash (single quotes; a single quote inside becomes `'\''`).
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A path as UTF-8 text.
pub fn path_str(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .with_context(|| format!("{} is not valid UTF-8", p.display()))
}

/// A path for an `#SBATCH` line, which sbatch splits at whitespace.
fn directive_path(p: &Path, what: &str) -> Result<String> {
    let s = path_str(p)?;
    if s.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'')
    {
        bail!(
            "{what} {s}: Slurm's #SBATCH lines cannot hold whitespace or quotes; choose a \
             path without them"
        );
    }
    Ok(s)
}

/// The `uqbench run` arguments every task shares (everything but --out and --shard). The spec
/// is the one pinned at submission (`slurm/spec.resolved.toml`, `--pinned`): the profile,
/// --methods, --joint-tau and --draws are in it already; --profile only names it.
fn run_arguments(args: &SlurmArgs, pinned: &Path) -> Result<Vec<String>> {
    let r = &args.run;
    let mut out = vec!["run".to_string(), path_str(pinned)?, "--pinned".into()];
    if let Some(p) = &r.profile {
        out.extend(["--profile".into(), p.clone()]);
    }
    out.extend(["--backend".into(), r.backend.name().to_string()]);
    if let Some(t) = r.threads.or(args.cpus_per_task) {
        out.extend(["--threads".into(), t.to_string()]);
    }
    for (flag, v) in [
        ("--memory-mb", r.memory_mb),
        ("--device-memory-mb", r.device_memory_mb),
        ("--chunk", r.chunk),
    ] {
        if let Some(v) = v {
            out.extend([flag.into(), v.to_string()]);
        }
    }
    if r.allow_software_gpu {
        out.push("--allow-software-gpu".into());
    }
    Ok(out)
}

/// A value for an `#SBATCH` line (which sbatch splits at whitespace) or a script line: one
/// line, and for a directive no whitespace.
fn checked(flag: &str, v: &str, directive: bool) -> Result<String> {
    if v.is_empty() || v.contains(['\n', '\r']) || (directive && v.contains(char::is_whitespace)) {
        bail!(
            "{flag} {v:?}: {}",
            if directive {
                "an #SBATCH value must be one word, without whitespace"
            } else {
                "a setup line must be one non-empty line"
            }
        );
    }
    Ok(v.to_string())
}

/// The `#SBATCH` lines of one job: `--chdir`, the partition and time given (the merge's own
/// where set), --account, --qos, and the job's own options: --sbatch-arg for the array's
/// tasks, --merge-mem and --merge-sbatch-arg for the merge.
fn common_directives(args: &SlurmArgs, cwd: &str, merge: bool) -> Result<Vec<String>> {
    let mut lines = vec![format!("#SBATCH --chdir={cwd}")];
    let pick = |own: &Option<String>, task: &Option<String>| {
        if merge {
            own.clone().or(task.clone())
        } else {
            task.clone()
        }
    };
    let (partition, time) = (
        pick(&args.merge_partition, &args.partition),
        pick(&args.merge_time, &args.time),
    );
    for (flag, v) in [
        ("--partition", &partition),
        ("--time", &time),
        ("--account", &args.account),
        ("--qos", &args.qos),
    ] {
        if let Some(v) = v {
            lines.push(format!("#SBATCH {flag}={}", checked(flag, v, true)?));
        }
    }
    let (flag, extra) = if merge {
        ("--merge-sbatch-arg", &args.merge_sbatch_args)
    } else {
        ("--sbatch-arg", &args.sbatch_args)
    };
    if let (true, Some(m)) = (merge, &args.merge_mem) {
        lines.push(format!(
            "#SBATCH --mem={}",
            checked("--merge-mem", m, true)?
        ));
    }
    for a in extra {
        let a = checked(flag, a, true)?;
        if !a.starts_with('-') {
            bail!("{flag} {a}: valid: an sbatch option such as --mail-type=END");
        }
        lines.push(format!("#SBATCH {a}"));
    }
    Ok(lines)
}

/// `set -euo pipefail`, then the `--setup` lines: a failing `module load` stops the job
/// instead of running uqbench without what it loads.
fn setup_lines(args: &SlurmArgs) -> Result<Vec<String>> {
    let mut out = vec!["set -euo pipefail".to_string()];
    for l in &args.setup {
        out.push(checked("--setup", l, false)?);
    }
    Ok(out)
}

/// The two scripts' text.
fn scripts(args: &SlurmArgs, name: &str, dir: &Path) -> Result<(String, String)> {
    let cwd = std::env::current_dir().context("the current directory")?;
    let cwd = directive_path(&cwd, "the current directory")?;
    let sd = SlurmDir::of(dir);
    let exe = quote(&path_str(&sd.binary())?);
    let logs = directive_path(&sd.root.join("logs"), "--out")?;
    let n = args.tasks;
    let version = env!("CARGO_PKG_VERSION");

    let mut run = vec![
        "#!/bin/bash".to_string(),
        format!("#SBATCH --job-name=uqbench-{name}"),
        format!(
            "#SBATCH --array=0-{}{}",
            n - 1,
            args.array_throttle
                .map(|k| format!("%{k}"))
                .unwrap_or_default()
        ),
        format!("#SBATCH --output={logs}/task-%a.log"),
        "#SBATCH --ntasks=1".into(),
        "#SBATCH --requeue".into(),
        "#SBATCH --open-mode=append".into(),
    ];
    run.extend(common_directives(args, &cwd, false)?);
    if let Some(c) = args.cpus_per_task {
        run.push(format!("#SBATCH --cpus-per-task={c}"));
    }
    if let Some(g) = args.gpus_per_task {
        run.push(format!("#SBATCH --gpus-per-task={g}"));
    }
    for (flag, v) in [
        ("--mem", &args.mem),
        ("--constraint", &args.constraint),
        ("--gres", &args.gres),
    ] {
        if let Some(v) = v {
            run.push(format!("#SBATCH {flag}={}", checked(flag, v, true)?));
        }
    }
    let task_args: Vec<String> = run_arguments(args, &sd.spec())?
        .iter()
        .map(|a| quote(a))
        .collect();
    run.extend([
        String::new(),
        format!("# Written by `uqbench slurm` (uqbench {version}). Task I runs shard I/{n} of the"),
        "# work (balanced by expected cost) into parts/task-I; --resume keeps what an earlier"
            .into(),
        "# attempt of the task finished, so a requeued or resubmitted task loses nothing.".into(),
        "# Rerun failed tasks: `uqbench status DIR --resubmit` (it asks the scheduler which)."
            .into(),
        "# It calls the binary pinned in slurm/bin/ and reads the spec pinned in slurm/ (resolved"
            .into(),
        "# at submission): a rebuild or an edit of the spec elsewhere changes nothing.".into(),
    ]);
    run.extend(setup_lines(args)?);
    run.extend([
        format!(
            "exec {exe} {} --out {}\"/task-$SLURM_ARRAY_TASK_ID\" --shard \"$SLURM_ARRAY_TASK_ID/{n}\" --resume --quiet",
            task_args.join(" "),
            quote(&path_str(&sd.parts())?),
        ),
        String::new(),
    ]);

    let mut merge = vec![
        "#!/bin/bash".to_string(),
        format!("#SBATCH --job-name=uqbench-{name}-merge"),
        format!("#SBATCH --output={logs}/merge.log"),
        "#SBATCH --ntasks=1".into(),
        "#SBATCH --open-mode=append".into(),
        // A merge whose tasks can no longer all succeed leaves the queue instead of waiting.
        "#SBATCH --kill-on-invalid-dep=yes".into(),
    ];
    merge.extend(common_directives(args, &cwd, true)?);
    merge.extend([
        String::new(),
        format!("# Written by `uqbench slurm` (uqbench {version}). Combines the {n} tasks' parts"),
        "# into the run directory (merge checks that every repetition is there exactly once),"
            .into(),
        "# then writes the summaries, figures and report, as `uqbench run` would.".into(),
    ]);
    merge.extend(setup_lines(args)?);
    merge.extend([
        format!(
            "exec {exe} merge {}/task-* --out {}",
            quote(&path_str(&sd.parts())?),
            quote(&path_str(dir)?),
        ),
        String::new(),
    ]);
    Ok((run.join("\n"), merge.join("\n")))
}

/// Writes a script, executable.
fn write_script(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, text.as_bytes())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// Checks what the cluster and an existing directory allow: `--tasks` within MaxArraySize
/// (where `scontrol` answers) and, with --resume, the same --tasks as before.
fn check_tasks(args: &SlurmArgs, sd: &SlurmDir) -> Result<()> {
    if let Some(max) = max_array_size() {
        if args.tasks > max {
            bail!(
                "--tasks {}: this cluster's MaxArraySize is {max} (array indices 0..{}); use \
                 at most --tasks {max}",
                args.tasks,
                max.saturating_sub(1)
            );
        }
    }
    if let (true, Some(meta)) = (args.run.resume, sd.meta()) {
        if meta.tasks != args.tasks {
            bail!(
                "--resume with --tasks {}: {} was split into {} tasks (its parts hold the work \
                 of those shards); pass --tasks {} to continue it, or start a new --out",
                args.tasks,
                sd.root.parent().unwrap_or(&sd.root).display(),
                meta.tasks,
                meta.tasks
            );
        }
    }
    Ok(())
}

/// Runs `uqbench slurm`.
pub fn run(args: &SlurmArgs) -> Result<()> {
    if args.tasks == 0 {
        bail!("--tasks 0: a job array needs at least one task");
    }
    if let Some(s) = &args.run.shard {
        bail!("--shard {s}: uqbench slurm chooses the shards (one per array task); drop --shard");
    }
    if let Some(r) = &args.run.reps {
        bail!(
            "--reps {r}: uqbench slurm runs every repetition (the merge checks completeness); \
             run a subset with `uqbench run --reps` instead"
        );
    }
    if args.gpus_per_task.is_some_and(|g| g > 0) && !args.run.backend.is_gpu() {
        bail!(
            "--gpus-per-task with --backend {}: the tasks would not use the GPUs; pass \
             --backend wgpu (or cuda in a build with the cuda feature)",
            args.run.backend.name()
        );
    }
    let (plan, _) = plan_of(&args.run)?;
    // A configuration error fails the submission, not every task of the array.
    crate::runner::check_methods(&plan)?;
    let cwd = std::env::current_dir()?;
    let dir = cwd.join(out_dir(&args.run, &plan));
    let split = shards::balanced(&plan, args.tasks)?;
    let empty = split.iter().filter(|s| s.is_empty()).count();
    if empty > 0 {
        bail!(
            "--tasks {}: the plan has only {} blocks of work, so {empty} tasks would get none; \
             use at most --tasks {}",
            args.tasks,
            args.tasks - empty,
            args.tasks - empty
        );
    }

    if args.array_throttle == Some(0) {
        bail!("--array-throttle 0: valid: at most K ≥ 1 tasks at once");
    }
    let sd = SlurmDir::of(&dir);
    check_tasks(args, &sd)?;
    // The scripts first (they check every option), then the directory.
    let (run_text, merge_text) = scripts(args, &plan.spec.name, &dir)?;
    let pinned = pin::spec_text(&plan.spec, &sd)?;
    prepare_dir(&dir, &pinned.text, args.run.resume)?;
    std::fs::create_dir_all(sd.root.join("logs"))
        .with_context(|| format!("cannot create {}", sd.root.join("logs").display()))?;
    std::fs::create_dir_all(sd.parts())?;
    pin::write_spec(&pinned, &sd)?;
    // A resumed directory keeps its job history.
    let old = sd.meta().filter(|_| args.run.resume);
    let binary = pin::binary(&sd, old.as_ref())?;
    write_script(&sd.run_script(), &run_text)?;
    write_script(&sd.merge_script(), &merge_text)?;
    let mut meta = SlurmMeta {
        tasks: args.tasks,
        profile: args.run.profile.clone(),
        array_throttle: args.array_throttle,
        binary_sha256: binary.sha256,
        binary_source: binary.source,
        binary_source_sha256: binary.source_sha256,
        spec: path_str(&sd.spec())?,
        ..old.unwrap_or_default()
    };
    sd.write_meta(&meta)?;

    let loads = shards::loads(&plan, &split)?;
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;
    let max = loads.iter().cloned().fold(0.0, f64::max);
    eprintln!(
        "{}: {} work units in {} tasks of balanced expected cost (largest task {:.2}× the mean) → {}",
        plan.spec.name,
        split.iter().map(Vec::len).sum::<usize>(),
        args.tasks,
        if mean > 0.0 { max / mean } else { 1.0 },
        dir.display()
    );
    let run_script = path_str(&sd.run_script())?;
    let merge_script = path_str(&sd.merge_script())?;
    if !args.submit {
        outln!("wrote {run_script} and {merge_script}; submit with");
        outln!(
            "  job=$(sbatch --parsable {}) && sbatch --dependency=afterok:$job {}",
            quote(&run_script),
            quote(&merge_script)
        );
        outln!(
            "then follow it with `uqbench status {}`",
            quote(&path_str(&dir)?)
        );
        return Ok(());
    }
    let array = sbatch(std::slice::from_ref(&run_script))?;
    meta.array_job = Some(array.clone());
    meta.resubmissions.clear();
    sd.write_meta(&meta)?;
    let merge = sbatch(&[format!("--dependency=afterok:{array}"), merge_script])?;
    meta.merge_job = Some(merge.clone());
    sd.write_meta(&meta)?;
    outln!(
        "submitted job array {array} ({} tasks) and merge job {merge} (after every task)",
        args.tasks
    );
    outln!(
        "follow it with `uqbench status {}`",
        quote(&path_str(&dir)?)
    );
    Ok(())
}
