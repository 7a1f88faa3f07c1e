//! `uqbench export` and `score`.

use crate::util::*;

/// Writes the anchor's own predictions for repetitions 0..k as external predictions.
fn anchor_predictions(dir: &Path, setting: &str, k: u64) {
    let sub = dir.join(setting);
    std::fs::create_dir_all(&sub).unwrap();
    for r in 0..k {
        let o = uqbench(&[
            "anchor",
            "experiments/e1.toml",
            "--setting",
            setting,
            "--rep",
            &r.to_string(),
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let p = serde_json::json!({"mean": v["mean"], "std": v["std"]});
        std::fs::write(sub.join(format!("rep-{r:03}.json")), p.to_string()).unwrap();
    }
}

#[test]
fn export_writes_csv_and_json_per_repetition() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    let o = uqbench(&[
        "export",
        "experiments/e2.toml",
        "--reps",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--setting",
        "d=2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let train = std::fs::read_to_string(out.join("d=2/rep-001.train.csv")).unwrap();
    let mut lines = train.lines();
    assert_eq!(lines.next(), Some("x1,x2,y"));
    assert_eq!(lines.count(), 900);
    let test = std::fs::read_to_string(out.join("d=2/rep-000.test.csv")).unwrap();
    assert_eq!(test.lines().next(), Some("x1,x2"));
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("d=2/rep-001.json")).unwrap())
            .unwrap();
    // The exported targets are the anchor's repetition 1 targets.
    let a = uqbench(&[
        "anchor",
        "experiments/e2.toml",
        "--setting",
        "d=2",
        "--rep",
        "1",
        "--json",
    ]);
    let a: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(j["train_y"], a["train_y"]);
    assert_eq!(j["test_x"], a["test_x"]);
}

#[test]
fn scoring_the_anchor_reproduces_the_anchor_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let preds = dir.path().join("preds");
    anchor_predictions(&preds, "f_main=2", 12);
    let out = dir.path().join("score");
    let o = uqbench(&[
        "score",
        "experiments/e1.toml",
        "--predictions",
        preds.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let methods = &s["settings"][0]["methods"];
    let (blr, ext) = (&methods["BLR"], &methods["external"]);
    assert_eq!(ext["repetitions"], 12);
    let blr_points = blr["points"].as_object().unwrap();
    assert!(blr_points.len() >= 10);
    for (metric, values) in blr_points {
        assert_eq!(values, &ext["points"][metric], "per-point {metric} differs");
    }
    for (region, metrics) in blr["aggregate"].as_object().unwrap() {
        for (metric, v) in metrics.as_object().unwrap() {
            // The training fit and the parameter count are the anchor's own; external
            // predictions carry none.
            if ["train_mse", "fit_ratio", "parameters"].contains(&metric.as_str()) {
                assert!(ext["aggregate"][region][metric].is_null());
                continue;
            }
            // The joint metrics: mean and std are marginals, scored as their product, which
            // is exact at τ = 1 and loses the correlations above (checked below).
            if metric.starts_with("joint_kl") || metric.starts_with("env_kl") {
                continue;
            }
            assert_eq!(
                v, &ext["aggregate"][region][metric],
                "aggregate {region}/{metric} differs"
            );
        }
    }
    // Scored predictions are judged against the exact posterior of the same repetition: the
    // anchor's own are at distance 0 from it (W2 and KL, up to rounding in the JSON export).
    for metric in ["w2_anchor", "kl_anchor"] {
        let v = ext["points"][metric]["value"].as_array().unwrap();
        assert!(
            v.iter().all(|v| v.as_f64().unwrap().abs() < 1e-9),
            "{metric}: {v:?}"
        );
    }
    // Joint predictions: the anchor's marginals are its joint at τ = 1 (KL 0 up to the JSON
    // export's rounding) and lose the correlations at τ = 10; the anchor's own joint is 0.
    let kl =
        |m: &serde_json::Value, name: &str| m["aggregate"]["all"][name]["value"].as_f64().unwrap();
    assert_eq!(ext["joint_kind"], "marginals");
    assert_eq!(blr["joint_kind"], "gaussian");
    assert!(
        kl(ext, "joint_kl_1").abs() < 1e-9,
        "{}",
        kl(ext, "joint_kl_1")
    );
    // (E1: few features against σ = 0.75, so the correlations carry about 0.06 nats.)
    assert!(kl(ext, "joint_kl_10") > 1e-3, "{}", kl(ext, "joint_kl_10"));
    assert_eq!(kl(blr, "joint_kl_10"), 0.0);
    // The uncertainty ratio of the anchor's own predictions is exactly 1.
    assert!(ext["points"]["uncertainty_ratio"]["value"]
        .as_array()
        .unwrap()
        .iter()
        .all(|v| v == 1.0));
    for file in ["summary.csv", "aggregate.csv"] {
        let text = std::fs::read_to_string(out.join(file)).unwrap();
        assert!(text.lines().count() > 1, "{file}");
    }
}

/// `dir/preds/default` (made) and cubic.toml's anchor prediction (`uqbench anchor --json`).
fn cubic_predictions(dir: &Path) -> (PathBuf, serde_json::Value) {
    let sub = dir.join("preds/default");
    std::fs::create_dir_all(&sub).unwrap();
    let a = uqbench(&["anchor", "experiments/cubic.toml", "--json"]);
    (sub, serde_json::from_slice(&a.stdout).unwrap())
}

/// `uqbench score experiments/cubic.toml --predictions dir/preds`, which must succeed.
fn score_cubic(dir: &Path) {
    let preds = dir.join("preds");
    let o = uqbench(&[
        "score",
        "experiments/cubic.toml",
        "--predictions",
        preds.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn csv_and_sample_predictions_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let (sub, a) = cubic_predictions(dir.path());
    let m = a["mean"].as_array().unwrap().len();
    let mut csv = String::from("mean,std\n");
    for i in 0..m {
        csv.push_str(&format!("{},{}\n", a["mean"][i], a["std"][i]));
    }
    std::fs::write(sub.join("rep-000.csv"), csv).unwrap();
    // Samples mean ± 1 give mean m and sample std sqrt(2) (n − 1 denominator).
    let samples: Vec<Vec<f64>> = (0..m)
        .map(|i| {
            let mu = a["mean"][i].as_f64().unwrap();
            vec![mu - 1.0, mu + 1.0, mu]
        })
        .collect();
    std::fs::write(
        sub.join("rep-001.json"),
        serde_json::json!({"samples": samples}).to_string(),
    )
    .unwrap();
    score_cubic(dir.path());
    let s: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("preds/score/summary.json")).unwrap(),
    )
    .unwrap();
    let unc = s["settings"][0]["methods"]["external"]["points"]["uncertainty"]["value"][0]
        .as_f64()
        .unwrap();
    let want = (a["std"][0].as_f64().unwrap() + 1.0) / 2.0; // rep 0: anchor std; rep 1: 1
    assert!((unc - want).abs() < 1e-12, "{unc} vs {want}");
}

#[test]
fn missing_repetitions_and_bad_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let preds = dir.path().join("preds");
    anchor_predictions(&preds, "f_main=2", 3);
    std::fs::remove_file(preds.join("f_main=2/rep-001.json")).unwrap();
    let p = preds.to_str().unwrap();
    let o = uqbench(&["score", "experiments/e1.toml", "--predictions", p]);
    assert_clean_error(&o, &["repetition 1 is missing"]);
    std::fs::write(preds.join("f_main=2/rep-001.csv"), "mean,std\n0.5,0.1\n").unwrap();
    let o = uqbench(&["score", "experiments/e1.toml", "--predictions", p]);
    assert_clean_error(&o, &["rep-001.csv", "1003 test inputs"]);
    std::fs::write(preds.join("f_main=2/rep-001.csv"), "mu,sd\n0.5,0.1\n").unwrap();
    let o = uqbench(&["score", "experiments/e1.toml", "--predictions", p]);
    assert_clean_error(&o, &["`mean` and `std`"]);
    let o = uqbench(&[
        "score",
        "experiments/e1.toml",
        "--predictions",
        dir.path().join("nothing").to_str().unwrap(),
    ]);
    assert_clean_error(&o, &["no setting directories"]);
}

/// Issue 59 §4: a prediction with uncertainty 0 where it errs has KL(method ‖ anchor) = +∞
/// there. That is a result: `aggregate.csv` writes `inf` with the count of infinite
/// repetitions, summary.json the string "inf", never an empty "no value".
#[test]
fn an_infinite_kl_is_written_as_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let (sub, a) = cubic_predictions(dir.path());
    let mut mean: Vec<f64> = serde_json::from_value(a["mean"].clone()).unwrap();
    let mut std: Vec<f64> = serde_json::from_value(a["std"].clone()).unwrap();
    // Repetition 0: the anchor's own prediction; repetition 1: certain (sd 0) and off by 1
    // at the first test input (the old code left the repetition's KL out, and with it the
    // method's).
    for r in 0..2 {
        if r == 1 {
            mean[0] += 1.0;
            std[0] = 0.0;
        }
        let p = serde_json::json!({"mean": mean, "std": std});
        std::fs::write(sub.join(format!("rep-{r:03}.json")), p.to_string()).unwrap();
    }
    score_cubic(dir.path());
    let out = dir.path().join("preds/score");
    let agg = std::fs::read_to_string(out.join("aggregate.csv")).unwrap();
    let row = agg
        .lines()
        .find(|l| l.starts_with(",external,all,kl_anchor,"))
        .unwrap_or_else(|| panic!("{agg}"));
    // value +∞, no standard error, no point spread (a +∞ point), 1 infinite repetition.
    assert_eq!(row, ",external,all,kl_anchor,inf,,,1.0", "{agg}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let m = &s["settings"][0]["methods"]["external"];
    assert_eq!(m["aggregate"]["all"]["kl_anchor"]["value"], "inf");
    assert_eq!(m["points"]["kl_anchor"]["value"][0], "inf");
    let reps = std::fs::read_to_string(out.join("repetitions.csv")).unwrap();
    assert!(reps.contains(",external,all,kl_anchor,1,inf\n"), "{reps}");
}
