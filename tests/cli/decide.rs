//! `uqbench decide` (and `run` on a spec of the decision track alone).

use crate::util::*;

fn csv_rows(path: &std::path::Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect()
}

#[test]
fn the_bandit_and_active_learning_write_every_policy_s_rows_and_curves() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bandit");
    let o = uqbench(&[
        "run",
        "experiments/bandit.toml",
        "--profile",
        "quick",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = csv_rows(&out.join("decisions.csv"));
    // 1 setting × 8 repetitions × (4 baselines + 5 method agents) × 3 metrics.
    assert_eq!(rows.len(), 8 * 9 * 3);
    let agents = ["Ens", "EnsPrior", "Epinet", "SGLD", "BD"];
    for policy in ["BLR", "Greedy", "Random", "Oracle"].iter().chain(&agents) {
        for metric in ["regret", "regret_ratio", "optimal_fraction"] {
            assert!(
                rows.iter().any(|r| r[1] == *policy && r[3] == metric),
                "{policy} {metric}"
            );
        }
    }
    // The exact sampler's ratio to itself is 1 wherever its regret is not 0.
    for r in rows
        .iter()
        .filter(|r| r[1] == "BLR" && r[3] == "regret_ratio")
    {
        assert_eq!(r[4], "1.0");
    }
    let agg = csv_rows(&out.join("decisions_aggregate.csv"));
    let mean = |p: &str, m: &str| -> f64 {
        let row = agg
            .iter()
            .find(|r| r[0] == "f_main=1" && r[1] == p && r[2] == m)
            .unwrap();
        row[3].parse().unwrap()
    };
    assert_eq!(mean("Oracle", "regret"), 0.0);
    assert!(mean("BLR", "regret") < mean("Random", "regret"));
    // Every agent's regret is finite and at most the horizon's worst (12 pulls of the worst
    // arm): a number from its decisions, not a placeholder.
    for a in agents {
        let r = mean(a, "regret");
        assert!(r.is_finite() && r > 0.0, "{a}: {r}");
    }
    // Policies pair like methods: `uqbench compare` reads the run's repetitions.csv, and
    // takes regret (lower is better, from the catalogue) when no metric is named.
    let o = uqbench(&["compare", out.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let pairs: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let pair = pairs
        .iter()
        .find(|p| p["method_a"] == "BLR" && p["method_b"] == "Random" && p["setting"] == "f_main=1")
        .unwrap_or_else(|| panic!("{pairs:?}"));
    assert_eq!(pair["metric"], "regret");
    assert!(pair["diff"].as_f64().unwrap() < 0.0 && pair["p_value"].as_f64().unwrap() < 0.01);
    // A decision run's report ranks it against a standard run: without one, a clear error;
    // against a directory that is not a run, one that names the file.
    let o = uqbench(&["report", out.to_str().unwrap()]);
    assert_clean_error(&o, &["is a decision run", "--standard RUN_DIR"]);
    let o = uqbench(&[
        "report",
        out.to_str().unwrap(),
        "--standard",
        dir.path().to_str().unwrap(),
    ]);
    assert_clean_error(&o, &["repetitions.csv", "cannot read"]);
    let curves: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("curves.json")).unwrap()).unwrap();
    assert_eq!(curves.as_array().unwrap().len(), 9);
    assert_eq!(curves[0]["mean"].as_array().unwrap().len(), 12);

    let out = dir.path().join("active");
    let o = uqbench(&[
        "decide",
        "experiments/active.toml",
        "--profile",
        "quick",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("al_auc") && text.contains("MaxVar"), "{text}");
    let rows = csv_rows(&out.join("decisions.csv"));
    // 8 repetitions × (3 baselines + 5 method agents) × 3 metrics, the NLL of each.
    assert_eq!(rows.len(), 8 * 8 * 3);
    assert!(rows.iter().any(|r| r[1] == "Epinet" && r[3] == "al_auc"));
    assert!(text.contains("al_nll") && !text.contains(" - "), "{text}");
}

#[test]
fn decision_sections_that_cannot_run_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string(root().join("experiments/bandit.toml")).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, spec.replace("batch = 1", "batch = 1\ninitial = 2")).unwrap();
    let o = uqbench(&["check", bad.to_str().unwrap()]);
    assert_clean_error(
        &o,
        &["[decision] initial = 2", "p = 4", "valid: at least 4"],
    );
    let o = uqbench(&["decide", "experiments/e1.toml"]);
    assert_clean_error(&o, &["no [decision] section", "experiments/bandit.toml"]);
    std::fs::write(&bad, spec.replace("kind = \"bandit\"", "kind = \"casino\"")).unwrap();
    let o = uqbench(&["decide", bad.to_str().unwrap()]);
    assert_clean_error(&o, &["casino", "bandit", "active"]);
    // A method agent whose predictive is intervals of y, or one named like a baseline, is
    // refused by `uqbench check` with the reason.
    let with =
        |methods: &str| spec.replace("batch = 1", &format!("batch = 1\nmethods = {methods}"));
    let conformal = "[\"Cal\"]\n\n[methods.Cal]\nkind = \"Conformal\"\nbase = \"Ens\"";
    std::fs::write(&bad, with(conformal)).unwrap();
    let o = uqbench(&["check", bad.to_str().unwrap()]);
    assert_clean_error(&o, &["`Cal`", "intervals of y", "distribution of f"]);
    std::fs::write(&bad, with("[\"BLR\"]")).unwrap();
    let o = uqbench(&["check", bad.to_str().unwrap()]);
    assert_clean_error(&o, &["`BLR`", "baseline policy"]);
    // A warm start for an agent without one (the quick profile's Epinet), or
    // initial_epochs with retraining, is refused before anything trains.
    let warm = spec.replace(
        "decision.update_epochs = 500",
        "decision.update_epochs = 500\ndecision.update = \"warm\"",
    );
    std::fs::write(&bad, &warm).unwrap();
    let o = uqbench(&["check", bad.to_str().unwrap(), "--profile", "quick"]);
    assert_clean_error(&o, &["`Epinet`", "no warm start", "update = \"retrain\""]);
    std::fs::write(
        &bad,
        spec.replace("batch = 1", "batch = 1\ninitial_epochs = 100"),
    )
    .unwrap();
    let o = uqbench(&["check", bad.to_str().unwrap()]);
    assert_clean_error(&o, &["initial_epochs = 100", "update = \"warm\" only"]);
}

#[test]
fn warm_started_agents_run_and_are_scored() {
    // Ens, EnsPrior and BD warm-started (200 epochs on the initial pulls, 50 per step after): their
    // rows beside the baselines', their regret a number from their decisions.
    let dir = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string(root().join("experiments/bandit.toml")).unwrap();
    let warm = dir.path().join("warm.toml");
    let text = spec
        .replace(
            "decision.methods = [\"Ens\", \"EnsPrior\", \"Epinet\", \"SGLD\", \"BD\"]\n\
             decision.update_epochs = 500",
            "decision.methods = [\"Ens\", \"EnsPrior\", \"BD\"]\ndecision.update_epochs = 50\n\
             decision.update = \"warm\"\ndecision.initial_epochs = 200",
        )
        .replace("decision.repetitions = 8", "decision.repetitions = 4");
    assert!(
        text.contains("decision.update = \"warm\""),
        "the quick profile moved"
    );
    std::fs::write(&warm, text).unwrap();
    let out = dir.path().join("out");
    let o = uqbench(&[
        "decide",
        warm.to_str().unwrap(),
        "--profile",
        "quick",
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = csv_rows(&out.join("decisions.csv"));
    // 4 repetitions × (4 baselines + 3 agents) × 3 metrics.
    assert_eq!(rows.len(), 4 * 7 * 3);
    let resolved = std::fs::read_to_string(out.join("spec.resolved.toml")).unwrap();
    assert!(resolved.contains("update = \"warm\"") && resolved.contains("initial_epochs = 200"));
    for agent in ["Ens", "EnsPrior", "BD"] {
        let regrets: Vec<f64> = (rows.iter())
            .filter(|r| r[1] == agent && r[3] == "regret")
            .map(|r| r[4].parse().unwrap())
            .collect();
        // 12 pulls, each at most max f − min f over E1's 100 arms (below 10 here).
        assert_eq!(regrets.len(), 4);
        assert!(
            regrets
                .iter()
                .all(|r| r.is_finite() && *r >= 0.0 && *r < 120.0),
            "{regrets:?}"
        );
    }
}
