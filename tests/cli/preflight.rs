//! Every configuration error before the first training (issue 59, 2): `uqbench check` and the
//! start of `uqbench run` build every method table at every setting and check it against the
//! setting's problem, so that a run fails in its first second or not for configuration.

use std::time::Instant;

use crate::util::*;

/// A 2-D problem whose σ is not a known constant (the anchor is Student t), with a [run].
const PLANE: &str = r#"
name = "plane"
seed = 3
[sweep]
width = [8, 16]
[problem]
d = 2
sigma = 0.4
sigma_known = false
gamma = [1.0, 0.5, -0.5, 0.3]
features = [
  { kind = "const" },
  { kind = "monomial", powers = [1, 0] },
  { kind = "monomial", powers = [0, 1] },
  { kind = "monomial", powers = [1, 1] },
]
train = { kind = "uniform", n = 100, low = -1, high = 1 }
test = { kind = "grid", n = 5, low = -1.5, high = 1.5 }
[run]
repetitions = 2
epochs = 40
methods = ["M"]
"#;

/// `uqbench check` of PLANE with `[methods.M]` set to `table`, and its wall time.
fn check_table(table: &str) -> (Output, f64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plane.toml");
    std::fs::write(&path, format!("{PLANE}\n[methods.M]\n{table}\n")).unwrap();
    let start = Instant::now();
    let o = uqbench(&["check", path.to_str().unwrap()]);
    (o, start.elapsed().as_secs_f64())
}

#[test]
fn check_rejects_each_configuration_error_in_its_first_second() {
    for (table, needles) in [
        // σ taken as known where the problem's is not.
        (
            "kind = \"SGLD\"\nnoise_sd = \"known\"",
            &["M.noise_sd", "\"known\"", "not a known"][..],
        ),
        (
            "kind = \"HMC\"\nnoise_sd = \"known\"",
            &["M.noise_sd", "not a known"][..],
        ),
        (
            "kind = \"MFVI\"\nnoise_sd = \"known\"",
            &["M.noise_sd", "not a known"][..],
        ),
        // More draws than the sampling stage has epochs (40 epochs, half burn-in).
        (
            "kind = \"SGHMC\"\ndraws = 100",
            &["M.draws", "100", "at most 20"][..],
        ),
        // Quantile bands that miss a level the run scores (0.7 by default, and 0.95).
        (
            "kind = \"QuantileRegression\"\nlevels = [0.5, 0.9]",
            &["M", "no band at level", "leave `levels` out"][..],
        ),
        (
            "kind = \"CQR\"\nlevels = [0.9, 0.95]",
            &["M", "no band at level", "0.7"][..],
        ),
        // Too few held-out points for split conformal's 95% interval (10 of 100; 19 needed).
        (
            "kind = \"CQR\"\ncalibration_fraction = 0.1",
            &["calibration_fraction = 0.1", "holds out 10", "at least 19"][..],
        ),
    ] {
        let (o, seconds) = check_table(table);
        assert_clean_error(&o, needles);
        assert!(seconds < 1.0, "{table}: check took {seconds:.2} s");
        assert!(
            stderr(&o).contains("width=8"),
            "{table}: the error names the setting: {}",
            stderr(&o)
        );
    }
    // The same tables without the mistake pass, and so does every listed default.
    for table in [
        "kind = \"SGLD\"",
        "kind = \"SGHMC\"",
        "kind = \"CyclicalSGMCMC\"",
        "kind = \"QuantileRegression\"",
        "kind = \"CQR\"",
        "kind = \"HMC\"",
        "kind = \"MFVI\"",
    ] {
        let (o, seconds) = check_table(table);
        assert!(o.status.success(), "{table}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("methods: BLR, M at 2 settings checked"),
            "{out}"
        );
        assert!(seconds < 1.0, "{table}: check took {seconds:.2} s");
    }
}

#[test]
fn run_stops_before_training_on_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plane.toml");
    // Ens is listed first, M second; M's 30 draws exceed width 8's 20 sampling epochs (40
    // epochs, half burn-in; width 16's 80 would do): the run fails before Ens trains.
    std::fs::write(
        &path,
        PLANE
            .replace("methods = [\"M\"]", "methods = [\"Ens\", \"M\"]")
            .replace("epochs = 40", "epochs = \"5 * width\"")
            + "\n[methods.M]\nkind = \"SGLD\"\ndraws = 30\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let start = Instant::now();
    let o = uqbench(&[
        "run",
        path.to_str().unwrap(),
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let seconds = start.elapsed().as_secs_f64();
    assert_clean_error(&o, &["M.draws", "30", "at most 20", "width=8"]);
    assert!(seconds < 2.0, "run took {seconds:.2} s to fail");
    assert!(
        !out.join("reps").exists(),
        "something trained before the error"
    );
}

#[test]
fn report_of_an_incomplete_run_reports_what_finished() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = run_quick(&out, &["--methods", "BD,Ens"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A run that stopped inside Ens at f_main = 2: its last repetition is missing.
    std::fs::remove_file(out.join("reps/f_main=2/Ens/rep-019.json")).unwrap();
    let o = uqbench(&["report", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("not finished"), "{}", stderr(&o));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("**Incomplete run.**"), "{report}");
    assert!(
        report.contains("`Ens` at f_main=2: 19 of 20 repetitions"),
        "{report}"
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let at = |k: usize| s["settings"][k]["methods"].as_object().unwrap();
    assert!(
        at(0).contains_key("Ens") && at(0).contains_key("BD"),
        "f_main=1 finished"
    );
    assert!(
        !at(1).contains_key("Ens") && at(1).contains_key("BD"),
        "f_main=2 lacks Ens only"
    );
    // Restored, the report is the complete run's again, without a banner.
    let o = run_quick(&out, &["--methods", "BD,Ens", "--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(!report.contains("Incomplete run"), "{report}");
}

#[test]
fn every_method_runs_at_its_defaults_on_a_2d_problem_with_sigma_unknown() {
    // Every exact, network and sampler kind of `uqbench methods`, and each wrapper around
    // Ens, at its defaults (a table naming only its kind), on PLANE's two settings: σ not a
    // known constant, 2 inputs, N = 60. Nothing may fail or diverge.
    let kinds = [
        "BLRGaussian",
        "GP",
        "Ens",
        "EnsAdvA",
        "EnsBS",
        "EnsBSClassic",
        "NaiveBootstrap",
        "BD",
        "CD",
        "VD",
        "Det",
        "EnsMCD",
        "EnsPrior",
        "Epinet",
        "BatchEnsemble",
        "DER",
        "SWAG",
        "MultiSWAG",
        "Laplace",
        "QuantileRegression",
        "CQR",
        "MFVI",
        "HMC",
        "SGLD",
        "SGHMC",
        "CyclicalSGMCMC",
        "pSGLD",
    ];
    let mut spec = PLANE.replace(
        "methods = [\"M\"]",
        &format!(
            "methods = [{}, \"Ens+conformal\", \"Ens+recalibrated\"]",
            kinds
                .iter()
                .map(|k| format!("\"{k}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    spec.push_str(
        "\n[methods.\"Ens+conformal\"]\nkind = \"Conformal\"\nbase = \"Ens\"\n\
         \n[methods.\"Ens+recalibrated\"]\nkind = \"Recalibrated\"\nbase = \"Ens\"\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plane.toml");
    std::fs::write(&path, spec).unwrap();
    let out = dir.path().join("out");
    run_spec(&path, &out, &[]);
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    for setting in s["settings"].as_array().unwrap() {
        let methods = setting["methods"].as_object().unwrap();
        assert_eq!(
            methods.len(),
            kinds.len() + 3,
            "BLR, every kind, two wrappers"
        );
        for (m, v) in methods {
            let diverged = v["diverged"].as_array().map_or(0, Vec::len);
            assert_eq!(
                diverged, 0,
                "{m} at {}: repetitions {} diverged",
                setting["setting"], v["diverged"]
            );
            assert_eq!(v["repetitions"], 2, "{m}");
        }
    }
}

#[test]
fn every_profile_an_experiment_names_in_its_comments_passes_check() {
    // A profile combination a shipped spec tells its reader to run (`--profile cpu,nuts`)
    // must build at every setting: a setting added to one profile (the `cpu` profile's
    // doublings) must not break another that is layered on it.
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("experiments")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().filter(|l| l.trim_start().starts_with('#')) {
            let mut rest = line;
            while let Some(at) = rest.find("--profile ") {
                rest = &rest[at + "--profile ".len()..];
                let profiles: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ',')
                    .collect();
                let o = uqbench(&["check", path.to_str().unwrap(), "--profile", &profiles]);
                assert!(
                    o.status.success(),
                    "{} --profile {profiles}: {}",
                    path.display(),
                    stderr(&o)
                );
                checked += 1;
            }
        }
    }
    // The shipped specs name sixteen such combinations (quartic_gap.toml's earlier samplers
    // among them); fewer means the scan no longer sees them.
    assert!(checked >= 16, "only {checked} profile combinations found");
}
