//! The host execution against the tensor execution, step for step, for every job the engine
//! takes.

use std::sync::Arc;

use burn::tensor::Device;
use uqbench_anchor::Rng;
use uqbench_core::Likelihood;

use super::*;
use crate::backend::BackendKind;
use crate::cpu::kernels::KernelPath;
use crate::mlp::MlpShape;
use crate::stochastic::{Bernoulli, Concrete, Variational};
use crate::trainer::chunk::TensorTrainer;
use crate::trainer::collect::{FinalWeights, Resample, Resamples, Weights};
use crate::trainer::head::Head;
use crate::trainer::network::Network;
use crate::trainer::{collect, LrSwitch, TrainOutput};

/// The heads: (likelihood, heteroscedastic, a method's own head, outputs): the likelihoods'
/// three, and [`ThreeOutputs`], a head the engine does not know, with three outputs (the
/// point-major tiles' remainder columns at the output).
fn heads() -> Vec<(Likelihood, bool, Option<Arc<dyn Head>>, usize)> {
    vec![
        (Likelihood::Gaussian, false, None, 1),
        (Likelihood::Bernoulli, false, None, 1),
        (Likelihood::Gaussian, true, None, 2),
        (Likelihood::Gaussian, false, Some(Arc::new(ThreeOutputs)), 3),
    ]
}

/// A method's own head as a method brings one: three outputs, each fitted to y with ½·MSE
/// and its own weight w_k = k + 1: ½·mean_n Σ_k w_k (o_k − y)², δ = w_k (o_k − y)/n.
#[derive(Debug)]
struct ThreeOutputs;

impl Head for ThreeOutputs {
    fn outputs(&self) -> usize {
        3
    }

    fn describe(&self) -> &'static str {
        "three weighted means"
    }

    fn value(
        &self,
        out: burn::tensor::Tensor<3>,
        y: &burn::tensor::Tensor<3>,
    ) -> burn::tensor::Tensor<3> {
        let w = self.weights(&out);
        ((out - y.clone()).square() * w)
            .sum_dim(2)
            .mean_dim(1)
            .mul_scalar(0.5)
    }

    fn delta(
        &self,
        out: burn::tensor::Tensor<3>,
        y: &burn::tensor::Tensor<3>,
    ) -> burn::tensor::Tensor<3> {
        let n = out.dims()[1];
        let w = self.weights(&out);
        ((out - y.clone()) * w).div_scalar(n as f64)
    }

    fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]) {
        let inv_n = 1.0 / y.len() as f32;
        for ((d, o), &yp) in delta.chunks_exact_mut(3).zip(out.chunks_exact(3)).zip(y) {
            for (k, (dv, &ov)) in d.iter_mut().zip(o).enumerate() {
                *dv = (k as f32 + 1.0) * (ov - yp) * inv_n;
            }
        }
    }

    fn value_host(&self, lanes: crate::cpu::simd::Lanes, out: &[f32], y: &[f32]) -> f32 {
        let terms: Vec<f32> = (out.chunks_exact(3).zip(y))
            .map(|(o, &yp)| {
                let sum: f32 = (o.iter().enumerate())
                    .map(|(k, &ov)| (k as f32 + 1.0) * (ov - yp) * (ov - yp))
                    .sum();
                0.5 * sum
            })
            .collect();
        lanes.sum(&terms) / y.len() as f32
    }
}

impl ThreeOutputs {
    /// The weights as a `[1, 1, 3]` tensor on `out`'s device.
    fn weights(&self, out: &burn::tensor::Tensor<3>) -> burn::tensor::Tensor<3> {
        burn::tensor::Tensor::from_data(
            burn::tensor::TensorData::new(vec![1.0f32, 2.0, 3.0], [1, 1, 3]),
            &out.device(),
        )
    }
}

#[test]
fn a_head_of_its_own_passes_the_head_check() {
    let out = [0.3f32, -0.5, -1.0, 0.8, 2.0, 0.1];
    crate::trainer::head::check(&ThreeOutputs, &out, &[0.1, 0.4], 1e-5).unwrap();
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
        for (likelihood, heteroscedastic, own_head, o) in heads() {
            for (l, dropout) in layers().into_iter().enumerate() {
                for (b, batching) in batchings().into_iter().enumerate() {
                    // EnsAdvA's pass in every other case, so that each head, layer and
                    // batching meets it.
                    let adversarial = ((l + b) % 2 == 1).then(|| vec![0.05, 0.1]);
                    let settings = TrainSettings {
                        likelihood,
                        heteroscedastic,
                        own_head: own_head.clone(),
                        mc_passes: if dropout.is_some() { 3 } else { 1 },
                        dropout: dropout.clone(),
                        adversarial,
                        batching: batching.clone(),
                        lr_switch: Some(LrSwitch { epoch: 5, lr: 3e-3 }),
                        collectors: vec![
                            Arc::new(FinalWeights),
                            Arc::new(Snapshots { start: 5 }),
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
        init: None,
        inputs: None,
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
        crate::trainer::run_chunks(&host, &res, &|_| {}).expect("host"),
        crate::trainer::run_chunks(&tensor, &res, &|_| {}).expect("tensor"),
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

/// The parameters at the end of every epoch from `start` on (what SWAG's collector folds in).
#[derive(Debug)]
struct Snapshots {
    start: usize,
}

/// One replica's snapshots.
#[derive(Debug, Default)]
struct Snaps(Vec<Vec<f32>>);

impl collect::Collector for Snapshots {
    fn wants(&self, event: collect::Want) -> bool {
        matches!(event, collect::Want::Epoch(e) if e >= self.start)
    }

    fn start(&self, _replica: usize) -> Box<dyn collect::Collected> {
        Box::new(Snaps::default())
    }
}

impl collect::Collected for Snaps {
    fn observe(&mut self, event: &collect::Event<'_>) {
        if let collect::Event::Epoch { params, .. } = event {
            self.0.push(params.to_vec());
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
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
        let (sh, st) = (h.collected::<Snaps>(1), t.collected::<Snaps>(1));
        assert_eq!(
            (sh[r].0.len(), st[r].0.len()),
            (3, 3),
            "{case}: epoch snapshots"
        );
        for (a, b) in sh[r].0.iter().zip(&st[r].0) {
            close(a, b, "epoch snapshot");
        }
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
