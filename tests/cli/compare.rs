//! `uqbench compare` and the report's rankings: two runs of one problem, compared pair by pair.

use std::collections::BTreeMap;

use crate::util::*;

/// A cubic.toml run of `methods` (4 repetitions, 40 epochs) into `dir/name/run`.
fn cubic_run(dir: &Path, name: &str, methods: &str) -> PathBuf {
    let here = dir.join(name);
    std::fs::create_dir(&here).unwrap();
    let spec = cubic_spec(
        &here,
        &format!("[run]\nrepetitions = 4\nepochs = 40\nmethods = {methods}\n"),
    );
    let out = here.join("run");
    let o = uqbench(&[
        "run",
        spec.to_str().unwrap(),
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

/// `aggregate.csv`'s value of (method, region, metric).
fn aggregates(dir: &Path) -> BTreeMap<(String, String, String), f64> {
    let text = std::fs::read_to_string(dir.join("aggregate.csv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let v = f[4].parse().ok()?;
            Some(((f[1].into(), f[2].into(), f[3].into()), v))
        })
        .collect()
}

#[test]
fn two_runs_of_one_problem_compare_pair_by_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let a = cubic_run(tmp.path(), "a", "[\"Ens\"]");
    let b = cubic_run(tmp.path(), "b", "[\"BD\"]");
    let o = uqbench(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--metric",
        "crps",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let pairs: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    // BLR (from the first run), Ens and BD: 3 · 2 ordered pairs.
    assert_eq!(pairs.len(), 6);
    let (agg_a, agg_b) = (aggregates(&a), aggregates(&b));
    let crps = |m: &str| {
        let key = (m.to_string(), "all".to_string(), "crps".to_string());
        agg_a
            .get(&key)
            .or_else(|| agg_b.get(&key))
            .copied()
            .unwrap()
    };
    for p in &pairs {
        let (ma, mb) = (
            p["method_a"].as_str().unwrap(),
            p["method_b"].as_str().unwrap(),
        );
        // Every repetition is finite here, so the paired mean difference is the difference
        // of the two aggregates (each the mean over the same 4 repetitions).
        let diff = p["diff"].as_f64().unwrap();
        assert!((diff - (crps(ma) - crps(mb))).abs() < 1e-12, "{p}");
        assert_eq!(p["k"], 4);
        let (lo, hi) = (p["t_low"].as_f64().unwrap(), p["t_high"].as_f64().unwrap());
        assert!(lo <= diff && diff <= hi && p["p_holm"].as_f64() >= p["p_value"].as_f64());
    }
    // The tables: a ranking with the BLR first (it is exact; CRPS against f).
    let o = uqbench(&["compare", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("`w2_anchor` (lower is better)"), "{text}");
    assert!(text.contains("| setting | A | B | mean A − B |"), "{text}");
    // Each run's report has the section; its repetitions.csv is what compare read.
    let report = std::fs::read_to_string(a.join("report.md")).unwrap();
    assert!(report.contains("## Which differences are real"), "{report}");
    assert!(report.contains("| 1 | BLR |"), "{report}");
    let reps = std::fs::read_to_string(a.join("repetitions.csv")).unwrap();
    assert!(reps.starts_with("setting,method,region,metric,repetition,value\n"));

    // A method in two runs, runs of different data, a bad metric: clear errors.
    let o = uqbench(&["compare", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert_clean_error(&o, &["method Ens", "more than one of the runs"]);
    let c = tmp.path().join("c");
    std::fs::create_dir(&c).unwrap();
    let spec = std::fs::read_to_string(b.join("spec.resolved.toml")).unwrap();
    std::fs::write(
        c.join("spec.resolved.toml"),
        spec.replace("seed = 20230401", "seed = 7"),
    )
    .unwrap();
    std::fs::copy(b.join("repetitions.csv"), c.join("repetitions.csv")).unwrap();
    let o = uqbench(&["compare", a.to_str().unwrap(), c.to_str().unwrap()]);
    assert_clean_error(&o, &["drew different data", "not paired"]);
    let o = uqbench(&["compare", a.to_str().unwrap(), "--metric", "nope"]);
    assert_clean_error(&o, &["metric \"nope\"", "valid:", "crps"]);
    std::fs::remove_file(a.join("repetitions.csv")).unwrap();
    let o = uqbench(&["compare", a.to_str().unwrap()]);
    assert_clean_error(&o, &["repetitions.csv", "uqbench report"]);
}
