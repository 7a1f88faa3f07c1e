//! Mean-field variational inference for a Bayesian neural network (Bayes by backprop,
//! Blundell et al. 2015; [002]'s BNN-VI), on the burn-autodiff route of the engine's trainer
//! like `uqbench_models::ens_mcd`.
//!
//! Every weight and bias w has a factorised Gaussian posterior q(w) = N(μ, σ²), σ = e^ρ, and
//! the prior N(0, σ_p²). One replica per repetition; each layer samples its pre-activations
//! with the local reparameterisation trick (Kingma, Salimans & Welling 2015): for an input
//! row x, z = x·μ_W + μ_b + ε ⊙ sqrt(x²·σ_W² + σ_b²), ε ~ N(0, 1), the exact distribution of
//! z under q given x, at a fraction of the variance of sampling the weights.
//!
//! The objective per replica is the negative ELBO divided by N, with a Gaussian likelihood of
//! noise sd σ_n = e^s:
//!   L = ½·mean_n (y_n − f(x_n))²·e^{−2s} + s + KL(q ‖ p)/N,
//!   KL(q ‖ p) = Σ_w [ln σ_p − ρ_w + (σ_w² + μ_w²)/(2σ_p²) − ½].
//! The 1/N in front of the KL is what makes this the ELBO: −ELBO = Σ_n NLL_n + KL, and we
//! minimise its mean per data point (the data term's scale). s is learned (a type-II point
//! estimate of the noise) unless `noise_sd` is given or `"known"`.
//!
//! Prediction: T passes at the test inputs, each drawing fresh ε; every pass is a sample of
//! f(x*) under q, and the intervals are the empirical quantiles of the T samples
//! ([`Family::Empirical`]). The noise sd σ_n enters the prediction intervals.
//!
//! Two routes train it: on a CPU backend, for networks whose layers are small
//! ([`MlpShape::host_sized`]: [002]'s 1-W-1 networks), `host.rs`'s fused loops, one replica
//! at a time over its points; on a GPU, and for larger layers, burn autodiff over a chunk of
//! replicas (below). Both draw the same ε from each replica's stream and take the same Adam
//! steps on the same objective; their floating-point order differs, so they agree in
//! distribution, not bit for bit (docs/performance.md compares them).

use std::ops::Range;

use burn::module::{Module, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use uqbench_anchor::Rng;

mod host;
pub mod net;

use uqbench_core::noise::{fixed_noise_sd, Tau};
use uqbench_core::MethodError;
use uqbench_core::{
    combine_members, Compute, Family, Likelihood, Member, Method, Prediction, Task,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::cpu::kernels::KernelPath;
use uqbench_engine::layers::LeakyRelu;
use uqbench_engine::mlp::{xavier_init, MlpShape};
use uqbench_engine::optim::AdamState;
use uqbench_engine::trainer::{
    run_chunks, try_download, BernoulliLogit, ChunkOut, ChunkTrainer, Head, Layout, Resources,
};

/// MFVI's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MfviSettings {
    /// Posterior draws T at prediction (200).
    pub samples: usize,
    /// Prior sd σ_p of every weight and bias (1).
    pub prior_sd: f64,
    /// Initial posterior sd of every weight and bias (0.01: the means start at the Xavier
    /// initialisation, nearly deterministic, as Blundell et al.).
    pub init_sd: f64,
    /// Noise sd σ_n: learned when left out, a number, or `"known"` for the problem's σ.
    pub noise_sd: Option<Tau>,
    /// Full-batch epochs of its own (the run's `epochs` when left out): the variational
    /// parameters converge far more slowly than a network's weights (a linear model's
    /// mean-field optimum takes about 2·10⁴ steps at lr 5e-4; experiments/limits.toml).
    pub epochs: Option<usize>,
}

impl Default for MfviSettings {
    fn default() -> Self {
        MfviSettings {
            samples: 200,
            prior_sd: 1.0,
            init_sd: 0.01,
            noise_sd: None,
            epochs: None,
        }
    }
}

/// MFVI's settings: the shared network and optimiser (full batch, no weight decay: the prior
/// is the regulariser) and [`MfviSettings`].
pub type MfviConfig = MethodConfig<MfviSettings>;

/// R replicas of a linear layer with a factorised Gaussian posterior on its weights and
/// biases.
#[derive(Module, Debug)]
pub struct BayesLinear {
    /// Posterior means of the weights `[R, in, out]`.
    pub w_mu: Param<Tensor<3>>,
    /// Posterior log sds of the weights `[R, in, out]`.
    pub w_rho: Param<Tensor<3>>,
    /// Posterior means of the biases `[R, 1, out]`.
    pub b_mu: Param<Tensor<3>>,
    /// Posterior log sds of the biases `[R, 1, out]`.
    pub b_rho: Param<Tensor<3>>,
}

impl BayesLinear {
    /// Sampled pre-activations (local reparameterisation) with standard normal `eps`
    /// `[R, n, out]`, or their mean without.
    ///
    /// # Shapes
    /// - `x`: `[1 or R, n, in]` → `[R, n, out]`
    pub fn forward(&self, x: Tensor<3>, eps: Option<Tensor<3>>) -> Tensor<3> {
        let mean = x.clone().matmul(self.w_mu.val()) + self.b_mu.val();
        match eps {
            None => mean,
            Some(eps) => {
                let var = x.square().matmul(self.w_rho.val().mul_scalar(2.0).exp())
                    + self.b_rho.val().mul_scalar(2.0).exp();
                mean + var.sqrt() * eps
            }
        }
    }

    /// KL(q ‖ N(0, σ_p²)) summed over the layer's parameters, per replica `[R, 1, 1]`.
    pub fn kl(&self, prior_sd: f64) -> Tensor<3> {
        let part = |mu: Tensor<3>, rho: Tensor<3>| -> Tensor<3> {
            // ln σ_p − ρ + (e^{2ρ} + μ²)/(2σ_p²) − ½, elementwise.
            let t = (rho.clone().mul_scalar(2.0).exp() + mu.square())
                .div_scalar(2.0 * prior_sd * prior_sd)
                - rho;
            t.add_scalar(prior_sd.ln() - 0.5).sum_dim(2).sum_dim(1)
        };
        part(self.w_mu.val(), self.w_rho.val()) + part(self.b_mu.val(), self.b_rho.val())
    }
}

/// The Bayesian MLP: [`BayesLinear`] layers with leaky-ReLU activations between them, and
/// the log noise sd s per replica.
#[derive(Module, Debug)]
pub struct BayesNet {
    /// The layers, input to output.
    pub layers: Vec<BayesLinear>,
    /// The activation after every hidden layer.
    pub activation: LeakyRelu,
    /// s = ln σ_n per replica `[R, 1, 1]` when learned; `None` when σ_n is fixed.
    pub log_noise: Option<Param<Tensor<3>>>,
}

impl BayesNet {
    /// Means from Xavier initialisation per replica, log sds at ln(`init_sd`), s at
    /// ln(`noise[r]`) per replica when `learn_noise`.
    pub fn init(
        shape: &MlpShape,
        seeds: &[u64],
        init_sd: f64,
        noise: &[f64],
        learn_noise: bool,
        device: &Device,
    ) -> BayesNet {
        let r = seeds.len();
        let host = xavier_init(shape, seeds);
        let layers = host
            .layers
            .into_iter()
            .zip(shape.layers())
            .map(|((w, b), (d_in, d_out))| BayesLinear {
                w_mu: Param::from_data(TensorData::new(w, [r, d_in, d_out]), device),
                w_rho: Param::from_tensor(Tensor::full([r, d_in, d_out], init_sd.ln(), device)),
                b_mu: Param::from_data(TensorData::new(b, [r, 1, d_out]), device),
                b_rho: Param::from_tensor(Tensor::full([r, 1, d_out], init_sd.ln(), device)),
            })
            .collect();
        BayesNet {
            layers,
            activation: LeakyRelu {
                slope: shape.negative_slope,
            },
            log_noise: learn_noise.then(|| {
                let logs: Vec<f32> = noise.iter().map(|v| v.ln() as f32).collect();
                Param::from_data(TensorData::new(logs, [r, 1, 1]), device)
            }),
        }
    }

    /// s = ln σ_n per replica `[R, 1, 1]`: the learned one, or `fixed` (its log) broadcast.
    pub fn log_noise(&self, fixed: f64, replicas: usize, device: &Device) -> Tensor<3> {
        match &self.log_noise {
            Some(p) => p.val(),
            None => Tensor::full([replicas, 1, 1], fixed.ln(), device),
        }
    }

    /// A forward pass: sampled with one `eps` per layer, or through the means without.
    pub fn forward(&self, x: Tensor<3>, eps: Option<&[Tensor<3>]>) -> Tensor<3> {
        let last = self.layers.len() - 1;
        let mut h = x;
        for (l, layer) in self.layers.iter().enumerate() {
            let z = layer.forward(h, eps.map(|e| e[l].clone()));
            h = if l < last {
                self.activation.forward(z)
            } else {
                z
            };
        }
        h
    }

    /// KL to the prior per replica `[R, 1, 1]`.
    pub fn kl(&self, prior_sd: f64) -> Tensor<3> {
        self.layers
            .iter()
            .map(|l| l.kl(prior_sd))
            .reduce(|a, b| a + b)
            .expect("at least one layer")
    }
}

/// Standard normals for every layer's pre-activations `[R, n, out_l]`, from each replica's
/// own stream.
fn draw_eps(rngs: &mut [Rng], n: usize, widths: &[usize], device: &Device) -> Vec<Tensor<3>> {
    widths
        .iter()
        .map(|&o| {
            let mut v = Vec::with_capacity(rngs.len() * n * o);
            for g in rngs.iter_mut() {
                for _ in 0..n * o {
                    v.push(g.normal() as f32);
                }
            }
            Tensor::from_data(TensorData::new(v, [rngs.len(), n, o]), device)
        })
        .collect()
}

/// The method.
#[derive(Debug, Clone)]
pub struct Mfvi {
    name: String,
    config: MfviConfig,
}

impl Mfvi {
    /// Checks the settings up front.
    pub fn new(name: &str, config: MfviConfig) -> Result<Mfvi, MethodError> {
        let positive = |key: &str, v: f64| -> Result<(), MethodError> {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(MethodError::invalid(
                    format!("{name}.{key}"),
                    v,
                    "a positive, finite number",
                ))
            }
        };
        positive("prior_sd", config.prior_sd)?;
        positive("init_sd", config.init_sd)?;
        if let Some(Tau::Value(v)) = config.noise_sd {
            positive("noise_sd", v)?;
        }
        if config.samples < 2 {
            return Err(MethodError::invalid(
                format!("{name}.samples"),
                config.samples,
                "at least 2 posterior draws for intervals",
            ));
        }
        if config.epochs == Some(0) {
            return Err(MethodError::invalid(
                format!("{name}.epochs"),
                0,
                "at least 1 epoch, or leave it out for the run's epochs",
            ));
        }
        config.net.shape(1, 1).validate()?;
        if let Some(size) = config.optim.batch_size {
            return Err(MethodError::invalid(
                format!("{name}.batch_size"),
                size,
                "leave it out: MFVI trains full-batch",
            ));
        }
        if config.optim.weight_decay.is_some_and(|w| w != 0.0) {
            return Err(MethodError::invalid(
                format!("{name}.weight_decay"),
                config.optim.weight_decay.unwrap_or_default(),
                "leave it out: the prior (prior_sd) is MFVI's regulariser",
            ));
        }
        Ok(Mfvi {
            name: name.to_string(),
            config,
        })
    }
}

impl Method for Mfvi {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(2 * self.config.net.shape(task.d, 1).parameters())
    }

    fn check(&self, task: &Task<'_>, _levels: &[f64]) -> Result<(), MethodError> {
        task.validate()?;
        fixed_noise_sd(&self.name, self.config.noise_sd, task, "learn").map(|_| ())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let resources = &Resources::of(compute)?;
        task.validate()?;
        let c = &self.config;
        let bernoulli = task.likelihood == Likelihood::Bernoulli;
        let fixed_noise = fixed_noise_sd(&self.name, c.noise_sd, task, "learn")?;
        let replicas = task.replicas(&self.name, 1);
        let y = task.replica_targets_f32(&replicas);
        let (x_train, x_test) = task.inputs_f32(c.net.standardize);
        // A learned noise sd starts at a tenth of the sd of the replica's own repetition's
        // targets (never another repetition's: a repetition's result depends on itself only).
        let noise_init: Vec<f64> = replicas
            .targets
            .iter()
            .map(|&k| match fixed_noise {
                Some(s) => s,
                None => {
                    let y = &task.y_train[k];
                    let mean = y.iter().sum::<f64>() / y.len() as f64;
                    0.1 * (y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / y.len() as f64)
                        .sqrt()
                        .max(1e-6)
                }
            })
            .collect();
        let shape = c.net.shape(task.d, 1);
        let trainer = MfviTrainer {
            config: c,
            host: resources
                .sampler_host_loops(&shape)
                .then_some(resources.simd),
            shape,
            x_train,
            x_test,
            y,
            init: &replicas.init,
            stream: &replicas.stream,
            epochs: c.epochs.unwrap_or(task.epochs),
            noise: fixed_noise,
            noise_init: &noise_init,
            device: resources.device.clone(),
            path: resources.kernel_path(),
            bernoulli,
        };
        let out = run_chunks(&trainer, resources, progress)?;
        let (m, n, t) = (task.n_test(), task.n_train(), c.samples);
        let noise = out.rates.clone().unwrap_or_default();
        Ok((0..task.repetitions.len())
            .map(|r| {
                let member = Member {
                    passes: (0..t)
                        .map(|pass| {
                            let start = (r * t + pass) * m;
                            &out.test_out[start..start + m]
                        })
                        .collect(),
                    train: &out.train_pred[r * n..(r + 1) * n],
                    objective: out.final_objective[r],
                    diverged: out.diverged[r],
                };
                let mut o = combine_members(&[member], Family::Empirical, true);
                if bernoulli {
                    return o;
                }
                o.noise_std = Some(vec![noise[r]; m]);
                if fixed_noise.is_none() {
                    o.scalars.insert("learned_noise_sd".into(), noise[r]);
                }
                o
            })
            .collect())
    }
}

/// [`BayesNet`] on the engine's trainer.
pub(crate) struct MfviTrainer<'a> {
    pub(crate) config: &'a MfviConfig,
    /// Train on the host (`cpu/mfvi.rs`), at this instruction set, instead of through
    /// autodiff.
    pub(crate) host: Option<uqbench_engine::cpu::simd::Level>,
    pub(crate) shape: MlpShape,
    pub(crate) x_train: Vec<f32>,
    pub(crate) x_test: Vec<f32>,
    /// Targets `[R, N]`, replica-major.
    pub(crate) y: Vec<f32>,
    pub(crate) init: &'a [u64],
    pub(crate) stream: &'a [u64],
    pub(crate) epochs: usize,
    /// σ_n when fixed.
    pub(crate) noise: Option<f64>,
    /// Per replica, σ_n at the start (the fixed value when σ_n is fixed).
    pub(crate) noise_init: &'a [f64],
    pub(crate) device: Device,
    pub(crate) path: KernelPath,
    /// Labels: the data term is the Bernoulli NLL of the logit output.
    pub(crate) bernoulli: bool,
}

impl MfviTrainer<'_> {
    /// The per-point negative ELBO per replica `[R, 1, 1]` at the network's output `out`
    /// (module docs), for targets `y` `[R, N, 1]`.
    pub(crate) fn objective(
        &self,
        model: &BayesNet,
        out: Tensor<3>,
        y: Tensor<3>,
        dev: &Device,
    ) -> Tensor<3> {
        let [rc, n, _] = y.dims();
        let inv_n = 1.0 / n as f64;
        let kl = model.kl(self.config.prior_sd).mul_scalar(inv_n);
        if self.bernoulli {
            // The per-point negative ELBO for labels: the mean Bernoulli NLL (binary
            // cross-entropy of the logit) plus KL/N, the same 1/N scaling as the Gaussian case
            // below.
            return BernoulliLogit.value(out, &y) + kl;
        }
        let s = model.log_noise(self.noise.unwrap_or(1.0), rc, dev);
        let data = (out - y)
            .square()
            .mean_dim(1)
            .mul(s.clone().mul_scalar(-2.0).exp())
            .mul_scalar(0.5);
        data + s + kl
    }
}

impl ChunkTrainer for MfviTrainer<'_> {
    fn layout(&self) -> Layout {
        let d = self.shape.d_in;
        Layout {
            replicas: self.init.len(),
            n_train: self.x_train.len() / d,
            n_test: self.x_test.len() / d,
            outputs: 1,
            passes: self.config.samples,
            // The "rate" slot carries σ_n per replica (learned or fixed).
            rates: true,
        }
    }

    fn bytes_per_replica(&self) -> usize {
        // Twice the parameters of a plain net (means and log sds) with gradients and Adam
        // moments, every layer's activations and variances for autodiff, the noise tensors,
        // and the prediction samples; twice for safety.
        let (n, m) = self.points();
        let widths: usize = self.shape.hidden.iter().sum::<usize>() + self.shape.d_in + 1;
        let params = 2 * self.shape.params_per_replica() * 5;
        let activations = n.max(m) * widths * 8;
        2 * 4 * (params + activations + m * self.config.samples)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        if let Some(level) = self.host {
            return self.train_chunk_host(range, level);
        }
        let c = self.config;
        let rc = range.len();
        let (n, m) = self.points();
        let d = self.shape.d_in;
        let widths: Vec<usize> = self.shape.layers().iter().map(|&(_, o)| o).collect();
        let mut streams: Vec<Rng> = self.stream[range.clone()]
            .iter()
            .map(|&s| Rng::new(s))
            .collect();
        let device = self.device.clone().autodiff();
        let mut model = BayesNet::init(
            &self.shape,
            &self.init[range.clone()],
            c.init_sd,
            &self.noise_init[range.clone()],
            self.noise.is_none(),
            &device,
        );
        // No weight decay on any slot: the prior is in the objective.
        let decay: Vec<bool> = Vec::new();
        let adam = c.optim.adam();
        let mut optim = AdamState::new();
        let x = Tensor::<3>::from_data(TensorData::new(self.x_train.clone(), [1, n, d]), &device);
        let y = Tensor::<3>::from_data(
            TensorData::new(self.y[range.start * n..range.end * n].to_vec(), [rc, n, 1]),
            &device,
        );
        let objective = |model: &BayesNet, out: Tensor<3>, y: Tensor<3>, dev: &Device| {
            self.objective(model, out, y, dev)
        };
        for _ in 0..self.epochs {
            let eps = draw_eps(&mut streams, n, &widths, &device);
            let out = model.forward(x.clone(), Some(&eps));
            let loss = objective(&model, out, y.clone(), &device).sum();
            let mut grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(model, &mut grads, &adam, 0.0, &decay, self.path);
        }

        // The objective at the final parameters (one sampled pass, the quantity optimised),
        // T sampled passes at the test inputs, and the mean-weights fit at the training ones.
        let model = model.valid();
        let plain = self.device.clone();
        let x = x.inner();
        let eps = draw_eps(&mut streams, n, &widths, &plain);
        let final_objective = download(objective(
            &model,
            model.forward(x.clone(), Some(&eps)),
            y.inner(),
            &plain,
        ))?
        .into_iter()
        .map(f64::from)
        .collect();
        let noise: Vec<f64> =
            download(model.log_noise(self.noise.unwrap_or(1.0), rc, &plain).exp())?
                .into_iter()
                .map(f64::from)
                .collect();
        let x_test =
            Tensor::<3>::from_data(TensorData::new(self.x_test.clone(), [1, m, d]), &plain);
        let t = c.samples;
        let mut pred = vec![0.0f32; rc * t * m];
        for pass in 0..t {
            let eps = draw_eps(&mut streams, m, &widths, &plain);
            let values = download(model.forward(x_test.clone(), Some(&eps)))?;
            for r in 0..rc {
                let dst = (r * t + pass) * m;
                pred[dst..dst + m].copy_from_slice(&values[r * m..(r + 1) * m]);
            }
        }
        let train = download(model.forward(x, None))?;
        Ok(ChunkOut {
            collected: Vec::new(),
            pred,
            train_pred: train,
            objective: final_objective,
            rates: noise,
            steps: self.epochs as u64,
            // Not counted on this route (its noise is drawn on the host and uploaded every
            // step).
            uploads: 0,
            reads: 0,
        })
    }
}

fn download(t: Tensor<3>) -> Result<Vec<f32>, MethodError> {
    try_download(t, "prediction")
}
