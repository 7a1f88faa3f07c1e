//! A Bayesian neural network sampled by Hamiltonian Monte Carlo ([002]'s BNN-MCMC, the gold
//! standard), on the engine's trainer: chains × repetitions are the replicas, so every chain
//! of every data set runs in one tensor program.
//!
//! Target, per replica: p(θ, σ² | y) ∝ Π_n N(y_n | f_θ(x_n), σ²) · N(θ | 0, σ_p² I) · p(σ²),
//! with p(σ²) = InvGamma(a₀, b₀) (a₀ = b₀ = 1) unless σ is fixed (`noise_sd`). One iteration:
//! 1. HMC on θ given σ²: momenta ρ ~ N(0, I), `leapfrog_steps` leapfrog steps of size ε with
//!    the potential U(θ) = SSE(θ)/(2σ²) + ‖θ‖²/(2σ_p²) and its gradient from the network's
//!    hand-written backward pass ([`crate::layers::linear_backward`]), then a Metropolis
//!    accept of the end point with probability min(1, e^{H₀ − H₁}), H = U + ½‖ρ‖², per
//!    replica on the device (a mask).
//! 2. Gibbs on σ² given θ: σ² ~ InvGamma(a₀ + N/2, b₀ + SSE/2) (conjugate), on the host from
//!    each replica's SSE.
//!
//! For labels (a classification task) the target is p(θ | y) ∝ Π_n Bernoulli(y_n |
//! sigmoid(f_θ(x_n))) · N(θ | 0, σ_p² I): U(θ) = Σ_n (softplus(f_n) − y_n·f_n) + ‖θ‖²/(2σ_p²)
//! with ∂U/∂f = sigmoid(f) − y, no σ and no Gibbs step; the draws are logits.
//!
//! Every iteration jitters the step to ε·U(0.5, 1.5), so that no fixed trajectory length
//! resonates with the posterior. Warm-up: the first `warmup` iterations adapt each replica's ε by Nesterov dual averaging
//! toward an acceptance rate of `target_accept` (Hoffman & Gelman 2014, Algorithm 5:
//! γ = 0.05, t₀ = 10, κ = 0.75, μ = ln 10ε₀) and are discarded; sampling then uses the
//! averaged ε̄. A trajectory whose energy error H₁ − H₀ exceeds 1000 or is not finite is a
//! divergent transition (Stan's rule); it is counted after warm-up per repetition
//! (`divergent_transitions`). A proposal with a non-finite energy is rejected (the state is
//! selected, never blended, so no NaN leaks into it); a chain whose state itself becomes
//! non-finite makes its repetition diverged (left out of the metrics and counted, like any
//! divergence).
//!
//! Output per repetition: the `draws` of f(x*) of every chain pooled; the prediction is
//! their mean, the CI their empirical quantiles, and the PI of y the quantiles of the mixture
//! of N(f_s, σ_s²) over the draws s (each draw with its own σ draw); `noise_std` records the
//! mean σ draw. Diagnostics (spec §8, [`uqbench_metrics::mcmc`]): per test input the
//! rank-normalised R̂ = max(bulk, tail) and the bulk and tail ESS of f(x*), reported per
//! repetition at the worst input (`rhat_max`, `ess_bulk_min`, `ess_tail_min`), with
//! `rhat_flagged` = 1 where R̂ > `rhat_threshold` (1.01); E-BFMI per chain (`ebfmi_min`, and
//! `ebfmi_flagged`, the chains below 0.3); `divergent_transitions`; and `reference_grade` = 1
//! where the repetition meets posteriordb's standard (R̂ < 1.01, bulk and tail ESS > 400 at
//! every input, no divergent transitions). Also `accept_rate` and `step_size`.
//!
//! The chains' momenta and accept draws come from each replica's own host stream and are
//! uploaded every iteration (this route is not device-resident like the built-in engine),
//! and H and SSE are read back every iteration for the accept and Gibbs steps.

use std::ops::Range;

use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};
use uqbench_anchor::Rng;
use uqbench_metrics::mcmc::{self, EBFMI_THRESHOLD};

use crate::config::MethodConfig;
use crate::engine::{run_chunks, try_download, upload, ChunkOut, ChunkTrainer, Head, Resources};
use crate::layers::{linear_backward, LeakyRelu};
use crate::mlp::{xavier_init, MlpShape};
use uqbench_core::noise::{fixed_noise_sd, Tau};
use uqbench_core::MethodError;
use uqbench_core::{Compute, Family, Likelihood, Method, Prediction, Task};

/// HMC's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HmcSettings {
    /// Chains per repetition (4).
    pub chains: usize,
    /// Warm-up iterations per chain, discarded (1000).
    pub warmup: usize,
    /// Draws per chain after warm-up (1000).
    pub draws: usize,
    /// Leapfrog steps per iteration (20).
    pub leapfrog_steps: usize,
    /// Initial step size ε₀ (0.01), adapted during warm-up.
    pub step_size: f64,
    /// Target acceptance rate of the adaptation (0.8).
    pub target_accept: f64,
    /// Prior sd σ_p of every weight and bias (1).
    pub prior_sd: f64,
    /// Noise sd: sampled (Gibbs, InvGamma(1, 1) prior on σ²) when left out, a number, or
    /// `"known"`.
    pub noise_sd: Option<Tau>,
    /// R̂ above which a repetition is flagged (1.01).
    pub rhat_threshold: f64,
}

impl Default for HmcSettings {
    fn default() -> Self {
        HmcSettings {
            chains: 4,
            warmup: 1000,
            draws: 1000,
            leapfrog_steps: 20,
            step_size: 0.01,
            target_accept: 0.8,
            prior_sd: 1.0,
            noise_sd: None,
            rhat_threshold: 1.01,
        }
    }
}

/// HMC's settings: the network (`hidden`, `negative_slope`, `standardize`) and
/// [`HmcSettings`]; the optimiser keys do not apply.
pub type HmcConfig = MethodConfig<HmcSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct Hmc {
    name: String,
    config: HmcConfig,
}

impl Hmc {
    /// Checks the settings up front.
    pub fn new(name: &str, config: HmcConfig) -> Result<Hmc, MethodError> {
        let c = &config;
        let bad = |key: &str, v: String, valid: &str| {
            Err(MethodError::invalid(format!("{name}.{key}"), v, valid))
        };
        if !(c.step_size.is_finite() && c.step_size > 0.0) {
            return bad("step_size", c.step_size.to_string(), "a positive step size");
        }
        if !(c.prior_sd.is_finite() && c.prior_sd > 0.0) {
            return bad("prior_sd", c.prior_sd.to_string(), "a positive prior sd");
        }
        if let Some(Tau::Value(v)) = c.noise_sd {
            if !(v.is_finite() && v > 0.0) {
                return bad(
                    "noise_sd",
                    v.to_string(),
                    "a positive sd, \"known\", or left out",
                );
            }
        }
        if c.chains < 2 {
            return bad(
                "chains",
                c.chains.to_string(),
                "at least 2: split-R̂ compares chains",
            );
        }
        if c.draws < 4 || c.leapfrog_steps == 0 {
            return bad(
                "draws / leapfrog_steps",
                format!("{} / {}", c.draws, c.leapfrog_steps),
                "at least 4 draws (split-R̂ halves each chain) and 1 leapfrog step",
            );
        }
        if !(c.target_accept > 0.0 && c.target_accept < 1.0) {
            return bad(
                "target_accept",
                c.target_accept.to_string(),
                "a rate strictly between 0 and 1",
            );
        }
        if c.rhat_threshold.is_nan() || c.rhat_threshold <= 1.0 {
            return bad("rhat_threshold", c.rhat_threshold.to_string(), "above 1");
        }
        config.net.shape(1, 1).validate()?;
        Ok(Hmc {
            name: name.to_string(),
            config,
        })
    }
}

impl Method for Hmc {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.chains
    }

    fn cost(&self, n_train: usize, _epochs: usize) -> f64 {
        // Every iteration runs `leapfrog_steps` gradient evaluations per chain.
        let c = &self.config;
        (c.chains * (c.warmup + c.draws) * c.leapfrog_steps * n_train) as f64
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
        let fixed_noise = fixed_noise_sd(&self.name, c.noise_sd, task, "sample")?;
        let replicas = task.replicas(&self.name, c.chains);
        let y: Vec<f32> = replicas
            .targets
            .iter()
            .flat_map(|&k| task.y_train[k].iter().map(|&v| v as f32))
            .collect();
        let (x_train, x_test) = task.inputs_f32(c.net.standardize);
        let trainer = HmcTrainer {
            config: c,
            shape: c.net.shape(task.d, 1),
            x_train,
            x_test,
            y,
            init: &replicas.init,
            stream: &replicas.stream,
            noise: fixed_noise,
            device: resources.device.clone(),
            records: std::sync::Mutex::new(vec![ChainRecord::default(); replicas.init.len()]),
            bernoulli,
        };
        let out = run_chunks(&trainer, resources, progress)?;
        let (m, n, t, chains) = (task.n_test(), task.n_train(), c.draws, c.chains);
        let records = trainer
            .records
            .into_inner()
            .expect("no panics while holding it");
        Ok((0..task.repetitions.len())
            .map(|k| {
                let reps: Range<usize> = k * chains..(k + 1) * chains;
                let diverged = reps.clone().any(|r| out.diverged[r]);
                // samples[chain][draw][point]
                let draw = |r: usize, s: usize| -> &[f32] {
                    let start = (r * t + s) * m;
                    &out.test_out[start..start + m]
                };
                let rows: Vec<Vec<f64>> = reps
                    .clone()
                    .flat_map(|r| (0..t).map(move |s| (r, s)))
                    .map(|(r, s)| draw(r, s).iter().map(|&v| f64::from(v)).collect())
                    .collect();
                let total = rows.len() as f64;
                let mean: Vec<f64> = (0..m)
                    .map(|i| rows.iter().map(|r| r[i]).sum::<f64>() / total)
                    .collect();
                let std: Vec<f64> = (0..m)
                    .map(|i| {
                        (rows.iter().map(|r| (r[i] - mean[i]).powi(2)).sum::<f64>() / (total - 1.0))
                            .sqrt()
                    })
                    .collect();
                let train_mean: Vec<f64> = (0..n)
                    .map(|i| {
                        reps.clone()
                            .map(|r| f64::from(out.train_pred[r * n + i]))
                            .sum::<f64>()
                            / chains as f64
                    })
                    .collect();
                let mut scalars = std::collections::BTreeMap::new();
                let chain_records: Vec<&ChainRecord> = reps.clone().map(|r| &records[r]).collect();
                let divergent: f64 = chain_records.iter().map(|c| c.divergent as f64).sum();
                if !diverged {
                    let worst = worst_diagnostics(&rows, m, t);
                    scalars.insert("rhat_max".into(), worst.rhat);
                    scalars.insert("ess_bulk_min".into(), worst.ess_bulk);
                    scalars.insert("ess_tail_min".into(), worst.ess_tail);
                    scalars.insert(
                        "rhat_flagged".into(),
                        f64::from(u8::from(worst.rhat > c.rhat_threshold)),
                    );
                    let ebfmi: Vec<f64> = chain_records
                        .iter()
                        .map(|c| mcmc::ebfmi(&c.energy).unwrap_or(f64::NAN))
                        .collect();
                    scalars.insert(
                        "ebfmi_min".into(),
                        ebfmi.iter().copied().fold(f64::INFINITY, f64::min),
                    );
                    scalars.insert(
                        "ebfmi_flagged".into(),
                        ebfmi
                            .iter()
                            .filter(|&&b| b.is_nan() || b < EBFMI_THRESHOLD)
                            .count() as f64,
                    );
                    scalars.insert(
                        "reference_grade".into(),
                        f64::from(u8::from(worst.reference_grade() && divergent == 0.0)),
                    );
                }
                // Every draw's σ, in the order of the rows: chain-major, then draw.
                let sigma_draws: Vec<f64> = chain_records
                    .iter()
                    .flat_map(|c| c.sigma.iter().copied())
                    .collect();
                let noise = sigma_draws.iter().sum::<f64>() / sigma_draws.len() as f64;
                scalars.insert(
                    "final_objective".into(),
                    reps.clone().map(|r| out.final_objective[r]).sum::<f64>() / chains as f64,
                );
                if fixed_noise.is_none() {
                    scalars.insert("sampled_noise_sd".into(), noise);
                }
                let noise_std = (!bernoulli).then(|| vec![noise; m]);
                let per_chain_mean = |f: &dyn Fn(&ChainRecord) -> f64| {
                    chain_records.iter().map(|c| f(c)).sum::<f64>() / chains as f64
                };
                scalars.insert("divergent_transitions".into(), divergent);
                scalars.insert("accept_rate".into(), per_chain_mean(&|c| c.accept_rate));
                scalars.insert("step_size".into(), per_chain_mean(&|c| c.step_size));
                Prediction {
                    mean,
                    std,
                    noise_std,
                    noise_samples: (!bernoulli).then_some(sigma_draws),
                    predictive_std: None,
                    noise_known: false,
                    family: Family::Empirical,
                    samples: Some(rows),
                    train_mean: Some(train_mean),
                    scalars,
                    diverged,
                }
            })
            .collect())
    }
}

/// The repetition's diagnostics at its worst test input, each taken separately: the largest
/// R̂ and the smallest bulk and tail ESS over the inputs (`rows`: chain-major draws of f at the
/// m inputs, t per chain). An input whose draws are not finite counts as not mixed.
fn worst_diagnostics(rows: &[Vec<f64>], m: usize, t: usize) -> mcmc::Diagnostics {
    let mut worst = mcmc::Diagnostics {
        rhat: 0.0,
        rhat_bulk: 0.0,
        rhat_tail: 0.0,
        ess_bulk: f64::INFINITY,
        ess_tail: f64::INFINITY,
        mcse_mean: 0.0,
    };
    for i in 0..m {
        // Draws are chain-major: chain c's t draws are rows c·t .. (c + 1)·t.
        let column: Vec<f64> = rows.iter().map(|r| r[i]).collect();
        let per_chain: Vec<Vec<f64>> = column.chunks(t).map(<[f64]>::to_vec).collect();
        match mcmc::diagnose(&per_chain) {
            Ok(d) => {
                worst.rhat = worst.rhat.max(d.rhat);
                worst.rhat_bulk = worst.rhat_bulk.max(d.rhat_bulk);
                worst.rhat_tail = worst.rhat_tail.max(d.rhat_tail);
                worst.ess_bulk = worst.ess_bulk.min(d.ess_bulk);
                worst.ess_tail = worst.ess_tail.min(d.ess_tail);
                worst.mcse_mean = worst.mcse_mean.max(d.mcse_mean);
            }
            Err(_) => {
                worst.rhat = f64::INFINITY;
                worst.ess_bulk = 0.0;
                worst.ess_tail = 0.0;
            }
        }
    }
    worst
}

/// What one chain records besides its draws of f: divergent transitions after warm-up, its
/// acceptance rate after warm-up, its adapted step size, its energy H₀ at the start of every
/// sampling iteration (after the momenta are drawn; for the E-BFMI), and its σ draw at every
/// sampling iteration (the noise of its draw of y).
#[derive(Debug, Clone, Default)]
struct ChainRecord {
    divergent: u64,
    accept_rate: f64,
    step_size: f64,
    energy: Vec<f64>,
    sigma: Vec<f64>,
}

/// The BNN's parameters for a chunk: per layer W `[R, in, out]` and b `[R, 1, out]`.
#[derive(Clone)]
struct Params {
    w: Vec<Tensor<3>>,
    b: Vec<Tensor<3>>,
}

impl Params {
    fn map2(&self, other: &Params, f: impl Fn(Tensor<3>, Tensor<3>) -> Tensor<3>) -> Params {
        Params {
            w: self
                .w
                .iter()
                .zip(&other.w)
                .map(|(a, b)| f(a.clone(), b.clone()))
                .collect(),
            b: self
                .b
                .iter()
                .zip(&other.b)
                .map(|(a, b)| f(a.clone(), b.clone()))
                .collect(),
        }
    }

    fn map(&self, mut f: impl FnMut(Tensor<3>) -> Tensor<3>) -> Params {
        Params {
            w: self.w.iter().map(|a| f(a.clone())).collect(),
            b: self.b.iter().map(|a| f(a.clone())).collect(),
        }
    }

    /// Σ of squares per replica `[R, 1, 1]`.
    fn norm2(&self) -> Tensor<3> {
        self.w
            .iter()
            .chain(&self.b)
            .map(|t| t.clone().square().sum_dim(2).sum_dim(1))
            .reduce(|a, b| a + b)
            .expect("at least one layer")
    }
}

struct HmcTrainer<'a> {
    config: &'a HmcConfig,
    shape: MlpShape,
    x_train: Vec<f32>,
    x_test: Vec<f32>,
    /// Targets `[R, N]`, replica-major.
    y: Vec<f32>,
    init: &'a [u64],
    stream: &'a [u64],
    noise: Option<f64>,
    device: Device,
    /// Per replica, written by the chunk that ran it.
    records: std::sync::Mutex<Vec<ChainRecord>>,
    /// Labels: the Bernoulli likelihood of logits instead of the Gaussian one.
    bernoulli: bool,
}

impl HmcTrainer<'_> {
    fn forward(&self, p: &Params, x: &Tensor<3>) -> (Tensor<3>, Vec<Tensor<3>>) {
        let act = LeakyRelu {
            slope: self.shape.negative_slope,
        };
        let last = p.w.len() - 1;
        let mut inputs = Vec::with_capacity(p.w.len());
        let mut h = x.clone();
        for l in 0..p.w.len() {
            inputs.push(h.clone());
            let z = h.matmul(p.w[l].clone()) + p.b[l].clone();
            h = if l < last { act.forward(z) } else { z };
        }
        (h, inputs)
    }

    /// U per replica `[R, 1, 1]`, SSE per replica, and ∇U, at `p` with 1/σ² `inv_s2`.
    fn potential(
        &self,
        p: &Params,
        x: &Tensor<3>,
        y: &Tensor<3>,
        inv_s2: &Tensor<3>,
    ) -> (Tensor<3>, Tensor<3>, Params) {
        let act = LeakyRelu {
            slope: self.shape.negative_slope,
        };
        let inv_p2 = 1.0 / (self.config.prior_sd * self.config.prior_sd);
        let (f, inputs) = self.forward(p, x);
        let n = f.dims()[1] as f64;
        let (sse, u, mut delta) = if self.bernoulli {
            // Labels: U = Σ_n (softplus(f_n) − y_n·f_n) + ‖θ‖²/(2σ_p²), the negative
            // log-likelihood of the logits, and ∂U/∂f = σ(f) − y; the head's mean form times n.
            // (The "SSE" slot carries the NLL; no Gibbs step reads it.)
            let nll = Head::BernoulliLogit.value(f.clone(), y).mul_scalar(n);
            let delta = Head::BernoulliLogit.delta(f, y).mul_scalar(n);
            let u = nll.clone() + p.norm2().mul_scalar(0.5 * inv_p2);
            (nll, u, delta)
        } else {
            let resid = f - y.clone();
            let sse = resid.clone().square().sum_dim(1);
            let u = sse.clone().mul(inv_s2.clone()).mul_scalar(0.5)
                + p.norm2().mul_scalar(0.5 * inv_p2);
            // δ at the output: ∂U/∂f = (f − y)/σ².
            (sse, u, resid.mul(inv_s2.clone()))
        };
        let layers = p.w.len();
        let mut gw = vec![None; layers];
        let mut gb = vec![None; layers];
        for l in (0..layers).rev() {
            let g = linear_backward(&inputs[l], delta.clone(), &p.w[l], l > 0);
            gw[l] = Some(g.weight + p.w[l].clone().mul_scalar(inv_p2));
            gb[l] = Some(g.bias + p.b[l].clone().mul_scalar(inv_p2));
            if l > 0 {
                delta = act.backward(&inputs[l], g.input.expect("asked for"));
            }
        }
        let grad = Params {
            w: gw.into_iter().map(|g| g.expect("every layer")).collect(),
            b: gb.into_iter().map(|g| g.expect("every layer")).collect(),
        };
        (u, sse, grad)
    }
}

impl ChunkTrainer for HmcTrainer<'_> {
    fn replicas(&self) -> usize {
        self.init.len()
    }

    fn points(&self) -> (usize, usize) {
        let d = self.shape.d_in;
        (self.x_train.len() / d, self.x_test.len() / d)
    }

    fn outputs(&self) -> (usize, usize) {
        (1, self.config.draws)
    }

    fn has_rates(&self) -> bool {
        false
    }

    fn bytes_per_replica(&self) -> usize {
        // Position, momentum, gradient and proposal (4 parameter copies), every layer's
        // activations, and the draws at the test inputs; twice for safety.
        let (n, m) = self.points();
        let widths: usize = self.shape.hidden.iter().sum::<usize>() + self.shape.d_in + 1;
        2 * 4 * (8 * self.shape.params_per_replica() + 2 * n.max(m) * widths + m)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        let c = self.config;
        let rc = range.len();
        let (n, m) = self.points();
        let d = self.shape.d_in;
        let dev = &self.device;
        let layers = self.shape.layers();
        let mut streams: Vec<Rng> = self.stream[range.clone()]
            .iter()
            .map(|&s| Rng::new(s))
            .collect();
        let host = xavier_init(&self.shape, &self.init[range.clone()]);
        let mut theta = Params {
            w: host
                .layers
                .iter()
                .zip(&layers)
                .map(|((w, _), &(i, o))| upload(w.clone(), [rc, i, o], dev))
                .collect(),
            b: host
                .layers
                .iter()
                .zip(&layers)
                .map(|((_, b), &(_, o))| upload(b.clone(), [rc, 1, o], dev))
                .collect(),
        };
        let x = upload(self.x_train.clone(), [1, n, d], dev);
        let x_test = upload(self.x_test.clone(), [1, m, d], dev);
        let y = upload(
            self.y[range.start * n..range.end * n].to_vec(),
            [rc, n, 1],
            dev,
        );
        // σ² per replica: fixed, or starting at the targets' variance and then Gibbs-sampled.
        let mut s2: Vec<f64> = match self.noise {
            Some(s) => vec![s * s; rc],
            None => (0..rc)
                .map(|r| {
                    let yr = &self.y[(range.start + r) * n..(range.start + r + 1) * n];
                    let mean = yr.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
                    (yr.iter()
                        .map(|&v| (f64::from(v) - mean).powi(2))
                        .sum::<f64>()
                        / n as f64)
                        .max(1e-6)
                })
                .collect(),
        };
        let inv = |s2: &[f64]| {
            upload(
                s2.iter().map(|v| (1.0 / v) as f32).collect(),
                [rc, 1, 1],
                dev,
            )
        };
        let mut inv_s2 = inv(&s2);
        let (mut u, mut sse, mut grad) = self.potential(&theta, &x, &y, &inv_s2);

        // Dual averaging per replica.
        let (gamma, t0, kappa) = (0.05, 10.0, 0.75);
        let mu = (10.0 * c.step_size).ln();
        let mut eps = vec![c.step_size; rc];
        let mut h_bar = vec![0.0; rc];
        let mut log_eps_bar = vec![0.0; rc];
        let mut accepted = vec![0u64; rc];
        let mut divergent = vec![0u64; rc];
        let mut energy = vec![Vec::with_capacity(c.draws); rc];
        let mut sigma_draws = vec![Vec::with_capacity(c.draws); rc];
        let mut pred = vec![0.0f32; rc * c.draws * m];
        let mut train_sum: Option<Tensor<3>> = None;
        let (a0, b0) = (1.0, 1.0);

        for it in 0..c.warmup + c.draws {
            let sampling = it >= c.warmup;
            // Each iteration's step is ε·U(0.5, 1.5) from the replica's stream: a fixed ε·L can
            // sit near a multiple of a posterior direction's period, where HMC barely moves
            // (Neal 2011, §5.4.2.2); jittering it breaks that.
            let step = upload(
                eps.iter()
                    .zip(streams.iter_mut())
                    .map(|(&e, g)| (e * (0.5 + g.uniform())) as f32)
                    .collect(),
                [rc, 1, 1],
                dev,
            );
            // Momenta from each replica's stream.
            let momentum = theta.map(|t| {
                let [_, a, b] = t.dims();
                let mut v = Vec::with_capacity(rc * a * b);
                for g in streams.iter_mut() {
                    for _ in 0..a * b {
                        v.push(g.normal() as f32);
                    }
                }
                upload(v, [rc, a, b], dev)
            });
            let k0 = momentum.norm2().mul_scalar(0.5);
            let half = step.clone().mul_scalar(0.5);
            let mut q = theta.clone();
            let mut p = momentum.map2(&grad, |p, g| p - g.mul(half.clone()));
            let (mut u1, mut sse1, mut g1) = (u.clone(), sse.clone(), grad.clone());
            for l in 0..c.leapfrog_steps {
                q = q.map2(&p, |q, p| q + p.mul(step.clone()));
                (u1, sse1, g1) = self.potential(&q, &x, &y, &inv_s2);
                let scale = if l + 1 < c.leapfrog_steps {
                    step.clone()
                } else {
                    half.clone()
                };
                p = p.map2(&g1, |p, g| p - g.mul(scale.clone()));
            }
            let k1 = p.norm2().mul_scalar(0.5);
            // H₀ and H₀ − H₁ per replica, read back together.
            let h0 = u.clone() + k0;
            let both = download(Tensor::cat(vec![h0.clone(), h0 - (u1.clone() + k1)], 2))?;
            let mut accept = vec![0.0f32; rc];
            let mut alphas = vec![0.0; rc];
            for r in 0..rc {
                let dh = f64::from(both[2 * r + 1]);
                let alpha = if dh.is_finite() {
                    dh.min(0.0).exp()
                } else {
                    0.0
                };
                if sampling {
                    energy[r].push(f64::from(both[2 * r]));
                    // The energy error H₁ − H₀ = −dh.
                    if mcmc::is_divergent(-dh) {
                        divergent[r] += 1;
                    }
                }
                alphas[r] = alpha;
                if streams[r].uniform() < alpha {
                    accept[r] = 1.0;
                    if sampling {
                        accepted[r] += 1;
                    }
                }
            }
            // Select, not blend: a rejected proposal may hold ±∞ or NaN, and NaN·0 is NaN.
            let mask = upload(accept, [rc, 1, 1], dev).greater_elem(0.5);
            let blend = |new: Tensor<3>, old: Tensor<3>| {
                let dims = old.dims();
                old.mask_where(mask.clone().expand(dims), new)
            };
            theta = q.map2(&theta, blend);
            grad = g1.map2(&grad, blend);
            u = blend(u1, u);
            sse = blend(sse1, sse);
            if !sampling {
                let m_it = (it + 1) as f64;
                for r in 0..rc {
                    let w = 1.0 / (m_it + t0);
                    h_bar[r] = (1.0 - w) * h_bar[r] + w * (c.target_accept - alphas[r]);
                    let log_eps = mu - m_it.sqrt() / gamma * h_bar[r];
                    let eta = m_it.powf(-kappa);
                    log_eps_bar[r] = eta * log_eps + (1.0 - eta) * log_eps_bar[r];
                    eps[r] = log_eps.exp();
                }
                if it + 1 == c.warmup {
                    for r in 0..rc {
                        eps[r] = log_eps_bar[r].exp();
                    }
                }
            }
            // Gibbs step for σ².
            if self.noise.is_none() {
                let sse_host = download(sse.clone())?;
                for r in 0..rc {
                    let shape = a0 + n as f64 / 2.0;
                    let rate = b0 + f64::from(sse_host[r]) / 2.0;
                    // InvGamma(shape, rate) = rate / Gamma(shape, 1).
                    s2[r] = rate / gamma_draw(&mut streams[r], shape);
                }
                inv_s2 = inv(&s2);
                (u, sse, grad) = self.potential(&theta, &x, &y, &inv_s2);
            }
            if sampling {
                let s = it - c.warmup;
                let (f, _) = self.forward(&theta, &x_test);
                let values = download(f)?;
                for r in 0..rc {
                    let dst = (r * c.draws + s) * m;
                    pred[dst..dst + m].copy_from_slice(&values[r * m..(r + 1) * m]);
                    sigma_draws[r].push(s2[r].sqrt());
                }
                let (ft, _) = self.forward(&theta, &x);
                train_sum = Some(match train_sum {
                    Some(t) => t + ft,
                    None => ft,
                });
            }
        }
        let train = download(
            train_sum
                .expect("at least one draw")
                .div_scalar(c.draws as f64),
        )?;
        let u_host = download(u)?;
        {
            let mut records = self.records.lock().expect("no panics while holding it");
            for (r, (energy, sigma)) in energy.into_iter().zip(sigma_draws).enumerate() {
                records[range.start + r] = ChainRecord {
                    divergent: divergent[r],
                    accept_rate: accepted[r] as f64 / c.draws as f64,
                    step_size: eps[r],
                    energy,
                    sigma,
                };
            }
        }
        Ok(ChunkOut {
            pred,
            train_pred: train,
            // The final potential per data point (a chain whose state became non-finite is
            // diverged through it and its draws).
            objective: u_host.iter().map(|&v| f64::from(v) / n as f64).collect(),
            // σ travels in the chain records.
            rates: Vec::new(),
            steps: ((c.warmup + c.draws) * c.leapfrog_steps) as u64,
            // Not counted on this route (momenta are uploaded every iteration).
            uploads: 0,
            reads: 0,
        })
    }
}

/// A Gamma(shape, 1) draw (Marsaglia & Tsang 2000; shape ≥ 1 here).
fn gamma_draw(rng: &mut Rng, shape: f64) -> f64 {
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let z = rng.normal();
        let v = (1.0 + c * z).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = rng.uniform_open();
        if u.ln() < 0.5 * z * z + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

fn download(t: Tensor<3>) -> Result<Vec<f32>, MethodError> {
    try_download(t, "HMC state")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gamma_sampler_has_its_mean() {
        let mut rng = Rng::new(5);
        // The Gamma sampler has mean shape (sd √(shape/n)): 20 000 draws of Gamma(3).
        let g: f64 = (0..20_000).map(|_| gamma_draw(&mut rng, 3.0)).sum::<f64>() / 20_000.0;
        assert!((g - 3.0).abs() < 5.0 * (3.0f64 / 20_000.0).sqrt(), "{g}");
    }
}
