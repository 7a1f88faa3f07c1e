//! The dropout family of [000] as methods: BD (MC dropout), CD (concrete dropout) and VD
//! (variational dropout), one replica per repetition, all repetitions of a task trained as
//! one batched job, with T stochastic passes at prediction.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dropout::Dropout;
use crate::engine::{self, Batching, Job, Resources, TrainSettings};
use crate::error::ModelError;
use crate::mlp::MlpShape;
use crate::task::{Method, RepOutput, Task};

/// Which dropout method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DropoutKind {
    /// Bernoulli (MC) dropout with a fixed rate.
    Bernoulli,
    /// Concrete dropout with a learned rate.
    Concrete,
    /// Variational (Gaussian) dropout with a learned α.
    Variational,
}

/// Settings of the dropout methods. Defaults: [000]'s network and optimiser; the dropout
/// specifics as documented per field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DropoutConfig {
    /// Hidden widths (128, 64, 32); the dropout acts on the last hidden layer's output.
    pub hidden: Vec<usize>,
    /// Leaky-ReLU slope (0.01).
    pub negative_slope: f64,
    /// Adam learning rate (1e-2).
    pub lr: f64,
    /// Adam β₁ (0.9).
    pub beta1: f64,
    /// Adam β₂ (0.999).
    pub beta2: f64,
    /// Adam ε (1e-8).
    pub eps: f64,
    /// L2 factor on the weights; 1/N when not set (spec §3).
    pub weight_decay: Option<f64>,
    /// Mini-batch size; full batch when not set (spec §3).
    pub batch_size: Option<usize>,
    /// Stochastic passes T at prediction (200). The Monte-Carlo error of the reported mean
    /// is std/√T (7% of the std), of the reported std about std/√(2(T − 1)) (5%).
    pub passes: usize,
    /// BD: the drop rate p (0.1, a common choice for regression; [000] does not give its rate).
    pub p: f64,
    /// CD: initial rate (0.1, as the reference implementation's init range [0.1, 0.1]).
    pub init_p: f64,
    /// CD: temperature of the relaxed mask (0.1).
    pub temperature: f64,
    /// CD: prior length scale l; weight_reg = l²/N (1e-4, as the reference implementation).
    pub length_scale: f64,
    /// CD: dropout_reg = this/N (2, as the reference implementation).
    pub dropout_reg_factor: f64,
    /// VD: initial α (1/9, the α of Bernoulli dropout with p = 0.1: α = p/(1 − p)).
    pub init_alpha: f64,
    /// VD: the KL term is weighted by this/N (1: the KL of the ELBO per data point).
    pub kl_factor: f64,
    /// A second output for the log noise variance, trained with the Gaussian NLL ([004]'s
    /// heteroscedastic dropout): then the noise sd is reported too, for prediction intervals.
    pub heteroscedastic: bool,
}

impl Default for DropoutConfig {
    fn default() -> Self {
        DropoutConfig {
            hidden: vec![128, 64, 32],
            negative_slope: 0.01,
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: None,
            batch_size: None,
            passes: 200,
            p: 0.1,
            init_p: 0.1,
            temperature: 0.1,
            length_scale: 1e-4,
            dropout_reg_factor: 2.0,
            init_alpha: 1.0 / 9.0,
            kl_factor: 1.0,
            heteroscedastic: false,
        }
    }
}

/// A dropout method.
#[derive(Debug, Clone)]
pub struct DropoutMethod {
    name: String,
    kind: DropoutKind,
    config: DropoutConfig,
}

impl DropoutMethod {
    /// A dropout method named `name` (`BD`, `CD`, `VD`), with its settings checked up front.
    pub fn new(
        name: &str,
        kind: DropoutKind,
        config: DropoutConfig,
    ) -> Result<DropoutMethod, ModelError> {
        if config.passes == 0 {
            return Err(ModelError::invalid(
                format!("{name}.passes"),
                0,
                "at least 1 prediction pass (T ≥ 1; 200 by default)",
            ));
        }
        let method = DropoutMethod {
            name: name.to_string(),
            kind,
            config,
        };
        method.dropout(100).validate().map_err(|e| match e {
            ModelError::Invalid { what, value, valid } => ModelError::Invalid {
                what: format!("{name}: {what}"),
                value,
                valid,
            },
            other => other,
        })?;
        MlpShape {
            d_in: 1,
            hidden: method.config.hidden.clone(),
            d_out: 1,
            negative_slope: method.config.negative_slope,
        }
        .validate()?;
        if method.config.hidden.is_empty() {
            return Err(ModelError::invalid(
                format!("{name}.hidden"),
                "[]",
                "at least one hidden layer to apply dropout to",
            ));
        }
        Ok(method)
    }

    /// The settings.
    pub fn config(&self) -> &DropoutConfig {
        &self.config
    }

    /// The dropout layer for N training points.
    pub fn dropout(&self, n: usize) -> Dropout {
        let c = &self.config;
        let n = n as f64;
        match self.kind {
            DropoutKind::Bernoulli => Dropout::Bernoulli { p: c.p },
            DropoutKind::Concrete => Dropout::Concrete {
                init_p: c.init_p,
                temperature: c.temperature,
                weight_reg: c.length_scale * c.length_scale / n,
                dropout_reg: c.dropout_reg_factor / n,
            },
            DropoutKind::Variational => Dropout::Variational {
                init_alpha: c.init_alpha,
                kl_weight: c.kl_factor / n,
            },
        }
    }

    /// The optimiser settings for a task.
    pub fn train_settings(&self, task: &Task<'_>) -> TrainSettings {
        let c = &self.config;
        let n = task.n_train();
        TrainSettings {
            epochs: task.epochs,
            lr: c.lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: c.weight_decay.unwrap_or(1.0 / n as f64),
            batching: match c.batch_size {
                Some(size) if size < n => Batching::Shuffled { size },
                _ => Batching::Full,
            },
            adversarial: None,
            dropout: Some(self.dropout(n)),
            heteroscedastic: c.heteroscedastic,
            mc_passes: c.passes,
        }
    }
}

impl Method for DropoutMethod {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn run(
        &self,
        task: &Task<'_>,
        resources: &Resources,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<RepOutput>, ModelError> {
        task.validate()?;
        let c = &self.config;
        let d_out = if c.heteroscedastic { 2 } else { 1 };
        let shape = MlpShape {
            d_in: task.d,
            hidden: c.hidden.clone(),
            d_out,
            negative_slope: c.negative_slope,
        };
        let reps = task.repetitions.len();
        let replicas = task.replicas(&self.name, 1);
        let (x_train, x_test, targets) =
            (task.x_train_f32(), task.x_test_f32(), task.y_train_f32());
        let job = Job {
            shape: &shape,
            x_train: &x_train,
            targets: &targets,
            replica_targets: &replicas.targets,
            init_seeds: &replicas.init,
            stream_seeds: &replicas.stream,
            x_test: &x_test,
        };
        let settings = self.train_settings(task);
        let out = engine::train(&job, &settings, resources, progress)?;
        let (t, m) = (out.passes, task.n_test());
        let rate_name = settings.dropout.as_ref().and_then(Dropout::rate_name);
        Ok((0..reps)
            .map(|k| {
                let base = k * t * m * d_out;
                let at = |pass: usize, i: usize, j: usize| {
                    f64::from(out.test_out[base + (pass * m + i) * d_out + j])
                };
                let (mut mean, mut std) = (vec![0.0; m], vec![0.0; m]);
                let mut noise_var = vec![0.0; m];
                for i in 0..m {
                    let mu = (0..t).map(|p| at(p, i, 0)).sum::<f64>() / t as f64;
                    mean[i] = mu;
                    if t > 1 {
                        std[i] = ((0..t).map(|p| (at(p, i, 0) - mu).powi(2)).sum::<f64>()
                            / (t - 1) as f64)
                            .sqrt();
                    }
                    if c.heteroscedastic {
                        noise_var[i] = (0..t).map(|p| at(p, i, 1).exp()).sum::<f64>() / t as f64;
                    }
                }
                let mut scalars = BTreeMap::new();
                scalars.insert("final_loss".to_string(), out.final_loss[k]);
                if let (Some(name), Some(rates)) = (rate_name, &out.rates) {
                    scalars.insert(name.to_string(), rates[k]);
                }
                RepOutput {
                    mean,
                    std,
                    noise_std: c
                        .heteroscedastic
                        .then(|| noise_var.iter().map(|v| v.sqrt()).collect()),
                    samples: keep_samples.then(|| {
                        (0..t)
                            .map(|p| (0..m).map(|i| at(p, i, 0)).collect())
                            .collect()
                    }),
                    scalars,
                    diverged: out.diverged[k],
                }
            })
            .collect())
    }
}
