//! Stored draws (`rep-NNN.draws`): written by a run, written out by `uqbench draws` as
//! `uqbench score`'s input, and scored again to the run's own joint metrics.

use crate::util::*;
use serde_json::Value;

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `uqbench draws DIR --method M --setting f_main=1 --out OUT`, then `uqbench score` of OUT:
/// the scored repetitions.csv's joint metrics of `name`, keyed (region, metric, repetition).
fn rescore(
    dir: &Path,
    method: &str,
    name: &str,
    tmp: &Path,
) -> std::collections::BTreeMap<(String, String, u64), f64> {
    let (x, s) = (tmp.join(format!("x-{name}")), tmp.join(format!("s-{name}")));
    let o = uqbench(&[
        "draws",
        dir.to_str().unwrap(),
        "--method",
        method,
        "--setting",
        "f_main=1",
        "--out",
        x.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let spec = dir.join("spec.resolved.toml");
    let o = uqbench(&[
        "score",
        spec.to_str().unwrap(),
        "--predictions",
        x.to_str().unwrap(),
        "--setting",
        "f_main=1",
        "--method",
        name,
        "--out",
        s.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(s.join("repetitions.csv")).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().skip(1) {
        let c: Vec<&str> = line.split(',').collect();
        let joint = c[3].starts_with("joint_kl_") || c[3].starts_with("env_kl_");
        if c[1] == name && joint && !c[3].ends_with("_se") {
            out.insert(
                (c[2].to_string(), c[3].to_string(), c[4].parse().unwrap()),
                c[5].parse().unwrap(),
            );
        }
    }
    out
}

#[test]
fn stored_draws_score_again_to_the_runs_joint_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |format: &str| {
        let dir = tmp.path().join(format);
        let o = run_quick(
            &dir,
            &["--methods", "Ens,VD", "--reps", "0..3", "--draws", format],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        dir
    };
    let f32_dir = run("f32");
    let i8_dir = run("i8");
    // Stored in f32, an ensemble's members, dropout's passes and the anchor's Gaussian joint
    // score to the run's joint metrics: the scored repetition draws the same batches and y
    // (the spec's seed), and f32 moves each value by a relative 2^-24, which moves a log
    // density of τ ≤ 10 inputs by far less than 1e-5 nats.
    for (method, name) in [("Ens", "Ens"), ("VD", "VD"), ("BLR", "stored-anchor")] {
        let scored = rescore(&f32_dir, method, name, tmp.path());
        assert_eq!(scored.len(), 3 * 3 * 4, "{method}: {scored:?}");
        for ((region, metric, r), v) in &scored {
            let native = json(
                &f32_dir
                    .join("reps/f_main=1")
                    .join(method)
                    .join(format!("rep-{r:03}.json")),
            );
            let want = native["joint"][region][metric].as_f64().unwrap();
            assert!(
                (v - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{method} {region} {metric} rep {r}: scored {v}, run {want}"
            );
        }
    }
    // In 8 bits, every draw is within half a step, (range of its input's draws)/508, of the
    // f32 run's (the same seeds give the same draws). The format quantises each test input on
    // its own, and `uqbench draws` writes `samples` input-major (one row per test input, its
    // draws along the row): so a row's range is the input's range, the format's own bound.
    // The shape is asserted so that a transposed file cannot pass with a wider bound.
    let (x32, x8) = (tmp.path().join("x-Ens"), tmp.path().join("x8"));
    let o = uqbench(&[
        "draws",
        i8_dir.to_str().unwrap(),
        "--method",
        "Ens",
        "--out",
        x8.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for r in 0..3 {
        let file = format!("f_main=1/rep-{r:03}.json");
        let (a, b) = (json(&x32.join(&file)), json(&x8.join(&file)));
        let (a, b) = (
            a["samples"].as_array().unwrap(),
            b["samples"].as_array().unwrap(),
        );
        assert_eq!(a.len(), b.len());
        // e1's quick profile: 1 000 grid points and 3 more test inputs, Ens with 6 members.
        assert_eq!(a.len(), 1003, "rows are test inputs");
        assert!(
            a.iter().all(|row| row.as_array().unwrap().len() == 6),
            "columns are members"
        );
        for (row32, row8) in a.iter().zip(b) {
            let row32: Vec<f64> = row32
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let row8: Vec<f64> = row8
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let hi = row32.iter().cloned().fold(f64::MIN, f64::max);
            let lo = row32.iter().cloned().fold(f64::MAX, f64::min);
            // f32's own rounding of the centre and the step adds at most a few ulps.
            let bound = (hi - lo) / 508.0 * (1.0 + 1e-5)
                + 4.0 * f32::EPSILON as f64 * hi.abs().max(lo.abs());
            assert_eq!(row32.len(), row8.len(), "rep {r}: draws per input");
            for (x, y) in row32.iter().zip(&row8) {
                assert!(
                    (x - y).abs() <= bound,
                    "rep {r}: {x} vs {y} (bound {bound})"
                );
            }
        }
    }
    // 8 bits per value: the i8 run's draws files are well under half the f32 run's.
    let size = |dir: &Path| -> u64 {
        files_under(&dir.join("reps"))
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "draws"))
            .map(|f| std::fs::metadata(dir.join("reps").join(f)).unwrap().len())
            .sum()
    };
    assert!(
        2 * size(&i8_dir) < size(&f32_dir),
        "{} vs {}",
        size(&i8_dir),
        size(&f32_dir)
    );
}

#[test]
fn no_draws_and_bad_draws_requests_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("none");
    let o = run_quick(
        &dir,
        &["--methods", "Ens", "--reps", "0..2", "--draws", "none"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(count_files(&dir.join("reps"), "draws"), 0);
    assert_eq!(count_files(&dir.join("reps"), "json"), 2 * 2 * 2);
    let out = tmp.path().join("x");
    let draws = |dir: &Path, method: &str| {
        uqbench(&[
            "draws",
            dir.to_str().unwrap(),
            "--method",
            method,
            "--out",
            out.to_str().unwrap(),
        ])
    };
    assert_clean_error(&draws(&dir, "Ens"), &["no draws files of Ens", "run.draws"]);
    assert_clean_error(&draws(&dir, "MCD"), &["--method MCD", "valid: Ens"]);
    assert_clean_error(&draws(tmp.path(), "Ens"), &["not a run directory"]);
    let o = run_quick(&tmp.path().join("bad"), &["--draws", "f16"]);
    assert_clean_error(&o, &["--draws f16", "valid: i8"]);
    // A damaged draws file names itself and what is wrong.
    let dir = tmp.path().join("i8");
    let o = run_quick(&dir, &["--methods", "Ens", "--reps", "0..1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let file = dir.join("reps/f_main=1/Ens/rep-000.draws");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 10]).unwrap();
    assert_clean_error(
        &draws(&dir, "Ens"),
        &["rep-000.draws is not a draws file", "truncated"],
    );
}

/// HMC with σ sampled stores prediction intervals of y that are the mixture over its draws of
/// N(f_s, σ_s²), each draw with its own σ: recomputed here from the draws file (f32) by
/// bisection on the mixture's CDF, at every test input, to 1e-4 of the interval's half-width
/// (`util::normal_cdf` is good to 1.5e-7, the draws to f32). A PI built from the mean σ, or from
/// draws paired with another draw's σ, misses by far more (asserted on the same draws).
#[test]
fn hmc_prediction_intervals_are_the_per_draw_sigma_mixture() {
    let spec = r#"
name = "hmc-pi"
seed = 11
[problem]
d = 1
sigma = 0.3
sigma_known = false
gamma = [0.5, -1, 0, 2]
features = [{ kind = "polynomial", degree = 3 }]
train = { kind = "uniform", n = 12, low = -1, high = 1 }
test = { kind = "grid", n = 7, low = -2, high = 2 }
[run]
repetitions = 1
epochs = 1
levels = [0.9]
methods = ["HMC"]
[methods.HMC]
hidden = [3]
chains = 4
warmup = 100
draws = 100
"#;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("hmc.toml");
    std::fs::write(&path, spec).unwrap();
    let out = tmp.path().join("run");
    run_spec(&path, &out, &["--draws", "f32"]);
    let x = tmp.path().join("x");
    let o = uqbench(&[
        "draws",
        out.to_str().unwrap(),
        "--method",
        "HMC",
        "--out",
        x.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d = json(&x.join("default/rep-000.json"));
    let rep = json(&out.join("reps/default/HMC/rep-000.json"));
    let floats = |v: &Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let sigma = floats(&d["noise_std"]);
    let samples: Vec<Vec<f64>> = d["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(floats)
        .collect();
    assert_eq!(samples.len(), 7);
    assert_eq!(sigma.len(), samples[0].len(), "one σ per draw");
    let spread =
        sigma.iter().cloned().fold(0.0, f64::max) / sigma.iter().cloned().fold(f64::MAX, f64::min);
    assert!(
        spread > 1.2,
        "σ draws barely vary ({spread}): the test would not tell them apart"
    );
    let pi = &rep["intervals"]["0.9"];
    let quantile = |f: &[f64], s: &dyn Fn(usize) -> f64, p: f64| -> f64 {
        let cdf = |q: f64| {
            f.iter()
                .enumerate()
                .map(|(k, v)| normal_cdf((q - v) / s(k)))
                .sum::<f64>()
                / f.len() as f64
        };
        let (mut lo, mut hi) = (-1e3, 1e3);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if cdf(mid) < p {
                lo = mid
            } else {
                hi = mid
            }
        }
        0.5 * (lo + hi)
    };
    let mean_sigma = sigma.iter().sum::<f64>() / sigma.len() as f64;
    let mut worst_other = 0.0f64;
    for (i, f) in samples.iter().enumerate() {
        let stored = (
            pi["pi_lower"][i].as_f64().unwrap(),
            pi["pi_upper"][i].as_f64().unwrap(),
        );
        let half = 0.5 * (stored.1 - stored.0);
        let own = (
            quantile(f, &|k| sigma[k], 0.05),
            quantile(f, &|k| sigma[k], 0.95),
        );
        assert!(
            (own.0 - stored.0).abs() < 1e-4 * half && (own.1 - stored.1).abs() < 1e-4 * half,
            "input {i}: stored PI {stored:?}, per-draw-σ mixture {own:?}"
        );
        let n = sigma.len();
        for other in [
            quantile(f, &|_| mean_sigma, 0.95),
            quantile(f, &|k| sigma[(k + n / 2) % n], 0.95),
        ] {
            worst_other = worst_other.max((other - stored.1).abs() / half);
        }
    }
    assert!(
        worst_other > 1e-2,
        "other pairings are indistinguishable ({worst_other})"
    );
}
