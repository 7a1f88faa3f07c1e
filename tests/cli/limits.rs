//! The exact limits of the methods (issue 26) through the binary: `experiments/limits.toml`'s
//! quick profile, networks linear in the problem's features (`inputs = "features"`,
//! `hidden = []`), compared with the anchor repetition by repetition and point by point.

use std::path::Path;

use serde_json::Value;

use crate::util::{stderr, uqbench};

fn reps(dir: &Path, method: &str) -> Vec<Value> {
    (0..10)
        .map(|r| {
            let path = dir.join(format!("reps/default/{method}/rep-{r:03}.json"));
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
        })
        .collect()
}

fn column(v: &Value, key: &str) -> Vec<f64> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn linear_networks_reach_the_exact_posterior() {
    let dir = tempfile::tempdir().unwrap();
    let o = uqbench(&[
        "run",
        "experiments/limits.toml",
        "--profile",
        "quick",
        "--quiet",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let anchor = reps(dir.path(), "BLR");
    // Laplace with the flat prior and σ known, linear in the features: its curvature is the
    // exact posterior precision, so its std equals the anchor's to 1% (measured: 1e-15), and
    // its refined MAP is the least-squares solution, so its mean is within 0.1 of the
    // anchor's sd (measured: 2e-14). LaplaceAll takes the Jacobian of every parameter, which
    // for a network without hidden layers is the same, and LaplaceKron its Kronecker factors,
    // exact for one linear layer with one output and a constant σ.
    for method in ["Laplace", "LaplaceAll", "LaplaceKron"] {
        for (a, l) in anchor.iter().zip(reps(dir.path(), method)) {
            let (am, asd) = (column(a, "mean"), column(a, "std"));
            let (lm, lsd) = (column(&l, "mean"), column(&l, "std"));
            for i in 0..am.len() {
                assert!(
                    (lsd[i] / asd[i] - 1.0).abs() < 0.01,
                    "{method} rep {} point {i}: std {} vs the anchor's {}",
                    a["repetition"],
                    lsd[i],
                    asd[i]
                );
                assert!(
                    (lm[i] - am[i]).abs() < 0.1 * asd[i],
                    "{method} rep {} point {i}: mean {} vs the anchor's {} (sd {})",
                    a["repetition"],
                    lm[i],
                    am[i],
                    asd[i]
                );
            }
        }
    }
    // HMC on the linear model samples the anchor's posterior (its N(0, 100²) prior is flat at
    // this scale): the posterior mean within 5 Monte-Carlo standard errors sd/√ESS, with the
    // smallest bulk ESS over the parameters as the ESS (conservative), and the sd within
    // 5·sd/√(2·ESS), the standard error of a sample sd.
    for (a, h) in anchor.iter().zip(reps(dir.path(), "HMC")) {
        let ess = h["scalars"]["ess_bulk_min"].as_f64().unwrap();
        assert!(ess > 50.0, "HMC's bulk ESS {ess}: the chains do not mix");
        let (am, asd) = (column(a, "mean"), column(a, "std"));
        let (hm, hsd) = (column(&h, "mean"), column(&h, "std"));
        for i in 0..am.len() {
            assert!(
                (hm[i] - am[i]).abs() < 5.0 * asd[i] / ess.sqrt(),
                "HMC point {i}: mean {} vs {} (sd {}, ESS {ess})",
                hm[i],
                am[i],
                asd[i]
            );
            assert!(
                (hsd[i] - asd[i]).abs() < 5.0 * asd[i] / (2.0 * ess).sqrt(),
                "HMC point {i}: sd {} vs {} (ESS {ess})",
                hsd[i],
                asd[i]
            );
        }
    }
}
