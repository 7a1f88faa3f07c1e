//! The post-hoc study's quick profile end to end (conformal, recalibrated, Laplace, SWAG,
//! quantile regression and CQR next to their bases), the distances to the anchor and the
//! timings it writes, and clear errors for bad post-hoc tables.

use crate::util::*;

#[test]
fn the_posthoc_study_runs_and_reports_what_it_promises() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let o = uqbench(&[
        "run",
        "experiments/posthoc.toml",
        "--profile",
        "quick",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let methods = s["settings"][0]["methods"].as_object().unwrap();
    let all = |m: &str, k: &str| methods[m]["aggregate"]["all"][k]["value"].as_f64();
    for m in [
        "Ens+conformal",
        "EnsNLL+conformal",
        "EnsNLL+std",
        "EnsNLL+isotonic",
        "BD+conformal",
        "CQR",
    ] {
        // A quarter of the 1000 training points is held out for calibration.
        assert_eq!(all(m, "calibration_points"), Some(250.0), "{m}");
    }
    // Each wrapper's joint is its base's (calibration changes only the intervals of y): the
    // summary says so and the report's joint column names it, beside the bases' own kinds.
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for (m, kind, of_base) in [
        ("Ens", "draws", false),
        ("BD", "draws", false),
        ("Ens+conformal", "draws", true),
        ("EnsNLL+conformal", "draws", true),
        ("EnsNLL+std", "draws", true),
        ("EnsNLL+isotonic", "draws", true),
        ("BD+conformal", "draws", true),
    ] {
        assert_eq!(methods[m]["joint_kind"], kind, "{m}");
        assert_eq!(
            methods[m]
                .get("joint_of_base")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            of_base,
            "{m}"
        );
        let label = if of_base {
            format!("{kind} of its base")
        } else {
            kind.to_string()
        };
        assert!(
            report.contains(&format!("| {m} | {label} |")),
            "report.md lacks `| {m} | {label} |`"
        );
    }
    // W2 to the exact posterior, per point, from the repetition files: for two normals it is
    // √(Δmean² + Δsd²) exactly (the anchor is normal here, σ known), checked on every method
    // whose f is normal (at least two of them, so the check cannot pass by skipping them all;
    // Student-t and empirical families are judged by their own W2 and left out here).
    let rep_of = |m: &str, r: usize| -> serde_json::Value {
        let path = out.join(format!("reps/default/{m}/rep-{r:03}.json"));
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let floats = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let mut normal = 0;
    for (m, _) in methods.iter().filter(|(m, _)| *m != "BLR") {
        // A normal family is the default and is not written (`family` absent).
        let first = rep_of(m, 0);
        if first.get("family").is_some() || first.get("w2_anchor").is_none() {
            continue;
        }
        normal += 1;
        for r in 0..10 {
            let (a, h) = (rep_of("BLR", r), rep_of(m, r));
            assert!(
                a.get("family").is_none(),
                "the anchor is normal here: {}",
                a["family"]
            );
            let (am, asd) = (floats(&a["mean"]), floats(&a["std"]));
            let (hm, hsd, w2) = (
                floats(&h["mean"]),
                floats(&h["std"]),
                floats(&h["w2_anchor"]),
            );
            assert_eq!(w2.len(), am.len(), "{m}");
            for i in 0..am.len() {
                let want = (hm[i] - am[i]).hypot(hsd[i] - asd[i]);
                assert!(
                    (w2[i] - want).abs() <= 1e-9 * (1.0 + want),
                    "{m} rep {r} point {i}: w2_anchor {} against √(Δm² + Δs²) = {want}",
                    w2[i]
                );
            }
        }
    }
    assert!(normal >= 2, "{normal} normal-family methods checked");
    // PICP, from the same files: for a method with a normal predictive of f its 90% PI is
    // mean ± z·√(sd² + noise sd²), and the metric is the exact probability that y falls in
    // it, averaged over the inputs and the repetitions (the truth and σ(x) from `uqbench
    // anchor`). Φ by Abramowitz & Stegun 7.1.26 (error < 1.5e-7): to 1e-6.
    let z = 1.644_853_626_951_472_2;
    let truths: Vec<(Vec<f64>, Vec<f64>)> = (0..10)
        .map(|r| {
            let o = uqbench(&[
                "anchor",
                "experiments/posthoc.toml",
                "--rep",
                &r.to_string(),
                "--json",
            ]);
            assert!(o.status.success(), "{}", stderr(&o));
            let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            (floats(&a["truth"]), floats(&a["sigma"]))
        })
        .collect();
    let mut picp_checked = 0;
    // Ens and MC dropout: a normal predictive of f plus the run's noise sd (EnsNLL's is its
    // members' mixture, the wrappers' their calibrated bands: their own tests).
    for m in ["Ens", "BD"] {
        let first = rep_of(m, 0);
        assert!(
            first.get("family").is_none() && first.get("calibrated_pi").is_none(),
            "{m}"
        );
        picp_checked += 1;
        let mut sum = 0.0;
        for (r, (truth, sigma)) in truths.iter().enumerate() {
            let h = rep_of(m, r);
            let (hm, hsd, noise) = (
                floats(&h["mean"]),
                floats(&h["std"]),
                floats(&h["noise_std"]),
            );
            let p: f64 = (0..hm.len())
                .map(|i| {
                    let half = z * hsd[i].hypot(noise[i]);
                    normal_cdf((hm[i] + half - truth[i]) / sigma[i])
                        - normal_cdf((hm[i] - half - truth[i]) / sigma[i])
                })
                .sum::<f64>()
                / hm.len() as f64;
            sum += p;
        }
        let picp = all(m, "picp_0.9").unwrap();
        assert!(
            (picp - sum / 10.0).abs() < 1e-6,
            "{m}: picp_0.9 {picp} against {}",
            sum / 10.0
        );
    }
    assert_eq!(picp_checked, 2);
    for (m, _) in methods.iter().filter(|(m, _)| *m != "BLR") {
        // Every method is judged against the exact posterior per point, and has a size.
        let w2 = all(m, "w2_anchor").unwrap_or(f64::NAN);
        assert!(w2.is_finite() && w2 >= 0.0, "{m}: w2_anchor {w2}");
        assert!(all(m, "parameters").unwrap_or(0.0) > 0.0, "{m}");
        // Marginal coverage of y is a probability for every method.
        let picp = all(m, "picp_0.9").unwrap();
        assert!((0.0..=1.0).contains(&picp), "{m}: {picp}");
    }
    // KL needs a density: reported for the normal families, not for the point predictions
    // of quantile regression.
    assert!(all("Ens", "kl_anchor").unwrap() >= 0.0);
    assert!(all("CQR", "kl_anchor").is_none() && all("QR", "kl_anchor").is_none());
    assert!(all("Laplace", "prior_precision").unwrap() > 0.0);
    // The evidence's δ and the refined MAP alternate to a fixed point in every repetition
    // (more than one round: the first MAP is refined under a weak prior), so the posterior
    // uses the δ its MAP was refined under.
    for m in ["Laplace", "LaplaceAll", "LaplaceKron"] {
        assert_eq!(all(m, "prior_precision_converged"), Some(1.0), "{m}");
        assert!(all(m, "prior_precision_rounds").unwrap() > 1.0, "{m}");
    }
    // Laplace without a noise_sd estimates σ by the MAP fit's in-sample ML residual; the
    // estimate is recorded and is, value for value, the noise sd its intervals use.
    for m in ["Laplace", "LaplaceAll"] {
        let rep: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(format!("reps/default/{m}/rep-000.json"))).unwrap(),
        )
        .unwrap();
        let s = rep["scalars"]["ml_noise_sd"].as_f64().unwrap();
        assert!(s > 0.0, "{m}: {s}");
        let noise = rep["noise_std"].as_array().unwrap();
        assert!(
            noise.iter().all(|v| v.as_f64() == Some(s)),
            "{m}: noise_std is not {s}"
        );
    }
    assert!(all("SWAG", "swa_snapshots").unwrap() >= 2.0);
    // Jackknife+-after-bootstrap: most points are out of some member's bag, and its PI keeps
    // its guarantee of at least 1 − 2α (here 0.8; each repetition's PICP is a mean over 500
    // inputs of exact coverage probabilities).
    assert!(all("JackknifeAB", "out_of_bag_points").unwrap() > 500.0);
    assert!(all("JackknifeAB", "picp_0.9").unwrap() >= 0.8);
    // Wall times per method, outside the reproducible summaries.
    let timings = std::fs::read_to_string(out.join("timings.csv")).unwrap();
    for m in methods.keys() {
        assert!(
            timings.contains(&format!("default,{m},10,")),
            "{m}: {timings}"
        );
    }
    assert!(!std::fs::read_to_string(out.join("summary.csv"))
        .unwrap()
        .contains("seconds"));
}

#[test]
fn the_posthoc_profiles_of_e1_and_cubic_run() {
    // Issue 26's study on [000]'s E1 (N = 50: 20 points held out) and [004]'s cubic (with its
    // validation-set noise estimate, whose inputs are predicted after the test inputs).
    let dir = tempfile::tempdir().unwrap();
    for spec in ["e1", "cubic"] {
        let out = dir.path().join(spec);
        let o = uqbench(&[
            "run",
            &format!("experiments/{spec}.toml"),
            "--profile",
            "quick,posthoc",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{spec}: {}", stderr(&o));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        let methods = s["settings"][0]["methods"].as_object().unwrap();
        assert!(
            methods.contains_key("CQR") && methods.contains_key("JackknifeAB"),
            "{spec}"
        );
        let held = methods["Ens+conformal"]["aggregate"]["all"]["calibration_points"]["value"]
            .as_f64()
            .unwrap();
        assert_eq!(held, if spec == "e1" { 20.0 } else { 250.0 }, "{spec}");
    }
}

#[test]
fn a_post_hoc_method_runs_alone_with_its_base_table() {
    // `--methods Ens+conformal` keeps the base's table (Ens) in the recorded spec, so the run
    // and its resume both build it.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("one");
    for extra in [None, Some("--resume")] {
        let mut args = vec![
            "run",
            "experiments/posthoc.toml",
            "--profile",
            "quick",
            "--methods",
            "Ens+conformal",
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        let o = uqbench(&args);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let spec = std::fs::read_to_string(out.join("spec.resolved.toml")).unwrap();
    assert!(spec.contains("[methods.Ens]"), "{spec}");
    assert!(!spec.contains("[methods.EnsNLL]"), "{spec}");
}

#[test]
fn bad_posthoc_tables_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("experiments/cubic.toml")).unwrap();
    let base = &text[..text.find("\n[run]").unwrap()];
    let run = "[run]\nrepetitions = 2\nepochs = 2\nmethods = [\"C\"]\n";
    for (extra, needles) in [
        (
            "[methods.C]\nkind = \"Conformal\"\n",
            vec!["methods.C", "base", "missing"],
        ),
        (
            "[methods.C]\nkind = \"Conformal\"\nbase = \"C\"\n",
            vec!["methods.C", "circle"],
        ),
        (
            "[methods.C]\nkind = \"Conformal\"\nbase = \"Ens\"\ncalibration_fraction = 1.5\n",
            vec!["calibration_fraction", "1.5", "between 0 and 1"],
        ),
        (
            "[methods.C]\nkind = \"Conformal\"\nbase = \"Ens\"\nscore = \"relative\"\n",
            vec!["methods.C", "relative"],
        ),
        (
            "[methods.C]\nkind = \"Recalibrated\"\nbase = \"Ens\"\ncalibraton_fraction = 0.2\n",
            vec!["methods.C", "calibraton_fraction"],
        ),
        (
            "[methods.C]\nkind = \"CQR\"\nlevels = [0.5, 0.8, 0.9, 0.95, 0.99]\n",
            vec!["C.levels", "1 to 4 levels"],
        ),
        (
            "[methods.C]\nkind = \"Ens\"\ninputs = \"G\"\n",
            vec!["methods.C", "inputs", "features"],
        ),
        (
            "[methods.C]\nkind = \"Laplace\"\nprior_precision = -1.0\n",
            vec!["C.prior_precision", "-1"],
        ),
        (
            "[methods.C]\nkind = \"SWAG\"\nswa_start = 5\n",
            vec!["C.swa_start", "5", "at least 2"],
        ),
        (
            "[methods.C]\nkind = \"Ens\"\njackknife_plus = true\n",
            vec!["C.jackknife_plus", "EnsBSClassic"],
        ),
    ] {
        let spec = tmp.path().join("bad.toml");
        std::fs::write(&spec, format!("{base}\n{run}{extra}")).unwrap();
        let o = uqbench(&[
            "run",
            spec.to_str().unwrap(),
            "--quiet",
            "--out",
            tmp.path().join("out").to_str().unwrap(),
        ]);
        assert_clean_error(&o, &needles);
    }
}
