//! An ensemble of MC-dropout networks ([003]'s "ensemble of MC dropout"): M members, each
//! with Bernoulli dropout on its last hidden layer, T passes per member at prediction; the
//! prediction and uncertainty are the mean and std over all M·T passes.
//!
//! This file is the README's "add your own method" example, and deliberately uses the plain
//! burn route rather than the hand-written engine: a `#[derive(Module)]` network whose
//! parameters are batched over replicas (`[R, in, out]`), burn's autodiff for the gradients
//! and burn's Adam for the updates. Its parts: the config ([`EnsMcdConfig`]), the module
//! ([`McdNet`]), the training and prediction ([`EnsMcd::run`]); plus one line in the
//! registry (`crates/experiments/src/registry.rs`).

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use uqbench_anchor::Rng;

use std::ops::Range;

use crate::config::MethodConfig;
use crate::dropout::Dropout;
use crate::engine::{run_chunks, try_download, ChunkOut, ChunkTrainer, Head, Resources};
use crate::kernels::KernelPath;
use crate::layers::{BatchedLinear, BatchedLinearConfig, LeakyRelu, McDropout};
use crate::mlp::{xavier_init, MlpShape};
use crate::optim::{AdamConfig, AdamState};
use uqbench_core::MethodError;
use uqbench_core::{
    combine_members, Compute, Family, Likelihood, Member, Method, Prediction, Task,
};

/// The ensemble of MC-dropout networks' own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnsMcdSettings {
    /// Members M (10).
    pub members: usize,
    /// Drop rate p of every member (0.1).
    pub p: f64,
    /// Prediction passes T per member (20).
    pub passes: usize,
}

impl Default for EnsMcdSettings {
    fn default() -> Self {
        EnsMcdSettings {
            members: 10,
            p: 0.1,
            passes: 20,
        }
    }
}

/// Settings of the ensemble of MC-dropout networks: the shared network and optimiser
/// (full batch only; λ on the weights, not the biases, as the engine and MATLAB) and
/// [`EnsMcdSettings`].
pub type EnsMcdConfig = MethodConfig<EnsMcdSettings>;

/// R replicas of the MLP, with MC dropout on the last hidden layer.
#[derive(Module, Debug)]
pub struct McdNet {
    /// The linear layers, input to output.
    pub layers: Vec<BatchedLinear>,
    /// The activation after every hidden layer.
    pub activation: LeakyRelu,
    /// MC dropout on the last hidden layer's output.
    pub dropout: McDropout,
}

impl McdNet {
    /// The network for `seeds.len()` replicas, Xavier-initialised per replica.
    pub fn init(shape: &MlpShape, seeds: &[u64], device: &Device) -> McdNet {
        let r = seeds.len();
        let host = xavier_init(shape, seeds);
        let layers = host
            .layers
            .into_iter()
            .zip(shape.layers())
            .map(|((w, b), (d_in, d_out))| {
                BatchedLinearConfig { d_in, d_out }.from_host(w, b, r, device)
            })
            .collect();
        McdNet {
            layers,
            activation: LeakyRelu {
                slope: shape.negative_slope,
            },
            dropout: McDropout,
        }
    }

    /// Which parameters take weight decay, in visiting order: each layer's weight, not its
    /// bias.
    pub fn decay_mask(&self) -> Vec<bool> {
        self.layers.iter().flat_map(|_| [true, false]).collect()
    }

    /// Σ over layers of ‖W‖² per replica `[R, 1, 1]`.
    pub fn weight_norm(&self) -> Tensor<3> {
        self.layers
            .iter()
            .map(|l| l.weight.val().square().sum_dim(2).sum_dim(1))
            .reduce(|a, b| a + b)
            .expect("at least one layer")
    }

    /// The forward pass. The dropout mask is an explicit argument: with a mask the network
    /// is stochastic (training and MC prediction alike), without one it is deterministic.
    ///
    /// # Shapes
    /// - `x`: `[1 or R, n, d]`, `mask`: `[R, n, K]` (K the last hidden width) → `[R, n, 1]`
    pub fn forward(&self, x: Tensor<3>, mask: Option<Tensor<3>>) -> Tensor<3> {
        let last = self.layers.len() - 1;
        let mut h = x;
        for layer in &self.layers[..last] {
            h = self.activation.forward(layer.forward(h));
        }
        self.layers[last].forward(self.dropout.forward(h, mask))
    }
}

/// The method.
#[derive(Debug, Clone)]
pub struct EnsMcd {
    name: String,
    config: EnsMcdConfig,
}

impl EnsMcd {
    /// Checks the settings up front.
    pub fn new(name: &str, config: EnsMcdConfig) -> Result<EnsMcd, MethodError> {
        if config.members == 0 || config.passes == 0 {
            return Err(MethodError::invalid(
                format!("{name}.members × passes"),
                format!("{} × {}", config.members, config.passes),
                "at least one member and one pass",
            ));
        }
        Dropout::Bernoulli { p: config.p }.validate()?;
        config.net.shape(1, 1).validate()?;
        if config.net.hidden.is_empty() {
            return Err(MethodError::invalid(
                format!("{name}.hidden"),
                "[]",
                "at least one hidden layer to apply dropout to",
            ));
        }
        if let Some(size) = config.optim.batch_size {
            return Err(MethodError::invalid(
                format!("{name}.batch_size"),
                size,
                "leave it out: EnsMCD trains full-batch",
            ));
        }
        Ok(EnsMcd {
            name: name.to_string(),
            config,
        })
    }
}

impl Method for EnsMcd {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.members
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let resources = &Resources::of(compute)?;
        task.validate()?;
        let c = &self.config;
        // One replica per (repetition, member), each with its own seeds; the engine's trainer
        // cuts them into chunks, runs chunks on worker threads and reports progress.
        let replicas = task.replicas(&self.name, c.members);
        let y: Vec<f32> = replicas
            .targets
            .iter()
            .flat_map(|&k| task.y_train[k].iter().map(|&v| v as f32))
            .collect();
        let (x_train, x_test) = task.inputs_f32(c.net.standardize);
        let trainer = McdTrainer {
            config: c,
            shape: c.net.shape(task.d, 1),
            x_train,
            x_test,
            y,
            init: &replicas.init,
            stream: &replicas.stream,
            epochs: task.epochs,
            lambda: c.optim.lambda(task.n_train()),
            device: resources.device.clone(),
            path: resources.kernel_path(),
            head: match task.likelihood {
                Likelihood::Gaussian => Head::HalfMse,
                Likelihood::Bernoulli => Head::BernoulliLogit,
            },
        };
        let out = run_chunks(&trainer, resources, progress)?;
        let (m, n, t) = (task.n_test(), task.n_train(), c.passes);
        Ok((0..task.repetitions.len())
            .map(|rep_index| {
                let members: Vec<Member<'_>> = (rep_index * c.members..(rep_index + 1) * c.members)
                    .map(|replica| Member {
                        passes: (0..t)
                            .map(|pass| {
                                let start = (replica * t + pass) * m;
                                &out.test_out[start..start + m]
                            })
                            .collect(),
                        train: &out.train_pred[replica * n..(replica + 1) * n],
                        objective: out.final_objective[replica],
                        diverged: out.diverged[replica],
                    })
                    .collect();
                combine_members(&members, Family::Normal, keep_samples)
            })
            .collect())
    }
}

/// [`McdNet`] on the engine's trainer: how one chunk of replicas trains and predicts.
struct McdTrainer<'a> {
    config: &'a EnsMcdConfig,
    shape: MlpShape,
    x_train: Vec<f32>,
    x_test: Vec<f32>,
    /// Targets `[R, N]`, replica-major.
    y: Vec<f32>,
    init: &'a [u64],
    stream: &'a [u64],
    epochs: usize,
    lambda: f64,
    device: Device,
    path: KernelPath,
    /// The loss on the output: ½·MSE, or the Bernoulli cross-entropy for labels.
    head: Head,
}

impl ChunkTrainer for McdTrainer<'_> {
    fn replicas(&self) -> usize {
        self.init.len()
    }

    fn points(&self) -> (usize, usize) {
        let d = self.shape.d_in;
        (self.x_train.len() / d, self.x_test.len() / d)
    }

    fn outputs(&self) -> (usize, usize) {
        (1, self.config.passes)
    }

    fn has_rates(&self) -> bool {
        false
    }

    fn bytes_per_replica(&self) -> usize {
        // Parameters with gradients and Adam moments, and every layer's activations kept for
        // autodiff's backward pass, twice for safety (autodiff keeps more than the engine).
        let (n, m) = self.points();
        let widths: usize = self.shape.hidden.iter().sum::<usize>() + self.shape.d_in + 1;
        let params = self.shape.params_per_replica() * 5;
        let activations = n.max(m) * widths * 4;
        2 * 4 * (params + activations + m * self.config.passes)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        let c = self.config;
        let rc = range.len();
        let (n, m) = self.points();
        let d = self.shape.d_in;
        let k = *c
            .net
            .hidden
            .last()
            .expect("validated: at least one hidden layer");
        let mut streams: Vec<Rng> = self.stream[range.clone()]
            .iter()
            .map(|&s| Rng::new(s))
            .collect();
        let device = self.device.clone().autodiff();
        let dropout = Dropout::Bernoulli { p: c.p };

        // Training: burn's autodiff for the gradients, Adam per element with λ on the weights.
        let mut model = McdNet::init(&self.shape, &self.init[range.clone()], &device);
        let decay = model.decay_mask();
        let adam = AdamConfig {
            lr: c.optim.lr,
            beta1: c.optim.beta1,
            beta2: c.optim.beta2,
            eps: c.optim.eps,
        };
        let mut optim = AdamState::new();
        let x = Tensor::<3>::from_data(TensorData::new(self.x_train.clone(), [1, n, d]), &device);
        let y = Tensor::<3>::from_data(
            TensorData::new(self.y[range.start * n..range.end * n].to_vec(), [rc, n, 1]),
            &device,
        );
        for _ in 0..self.epochs {
            let mask = dropout.draw(&mut streams, n, k, 1, &device);
            let out = model.forward(x.clone(), Some(mask));
            // The sum over replicas of each replica's data term (the engine's head: ½·mean
            // squared error, or the Bernoulli cross-entropy of a logit for labels); the L2
            // term enters through Adam's gradient (λ·W).
            let loss = self.head.value(out, &y).sum();
            let mut grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(model, &mut grads, &adam, self.lambda, &decay, self.path);
        }

        // The final objective per replica (mask at its expectation), and T masked passes per
        // member at the test and at the training inputs.
        let model = model.valid();
        let plain = self.device.clone();
        let x = x.inner();
        let objective = self.head.value(model.forward(x.clone(), None), &y.inner())
            + model.weight_norm().mul_scalar(0.5 * self.lambda);
        let objective = download(objective)?.into_iter().map(f64::from).collect();
        let x_test =
            Tensor::<3>::from_data(TensorData::new(self.x_test.clone(), [1, m, d]), &plain);
        let t = c.passes;
        let mut pred = vec![0.0f32; rc * t * m];
        let mut train = vec![0.0f32; rc * n];
        for pass in 0..t {
            let mask = dropout.draw(&mut streams, m, k, 1, &plain);
            let values = download(model.forward(x_test.clone(), Some(mask)))?;
            for r in 0..rc {
                let dst = (r * t + pass) * m;
                pred[dst..dst + m].copy_from_slice(&values[r * m..(r + 1) * m]);
            }
            let mask = dropout.draw(&mut streams, n, k, 1, &plain);
            for (acc, v) in train
                .iter_mut()
                .zip(download(model.forward(x.clone(), Some(mask)))?)
            {
                *acc += v / t as f32;
            }
        }
        Ok(ChunkOut {
            pred,
            train_pred: train,
            objective,
            rates: Vec::new(),
            steps: self.epochs as u64,
            // Not counted on this route (its masks are uploaded every step).
            uploads: 0,
            reads: 0,
        })
    }
}

fn download(t: Tensor<3>) -> Result<Vec<f32>, MethodError> {
    try_download(t, "prediction")
}
