//! `uqbench slurm`: write (and optionally submit) a Slurm job array that runs one experiment as
//! N balanced shards, and the merge job that combines them into the run directory.
//!
//! Layout of `DIR` (the run's `--out`):
//! - `DIR/slurm/run.sbatch`: the array; task `I` runs `uqbench run … --shard I/N --resume
//!   --quiet --out DIR/slurm/parts/task-I`, so a requeued or resubmitted task keeps what it
//!   finished;
//! - `DIR/slurm/merge.sbatch`: `uqbench merge DIR/slurm/parts/task-* --out DIR` (merge checks
//!   completeness, then summarises, draws the figures and writes the report into `DIR`);
//! - `DIR/slurm/slurm.json`: the number of tasks and the submitted job ids, read by
//!   `uqbench status DIR`;
//! - `DIR/slurm/logs/`: one log per task and one for the merge.
//!
//! Both scripts call this binary by its absolute path and run in the directory `uqbench slurm`
//! was called from (`#SBATCH --chdir`), so the spec's relative paths mean what they meant here.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::{Deserialize, Serialize};

use super::run::{out_dir, plan_of, RunArgs};
use crate::runner::shards;
use uqbench_eval::store::{prepare_dir, write_atomic};

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
    /// GPUs per task (`#SBATCH --gpus-per-task`), for --backend wgpu or cuda.
    #[arg(long)]
    pub gpus_per_task: Option<usize>,
    /// Submit the array and the merge job (it waits for every task: afterok) with sbatch.
    #[arg(long)]
    pub submit: bool,
}

/// `DIR/slurm/slurm.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SlurmMeta {
    /// Array tasks, i.e. shards.
    pub tasks: usize,
    /// The spec's profile (the merged run.json records it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The array's job id, once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job: Option<String>,
    /// The merge job's id, once submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_job: Option<String>,
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
    /// `slurm.json`, when this is a Slurm run directory.
    pub fn meta(&self) -> Option<SlurmMeta> {
        let text = std::fs::read_to_string(self.meta_path()).ok()?;
        serde_json::from_str(&text).ok()
    }
    fn write_meta(&self, meta: &SlurmMeta) -> Result<()> {
        write_atomic(
            &self.meta_path(),
            serde_json::to_string_pretty(meta)?.as_bytes(),
        )?;
        Ok(())
    }
}

/// `s` quoted for bash (single quotes; a single quote inside becomes `'\''`).
fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn path_str(p: &Path) -> Result<String> {
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

/// The `uqbench run` arguments every task shares (everything but --out and --shard).
fn run_arguments(args: &SlurmArgs, spec: &Path) -> Result<Vec<String>> {
    let r = &args.run;
    let mut out = vec!["run".to_string(), path_str(spec)?];
    if let Some(p) = &r.profile {
        out.extend(["--profile".into(), p.clone()]);
    }
    out.extend(["--backend".into(), r.backend.name().to_string()]);
    if let Some(m) = &r.methods {
        out.extend(["--methods".into(), m.join(",")]);
    }
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

/// The `#SBATCH` lines both jobs share.
fn common_directives(args: &SlurmArgs, cwd: &str) -> Vec<String> {
    let mut lines = vec![format!("#SBATCH --chdir={cwd}")];
    if let Some(p) = &args.partition {
        lines.push(format!("#SBATCH --partition={p}"));
    }
    if let Some(t) = &args.time {
        lines.push(format!("#SBATCH --time={t}"));
    }
    lines
}

/// The two scripts' text.
fn scripts(args: &SlurmArgs, name: &str, dir: &Path, spec: &Path) -> Result<(String, String)> {
    let cwd = std::env::current_dir().context("the current directory")?;
    let cwd = directive_path(&cwd, "the current directory")?;
    let exe = std::env::current_exe().context("the path of this uqbench binary")?;
    let exe = quote(&path_str(&exe)?);
    let sd = SlurmDir::of(dir);
    let logs = directive_path(&sd.root.join("logs"), "--out")?;
    let n = args.tasks;
    let version = env!("CARGO_PKG_VERSION");

    let mut run = vec![
        "#!/bin/bash".to_string(),
        format!("#SBATCH --job-name=uqbench-{name}"),
        format!("#SBATCH --array=0-{}", n - 1),
        format!("#SBATCH --output={logs}/task-%a.log"),
        "#SBATCH --ntasks=1".into(),
        "#SBATCH --requeue".into(),
        "#SBATCH --open-mode=append".into(),
    ];
    run.extend(common_directives(args, &cwd));
    if let Some(c) = args.cpus_per_task {
        run.push(format!("#SBATCH --cpus-per-task={c}"));
    }
    if let Some(g) = args.gpus_per_task {
        run.push(format!("#SBATCH --gpus-per-task={g}"));
    }
    let task_args: Vec<String> = run_arguments(args, spec)?
        .iter()
        .map(|a| quote(a))
        .collect();
    run.extend([
        String::new(),
        format!("# Written by `uqbench slurm` (uqbench {version}). Task I runs shard I/{n} of the"),
        "# work (balanced by expected cost) into parts/task-I; --resume keeps what an earlier"
            .into(),
        "# attempt of the task finished, so a requeued or resubmitted task loses nothing.".into(),
        "# Rerun failed tasks: sbatch --array=I,J this-script (`uqbench status DIR` lists them)."
            .into(),
        "set -euo pipefail".into(),
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
    ];
    merge.extend(common_directives(args, &cwd));
    merge.extend([
        String::new(),
        format!("# Written by `uqbench slurm` (uqbench {version}). Combines the {n} tasks' parts"),
        "# into the run directory (merge checks that every repetition is there exactly once),"
            .into(),
        "# then writes the summaries, figures and report, as `uqbench run` would.".into(),
        "set -euo pipefail".into(),
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

/// Runs `sbatch --parsable ARGS…` and returns the job id.
pub fn sbatch(args: &[String]) -> Result<String> {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot run sbatch ({e}): --submit needs Slurm's client on PATH (run on a login \
                 node), or drop --submit and submit the printed commands there"
            )
        })?;
    if !out.status.success() {
        bail!(
            "sbatch {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // `--parsable` prints `ID` or `ID;CLUSTER`.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = stdout.trim().split(';').next().unwrap_or_default().trim();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        bail!("sbatch printed no job id: {:?}", stdout.trim());
    }
    Ok(id.to_string())
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
    let cwd = std::env::current_dir()?;
    let dir = cwd.join(out_dir(&args.run, &plan));
    let spec = cwd.join(&args.run.spec);
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

    prepare_dir(&dir, &plan.spec.resolved_toml()?, args.run.resume)?;
    let sd = SlurmDir::of(&dir);
    std::fs::create_dir_all(sd.root.join("logs"))
        .with_context(|| format!("cannot create {}", sd.root.join("logs").display()))?;
    std::fs::create_dir_all(sd.parts())?;
    let (run_text, merge_text) = scripts(args, &plan.spec.name, &dir, &spec)?;
    write_script(&sd.run_script(), &run_text)?;
    write_script(&sd.merge_script(), &merge_text)?;
    let mut meta = SlurmMeta {
        tasks: args.tasks,
        profile: args.run.profile.clone(),
        array_job: None,
        merge_job: None,
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
