//! Tests of `langevin.rs`: the cyclical schedule, and the dynamics on both executions.

use super::*;
use std::sync::Arc;
use uqbench_core::Likelihood;
use uqbench_engine::trainer::agree::{executions_agree, POINTS};
use uqbench_engine::trainer::collect::{self, FinalWeights, Weights};
use uqbench_engine::trainer::Batching;

/// Targets of the executions' job: a plane plus noise, or labels from it.
fn targets(likelihood: Likelihood) -> impl Fn(f32, f64) -> f32 {
    move |f, z| match likelihood {
        Likelihood::Gaussian => f + 0.3 * z as f32,
        Likelihood::Bernoulli => f32::from(u8::from(f + 0.5 * z as f32 > 0.0)),
    }
}

/// Both executions' final weights agree within the executions' tolerance.
fn same_weights(h: &uqbench_engine::TrainOutput, t: &uqbench_engine::TrainOutput, case: &str) {
    let (wh, wt) = (h.collected::<Weights>(0), t.collected::<Weights>(0));
    for (a, b) in wh.iter().zip(&wt) {
        for (u, v) in a.0.iter().zip(&b.0) {
            assert!(
                (u - v).abs() <= 1e-4 * (1.0 + v.abs()),
                "{case}: weight {u} {v}"
            );
        }
    }
}

#[test]
fn the_host_execution_follows_the_tensor_execution_under_sg_mcmc() {
    // SG-MCMC's updates in place of Adam: SGLD, SGHMC, pSGLD and a cyclical schedule (two
    // cycles over the 8 epochs, so that exploration and sampling steps both occur), full
    // and mini-batches, both heads it takes. The two executions draw the same Langevin
    // normals (draw t·S + j of the replica's stream), so they agree step for step like
    // Adam's: a wrong slot, counter or scale moves a parameter by √ε·ξ ≈ 0.03 or more,
    // hundreds of times the tolerance (`executions_agree`).
    let dynamics = [
        (Dynamics::Sgld, StepSchedule::Constant),
        (Dynamics::Sghmc { friction: 0.1 }, StepSchedule::Constant),
        (
            Dynamics::Psgld {
                rms_decay: 0.99,
                floor: 1e-5,
                adapt: 0.5,
            },
            StepSchedule::Constant,
        ),
        (
            Dynamics::Sgld,
            StepSchedule::Cyclical {
                cycles: 2,
                exploration: 0.5,
            },
        ),
    ];
    for likelihood in [Likelihood::Gaussian, Likelihood::Bernoulli] {
        for (dynamics, schedule) in dynamics {
            for batching in [Batching::Full, Batching::Shuffled { size: 16 }] {
                let settings = TrainSettings {
                    likelihood,
                    batching: batching.clone(),
                    update: Some(Arc::new(Langevin {
                        dynamics,
                        step_size: 1e-3,
                        schedule,
                        scale: POINTS as f64,
                        noise: None,
                    })),
                    collectors: vec![Arc::new(FinalWeights)],
                    ..TrainSettings::paper(8, POINTS)
                };
                let case = format!("{likelihood:?} {dynamics:?} {schedule:?} {batching:?}");
                let (h, t) = executions_agree(&settings, targets(likelihood))
                    .unwrap_or_else(|e| panic!("{case}: {e}"));
                same_weights(&h, &t, &case);
            }
        }
    }
}

/// σ learned: the chains' σ² Gibbs-sampled at every epoch's end from their squared
/// residuals, the same draws on both executions (each chain's generator on the host), so
/// the two agree step for step and in every epoch's σ; a σ that did not reach the weights'
/// factors, or a residual sum over the wrong points, would part them by far more than the
/// tolerance (σ moves by ~10% per Gibbs draw at N = 43).
#[test]
fn the_host_execution_follows_the_tensor_execution_with_sigma_learned() {
    for (dynamics, batching) in [
        (Dynamics::Sgld, Batching::Full),
        (
            Dynamics::Sghmc { friction: 0.1 },
            Batching::Shuffled { size: 16 },
        ),
        (
            Dynamics::Psgld {
                rms_decay: 0.99,
                floor: 1e-5,
                adapt: 0.5,
            },
            Batching::Shuffled { size: 16 },
        ),
    ] {
        let settings = TrainSettings {
            batching: batching.clone(),
            update: Some(Arc::new(Langevin {
                dynamics,
                step_size: 1e-3,
                schedule: StepSchedule::Constant,
                scale: POINTS as f64,
                noise: Some(LearnedNoise {
                    n: POINTS,
                    prior_precision: 1.0,
                }),
            })),
            collectors: vec![Arc::new(FinalWeights), Arc::new(NoiseSds)],
            ..TrainSettings::paper(8, POINTS)
        };
        let (h, t) = executions_agree(&settings, targets(Likelihood::Gaussian))
            .unwrap_or_else(|e| panic!("{batching:?}: {e}"));
        same_weights(&h, &t, &format!("{batching:?}"));
        let (sh, st) = (h.collected::<Sds>(1), t.collected::<Sds>(1));
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

    fn start(&self, _replica: usize) -> Box<dyn collect::Collected> {
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

#[test]
fn the_cyclical_schedule_follows_zhang_et_al() {
    let l = Langevin {
        dynamics: Dynamics::Sgld,
        step_size: 0.4,
        schedule: StepSchedule::Cyclical {
            cycles: 4,
            exploration: 0.5,
        },
        scale: 1.0,
        noise: None,
    };
    // T = 100, K = 4: cycles of 25 steps; step 1 starts a cycle at ε₀, step 26 the next.
    assert_eq!(l.at(1, 100), (0.4, false));
    assert_eq!(l.at(26, 100), (0.4, false));
    let (mid, noisy) = l.at(13, 100); // r = 12/25 < ½: still exploring
    assert!((mid - 0.2 * ((std::f64::consts::PI * 0.48).cos() + 1.0)).abs() < 1e-12);
    assert!(!noisy);
    assert!(l.at(14, 100).1, "r = 13/25 ≥ ½ samples");
    assert!(l.at(25, 100).0 < 0.01 && l.at(25, 100).1);
}
