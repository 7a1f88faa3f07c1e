//! The many-chain reference (`algorithm = "chees"`) on posteriors known exactly: the
//! conjugate linear model with σ sampled (the single chains' exact check, `hmc.rs`), and a
//! one-unit network whose hidden layer's posterior is integrated by quadrature, which holds the
//! unit moves' acceptance ratio to the posterior.

use uqbench_anchor::Rng;
use uqbench_core::{Method, SeedBase, Task};
use uqbench_engine::trainer::Resources;
use uqbench_engine::{open_device, BackendKind, NetConfig};
use uqbench_samplers::{Algorithm, Hmc, HmcConfig, HmcSettings, Metric, Trajectory};

use super::hmc::{normal_cdf, pairing_settings, sigma_pairing, sigma_pairing_with};

/// The reference's settings: 64 chains in 8 superchains, fixed jittered trajectories of
/// `steps` steps, `warmup` iterations and `draws` draws.
fn ensemble(steps: usize, warmup: usize, draws: usize) -> HmcSettings {
    HmcSettings {
        algorithm: Algorithm::Chees,
        chains: 64,
        superchains: 8,
        warmup,
        draws,
        leapfrog_steps: steps,
        trajectory: Trajectory::Fixed,
        ..HmcSettings::default()
    }
}

#[test]
fn the_ensemble_pairs_each_draw_with_its_own_sigma() {
    // `sigma_pairing`'s exact joint of (f, σ) on the conjugate linear model, for the lockstep
    // chains with their shared step: certified, no divergence, the paired statistic and the
    // predictive's tails within 5 Monte Carlo errors of the quadrature.
    sigma_pairing(HmcSettings {
        prior_sd: pairing_settings().prior_sd,
        ..ensemble(10, 300, 200)
    });
}

#[test]
fn chees_adapts_a_trajectory_and_the_chains_still_sample_the_posterior() {
    // The same check with the trajectory length adapted by ChEES from every chain.
    sigma_pairing(HmcSettings {
        prior_sd: pairing_settings().prior_sd,
        trajectory: Trajectory::Chees,
        ..ensemble(10, 300, 200)
    });
}

/// f(x) = a·lrelu(w·x + b) + c with every weight ~ N(0, 2²), σ = 0.5 known, on 16 points of a
/// kinked line: the data, and E f(x*), sd f(x*) at `x_test` by quadrature over (w, b) with
/// (a, c) integrated exactly (given w, b the model is a conjugate linear regression on the
/// features [lrelu(wx + b), 1]).
struct OneUnit {
    x: Vec<f64>,
    y: Vec<f64>,
}

const SIGMA: f64 = 0.5;
const PRIOR_SD: f64 = 2.0;

impl OneUnit {
    fn new() -> OneUnit {
        let mut rng = Rng::new(17);
        let x: Vec<f64> = (0..16).map(|_| rng.uniform_in(-2.0, 2.0)).collect();
        let y = x
            .iter()
            .map(|&v| 1.5 * (v - 0.3).max(0.0) - 0.5 + SIGMA * rng.normal())
            .collect();
        OneUnit { x, y }
    }

    /// Per (w, b): the log of the unnormalised posterior and, at `xs`, the conditional mean
    /// and variance of f.
    fn conditional(&self, w: f64, b: f64, xs: &[f64]) -> (f64, Vec<(f64, f64)>) {
        let lrelu = |z: f64| if z > 0.0 { z } else { 0.01 * z };
        let (s2, p2) = (SIGMA * SIGMA, PRIOR_SD * PRIOR_SD);
        let (mut hh, mut h1, mut hy, mut sy) = (0.0, 0.0, 0.0, 0.0);
        for (&x, &y) in self.x.iter().zip(&self.y) {
            let h = lrelu(w * x + b);
            hh += h * h;
            h1 += h;
            hy += h * y;
            sy += y;
        }
        let n = self.x.len() as f64;
        // A = ΦᵀΦ/σ² + I/σ_p², its inverse and m = A⁻¹Φᵀy/σ² (2 × 2).
        let (a11, a12, a22) = (hh / s2 + 1.0 / p2, h1 / s2, n / s2 + 1.0 / p2);
        let det = a11 * a22 - a12 * a12;
        let (i11, i12, i22) = (a22 / det, -a12 / det, a11 / det);
        let (r1, r2) = (hy / s2, sy / s2);
        let (m1, m2) = (i11 * r1 + i12 * r2, i12 * r1 + i22 * r2);
        let log_post = 0.5 * (r1 * m1 + r2 * m2) - 0.5 * det.ln() - 0.5 * (w * w + b * b) / p2;
        let at = xs
            .iter()
            .map(|&x| {
                let h = lrelu(w * x + b);
                (m1 * h + m2, i11 * h * h + 2.0 * i12 * h + i22)
            })
            .collect();
        (log_post, at)
    }

    /// E f(x*) and sd f(x*) by quadrature on a 701 × 701 grid over (w, b) ∈ [−10, 10]² (five
    /// prior sds).
    fn exact(&self, xs: &[f64]) -> Vec<(f64, f64)> {
        let k = 701;
        let grid: Vec<f64> = (0..k)
            .map(|i| -10.0 + 20.0 * i as f64 / (k - 1) as f64)
            .collect();
        let cells: Vec<(f64, Vec<(f64, f64)>)> = grid
            .iter()
            .flat_map(|&w| grid.iter().map(move |&b| (w, b)))
            .map(|(w, b)| self.conditional(w, b, xs))
            .collect();
        let top = cells.iter().map(|c| c.0).fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = cells.iter().map(|c| (c.0 - top).exp()).collect();
        let total: f64 = weights.iter().sum();
        (0..xs.len())
            .map(|i| {
                let mean: f64 = (weights.iter().zip(&cells))
                    .map(|(w, c)| w * c.1[i].0)
                    .sum::<f64>()
                    / total;
                let second: f64 = (weights.iter().zip(&cells))
                    .map(|(w, c)| w * (c.1[i].1 + c.1[i].0 * c.1[i].0))
                    .sum::<f64>()
                    / total;
                (mean, (second - mean * mean).sqrt())
            })
            .collect()
    }
}

#[test]
fn unit_moves_sample_the_hidden_layers_posterior() {
    // The collapsed ensemble with unit moves (every unit's input weight and bias proposed from
    // their prior and accepted by the collapsed likelihood's ratio) on the one-unit network:
    // its predictive mean and sd of f at five inputs within 5 of its own Monte Carlo standard
    // errors of the quadrature (mean: MCSE of the mean; sd: MCSE of the sd), and certified.
    // The posterior of (w, b) has two orientations of the unit (w > 0: active right of the
    // kink, w < 0: left), which trajectories cannot join (w = 0 makes the feature vanish) and
    // the unit moves do.
    let data = OneUnit::new();
    let xs = [-1.9, -0.5, 0.3, 1.0, 1.9];
    let exact = data.exact(&xs);
    let task = Task {
        d: 1,
        x_train: &data.x,
        y_train: std::slice::from_ref(&data.y),
        repetitions: &[0],
        x_test: &xs,
        epochs: 1,
        known_sigma: Some(SIGMA),
        seeds: SeedBase {
            base: 4,
            experiment: "ensemble".into(),
            setting: String::new(),
        },
        features: None,
        noise: Default::default(),
        likelihood: uqbench_core::Likelihood::Gaussian,
    };
    let run = |unit_sweeps: usize, temperatures: usize, hot_unit_sweeps: Option<usize>| {
        let config = HmcConfig {
            net: NetConfig {
                hidden: vec![1],
                negative_slope: 0.01,
                standardize: false,
            },
            own: HmcSettings {
                prior_sd: PRIOR_SD,
                noise_sd: Some(uqbench_core::noise::Tau::Value(SIGMA)),
                marginalise_output: true,
                unit_sweeps,
                temperatures,
                hot_unit_sweeps,
                metric: Metric::Unit,
                ..ensemble(4, 300, 300)
            },
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
            .remove(0)
    };
    // Untempered with two sweeps; and tempered (4 rungs) with the unit moves on the hot rungs
    // only, so that the cold rung's unit changes orientation only by the swaps: a sampler that
    // ignored `hot_unit_sweeps` would make no unit move at all there (`unit_accept_rate` 0).
    for (sweeps, rungs, hot) in [(2, 1, None), (0, 4, Some(2))] {
        let o = run(sweeps, rungs, hot);
        let what = format!("unit_sweeps {sweeps}, temperatures {rungs}, hot {hot:?}");
        assert_eq!(o.scalars["reference_grade"], 1.0, "{what}: {:?}", o.scalars);
        let mc = o.extra.mcse.as_ref().unwrap();
        for (i, &(m, s)) in exact.iter().enumerate() {
            assert!(
                (o.mean[i] - m).abs() < 5.0 * mc.mean[i],
                "{what}: x = {}: mean {} vs exact {m} (MCSE {})",
                xs[i],
                o.mean[i],
                mc.mean[i]
            );
            assert!(
                (o.std[i] - s).abs() < 5.0 * mc.sd[i],
                "{what}: x = {}: sd {} vs exact {s} (MCSE {})",
                xs[i],
                o.std[i],
                mc.sd[i]
            );
        }
        // The unit moves are accepted (the orientation changes through them).
        assert!(
            o.scalars["unit_accept_rate"] > 0.01,
            "{what}: {:?}",
            o.scalars
        );
    }
    let _ = normal_cdf;
}

#[test]
fn doubling_an_uncertified_sampling_stage_keeps_sampling_the_posterior() {
    // About one leapfrog step per iteration: 64 × 20 draws whose autocorrelation keeps the first
    // stage short of the certificate's ESS > 400, so the sampling stage doubles (each doubling
    // keeps every other draw and runs as long again at twice the thinning) until it is
    // certified; the draws then hold `sigma_pairing`'s exact joint of (f, σ) and its
    // predictive's tails. Its shuffled-σ check is left out: it needs ~1 000 effective draws,
    // which a run stopped at the certificate's 400 need not have; that the halving keeps f, σ
    // and the energy of one iteration together is held by the sampler's unit test
    // `a_doubled_stage_keeps_every_draw_at_the_new_thinning`.
    let scalars = sigma_pairing_with(
        HmcSettings {
            prior_sd: pairing_settings().prior_sd,
            doublings: 6,
            ..ensemble(1, 300, 20)
        },
        false,
    );
    let doubled = scalars["sampling_doublings"];
    assert!((1.0..=6.0).contains(&doubled), "{scalars:?}");
}
