//! The scheduler's side of `uqbench slurm` and `uqbench status`: submitting (`sbatch`),
//! cancelling (`scancel`), asking where an array's tasks stand (`squeue`, and `sacct` where the
//! cluster keeps accounting) and the cluster's `MaxArraySize` (`scontrol show config`). Every
//! call names the command it ran when it fails; a missing Slurm client is `None` (or a clear
//! error where the command cannot go on without it).

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{anyhow, bail, Result};

/// Where one array task stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// In the queue, waiting.
    Pending,
    /// Running (or completing, or requeued and about to run).
    Running,
    /// Finished with exit code 0.
    Completed,
    /// Ended otherwise: FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, … (Slurm's word).
    Ended(String),
}

impl TaskState {
    /// Queued or running: its work will still be done without a resubmission.
    pub fn is_active(&self) -> bool {
        matches!(self, TaskState::Pending | TaskState::Running)
    }

    fn of(state: &str) -> TaskState {
        // `CANCELLED by 0` in sacct; squeue's long names.
        let word = state
            .split_whitespace()
            .next()
            .unwrap_or("")
            .trim_end_matches('+');
        match word {
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD"
            | "SUSPENDED" => TaskState::Pending,
            "RUNNING" | "COMPLETING" | "CONFIGURING" | "RESIZING" | "STAGE_OUT" | "SIGNALING" => {
                TaskState::Running
            }
            "COMPLETED" => TaskState::Completed,
            other => TaskState::Ended(other.to_string()),
        }
    }

    /// A short label for the status table.
    pub fn label(&self) -> &str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Ended(s) => s,
        }
    }
}

/// Runs `program args…`; `Ok(None)` when the program is not installed.
fn output(program: &str, args: &[String]) -> Result<Option<String>> {
    let out = match Command::new(program).args(args).output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("cannot run {program}: {e}"),
    };
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Runs `sbatch --parsable ARGS…` and returns the job id.
pub fn sbatch(args: &[String]) -> Result<String> {
    let mut all = vec!["--parsable".to_string()];
    all.extend_from_slice(args);
    let stdout = output("sbatch", &all)?.ok_or_else(|| {
        anyhow!(
            "cannot run sbatch (not found): submitting needs Slurm's client on PATH (run on a \
             login node), or drop --submit and submit the printed commands there"
        )
    })?;
    // `--parsable` prints `ID` or `ID;CLUSTER`.
    let id = stdout.trim().split(';').next().unwrap_or_default().trim();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        bail!("sbatch printed no job id: {:?}", stdout.trim());
    }
    Ok(id.to_string())
}

/// `scancel JOB`; a job that has already left the queue is not an error.
pub fn scancel(job: &str) -> Result<()> {
    match output("scancel", &[job.to_string()]) {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("Invalid job id") => Ok(()),
        Err(e) => Err(e),
    }
}

/// The cluster's `MaxArraySize` (array indices run 0..MaxArraySize−1), when `scontrol` is
/// installed and answers.
pub fn max_array_size() -> Option<usize> {
    let text = output("scontrol", &["show".into(), "config".into()]).ok()??;
    text.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "MaxArraySize")
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

/// `JOB_TASK|STATE` lines: the states of single array tasks of the jobs in `order` (later jobs
/// override earlier ones for the same task index).
fn parse_states(text: &str, order: &[String], states: &mut BTreeMap<usize, (usize, TaskState)>) {
    for line in text.lines() {
        let Some((id, state)) = line.trim().split_once('|') else {
            continue;
        };
        // `123_4` (one task); `123_[5-9%2]` (pending tasks sacct has not split) are skipped:
        // squeue -r lists those one by one.
        let Some((job, task)) = id.split_once('_') else {
            continue;
        };
        let (Some(rank), Ok(task)) = (order.iter().position(|j| j == job), task.parse::<usize>())
        else {
            continue;
        };
        let newer = states.get(&task).is_none_or(|(r, _)| rank >= *r);
        if newer {
            states.insert(task, (rank, TaskState::of(state)));
        }
    }
}

/// Where each task of the arrays `jobs` (the first submission, then each resubmission) stands:
/// from `sacct` where accounting exists, overridden by `squeue` for what is still queued or
/// running. `None` without `squeue` (not on a cluster node).
pub fn task_states(jobs: &[String]) -> Result<Option<BTreeMap<usize, TaskState>>> {
    if jobs.is_empty() {
        return Ok(Some(BTreeMap::new()));
    }
    let list = jobs.join(",");
    let mut states = BTreeMap::new();
    // sacct fails without accounting storage ("Slurm accounting storage is disabled"):
    // then only squeue speaks, and a task that left the queue is "not queued".
    let args = ["-n", "-X", "-P", "-j", &list, "-o", "JobID,State"].map(String::from);
    if let Ok(Some(text)) = output("sacct", &args) {
        parse_states(&text, jobs, &mut states);
    }
    let args = ["-h", "-r", "-j", &list, "-o", "%i|%T"].map(String::from);
    let queue = match output("squeue", &args) {
        Ok(Some(text)) => text,
        Ok(None) => return Ok(None),
        // squeue -j with only finished jobs says "Invalid job id specified".
        Err(e) if e.to_string().contains("Invalid job id") => String::new(),
        Err(e) => return Err(e),
    };
    // A task squeue no longer lists is not active, whatever sacct last saw.
    for (_, state) in states.values_mut() {
        if state.is_active() {
            *state = TaskState::Ended("LEFT_QUEUE".into());
        }
    }
    parse_states(&queue, jobs, &mut states);
    Ok(Some(states.into_iter().map(|(k, (_, s))| (k, s)).collect()))
}

/// Whether job `id` is still in the queue (pending or running); `None` without `squeue`.
pub fn in_queue(id: &str) -> Result<Option<bool>> {
    let args = ["-h", "-j", id, "-o", "%T"].map(String::from);
    match output("squeue", &args) {
        Ok(Some(text)) => Ok(Some(!text.trim().is_empty())),
        Ok(None) => Ok(None),
        Err(e) if e.to_string().contains("Invalid job id") => Ok(Some(false)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_submissions_override_earlier_ones_and_ranges_are_skipped() {
        let order = vec!["100".to_string(), "200".to_string()];
        let mut states = BTreeMap::new();
        parse_states(
            "100_0|COMPLETED\n100_1|CANCELLED by 0\n100_[2-4]|PENDING\n200_1|RUNNING\n99_3|FAILED\n",
            &order,
            &mut states,
        );
        assert_eq!(states[&0].1, TaskState::Completed);
        assert_eq!(states[&1].1, TaskState::Running);
        assert!(!states.contains_key(&2) && !states.contains_key(&3));
        // An older job's line read later does not undo a newer one's.
        parse_states("100_1|FAILED\n", &order, &mut states);
        assert_eq!(states[&1].1, TaskState::Running);
        assert_eq!(
            TaskState::of("OUT_OF_MEMORY"),
            TaskState::Ended("OUT_OF_MEMORY".into())
        );
        assert!(TaskState::of("REQUEUED").is_active());
    }
}
