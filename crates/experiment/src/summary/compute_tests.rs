//! Tests of `compute.rs`: the summary on hand-computed cases.

use std::collections::BTreeMap;

use uqbench_anchor::Region;
use uqbench_core::Family;
use uqbench_core::Method;

use super::*;
use crate::spec::ExperimentSpec;
use crate::summary::types::{RepInputs, Summary};

fn rep(r: u64, mean: [f64; 2], std: [f64; 2]) -> RepResult {
    RepResult {
        repetition: r,
        mean: mean.to_vec(),
        std: std.to_vec(),
        noise_std: None,
        predictive_std: None,
        family: Family::Normal,
        intervals: BTreeMap::new(),
        calibrated_pi: BTreeMap::new(),
        w2_anchor: None,
        kl_anchor: None,
        crps: None,
        scalars: BTreeMap::from([("train_mse".to_string(), r as f64)]),
        diverged: false,
        joint_kind: None,
        joint_of_base: false,
        joint: BTreeMap::new(),
    }
}

fn two_points() -> TestInfo {
    TestInfo {
        x: vec![vec![0.0], vec![5.0]],
        coord: None,
        region: vec![Region::In, Region::Out],
        label: vec![None, None],
        truth: vec![0.0, 1.0],
        sigma: vec![1.0, 1.0],
        design: None,
        test_as_train: None,
        repetitions: None,
    }
}

#[test]
fn three_repetitions_at_two_points_by_hand() {
    let mut bad = rep(3, [f64::NAN, f64::NAN], [f64::NAN, f64::NAN]);
    bad.diverged = true;
    let reps = vec![
        rep(0, [0.5, 1.0], [0.5, 0.1]),
        rep(1, [-1.0, 2.0], [0.4, 0.2]),
        rep(2, [0.1, 0.7], [0.2, 0.3]),
        bad,
    ];
    let s = summarize_method(&two_points(), &reps, &[0.9], None).unwrap();
    assert_eq!((s.repetitions, s.diverged.clone()), (3, vec![3]));
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    // Point 0: deviations 0.5, 1.0, 0.1 → mean 0.53333, sample variance 0.20333, se
    // sqrt(0.20333/3) = 0.260342.
    let dev = &s.points["deviation"];
    assert!(close(dev.value[0], 1.6 / 3.0) && close(dev.stderr[0], (0.61 / 9.0f64).sqrt()));
    // Coverage of ±1.96·std: point 0 covered by repetitions 0 (0.5 < 0.98) and 2 (0.1 <
    // 0.392), not 1 (1.0 ≥ 0.784); point 1 by 0 (0 < 0.196) and 2 (0.3 < 0.588).
    let cov = &s.points["coverage"];
    assert!(close(cov.value[0], 2.0 / 3.0) && close(cov.value[1], 2.0 / 3.0));
    assert!(close(cov.stderr[0], (2.0f64 / 27.0).sqrt()));
    // CICF at 0.9 (z = 1.644854): point 0 by repetitions 0 (0.5 ≤ 0.822) and 2 (0.1 ≤
    // 0.329); mean width 2·z·(0.5 + 0.4 + 0.2)/3 = 1.206226.
    assert!(close(s.points["cicf_0.9"].value[0], 2.0 / 3.0));
    let z = 1.644_853_626_951_472_2;
    assert!(close(s.points["width_0.9"].value[0], 2.0 * z * 1.1 / 3.0));
    // Each repetition's marginal CICP at 0.9 over both points: point 1 is covered by
    // repetitions 0 (0 ≤ 0.164) and 2 (0.3 ≤ 0.493), not 1 (1.0 > 0.329); so 1, 0, 1.
    assert_eq!(s.per_repetition["cicp_0.9"], vec![1.0, 0.0, 1.0]);
    // Aggregates: the mean deviation over both points, (0.53333 + 0.43333)/2; per region
    // `in` is point 0 alone; scalars are means over the three repetitions.
    assert!(close(
        s.aggregate["all"]["deviation"].value,
        (1.6 + 1.3) / 6.0
    ));
    assert!(close(s.aggregate["in"]["deviation"].value, 1.6 / 3.0));
    assert!(close(s.aggregate["all"]["train_mse"].value, 1.0));
    // The CSV carries the per-point value and the diverged count.
    let summary = Summary {
        experiment: "t".into(),
        levels: vec![0.9],
        settings: vec![SettingSummary {
            setting: "w=1".into(),
            test: two_points(),
            methods: BTreeMap::from([("M".to_string(), s)]),
        }],
    };
    let csv = summary.points_csv();
    assert!(csv.contains("w=1,M,,,,all,,diverged,1.0,,,\n"), "{csv}");
    assert!(
        csv.contains(&format!("w=1,M,0,0.0,,in,,deviation,{},", 1.6 / 3.0)),
        "{csv}"
    );
    assert!(summary
        .aggregate_csv()
        .contains("w=1,M,all,diverged,1.0,,,\n"));
}

#[test]
fn region_error_bars_are_over_repetitions_by_hand() {
    // Four points (truth 0, 1, 2, 3; σ = 1), the first two `in`, the last two `out`, and
    // three repetitions.
    let test = TestInfo {
        x: (0..4).map(|i| vec![f64::from(i)]).collect(),
        coord: None,
        region: vec![Region::In, Region::In, Region::Out, Region::Out],
        label: vec![None; 4],
        truth: vec![0.0, 1.0, 2.0, 3.0],
        sigma: vec![1.0; 4],
        design: None,
        test_as_train: None,
        repetitions: None,
    };
    let rep4 = |r: u64, mean: [f64; 4], std: [f64; 4]| RepResult {
        repetition: r,
        mean: mean.to_vec(),
        std: std.to_vec(),
        ..rep(r, [0.0; 2], [0.0; 2])
    };
    let reps = vec![
        rep4(0, [0.5, 1.0, 2.0, 4.0], [0.5; 4]),
        rep4(1, [-1.0, 1.5, 2.2, 3.0], [0.4; 4]),
        rep4(2, [0.1, 0.0, 2.5, 3.5], [0.2, 0.2, 1.0, 1.0]),
    ];
    let s = summarize_method(&test, &reps, &[0.9], None).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let se3 = |v: [f64; 3]| {
        let m = (v[0] + v[1] + v[2]) / 3.0;
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / 2.0 / 3.0).sqrt()
    };
    // Deviations: rep 0 [0.5, 0, 0, 1], rep 1 [1, 0.5, 0.2, 0], rep 2 [0.1, 1, 0.5, 0.5].
    // `in` per repetition: 0.25, 0.75, 0.55 → mean 0.516667, sd 0.251661, se 0.145297.
    let dev = s.aggregate["in"]["deviation"];
    assert!(close(dev.value, 1.55 / 3.0) && close(dev.stderr, 0.145_296_631_4));
    assert!(close(dev.stderr, se3([0.25, 0.75, 0.55])));
    // `all` per repetition: 0.375, 0.425, 0.525 → se of those.
    let dev = s.aggregate["all"]["deviation"];
    assert!(close(dev.value, 1.325 / 3.0) && close(dev.stderr, se3([0.375, 0.425, 0.525])));
    // The spread across the `in` points of their mean deviations, 0.53333 and 0.5, is
    // |difference|/√2 = 0.0235702: descriptive, and not the standard error.
    assert!(close(
        s.aggregate["in"]["deviation"].points_sd.unwrap(),
        0.1 / 3.0 / 2f64.sqrt()
    ));
    // Coverage of ±1.96·std (strict): rep 0 [1, 1, 1, 0], rep 1 [0, 1, 1, 1], rep 2
    // [1, 0, 1, 1]. `in` per repetition 1, ½, ½ → 2/3 with se sqrt(1/12/3) = 1/6; `all`
    // per repetition ¾ each → se 0 (the across-points "se" of the old code was 0.083).
    let cov = s.aggregate["in"]["coverage"];
    assert!(close(cov.value, 2.0 / 3.0) && close(cov.stderr, 1.0 / 6.0));
    let cov = s.aggregate["all"]["coverage"];
    assert!(close(cov.value, 0.75) && close(cov.stderr, 0.0));
    // Width at 0.9 in `in`: per repetition 2z·0.5, 2z·0.4, 2z·0.2.
    let z = 1.644_853_626_951_472_2;
    let w = s.aggregate["in"]["width_0.9"];
    assert!(close(w.value, 2.0 * z * 1.1 / 3.0) && close(w.stderr, 2.0 * z * se3([0.5, 0.4, 0.2])));
    // CICF at 0.9 in `in` (half widths 0.822, 0.658, 0.329): rep 0 [1, 1], rep 1 [0, 1],
    // rep 2 [1, 0]; CF = (2/3, 2/3), Brier (2/3 − 0.9)² = 0.054444. Leaving out one
    // repetition: CF (½, ½) → 0.16, (1, ½) → 0.085, (½, 1) → 0.085; mean 0.11, jackknife
    // se sqrt(2/3 · (0.05² + 2·0.025²)) = 0.05.
    let b = s.aggregate["in"]["cicf_brier_0.9"];
    assert!(close(b.value, (2.0f64 / 3.0 - 0.9).powi(2)) && close(b.stderr, 0.05));
    // The region's CICP: per repetition 1, ½, ½ → 2/3 ± 1/6.
    let c = s.aggregate["in"]["cicp_0.9"];
    assert!(close(c.value, 2.0 / 3.0) && close(c.stderr, 1.0 / 6.0));
    // Each repetition's region value is kept for paired comparisons: `in` deviation per
    // repetition as above, and every aggregate that is a mean over repetitions is the mean
    // of its kept values.
    let by = &s.by_repetition;
    assert_eq!(by.repetitions, vec![0, 1, 2]);
    for (got, want) in by.values["in"]["deviation"].iter().zip([0.25, 0.75, 0.55]) {
        assert!(close(*got, want));
    }
    let mut checked = 0;
    for (region, metrics) in &by.values {
        for (metric, v) in metrics {
            let agg = s.aggregate[region][metric].value;
            let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
            let mean = finite.iter().sum::<f64>() / finite.len() as f64;
            assert!(close(agg, mean), "{region}/{metric}: {agg} vs {mean}");
            checked += 1;
        }
    }
    // 3 regions × (deviation, uncertainty, crps, coverage, cicp, picp, width, pi_width), and
    // the scalar `train_mse` in `all`.
    assert_eq!(checked, 3 * 8 + 1, "{:?}", by.values);
    // The CSV carries the spread in its own column.
    let summary = Summary {
        experiment: "t".into(),
        levels: vec![0.9],
        settings: vec![SettingSummary {
            setting: String::new(),
            test,
            methods: BTreeMap::from([("M".to_string(), s)]),
        }],
    };
    let csv = summary.aggregate_csv();
    assert!(csv.starts_with("setting,method,region,metric,value,stderr,points_sd,infinite\n"));
    let row: Vec<f64> = csv
        .lines()
        .find(|l| l.starts_with(",M,in,deviation,"))
        .expect("the row")
        .split(',')
        .skip(4)
        .map(|v| v.parse().unwrap())
        .collect();
    assert!(close(row[0], 1.55 / 3.0) && close(row[1], 0.145_296_631_4));
    assert!(close(row[2], 0.1 / 3.0 / 2f64.sqrt()), "{csv}");
    // No repetition was infinite.
    assert_eq!(row[3], 0.0, "{csv}");
    // repetitions.csv: one row per region × metric × repetition.
    let reps_csv = summary.repetitions_csv();
    assert!(reps_csv.starts_with("setting,method,region,metric,repetition,value\n"));
    assert!(
        reps_csv.contains("\n,M,in,deviation,1,0.75\n"),
        "{reps_csv}"
    );
    assert_eq!(reps_csv.lines().count(), 1 + (3 * 8 + 1) * 3);
}

#[test]
fn a_non_finite_prediction_must_be_marked_diverged() {
    let reps = vec![rep(0, [f64::NAN, 1.0], [0.1, 0.1])];
    let e = summarize_method(&two_points(), &reps, &[0.9], None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("repetition 0, test input 0") && e.contains("diverged"),
        "{e}"
    );
}

#[test]
fn the_student_t_anchor_covers_at_its_level() {
    // A quartic with N = 12 and σ unknown: 12 − 5 = 7 degrees of freedom. Normal quantiles
    // would cover f in P(|T₇| < 1.96) = 0.909 of the repetitions; t quantiles in 0.95.
    let spec = ExperimentSpec::from_toml_str(
        r#"
name = "t7"
seed = 3
[problem]
d = 1
sigma = 1
sigma_known = false
gamma = [0, 0.5, -8, -1, 2]
features = [{ kind = "polynomial", degree = 4 }]
train = { kind = "grid", n = 12, low = -2, high = 2.5 }
test = { kind = "grid", n = 9, low = -2, high = 2.5 }
"#,
        None,
    )
    .unwrap();
    let problem = spec.resolve(&Default::default()).unwrap();
    let k = 2000;
    let all: Vec<u64> = (0..k).collect();
    let data = problem.task_data(&all, false);
    let task = data.task(
        1,
        uqbench_core::SeedBase {
            base: 3,
            experiment: "t7".into(),
            setting: String::new(),
        },
    );
    let predictions = uqbench_anchor::Blr
        .run(&task, &uqbench_core::Compute::host(), false, &|_| {})
        .unwrap();
    let reps: Vec<RepResult> = predictions
        .into_iter()
        .zip(&data.y)
        .enumerate()
        .map(|(r, (o, y))| {
            RepResult::from_output(
                r as u64,
                o,
                &crate::summary::RepContext {
                    levels: &[],
                    truth: &problem.test.truth,
                    test_sigma: &problem.test.sigma,
                    train_y: y,
                    train_sigma: &problem.train_sigma,
                    anchor: None,
                    joint: None,
                },
            )
            .unwrap()
        })
        .collect();
    assert_eq!(reps[0].family, Family::StudentT { dof: 7.0 });
    let test = TestInfo::of(&problem);
    let s = summarize_method(&test, &reps, &[0.95, 0.8], None).unwrap();
    // Each point's CICF over k = 2000 repetitions has sd sqrt(0.95·0.05/2000) = 0.00487
    // (0.0089 at 0.8); 9 points × 2 metrics per level: 4 sd keeps the family-wise false
    // alarm rate below 18 × 6.3e-5 ≈ 1e-3, and the normal-quantile error (0.041) is
    // 8 sd away.
    for (level, sd) in [(0.95, 0.00487), (0.8, 0.00894)] {
        let name = crate::summary::level_name(level);
        for metric in ["cicf", "picf"] {
            for (i, c) in s.points[&format!("{metric}_{name}")]
                .value
                .iter()
                .enumerate()
            {
                assert!(
                    (c - level).abs() < 4.0 * sd,
                    "{metric} {level} at point {i}: {c}"
                );
            }
        }
    }
    // The training fit: E[RSS/σ²] = N − p, so fit_ratio averages 7/12 = 0.583; over
    // 2000 repetitions its sd is sqrt(2·7)/12/sqrt(2000) = 0.0070 (σ² estimated only
    // matters for the intervals, the ratio uses the true σ = 1).
    let fit = s.aggregate["all"]["fit_ratio"].value;
    assert!((fit - 7.0 / 12.0).abs() < 4.0 * 0.0070, "fit_ratio {fit}");
}

#[test]
fn a_random_design_judges_each_repetition_at_its_own_inputs_by_hand() {
    // Two test slots and two repetitions with their own inputs: repetition 0 has truth
    // [0, 1] with regions [in, out], repetition 1 truth [2, 3] with regions [out, in]. The
    // nominal fields (slot means) would give other numbers.
    let own = |truth: [f64; 2], region: [Region; 2]| RepInputs {
        x: truth.to_vec(),
        region: region.to_vec(),
        truth: truth.to_vec(),
        sigma: vec![1.0; 2],
        coord: None,
    };
    let test = TestInfo {
        x: vec![vec![1.0], vec![2.0]],
        coord: None,
        region: vec![Region::Out, Region::Out],
        label: vec![None; 2],
        truth: vec![1.0, 2.0],
        sigma: vec![1.0; 2],
        design: Some(crate::summary::RANDOM.into()),
        test_as_train: Some(true),
        repetitions: Some(BTreeMap::from([
            (0, own([0.0, 1.0], [Region::In, Region::Out])),
            (1, own([2.0, 3.0], [Region::Out, Region::In])),
        ])),
    };
    let reps = vec![rep(0, [0.5, 1.0], [0.1; 2]), rep(1, [2.0, 4.0], [0.1; 2])];
    let s = summarize_method(&test, &reps, &[0.9], None).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    // Deviations: repetition 0 [0.5, 0], repetition 1 [0, 1]. `in`: 0.5 (rep 0, slot 0) and
    // 1 (rep 1, slot 1); `out`: 0 and 0.
    assert!(close(s.aggregate["in"]["deviation"].value, 0.75));
    assert!(close(s.aggregate["out"]["deviation"].value, 0.0));
    assert!(close(s.aggregate["all"]["deviation"].value, 0.375));
    // One point of each region per repetition.
    assert!(close(s.aggregate["in"]["points"].value, 1.0));
    // Per slot, pooled over repetitions: slot 0's deviations 0.5 and 0.
    assert!(close(s.points["deviation"].value[0], 0.25));
    // Coverage of f by ±1.96·0.1: only repetition 0's slot 1 and repetition 1's slot 0.
    assert!(close(s.aggregate["out"]["coverage"].value, 1.0));
    assert!(close(s.aggregate["in"]["coverage"].value, 0.0));
    // The per-point Brier scores need fixed points: left out.
    assert!(!s.aggregate["all"].contains_key("cicf_brier_0.9"));
    // A repetition missing from the random design's inputs is an error naming it.
    let err = summarize_method(&test, &[rep(7, [0.0; 2], [0.1; 2])], &[0.9], None).unwrap_err();
    assert!(err.to_string().contains("repetition 7"), "{err}");
}

/// Issue 59 §4: an infinite KL (uncertainty 0 where the method errs) or R̂ (chains that never
/// moved) is a result. It survives the stored file, makes the mean over repetitions +∞ with
/// its count, and is written `inf` in the CSV files, never as "no value".
#[test]
fn an_infinite_value_is_kept_through_the_file_and_counted() {
    let inf = f64::INFINITY;
    let mut reps: Vec<RepResult> = (0..3)
        .map(|r| {
            let mut x = rep(r, [0.1 * r as f64, 1.0], [0.5, 0.5]);
            x.kl_anchor = Some(vec![0.1 + r as f64, 0.2]);
            x.scalars.insert("rhat_max".into(), 1.001);
            x
        })
        .collect();
    reps[1].kl_anchor = Some(vec![inf, 0.3]);
    reps[2].scalars.insert("rhat_max".into(), inf);
    reps[0].joint = BTreeMap::from([(
        "all".to_string(),
        BTreeMap::from([("joint_kl_10".to_string(), inf)]),
    )]);
    reps[1].joint = BTreeMap::from([(
        "all".to_string(),
        BTreeMap::from([("joint_kl_10".to_string(), 2.0)]),
    )]);
    // Through the stored file, as a run reads its repetitions back.
    let reps: Vec<RepResult> = reps
        .into_iter()
        .map(|r| {
            let text = crate::track::Stored::Regression(r).to_json().unwrap();
            serde_json::from_str(&text).unwrap()
        })
        .collect();
    assert_eq!(reps[1].kl_anchor.as_ref().unwrap()[0], inf);
    assert_eq!(reps[2].scalars["rhat_max"], inf);
    assert_eq!(reps[0].joint["all"]["joint_kl_10"], inf);
    let s = summarize_method(&two_points(), &reps, &[0.9], None).unwrap();
    let kl = s.aggregate["all"]["kl_anchor"];
    assert_eq!((kl.value, kl.infinite), (inf, Some(1)));
    assert!(kl.stderr.is_nan());
    assert_eq!(s.aggregate["in"]["kl_anchor"].infinite, Some(1));
    // Point 1 (region out) was finite in every repetition: (0.2 + 0.3 + 0.2)/3.
    let out = s.aggregate["out"]["kl_anchor"];
    assert_eq!(out.infinite, Some(0));
    assert!((out.value - 0.7 / 3.0).abs() < 1e-12 && out.stderr.is_finite());
    assert_eq!(s.points["kl_anchor"].value[0], inf);
    let rhat = s.aggregate["all"]["rhat_max"];
    assert_eq!((rhat.value, rhat.infinite), (inf, Some(1)));
    // The joint KL: repetition 2 has none (left out), repetition 0 is +∞.
    let joint = s.aggregate["all"]["joint_kl_10"];
    assert_eq!((joint.value, joint.infinite), (inf, Some(1)));
    let summary = Summary {
        experiment: "t".into(),
        levels: vec![0.9],
        settings: vec![SettingSummary {
            setting: String::new(),
            test: two_points(),
            methods: BTreeMap::from([("M".to_string(), s)]),
        }],
    };
    let csv = summary.aggregate_csv();
    assert!(csv.contains("\n,M,all,kl_anchor,inf,,,1.0\n"), "{csv}");
    assert!(csv.contains("\n,M,all,rhat_max,inf,,,1.0\n"), "{csv}");
    assert!(summary.points_csv().contains(",kl_anchor,inf,"));
    let reps_csv = summary.repetitions_csv();
    assert!(
        reps_csv.contains("\n,M,all,kl_anchor,1,inf\n"),
        "{reps_csv}"
    );
    // Repetition 2 has no joint KL: empty, not inf.
    assert!(reps_csv.contains("\n,M,all,joint_kl_10,2,\n"), "{reps_csv}");
    // summary.json: "inf" (JSON has no number for it), null for the undefined error bar.
    let json = summary.to_json();
    assert_eq!(
        json["settings"][0]["methods"]["M"]["aggregate"]["all"]["kl_anchor"],
        serde_json::json!({"value": "inf", "stderr": null, "infinite": 1})
    );
}
