//! `uqbench metrics`.

use crate::util::*;

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

#[test]
fn mcmc_draws_give_arviz_diagnostics() {
    // Two AR(1) chains of 9 draws (φ = 0.3) from the generator of
    // crates/metrics/src/mcmc.rs's tests; ArviZ 0.23.4 gives the values below for them
    // (scripts/arviz_reference.py, case (2, 9, 0.3, 0.0)).
    let mut state: u64 = 12345;
    let mut uniform = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let chains: Vec<Vec<f64>> = (0..2)
        .map(|_| {
            let mut v = 0.0;
            (0..9)
                .map(|_| {
                    v = 0.3 * v + (uniform() - 0.5) * 12f64.sqrt();
                    v
                })
                .collect()
        })
        .collect();
    let input = serde_json::json!({"kind": "draws", "draws": chains}).to_string();
    let v = value(&metrics(&input, &[]));
    for (key, arviz, tol) in [
        ("rhat", 1.4426869397813626, 1e-6),
        ("rhat_bulk", 0.9145284036262925, 1e-6),
        ("rhat_tail", 1.4426869397813626, 1e-6),
        ("ess_bulk", 19.265919722494797, 1e-3),
        ("ess_tail", 19.265919722494797, 1e-3),
        ("mcse_mean", 0.22641746805282204, 1e-3),
    ] {
        let got = v[key].as_f64().unwrap();
        assert!(
            ((got - arviz) / arviz).abs() < tol,
            "{key}: {got} vs ArviZ {arviz}"
        );
    }
    // One chain is not enough for R̂.
    let o = metrics(r#"{"kind": "draws", "draws": [[1, 2, 3, 4, 5]]}"#, &[]);
    assert_clean_error(&o, &["at least 2 chains"]);
}

#[test]
fn the_catalogue_lists_every_metric_once_with_its_direction() {
    let o = uqbench(&["metrics", "--catalogue"]);
    let v = value(&o);
    let list = v.as_array().unwrap();
    let find = |name: &str, index: &str| {
        list.iter()
            .find(|m| m["name"] == name && m["index"] == index)
            .unwrap_or_else(|| panic!("{name} ({index}) missing: {v}"))
    };
    assert_eq!(find("joint_kl", "tau")["better"], "lower");
    assert_eq!(find("accuracy", "none")["better"], "higher");
    // A good fit's training MSE is ≈ σ²(1 − p_eff/N), not as low as possible.
    assert_eq!(find("fit_ratio", "none")["better"], "neither");
    assert_eq!(find("train_mse", "none")["better"], "neither");
    assert_eq!(find("cicf", "level")["on"], "regression");
    assert_eq!(find("coverage", "level")["on"], "classification");
    assert_eq!(find("w2_anchor", "none")["column"], "W2 to BLR");
    // Neither a file nor the catalogue: clap's usage error names the missing input.
    let o = uqbench(&["metrics"]);
    assert!(
        !o.status.success() && stderr(&o).contains("--input"),
        "{}",
        stderr(&o)
    );
}
