//! HMC on a conjugate model, where the posterior is exact, and its bad settings.

use nalgebra::{DMatrix, DVector};
use uqbench_anchor::Rng;
use uqbench_core::{Method, SeedBase, Task};
use uqbench_engine::engine::Resources;
use uqbench_engine::{open_device, BackendKind, NetConfig};
use uqbench_samplers::{Hmc, HmcConfig, HmcSettings};

/// The conjugate model's data: N inputs on [−2, 2] and y = 0.8x − 0.3 + N(0, 0.5²).
const N: usize = 50;

fn conjugate_x() -> Vec<f64> {
    let mut rng = Rng::new(21);
    (0..N).map(|_| rng.uniform_in(-2.0, 2.0)).collect()
}

fn conjugate_y() -> Vec<Vec<f64>> {
    // The same stream as conjugate_x, continued.
    let mut rng = Rng::new(21);
    let x: Vec<f64> = (0..N).map(|_| rng.uniform_in(-2.0, 2.0)).collect();
    vec![x
        .iter()
        .map(|&v| 0.8 * v - 0.3 + 0.5 * rng.normal())
        .collect()]
}

/// HMC on the network linear in x (no hidden layer), σ = 0.5 known, with `own` settings.
fn run_linear(
    x: &[f64],
    y: &[Vec<f64>],
    x_test: &[f64],
    own: HmcSettings,
) -> Vec<uqbench_core::Prediction> {
    let task = Task {
        d: 1,
        x_train: x,
        y_train: y,
        repetitions: &[0],
        x_test,
        epochs: 1,
        known_sigma: Some(0.5),
        seeds: SeedBase {
            base: 3,
            experiment: "hmc".into(),
            setting: String::new(),
        },
        features: None,
        noise: Default::default(),
        likelihood: uqbench_core::Likelihood::Gaussian,
    };
    let config = HmcConfig {
        net: NetConfig {
            hidden: vec![],
            ..NetConfig::default()
        },
        own,
        ..HmcConfig::default()
    };
    let res = Resources::new(
        BackendKind::Flex,
        open_device(BackendKind::Flex, true).unwrap(),
    );
    Hmc::new("HMC", config)
        .unwrap()
        .run(&task, &res.compute(), false, &|_| {})
        .unwrap()
}

#[test]
fn hmc_on_bayesian_linear_regression_recovers_the_posterior() {
    // f(x) = w·x + b with prior w, b ~ N(0, 1) and known σ_n = 0.5, N = 50: the posterior is
    // N(Λ⁻¹Φᵀy/σ², Λ⁻¹) with Λ = ΦᵀΦ/σ² + I, so f(x*) has mean φ*ᵀμ and variance φ*ᵀΛ⁻¹φ*.
    let (n, x, y) = (N, conjugate_x(), conjugate_y());
    let phi = DMatrix::from_fn(n, 2, |i, j| if j == 0 { x[i] } else { 1.0 });
    let lambda = phi.transpose() * &phi / 0.25 + DMatrix::identity(2, 2);
    let cov = lambda.clone().try_inverse().unwrap();
    let mean = &cov * (phi.transpose() * DVector::from_column_slice(&y[0]) / 0.25);
    let x_test = [-2.0, 0.0, 1.5];
    let out = run_linear(
        &x,
        &y,
        &x_test,
        HmcSettings {
            chains: 4,
            warmup: 300,
            draws: 1000,
            leapfrog_steps: 10,
            noise_sd: Some(toml::Value::String("known".into()).try_into().unwrap()),
            ..HmcSettings::default()
        },
    );
    let o = &out[0];
    assert!(!o.diverged);
    // The well-mixed conjugate case is reference-grade, without divergences or low E-BFMI.
    assert_eq!(o.scalars["divergent_transitions"], 0.0);
    assert_eq!(o.scalars["ebfmi_flagged"], 0.0);
    assert_eq!(o.scalars["reference_grade"], 1.0);
    let ess = o.scalars["ess_bulk_min"];
    assert!(o.scalars["rhat_max"] < 1.01, "R̂ {}", o.scalars["rhat_max"]);
    assert!(ess > 400.0, "ESS {ess}");
    for (i, &xs) in x_test.iter().enumerate() {
        let p = DVector::from_vec(vec![xs, 1.0]);
        let m = p.dot(&mean);
        let sd = (p.transpose() * &cov * &p)[(0, 0)].sqrt();
        // Monte-Carlo error of the draws' mean is sd/√ESS, of their sd about sd/√(2·ESS);
        // checked at 5 of those (f32 on the device adds ~1e-6, negligible).
        assert!(
            (o.mean[i] - m).abs() < 5.0 * sd / ess.sqrt(),
            "x* = {xs}: mean {} vs {m} (sd {sd}, ESS {ess})",
            o.mean[i]
        );
        assert!(
            (o.std[i] / sd - 1.0).abs() < 5.0 / (2.0 * ess).sqrt(),
            "x* = {xs}: sd {} vs {sd} (ESS {ess})",
            o.std[i]
        );
    }
}

#[test]
fn a_step_far_too_large_diverges_and_is_not_reference_grade() {
    // The same conjugate model; the posterior sd of w and b is about 0.04, so a fixed step of
    // 2 (no warm-up to adapt it) makes the leapfrog integrator unstable: energy errors far
    // above 1 000, counted as divergent transitions, and chains that barely move.
    let (x, y) = (conjugate_x(), conjugate_y());
    let x_test = [-2.0, 0.0, 1.5];
    let out = run_linear(
        &x,
        &y,
        &x_test,
        HmcSettings {
            chains: 4,
            warmup: 0,
            draws: 300,
            leapfrog_steps: 10,
            step_size: 2.0,
            jitter: false,
            noise_sd: Some(toml::Value::String("known".into()).try_into().unwrap()),
            ..HmcSettings::default()
        },
    );
    let o = &out[0].scalars;
    assert!(o["divergent_transitions"] > 0.0, "{o:?}");
    assert_eq!(o["reference_grade"], 0.0, "{o:?}");
    assert_eq!(o["rhat_flagged"], 1.0, "{o:?}");
}

#[test]
fn bad_settings_name_the_key() {
    let err = |own: HmcSettings| {
        Hmc::new(
            "HMC",
            HmcConfig {
                own,
                ..HmcConfig::default()
            },
        )
        .unwrap_err()
        .to_string()
    };
    let e = err(HmcSettings {
        step_size: 0.0,
        ..HmcSettings::default()
    });
    assert!(e.contains("HMC.step_size"), "{e}");
    let e = err(HmcSettings {
        chains: 1,
        ..HmcSettings::default()
    });
    assert!(e.contains("HMC.chains") && e.contains("R̂"), "{e}");
    let e = Hmc::new(
        "HMC",
        HmcConfig {
            net: NetConfig {
                hidden: vec![0],
                ..NetConfig::default()
            },
            ..HmcConfig::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("every width must be at least 1"), "{e}");
}
