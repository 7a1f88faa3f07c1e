//! The other problem types end to end: [002]'s two-class problem (the classification track)
//! and [004]'s surrogate of a real data set (no anchor).

use crate::util::*;

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
    assert_catalogued(&out);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
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
            "Det+temperature",
            "Ens",
            "EnsAdvA",
            "EnsMCD",
            "HMC",
            "Laplace",
            "MFVI",
            "VD"
        ]
    );
    // Temperature scaling reports its fitted T, positive and finite.
    let t = methods["Det+temperature"]["aggregate"]["all"]["temperature"]["value"]
        .as_f64()
        .unwrap();
    assert!(t.is_finite() && t > 0.0, "temperature {t}");
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
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
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
