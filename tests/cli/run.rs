//! `uqbench run` end to end: every output of the quick profiles of E1 and [002]'s study, the
//! README's example method, divergence, method sweeps, the noise of y and bad runs.

use crate::util::*;

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
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
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
    assert_catalogued(&out);
}

#[test]
fn e1_quick_produces_every_output_and_the_anchor_covers() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let o = run_quick(&out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_catalogued(&out);
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
    // 2 settings × 8 methods (seven and the anchor) × 20 repetitions, each with its draws
    // (the anchor: its Gaussian joint) in 8 bits.
    assert_eq!(count_files(&out.join("reps"), "json"), 2 * 8 * 20);
    assert_eq!(count_files(&out.join("reps"), "draws"), 2 * 8 * 20);
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
    // The anchor's coverage, averaged over the test inputs, is exactly 0.95 in expectation:
    // each repetition's mean coverage over the inputs is an independent draw (fresh noise), so
    // the mean over k = 20 repetitions is within 4 of its own standard errors of 0.95 (t with
    // 19 dof: a false alarm about 1 in 1 300 per setting). That standard error is at most
    // sqrt(0.95·0.05/20) = 0.0487 whatever the correlation between inputs (checked, so that a
    // wrong standard error cannot widen the band).
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for setting in s["settings"].as_array().unwrap() {
        let coverage = &setting["methods"]["BLR"]["aggregate"]["all"]["coverage"];
        let (cov, se) = (
            coverage["value"].as_f64().unwrap(),
            coverage["stderr"].as_f64().unwrap(),
        );
        assert!(se > 0.0 && se <= 0.0487, "{}: se {se}", setting["setting"]);
        assert!(
            (cov - 0.95).abs() < 4.0 * se,
            "{}: anchor coverage {cov} ± {se}",
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
fn the_readme_example_method_runs_on_a_quick_spec() {
    // The "Add your own method" example: an ensemble of MC-dropout networks.
    let tmp = tempfile::tempdir().unwrap();
    let spec = cubic_spec(
        tmp.path(),
        "[run]\nrepetitions = 4\nepochs = 40\nmethods = [\"EnsMCD\", \"Ens\"]\n\n\
         [methods.EnsMCD]\nmembers = 3\npasses = 5\n\n[methods.Ens]\nmembers = 3\n",
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
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let m = &s["settings"][0]["methods"]["EnsMCD"];
    assert_eq!(m["repetitions"], 4);
    assert!(
        m["aggregate"]["all"]["uncertainty"]["value"]
            .as_f64()
            .unwrap()
            > 0.0
    );
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
    assert!(agg.contains(",Wild,all,diverged,3.0,") && agg.contains(",Ens,all,diverged,0.0,"));
    let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    assert!(csv
        .lines()
        .any(|l| l.starts_with(",Wild,") && l.contains(",diverged,3.0,")));
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
    // results agree exactly (but for the joint metrics, whose batches are seeded per
    // setting), while the ensembles differ.
    let without_joint = |m: &serde_json::Value| {
        let mut m = m.clone();
        for region in m["aggregate"].as_object_mut().unwrap().values_mut() {
            region
                .as_object_mut()
                .unwrap()
                .retain(|k, _| !k.starts_with("joint_kl") && !k.starts_with("env_kl"));
        }
        m
    };
    assert_eq!(
        without_joint(&settings[0]["methods"]["BLR"]),
        without_joint(&settings[1]["methods"]["BLR"])
    );
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
        (
            "[run]\nrepetitions = 2\nepochs = 5\nmethods = [\"NUTS\"]\n",
            vec!["unknown method `NUTS`", "EnsBS"],
        ),
        (
            "[run]\nrepetitions = 2\nepochs = 5\nmethods = [\"Ens\"]\nrepetitons = 3\n",
            vec!["repetitons"],
        ),
        (
            "[run]\nrepetitions = 2\nepochs = 5\nmethods = [\"Ens\"]\n[methods.Ens]\nmemebrs = 3\n",
            vec!["memebrs", "methods.Ens"],
        ),
        (
            "[run]\nrepetitions = 2\nepochs = \"10 * f\"\nmethods = [\"Ens\"]\n",
            vec!["run.epochs", "`f`"],
        ),
    ] {
        let spec = tmp.path().join("bad.toml");
        std::fs::write(&spec, format!("{base}\n{extra}")).unwrap();
        let o = uqbench(&[
            "run",
            spec.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
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

/// Values, not presence: each repetition's noise sd is its own estimate (the true σ = 0.2 with
/// `known`) at every test input, and the aggregate 95% PI width is the mean over repetitions
/// and inputs of 2·q·√(std² + noise_sd²), q the predictive's own 97.5% quantile.
fn assert_intervals_use_the_noise(out: &Path, source: &str, scalar: Option<&str>) {
    let folder = out.join("reps/default/Boot");
    let mut widths = Vec::new();
    for k in 0..3 {
        let rep: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(folder.join(format!("rep-{k:03}.json"))).unwrap(),
        )
        .unwrap();
        let floats = |key: &str| -> Vec<f64> {
            rep[key]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_f64().unwrap()).collect())
                .unwrap_or_default()
        };
        let std = floats("std");
        let (expected, noise) = match scalar {
            Some(name) => (rep["scalars"][name].as_f64().unwrap(), floats("noise_std")),
            // Known: the file stores no noise sd of its own; the problem's σ(x) = 0.2 is used.
            None => {
                assert!(rep.get("noise_std").is_none(), "{source}: rep {k}");
                (0.2, vec![0.2; std.len()])
            }
        };
        assert_eq!(noise.len(), std.len(), "{source}: rep {k} noise_std");
        assert!(
            noise.iter().all(|n| *n == expected),
            "{source}: rep {k}: noise_std is not {expected} everywhere"
        );
        let dof = rep["family"]["dof"].as_f64();
        let q = uqbench_core::central_quantile(0.95, dof);
        widths.push(
            std.iter()
                .zip(&noise)
                .map(|(s, n)| 2.0 * q * (s * s + n * n).sqrt())
                .sum::<f64>()
                / std.len() as f64,
        );
    }
    let expected = widths.iter().sum::<f64>() / widths.len() as f64;
    let agg = std::fs::read_to_string(out.join("aggregate.csv")).unwrap();
    let got: f64 = agg
        .lines()
        .find(|l| l.contains(",Boot,all,pi_width_0.95,"))
        .and_then(|l| l.split(',').nth(4))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (got / expected - 1.0).abs() < 1e-9,
        "{source}: aggregate 95% PI width {got}, from the stored noise sd {expected}"
    );
}

#[test]
fn the_noise_of_y_comes_from_the_run_setting() {
    // The naive bootstrap has no noise model: its prediction intervals take the run's noise
    // source, recorded per repetition; the report states it.
    let tmp = tempfile::tempdir().unwrap();
    let mut fits = Vec::new();
    for (source, scalar) in [
        ("known", None),
        ("validation", Some("validation_noise_sd")),
        ("residual", Some("residual_noise_sd")),
    ] {
        let dir = tmp.path().join(source);
        std::fs::create_dir_all(&dir).unwrap();
        let spec = cubic_spec(
            &dir,
            &format!(
                "[run]\nrepetitions = 3\nepochs = 5\nnoise = \"{source}\"\nmethods = [\"Boot\"]\n\
                 [methods.Boot]\nkind = \"NaiveBootstrap\"\nmembers = 3\nhidden = [8]\n"
            ),
        );
        let out = dir.join("out");
        let o = uqbench(&[
            "run",
            spec.to_str().unwrap(),
            "--quiet",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{source}: {}", stderr(&o));
        let all = &summary(&out)["settings"][0]["methods"]["Boot"]["aggregate"]["all"];
        for name in ["validation_noise_sd", "residual_noise_sd"] {
            let present = all.get(name).is_some();
            assert_eq!(present, Some(name) == scalar, "{source}: {name} in {all}");
        }
        if let Some(name) = scalar {
            // The estimate of σ = 0.2 from 5 epochs of tiny nets: positive and finite.
            assert!(all[name]["value"].as_f64().unwrap() > 0.0, "{source}");
        }
        assert_intervals_use_the_noise(&out, source, scalar);
        fits.push((source, out.clone()));
        let report = std::fs::read_to_string(out.join("report.md")).unwrap();
        assert!(
            report.contains(&format!("run.noise = \"{source}\"")),
            "{source}"
        );
    }
    // The same training in every run (the noise source changes no fit): the residual
    // estimate is √(train MSE) of that fit, and the validation estimate, from other points,
    // differs from it.
    let scalars = |source: &str, k: usize| -> serde_json::Value {
        let out = &fits.iter().find(|(s, _)| *s == source).unwrap().1;
        let path = out.join(format!("reps/default/Boot/rep-{k:03}.json"));
        let rep: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        rep["scalars"].clone()
    };
    for k in 0..3 {
        let (r, v) = (scalars("residual", k), scalars("validation", k));
        let mse = r["train_mse"].as_f64().unwrap();
        assert_eq!(
            mse,
            v["train_mse"].as_f64().unwrap(),
            "rep {k}: the same fit"
        );
        let residual = r["residual_noise_sd"].as_f64().unwrap();
        assert!(
            (residual - mse.sqrt()).abs() <= 1e-12 * mse.sqrt(),
            "rep {k}: residual σ̂ {residual} vs √(train MSE) {}",
            mse.sqrt()
        );
        let validation = v["validation_noise_sd"].as_f64().unwrap();
        assert!(
            (validation - residual).abs() > 1e-6 * residual,
            "rep {k}: validation σ̂ {validation} equals the residual one"
        );
    }
    // A problem without a validation set cannot use it.
    let text = std::fs::read_to_string(root().join("experiments/e1.toml")).unwrap();
    let bad = text.replacen("[run]\n", "[run]\nnoise = \"validation\"\n", 1);
    let spec = tmp.path().join("bad.toml");
    std::fs::write(&spec, bad).unwrap();
    let o = uqbench(&["check", spec.to_str().unwrap()]);
    assert_clean_error(&o, &["run.noise = \"validation\"", "no validation set"]);
}
