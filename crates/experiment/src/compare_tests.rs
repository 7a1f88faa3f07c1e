use super::*;

/// K repetitions of three methods: A = z_r; B = z_r + 1 + 0.1·e_r (clearly worse); C = z_r ±
/// 0.01 alternating (the same mean as A exactly, for even K). z_r spreads the repetitions far
/// more than the differences: unpaired error bars would hide what pairing sees.
fn rows(k: u64) -> Vec<RepRow> {
    let mut out = Vec::new();
    for r in 0..k {
        let z = (r as f64 * 1.7).sin() * 5.0;
        let e = (r as f64 * 0.9).cos();
        let alt = if r % 2 == 0 { 0.01 } else { -0.01 };
        for (method, v) in [("A", z), ("B", z + 1.0 + 0.1 * e), ("C", z + alt)] {
            out.push(RepRow {
                setting: "s=1".into(),
                method: method.into(),
                region: "all".into(),
                metric: "crps".into(),
                repetition: r,
                value: v,
            });
        }
    }
    out
}

fn pair<'a>(c: &'a Comparison, a: &str, b: &str) -> &'a PairRecord {
    c.pairs
        .iter()
        .find(|p| p.method_a == a && p.method_b == b)
        .unwrap()
}

#[test]
fn pairs_rank_and_mirror() {
    let c = compare(&rows(30), &Options::default()).unwrap();
    assert_eq!(
        (c.metric.as_str(), c.direction),
        ("crps", Some(Direction::Lower))
    );
    // Every ordered pair: 3 · 2.
    assert_eq!(c.pairs.len(), 6);
    let ab = pair(&c, "A", "B");
    let ba = pair(&c, "B", "A");
    assert_eq!(ab.k, 30);
    assert!((ab.diff + 1.0).abs() < 0.05, "{}", ab.diff);
    assert!(ab.p_holm < 1e-10 && ab.boot_share_a_lower == 1.0);
    assert_eq!(
        (ba.diff, ba.t_low, ba.t_high),
        (-ab.diff, -ab.t_high, -ab.t_low)
    );
    assert_eq!(
        (ba.p_value, ba.p_holm, ba.mdd_unadjusted),
        (ab.p_value, ab.p_holm, ab.mdd_unadjusted)
    );
    assert!((ba.boot_share_a_lower + ab.boot_share_a_lower - 1.0).abs() < 1e-12);
    // A vs C: the mean difference is exactly 0 (alternating ±0.01): p = 1.
    let ac = pair(&c, "A", "C");
    assert!(ac.diff.abs() < 1e-12 && ac.p_value > 0.99, "{ac:?}");
    // Holm over the three unordered pairs.
    let raw = [ab.p_value, ac.p_value, pair(&c, "B", "C").p_value];
    let adj = holm(&raw);
    assert_eq!(ab.p_holm, adj[0]);
    assert_eq!(ac.p_holm, adj[1]);
    // The ranking: A and C tie for first, B third.
    let r = &c.rankings[0];
    let got: Vec<(&str, usize)> = r
        .entries
        .iter()
        .map(|e| (e.method.as_str(), e.rank))
        .collect();
    assert_eq!(got[2], ("B", 3));
    assert_eq!((got[0].1, got[1].1), (1, 1));
    // A and C: first or second; B third and only third.
    let worst: Vec<usize> = r.entries.iter().map(|e| e.rank_worst).collect();
    assert_eq!(worst, vec![2, 2, 3]);
    assert_eq!(r.entries[0].ties.len(), 1);
    assert!(r.entries[2].ties.is_empty());
}

#[test]
fn pairs_follow_repetition_numbers_not_row_order() {
    // Only B's rows change order (their slots reversed among themselves): pairing by row
    // position would then pair A's repetition r with B's 19 − r, and reversing every method's
    // rows together would hide that.
    let mut shuffled = rows(20);
    let slots: Vec<usize> = (0..shuffled.len())
        .filter(|&i| shuffled[i].method == "B")
        .collect();
    let b_rows: Vec<RepRow> = slots.iter().rev().map(|&i| shuffled[i].clone()).collect();
    for (&i, row) in slots.iter().zip(b_rows) {
        shuffled[i] = row;
    }
    assert_ne!(shuffled[1].repetition, 0, "B's rows moved");
    // B has no value at repetition 3 (a diverged repetition): that pair has 19.
    for row in shuffled.iter_mut() {
        if row.method == "B" && row.repetition == 3 {
            row.value = f64::NAN;
        }
    }
    let mut reference = rows(20);
    reference.iter_mut().for_each(|row| {
        if row.method == "B" && row.repetition == 3 {
            row.value = f64::NAN;
        }
    });
    let opts = Options::default();
    assert_eq!(
        compare(&shuffled, &opts).unwrap(),
        compare(&reference, &opts).unwrap()
    );
    let c = compare(&shuffled, &opts).unwrap();
    assert_eq!((pair(&c, "A", "B").k, pair(&c, "A", "C").k), (19, 20));
}

#[test]
fn bad_requests_name_what_is_valid() {
    let r = rows(4);
    let err = |o: Options| compare(&r, &o).unwrap_err().to_string();
    let e = err(Options {
        metric: Some("wrong".into()),
        ..Options::default()
    });
    assert!(
        e.contains("metric \"wrong\"") && e.contains("valid: crps"),
        "{e}"
    );
    let e = err(Options {
        region: "gap".into(),
        ..Options::default()
    });
    assert!(
        e.contains("region \"gap\"") && e.contains("valid: all"),
        "{e}"
    );
    let e = err(Options {
        setting: Some("s=2".into()),
        ..Options::default()
    });
    assert!(
        e.contains("setting \"s=2\"") && e.contains("valid: s=1"),
        "{e}"
    );
    let mut twice = rows(4);
    twice.push(twice[0].clone());
    let e = compare(&twice, &Options::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("appears twice"), "{e}");
    // A metric without a direction is compared but not ranked.
    let mut cov = rows(4);
    cov.iter_mut().for_each(|r| r.metric = "coverage".into());
    let c = compare(&cov, &Options::default().with_metric("coverage")).unwrap();
    assert!(c.rankings.is_empty() && c.direction.is_none() && c.pairs.len() == 6);
}

#[test]
fn repetitions_csv_reads_back() {
    let text = "setting,method,region,metric,repetition,value\n\
                s=1,A,all,crps,0,0.5\ns=1,A,all,crps,1,\n\"a,b\",B,in,nll,2,1e-07\n";
    let r = read_repetitions(text, "t.csv").unwrap();
    assert_eq!(r.len(), 3);
    assert!(r[1].value.is_nan());
    assert_eq!(
        (r[2].setting.as_str(), r[2].repetition, r[2].value),
        ("a,b", 2, 1e-7)
    );
    let e = read_repetitions("a,b\n1,2\n", "t.csv")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.csv: columns a,b; valid: setting,method"),
        "{e}"
    );
    let e = read_repetitions(
        "setting,method,region,metric,repetition,value\ns,A,all,crps,x,1\n",
        "t.csv",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("t.csv, line 2: repetition \"x\""), "{e}");
}

/// Issue 59 §4: a method whose KL is +∞ in some repetitions is not compared on its good
/// repetitions only. Here D equals A − 0.5 (better) in 27 repetitions and is +∞ in 3: its
/// mean is +∞, it ranks last, and its pairs use the exact sign test over all 30.
#[test]
fn an_infinite_repetition_ranks_worst_and_is_not_dropped() {
    let mut rows = rows(30);
    let a: Vec<RepRow> = rows.iter().filter(|r| r.method == "A").cloned().collect();
    rows.extend(a.into_iter().map(|mut r| {
        r.method = "D".into();
        r.value = if r.repetition % 10 == 3 {
            f64::INFINITY
        } else {
            r.value - 0.5
        };
        r
    }));
    let c = compare(&rows, &Options::default()).unwrap();
    let da = pair(&c, "D", "A");
    // Every repetition paired (the old code paired the 27 finite ones, where D wins all).
    assert_eq!((da.k, da.infinite), (30, 3));
    assert_eq!(da.diff, f64::INFINITY);
    assert!(da.stderr.is_nan() && da.boot_share_a_lower.is_nan());
    // D lower in 27 of 30: scipy.stats.binomtest(27, 30).pvalue = 8.43e-6 (2·4526/2³⁰).
    assert!(
        (da.p_value - 2.0 * 4526.0 / 2f64.powi(30)).abs() < 1e-12,
        "{da:?}"
    );
    let ranking = &c.rankings[0];
    let last = ranking.entries.last().unwrap();
    assert_eq!((last.method.as_str(), last.mean), ("D", f64::INFINITY));
    assert_eq!((last.k, last.infinite), (30, 3));
    // The CSV round trip keeps the infinity.
    let text = "setting,method,region,metric,repetition,value\ns,A,all,crps,0,inf\n\
                s,A,all,crps,1,-inf\n";
    let r = read_repetitions(text, "t.csv").unwrap();
    assert_eq!((r[0].value, r[1].value), (f64::INFINITY, f64::NEG_INFINITY));
}
