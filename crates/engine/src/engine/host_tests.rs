//! The host execution against the tensor execution, step for step, for every job the engine
//! takes.

use std::sync::Arc;

use burn::tensor::Device;
use uqbench_anchor::Rng;
use uqbench_core::Likelihood;

use super::*;
use crate::backend::BackendKind;
use crate::cpu::kernels::KernelPath;
use crate::engine::chunk::TensorTrainer;
use crate::engine::collect::{FinalWeights, Resample, Resamples, Swa, SwaMoments, Weights};
use crate::engine::head::{Head, Taus};
use crate::engine::network::Network;
use crate::engine::{
    collect, Dynamics, Langevin, LearnedNoise, LrSwitch, StepSchedule, TrainOutput,
};
use crate::mlp::MlpShape;
use crate::stochastic::{Bernoulli, Concrete, Variational};

/// The heads: (likelihood, heteroscedastic, quantile levels, a method's own head, outputs). The pinball head's
/// levels are ones no batch of up to 43 points can balance exactly: its bias gradient
/// Σ_p (1[y_p < q_p] − τ)/n vanishes in exact arithmetic when n·τ of the points lie below
/// (τ = ½ and an even batch), and Adam's first steps turn the f32 rounding left of that
/// zero into steps of ±lr·g/(|g| + ε), different on the two executions (seen: one bias
/// 0.0027 apart after the first step at τ = ½). With n·τ never an integer the sums stay
/// away from zero.
fn heads() -> Vec<(Likelihood, bool, Option<Taus>, Option<Head>, usize)> {
    vec![
        (Likelihood::Gaussian, false, None, None, 1),
        (Likelihood::Bernoulli, false, None, None, 1),
        (Likelihood::Gaussian, true, None, None, 2),
        (
            Likelihood::Gaussian,
            false,
            Taus::new(&[0.13, 0.47, 0.91]),
            None,
            3,
        ),
        (Likelihood::Gaussian, true, None, Head::beta_nll(0.5), 2),
        (Likelihood::Gaussian, false, None, Head::evidential(0.1), 4),
    ]
}

fn layers() -> Vec<Option<Arc<dyn StochasticLayer>>> {
    vec![
        None,
        Some(Arc::new(Bernoulli { p: 0.2 })),
        Some(Arc::new(Concrete {
            init_p: 0.2,
            temperature: 0.1,
            weight_reg: 1e-3,
            dropout_reg: 0.05,
        })),
        Some(Arc::new(Variational {
            init_alpha: 0.3,
            kl_weight: 0.01,
        })),
    ]
}

fn batchings() -> Vec<Batching> {
    vec![
        Batching::Full,
        Batching::Resample { size: None },
        Batching::Resample { size: Some(16) },
        Batching::Shuffled { size: 16 },
        Batching::WithReplacement {
            size: 20,
            per_epoch: 2,
        },
    ]
}

#[test]
fn the_host_execution_follows_the_tensor_execution() {
    // A network on 43 points, 8 epochs, three replicas, every job the engine takes: every
    // head, batching scheme and stochastic layer, with and without EnsAdvA's pass, with SWA's
    // learning rate and collection, the final weights and the resamples collected. From the
    // same seeds both executions start at the same weights and draw the same resample,
    // mini-batches and noise; they differ only in the floating-point order of their sums (f32,
    // about 1e-7 relative per operation, and the last bit of ln and cos), which eight Adam
    // steps of lr 1e-2 carry into the weights at well under 1e-4. A wrong gradient, head,
    // noise draw or batch moves a step by up to lr = 1e-2, a hundred times that.
    // Twice: a 2-6-4-o network (feature-major loops) and a 2-30-37-o one (in·out = 1 110 >
    // 800: the point-major register tiles, with every remainder: 30 and 37 columns are
    // 16 + 8 + 6 and 2·16 + 5, 43 points 8·5 + 3 rows).
    let mut cases = 0;
    for hidden in [vec![6, 4], vec![30, 37]] {
        for (likelihood, heteroscedastic, quantiles, own_head, o) in heads() {
            for (l, dropout) in layers().into_iter().enumerate() {
                for (b, batching) in batchings().into_iter().enumerate() {
                    // EnsAdvA's pass in every other case, so that each head, layer and
                    // batching meets it.
                    let adversarial = ((l + b) % 2 == 1).then(|| vec![0.05, 0.1]);
                    let settings = TrainSettings {
                        likelihood,
                        heteroscedastic,
                        quantiles,
                        own_head,
                        mc_passes: if dropout.is_some() { 3 } else { 1 },
                        dropout: dropout.clone(),
                        adversarial,
                        batching: batching.clone(),
                        lr_switch: Some(LrSwitch { epoch: 5, lr: 3e-3 }),
                        collectors: vec![
                            Arc::new(FinalWeights),
                            Arc::new(Swa { start: 5, rank: 2 }),
                            Arc::new(Resamples),
                        ],
                        ..TrainSettings::paper(8, 43)
                    };
                    let shape = MlpShape {
                        d_in: 2,
                        hidden: hidden.clone(),
                        d_out: o,
                        negative_slope: 0.01,
                    };
                    compare(&shape, &settings);
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 2 * heads().len() * 4 * 5);
}

#[test]
fn the_host_execution_follows_the_tensor_execution_under_sg_mcmc() {
    // SG-MCMC's updates in place of Adam (`langevin.rs`): SGLD, SGHMC and a cyclical
    // schedule (two cycles over the 8 epochs, so that exploration and sampling steps both
    // occur), full and mini-batches, both heads it takes. The two executions draw the same
    // Langevin normals (draw t·S + j of the replica's stream), so they agree step for step
    // like Adam's (the test above): a wrong slot, counter or scale moves a parameter by
    // √ε·ξ ≈ 0.03 or more, hundreds of times the tolerance.
    let dynamics = [
        (Dynamics::Sgld, StepSchedule::Constant),
        (Dynamics::Sghmc { friction: 0.1 }, StepSchedule::Constant),
        (
            Dynamics::Sgld,
            StepSchedule::Cyclical {
                cycles: 2,
                exploration: 0.5,
            },
        ),
    ];
    for (likelihood, o) in [(Likelihood::Gaussian, 1), (Likelihood::Bernoulli, 1)] {
        for (dynamics, schedule) in dynamics {
            for batching in [Batching::Full, Batching::Shuffled { size: 16 }] {
                let settings = TrainSettings {
                    likelihood,
                    batching,
                    langevin: Some(Langevin {
                        dynamics,
                        step_size: 1e-3,
                        schedule,
                        scale: 43.0,
                        noise: None,
                    }),
                    collectors: vec![
                        Arc::new(FinalWeights),
                        Arc::new(Swa { start: 5, rank: 2 }),
                        Arc::new(Resamples),
                    ],
                    ..TrainSettings::paper(8, 43)
                };
                let shape = MlpShape {
                    d_in: 2,
                    hidden: vec![6, 4],
                    d_out: o,
                    negative_slope: 0.01,
                };
                compare(&shape, &settings);
            }
        }
    }
}

/// σ learned (`langevin.rs`): the chains' σ² Gibbs-sampled at every epoch's end from their
/// squared residuals, the same draws on both executions (each chain's generator on the
/// host), so the two agree step for step and in every epoch's σ; a σ that did not reach the
/// weights' factors, or a residual sum over the wrong points, would part them by far more
/// than the tolerance (σ moves by ~10% per Gibbs draw at N = 43).
#[test]
fn the_host_execution_follows_the_tensor_execution_with_sigma_learned() {
    for (dynamics, batching) in [
        (Dynamics::Sgld, Batching::Full),
        (
            Dynamics::Sghmc { friction: 0.1 },
            Batching::Shuffled { size: 16 },
        ),
    ] {
        let settings = TrainSettings {
            batching: batching.clone(),
            langevin: Some(Langevin {
                dynamics,
                step_size: 1e-3,
                schedule: StepSchedule::Constant,
                scale: 43.0,
                noise: Some(LearnedNoise {
                    n: 43,
                    prior_precision: 1.0,
                }),
            }),
            collectors: vec![
                Arc::new(FinalWeights),
                Arc::new(Swa { start: 5, rank: 2 }),
                Arc::new(Resamples),
                Arc::new(NoiseSds),
            ],
            ..TrainSettings::paper(8, 43)
        };
        let shape = MlpShape {
            d_in: 2,
            hidden: vec![6, 4],
            d_out: 1,
            negative_slope: 0.01,
        };
        let (h, t) = compare(&shape, &settings);
        let (sh, st) = (h.collected::<Sds>(3), t.collected::<Sds>(3));
        for r in 0..3 {
            assert_eq!(sh[r].0.len(), 8, "one σ per epoch");
            for (a, b) in sh[r].0.iter().zip(&st[r].0) {
                assert!((a - b).abs() <= 1e-4 * b, "{batching:?}: σ {a} vs {b}");
            }
            let distinct = sh[r].0.windows(2).filter(|w| w[0] != w[1]).count();
            assert_eq!(distinct, 7, "a fresh σ every epoch: {:?}", sh[r].0);
        }
    }
}

/// The σ of every epoch's event.
#[derive(Debug)]
struct NoiseSds;

#[derive(Debug, Default)]
struct Sds(Vec<f64>);

impl collect::Collector for NoiseSds {
    fn wants(&self, event: collect::Want) -> bool {
        matches!(event, collect::Want::Epoch(_))
    }

    fn start(&self) -> Box<dyn collect::Collected> {
        Box::new(Sds::default())
    }
}

impl collect::Collected for Sds {
    fn observe(&mut self, event: &collect::Event<'_>) {
        if let collect::Event::Epoch { noise_sd, .. } = event {
            self.0.push(noise_sd.expect("σ learned"));
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Trains three replicas on both executions and compares everything they return.
fn compare(shape: &MlpShape, settings: &TrainSettings) -> (TrainOutput, TrainOutput) {
    let (n, m, d) = (43, 5, 2);
    let mut rng = Rng::new(11);
    let x: Vec<f32> = (0..n * d)
        .map(|_| rng.uniform_in(-2.0, 2.0) as f32)
        .collect();
    let x_test: Vec<f32> = (0..m * d)
        .map(|_| rng.uniform_in(-2.0, 2.0) as f32)
        .collect();
    let y: Vec<f32> = (0..n)
        .map(|p| {
            let f = x[p * d] - 0.5 * x[p * d + 1];
            match settings.likelihood {
                Likelihood::Gaussian => f + 0.3 * rng.normal() as f32,
                Likelihood::Bernoulli => f32::from(u8::from(f + 0.5 * rng.normal() as f32 > 0.0)),
            }
        })
        .collect();
    let targets = vec![y];
    let job = Job {
        shape,
        x_train: &x,
        targets: &targets,
        replica_targets: &[0, 0, 0],
        init_seeds: &[1, 2, 3],
        stream_seeds: &[4, 5, 6],
        replica_ids: &[0, 1, 2],
        x_test: &x_test,
    };
    settings.validate(n, shape).expect("valid settings");
    let dev = Device::flex();
    let mut res = Resources::new(BackendKind::Flex, dev.clone());
    res.threads = 1;
    let host = HostTrainer {
        job: &job,
        settings,
        level: res.simd,
    };
    let tensor = TensorTrainer {
        job: &job,
        settings,
        device: dev,
        net: Network {
            path: KernelPath::Flex,
            slope: shape.negative_slope,
            dropout: settings.dropout.clone(),
            head: settings.head(),
        },
    };
    let (h, t) = (
        crate::engine::run_chunks(&host, &res, &|_| {}).expect("host"),
        crate::engine::run_chunks(&tensor, &res, &|_| {}).expect("tensor"),
    );
    let case = format!(
        "{:?}, {:?}, {:?}, {:?}, adversarial {}",
        shape.hidden,
        settings.head(),
        settings.dropout,
        settings.batching,
        settings.adversarial.is_some()
    );
    same(&h, &t, &case);
    (h, t)
}

/// Every output of the two executions agrees within the tolerance of the test above.
fn same(h: &TrainOutput, t: &TrainOutput, case: &str) {
    let close = |a: &[f32], b: &[f32], what: &str| {
        assert_eq!(a.len(), b.len(), "{case}: {what}");
        for (i, (u, v)) in a.iter().zip(b).enumerate() {
            assert!(
                (u - v).abs() <= 1e-4 * (1.0 + v.abs()),
                "{case}: {what}[{i}] {u} vs {v}"
            );
        }
    };
    close(&h.test_out, &t.test_out, "predictions");
    close(&h.train_pred, &t.train_pred, "fit");
    for r in 0..3 {
        let (a, b) = (h.final_objective[r], t.final_objective[r]);
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{case}: objective {a} {b}"
        );
        let (wh, wt) = (h.collected::<Weights>(0), t.collected::<Weights>(0));
        close(&wh[r].0, &wt[r].0, "final weights");
        let (sh, st) = (h.collected::<SwaMoments>(1), t.collected::<SwaMoments>(1));
        assert_eq!(
            (sh[r].n, sh[r].deviations.len()),
            (3, 2),
            "{case}: SWA snapshots"
        );
        assert_eq!(
            (st[r].n, st[r].deviations.len()),
            (3, 2),
            "{case}: SWA snapshots"
        );
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
        close(&f32s(&sh[r].mean), &f32s(&st[r].mean), "SWA mean");
        let (rh, rt) = (h.collected::<Resample>(2), t.collected::<Resample>(2));
        assert_eq!(rh[r], rt[r], "{case}: resample");
    }
    assert_eq!(h.rates.is_some(), t.rates.is_some(), "{case}: rates");
    if let (Some(a), Some(b)) = (&h.rates, &t.rates) {
        for (u, v) in a.iter().zip(b) {
            assert!(
                (u - v).abs() <= 1e-4 * (1.0 + v.abs()),
                "{case}: rate {u} {v}"
            );
        }
    }
    assert_eq!(h.diverged, t.diverged, "{case}: divergence");
}
