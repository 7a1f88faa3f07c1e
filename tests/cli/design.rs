//! `design = "random"` (issue 40 §1): every repetition draws its own inputs, so coverage
//! averaged over repetitions is marginal over x and y, the quantity split conformal's
//! guarantee is about.

use std::path::Path;

use crate::util::*;

/// A 1-D cubic with uniform training and test inputs on the same interval (test points
/// exchangeable with the training and calibration points), `design = "random"`.
fn random_spec(dir: &Path, repetitions: u64, extra_problem: &str) -> std::path::PathBuf {
    let spec = dir.join("random.toml");
    std::fs::write(
        &spec,
        format!(
            r#"name = "random-design"
seed = 11

[problem]
d = 1
sigma = 0.3
gamma = [0.5, 1.0, -0.5, 0.2]
features = [{{ kind = "polynomial", degree = 3 }}]
train = {{ kind = "uniform", n = 100, low = -2, high = 2 }}
design = "random"
{extra_problem}

[run]
repetitions = {repetitions}
epochs = 1000
levels = [0.5, 0.9]
methods = ["Ens+conformal"]
block = 50

[methods.Ens]
members = 3
hidden = [20]

[methods."Ens+conformal"]
kind = "Conformal"
base = "Ens"
score = "absolute"
calibration_fraction = 0.5
"#
        ),
    )
    .unwrap();
    spec
}

fn summary(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn split_conformal_around_an_engine_trained_ensemble_keeps_its_marginal_guarantee() {
    let dir = tempfile::tempdir().unwrap();
    let spec = random_spec(
        dir.path(),
        200,
        r#"test = { kind = "uniform", n = 40, low = -2, high = 2 }"#,
    );
    let out = dir.path().join("out");
    run_spec(&spec, &out, &[]);
    let s = summary(&out);
    let all = &s["settings"][0]["methods"]["Ens+conformal"]["aggregate"]["all"];
    assert_eq!(all["calibration_points"]["value"].as_f64(), Some(50.0));
    let n = 50.0;
    for level in [0.5, 0.9] {
        let picp = &all[format!("picp_{level}")];
        let (value, se) = (
            picp["value"].as_f64().unwrap(),
            picp["stderr"].as_f64().unwrap(),
        );
        // Split conformal with n exchangeable calibration scores takes the ⌈(n + 1)·level⌉-th
        // smallest, so P(y ∈ C(x)) over training, calibration and test draws is
        // ⌈(n + 1)·level⌉/(n + 1) ∈ [level, level + 1/(n + 1)) (Lei et al. 2018, Thm 2.2):
        // [0.9, 0.9196) and [0.5, 0.5196) here. Each repetition's PICP is the exact
        // probability, given its interval, that a new y at each of its 40 test points is
        // covered, averaged over them; over 200 independent repetitions the mean is within
        // 4 standard errors of its expectation except with probability 6·10⁻⁵ (normal
        // approximation; the per-repetition coverage is Beta with sd ≈ √(level(1−level)/n)
        // ≈ 0.042 at 0.9, so se ≈ 0.003 and the window can fail).
        assert!(se > 0.0 && se < 0.006, "level {level}: se {se}");
        let (lo, hi) = (level - 4.0 * se, level + 1.0 / (n + 1.0) + 4.0 * se);
        assert!(
            (lo..=hi).contains(&value),
            "level {level}: PICP {value} ± {se} outside [{lo}, {hi}]"
        );
    }
    // A random design's summary says so, and leaves out [004]'s per-point Brier scores,
    // which need the same test points in every repetition.
    assert_eq!(s["settings"][0]["test"]["design"], "random");
    // The test inputs come from the training design (uniform on [−2, 2], 40 points against
    // 100): the mean over repetitions is the marginal risk, and the report says so.
    assert_eq!(s["settings"][0]["test"]["test_as_train"], true);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("Inputs: random"), "{report}");
    assert!(report.contains("is marginal over x and y"), "{report}");
    assert!(all.get("picf_brier_0.9").is_none());
}

#[test]
fn every_repetition_draws_its_own_inputs_and_keeps_them_whatever_ran_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    // A gap problem: training inputs from two boxes, a test grid across the gap and beyond.
    let spec = random_spec(
        dir.path(),
        4,
        r#"test = { kind = "grid", n = 41, low = -3, high = 3 }
validation = { kind = "uniform", n = 10, low = -2, high = 2 }"#,
    );
    let text = std::fs::read_to_string(&spec).unwrap().replace(
        r#"train = { kind = "uniform", n = 100, low = -2, high = 2 }"#,
        r#"train = { kind = "mixture", n = 100, components = [{ low = -2, high = -0.5 }, { low = 0.5, high = 2 }] }"#,
    );
    std::fs::write(&spec, text).unwrap();
    let anchor = |rep: &str| -> serde_json::Value {
        let o = uqbench(&["anchor", spec.to_str().unwrap(), "--rep", rep, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let o = uqbench(&["check", spec.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("inputs drawn per repetition"));
    let (a, b) = (anchor("0"), anchor("1"));
    assert_ne!(a["train_x"], b["train_x"]);
    assert_ne!(a["test_x"], b["test_x"]);
    for rep in [&a, &b] {
        let x = |k: &str| -> Vec<f64> {
            rep[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r[0].as_f64().unwrap())
                .collect()
        };
        // The gap stays a gap; the test points are drawn in the grid's box, sorted along x,
        // and labelled by region point by point.
        assert!(x("train_x")
            .iter()
            .all(|v| v.abs() >= 0.5 && v.abs() <= 2.0));
        let test = x("test_x");
        assert_eq!(test.len(), 41);
        assert!(test.windows(2).all(|w| w[0] <= w[1]));
        assert!(test.iter().all(|v| v.abs() <= 3.0));
        let regions: Vec<&str> = rep["region"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        // One region per test input: an empty or short list would skip the checks below.
        assert_eq!(regions.len(), test.len(), "regions per test input");
        for (v, r) in test.iter().zip(&regions) {
            let want = if v.abs() > 2.0 {
                "out"
            } else if v.abs() < 0.5 {
                "gap"
            } else {
                "in"
            };
            assert_eq!(*r, want, "x = {v}");
        }
    }
    // A repetition's numbers do not depend on the block it ran in.
    let run = |block: &str, out: &Path| {
        let own = dir.path().join(format!("block{block}.toml"));
        let text = std::fs::read_to_string(&spec).unwrap();
        std::fs::write(
            &own,
            text.replace("block = 50", &format!("block = {block}")),
        )
        .unwrap();
        run_spec(&own, out, &[]);
    };
    let (one, four) = (dir.path().join("one"), dir.path().join("four"));
    run("1", &one);
    run("4", &four);
    let rel = "reps/default/Ens+conformal/rep-002.json";
    assert_eq!(
        std::fs::read_to_string(one.join(rel)).unwrap(),
        std::fs::read_to_string(four.join(rel)).unwrap()
    );
    // Points per region are means over the repetitions' own counts.
    let s = summary(&one);
    let gap = s["settings"][0]["methods"]["Ens+conformal"]["aggregate"]["gap"]["points"]["value"]
        .as_f64()
        .unwrap();
    assert!(gap > 0.0 && gap < 41.0, "{gap}");
    // A test grid across the gap is not the training mixture: the report does not call the
    // mean over repetitions the marginal risk.
    assert_eq!(s["settings"][0]["test"]["test_as_train"], false);
    let report = std::fs::read_to_string(one.join("report.md")).unwrap();
    assert!(!report.contains("is marginal over x and y"), "{report}");
    assert!(
        report.contains("not the risk marginal over the training distribution"),
        "{report}"
    );
}

#[test]
fn explicit_points_cannot_be_drawn_per_repetition() {
    let dir = tempfile::tempdir().unwrap();
    let spec = random_spec(
        dir.path(),
        2,
        r#"test = { kind = "points", points = [[0.0], [1.0]] }"#,
    );
    let o = uqbench(&["anchor", spec.to_str().unwrap(), "--rep", "1"]);
    assert_clean_error(
        &o,
        &["problem.test", "explicit points", "design = \"random\""],
    );
    let bad = random_spec(
        dir.path(),
        2,
        r#"test = { kind = "uniform", n = 5, low = -2, high = 2 }"#,
    );
    let text = std::fs::read_to_string(&bad)
        .unwrap()
        .replace(r#"design = "random""#, r#"design = "shuffled""#);
    std::fs::write(&bad, text).unwrap();
    let o = uqbench(&["anchor", bad.to_str().unwrap()]);
    assert_clean_error(&o, &["design", "shuffled", "fixed", "random"]);
}

#[test]
fn export_anchor_and_score_use_each_repetitions_own_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let spec = random_spec(
        dir.path(),
        3,
        r#"test = { kind = "uniform", n = 15, low = -2, high = 2 }"#,
    );
    let data = dir.path().join("data");
    let o = uqbench(&[
        "export",
        spec.to_str().unwrap(),
        "--reps",
        "3",
        "--out",
        data.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The scored predictions are the anchor's own, repetition by repetition: scored at the
    // right inputs against the right fit, their distance to the anchor is 0 (a repetition
    // judged at repetition 0's inputs would not be).
    let preds = dir.path().join("preds/default");
    std::fs::create_dir_all(&preds).unwrap();
    let mut tests = Vec::new();
    for r in 0..3 {
        let o = uqbench(&[
            "anchor",
            spec.to_str().unwrap(),
            "--rep",
            &r.to_string(),
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let a: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let j: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(data.join(format!("default/rep-{r:03}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(j["test_x"], a["test_x"], "rep {r}");
        assert_eq!(j["train_x"], a["train_x"], "rep {r}");
        assert_eq!(j["train_y"], a["train_y"], "rep {r}");
        tests.push(a["test_x"].clone());
        let p = serde_json::json!({"mean": a["mean"], "std": a["std"]});
        std::fs::write(preds.join(format!("rep-{r:03}.json")), p.to_string()).unwrap();
    }
    assert_ne!(tests[0], tests[1]);
    let out = dir.path().join("score");
    let o = uqbench(&[
        "score",
        spec.to_str().unwrap(),
        "--predictions",
        dir.path().join("preds").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = summary(&out);
    let ext = &s["settings"][0]["methods"]["external"]["aggregate"]["all"];
    let w2 = ext["w2_anchor"]["value"].as_f64().unwrap();
    assert!(w2 < 1e-9, "w2 to the anchor {w2}");
    let blr = &s["settings"][0]["methods"]["BLR"]["aggregate"]["all"];
    assert_eq!(ext["deviation"]["value"], blr["deviation"]["value"]);
}
