//! End-to-end tests through the `uqbench` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn uqbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uqbench"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the uqbench binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts a clean failure: exit code 1 (not a panic's 101) and every `needle` in stderr.
fn assert_clean_error(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "expected exit code 1, stderr:\n{err}"
    );
    assert!(!err.contains("panicked"), "panicked:\n{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
}

mod anchor {
    use super::*;

    fn json(args: &[&str]) -> serde_json::Value {
        let o = uqbench(args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON object")
    }

    #[test]
    fn e1_json_has_every_field_with_consistent_lengths() {
        let v = json(&[
            "anchor",
            "experiments/e1.toml",
            "--setting",
            "f_main=2",
            "--rep",
            "3",
            "--json",
        ]);
        assert_eq!(v["setting"], "f_main=2");
        let n = v["train_x"].as_array().unwrap().len();
        assert_eq!(n, 50);
        assert_eq!(v["train_y"].as_array().unwrap().len(), n);
        assert_eq!(v["train_x"][0].as_array().unwrap().len(), 1); // rows of d = 1
        let m = v["test_x"].as_array().unwrap().len();
        assert_eq!(m, 1003);
        for key in ["truth", "mean", "std"] {
            assert_eq!(v[key].as_array().unwrap().len(), m, "{key}");
        }
        assert_eq!(v["sigma"], 0.75);
        // The report points come last, with their labels.
        assert_eq!(v["report"][0]["label"], "x=-2.38");
        assert_eq!(v["test_x"][1000][0], -2.38);
        // Same arguments, same output; another repetition, other data.
        let again = json(&[
            "anchor",
            "experiments/e1.toml",
            "--setting",
            "f_main=2",
            "--rep",
            "3",
            "--json",
        ]);
        assert_eq!(v, again);
        let other = json(&[
            "anchor",
            "experiments/e1.toml",
            "--setting",
            "f_main=2",
            "--rep",
            "4",
            "--json",
        ]);
        assert_ne!(v["train_y"], other["train_y"]);
        assert_eq!(v["train_x"], other["train_x"]);
    }

    #[test]
    fn e2_and_hetero_specs_print_rows_and_sigma_per_point() {
        let v = json(&[
            "anchor",
            "experiments/e2.toml",
            "--setting",
            "d=2",
            "--json",
        ]);
        assert_eq!(v["train_x"].as_array().unwrap().len(), 900);
        assert_eq!(v["test_x"][0].as_array().unwrap().len(), 2);
        assert_eq!(v["test_x"][0], serde_json::json!([-5.0, -5.0]));
        let h = json(&["anchor", "experiments/cubic_hetero.toml", "--json"]);
        let sigma = h["sigma"]
            .as_array()
            .expect("σ(x) is printed per test point");
        let x = h["test_x"][0][0].as_f64().unwrap();
        assert!((sigma[0].as_f64().unwrap() - (0.1 + x * x)).abs() < 1e-12);
    }

    #[test]
    fn summary_mode_and_check_work_on_every_shipped_spec() {
        for entry in std::fs::read_dir(root().join("experiments")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let p = path.to_str().unwrap();
                let o = uqbench(&["check", p]);
                assert!(o.status.success(), "check {p}: {}", stderr(&o));
                let o = uqbench(&["anchor", p]);
                assert!(o.status.success(), "anchor {p}: {}", stderr(&o));
            }
        }
    }

    #[test]
    fn bad_settings_are_clear_errors() {
        let o = uqbench(&["anchor", "experiments/e1.toml", "--setting", "fmain=2"]);
        assert_clean_error(&o, &["fmain", "f_main"]);
        let o = uqbench(&["anchor", "experiments/e1.toml", "--setting", "f_main=abc"]);
        assert_clean_error(&o, &["abc", "not a finite number"]);
        let o = uqbench(&["anchor", "experiments/does-not-exist.toml"]);
        assert_clean_error(&o, &["does-not-exist.toml"]);
    }
}

mod bad_specs {
    use super::*;

    const GOOD: &str = r#"
name = "line"
seed = 1
[problem]
d = 1
sigma = 0.5
gamma = [1, 2]
features = [{ kind = "polynomial", degree = 1 }]
train = { kind = "uniform", n = 20, low = -1, high = 1 }
test = { kind = "grid", n = 11, low = -2, high = 2 }
"#;

    /// Writes GOOD with `from` replaced by `to` and runs `uqbench check` on it.
    fn check_with(from: &str, to: &str) -> Output {
        assert!(GOOD.contains(from), "{from}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spec.toml");
        std::fs::write(&path, GOOD.replace(from, to)).unwrap();
        uqbench(&["check", path.to_str().unwrap()])
    }

    #[test]
    fn the_good_spec_passes() {
        let o = check_with("seed = 1", "seed = 1");
        assert!(o.status.success(), "{}", stderr(&o));
    }

    #[test]
    fn negative_sigma() {
        assert_clean_error(
            &check_with("sigma = 0.5", "sigma = -0.5"),
            &["problem.sigma", "-0.5", "positive"],
        );
        // A noise function that is negative somewhere.
        assert_clean_error(
            &check_with("sigma = 0.5", "sigma = \"x\""),
            &["problem.sigma", "positive"],
        );
    }

    #[test]
    fn fewer_points_than_features() {
        assert_clean_error(&check_with("n = 20", "n = 1"), &["`line`", "N = 1 < p = 2"]);
    }

    #[test]
    fn unknown_feature_kind() {
        assert_clean_error(
            &check_with("kind = \"polynomial\"", "kind = \"chebyshev\""),
            &["chebyshev", "polynomial"],
        );
    }

    #[test]
    fn empty_range() {
        assert_clean_error(
            &check_with("low = -1, high = 1", "low = 1, high = 1"),
            &["problem.train", "low < high"],
        );
    }

    #[test]
    fn unknown_key_and_bad_expression() {
        assert_clean_error(&check_with("seed = 1", "seed = 1\nsedd = 2"), &["sedd"]);
        assert_clean_error(
            &check_with("sigma = 0.5", "sigma = \"0.5 * f_main\""),
            &["f_main", "unknown name"],
        );
        assert_clean_error(
            &check_with("gamma = [1, 2]", "gamma = [1, 2, 3]"),
            &["problem.gamma", "p = 2"],
        );
    }

    #[test]
    fn rank_deficient_design() {
        // All training inputs equal: a line is not determined.
        assert_clean_error(
            &check_with(
                "train = { kind = \"uniform\", n = 20, low = -1, high = 1 }",
                "train = { kind = \"points\", points = [[0.5], [0.5], [0.5]] }",
            ),
            &["rank deficient", "rank 1 of p = 2"],
        );
    }
}

#[test]
fn backends_lists_every_backend() {
    let o = uqbench(&["backends"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for name in ["flex", "ndarray", "wgpu"] {
        assert!(out.contains(name), "{out}");
    }
}

#[test]
fn a_wgpu_run_merges_small_jobs_and_completes() {
    // E1 quick with BD on wgpu (lavapipe in CI, allowed on purpose): the dropout method's
    // blocks of 5 repetitions (5 replicas each) are merged into one job per setting, and the
    // run writes every output; the anchor still covers.
    if std::env::var("UQBENCH_SKIP_WGPU").is_ok_and(|v| v == "1") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let o = uqbench(&[
        "run",
        "experiments/e1.toml",
        "--profile",
        "quick",
        "--methods",
        "BD",
        "--backend",
        "wgpu",
        "--allow-software-gpu",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("f_main=1 BD repetitions 0..20"), "{err}");
    assert!(dir.join("summary.csv").is_file());
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["backend"], "wgpu");
}

#[test]
fn a_software_gpu_is_refused_unless_allowed() {
    // On the test machines (CI: no GPU) wgpu's adapter is lavapipe (llvmpipe), a software
    // rasterizer: `backends` names it as such, and a wgpu run on it is a clear error without
    // --allow-software-gpu that leaves no run directory behind.
    if std::env::var("UQBENCH_SKIP_WGPU").is_ok_and(|v| v == "1") {
        return;
    }
    let o = uqbench(&["backends"]);
    let out = String::from_utf8_lossy(&o.stdout);
    if !out.contains("software rasterizer") {
        // A machine with a real GPU: nothing to refuse; the adapter is named as a GPU.
        assert!(out.contains("(GPU)"), "{out}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_uqbench"))
        .args([
            "run",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--backend",
            "wgpu",
            "--out",
            dir.to_str().unwrap(),
        ])
        .current_dir(root())
        .env_remove("UQBENCH_ALLOW_SOFTWARE_GPU")
        .output()
        .unwrap();
    assert_clean_error(
        &o,
        &[
            "software rasterizer",
            "--allow-software-gpu",
            "--backend flex",
        ],
    );
    assert!(!dir.exists(), "a refused run must not create its directory");
}

mod metrics_command {
    use super::*;

    fn metrics(input: &str, extra: &[&str]) -> Output {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.json");
        std::fs::write(&path, input).unwrap();
        let mut args = vec!["metrics", "--input", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        uqbench(&args)
    }

    fn value(o: &Output) -> serde_json::Value {
        assert!(o.status.success(), "{}", stderr(o));
        serde_json::from_slice(&o.stdout).unwrap()
    }

    #[test]
    fn regression_metrics_by_hand() {
        let v = value(&metrics(
            r#"{"kind": "regression", "mean": [0, 1], "std": [1, 2], "y": [1, 3],
                "samples": [[3, 0, 1], [1, 1, 1]]}"#,
            &[],
        ));
        // NLL = mean(½ ln 2π + ½, ½ ln 8π + ½) (see crates/metrics/src/regression.rs).
        let nll = (1.418_938_533_204_672_7 + 2.112_085_713_764_618) / 2.0;
        assert!((v["nll"].as_f64().unwrap() - nll).abs() < 1e-12);
        assert!((v["rmse"].as_f64().unwrap() - 2.5f64.sqrt()).abs() < 1e-12);
        assert!((v["mae"].as_f64().unwrap() - 1.5).abs() < 1e-12);
        // Sample CRPS: {0, 1, 3} at y = 1 is 1/3; the point mass {1,1,1} at y = 3 is 2.
        assert!((v["crps_samples"].as_f64().unwrap() - (1.0 / 3.0 + 2.0) / 2.0).abs() < 1e-12);
        for key in [
            "crps",
            "coverage_0.95",
            "width_0.95",
            "interval_score_0.7",
            "miscalibration_area",
        ] {
            assert!(v[key].is_number(), "{key} missing: {v}");
        }
        // Both points lie within 1 sd, so every interval of level ≥ 0.7 covers both.
        assert_eq!(v["coverage_0.7"], 1.0);
    }

    #[test]
    fn classification_metrics_by_hand() {
        let v = value(&metrics(
            r#"{"kind": "classification", "probs": [[0.9, 0.1], [0.3, 0.7], [0.6, 0.4], [0.05, 0.95]],
                "labels": [0, 1, 1, 0]}"#,
            &["--bins", "5"],
        ));
        // The ECE worked by hand in crates/metrics/src/classification.rs.
        assert!((v["ece"].as_f64().unwrap() - 0.2875).abs() < 1e-12);
        assert_eq!(v["accuracy"], 0.5);
        // Brier: (0.02 + 0.18 + 0.72 + 1.805) / 4.
        assert!((v["brier"].as_f64().unwrap() - 2.725 / 4.0).abs() < 1e-12);
        // AUC of p(class 1) = 0.1, 0.7, 0.4, 0.95 for labels 0,1,1,0: pairs (pos > neg):
        // 0.7 > 0.1, 0.4 > 0.1 → 2 of 4.
        assert_eq!(v["auc"], 0.5);
        for key in [
            "rmsce",
            "sce",
            "ace",
            "tace",
            "nll",
            "brier_reliability",
            "reliability_diagram",
        ] {
            assert!(!v[key].is_null(), "{key} missing: {v}");
        }
    }

    #[test]
    fn bad_inputs_are_clear_errors() {
        let o = metrics(
            r#"{"kind": "regression", "mean": [0, 1], "std": [1], "y": [1, 3]}"#,
            &[],
        );
        assert_clean_error(&o, &["lengths differ", "mean and std"]);
        let o = metrics(
            r#"{"kind": "regression", "mean": [0], "std": [-1], "y": [1]}"#,
            &[],
        );
        assert_clean_error(&o, &["std[0]", "-1"]);
        let o = metrics(
            r#"{"kind": "classification", "probs": [[0.5, 0.6]], "labels": [0]}"#,
            &[],
        );
        assert_clean_error(&o, &["sum of probs[0]"]);
        let o = metrics(r#"{"kind": "ranking"}"#, &[]);
        assert_clean_error(&o, &["not a metrics input"]);
    }
}

mod export_and_score {
    use super::*;

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
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
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
                // The training fit is the anchor's own; external predictions carry none.
                if ["train_mse", "fit_ratio"].contains(&metric.as_str()) {
                    assert!(ext["aggregate"][region][metric].is_null());
                    continue;
                }
                assert_eq!(
                    v, &ext["aggregate"][region][metric],
                    "aggregate {region}/{metric} differs"
                );
            }
        }
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

    #[test]
    fn csv_and_sample_predictions_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("preds/default");
        std::fs::create_dir_all(&sub).unwrap();
        let a = uqbench(&["anchor", "experiments/cubic.toml", "--json"]);
        let a: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
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
        let o = uqbench(&[
            "score",
            "experiments/cubic.toml",
            "--predictions",
            dir.path().join("preds").to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
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
}

mod bench {
    use super::*;

    fn bench_json(backend: &str) -> serde_json::Value {
        // CI's wgpu adapter is lavapipe, a software rasterizer: allowed here on purpose.
        let o = uqbench(&[
            "bench",
            "train",
            "--replicas",
            "16",
            "--epochs",
            "20",
            "--n",
            "50",
            "--backend",
            backend,
            "--json",
            "--allow-software-gpu",
        ]);
        assert!(o.status.success(), "{backend}: {}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(text.lines().count(), 1, "one JSON line: {text}");
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn bench_prints_one_json_line_and_backends_agree() {
        let flex = bench_json("flex");
        for key in [
            "backend",
            "replicas",
            "epochs",
            "n",
            "seconds",
            "replica_epochs_per_s",
            "gflops",
            "final_objective",
        ] {
            assert!(!flex[key].is_null(), "{key} missing: {flex}");
        }
        assert_eq!(flex["replicas"], 16);
        let reference = flex["final_objective"].as_f64().unwrap();
        let mut others = vec!["ndarray"];
        if std::env::var("UQBENCH_SKIP_WGPU").map_or(true, |v| v != "1") {
            others.push("wgpu");
        }
        for backend in others {
            let v = bench_json(backend);
            let loss = v["final_objective"].as_f64().unwrap();
            // The benchmark's promise: same seed, 20 epochs, same final loss within 1e-4 relative.
            assert!(
                (loss - reference).abs() <= 1e-4 * reference,
                "{backend}: {loss} vs flex {reference}"
            );
        }
    }

    #[test]
    fn uploads_and_reads_do_not_grow_with_the_epochs() {
        // Full-batch training keeps the data, weights and moments on the device: per chunk, the
        // weights and biases (8), x, y and the test inputs (3) go up once, and the objective,
        // the predictions and the training fit (3) come back once, whatever the number of
        // epochs. On flex and,
        // unless deliberately skipped, on wgpu (lavapipe).
        let mut backends = vec!["flex"];
        if std::env::var("UQBENCH_SKIP_WGPU").map_or(true, |v| v != "1") {
            backends.push("wgpu");
        }
        for backend in backends {
            let run = |epochs: &str| -> serde_json::Value {
                let o = uqbench(&[
                    "bench",
                    "train",
                    "--replicas",
                    "8",
                    "--epochs",
                    epochs,
                    "--backend",
                    backend,
                    "--chunk",
                    "4",
                    "--json",
                    "--allow-software-gpu",
                ]);
                assert!(o.status.success(), "{backend}: {}", stderr(&o));
                serde_json::from_slice(&o.stdout).unwrap()
            };
            let (short, long) = (run("2"), run("6"));
            assert_eq!(short["chunks"], 2, "{backend}: {short}");
            assert_eq!(long["steps"], 2 * 6, "{backend}: {long}");
            if backend == "wgpu" {
                // Operations are counted in burn's fusion server (engine/ops.rs). Every
                // optimiser step issues the same operations, so the count is affine in the
                // steps: (long − short) / (12 − 4) steps is the per-step count, exactly. For
                // this network (4 layers, 8 parameter tensors) it is 174: forward and
                // backward about 8 per layer, Adam with decay 14 per parameter tensor, the
                // objective and its divergence check a few more. The bound 200 leaves room
                // for burn's own bookkeeping to change, and catches any per-step work that
                // grows (a host round trip adds operations; a loop over replicas multiplies
                // them).
                let count = |v: &serde_json::Value, key: &str| v[key].as_u64().unwrap();
                let per_step =
                    (count(&long, "operations") - count(&short, "operations")) as f64 / 8.0;
                assert_eq!(per_step.fract(), 0.0, "{short} {long}");
                assert!(per_step > 0.0 && per_step <= 200.0, "{per_step} per step");
                let blocks = (count(&long, "blocks") - count(&short, "blocks")) as f64 / 8.0;
                assert!(
                    blocks > 0.0 && blocks <= per_step,
                    "{blocks} blocks per step"
                );
                let again = run("10");
                assert_eq!(
                    count(&again, "operations") - count(&long, "operations"),
                    count(&long, "operations") - count(&short, "operations"),
                    "four more epochs add the same operations again"
                );
            } else {
                // No fusion server on the CPU: nothing is counted, and nothing is made up.
                assert!(short["operations"].is_null(), "{short}");
            }
            for key in ["uploads", "reads"] {
                assert_eq!(
                    short[key], long[key],
                    "{backend}: {key} grew with the epochs"
                );
            }
            assert_eq!(short["uploads"], 2 * (8 + 3), "{backend}: {short}");
            assert_eq!(short["reads"], 2 * 3, "{backend}: {short}");
        }
    }

    #[test]
    fn the_autodiff_route_benchmarks_too() {
        // EnsMCD through burn autodiff on the same trainer: its own figure, and it trains (the
        // mean final objective ends below the ½·variance of the targets, about 0.25 for
        // y = sin(x) + noise on [−4, 4], after 100 epochs).
        let o = uqbench(&[
            "bench",
            "train",
            "--replicas",
            "8",
            "--epochs",
            "100",
            "--route",
            "autodiff",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["route"], "autodiff");
        assert!(v["replica_epochs_per_s"].as_f64().unwrap() > 0.0);
        let objective = v["final_objective"].as_f64().unwrap();
        assert!(objective.is_finite() && objective < 0.2, "{v}");
        assert_eq!(v["diverged"], 0);
    }

    #[test]
    fn wgpu_without_an_adapter_is_a_clear_error() {
        let o = Command::new(env!("CARGO_BIN_EXE_uqbench"))
            .args([
                "bench",
                "train",
                "--replicas",
                "2",
                "--epochs",
                "1",
                "--backend",
                "wgpu",
            ])
            .env("VK_ICD_FILENAMES", "/nonexistent.json")
            .env("VK_DRIVER_FILES", "/nonexistent.json")
            .output()
            .unwrap();
        assert_clean_error(&o, &["wgpu", "no Vulkan adapter", "--backend flex"]);
    }
}

mod run {
    use super::*;
    use std::time::{Duration, Instant};

    fn run_quick(out: &Path, extra: &[&str]) -> Output {
        let mut args = vec![
            "run",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        uqbench(&args)
    }

    fn count_files(dir: &Path) -> usize {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .map(|e| {
                let p = e.unwrap().path();
                if p.is_dir() {
                    count_files(&p)
                } else {
                    1
                }
            })
            .sum()
    }

    #[test]
    fn the_quartic_study_runs_every_002_method_across_widths() {
        // [002]'s study on its quick profile: two widths, every method, HMC's diagnostics in
        // the aggregates, the GP identical across widths (the data do not depend on them).
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("quartic");
        let o = uqbench(&[
            "run",
            "experiments/quartic_gap.toml",
            "--profile",
            "quick",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let settings = summary["settings"].as_array().unwrap();
        assert_eq!(settings.len(), 2);
        for s in settings {
            let methods = s["methods"].as_object().unwrap();
            for m in ["BLR", "Ens", "Bootstrap", "MFVI", "HMC", "GP"] {
                assert!(methods.contains_key(m), "{m} missing");
            }
            let hmc = &methods["HMC"]["aggregate"]["all"];
            for key in [
                "rhat_max",
                "ess_bulk_min",
                "ess_tail_min",
                "ebfmi_min",
                "reference_grade",
                "accept_rate",
                "sampled_noise_sd",
            ] {
                assert!(hmc[key]["value"].is_number(), "HMC {key}: {hmc}");
            }
        }
        let gp = |i: usize| settings[i]["methods"]["GP"]["aggregate"]["in"]["cicp_0.9"].clone();
        assert_eq!(gp(0), gp(1));
        assert!(out.join("figures/aggregates.png").is_file());
    }

    #[test]
    fn the_classification_track_runs_end_to_end() {
        // [002]'s two-class problem on its quick profile: every method with the Bernoulli
        // head, the deterministic baseline, the classification metrics in the long-format
        // files, the figures, `report`, `anchor` and `score` with the exact probabilities.
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("tcc");
        let o = uqbench(&[
            "run",
            "experiments/tcc.toml",
            "--profile",
            "quick",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let methods = summary["settings"][0]["methods"].as_object().unwrap();
        let mut names: Vec<&str> = methods.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "BD",
                "Bootstrap",
                "CD",
                "Det",
                "Ens",
                "EnsAdvA",
                "EnsMCD",
                "HMC",
                "MFVI",
                "VD"
            ]
        );
        for (name, m) in methods {
            let all = &m["aggregate"]["all"];
            let v = |k: &str| all[k]["value"].as_f64().unwrap_or(f64::NAN);
            // The quick nets (60 epochs) are far from the exact P, but they rank: every
            // method's AUC on fresh labels is well above chance.
            assert!(v("auc") > 0.6, "{name}: AUC {}", v("auc"));
            for k in [
                "coverage_0.9",
                "width_0.9",
                "ece",
                "accuracy",
                "brier",
                "nll",
            ] {
                assert!(v(k).is_finite() && v(k) >= 0.0, "{name}: {k} = {}", v(k));
            }
            assert!(v("coverage_0.9") <= 1.0 && v("ece") <= 1.0);
            assert!(v("referral_accuracy_0.5").is_finite() && v("random_auc_0.75").is_finite());
            assert!(m["aggregate"]["in"]["coverage_0.9"]["value"].is_number());
            assert_eq!(m["per_repetition"]["ece"].as_array().unwrap().len(), 4);
        }
        // The deterministic net has one draw: a zero-width interval and no mutual information.
        let det = &methods["Det"]["aggregate"]["all"];
        assert_eq!(det["width_0.9"]["value"].as_f64(), Some(0.0));
        assert_eq!(det["mutual_information"]["value"].as_f64(), Some(0.0));
        let ens = &methods["Ens"]["aggregate"]["all"];
        assert!(ens["width_0.9"]["value"].as_f64().unwrap() > 0.0);
        let aggregate = std::fs::read_to_string(out.join("aggregate.csv")).unwrap();
        for needle in [
            "width=5,Ens,all,ece,",
            "width=5,Det,in,coverage_0.9,",
            "width=5,BD,all,referral_auc_0.5,",
            "width=5,CD,all,random_accuracy_0.5,",
            "width=5,VD,all,brier_reliability,",
            "width=5,EnsMCD,all,reliability_accuracy_",
        ] {
            assert!(aggregate.contains(needle), "aggregate.csv lacks {needle}");
        }
        let points = std::fs::read_to_string(out.join("summary.csv")).unwrap();
        assert!(points.contains(",Ens,0,") && points.contains(",mutual_information,"));
        for f in ["probability_maps", "reliability", "referral"] {
            assert!(
                out.join(format!("figures/{f}_width=5.png")).is_file(),
                "{f}"
            );
        }
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(
            report.contains("| Det |") && report.contains("referral 0.5"),
            "{report}"
        );
        let o = uqbench(&["report", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            std::fs::read_to_string(out.join("aggregate.csv")).unwrap(),
            aggregate,
            "report re-summarises to the same numbers"
        );

        // `anchor`: labels, the exact P(y = 1 | x) and the regions of the test grid.
        // The run's resolved spec carries the quick profile (60 training inputs, a 9 × 9 grid).
        let resolved = out.join("spec.resolved.toml");
        let anchor = |rep: u64| -> serde_json::Value {
            let o = uqbench(&[
                "anchor",
                resolved.to_str().unwrap(),
                "--rep",
                &rep.to_string(),
                "--json",
            ]);
            assert!(o.status.success(), "{}", stderr(&o));
            serde_json::from_slice(&o.stdout).unwrap()
        };
        let a = anchor(0);
        assert!(a["anchor"].is_null());
        assert_eq!(a["train_x"].as_array().unwrap().len(), 60);
        let labels = a["train_y"].as_array().unwrap();
        assert!(labels.iter().all(|y| y == 0.0 || y == 1.0));
        assert!(labels.iter().any(|y| y == 1.0) && labels.iter().any(|y| y == 0.0));
        let truth: Vec<f64> = a["truth"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(truth.len(), 81);
        assert!(truth.iter().all(|p| (0.0..=1.0).contains(p)));
        let regions = a["region"].as_array().unwrap();
        assert!(regions.iter().any(|r| r == "in") && regions.iter().any(|r| r == "out"));

        // `score` with the exact probabilities: coverage 1, width 0, no error; and with the
        // draws form. Probabilities outside [0, 1] are a clean error naming the file.
        let preds = tmp.path().join("preds/width=5");
        std::fs::create_dir_all(&preds).unwrap();
        for r in 0..3 {
            let p = serde_json::json!({ "probs": truth });
            std::fs::write(preds.join(format!("rep-{r:03}.json")), p.to_string()).unwrap();
        }
        let draws: Vec<Vec<f64>> = truth.iter().map(|&p| vec![p, p]).collect();
        std::fs::write(
            preds.join("rep-003.json"),
            serde_json::json!({ "probs": draws }).to_string(),
        )
        .unwrap();
        let scored = tmp.path().join("scored");
        let score = |extra: &[&str]| {
            let mut args = vec![
                "score",
                resolved.to_str().unwrap(),
                "--predictions",
                tmp.path().join("preds").to_str().unwrap(),
                "--out",
                scored.to_str().unwrap(),
                "--levels",
                "0.9",
            ]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>();
            args.extend(extra.iter().map(|s| s.to_string()));
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            uqbench(&refs)
        };
        let o = score(&[]);
        assert!(o.status.success(), "{}", stderr(&o));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(scored.join("summary.json")).unwrap())
                .unwrap();
        let all = &s["settings"][0]["methods"]["external"]["aggregate"]["all"];
        assert_eq!(all["coverage_0.9"]["value"].as_f64(), Some(1.0));
        assert_eq!(all["width_0.9"]["value"].as_f64(), Some(0.0));
        assert_eq!(all["abs_error"]["value"].as_f64(), Some(0.0));
        let mut bad = truth.clone();
        bad[5] = 1.5;
        std::fs::write(
            preds.join("rep-001.json"),
            serde_json::json!({ "probs": bad }).to_string(),
        )
        .unwrap();
        assert_clean_error(
            &score(&[]),
            &["rep-001.json", "test input 5", "1.5", "[0, 1]"],
        );

        // λ ≤ 0 names the key.
        let text = std::fs::read_to_string(root().join("experiments/tcc.toml")).unwrap();
        let spec = tmp.path().join("bad.toml");
        std::fs::write(&spec, text.replace("lambda_rot = 0.4", "lambda_rot = 0")).unwrap();
        assert_clean_error(
            &uqbench(&["check", spec.to_str().unwrap()]),
            &["classification.lambda_rot", "positive"],
        );
        // A method without a Bernoulli likelihood is refused with the list of those that have.
        std::fs::write(
            &spec,
            text.replace("methods = [\"Det\",", "methods = [\"GP\", \"Det\","),
        )
        .unwrap();
        let o = uqbench(&[
            "run",
            spec.to_str().unwrap(),
            "--profile",
            "quick",
            "--quiet",
            "--methods",
            "GP",
            "--out",
            tmp.path().join("gp").to_str().unwrap(),
        ]);
        assert_clean_error(&o, &["method GP", "classification", "EnsMCD"]);
    }

    #[test]
    fn the_boston_surrogate_runs_without_an_anchor() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("boston");
        let o = uqbench(&[
            "run",
            "experiments/boston.toml",
            "--profile",
            "quick",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let methods = summary["settings"][0]["methods"].as_object().unwrap();
        let names: Vec<&str> = methods.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["Bootstrap", "CD", "EnsNLL"],
            "no BLR: there is no anchor"
        );
        // [004]'s 80% level comes first: the histograms are drawn at it, and every method has
        // a marginal PICP per repetition.
        for m in names {
            let picp = methods[m]["per_repetition"]["picp_0.8"].as_array().unwrap();
            assert_eq!(picp.len(), 10, "{m}");
            assert!(picp
                .iter()
                .all(|v| (0.0..=1.0).contains(&v.as_f64().unwrap())));
        }
        let figure = out.join("figures/marginal_picp_hist_default.png");
        assert!(figure.is_file());
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(report.contains("by the 80% interval"), "{report}");
        // The recorded spec lists every method run (none is taken for the anchor), so the
        // run directory re-summarises.
        let o = uqbench(&["report", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        // `anchor` prints the data, f and σ(x) with a null anchor.
        let o = uqbench(&["anchor", "experiments/boston.toml", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v["anchor"].is_null());
        assert_eq!(v["train_x"].as_array().unwrap().len(), 366);
        assert_eq!(v["train_x"][0].as_array().unwrap().len(), 13);
        assert_eq!(v["validation_y"].as_array().unwrap().len(), 40);
        assert_eq!(v["truth"].as_array().unwrap().len(), 100);
        assert_eq!(v["sigma"].as_array().unwrap().len(), 100);
        // A data file with a missing value names the file, line and column.
        let text = std::fs::read_to_string(root().join("experiments/boston.toml")).unwrap();
        let csv = tmp.path().join("holes.csv");
        std::fs::write(&csv, "a,b,MEDV\n1,2,3\n4,,6\n7,8,9\n").unwrap();
        let spec = tmp.path().join("holes.toml");
        std::fs::write(
            &spec,
            text.replace("assets/boston/boston.csv", csv.to_str().unwrap()),
        )
        .unwrap();
        let o = uqbench(&["check", spec.to_str().unwrap()]);
        assert_clean_error(&o, &["holes.csv, line 3, column b", "empty field"]);
        // A split larger than the data names the key and the data's size.
        std::fs::write(&spec, text.replace("train = 366", "train = 500")).unwrap();
        let o = uqbench(&["check", spec.to_str().unwrap()]);
        assert_clean_error(&o, &["surrogate.split", "506 rows"]);
    }

    #[test]
    fn e1_quick_produces_every_output_and_the_anchor_covers() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("run");
        let o = run_quick(&out, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        for file in [
            "spec.resolved.toml",
            "run.json",
            "summary.json",
            "summary.csv",
            "aggregate.csv",
            "report.md",
        ] {
            assert!(out.join(file).is_file(), "{file} missing");
        }
        for stem in [
            "bands_f_main=1",
            "bands_f_main=2",
            "coverage_hist_f_main=1",
            "picf_hist_f_main=1",
            "marginal_picp_hist_f_main=1",
            "coverage_along_f_main=2",
            "complexity",
        ] {
            for ext in ["svg", "png"] {
                let f = out.join("figures").join(format!("{stem}.{ext}"));
                assert!(
                    std::fs::metadata(&f)
                        .map(|m| m.len() > 1000)
                        .unwrap_or(false),
                    "{} missing or empty",
                    f.display()
                );
            }
        }
        // 2 settings × 8 methods (seven and the anchor) × 20 repetitions.
        assert_eq!(count_files(&out.join("reps")), 2 * 8 * 20);
        let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        for col in [
            "setting", "method", "point", "x1", "metric", "value", "stderr",
        ] {
            assert!(header.contains(&col), "summary.csv lacks column {col}");
        }
        for method in ["BLR", "BD", "CD", "VD", "Ens", "EnsAdvA", "EnsBS"] {
            assert!(
                csv.contains(&format!(",{method},")),
                "{method} missing from summary.csv"
            );
        }
        for metric in [
            "deviation",
            "uncertainty",
            "coverage",
            "cicf_0.9",
            "uncertainty_ratio",
        ] {
            assert!(
                csv.contains(&format!(",{metric},")),
                "{metric} missing from summary.csv"
            );
        }
        // The anchor's coverage, averaged over the test inputs, lies in its binomial band:
        // each input's coverage over k = 20 repetitions has sd sqrt(0.95·0.05/20) = 0.0487, so
        // the average (whatever the correlation between inputs) has sd ≤ 0.0487; 4 sd = 0.195.
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        for setting in s["settings"].as_array().unwrap() {
            let cov = setting["methods"]["BLR"]["aggregate"]["all"]["coverage"]["value"]
                .as_f64()
                .unwrap();
            assert!(
                (cov - 0.95).abs() < 0.195,
                "{}: anchor coverage {cov}",
                setting["setting"]
            );
            assert!(setting["methods"]["CD"]["aggregate"]["all"]["learned_p"]["value"].is_number());
            // The anchor's training fit: E[RSS/σ²]/N = 1 − p/N = 1 − 4/50 = 0.92; per
            // repetition RSS/σ² ~ χ²₄₆, so the mean over 20 has sd sqrt(2·46)/50/sqrt(20) = 0.043:
            // 4 sd = 0.17.
            let fit = setting["methods"]["BLR"]["aggregate"]["all"]["fit_ratio"]["value"]
                .as_f64()
                .unwrap();
            assert!((fit - 0.92).abs() < 0.17, "anchor fit ratio {fit}");
            for method in ["BD", "CD", "VD", "Ens", "EnsAdvA", "EnsBS"] {
                let a = &setting["methods"][method]["aggregate"]["all"];
                assert!(a["train_mse"]["value"].as_f64().unwrap() > 0.0, "{method}");
                assert!(a["final_objective"]["value"].is_number(), "{method}");
            }
        }
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(report.contains("figures/complexity.png") && report.contains("| BLR |"));

        // `uqbench report` redraws from the stored results without retraining.
        std::fs::remove_dir_all(out.join("figures")).unwrap();
        std::fs::remove_file(out.join("report.md")).unwrap();
        let before = std::fs::read(out.join("summary.json")).unwrap();
        let o = uqbench(&["report", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(out.join("figures/complexity.svg").is_file() && out.join("report.md").is_file());
        assert_eq!(before, std::fs::read(out.join("summary.json")).unwrap());

        // An existing run is not overwritten without --resume.
        let o = run_quick(&out, &[]);
        assert_clean_error(&o, &["already holds a run", "--resume"]);
    }

    #[test]
    fn a_killed_run_resumes_and_shards_merge_to_the_same_results() {
        let tmp = tempfile::tempdir().unwrap();
        let full = tmp.path().join("full");
        let o = run_quick(&full, &[]);
        assert!(o.status.success(), "{}", stderr(&o));
        let reference = std::fs::read(full.join("summary.json")).unwrap();

        // Kill a run as soon as its first results are on disk, then resume it.
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
        while count_files(&part.join("reps")) == 0 && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let partial = count_files(&part.join("reps"));
        assert!(
            partial > 0 && partial < 2 * 8 * 20,
            "killed after {partial} result files"
        );
        assert!(!part.join("summary.json").exists());
        let o = run_quick(&part, &["--resume"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            std::fs::read(part.join("summary.json")).unwrap(),
            reference,
            "resumed run differs"
        );

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
        let files = (count_files(&s0.join("reps")), count_files(&s1.join("reps")));
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
    }

    /// Every file under `dir`, relative to it.
    fn files_under(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p.strip_prefix(dir).unwrap().to_path_buf());
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_repetition_depends_on_nothing_but_itself() {
        // For every method of the quick profiles of E1, [002]'s quartic and its two-class
        // problem (HMC, MFVI, the GP and the classification heads included), repetitions 2
        // and 3 run alone (`--reps 2..4`, which cuts the work units of E1 and the quartic)
        // are bit-identical to the same repetitions of the full run.
        let tmp = tempfile::tempdir().unwrap();
        for spec in ["e1", "quartic_gap", "tcc"] {
            let path = format!("experiments/{spec}.toml");
            let full = tmp.path().join(format!("{spec}-full"));
            let part = tmp.path().join(format!("{spec}-part"));
            for (dir, extra) in [(&full, None), (&part, Some("2..4"))] {
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
                    name == "rep-002.json" || name == "rep-003.json",
                    "{spec}: {f:?}"
                );
                methods.insert(f.parent().unwrap().to_path_buf());
                assert_eq!(
                    std::fs::read(part.join("reps").join(f)).unwrap(),
                    std::fs::read(full.join("reps").join(f)).unwrap(),
                    "{spec}: {f:?} differs from the full run's"
                );
            }
            assert_eq!(files.len(), 2 * methods.len(), "{spec}");
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(part.join("run.json")).unwrap())
                    .unwrap();
            assert_eq!(meta["reps"], "2..4");
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

    #[test]
    fn the_readme_example_method_runs_on_a_quick_spec() {
        // The "Add your own method" example: an ensemble of MC-dropout networks.
        let tmp = tempfile::tempdir().unwrap();
        let spec = tmp.path().join("ensmcd.toml");
        let text = std::fs::read_to_string(root().join("experiments/cubic.toml")).unwrap();
        let base = &text[..text.find("\n[run]").unwrap()];
        std::fs::write(
            &spec,
            format!(
                "{base}\n[run]\nrepetitions = 4\nepochs = 40\nmethods = [\"EnsMCD\", \"Ens\"]\n\n\
                 [methods.EnsMCD]\nmembers = 3\npasses = 5\n\n[methods.Ens]\nmembers = 3\n"
            ),
        )
        .unwrap();
        let out = tmp.path().join("run");
        let o = uqbench(&[
            "run",
            spec.to_str().unwrap(),
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let m = &s["settings"][0]["methods"]["EnsMCD"];
        assert_eq!(m["repetitions"], 4);
        assert!(
            m["aggregate"]["all"]["uncertainty"]["value"]
                .as_f64()
                .unwrap()
                > 0.0
        );
    }

    /// A spec with cubic.toml's problem and the given `[run]` and method tables.
    fn cubic_spec(dir: &Path, rest: &str) -> PathBuf {
        let text = std::fs::read_to_string(root().join("experiments/cubic.toml")).unwrap();
        let base = &text[..text.find("\n[run]").unwrap()];
        let spec = dir.join("spec.toml");
        std::fs::write(&spec, format!("{base}\n{rest}")).unwrap();
        spec
    }

    fn summary(out: &Path) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
    }

    #[test]
    fn a_diverging_method_is_counted_and_the_run_completes() {
        // lr = 1e30 sends the weights to 1e30 after one Adam step: the outputs overflow f32.
        let tmp = tempfile::tempdir().unwrap();
        let spec = cubic_spec(
            tmp.path(),
            "[run]\nrepetitions = 3\nepochs = 5\nmethods = [\"Ens\", \"Wild\", \"BD\"]\n\n\
             [methods.Ens]\nmembers = 3\n\n[methods.Wild]\nkind = \"Ens\"\nmembers = 3\nlr = 1e30\n\n\
             [methods.BD]\nlr = 1e30\npasses = 4\n",
        );
        let out = tmp.path().join("run");
        let o = uqbench(&[
            "run",
            spec.to_str().unwrap(),
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let s = summary(&out);
        let methods = &s["settings"][0]["methods"];
        assert_eq!(methods["Ens"]["repetitions"], 3);
        assert_eq!(methods["Ens"]["diverged"].as_array().unwrap().len(), 0);
        for wild in ["Wild", "BD"] {
            assert_eq!(methods[wild]["repetitions"], 0, "{wild}");
            assert_eq!(
                methods[wild]["diverged"],
                serde_json::json!([0, 1, 2]),
                "{wild}"
            );
        }
        // The stored repetition reads back (its non-finite numbers are null), and the counts
        // reach both CSV files and the report.
        let rep = std::fs::read_to_string(out.join("reps/default/Wild/rep-001.json")).unwrap();
        assert!(
            rep.contains("\"diverged\":true") && rep.contains("null"),
            "{rep}"
        );
        let agg = std::fs::read_to_string(out.join("aggregate.csv")).unwrap();
        assert!(agg.contains(",Wild,all,diverged,3,") && agg.contains(",Ens,all,diverged,0,"));
        let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
        assert!(csv
            .lines()
            .any(|l| l.starts_with(",Wild,") && l.contains(",diverged,3,")));
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(report.contains("3 of 3 repetitions diverged"), "{report}");
        // `uqbench report` reads the diverged files back.
        let o = uqbench(&["report", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
    }

    #[test]
    fn method_settings_sweep_like_problem_numbers() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = cubic_spec(
            tmp.path(),
            "[sweep]\nwidth = [2, 5]\n\n[run]\nrepetitions = 3\nepochs = 10\nmethods = [\"Ens\"]\n\n\
             [methods.Ens]\nmembers = 2\nhidden = [\"width\", \"2 * width\"]\nweight_decay = \"1e-3 / width\"\n",
        );
        let out = tmp.path().join("run");
        let o = uqbench(&[
            "run",
            spec.to_str().unwrap(),
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let s = summary(&out);
        let settings = s["settings"].as_array().unwrap();
        let labels: Vec<&str> = settings
            .iter()
            .map(|s| s["setting"].as_str().unwrap())
            .collect();
        assert_eq!(labels, ["width=2", "width=5"]);
        // The problem does not read `width`: both settings share their data, so the anchor's
        // results agree exactly, while the ensembles differ.
        assert_eq!(settings[0]["methods"]["BLR"], settings[1]["methods"]["BLR"]);
        assert_ne!(
            settings[0]["methods"]["Ens"]["points"]["deviation"],
            settings[1]["methods"]["Ens"]["points"]["deviation"]
        );
        let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
        assert!(csv.contains("\nwidth=2,Ens,") && csv.contains("\nwidth=5,Ens,"));
        assert!(out.join("figures/aggregates.svg").is_file());
        // A width of 0 is an error naming the method, the setting and the widths.
        let spec = cubic_spec(
            tmp.path(),
            "[sweep]\nwidth = [0, 5]\n\n[run]\nrepetitions = 2\nepochs = 5\nmethods = [\"Ens\"]\n\n\
             [methods.Ens]\nhidden = [\"width\"]\n",
        );
        let o = uqbench(&[
            "run",
            spec.to_str().unwrap(),
            "--out",
            tmp.path().join("bad").to_str().unwrap(),
        ]);
        assert_clean_error(
            &o,
            &["`Ens` at setting width=0", "every width must be at least 1"],
        );
    }

    #[test]
    fn bad_runs_are_clear_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("x");
        let o = uqbench(&[
            "run",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--methods",
            "MCMC",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_clean_error(&o, &["--methods MCMC", "BD"]);
        let o = uqbench(&[
            "run",
            "experiments/e1.toml",
            "--profile",
            "fast",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_clean_error(&o, &["--profile fast", "quick"]);
        // A spec naming an unknown method, and one with a misspelt run key.
        let text = std::fs::read_to_string(root().join("experiments/cubic.toml")).unwrap();
        let base = &text[..text.find("\n[run]").unwrap()];
        for (extra, needles) in [
            ("[run]\nrepetitions = 2\nepochs = 5\nmethods = [\"NUTS\"]\n", vec!["unknown method `NUTS`", "EnsBS"]),
            ("[run]\nrepetitions = 2\nepochs = 5\nmethods = [\"Ens\"]\nrepetitons = 3\n", vec!["repetitons"]),
            ("[run]\nrepetitions = 2\nepochs = 5\nmethods = [\"Ens\"]\n[methods.Ens]\nmemebrs = 3\n", vec!["memebrs", "methods.Ens"]),
            ("[run]\nrepetitions = 2\nepochs = \"10 * f\"\nmethods = [\"Ens\"]\n", vec!["run.epochs", "`f`"]),
        ] {
            let spec = tmp.path().join("bad.toml");
            std::fs::write(&spec, format!("{base}\n{extra}")).unwrap();
            let o = uqbench(&["run", spec.to_str().unwrap(), "--out", out.to_str().unwrap()]);
            assert_clean_error(&o, &needles);
        }
        // An output directory that cannot be created (its parent is a file).
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let o = uqbench(&[
            "run",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--out",
            file.join("run").to_str().unwrap(),
        ]);
        assert_clean_error(&o, &["cannot create the output directory"]);
        let o = uqbench(&[
            "run",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--shard",
            "2/2",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_clean_error(&o, &["--shard 2/2"]);
    }
}
