//! `uqbench status DIR`: what a run directory holds and what it lacks, from the directory
//! alone (its spec, its `reps/`, and the parts of a `uqbench slurm` run under `slurm/parts/`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use super::slurm::{SlurmDir, SlurmMeta};
use crate::runner::{shards, Plan};
use uqbench_eval::spec::ExperimentSpec;
use uqbench_eval::store::{rep_path, RunMeta, SPEC_FILE};

/// Arguments of `uqbench status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run directory (`--out` of `uqbench run` or `uqbench slurm`).
    pub dir: PathBuf,
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
    advise(dir, &plan, &sd, slurm.as_ref(), &counts)
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

/// What to do next: the Slurm tasks to resubmit, `--resume`, the merge, or nothing.
fn advise(
    dir: &Path,
    plan: &Plan,
    sd: &SlurmDir,
    slurm: Option<&SlurmMeta>,
    c: &Counts,
) -> Result<()> {
    let merged = dir.join("summary.json").is_file() && RunMeta::read(dir).shard.is_none();
    match (slurm, c.done_total == c.all_total) {
        (Some(meta), false) => {
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
            let list = rerun
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let Some(array) = &meta.array_job else {
                outln!(
                    "not submitted: job=$(sbatch --parsable {}) && sbatch \
                     --dependency=afterok:$job {}",
                    sd.run_script().display(),
                    sd.merge_script().display()
                );
                return Ok(());
            };
            outln!(
                "tasks of job {array} with missing work: {list} of 0..{} (running ones finish \
                 it; failed ones resume where they stopped when resubmitted)",
                meta.tasks
            );
            outln!(
                "resubmit them and the merge: job=$(sbatch --parsable --array={list} {}) && \
                 sbatch --dependency=afterok:$job {}",
                sd.run_script().display(),
                sd.merge_script().display()
            );
            if let Some(job) = &meta.merge_job {
                outln!(
                    "(the first merge job {job} waits on the failed tasks forever: scancel {job})"
                );
            }
        }
        (None, false) => {
            outln!(
                "continue with `uqbench run … --out {} --resume` (the same arguments)",
                dir.display()
            );
        }
        (_, true) if merged => outln!("complete: {}", dir.join("report.md").display()),
        (Some(meta), true) => match &meta.merge_job {
            Some(job) => outln!("every task's work is done; merge job {job} combines it"),
            None => outln!(
                "every task's work is done; merge: sbatch {}",
                sd.merge_script().display()
            ),
        },
        (None, true) => outln!(
            "every repetition is done; summarise with `uqbench report {}`",
            dir.display()
        ),
    }
    Ok(())
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
