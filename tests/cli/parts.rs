//! Runs in parts: resume after a kill, shards, repetition ranges, merging, and a repetition's
//! independence from the others.

use crate::util::*;
use std::time::{Duration, Instant};

#[test]
fn a_killed_run_resumes_and_shards_merge_to_the_same_results() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    let o = run_quick(&full, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let reference = std::fs::read(full.join("summary.json")).unwrap();

    // Kill a run as soon as its first work unit is finished (its timing file is written after
    // the unit's result files), then resume it.
    let part = tmp.path().join("part");
    let mut child = Command::new(env!("CARGO_BIN_EXE_uqbench"))
        .args([
            "run",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--quiet",
            "--out",
            part.to_str().unwrap(),
        ])
        .current_dir(root())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while count_files(&part.join("timings"), "json") == 0
        && start.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let partial = count_files(&part.join("reps"), "json");
    let finished = count_files(&part.join("timings"), "json");
    assert!(
        finished > 0 && partial < 2 * 8 * 20,
        "killed after {partial} result files, {finished} units"
    );
    assert!(!part.join("summary.json").exists());
    let o = run_quick(&part, &["--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The resume ran only what was missing: "N of M work units to run" with N ≤ M − the
    // finished units (a resume that recomputed everything would say M of M and still match
    // byte for byte), and it skipped no more units than the kill left result files for.
    let (todo, total) = units_to_run(&stderr(&o));
    assert!(
        todo + finished <= total && todo + partial >= total,
        "resumed {todo} of {total} units after {finished} finished units, {partial} result files"
    );
    assert_eq!(
        std::fs::read(part.join("summary.json")).unwrap(),
        reference,
        "resumed run differs"
    );
    // Its draws files too: one written before the kill and not followed by its repetition
    // file is written again.
    assert_eq!(
        count_files(&part.join("reps"), "draws"),
        count_files(&full.join("reps"), "draws")
    );
    for f in files_under(&full.join("reps")) {
        assert_eq!(
            std::fs::read(part.join("reps").join(&f)).unwrap(),
            std::fs::read(full.join("reps").join(&f)).unwrap(),
            "{f:?} of the resumed run differs"
        );
    }

    // Two shards, merged.
    let (s0, s1, merged) = (
        tmp.path().join("s0"),
        tmp.path().join("s1"),
        tmp.path().join("merged"),
    );
    for (dir, shard) in [(&s0, "0/2"), (&s1, "1/2")] {
        let o = run_quick(dir, &["--shard", shard]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!dir.join("summary.json").exists());
    }
    let files = (
        count_files(&s0.join("reps"), "json"),
        count_files(&s1.join("reps"), "json"),
    );
    assert!(
        files.0 > 0 && files.1 > 0 && files.0 + files.1 == 2 * 8 * 20,
        "{files:?}"
    );
    // A lone shard cannot be summarised.
    let o = uqbench(&["report", s0.to_str().unwrap()]);
    assert_clean_error(&o, &["missing", "merge"]);
    let o = uqbench(&[
        "merge",
        s0.to_str().unwrap(),
        s1.to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(merged.join("summary.json")).unwrap(),
        reference,
        "merged run differs"
    );
    // The merge carries every repetition's draws file.
    assert_eq!(
        count_files(&merged.join("reps"), "draws"),
        count_files(&full.join("reps"), "draws")
    );
    assert!(stderr(&o).contains("with draws files"), "{}", stderr(&o));
}

/// `(N, M)` of the run's "N of M work units to run" line.
fn units_to_run(stderr: &str) -> (usize, usize) {
    let line = stderr
        .lines()
        .find(|l| l.contains("work units to run"))
        .unwrap_or_else(|| panic!("no work-unit line in: {stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words
        .windows(2)
        .position(|w| w == ["work", "units"])
        .unwrap();
    assert_eq!(words[at - 2], "of", "{line}");
    let number = |w: &str| w.parse::<usize>().unwrap();
    (number(words[at - 3]), number(words[at - 1]))
}

#[test]
fn a_repetition_depends_on_nothing_but_itself() {
    // For every method of the quick profiles of E1, [002]'s quartic and its two-class
    // problem (HMC, MFVI, the GP and the classification heads included), repetitions 1
    // and 2 run alone (`--reps 1..3`) are bit-identical to the same repetitions of the full
    // run. 1..3 cuts inside a work unit in every track: E1's and the quartic's units and
    // tcc's blocks of 2 (0..2, 2..4), so a repetition's result cannot lean on its unit-mates.
    let tmp = tempfile::tempdir().unwrap();
    for spec in ["e1", "quartic_gap", "tcc"] {
        let path = format!("experiments/{spec}.toml");
        let full = tmp.path().join(format!("{spec}-full"));
        let part = tmp.path().join(format!("{spec}-part"));
        for (dir, extra) in [(&full, None), (&part, Some("1..3"))] {
            let mut args = vec![
                "run",
                path.as_str(),
                "--profile",
                "quick",
                "--quiet",
                "--out",
                dir.to_str().unwrap(),
            ];
            if let Some(r) = extra {
                args.extend(["--reps", r]);
            }
            let o = uqbench(&args);
            assert!(o.status.success(), "{spec}: {}", stderr(&o));
        }
        assert!(!part.join("summary.json").exists());
        let files = files_under(&part.join("reps"));
        let mut methods = std::collections::BTreeSet::new();
        for f in &files {
            let name = f.file_name().unwrap().to_str().unwrap();
            assert!(
                [
                    "rep-001.json",
                    "rep-002.json",
                    "rep-001.draws",
                    "rep-002.draws"
                ]
                .contains(&name),
                "{spec}: {f:?}"
            );
            methods.insert(f.parent().unwrap().to_path_buf());
            assert_eq!(
                std::fs::read(part.join("reps").join(f)).unwrap(),
                std::fs::read(full.join("reps").join(f)).unwrap(),
                "{spec}: {f:?} differs from the full run's"
            );
        }
        // Every (setting, method) folder of the full run, and no other: a partial run that
        // left a method out would otherwise pass on the files it did write.
        let full_methods: std::collections::BTreeSet<_> = files_under(&full.join("reps"))
            .iter()
            .map(|f| f.parent().unwrap().to_path_buf())
            .collect();
        assert!(!full_methods.is_empty(), "{spec}");
        assert_eq!(methods, full_methods, "{spec}: the methods of --reps 1..3");
        assert_eq!(
            count_files(&part.join("reps"), "json"),
            2 * methods.len(),
            "{spec}"
        );
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(part.join("run.json")).unwrap()).unwrap();
        assert_eq!(meta["reps"], "1..3");
        for key in ["git_commit", "rustc", "burn", "device"] {
            assert!(
                !meta[key].as_str().unwrap().is_empty(),
                "run.json {key}: {meta}"
            );
        }
        assert!(meta["threads"].as_u64().unwrap() >= 1);
    }
}

#[test]
fn runs_of_disjoint_repetitions_merge_and_overlaps_and_gaps_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let full = tmp.path().join("full");
    let o = run_quick(&full, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let dirs: Vec<PathBuf> = ["0..2", "2..7", "7..20"]
        .iter()
        .map(|r| {
            let d = tmp.path().join(r.replace("..", "-"));
            let o = run_quick(&d, &["--reps", r]);
            assert!(o.status.success(), "{}", stderr(&o));
            d
        })
        .collect();
    let merged = tmp.path().join("merged");
    let mut args = vec!["merge"];
    args.extend(dirs.iter().map(|d| d.to_str().unwrap()));
    args.extend(["--out", merged.to_str().unwrap()]);
    let o = uqbench(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    for file in ["summary.json", "summary.csv", "aggregate.csv"] {
        assert_eq!(
            std::fs::read(merged.join(file)).unwrap(),
            std::fs::read(full.join(file)).unwrap(),
            "{file} of the merged run differs"
        );
    }
    // A gap: repetitions 2..7 are missing, named per setting and method.
    let o = uqbench(&[
        "merge",
        dirs[0].to_str().unwrap(),
        dirs[2].to_str().unwrap(),
        "--out",
        tmp.path().join("gap").to_str().unwrap(),
    ]);
    assert_clean_error(&o, &["missing", "method Ens: repetitions 2..7", "--reps"]);
    assert!(!tmp.path().join("gap").exists());
    // An overlap: the full run holds every repetition of the parts.
    let o = uqbench(&[
        "merge",
        full.to_str().unwrap(),
        dirs[1].to_str().unwrap(),
        "--out",
        tmp.path().join("overlap").to_str().unwrap(),
    ]);
    assert_clean_error(&o, &["more than one directory", "rep-002.json", "disjoint"]);
    // Bad ranges are clear errors.
    let o = run_quick(&tmp.path().join("bad"), &["--reps", "5..30"]);
    assert_clean_error(&o, &["--reps 5..30", "B ≤ 20"]);
}
