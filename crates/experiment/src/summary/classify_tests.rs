//! Tests of `classify.rs`: the classification track's summary against exact and sampled bounds.

use super::*;
use uqbench_anchor::Region;

/// A 1-D-like test set of `m` points with probabilities spread over (0, 1).
fn test_info(m: usize) -> TestInfo {
    let truth: Vec<f64> = (0..m)
        .map(|i| 1.0 / (1.0 + (-((i as f64 / m as f64) * 12.0 - 6.0)).exp()))
        .collect();
    TestInfo {
        x: (0..m).map(|i| vec![i as f64, 0.0]).collect(),
        coord: None,
        region: (0..m)
            .map(|i| if i < m / 2 { Region::In } else { Region::Out })
            .collect(),
        label: vec![None; m],
        sigma: truth.iter().map(|p| (p * (1.0 - p)).sqrt()).collect(),
        truth,
        design: None,
        test_as_train: None,
        repetitions: None,
    }
}

fn labels_for(test: &TestInfo) -> impl Fn(u64) -> Vec<bool> + '_ {
    move |rep| {
        test_labels(
            &SeedPath {
                base: 1,
                experiment: "t",
                setting: "",
                repetition: rep,
                member: 0,
                purpose: TEST_LABELS,
            },
            &test.truth,
        )
    }
}

/// The summary over 20 repetitions of a "method" whose only draw is the exact P.
fn exact_summary(m: usize) -> (TestInfo, MethodSummary) {
    let test = test_info(m);
    let reps: Vec<ClassRep> = (0..20)
        .map(|r| {
            ClassRep::from_draws(
                r,
                std::slice::from_ref(&test.truth),
                &[0.9],
                BTreeMap::new(),
                false,
            )
            .unwrap()
        })
        .collect();
    let s = summarize_classification(&test, &reps, &[0.9], &labels_for(&test)).unwrap();
    (test, s)
}

#[test]
fn the_exact_probability_is_calibrated_and_covered() {
    // A "method" whose only draw is the exact P(y = 1 | x): its interval has width 0 at
    // the truth and covers it everywhere; its ECE on fresh labels is sampling noise only.
    let m = 2000;
    let (test, s) = exact_summary(m);
    let all = &s.aggregate["all"];
    assert_eq!(all["coverage_0.9"].value, 1.0);
    assert_eq!(all["width_0.9"].value, 0.0);
    assert_eq!(all["abs_error"].value, 0.0);
    assert_eq!(all["mutual_information"].value, 0.0);
    // ECE's sampling bound, per repetition: with the confidence c_i = max(p_i, 1 − p_i)
    // exact, bin b's gap |Σ_{i∈b} (1{correct_i} − c_i)|/M has sd s_b/M with
    // s_b² = Σ_{i∈b} p_i(1 − p_i). Allow 4 sd in every bin: a false alarm has probability
    // below 10·6e-5 per repetition.
    let mut sums = [0.0; ECE_BINS];
    for &p in &test.truth {
        let c: f64 = p.max(1.0 - p);
        let b = ((c * ECE_BINS as f64) as usize).min(ECE_BINS - 1);
        sums[b] += p * (1.0 - p);
    }
    let bound: f64 = sums.iter().map(|v| 4.0 * v.sqrt()).sum::<f64>() / m as f64;
    for (r, ece) in s.per_repetition["ece"].iter().enumerate() {
        assert!(
            *ece <= bound,
            "repetition {r}: ECE {ece} above its bound {bound}"
        );
    }
    // Each repetition's value of every region aggregate is kept (for paired comparisons),
    // and the aggregate is the mean of the kept values, over every region and metric.
    let by = &s.by_repetition;
    assert_eq!(by.repetitions.len(), 20);
    for name in ["ece", "nll", "accuracy", "abs_error", "coverage_0.9"] {
        assert!(by.values["all"].contains_key(name), "{name}");
    }
    for (region, metrics) in &by.values {
        for (metric, v) in metrics {
            let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
            let mean = finite.iter().sum::<f64>() / finite.len() as f64;
            let agg = s.aggregate[region][metric].value;
            assert!(
                (agg - mean).abs() <= 1e-12 * mean.abs().max(1.0),
                "{region}/{metric}"
            );
        }
    }
    // Its reliability diagram lies on the diagonal within the binomial error of each bin. An
    // empty bin has no entries; the bins checked must hold all the points (shares summing to
    // 1), and the exact probabilities here spread over several bins, so a diagram that lost
    // its entries cannot pass by skipping them.
    let (mut checked, mut held) = (0, 0.0);
    for b in 0..ECE_BINS {
        let (Some(c), Some(a), Some(share)) = (
            all.get(&format!("reliability_confidence_{b}")),
            all.get(&format!("reliability_accuracy_{b}")),
            all.get(&format!("reliability_share_{b}")),
        ) else {
            continue;
        };
        let n = share.value * (20 * m) as f64;
        let sd = (c.value * (1.0 - c.value) / n).sqrt();
        assert!((a.value - c.value).abs() < 5.0 * sd + 1e-12, "bin {b}");
        checked += 1;
        held += share.value;
    }
    assert!(checked >= 3, "{checked} reliability bins checked");
    assert!(
        (held - 1.0).abs() < 1e-9,
        "the checked bins hold {held} of the points"
    );
}

#[test]
fn referral_of_the_exact_probability_beats_random_referral() {
    // Ranked by the entropy of the exact probability, the retained points are the most
    // predictable ones: the expected accuracy on them exceeds the overall accuracy (the
    // random baseline's expectation) at every fraction below 1. Over 20 repetitions the
    // mean difference has a standard error of at most sqrt(0.25/(0.5·M·20)) = 0.005; the
    // expected gain at 50% retained is about 0.15 here, so 0.05 is far inside it.
    let m = 2000;
    let (_, s) = exact_summary(m);
    let all = &s.aggregate["all"];
    for q in referral_fractions() {
        let name = level_name(q);
        let ours = all[&format!("referral_accuracy_{name}")];
        let random = all[&format!("random_accuracy_{name}")];
        if q < 1.0 {
            let margin = if q <= 0.5 { 0.05 } else { 0.0 };
            assert!(
                ours.value > random.value + margin,
                "q = {q}: {} vs random {}",
                ours.value,
                random.value
            );
        } else {
            assert_eq!(ours.value, random.value);
        }
        // The AUC on the retained points is defined and the random AUC is the overall one
        // in expectation.
        assert!(all[&format!("random_auc_{name}")].value > 0.5);
    }
}

#[test]
fn region_error_bars_are_over_repetitions_by_hand() {
    // Four points with P = 0.2, 0.5, 0.7, 0.9, the first two `in`; three repetitions of two
    // draws each.
    let test = TestInfo {
        x: (0..4).map(|i| vec![f64::from(i), 0.0]).collect(),
        coord: None,
        region: vec![Region::In, Region::In, Region::Out, Region::Out],
        label: vec![None; 4],
        truth: vec![0.2, 0.5, 0.7, 0.9],
        sigma: vec![0.0; 4],
        design: None,
        test_as_train: None,
        repetitions: None,
    };
    let draws = [
        [[0.1, 0.5, 0.6, 0.9], [0.3, 0.5, 0.8, 0.9]],
        [[0.4, 0.4, 0.7, 0.7], [0.4, 0.6, 0.7, 0.9]],
        [[0.1, 0.1, 0.5, 0.9], [0.1, 0.3, 0.5, 0.9]],
    ];
    let reps: Vec<ClassRep> = draws
        .iter()
        .enumerate()
        .map(|(r, d)| {
            let rows: Vec<Vec<f64>> = d.iter().map(|row| row.to_vec()).collect();
            ClassRep::from_draws(r as u64, &rows, &[0.5], BTreeMap::new(), false).unwrap()
        })
        .collect();
    let s = summarize_classification(&test, &reps, &[0.5], &labels_for(&test)).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    // Mean probabilities: rep 0 (0.2, 0.5, 0.7, 0.9), rep 1 (0.4, 0.5, 0.7, 0.8), rep 2
    // (0.1, 0.2, 0.5, 0.9); |error| rep 0 (0, 0, 0, 0), rep 1 (0.2, 0, 0, 0.1), rep 2 (0.1,
    // 0.3, 0.2, 0). `in` per repetition 0, 0.1, 0.2 → 0.1 ± 0.1/√3; `all` 0, 0.075, 0.15
    // → 0.075 ± 0.075/√3.
    let e = s.aggregate["in"]["abs_error"];
    assert!(close(e.value, 0.1) && close(e.stderr, 0.1 / 3f64.sqrt()));
    let e = s.aggregate["all"]["abs_error"];
    assert!(close(e.value, 0.075) && close(e.stderr, 0.075 / 3f64.sqrt()));
    // Central 50% intervals of two draws a ≤ b (type 7): [a + (b − a)/4, a + 3(b − a)/4].
    // Covered (closed): rep 0 (1, 1, 1, 1), rep 1 (0, 1, 1, 0), rep 2 (0, 0, 0, 1); `in`
    // per repetition 1, ½, 0 → ½ ± ½/√3.
    let c = s.aggregate["in"]["coverage_0.5"];
    assert!(close(c.value, 0.5) && close(c.stderr, 0.5 / 3f64.sqrt()));
    // Widths in `in`: (0.1 + 0)/2, (0 + 0.1)/2, (0 + 0.1)/2 per repetition → 0.05 ± 0.
    let w = s.aggregate["in"]["width_0.5"];
    assert!(close(w.value, 0.05) && close(w.stderr, 0.0));
    // The spread across the `in` points of their mean widths (1/30 and 2/30) is descriptive.
    assert!(close(w.points_sd.unwrap(), (1.0 / 30.0) / 2f64.sqrt()));
}

#[test]
fn draws_outside_the_unit_interval_are_errors() {
    let e = ClassRep::from_draws(3, &[vec![0.2, 1.2]], &[0.9], BTreeMap::new(), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("repetition 3") && e.contains("1.2") && e.contains("[0, 1]"),
        "{e}"
    );
    // A diverged repetition keeps its NaN for the record.
    let r = ClassRep::from_draws(0, &[vec![f64::NAN]], &[0.9], BTreeMap::new(), true).unwrap();
    assert!(r.diverged && r.prob[0].is_nan());
    // Intervals are type-7 quantiles of the draws: 0.05/0.95 of {0.1, 0.2, 0.3} are 0.11
    // and 0.29.
    let r = ClassRep::from_draws(
        0,
        &[vec![0.1], vec![0.3], vec![0.2]],
        &[0.9],
        BTreeMap::new(),
        false,
    )
    .unwrap();
    let b = &r.intervals["0.9"];
    assert!((b.lower[0] - 0.11).abs() < 1e-12 && (b.upper[0] - 0.29).abs() < 1e-12);
    assert!((r.prob[0] - 0.2).abs() < 1e-12);
    // Expected entropy: the mean of the draws' binary entropies.
    let h = (binary_entropy(0.1) + binary_entropy(0.2) + binary_entropy(0.3)) / 3.0;
    assert!((r.expected_entropy[0] - h).abs() < 1e-15);
}

#[test]
fn classification_scalars_keep_infinities_and_leave_out_nan() {
    // Three repetitions report `rhat_max`: 1.0, +∞ (an R̂ that could not be computed) and NaN.
    // The aggregate keeps the infinity (its mean is +∞, not the mean of the finite ones) and
    // leaves the NaN out; a scalar that is finite everywhere is the plain mean.
    let test = test_info(40);
    let values = [1.0, f64::INFINITY, f64::NAN];
    let reps: Vec<ClassRep> = values
        .iter()
        .enumerate()
        .map(|(r, &v)| {
            let scalars =
                BTreeMap::from([("rhat_max".to_string(), v), ("steps".to_string(), r as f64)]);
            ClassRep::from_draws(
                r as u64,
                std::slice::from_ref(&test.truth),
                &[0.9],
                scalars,
                false,
            )
            .unwrap()
        })
        .collect();
    let s = summarize_classification(&test, &reps, &[0.9], &labels_for(&test)).unwrap();
    let all = &s.aggregate["all"];
    assert_eq!(
        all["rhat_max"].value,
        f64::INFINITY,
        "{:?}",
        all["rhat_max"]
    );
    assert_eq!(all["steps"].value, 1.0, "{:?}", all["steps"]);
    // Per repetition, every value is kept as it was (for paired comparisons).
    let kept = &s.by_repetition.values["all"]["rhat_max"];
    assert_eq!(kept[0], 1.0);
    assert_eq!(kept[1], f64::INFINITY);
    assert!(kept[2].is_nan());
}
