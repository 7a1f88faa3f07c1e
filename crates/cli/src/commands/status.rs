//! `uqbench status DIR`: what a run directory holds and what it lacks (its spec, its `reps/`,
//! and the parts of a `uqbench slurm` run under `slurm/parts/`), and for a submitted Slurm run
//! where its array's tasks stand (`squeue`, `sacct`): which tasks to resubmit, which
//! `--resubmit` submits with a new merge job, recorded in `slurm.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use super::slurm::{path_str, quote, Resubmission, SlurmDir, SlurmMeta};
use super::slurm_queue::{in_queue, sbatch, scancel, task_states, TaskState};
use crate::runner::{shards, Plan};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::{rep_path, RunMeta, SPEC_FILE};

/// Arguments of `uqbench status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run directory (`--out` of `uqbench run` or `uqbench slurm`).
    pub dir: PathBuf,
    /// For a Slurm run: submit again the tasks with missing work that are neither queued nor
    /// running (and a merge job after them), and record the new job ids in slurm.json.
    #[arg(long)]
    pub resubmit: bool,
}

/// Ranges of consecutive numbers: `[0, 1, 2, 5]` → `0..3, 5..6`.
pub fn ranges(v: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(format!("{}..{}", v[i], v[j] + 1));
        i = j + 1;
    }
    out.join(", ")
}

/// Runs `uqbench status`.
pub fn run(args: &StatusArgs) -> Result<()> {
    let dir = &args.dir;
    let text = std::fs::read_to_string(dir.join(SPEC_FILE)).with_context(|| {
        format!(
            "{} is not a run directory (no {SPEC_FILE}); give the --out of `uqbench run` or \
             `uqbench slurm`",
            dir.display()
        )
    })?;
    let plan = Plan::new(ExperimentSpec::from_toml_str(&text, None)?, None)?;
    let sd = SlurmDir::of(dir);
    let slurm = sd.meta();
    // Where repetition files may be: the directory itself and every part of a Slurm run.
    let mut holders: Vec<PathBuf> = vec![dir.clone()];
    if let Some(meta) = &slurm {
        holders.extend((0..meta.tasks).map(|i| sd.part(i)));
    }
    // A Slurm run has no run.json until its merge; slurm.json records the profile.
    let profile = RunMeta::read(dir)
        .profile
        .or_else(|| slurm.as_ref().and_then(|m| m.profile.clone()));
    outln!(
        "{} ({}) in {}: {} settings × {} methods × {} repetitions",
        plan.spec.name,
        profile.map_or("no profile".to_string(), |p| format!("profile {p}")),
        dir.display(),
        plan.settings.len(),
        plan.methods.len(),
        plan.repetitions()
    );

    let counts = Counts::of(&plan, &holders);
    print_table(&plan, &counts)?;
    if args.resubmit && slurm.as_ref().and_then(|m| m.array_job.as_ref()).is_none() {
        anyhow::bail!(
            "--resubmit: {} is not a submitted `uqbench slurm` run (no array job in {})",
            dir.display(),
            sd.meta_path().display()
        );
    }
    advise(dir, &plan, &sd, slurm, &counts, args.resubmit)
}

/// Repetition files done and missing per (setting, method's index in the plan), in the plan's
/// order.
struct Counts {
    /// (done, total) per row.
    rows: BTreeMap<(usize, usize), (u64, u64)>,
    /// The missing repetitions per row.
    missing: BTreeMap<(usize, usize), Vec<u64>>,
    done_total: u64,
    all_total: u64,
}

impl Counts {
    /// Counts the plan's repetition files found in any of `holders`.
    fn of(plan: &Plan, holders: &[PathBuf]) -> Counts {
        // Keyed by (setting, method's index in the plan), so rows come in the plan's order.
        let method_index = |m: &str| plan.methods.iter().position(|x| x == m).unwrap_or(0);
        let mut missing: BTreeMap<(usize, usize), Vec<u64>> = BTreeMap::new();
        let mut done_total = 0u64;
        let mut all_total = 0u64;
        let mut rows: BTreeMap<(usize, usize), (u64, u64)> = BTreeMap::new();
        for unit in &plan.units {
            let setting = &plan.settings[unit.setting];
            let key = (unit.setting, method_index(&unit.method));
            let row = rows.entry(key).or_default();
            for r in unit.reps.clone() {
                row.1 += 1;
                all_total += 1;
                if holders
                    .iter()
                    .any(|h| rep_path(h, setting, &unit.method, r).is_file())
                {
                    row.0 += 1;
                    done_total += 1;
                } else {
                    missing.entry(key).or_default().push(r);
                }
            }
        }
        Counts {
            rows,
            missing,
            done_total,
            all_total,
        }
    }
}

/// One line per setting × method: done/total and the missing repetitions.
fn print_table(plan: &Plan, c: &Counts) -> Result<()> {
    let label = |s: usize| {
        let l = plan.settings[s].label();
        if l.is_empty() {
            "-".to_string()
        } else {
            l
        }
    };
    let width = (0..plan.settings.len())
        .map(|s| label(s).len())
        .max()
        .unwrap_or(1)
        .max(7);
    outln!(
        "{:<width$}  {:<14} {:>9}  missing",
        "setting",
        "method",
        "done"
    );
    for (&(s, m), &(done, total)) in &c.rows {
        outln!(
            "{:<width$}  {:<14} {:>9}  {}",
            label(s),
            plan.methods[m],
            format!("{done}/{total}"),
            c.missing
                .get(&(s, m))
                .map(|v| ranges(v))
                .unwrap_or_default()
        );
    }
    outln!("{} of {} repetition files done", c.done_total, c.all_total);
    Ok(())
}

/// What to do next: the Slurm tasks to resubmit (and with `resubmit`, resubmit them),
/// `--resume`, the merge, or nothing.
fn advise(
    dir: &Path,
    plan: &Plan,
    sd: &SlurmDir,
    slurm: Option<SlurmMeta>,
    c: &Counts,
    resubmit: bool,
) -> Result<()> {
    let merged = dir.join("summary.json").is_file() && RunMeta::read(dir).shard.is_none();
    let complete = c.done_total == c.all_total;
    let Some(meta) = slurm else {
        if complete {
            outln!(
                "every repetition is done; summarise with `uqbench report {}`",
                dir.display()
            );
        } else {
            outln!(
                "continue with `uqbench run … --out {} --resume` (the same arguments)",
                dir.display()
            );
        }
        return Ok(());
    };
    if complete && merged {
        outln!("complete: {}", dir.join("report.md").display());
        return Ok(());
    }
    let Some(array) = meta.array_job.clone() else {
        outln!(
            "not submitted: job=$(sbatch --parsable {}) && sbatch --dependency=afterok:$job {}",
            sd.run_script().display(),
            sd.merge_script().display()
        );
        return Ok(());
    };
    let missing = tasks_with_missing_work(plan, &meta, c)?;
    let states = task_states(&meta.array_jobs())?;
    let Some(states) = states else {
        // Not on a cluster node: the directory alone speaks.
        outln!(
            "tasks of job {array} with missing work: {} of 0..{} (squeue not found: cannot \
             tell which are still queued or running)",
            list(&missing),
            meta.tasks
        );
        outln!(
            "run `uqbench status {} --resubmit` on a login node",
            dir.display()
        );
        return Ok(());
    };
    print_states(&meta, &states)?;
    let active = |t: &usize| states.get(t).is_some_and(TaskState::is_active);
    let to_resubmit: Vec<usize> = missing.iter().copied().filter(|t| !active(t)).collect();
    let merge_queued = match &meta.merge_job {
        Some(m) => in_queue(m)?.unwrap_or(false),
        None => false,
    };
    if !missing.is_empty() {
        outln!(
            "tasks with missing work: {} of 0..{}; queued or running: {}; to resubmit: {}",
            list(&missing),
            meta.tasks,
            none_or(&missing.iter().copied().filter(active).collect::<Vec<_>>()),
            none_or(&to_resubmit)
        );
    }
    if to_resubmit.is_empty() && (merge_queued || !complete) {
        match (&meta.merge_job, complete) {
            (Some(job), true) => outln!("every task's work is done; merge job {job} combines it"),
            _ => outln!("nothing to resubmit: the queued and running tasks finish the work"),
        }
        return Ok(());
    }
    let command = format!(
        "{} status {} --resubmit",
        quote(&path_str(&sd.binary())?),
        quote(&path_str(dir)?)
    );
    if !resubmit {
        if to_resubmit.is_empty() {
            outln!("every task's work is done but no merge job is queued; submit one: {command}");
        } else {
            outln!("resubmit them and the merge: {command}");
        }
        return Ok(());
    }
    do_resubmit(sd, meta, &to_resubmit, &states)
}

/// The array tasks (shards) that hold a missing repetition.
fn tasks_with_missing_work(plan: &Plan, meta: &SlurmMeta, c: &Counts) -> Result<Vec<usize>> {
    let split = shards::balanced(plan, meta.tasks)?;
    let mut rerun: Vec<usize> = c
        .missing
        .iter()
        .flat_map(|(&(s, m), reps)| {
            let (split, method) = (&split, plan.methods[m].as_str());
            reps.iter()
                .filter_map(move |&r| shards::shard_of(split, s, method, r))
        })
        .collect();
    rerun.sort_unstable();
    rerun.dedup();
    Ok(rerun)
}

fn list(tasks: &[usize]) -> String {
    tasks
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

fn none_or(tasks: &[usize]) -> String {
    if tasks.is_empty() {
        "none".into()
    } else {
        list(tasks)
    }
}

/// One line: how many tasks stand where, and which ended badly.
fn print_states(meta: &SlurmMeta, states: &BTreeMap<usize, TaskState>) -> Result<()> {
    let mut by: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for t in 0..meta.tasks {
        by.entry(states.get(&t).map_or("not queued", TaskState::label))
            .or_default()
            .push(t);
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(label, ts)| {
            format!(
                "{label}: {}",
                ranges(&ts.iter().map(|&t| t as u64).collect::<Vec<_>>())
            )
        })
        .collect();
    outln!(
        "scheduler (jobs {}): {}",
        meta.array_jobs().join(", "),
        parts.join("; ")
    );
    Ok(())
}

/// Submits `tasks` of the array again and a merge job after them (and after the old arrays'
/// tasks still queued or running), cancels the old merge, and records both in slurm.json.
fn do_resubmit(
    sd: &SlurmDir,
    mut meta: SlurmMeta,
    tasks: &[usize],
    states: &BTreeMap<usize, TaskState>,
) -> Result<()> {
    if let Some(old) = &meta.merge_job {
        scancel(old)?;
    }
    let mut dependency = Vec::new();
    let array_job = if tasks.is_empty() {
        String::new()
    } else {
        let throttle = meta
            .array_throttle
            .map(|k| format!("%{k}"))
            .unwrap_or_default();
        let id = sbatch(&[
            format!("--array={}{throttle}", list(tasks)),
            path_str(&sd.run_script())?,
        ])?;
        dependency.push(format!("afterok:{id}"));
        id
    };
    if states.values().any(TaskState::is_active) {
        // Only jobs still in the queue: Slurm forgets finished ones and refuses them as
        // dependencies.
        let mut queued = Vec::new();
        for job in meta.array_jobs() {
            if in_queue(&job)?.unwrap_or(false) {
                queued.push(job);
            }
        }
        if !queued.is_empty() {
            dependency.push(format!("afterany:{}", queued.join(":")));
        }
    }
    let mut merge_args = Vec::new();
    if !dependency.is_empty() {
        merge_args.push(format!("--dependency={}", dependency.join(",")));
    }
    merge_args.push(path_str(&sd.merge_script())?);
    let merge_job = sbatch(&merge_args)?;
    if tasks.is_empty() {
        outln!("submitted merge job {merge_job}");
    } else {
        outln!(
            "resubmitted tasks {} as job array {array_job}; merge job {merge_job} after them",
            list(tasks)
        );
        meta.resubmissions.push(Resubmission {
            tasks: tasks.to_vec(),
            array_job,
            merge_job: merge_job.clone(),
        });
    }
    meta.merge_job = Some(merge_job);
    sd.write_meta(&meta)
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn ranges_group_consecutive_numbers() {
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0..3, 5..6, 7..9");
        assert_eq!(ranges(&[]), "");
    }
}
