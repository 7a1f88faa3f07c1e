//! `uqbench slurm` and `uqbench status` without a Slurm: the array script run by hand, one
//! task at a time as Slurm would (scripts/slurm-test.sh runs them under a real Slurm).

use crate::util::*;

/// Runs task `i` of the array script as Slurm would: bash with SLURM_ARRAY_TASK_ID set.
fn run_task(script: &Path, i: usize) {
    let o = Command::new("bash")
        .arg(script)
        .env("SLURM_ARRAY_TASK_ID", i.to_string())
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success(), "task {i}: {}", stderr(&o));
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_slurm_scripts_run_the_shards_and_merge_into_the_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    let o = run_quick(&full, &["--methods", "Ens,BD"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let dir = tmp.path().join("array");
    let o = uqbench(&[
        "slurm",
        "experiments/e1.toml",
        "--profile",
        "quick",
        "--methods",
        "Ens,BD",
        "--tasks",
        "3",
        "--cpus-per-task",
        "1",
        "--partition",
        "gpu",
        "--time",
        "00:10:00",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (run, merge) = (dir.join("slurm/run.sbatch"), dir.join("slurm/merge.sbatch"));
    let text = std::fs::read_to_string(&run).unwrap();
    for needle in [
        "#SBATCH --array=0-2",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=00:10:00",
        "#SBATCH --cpus-per-task=1",
        "#SBATCH --requeue",
        &format!(
            "#SBATCH --chdir={}",
            root().canonicalize().unwrap().display()
        ),
        "--shard \"$SLURM_ARRAY_TASK_ID/3\" --resume",
        "--methods Ens,BD",
        "--threads 1",
        env!("CARGO_BIN_EXE_uqbench"),
    ] {
        assert!(
            text.contains(needle),
            "run.sbatch lacks {needle:?}:\n{text}"
        );
    }
    assert!(
        stdout(&o).contains("--dependency=afterok:$job"),
        "{}",
        stdout(&o)
    );

    // Tasks 0 and 2 finish; status names task 1 (not submitted: the plain commands).
    run_task(&run, 0);
    run_task(&run, 2);
    let o = uqbench(&["status", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let status = stdout(&o);
    assert!(status.contains("e1 (profile quick)"), "{status}");
    assert!(status.contains("not submitted"), "{status}");
    assert!(!status.contains("120 of 120"), "{status}");
    // The merge refuses the incomplete parts and names the task's shard to rerun.
    let o = Command::new("bash")
        .arg(&merge)
        .current_dir(root())
        .output()
        .unwrap();
    assert_clean_error(&o, &["missing", "--shard 1/3"]);
    assert!(!dir.join("summary.json").exists());

    run_task(&run, 1);
    let o = uqbench(&["status", dir.to_str().unwrap()]);
    assert!(
        stdout(&o).contains("120 of 120 repetition files done"),
        "{}",
        stdout(&o)
    );
    let o = Command::new("bash")
        .arg(&merge)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for file in ["summary.json", "summary.csv", "aggregate.csv", "report.md"] {
        assert_eq!(
            std::fs::read(dir.join(file)).unwrap(),
            std::fs::read(full.join(file)).unwrap(),
            "{file} of the Slurm run differs from the single process's"
        );
    }
    let o = uqbench(&["status", dir.to_str().unwrap()]);
    assert!(stdout(&o).contains("complete"), "{}", stdout(&o));
}

#[test]
fn slurm_and_status_refuse_bad_input_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("x");
    let base = [
        "slurm",
        "experiments/e1.toml",
        "--profile",
        "quick",
        "--out",
    ];
    let with = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.push(out.to_str().unwrap());
        args.extend_from_slice(extra);
        uqbench(&args)
    };
    assert_clean_error(&with(&["--tasks", "0"]), &["--tasks 0"]);
    assert_clean_error(
        &with(&["--tasks", "2", "--shard", "0/2"]),
        &["--shard 0/2", "chooses the shards"],
    );
    assert_clean_error(&with(&["--tasks", "2", "--reps", "0..5"]), &["--reps 0..5"]);
    assert_clean_error(
        &with(&["--tasks", "2", "--gpus-per-task", "1"]),
        &["--gpus-per-task", "--backend wgpu"],
    );
    // E1's quick profile has 2 settings × 8 methods in blocks of repetitions: far fewer than
    // 10 000 blocks.
    assert_clean_error(
        &with(&["--tasks", "10000"]),
        &["--tasks 10000", "at most --tasks"],
    );
    assert!(!out.exists());
    let o = uqbench(&["status", tmp.path().to_str().unwrap()]);
    assert_clean_error(&o, &["not a run directory"]);
}
