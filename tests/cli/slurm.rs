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
    // Submitted from a copy of the spec, which is broken right after submission: the tasks
    // and the merge read the spec pinned at submission.
    let spec = tmp.path().join("e1.toml");
    std::fs::copy(root().join("experiments/e1.toml"), &spec).unwrap();
    let o = uqbench(&[
        "slurm",
        spec.to_str().unwrap(),
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
        &format!(
            "{} --pinned --profile quick",
            dir.join("slurm/spec.resolved.toml").display()
        ),
        "--threads 1",
        dir.join("slurm/bin/uqbench").to_str().unwrap(),
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

    assert!(
        !text.contains("--methods"),
        "the pinned spec holds the methods:\n{text}"
    );
    std::fs::write(&spec, "this is not a spec any more").unwrap();
    let pinned_spec = std::fs::read_to_string(dir.join("slurm/spec.resolved.toml")).unwrap();
    assert_eq!(
        pinned_spec,
        std::fs::read_to_string(dir.join("spec.resolved.toml")).unwrap()
    );
    assert!(
        pinned_spec.contains("methods = [\"BD\", \"Ens\"]"),
        "{pinned_spec}"
    );

    // The scripts call a pinned copy of the binary, stripped of its symbols, whose checksum
    // (and its source's) slurm.json records.
    let pinned = std::fs::read(dir.join("slurm/bin/uqbench")).unwrap();
    let source = std::fs::read(env!("CARGO_BIN_EXE_uqbench")).unwrap();
    // Measured: 148 MB → 114 MB (the symbols; the rest is code, 86 MB of .text).
    assert!(
        pinned.len() < source.len() / 10 * 9,
        "the pinned binary is {} bytes, its source {}: not stripped",
        pinned.len(),
        source.len()
    );
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("slurm/slurm.json")).unwrap())
            .unwrap();
    assert_eq!(meta["binary_sha256"].as_str().unwrap().len(), 64);
    assert_ne!(meta["binary_sha256"], meta["binary_source_sha256"]);
    let merge_text = std::fs::read_to_string(&merge).unwrap();
    assert!(
        merge_text.contains("#SBATCH --kill-on-invalid-dep=yes"),
        "{merge_text}"
    );
    assert!(!merge_text.contains("--cpus-per-task"), "{merge_text}");

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
    // A part made by another build is refused by name (run.json records each part's binary).
    let part = dir.join("slurm/parts/task-1/run.json");
    let good = std::fs::read_to_string(&part).unwrap();
    let sha = meta["binary_sha256"].as_str().unwrap();
    assert!(good.contains(sha), "{good}");
    std::fs::write(&part, good.replace(sha, &"0".repeat(64))).unwrap();
    let o = Command::new("bash")
        .arg(&merge)
        .current_dir(root())
        .output()
        .unwrap();
    assert_clean_error(&o, &["differ in binary_sha256", "task-1"]);
    std::fs::write(&part, good).unwrap();
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

/// A directory with a fake `scontrol` reporting `MaxArraySize = max`, for PATH.
fn fake_scontrol(dir: &Path, max: usize) -> String {
    let bin = dir.join("fakebin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("scontrol");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho 'ClusterName = fake'\necho 'MaxArraySize            = {max}'\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn slurm_options_reach_their_jobs_and_the_cluster_limits_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("opts");
    let base = [
        "slurm",
        "experiments/e1.toml",
        "--profile",
        "quick",
        "--out",
        dir.to_str().unwrap(),
        "--joint-tau",
        "1,10,100",
        "--draws",
        "f32",
    ];
    let with = |extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend_from_slice(extra);
        uqbench(&args)
    };
    let o = with(&[
        "--tasks",
        "3",
        "--partition",
        "long",
        "--time",
        "01:00:00",
        "--account",
        "proj42",
        "--qos",
        "normal",
        "--mem",
        "8G",
        "--constraint",
        "a100|h100",
        "--gres",
        "gpu:1",
        "--array-throttle",
        "2",
        "--sbatch-arg=--exclusive",
        "--merge-sbatch-arg=--mail-type=END",
        "--merge-mem",
        "4G",
        "--setup",
        "module load cuda/12",
        "--merge-time",
        "00:05:00",
        "--merge-partition",
        "short",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let run = std::fs::read_to_string(dir.join("slurm/run.sbatch")).unwrap();
    let merge = std::fs::read_to_string(dir.join("slurm/merge.sbatch")).unwrap();
    for needle in [
        "#SBATCH --array=0-2%2",
        "#SBATCH --partition=long",
        "#SBATCH --time=01:00:00",
        "#SBATCH --account=proj42",
        "#SBATCH --qos=normal",
        "#SBATCH --mem=8G",
        "#SBATCH --constraint=a100|h100",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --exclusive",
        // A failing setup line stops the task.
        "\nset -euo pipefail\nmodule load cuda/12\n",
    ] {
        assert!(run.contains(needle), "run.sbatch lacks {needle:?}:\n{run}");
    }
    assert!(!run.contains("--mail-type"), "{run}");
    // What the recorded spec holds reaches every task through the pinned spec, or merge would
    // refuse the parts.
    let pinned = std::fs::read_to_string(dir.join("slurm/spec.resolved.toml")).unwrap();
    for needle in ["joint_tau = [1, 10, 100]", "draws = \"f32\""] {
        assert!(
            pinned.contains(needle),
            "the pinned spec lacks {needle:?}:\n{pinned}"
        );
    }
    for needle in [
        "#SBATCH --partition=short",
        "#SBATCH --time=00:05:00",
        "#SBATCH --account=proj42",
        "#SBATCH --qos=normal",
        "#SBATCH --mail-type=END",
        "#SBATCH --mem=4G",
        "#SBATCH --kill-on-invalid-dep=yes",
        "\nset -euo pipefail\nmodule load cuda/12\n",
    ] {
        assert!(
            merge.contains(needle),
            "merge.sbatch lacks {needle:?}:\n{merge}"
        );
    }
    for absent in [
        "--mem=8G",
        "--exclusive",
        "--gres",
        "--constraint",
        "--gpus",
        "=long",
        "01:00:00",
    ] {
        assert!(
            !merge.contains(absent),
            "merge.sbatch has {absent:?}:\n{merge}"
        );
    }
    // Resuming with another split, or with another build pinned, is refused with what to do.
    assert_clean_error(
        &with(&["--tasks", "4", "--resume"]),
        &["--tasks 4", "was split into 3 tasks", "pass --tasks 3"],
    );
    let pinned = dir.join("slurm/bin/uqbench");
    let original = std::fs::read(&pinned).unwrap();
    std::fs::write(&pinned, b"#!/bin/sh\nexit 1\n").unwrap();
    assert_clean_error(
        &with(&["--tasks", "3", "--resume"]),
        &["pins another build", "start a new --out"],
    );
    std::fs::write(&pinned, original).unwrap();
    assert!(with(&["--tasks", "3", "--resume"]).status.success());
    // Malformed options name themselves.
    let other = tmp.path().join("other");
    let bad = |extra: &[&str]| {
        let mut args = vec![
            "slurm",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--tasks",
            "2",
            "--out",
            other.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        uqbench(&args)
    };
    assert_clean_error(&bad(&["--sbatch-arg", "mail"]), &["--sbatch-arg mail"]);
    assert_clean_error(
        &bad(&["--setup", "a\nb"]),
        &["--setup", "one non-empty line"],
    );
    assert_clean_error(&bad(&["--mem", "8 G"]), &["--mem", "without whitespace"]);
    assert_clean_error(&bad(&["--array-throttle", "0"]), &["--array-throttle 0"]);
    // --tasks above the cluster's MaxArraySize (a fake scontrol says 2) quotes the limit.
    let path = fake_scontrol(tmp.path(), 2);
    let o = uqbench_env(
        &[
            "slurm",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--tasks",
            "3",
            "--out",
            other.to_str().unwrap(),
        ],
        &[("PATH", &path)],
    );
    assert_clean_error(&o, &["--tasks 3", "MaxArraySize is 2", "at most --tasks 2"]);
    assert!(!other.exists());
}
