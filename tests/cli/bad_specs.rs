//! Bad specs are clear errors.

use crate::util::*;

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
