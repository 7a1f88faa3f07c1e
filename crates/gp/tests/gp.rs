//! The Gaussian process: a closed-form case, the features kernel against the anchor, a
//! fitted GP on [002]'s quartic, and bad settings.

use nalgebra::{DMatrix, SymmetricEigen};
use uqbench_anchor::{Anchor, Problem, ProblemSpec, Setting};
use uqbench_core::noise::Tau;
use uqbench_core::{Compute, Likelihood, Method, Prediction, SeedBase, Task};
use uqbench_gp::{Gp, GpConfig, Kernel};

fn problem(file: &str, setting: &[(&str, f64)]) -> Problem {
    let text = std::fs::read_to_string(format!(
        "{}/../../experiments/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let spec: ProblemSpec = table["problem"].clone().try_into().unwrap();
    let setting = Setting {
        values: setting.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    };
    Problem::resolve(file, 1, &spec, &setting).unwrap()
}

fn run(p: &Problem, config: GpConfig, reps: &[u64]) -> Vec<Prediction> {
    let data = p.task_data(reps, false);
    let task = data.task(
        1,
        SeedBase {
            base: 1,
            experiment: "gp".into(),
            setting: String::new(),
        },
    );
    Gp::new("GP", config)
        .unwrap()
        .run(&task, &Compute::host(), false, &|_| {})
        .unwrap()
}

fn fixed(kernel: Kernel, s: f64, l: Option<f64>, noise: f64, c: Option<f64>) -> GpConfig {
    let noise: Tau = toml::Value::Float(noise).try_into().unwrap();
    GpConfig {
        kernel,
        signal_sd: Some(s),
        length_scale: l,
        noise_sd: Some(noise),
        constant_sd: c,
        ..GpConfig::default()
    }
}

#[test]
fn two_points_with_fixed_hyperparameters_match_the_closed_form() {
    // x = (0, 1), y = (1, −1), exponential kernel s = 2, ℓ = 0.5, c = 0.5, σ_n = 0.1. By hand:
    // k(0,0) = c² + s² = 4.25, k(0,1) = c² + s²e^{−2} = 0.25 + 4e^{−2}; K = k + σ_n²I. At
    // x* = 0.25: k* = (c² + s²e^{−0.5}, c² + s²e^{−1.5}); mean = k*ᵀK⁻¹y, var = 4.25 − k*ᵀK⁻¹k*
    // with the 2×2 inverse written out.
    let (s2, c2, n2) = (4.0, 0.25, 0.01);
    let k00 = c2 + s2 + n2;
    let k01 = c2 + s2 * (-2.0f64).exp();
    let det = k00 * k00 - k01 * k01;
    let inv = [[k00 / det, -k01 / det], [-k01 / det, k00 / det]];
    let ks = [c2 + s2 * (-0.5f64).exp(), c2 + s2 * (-1.5f64).exp()];
    let y = [1.0, -1.0];
    let a = [
        inv[0][0] * y[0] + inv[0][1] * y[1],
        inv[1][0] * y[0] + inv[1][1] * y[1],
    ];
    let mean = ks[0] * a[0] + ks[1] * a[1];
    let quad = ks[0] * (inv[0][0] * ks[0] + inv[0][1] * ks[1])
        + ks[1] * (inv[1][0] * ks[0] + inv[1][1] * ks[1]);
    let sd = (c2 + s2 - quad).sqrt();

    let x = [0.0, 1.0];
    let ys = vec![y.to_vec()];
    let task = Task {
        d: 1,
        x_train: &x,
        y_train: &ys,
        repetitions: &[0],
        x_test: &[0.25],
        epochs: 1,
        known_sigma: None,
        seeds: SeedBase {
            base: 0,
            experiment: "t".into(),
            setting: String::new(),
        },
        features: None,
        noise: Default::default(),
        likelihood: Likelihood::Gaussian,
    };
    let res = Compute::host();
    let out = Gp::new(
        "GP",
        fixed(Kernel::Exponential, 2.0, Some(0.5), 0.1, Some(0.5)),
    )
    .unwrap()
    .run(&task, &res, false, &|_| {})
    .unwrap();
    assert!(
        (out[0].mean[0] - mean).abs() < 1e-12,
        "{} vs {mean}",
        out[0].mean[0]
    );
    assert!(
        (out[0].std[0] - sd).abs() < 1e-12,
        "{} vs {sd}",
        out[0].std[0]
    );
    assert!((out[0].noise_std.as_ref().unwrap()[0] - 0.1).abs() < 1e-15);
}

#[test]
fn the_features_kernel_with_a_wide_prior_is_the_anchor() {
    // E1 at f_main = 1: σ = 0.75 known, four features. The GP with k = s²G(x)ᵀG(x′) and
    // σ_n = σ is Bayesian linear regression with prior γ ~ N(0, s²I); the anchor is its flat
    // limit. The prior moves the posterior mean and sd by a relative amount of order
    // σ²/(s²λ_min), λ_min the smallest eigenvalue of ΦᵀΦ; the GP's Cholesky of
    // K = s²ΦΦᵀ + σ²I loses accuracy of order ε·s²λ_max/σ². Both are computed here, and the
    // tolerance is 10× their sum, relative to the posterior's scale (|mean| + sd).
    let p = problem("e1.toml", &[("f_main", 1.0)]);
    let (features, _) = p.linear().unwrap();
    let n = p.train.inputs.len();
    let pp = features.p();
    let mut phi = DMatrix::zeros(n, pp);
    let mut g = vec![0.0; pp];
    for (i, x) in p.train.inputs.rows().enumerate() {
        features.eval_into(x, &mut g);
        for j in 0..pp {
            phi[(i, j)] = g[j];
        }
    }
    let eig = SymmetricEigen::new(phi.transpose() * &phi).eigenvalues;
    let (lmin, lmax) = (eig.min(), eig.max());
    let sigma2 = 0.75f64 * 0.75;
    let s = 1e3;
    let bias = sigma2 / (s * s * lmin);
    let roundoff = f64::EPSILON * s * s * lmax / sigma2;
    let tol = 10.0 * (bias + roundoff);
    assert!(tol < 1e-3, "the check is meaningful: tolerance {tol}");

    let noise: Tau = toml::Value::String("known".into()).try_into().unwrap();
    let config = GpConfig {
        kernel: Kernel::Features,
        signal_sd: Some(s),
        noise_sd: Some(noise),
        ..GpConfig::default()
    };
    let out = run(&p, config, &[0, 1]);
    let anchor = Anchor::fit(&p).unwrap();
    for (k, r) in [0u64, 1].iter().enumerate() {
        let post = anchor.posterior(&p.draw(*r).train_y).unwrap();
        for i in 0..post.mean.len() {
            let scale = post.mean[i].abs() + post.std[i];
            assert!(
                (out[k].mean[i] - post.mean[i]).abs() <= tol * scale,
                "mean at {i}: {} vs {} (tol {tol})",
                out[k].mean[i],
                post.mean[i]
            );
            assert!(
                (out[k].std[i] - post.std[i]).abs() <= tol * scale,
                "sd at {i}: {} vs {}",
                out[k].std[i],
                post.std[i]
            );
        }
    }
}

#[test]
fn a_fitted_gp_on_the_quartic_finds_the_noise_and_covers() {
    // [002]'s quartic: σ = 1, N = 200. The fitted noise sd is within its sampling error of 1
    // (sd ≈ 1/√(2N) = 0.05 for a known mean; we allow 0.2 for the fitted f), and the 90%
    // intervals of f cover the truth on the training region at most points: over 4
    // repetitions × the `in` test points, coverage ≥ 0.7 (a GP that ignored the data or
    // collapsed its intervals would be near 0).
    let p = problem("quartic_gap.toml", &[]);
    let out = run(&p, GpConfig::default(), &[0, 1, 2, 3]);
    let z = 1.6448536269514722;
    let mut hits = 0;
    let mut total = 0;
    for o in &out {
        assert!(!o.diverged);
        let noise = o.scalars["gp_noise_sd"];
        assert!((noise - 1.0).abs() < 0.2, "noise sd {noise}");
        assert!(o.scalars["gp_log_marginal_likelihood"].is_finite());
        for i in 0..o.mean.len() {
            if p.test.region[i] == uqbench_anchor::Region::In {
                total += 1;
                if (o.mean[i] - p.test.truth[i]).abs() <= z * o.std[i] {
                    hits += 1;
                }
            }
        }
    }
    let coverage = hits as f64 / total as f64;
    assert!(coverage >= 0.7, "coverage {coverage}");
    // Same seeds, same fit.
    assert_eq!(run(&p, GpConfig::default(), &[2])[0], out[2]);
}

#[test]
fn bad_settings_name_the_key() {
    let err = |c: GpConfig| Gp::new("GP", c).unwrap_err().to_string();
    let e = err(GpConfig {
        length_scale: Some(0.0),
        ..GpConfig::default()
    });
    assert!(
        e.contains("GP.length_scale") && e.contains("positive"),
        "{e}"
    );
    let e = err(GpConfig {
        signal_sd: Some(-1.0),
        ..GpConfig::default()
    });
    assert!(e.contains("GP.signal_sd"), "{e}");
    let e = err(GpConfig {
        kernel: Kernel::Features,
        length_scale: Some(1.0),
        ..GpConfig::default()
    });
    assert!(e.contains("features kernel"), "{e}");
    // noise_sd = "known" on a problem whose σ is estimated.
    let p = problem("quartic_gap.toml", &[]);
    let y = vec![p.draw(0).train_y];
    let task = Task {
        d: 1,
        x_train: p.train.inputs.as_slice(),
        y_train: &y,
        repetitions: &[0],
        x_test: p.test.inputs.as_slice(),
        epochs: 1,
        known_sigma: p.known_sigma(),
        seeds: SeedBase {
            base: 1,
            experiment: "gp".into(),
            setting: String::new(),
        },
        features: None,
        noise: Default::default(),
        likelihood: Likelihood::Gaussian,
    };
    let res = Compute::host();
    let known: Tau = toml::Value::String("known".into()).try_into().unwrap();
    let e = Gp::new(
        "GP",
        GpConfig {
            noise_sd: Some(known),
            ..GpConfig::default()
        },
    )
    .unwrap()
    .run(&task, &res, false, &|_| {})
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("GP.noise_sd") && e.contains("not a known"),
        "{e}"
    );
    // The features kernel without features.
    let e = Gp::new(
        "GP",
        GpConfig {
            kernel: Kernel::Features,
            ..GpConfig::default()
        },
    )
    .unwrap()
    .run(&task, &res, false, &|_| {})
    .unwrap_err()
    .to_string();
    assert!(e.contains("GP.kernel"), "{e}");
}
