//! The anchor on the shipped experiment specs: exact coverage over many repetitions, and
//! invariances of the posterior.

use std::collections::BTreeMap;
use std::path::Path;

use uqbench_anchor::{central_quantile, Anchor, Problem, ProblemSpec, Setting};

/// Loads `experiments/<file>` and resolves its problem at `setting` (e.g. `[("d", 2.0)]`).
fn problem(file: &str, setting: &[(&str, f64)]) -> Problem {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../experiments")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let spec: ProblemSpec = table["problem"].clone().try_into().unwrap();
    let name = table["name"].as_str().unwrap();
    let seed = table["seed"].as_integer().unwrap() as u64;
    let setting = Setting {
        values: setting.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    };
    Problem::resolve(name, seed, &spec, &setting).unwrap()
}

/// Coverage of the central `level` interval at every test point over `reps` repetitions.
fn coverage(problem: &Problem, reps: u64, level: f64) -> Vec<f64> {
    let anchor = Anchor::fit(problem).unwrap();
    let mut hits = vec![0u64; problem.test.truth.len()];
    for r in 0..reps {
        let post = anchor.posterior(&problem.draw(r).train_y).unwrap();
        let q = post.quantile_factor(level);
        for (i, h) in hits.iter_mut().enumerate() {
            if (post.mean[i] - problem.test.truth[i]).abs() <= q * post.std[i] {
                *h += 1;
            }
        }
    }
    hits.iter().map(|&h| h as f64 / reps as f64).collect()
}

/// Checks coverage against the binomial distribution it must follow if the anchor is exact.
///
/// At each test point the number of hits over k repetitions is Binomial(k, level), so the
/// observed rate has sd s = sqrt(level(1 − level)/k) (0.00218 for level 0.95, k = 10 000).
/// - Every test point: |rate − level| < 5.2 s. Two-sided P(|Z| > 5.2) = 2.0e-7 per point, so
///   even with ~2000 points checked per problem the chance of a false alarm is < 4e-4
///   (Bonferroni, which holds whatever the correlation between points).
/// - The average over test points: each point's rate has sd s, so the average has sd ≤ s;
///   |average − level| < 4 s (false-alarm probability < 6.3e-5).
fn assert_binomial(name: &str, rates: &[f64], k: u64, level: f64) {
    let s = (level * (1.0 - level) / k as f64).sqrt();
    for (i, r) in rates.iter().enumerate() {
        assert!(
            (r - level).abs() < 5.2 * s,
            "{name}: coverage {r} at test point {i}, expected {level} ± {}",
            5.2 * s
        );
    }
    let avg = rates.iter().sum::<f64>() / rates.len() as f64;
    assert!(
        (avg - level).abs() < 4.0 * s,
        "{name}: average coverage {avg}, expected {level} ± {}",
        4.0 * s
    );
}

const K: u64 = 10_000;

#[test]
fn e1_covers_95_percent_at_every_point() {
    for f_main in [1.0, 5.0] {
        let p = problem("e1.toml", &[("f_main", f_main)]);
        assert_eq!(p.test.truth.len(), 1003); // 1000 grid points + 3 report points
        assert_binomial(
            &format!("e1 f_main={f_main}"),
            &coverage(&p, K, 0.95),
            K,
            0.95,
        );
    }
}

#[test]
fn e2_d2_covers_95_percent_at_every_point() {
    let p = problem("e2.toml", &[("d", 2.0)]);
    assert_eq!(p.train.inputs.len(), 900);
    assert_eq!(p.linear().unwrap().0.p(), 6);
    assert_binomial("e2 d=2", &coverage(&p, K, 0.95), K, 0.95);
}

#[test]
fn e3_covers_95_percent_at_every_point() {
    let p = problem("e3.toml", &[]);
    assert_eq!(p.test.truth.len(), 41 * 41);
    assert_binomial("e3", &coverage(&p, K, 0.95), K, 0.95);
}

#[test]
fn heteroscedastic_and_student_t_anchors_are_exact_too() {
    let p = problem("cubic_hetero.toml", &[]);
    assert_binomial("cubic_hetero", &coverage(&p, K, 0.9), K, 0.9);
    // σ unknown: the t-interval with N − p degrees of freedom is exact as well.
    let p = problem("quartic_gap.toml", &[]);
    assert_binomial("quartic_gap", &coverage(&p, K, 0.9), K, 0.9);
}

#[test]
fn permuting_training_data_leaves_the_posterior_unchanged() {
    let p = problem("e1.toml", &[("f_main", 3.0)]);
    let draw = p.draw(7);
    let post = Anchor::fit(&p).unwrap().posterior(&draw.train_y).unwrap();

    let n = p.train.inputs.len();
    let perm: Vec<usize> = (0..n).map(|i| (i * 17 + 5) % n).collect(); // 17 is coprime to 50
    let mut q = p.clone();
    q.train.inputs = p.train.inputs.permuted(&perm);
    q.train_sigma = perm.iter().map(|&i| p.train_sigma[i]).collect();
    let y: Vec<f64> = perm.iter().map(|&i| draw.train_y[i]).collect();
    let post2 = Anchor::fit(&q).unwrap().posterior(&y).unwrap();
    for i in 0..post.mean.len() {
        assert!((post.mean[i] - post2.mean[i]).abs() < 1e-10 * (1.0 + post.mean[i].abs()));
        assert!((post.std[i] - post2.std[i]).abs() < 1e-10 * post.std[i]);
    }
}

#[test]
fn scaling_gamma_scales_the_mean_and_noise_free_data_are_recovered() {
    let p = problem("e3.toml", &[]);
    let anchor = Anchor::fit(&p).unwrap();
    // Noise-free targets: the posterior mean is the truth everywhere.
    let exact = anchor.posterior(&p.train_truth).unwrap();
    for (m, t) in exact.mean.iter().zip(&p.test.truth) {
        assert!((m - t).abs() < 1e-9 * (1.0 + t.abs()), "{m} vs {t}");
    }
    // y = Φγ + ε versus y = Φ(cγ) + cε: the mean scales by c, the std does not depend on y.
    let c = -3.5;
    let draw = p.draw(0);
    let mut scaled = p.clone();
    let (features, gamma) = p.linear().unwrap();
    scaled.model = uqbench_anchor::Model::Linear {
        features: features.clone(),
        gamma: gamma.iter().map(|g| c * g).collect(),
    };
    let noise: Vec<f64> = draw
        .train_y
        .iter()
        .zip(&p.train_truth)
        .map(|(y, t)| y - t)
        .collect();
    let y_scaled: Vec<f64> = scaled
        .train
        .inputs
        .rows()
        .zip(&noise)
        .map(|(x, e)| {
            let (features, gamma) = scaled.linear().unwrap();
            features.dot(x, gamma) + c * e
        })
        .collect();
    let a = anchor.posterior(&draw.train_y).unwrap();
    let b = Anchor::fit(&scaled).unwrap().posterior(&y_scaled).unwrap();
    for i in 0..a.mean.len() {
        assert!((b.mean[i] - c * a.mean[i]).abs() < 1e-9 * (1.0 + a.mean[i].abs()));
        assert!((b.std[i] - a.std[i]).abs() < 1e-12);
    }
}

#[test]
fn anchor_std_is_the_smallest_unbiased_uncertainty_and_matches_the_simulated_spread() {
    // The posterior std equals the sampling sd of the posterior mean over repetitions
    // (probability matching). With k = 10 000 the sample variance of the mean at a point has
    // relative sd sqrt(2/(k−1)) = 0.0141, so the ratio of sample to anchor variance lies within
    // 1 ± 4·0.0141 with false-alarm probability < 1e-4 per point (3 points checked).
    let p = problem("e1.toml", &[("f_main", 2.0)]);
    let anchor = Anchor::fit(&p).unwrap();
    let points = [100usize, 500, 1000];
    let mut means = vec![Vec::new(); points.len()];
    let mut std = vec![0.0; points.len()];
    for r in 0..K {
        let post = anchor.posterior(&p.draw(r).train_y).unwrap();
        for (k, &i) in points.iter().enumerate() {
            means[k].push(post.mean[i]);
            std[k] = post.std[i];
        }
    }
    for (k, m) in means.iter().enumerate() {
        let avg = m.iter().sum::<f64>() / K as f64;
        let var = m.iter().map(|v| (v - avg).powi(2)).sum::<f64>() / (K - 1) as f64;
        let ratio = var / (std[k] * std[k]);
        assert!(
            (ratio - 1.0).abs() < 4.0 * (2.0 / (K - 1) as f64).sqrt(),
            "point {}: ratio {ratio}",
            points[k]
        );
    }
    // The joint (spec §10): its diagonal is std², and its off-diagonal entries are the
    // sampling covariances of the posterior mean. The sample covariance of k pairs has sd
    // sqrt((σ_ii σ_jj + σ_ij²)/(k − 1)); 4.5 of those per pair (3 pairs, false alarm < 2e-5).
    let post = anchor.posterior(&p.draw(0).train_y).unwrap();
    let cov = post.cov();
    for (k, &i) in points.iter().enumerate() {
        assert!((cov[i][i] - std[k] * std[k]).abs() < 1e-12 * cov[i][i]);
    }
    let centred: Vec<Vec<f64>> = means
        .iter()
        .map(|m| {
            let avg = m.iter().sum::<f64>() / K as f64;
            m.iter().map(|v| v - avg).collect()
        })
        .collect();
    for (a, b) in [(0, 1), (1, 2), (0, 2)] {
        let sample = (centred[a].iter().zip(&centred[b]))
            .map(|(x, y)| x * y)
            .sum::<f64>()
            / (K - 1) as f64;
        let (i, j) = (points[a], points[b]);
        let sd = ((cov[i][i] * cov[j][j] + cov[i][j].powi(2)) / (K - 1) as f64).sqrt();
        assert!(
            (sample - cov[i][j]).abs() < 4.5 * sd,
            "points {i}, {j}: sampled {sample}, joint {}",
            cov[i][j]
        );
    }
}

#[test]
fn settings_expand_as_a_product_in_key_order() {
    let mut sweep = BTreeMap::new();
    sweep.insert("f_main".to_string(), vec![1.0, 2.5]);
    sweep.insert("a".to_string(), vec![0.0]);
    let labels: Vec<String> = Setting::all(&sweep).iter().map(Setting::label).collect();
    assert_eq!(labels, ["a=0,f_main=1", "a=0,f_main=2.5"]);
    assert_eq!(Setting::all(&BTreeMap::new()).len(), 1);
    assert!((central_quantile(0.9, None) - 1.6448536269514722).abs() < 1e-9);
}

#[test]
fn same_seed_same_data_different_setting_different_data() {
    let a = problem("e1.toml", &[("f_main", 2.0)]);
    let b = problem("e1.toml", &[("f_main", 2.0)]);
    assert_eq!(a.draw(3), b.draw(3));
    assert_eq!(a.linear().unwrap().1, b.linear().unwrap().1);
    assert_ne!(a.draw(3).train_y, a.draw(4).train_y);
    let c = problem("e1.toml", &[("f_main", 3.0)]);
    assert_ne!(a.train.inputs, c.train.inputs);
    // Designs are drawn inside their declared range.
    assert!(a.train.inputs.rows().all(|x| (-4.0..4.0).contains(&x[0])));
    assert!(a.linear().unwrap().1.iter().all(|g| (0.0..1.0).contains(g)));
}

/// [004] §5.5's Boston simulation as `experiments/boston.toml` declares it (the data path made
/// absolute, since tests run in the crate's directory).
fn boston() -> Problem {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("experiments/boston.toml")).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let mut spec: uqbench_anchor::SurrogateSpec = table["surrogate"].clone().try_into().unwrap();
    spec.data = root.join(&spec.data).to_str().unwrap().to_string();
    let seed = table["seed"].as_integer().unwrap() as u64;
    Problem::from_surrogate("boston", seed, &spec, &Setting::default()).unwrap()
}

#[test]
fn the_boston_surrogate_is_deterministic_split_as_004_and_draws_its_own_noise() {
    let p = boston();
    assert_eq!(p, boston(), "same seed, same forests and split");
    assert_eq!(p.d(), 13);
    assert_eq!(p.train.inputs.len(), 366);
    assert_eq!(p.validation.as_ref().unwrap().0.len(), 40);
    assert_eq!(p.test.truth.len(), 100);
    assert!(
        p.linear().is_none() && Anchor::fit(&p).is_err(),
        "no anchor"
    );
    for s in p.train_sigma.iter().chain(&p.test.sigma) {
        assert!(s.is_finite() && *s > 0.0, "σ(x) = {s}");
    }
    // A depth-15 forest explains most of MEDV (out-of-bag R² ≈ 0.87 is the usual figure for
    // this data); the truth is in standard units.
    let uqbench_anchor::Model::Surrogate(info) = &p.model else {
        unreachable!()
    };
    assert!(info.oob_r2 > 0.8 && info.oob_r2 < 0.95, "{}", info.oob_r2);
    assert!((info.target_scale.1 - 9.197).abs() < 1e-3, "MEDV's sd");
    // The targets are N(f, σ²) at the training rows: over 20 repetitions × 366 rows the
    // standardised residuals z have E z² = 1 with sd √(2/7320) = 0.0165; checked at 5 sd.
    let mut sum = 0.0;
    let mut n = 0.0;
    for r in 0..20 {
        let y = p.draw(r).train_y;
        for ((y, f), s) in y.iter().zip(&p.train_truth).zip(&p.train_sigma) {
            sum += ((y - f) / s).powi(2);
            n += 1.0;
        }
    }
    assert!(
        (sum / n - 1.0).abs() < 5.0 * (2.0 / n).sqrt(),
        "{}",
        sum / n
    );
    assert_ne!(p.draw(0).train_y, p.draw(1).train_y);
    assert_eq!(p.draw(3), p.draw(3));
}

/// The Gaussian-prior posterior against the normal equations written out: with Φ `[N, p]`
/// (an intercept column and two varying features), known σ and the prior N(0, σ_p²) on the
/// varying coefficients only, the precision is A = ΦᵀΦ/σ² + diag(0, 1/σ_p², 1/σ_p²), the mean
/// A⁻¹Φᵀy/σ², and Var f(g) = gᵀA⁻¹g. The anchor's QR with prior rows gives the same to
/// rounding (1e-9 relative), and a weak prior tends to the flat anchor.
#[test]
fn the_gaussian_prior_posterior_is_the_ridge_posterior() {
    use nalgebra::{DMatrix, DVector};
    let (n, p, m, sigma, prior_sd) = (25, 3, 7, 0.4, 0.1);
    let mut rng = uqbench_anchor::Rng::new(5);
    let row = |rng: &mut uqbench_anchor::Rng| vec![1.0, rng.normal(), 2.0 * rng.uniform() - 1.0];
    let train: Vec<f64> = (0..n).flat_map(|_| row(&mut rng)).collect();
    let test: Vec<f64> = (0..m).flat_map(|_| row(&mut rng)).collect();
    let y: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
    let fit = Anchor::with_gaussian_prior(
        p,
        &train,
        &vec![sigma; n],
        &test,
        &vec![sigma; m],
        prior_sd,
        "ridge",
        "",
    )
    .unwrap();
    let post = fit.posterior(&y).unwrap();
    let phi = DMatrix::from_row_slice(n, p, &train);
    let mut a = phi.transpose() * &phi / (sigma * sigma);
    for j in 1..p {
        a[(j, j)] += 1.0 / (prior_sd * prior_sd);
    }
    let a_inv = a.try_inverse().unwrap();
    let mean = &a_inv * phi.transpose() * DVector::from_vec(y.clone()) / (sigma * sigma);
    let g = DMatrix::from_row_slice(m, p, &test);
    for i in 0..m {
        let gi = g.row(i).transpose();
        let (mu, var) = (
            (gi.transpose() * &mean)[0],
            (gi.transpose() * &a_inv * &gi)[0],
        );
        assert!(
            (post.mean[i] - mu).abs() < 1e-9 * (1.0 + mu.abs()),
            "mean {i}"
        );
        assert!((post.std[i] / var.sqrt() - 1.0).abs() < 1e-9, "std {i}");
    }
    // σ_p = 1e6: the flat anchor to 1e-6.
    let weak = Anchor::with_gaussian_prior(
        p,
        &train,
        &vec![sigma; n],
        &test,
        &vec![sigma; m],
        1e6,
        "ridge",
        "",
    )
    .unwrap()
    .posterior(&y)
    .unwrap();
    let flat = Anchor::from_features(
        p,
        &train,
        &vec![sigma; n],
        &test,
        &vec![sigma; m],
        true,
        "ridge",
        "",
    )
    .unwrap()
    .posterior(&y)
    .unwrap();
    for i in 0..m {
        assert!((weak.std[i] / flat.std[i] - 1.0).abs() < 1e-6);
        assert!((weak.mean[i] - flat.mean[i]).abs() < 1e-6 * flat.std[i]);
    }
    // And the prior is not vacuous here: it shrinks the std by more than 10% somewhere.
    assert!(post.std.iter().zip(&flat.std).any(|(s, f)| s / f < 0.9));
}
