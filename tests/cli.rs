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
