use super::*;

fn e1(profile: Option<&str>) -> Result<ExperimentSpec> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/e1.toml");
    ExperimentSpec::load_profile(&path, profile)
}

fn decay(spec: &ExperimentSpec, method: &str) -> f64 {
    spec.methods[method]["weight_decay"].as_float().unwrap()
}

#[test]
fn profiles_combine_in_order() {
    let base = e1(None).unwrap();
    assert_eq!(decay(&base, "Ens"), 2e-4);
    let both = e1(Some("quick,literal")).unwrap();
    assert_eq!(decay(&both, "Ens"), 0.02);
    assert_eq!(
        both.run.as_ref().unwrap().repetitions,
        20,
        "quick's repetitions survive literal"
    );
    assert_eq!(both.methods["Ens"]["members"].as_integer(), Some(6));
    let err = format!("{:#}", e1(Some("quick,fast")).unwrap_err());
    assert!(
        err.contains("--profile fast") && err.contains("literal"),
        "{err}"
    );
}

#[test]
fn a_spec_has_one_problem_and_a_surrogate_no_anchor() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/boston.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let spec = ExperimentSpec::from_toml_str(&text, None).unwrap();
    assert!(matches!(spec.problem, ProblemDecl::Surrogate(_)));
    assert!(spec.problem_variables().is_empty());
    // Both tables, or neither.
    let cubic = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/cubic.toml"),
    )
    .unwrap();
    let problem = &cubic[cubic.find("[problem]").unwrap()..cubic.find("\n[run]").unwrap()];
    let both = format!("{text}\n{problem}");
    let err = format!(
        "{:#}",
        ExperimentSpec::from_toml_str(&both, None).unwrap_err()
    );
    assert!(err.contains("[problem] and [surrogate]"), "{err}");
    let start = text.find("[surrogate]").unwrap();
    let end = text.find("\n[run]").unwrap();
    let neither = format!("{}{}", &text[..start], &text[end..]);
    let err = format!(
        "{:#}",
        ExperimentSpec::from_toml_str(&neither, None).unwrap_err()
    );
    assert!(
        err.contains("no [problem]") && err.contains("[surrogate]"),
        "{err}"
    );
}

#[test]
fn settings_off_the_sweep_are_refused_unless_the_spec_allows_them() {
    let mut spec = e1(None).unwrap();
    let at = |spec: &ExperimentSpec, v: &str| spec.parse_setting(&[format!("f_main={v}")]);
    assert_eq!(at(&spec, "3").unwrap().label(), "f_main=3");
    let err = format!("{:#}", at(&spec, "3.7").unwrap_err());
    assert!(
        err.contains("3.7") && err.contains("sweep.f_main") && err.contains("off_sweep"),
        "{err}"
    );
    spec.off_sweep = true;
    assert_eq!(at(&spec, "3.7").unwrap().label(), "f_main=3.7");
    // The key round-trips through the resolved spec (what a run directory keeps).
    let text = toml::to_string(&spec).unwrap();
    assert!(text.contains("off_sweep = true"), "{text}");
    assert!(
        ExperimentSpec::from_toml_str(&text, None)
            .unwrap()
            .off_sweep
    );
}
