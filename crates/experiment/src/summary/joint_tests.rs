use nalgebra::DMatrix;
use uqbench_core::Extra;
use uqbench_metrics::distance::{kl as kl_1d, LocScale, Shape};

use super::*;

/// A synthetic exact posterior at `m` inputs: mean, a rank-2 factor, noise sd.
fn exact_parts(m: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mean = (0..m).map(|i| (i as f64 * 0.7).sin()).collect();
    let factor = (0..m)
        .flat_map(|i| {
            let x = i as f64 / m as f64;
            [0.4 + 0.3 * x, 0.5 * (3.0 * x).cos()]
        })
        .collect();
    let noise = (0..m).map(|i| 0.3 + 0.02 * i as f64).collect();
    (mean, factor, noise)
}

fn seed(rep: u64) -> SeedPath<'static> {
    SeedPath {
        base: 1,
        experiment: "joint-test",
        setting: "",
        repetition: rep,
        member: 0,
        purpose: JOINT_DRAWS,
    }
}

fn all(m: usize) -> Vec<(&'static str, Vec<usize>)> {
    vec![("all", (0..m).collect())]
}

#[test]
fn the_exact_joint_scores_zero_and_tau_1_is_the_mean_marginal_kl() {
    let m = 8;
    let (mean, factor, noise) = exact_parts(m);
    let exact = Exact {
        mean: &mean,
        factor: &factor,
        rank: 2,
        noise_sd: &noise,
        dof: None,
    };
    let settings = JointSettings {
        tau: vec![1, 10, 100],
        kappa: 2,
        batches: 200,
    };
    let regions = all(m);
    let input = JointInput {
        settings: &settings,
        seed: seed(0),
        regions: &regions,
        exact: Some(exact),
    };
    let truth: Vec<f64> = mean.iter().map(|v| v + 0.1).collect();
    // The exact posterior as a method's Gaussian joint: KL 0 at every τ.
    let std: Vec<f64> = factor.chunks(2).map(|r| r[0].hypot(r[1])).collect();
    let blr = Prediction {
        mean: mean.clone(),
        std: std.clone(),
        extra: Extra::joint(Some(FactorJoint {
            factor: factor.clone(),
            rank: 2,
        })),
        ..Default::default()
    };
    let (kind, out) = regression(&blr, &noise, &truth, &noise, &input).unwrap();
    assert_eq!(kind, JointKind::Gaussian);
    for tau in [1, 10, 100] {
        assert_eq!(out["all"][&name(JOINT_KL, tau)], 0.0);
        assert!(out["all"][&name(ENV_KL, tau)] > 0.0);
    }
    // The same joint through another factor: its two columns rotated by 0.7 rad (F·R with R
    // orthogonal has the same covariance F·Fᵀ), so the parts are equal in value but not
    // identical and the closed form runs instead of the identical-parts shortcut: 0 up to
    // rounding, at every τ.
    let (c, s) = (0.7_f64.cos(), 0.7_f64.sin());
    let rotated: Vec<f64> = factor
        .chunks(2)
        .flat_map(|r| [r[0] * c - r[1] * s, r[0] * s + r[1] * c])
        .collect();
    assert_ne!(rotated, factor);
    let turned = Prediction {
        extra: Extra::joint(Some(FactorJoint {
            factor: rotated,
            rank: 2,
        })),
        ..blr.clone()
    };
    let (_, out) = regression(&turned, &noise, &truth, &noise, &input).unwrap();
    for tau in [1, 10, 100] {
        let kl = out["all"][&name(JOINT_KL, tau)];
        assert!(kl.abs() < 1e-9, "τ = {tau}: KL {kl} between equal joints");
    }
    // A method with marginals only, mean shifted and sd scaled: at τ = 1 its joint KL is the
    // mean over inputs of KL(exact marginal ‖ method marginal) of y, in closed form.
    let shifted = Prediction {
        mean: mean.iter().map(|v| v + 0.2).collect(),
        std: std.iter().map(|s| 1.3 * s).collect(),
        ..Default::default()
    };
    let (kind, out) = regression(&shifted, &noise, &truth, &noise, &input).unwrap();
    assert_eq!(kind, JointKind::Marginals);
    let shape = Shape::new(None);
    let want: f64 = (0..m)
        .map(|i| {
            let a = LocScale {
                mean: mean[i],
                scale: std[i].hypot(noise[i]),
                dof: None,
            };
            let b = LocScale {
                mean: mean[i] + 0.2,
                scale: (1.3 * std[i]).hypot(noise[i]),
                dof: None,
            };
            kl_1d(a, &shape, b, &shape)
        })
        .sum::<f64>()
        / m as f64;
    let got = out["all"][&name(JOINT_KL, 1)];
    assert!((got - want).abs() < 1e-12, "{got} against {want}");
    assert!(
        out["all"]["joint_kl_1_se"] < 1e-12,
        "closed form: no Monte Carlo error"
    );
    // Marginals that ignore the correlations lose at τ = 10 by more than at τ = 1.
    assert!(out["all"][&name(JOINT_KL, 10)] > 2.0 * got, "{out:?}");
}

/// ½(ln|B| − ln|C|) for C the covariance of y at inputs `x` and B its blocks of equal
/// inputs only (the cross-input covariances set to 0): KL(N(μ, C) ‖ N(μ, B)).
fn blocks_kl(x: &[usize], factor: &[f64], noise: &[f64]) -> f64 {
    let tau = x.len();
    let c = DMatrix::from_fn(tau, tau, |i, j| {
        let (a, b) = (x[i], x[j]);
        let f = factor[2 * a] * factor[2 * b] + factor[2 * a + 1] * factor[2 * b + 1];
        f + if i == j { noise[a].powi(2) } else { 0.0 }
    });
    let b = DMatrix::from_fn(tau, tau, |i, j| if x[i] == x[j] { c[(i, j)] } else { 0.0 });
    let ln_det = |m: DMatrix<f64>| 2.0 * m.cholesky().unwrap().l().diagonal().map(f64::ln).sum();
    0.5 * (ln_det(b) - ln_det(c))
}

#[test]
fn draws_permuted_per_input_keep_tau_1_and_lose_the_closed_form_amount_at_tau_10() {
    let m = 5;
    let (mean, factor, noise) = exact_parts(m);
    let exact = Exact {
        mean: &mean,
        factor: &factor,
        rank: 2,
        noise_sd: &noise,
        dof: None,
    };
    let settings = JointSettings {
        tau: vec![1, 10],
        kappa: 2,
        batches: 4000,
    };
    let regions = all(m);
    let input = JointInput {
        settings: &settings,
        seed: seed(3),
        regions: &regions,
        exact: Some(exact),
    };
    // M draws of f from the exact joint, and the same with each input's column shuffled.
    let draws = 3000;
    let mut rng = Rng::new(99);
    let rows: Vec<Vec<f64>> = (0..draws)
        .map(|_| {
            let (z0, z1) = (rng.normal(), rng.normal());
            (0..m)
                .map(|i| mean[i] + factor[2 * i] * z0 + factor[2 * i + 1] * z1)
                .collect()
        })
        .collect();
    let mut permuted = rows.clone();
    for i in 0..m {
        for k in (1..draws).rev() {
            let j = rng.below(k as u64 + 1) as usize;
            let (a, b) = (permuted[k][i], permuted[j][i]);
            permuted[k][i] = b;
            permuted[j][i] = a;
        }
    }
    let pred = |rows: Vec<Vec<f64>>| Prediction {
        samples: Some(rows),
        ..Default::default()
    };
    let (same, broken) = (pred(rows), pred(permuted));
    let (kind, a) = regression(&same, &noise, &mean, &noise, &input).unwrap();
    assert_eq!(kind, JointKind::Draws);
    let (_, b) = regression(&broken, &noise, &mean, &noise, &input).unwrap();
    let (a, b) = (&a["all"], &b["all"]);
    // τ = 1: a column's values are the same multiset, so the mixture's marginal is the same
    // (up to summation order), and so is every y drawn (same seed).
    assert!(
        (a["joint_kl_1"] - b["joint_kl_1"]).abs() < 1e-9,
        "{a:?} {b:?}"
    );
    // τ = 10: the loss is E_X ½(ln|B_X| − ln|C_X|), computed exactly here over dyadic
    // sampling's law (anchors u, v uniform; each of the τ inputs is u with probability ½).
    let mut expected = 0.0;
    for u in 0..m {
        for v in 0..m {
            let p_pair = 1.0 / (m * m) as f64;
            if u == v {
                continue; // one input: B = C.
            }
            for k in 0..=10usize {
                let p_k = binomial(10, k) / 1024.0;
                let x: Vec<usize> = (0..10).map(|i| if i < k { u } else { v }).collect();
                expected += p_pair * p_k * blocks_kl(&x, &factor, &noise);
            }
        }
    }
    let loss = b["joint_kl_10"] - a["joint_kl_10"];
    // Both estimates use the same batches and y: their difference has a standard error at
    // most the sum of theirs; 4.5 of those (|N(0,1)| > 4.5: 7e-6).
    let bound = 4.5 * (a["joint_kl_10_se"] + b["joint_kl_10_se"]);
    assert!(expected > 0.05, "{expected}");
    assert!(
        (loss - expected).abs() < bound,
        "loss {loss} against {expected} ± {bound}"
    );
}

#[test]
fn tau_1_has_a_standard_error_with_more_inputs_than_batches() {
    // 600 inputs and 500 batches: each input still gets two y draws, so the draws' Monte
    // Carlo error is estimated (it was 0 with one draw per input).
    let m = 600;
    let (mean, _, noise) = exact_parts(m);
    let settings = JointSettings {
        tau: vec![1],
        kappa: 2,
        batches: 500,
    };
    let regions = all(m);
    let input = JointInput {
        settings: &settings,
        seed: seed(5),
        regions: &regions,
        exact: None,
    };
    let mut rng = Rng::new(7);
    let rows: Vec<Vec<f64>> = (0..50)
        .map(|_| mean.iter().map(|v| v + 0.3 * rng.normal()).collect())
        .collect();
    let pred = Prediction {
        samples: Some(rows),
        ..Default::default()
    };
    let (kind, metrics) = regression(&pred, &noise, &mean, &noise, &input).unwrap();
    assert_eq!(kind, JointKind::Draws);
    let se = metrics["all"]["env_kl_1_se"];
    assert!(se.is_finite() && se > 0.0, "env_kl_1_se = {se}");
}

fn binomial(n: usize, k: usize) -> f64 {
    (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product()
}

#[test]
fn classification_enumerates_small_batches() {
    let truth = [0.2, 0.9, 0.5];
    let settings = JointSettings {
        tau: vec![1, 2],
        kappa: 2,
        batches: 50,
    };
    let regions = all(3);
    let input = JointInput {
        settings: &settings,
        seed: seed(0),
        regions: &regions,
        exact: None,
    };
    // The truth as the method's only draw: 0 at every τ; a shifted draw: the mean of the
    // Bernoulli KLs at τ = 1.
    let out = classification(&[truth.to_vec()], &truth, &input).unwrap();
    assert!(out["all"]["env_kl_1"].abs() < 1e-12 && out["all"]["env_kl_2"].abs() < 1e-12);
    let q = [0.3, 0.8, 0.5];
    let out = classification(&[q.to_vec()], &truth, &input).unwrap();
    let kl1 = |a: f64, b: f64| a * (a / b).ln() + (1.0 - a) * ((1.0 - a) / (1.0 - b)).ln();
    let want = (0..3).map(|i| kl1(truth[i], q[i])).sum::<f64>() / 3.0;
    assert!((out["all"]["env_kl_1"] - want).abs() < 1e-12);
}
