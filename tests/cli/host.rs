//! The engine's two executions agree in distribution over whole runs: the CPU's host loops
//! (`--host-loops on`, the default) against the backend's batched tensors (`off`).

use std::collections::BTreeMap;

use crate::util::*;

/// `aggregate.csv` of a run: (setting, method, region, metric) → (value, stderr).
fn aggregates(dir: &Path) -> BTreeMap<(String, String, String, String), (f64, f64)> {
    let text = std::fs::read_to_string(dir.join("aggregate.csv")).expect("aggregate.csv");
    let mut out = BTreeMap::new();
    for line in text.lines().skip(1) {
        let c: Vec<&str> = line.split(',').collect();
        let (Ok(v), Ok(se)) = (c[4].parse::<f64>(), c[5].parse::<f64>()) else {
            continue;
        };
        out.insert(
            (c[0].into(), c[1].into(), c[2].into(), c[3].into()),
            (v, se),
        );
    }
    out
}

#[test]
fn host_loops_and_tensors_agree_in_distribution_over_a_run() {
    // E1's quick profile (2 settings × 20 repetitions) for the dropout methods, whose
    // stochastic layers run as host twins on the CPU: every aggregate with a standard error,
    // z = (a − b)/√(se_a² + se_b²). Were the two runs independent, each z would be about
    // N(0, 1) under equal distributions; they share the data, seeds and noise draws, which
    // makes the difference smaller, not larger. A Bonferroni bound over K aggregates at a
    // family-wise 0.001 is |z| < Φ⁻¹(1 − 0.0005/K): 4.4 for K = 500, 4.6 for K = 1 000. A
    // wrong gradient, noise draw or head in one execution moves means by many standard
    // errors (the step-for-step comparison is `engine/host_tests.rs`).
    let tmp = tempfile::tempdir().unwrap();
    let run = |loops: &str| -> PathBuf {
        let out = tmp.path().join(loops);
        let o = run_quick(&out, &["--methods", "BD,CD,VD", "--host-loops", loops]);
        assert!(o.status.success(), "{loops}: {}", stderr(&o));
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
        assert_eq!(
            meta["host_loops"],
            serde_json::json!(loops == "on"),
            "run.json: {meta}"
        );
        out
    };
    let (host, tensors) = (aggregates(&run("on")), aggregates(&run("off")));
    let mut zs = Vec::new();
    for (key, &(a, sa)) in &host {
        if key.1 == "BLR" {
            continue;
        }
        let &(b, sb) = tensors
            .get(key)
            .unwrap_or_else(|| panic!("{key:?} only on the host"));
        let se = (sa * sa + sb * sb).sqrt();
        if se > 0.0 && se.is_finite() {
            zs.push(((a - b) / se, key.clone()));
        }
    }
    let k = zs.len();
    assert!(k >= 300, "only {k} aggregates compared");
    let bound = 4.6;
    let (worst, key) =
        zs.iter()
            .map(|(z, key)| (z.abs(), key))
            .fold(
                (0.0, None),
                |acc, (z, key)| if z > acc.0 { (z, Some(key)) } else { acc },
            );
    assert!(
        worst < bound,
        "|z| = {worst:.2} at {key:?} over {k} aggregates (bound {bound})"
    );
}
