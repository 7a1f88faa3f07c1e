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
//! averaged ε̄. A proposal whose energy error is not finite is a divergent transition: it is
//! rejected (the state is selected, never blended, so no NaN leaks into it) and counted per
//! repetition (`divergent_transitions`); a chain whose state itself becomes non-finite makes
//! its repetition diverged (left out of the metrics and counted, like any divergence).
//!
//! Output per repetition: the `draws` of f(x*) of every chain pooled; the prediction is
//! their mean, the intervals their empirical quantiles, σ the mean of the σ draws. Per
//! repetition, the split-R̂ and bulk ESS of f(x*) (rank-normalised, Vehtari et al. 2021)
//! are reported at their worst test input (`rhat_max`, `ess_bulk_min`), with
//! `rhat_flagged` = 1 where R̂ > `rhat_threshold` (1.01), plus `accept_rate`, `step_size`
//! and `divergent_transitions`.
//!
//! The chains' momenta and accept draws come from each replica's own host stream and are
//! uploaded every iteration (this route is not device-resident like the built-in engine),
//! and H and SSE are read back every iteration for the accept and Gibbs steps.

use std::ops::Range;

use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};
use uqbench_anchor::Rng;

use crate::config::MethodConfig;
use crate::dropout_method::{fixed_noise_sd, Tau};
use crate::engine::{run_chunks, try_download, upload, ChunkOut, ChunkTrainer, Head, Resources};
use crate::error::ModelError;
use crate::layers::{linear_backward, LeakyRelu};
use crate::mlp::{xavier_init, MlpShape};
use crate::task::{Family, Likelihood, Method, RepOutput, Task};

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
    pub fn new(name: &str, config: HmcConfig) -> Result<Hmc, ModelError> {
        let c = &config;
        let bad = |key: &str, v: String, valid: &str| {
            Err(ModelError::invalid(format!("{name}.{key}"), v, valid))
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

    fn run(
        &self,
        task: &Task<'_>,
        resources: &Resources,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<RepOutput>, ModelError> {
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
            diagnostics: std::sync::Mutex::new(vec![[0.0; 3]; replicas.init.len()]),
            bernoulli,
        };
        let out = run_chunks(&trainer, resources, progress)?;
        let (m, n, t, chains) = (task.n_test(), task.n_train(), c.draws, c.chains);
        let sigma = out.rates.clone().unwrap_or_default();
        let diagnostics = trainer
            .diagnostics
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
                let (mut rhat_max, mut ess_min) = (0.0_f64, f64::INFINITY);
                for i in 0..m {
                    let per_chain: Vec<Vec<f64>> = reps
                        .clone()
                        .map(|r| (0..t).map(|s| f64::from(draw(r, s)[i])).collect())
                        .collect();
                    let (rhat, ess) = rank_rhat_ess(&per_chain);
                    rhat_max = rhat_max.max(rhat);
                    ess_min = ess_min.min(ess);
                }
                let noise = reps.clone().map(|r| sigma[r]).sum::<f64>() / chains as f64;
                let mut scalars = std::collections::BTreeMap::new();
                scalars.insert("rhat_max".into(), rhat_max);
                scalars.insert("ess_bulk_min".into(), ess_min);
                scalars.insert(
                    "rhat_flagged".into(),
                    if rhat_max > c.rhat_threshold {
                        1.0
                    } else {
                        0.0
                    },
                );
                scalars.insert(
                    "final_objective".into(),
                    reps.clone().map(|r| out.final_objective[r]).sum::<f64>() / chains as f64,
                );
                if fixed_noise.is_none() {
                    scalars.insert("sampled_noise_sd".into(), noise);
                }
                let noise_std = (!bernoulli).then(|| vec![noise; m]);
                let per = |j: usize| reps.clone().map(|r| diagnostics[r][j]).sum::<f64>();
                scalars.insert("divergent_transitions".into(), per(0));
                scalars.insert("accept_rate".into(), per(1) / chains as f64);
                scalars.insert("step_size".into(), per(2) / chains as f64);
                RepOutput {
                    mean,
                    std,
                    noise_std,
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

/// Split-R̂ and bulk ESS of one scalar from several chains of equal length, on
/// rank-normalised draws (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021): pool the
/// draws, replace each by Φ⁻¹((rank − 3/8)/(S + 1/4)), split every chain in halves, then
/// R̂ = sqrt(((n−1)/n·W + B/n)/W) and ESS = S/τ with τ from the chains' autocorrelations
/// summed by Geyer's initial monotone positive-pair sequence. Constant draws give (1, S).
pub fn rank_rhat_ess(chains: &[Vec<f64>]) -> (f64, f64) {
    let half = chains[0].len() / 2;
    let split: Vec<&[f64]> = chains
        .iter()
        .flat_map(|c| [&c[..half], &c[half..2 * half]])
        .collect();
    let s_total: usize = split.iter().map(|c| c.len()).sum();
    // Ranks over the pooled draws (average ranks for ties).
    let mut order: Vec<(f64, usize)> = split
        .iter()
        .flat_map(|c| c.iter().copied())
        .enumerate()
        .map(|(i, v)| (v, i))
        .collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut rank = vec![0.0; s_total];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && order[j + 1].0 == order[i].0 {
            j += 1;
        }
        let r = (i + j) as f64 / 2.0 + 1.0;
        for o in &order[i..=j] {
            rank[o.1] = r;
        }
        i = j + 1;
    }
    if order.first().map(|o| o.0) == order.last().map(|o| o.0) {
        return (1.0, s_total as f64);
    }
    let normal = Normal::standard();
    let z: Vec<f64> = rank
        .iter()
        .map(|r| normal.inverse_cdf((r - 0.375) / (s_total as f64 + 0.25)))
        .collect();
    let n = half as f64;
    let c = split.len();
    let parts: Vec<&[f64]> = z.chunks(half).collect();
    let means: Vec<f64> = parts.iter().map(|p| p.iter().sum::<f64>() / n).collect();
    let vars: Vec<f64> = parts
        .iter()
        .zip(&means)
        .map(|(p, m)| p.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0))
        .collect();
    let grand = means.iter().sum::<f64>() / c as f64;
    let b = n / (c as f64 - 1.0) * means.iter().map(|m| (m - grand).powi(2)).sum::<f64>();
    let w = vars.iter().sum::<f64>() / c as f64;
    let var_plus = (n - 1.0) / n * w + b / n;
    let rhat = (var_plus / w).sqrt();
    // Autocorrelation at lag t, combined over chains (Stan's formula).
    let rho = |t: usize| -> f64 {
        let acov: f64 = parts
            .iter()
            .zip(&means)
            .map(|(p, m)| {
                (0..half - t)
                    .map(|k| (p[k] - m) * (p[k + t] - m))
                    .sum::<f64>()
                    / n
            })
            .sum::<f64>()
            / c as f64;
        1.0 - (w - acov) / var_plus
    };
    let mut tau = -1.0;
    let mut prev = f64::INFINITY;
    let mut t = 0;
    while t + 1 < half {
        let pair = rho(t) + rho(t + 1);
        if pair <= 0.0 {
            break;
        }
        let pair = pair.min(prev);
        tau += 2.0 * pair;
        prev = pair;
        t += 2;
    }
    let ess = s_total as f64 / tau.max(1.0 / (s_total as f64).log10().max(1.0));
    (rhat, ess.min(s_total as f64 * (s_total as f64).log10()))
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
    /// Per replica, written by the chunk that ran it: divergent transitions after warm-up,
    /// acceptance rate after warm-up, and the adapted step size.
    diagnostics: std::sync::Mutex<Vec<[f64; 3]>>,
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
        // The "rate" slot carries each chain's mean σ draw.
        true
    }

    fn bytes_per_replica(&self) -> usize {
        // Position, momentum, gradient and proposal (4 parameter copies), every layer's
        // activations, and the draws at the test inputs; twice for safety.
        let (n, m) = self.points();
        let widths: usize = self.shape.hidden.iter().sum::<usize>() + self.shape.d_in + 1;
        2 * 4 * (8 * self.shape.params_per_replica() + 2 * n.max(m) * widths + m)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, ModelError> {
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
        let mut sigma_sum = vec![0.0; rc];
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
            // H₀ − H₁ per replica, read back with the proposal's SSE.
            let diff = download((u.clone() + k0) - (u1.clone() + k1))?;
            let mut accept = vec![0.0f32; rc];
            let mut alphas = vec![0.0; rc];
            for r in 0..rc {
                let dh = f64::from(diff[r]);
                let alpha = if dh.is_finite() {
                    dh.min(0.0).exp()
                } else {
                    0.0
                };
                if !dh.is_finite() && sampling {
                    divergent[r] += 1;
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
                    sigma_sum[r] += s2[r].sqrt();
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
            let mut diag = self.diagnostics.lock().expect("no panics while holding it");
            for r in 0..rc {
                diag[range.start + r] = [
                    divergent[r] as f64,
                    accepted[r] as f64 / c.draws as f64,
                    eps[r],
                ];
            }
        }
        Ok(ChunkOut {
            pred,
            train_pred: train,
            // The final potential per data point (a chain whose state became non-finite is
            // diverged through it and its draws).
            objective: u_host.iter().map(|&v| f64::from(v) / n as f64).collect(),
            rates: sigma_sum.iter().map(|s| s / c.draws as f64).collect(),
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

fn download(t: Tensor<3>) -> Result<Vec<f32>, ModelError> {
    try_download(t, "HMC state")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rhat_and_ess_tell_mixed_from_stuck_chains() {
        // Four chains of 1000 independent normals: R̂ within 1.01 of 1 and ESS near 4000
        // (the rank-normalised ESS of iid draws has sd ≈ a few %; checked at ±25%).
        let mut rng = Rng::new(5);
        let iid: Vec<Vec<f64>> = (0..4)
            .map(|_| (0..1000).map(|_| rng.normal()).collect())
            .collect();
        let (rhat, ess) = rank_rhat_ess(&iid);
        assert!((rhat - 1.0).abs() < 0.01, "R̂ {rhat}");
        assert!((ess / 4000.0 - 1.0).abs() < 0.25, "ESS {ess}");
        // One chain shifted by 3 sd: R̂ far above 1.01.
        let mut stuck = iid.clone();
        stuck[0].iter_mut().for_each(|v| *v += 3.0);
        assert!(rank_rhat_ess(&stuck).0 > 1.1);
        // A strongly autocorrelated AR(1) chain (φ = 0.9): ESS ≈ S(1 − φ)/(1 + φ) ≈ 211.
        let ar: Vec<Vec<f64>> = (0..4)
            .map(|_| {
                let mut v = 0.0;
                (0..1000)
                    .map(|_| {
                        v = 0.9 * v + rng.normal() * (1.0 - 0.81f64).sqrt();
                        v
                    })
                    .collect()
            })
            .collect();
        let (_, ess) = rank_rhat_ess(&ar);
        assert!(ess > 100.0 && ess < 400.0, "ESS {ess}");
        // The Gamma sampler has mean shape (sd √(shape/n)): 20 000 draws of Gamma(3).
        let g: f64 = (0..20_000).map(|_| gamma_draw(&mut rng, 3.0)).sum::<f64>() / 20_000.0;
        assert!((g - 3.0).abs() < 5.0 * (3.0f64 / 20_000.0).sqrt(), "{g}");
    }
}
