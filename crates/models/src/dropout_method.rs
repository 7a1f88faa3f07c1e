//! The dropout family of [000] as methods: BD (MC dropout), CD (concrete dropout) and VD
//! (variational dropout), one replica per repetition, all repetitions of a task trained as
//! one batched job, with T stochastic passes at prediction.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::batched;
use uqbench_core::noise::Tau;
use uqbench_core::MethodError;
use uqbench_core::{
    Compute, Extra, Family, IntervalSetting, Likelihood, Method, Prediction, Task, WarmStart,
    WarmState,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::mlp::MlpShape;
use uqbench_engine::stochastic::{Bernoulli, Concrete, StochasticLayer, Variational};
use uqbench_engine::trainer::{self, Resources, TrainSettings, WarmWeights};

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

/// The dropout methods' own settings, with defaults as documented per field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DropoutSettings {
    /// Stochastic passes T at prediction (200). The Monte-Carlo error of the reported mean
    /// is std/√T (7% of the std), of the reported std about std/√(2(T − 1)) (5%).
    pub passes: usize,
    /// BD: the drop rate p (0.1, a common choice for regression; [000] does not give its rate).
    pub p: f64,
    /// CD: initial rate (0.1, as the reference implementation's init range [0.1, 0.1]).
    pub init_p: f64,
    /// CD: temperature of the relaxed mask (0.1).
    pub temperature: f64,
    /// CD: prior length scale l; weight_reg = l²/(2τN) (1e-4, as the reference
    /// implementation; see [`Tau`] for the factor 2).
    pub length_scale: f64,
    /// CD: dropout_reg = this/(2τN) (2, as the reference implementation's 2/(τN) against plain
    /// MSE, i.e. 1/(τN) against our ½·MSE).
    pub dropout_reg_factor: f64,
    /// VD: initial α (1/9, the α of Bernoulli dropout with p = 0.1: α = p/(1 − p)).
    pub init_alpha: f64,
    /// VD: the KL term is weighted by this/(τN) (1: the KL of the ELBO per data point).
    pub kl_factor: f64,
    /// CD, VD: the noise precision τ of the data term (1, or `"known"` for 1/σ² of a problem
    /// whose σ is known); see [`Tau`]. Not used with the heteroscedastic head, whose data term
    /// is the full Gaussian NLL (τ = 1).
    pub tau: Tau,
    /// Intervals from mean ± z·std of the passes (`normal`, [000]) or from their empirical
    /// quantiles (`empirical`).
    pub intervals: IntervalSetting,
    /// A second output for the log noise variance, trained with the Gaussian NLL ([004]'s
    /// heteroscedastic dropout): then the noise sd is reported too, for prediction intervals.
    pub heteroscedastic: bool,
}

impl Default for DropoutSettings {
    fn default() -> Self {
        DropoutSettings {
            passes: 200,
            p: 0.1,
            init_p: 0.1,
            temperature: 0.1,
            length_scale: 1e-4,
            dropout_reg_factor: 2.0,
            init_alpha: 1.0 / 9.0,
            kl_factor: 1.0,
            tau: Tau::default(),
            intervals: IntervalSetting::Normal,
            heteroscedastic: false,
        }
    }
}

/// Settings of the dropout methods: [000]'s network and optimiser (`batch_size`: shuffled
/// mini-batches) and [`DropoutSettings`].
pub type DropoutConfig = MethodConfig<DropoutSettings>;

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
    ) -> Result<DropoutMethod, MethodError> {
        if config.passes == 0 {
            return Err(MethodError::invalid(
                format!("{name}.passes"),
                0,
                "at least 1 prediction pass (T ≥ 1; 200 by default)",
            ));
        }
        match config.tau {
            Tau::Value(t) if !(t.is_finite() && t > 0.0) => {
                return Err(MethodError::invalid(
                    format!("{name}.tau"),
                    t,
                    "a positive noise precision, or \"known\" for 1/σ² of the problem",
                ))
            }
            t if config.heteroscedastic && t != Tau::Value(1.0) => {
                return Err(MethodError::invalid(
                    format!("{name}.tau"),
                    format!("{t:?}"),
                    "leave it out with heteroscedastic = true: the head's Gaussian NLL is the \
                     whole data term (τ = 1)",
                ))
            }
            _ => {}
        }
        let method = DropoutMethod {
            name: name.to_string(),
            kind,
            config,
        };
        method.dropout(100, 1.0).validate().map_err(|e| match e {
            MethodError::Invalid { what, value, valid } => MethodError::Invalid {
                what: format!("{name}: {what}"),
                value,
                valid,
            },
            other => other,
        })?;
        method.config.net.shape(1, 1).validate()?;
        if method.config.net.hidden.is_empty() {
            return Err(MethodError::invalid(
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

    /// The noise precision τ for a task.
    pub fn tau(&self, task: &Task<'_>) -> Result<f64, MethodError> {
        match self.config.tau {
            Tau::Value(t) => Ok(t),
            Tau::Known(_) => match task.known_sigma {
                Some(s) => Ok(1.0 / (s * s)),
                None => Err(MethodError::invalid(
                    format!("{}.tau", self.name),
                    "\"known\"",
                    "a number: this problem's σ is not a known constant (sigma_known = false, or \
                     σ depends on x)",
                )),
            },
        }
    }

    /// The dropout layer for N training points and noise precision τ (see [`Tau`]).
    pub fn dropout(&self, n: usize, tau: f64) -> Arc<dyn StochasticLayer> {
        let c = &self.config;
        let tn = tau * n as f64;
        match self.kind {
            DropoutKind::Bernoulli => Arc::new(Bernoulli { p: c.p }),
            // Gal's reference: weight_regularizer = l²/(τN), dropout_regularizer = 2/(τN)
            // against plain MSE (twice the Gaussian NLL per point); our data term is ½·MSE, so
            // both are halved.
            DropoutKind::Concrete => Arc::new(Concrete {
                init_p: c.init_p,
                temperature: c.temperature,
                weight_reg: c.length_scale * c.length_scale / (2.0 * tn),
                dropout_reg: c.dropout_reg_factor / (2.0 * tn),
            }),
            // The per-point ELBO divided by τ: ½·MSE + KL/(τN).
            DropoutKind::Variational => Arc::new(Variational {
                init_alpha: c.init_alpha,
                kl_weight: c.kl_factor / tn,
            }),
        }
    }

    /// The optimiser settings for a task.
    pub fn train_settings(&self, task: &Task<'_>) -> Result<TrainSettings, MethodError> {
        let c = &self.config;
        let n = task.n_train();
        // For labels the data term is the Bernoulli NLL itself (not ½·MSE = NLL/τ), so the
        // ELBO's per-point KL/N is the regularisers above at τ = 1; a τ has no role.
        let tau = match task.likelihood {
            Likelihood::Gaussian => self.tau(task)?,
            Likelihood::Bernoulli if c.tau == Tau::Value(1.0) => 1.0,
            Likelihood::Bernoulli => {
                return Err(MethodError::invalid(
                    format!("{}.tau", self.name),
                    format!("{:?}", c.tau),
                    "unset (1) for a classification problem: the Bernoulli likelihood has no \
                     noise precision",
                ))
            }
        };
        Ok(TrainSettings {
            dropout: Some(self.dropout(n, tau)),
            heteroscedastic: c.heteroscedastic,
            likelihood: task.likelihood,
            mc_passes: c.passes,
            ..c.optim.settings(task.epochs, n)
        })
    }
}

impl Method for DropoutMethod {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(
            self.config
                .net
                .shape(task.d, if self.config.heteroscedastic { 2 } else { 1 })
                .parameters(),
        )
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
        let settings = self.train_settings(task)?;
        let out = trainer::train_task(
            task,
            &self.name,
            1,
            &self.shape(task),
            c.net.standardize,
            &settings,
            resources,
            progress,
        )?;
        Ok(self.predictions(task, &out, &settings, keep_samples))
    }

    /// The tasks as one engine job when they can share it ([`DropoutMethod::shared`]),
    /// else side by side as the default does.
    fn run_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        let shared = self.shared(tasks)?;
        batched::run_tasks(
            self,
            tasks,
            compute,
            keep_samples,
            shared,
            |t, out, settings| self.predictions(t, out, settings, keep_samples),
        )
    }

    fn warm_start(&self) -> Option<&dyn WarmStart> {
        // A learned rate (CD's p, VD's α) is a parameter slot of the layer, which the warm
        // start does not carry: only Bernoulli dropout's network is all weights.
        (self.kind == DropoutKind::Bernoulli).then_some(self as &dyn WarmStart)
    }
}

/// BD's network continues from its weights after the previous training (its inputs on the
/// scale the first training standardised them by; a diverged one starts afresh); the
/// optimiser starts afresh at every training (Adam's moments at zero).
impl WarmStart for DropoutMethod {
    fn run_warm(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        from: Option<&WarmState>,
    ) -> Result<(Vec<Prediction>, WarmState), MethodError> {
        if self.kind != DropoutKind::Bernoulli {
            return Err(MethodError::invalid(
                format!("{}'s warm start", self.name),
                format!("{:?} dropout", self.kind),
                "Bernoulli dropout (BD): a learned rate is not carried over",
            ));
        }
        let resources = &Resources::of(compute)?;
        task.validate()?;
        let settings = self.train_settings(task)?;
        let from = WarmWeights::of(from, &self.name)?;
        let (out, state) = trainer::train_task_from(
            task,
            &self.name,
            1,
            &self.shape(task),
            self.config.net.standardize,
            &settings,
            resources,
            from,
        )?;
        let predictions = self.predictions(task, &out, &settings, keep_samples);
        Ok((predictions, Arc::new(state)))
    }

    /// The tasks as one engine job when they can share it ([`DropoutMethod::shared`]; only
    /// BD warm-starts, and `run_warm` gives the others' error task by task).
    fn run_warm_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
        from: &[Option<&WarmState>],
    ) -> Result<Vec<(Vec<Prediction>, WarmState)>, MethodError> {
        let bernoulli = self.kind == DropoutKind::Bernoulli;
        let shared = if bernoulli { self.shared(tasks)? } else { None };
        batched::run_warm_tasks(
            self,
            tasks,
            compute,
            keep_samples,
            from,
            shared,
            |t, out, s| self.predictions(t, out, s, keep_samples),
        )
    }
}

impl DropoutMethod {
    /// The job `tasks` share when they can train as one (`None` otherwise):
    /// [`DropoutMethod::train_settings`] reads of a task its points, epochs, likelihood and
    /// noise precision τ (a known σ's), so tasks that agree in those share its settings (the
    /// joint job validates every task).
    fn shared(&self, tasks: &[Task<'_>]) -> Result<Option<batched::Shared<'_>>, MethodError> {
        if !batched::same_shape(tasks, |t| self.tau(t).ok().map(f64::to_bits)) {
            return Ok(None);
        }
        Ok(Some(batched::Shared {
            name: &self.name,
            members: 1,
            shape: self.shape(&tasks[0]),
            standardize: self.config.net.standardize,
            settings: self.train_settings(&tasks[0])?,
        }))
    }

    /// The network on `task`'s inputs (a second output for the heteroscedastic head).
    fn shape(&self, task: &Task<'_>) -> MlpShape {
        let d_out = if self.config.heteroscedastic { 2 } else { 1 };
        self.config.net.shape(task.d, d_out)
    }

    /// One prediction per repetition of `task` from its training `out` under `settings`.
    fn predictions(
        &self,
        task: &Task<'_>,
        out: &trainer::TrainOutput,
        settings: &TrainSettings,
        keep_samples: bool,
    ) -> Vec<Prediction> {
        let c = &self.config;
        let d_out = if c.heteroscedastic { 2 } else { 1 };
        let reps = task.repetitions.len();
        let (t, m, n) = (out.passes, task.n_test(), task.n_train());
        let rate_name = settings.dropout.as_ref().and_then(|d| d.rate_name());
        let family = c.intervals.family();
        (0..reps)
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
                scalars.insert("final_objective".to_string(), out.final_objective[k]);
                if let (Some(name), Some(rates)) = (rate_name, &out.rates) {
                    scalars.insert(name.to_string(), rates[k]);
                }
                Prediction {
                    mean,
                    std,
                    noise_std: c
                        .heteroscedastic
                        .then(|| noise_var.iter().map(|v| v.sqrt()).collect()),
                    noise_known: false,
                    family,
                    samples: (keep_samples || family == Family::Empirical).then(|| {
                        (0..t)
                            .map(|p| (0..m).map(|i| at(p, i, 0)).collect())
                            .collect()
                    }),
                    train_mean: Some(
                        out.train_pred[k * n..(k + 1) * n]
                            .iter()
                            .map(|&v| f64::from(v))
                            .collect(),
                    ),
                    scalars,
                    diverged: out.diverged[k],
                    extra: Extra::default(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Tensor, TensorData};

    use super::*;
    use uqbench_core::noise::KnownSigma;
    use uqbench_core::SeedBase;

    fn task(known_sigma: Option<f64>) -> (Vec<f64>, Vec<Vec<f64>>, Option<f64>) {
        (
            (0..50).map(f64::from).collect(),
            vec![vec![0.0; 50]],
            known_sigma,
        )
    }

    #[test]
    fn concrete_regulariser_is_half_of_gals_reference() {
        // Gal's reference (concrete dropout, Keras): objective = MSE + weight_regularizer·‖W‖²/(1 − p)
        // + dropout_regularizer·K·(p log p + (1 − p) log(1 − p)), weight_regularizer = l²/(τN),
        // dropout_regularizer = 2/(τN). Hand-computed with K = 3, W = (0.5, −1, 2) (‖W‖² =
        // 5.25), p = 0.2 (p ln p + (1 − p) ln(1 − p) = −0.500402), l = 0.1, N = 50, τ = 1:
        // 2e-4·5.25/0.8 + 0.04·3·(−0.500402) = −0.0587357. Our data term is ½·MSE, so our
        // regulariser must be half of that: −0.0293679.
        let config = DropoutConfig {
            own: DropoutSettings {
                length_scale: 0.1,
                ..DropoutSettings::default()
            },
            ..DropoutConfig::default()
        };
        let cd = DropoutMethod::new("CD", DropoutKind::Concrete, config).unwrap();
        let dropout = cd.dropout(50, 1.0);
        let device = burn::tensor::Device::flex();
        let w =
            Tensor::<3>::from_data(TensorData::new(vec![0.5f32, -1.0, 2.0], [1, 3, 1]), &device);
        let theta = (0.2f64 / 0.8).ln() as f32;
        let theta = Tensor::<3>::from_data(TensorData::new(vec![theta], [1, 1, 1]), &device);
        let reg = dropout.regularizer(&w, &[theta]).unwrap();
        let value = f64::from(reg.into_data().try_to_vec::<f32>().unwrap()[0]);
        let reference = 2e-4 * 5.25 / 0.8 + 0.04 * 3.0 * (0.2 * 0.2f64.ln() + 0.8 * 0.8f64.ln());
        assert!(
            (value - reference / 2.0).abs() < 1e-6,
            "{value} vs {}",
            reference / 2.0
        );
    }

    #[test]
    fn tau_scales_every_regulariser_and_known_uses_sigma() {
        let (x, y, _) = task(None);
        let make = |known: Option<f64>| Task {
            d: 1,
            x_train: &x,
            y_train: &y,
            repetitions: &[0],
            x_test: &x,
            epochs: 1,
            known_sigma: known,
            seeds: SeedBase {
                base: 0,
                experiment: "t".into(),
                setting: String::new(),
            },
            features: None,
            noise: Default::default(),
            likelihood: uqbench_core::Likelihood::Gaussian,
        };
        let config = DropoutConfig {
            own: DropoutSettings {
                tau: Tau::Known(KnownSigma::Known),
                ..DropoutSettings::default()
            },
            ..DropoutConfig::default()
        };
        let vd = DropoutMethod::new("VD", DropoutKind::Variational, config.clone()).unwrap();
        // σ = 0.75: τ = 1/0.5625, KL weight 1/(τN) = 0.5625/50.
        let tau = vd.tau(&make(Some(0.75))).unwrap();
        assert!((tau - 1.0 / 0.5625).abs() < 1e-12);
        let layer = vd.dropout(50, tau);
        let v = layer.as_any().downcast_ref::<Variational>().expect("VD");
        assert!((v.kl_weight - 0.5625 / 50.0).abs() < 1e-15);
        let e = vd.tau(&make(None)).unwrap_err().to_string();
        assert!(
            e.contains("VD.tau") && e.contains("not a known constant"),
            "{e}"
        );
        let cd = DropoutMethod::new("CD", DropoutKind::Concrete, config).unwrap();
        let layer = cd.dropout(50, 2.0);
        let c = layer.as_any().downcast_ref::<Concrete>().expect("CD");
        assert!((c.weight_reg - 1e-8 / 200.0).abs() < 1e-20);
        assert!((c.dropout_reg - 2.0 / 200.0).abs() < 1e-15);
        // τ has no role with the heteroscedastic head, and must be positive.
        for (tau, hetero, needle) in [
            (Tau::Value(2.0), true, "heteroscedastic"),
            (Tau::Value(0.0), false, "CD.tau = 0"),
        ] {
            let e = DropoutMethod::new("CD", DropoutKind::Concrete, {
                let mut c = DropoutConfig::default();
                (c.tau, c.heteroscedastic) = (tau, hetero);
                c
            })
            .unwrap_err()
            .to_string();
            assert!(e.contains(needle), "{e}");
        }
        let c: DropoutConfig = toml::from_str("tau = \"known\"").unwrap();
        assert_eq!(c.tau, Tau::Known(KnownSigma::Known));
        let c: DropoutConfig = toml::from_str("tau = 4").unwrap();
        assert_eq!(c.tau, Tau::Value(4.0));
    }
}
