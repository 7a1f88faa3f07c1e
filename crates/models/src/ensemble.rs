//! Deep ensembles [Lakshminarayanan et al. 2017] in the three variants of [000]: plain
//! (Ens), adversarial (EnsAdvA) and bootstrap (EnsBS). All members of all repetitions of a
//! task are trained as one batched job.

use serde::{Deserialize, Serialize};

use crate::config::MethodConfig;
use crate::engine::{self, Batching, Job, Resources, TrainSettings};
use crate::error::ModelError;
use crate::task::{
    combine_members, Family, IntervalSetting, Likelihood, Member, Method, RepOutput, Task,
};

/// Which ensemble.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnsembleKind {
    /// Members differ by initialisation (and mini-batch order when mini-batches are used).
    Plain,
    /// Every step also trains on x' = x + ε·sign(∇ₓ loss).
    Adversarial,
    /// Bootstrap: [000]'s mini-batches drawn with replacement, or the classic resample.
    Bootstrap,
}

/// How EnsBS resamples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BootstrapScheme {
    /// [000]: every epoch, `batches_per_epoch` mini-batches of `batch_fraction`·N points
    /// drawn with replacement ("pull with back").
    #[default]
    Paper,
    /// [002]/[004]: one resample of N points with replacement per member, trained
    /// full-batch.
    Classic,
}

/// The ensemble methods' own settings, with [000]'s values as defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnsembleSettings {
    /// Members per ensemble (spec §3: 120).
    pub members: usize,
    /// EnsAdvA: ε as a fraction of each input dimension's training range (0.01).
    pub adversarial_fraction: f64,
    /// EnsBS: resampling scheme.
    pub bootstrap: BootstrapScheme,
    /// EnsBS (paper scheme): mini-batch size as a fraction of N (0.5).
    pub batch_fraction: f64,
    /// EnsBS (paper scheme): mini-batches per epoch (2).
    pub batches_per_epoch: usize,
    /// Intervals from mean ± z·std of the members (`normal`, [000]) or from their empirical
    /// quantiles (`empirical`).
    pub intervals: IntervalSetting,
    /// Mean–variance members (Lakshminarayanan et al. 2017, the original deep ensembles):
    /// each member outputs a mean and a log variance and is trained on the Gaussian NLL; the
    /// ensemble reports the std of the members' means as the uncertainty of f and
    /// sqrt(mean of their variances) as the noise sd, so prediction intervals use
    /// σ²_f + σ²_noise, the mixture's variance.
    pub heteroscedastic: bool,
    /// [004]'s naive bootstrap intervals: f̂ ± t_{1−α/2, M}·σ̂_ω, a Student-t with M degrees of
    /// freedom (M the members) and σ̂_ω the members' std (M − 1).
    pub student_t: bool,
    /// [004]'s noise estimate from the problem's validation set: σ̂² = mean_j max((y_j −
    /// f̂(x_j))² − σ̂_ω²(x_j), 0), one σ̂ per repetition, used in the prediction intervals
    /// f̂ ± q·sqrt(σ̂_ω² + σ̂²). Needs `problem.validation`.
    pub validation_noise: bool,
}

impl Default for EnsembleSettings {
    fn default() -> Self {
        EnsembleSettings {
            members: 120,
            adversarial_fraction: 0.01,
            bootstrap: BootstrapScheme::Paper,
            batch_fraction: 0.5,
            batches_per_epoch: 2,
            intervals: IntervalSetting::Normal,
            heteroscedastic: false,
            student_t: false,
            validation_noise: false,
        }
    }
}

/// Settings of the ensemble methods: network, optimiser (`batch_size` for Ens and EnsAdvA;
/// EnsBS batches by its scheme) and [`EnsembleSettings`].
pub type EnsembleConfig = MethodConfig<EnsembleSettings>;

/// An ensemble method.
#[derive(Debug, Clone)]
pub struct Ensemble {
    name: String,
    kind: EnsembleKind,
    config: EnsembleConfig,
}

impl Ensemble {
    /// An ensemble of `kind` named `name` (`Ens`, `EnsAdvA`, `EnsBS`), with its settings
    /// checked up front.
    pub fn new(
        name: &str,
        kind: EnsembleKind,
        config: EnsembleConfig,
    ) -> Result<Ensemble, ModelError> {
        if config.members == 0 {
            return Err(ModelError::invalid(
                format!("{name}.members"),
                0,
                "at least 1",
            ));
        }
        if (config.student_t || config.validation_noise) && config.members < 2 {
            return Err(ModelError::invalid(
                format!("{name}.members"),
                config.members,
                "at least 2 for the naive bootstrap's member variance (student_t, \
                 validation_noise)",
            ));
        }
        if config.heteroscedastic && config.validation_noise {
            return Err(ModelError::invalid(
                format!("{name}.validation_noise"),
                true,
                "false with heteroscedastic = true: the members already estimate the noise",
            ));
        }
        if config.student_t && config.intervals == IntervalSetting::Empirical {
            return Err(ModelError::invalid(
                format!("{name}.student_t"),
                true,
                "false with intervals = \"empirical\": one family per method",
            ));
        }
        if !(config.adversarial_fraction.is_finite() && config.adversarial_fraction >= 0.0) {
            return Err(ModelError::invalid(
                format!("{name}.adversarial_fraction"),
                config.adversarial_fraction,
                "a number ≥ 0",
            ));
        }
        if !(config.batch_fraction > 0.0 && config.batch_fraction <= 1.0) {
            return Err(ModelError::invalid(
                format!("{name}.batch_fraction"),
                config.batch_fraction,
                "a fraction in (0, 1]",
            ));
        }
        config.net.shape(1, 1).validate()?;
        Ok(Ensemble {
            name: name.to_string(),
            kind,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &EnsembleConfig {
        &self.config
    }

    /// The optimiser settings for a task.
    pub fn train_settings(&self, task: &Task<'_>) -> TrainSettings {
        let c = &self.config;
        let n = task.n_train();
        let batching = match (self.kind, c.bootstrap) {
            (EnsembleKind::Bootstrap, BootstrapScheme::Paper) => Batching::WithReplacement {
                size: ((c.batch_fraction * n as f64).round() as usize).max(1),
                per_epoch: c.batches_per_epoch,
            },
            (EnsembleKind::Bootstrap, BootstrapScheme::Classic) => Batching::Resample,
            _ => c.optim.settings(task.epochs, n).batching,
        };
        let adversarial = (self.kind == EnsembleKind::Adversarial).then(|| {
            task.input_range(c.net.standardize)
                .iter()
                .map(|r| r * c.adversarial_fraction)
                .collect()
        });
        TrainSettings {
            batching,
            adversarial,
            heteroscedastic: c.heteroscedastic,
            likelihood: task.likelihood,
            ..c.optim.settings(task.epochs, n)
        }
    }
}

impl Method for Ensemble {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.members
    }

    fn run(
        &self,
        task: &Task<'_>,
        resources: &Resources,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<RepOutput>, ModelError> {
        task.validate()?;
        // With the validation-set noise estimate, the validation inputs are predicted with the
        // test inputs (appended after them) and split off below.
        let combined: Vec<f64>;
        let with_valid;
        if task.likelihood == Likelihood::Bernoulli
            && (self.config.validation_noise || self.config.heteroscedastic)
        {
            return Err(ModelError::invalid(
                format!(
                    "{}.{}",
                    self.name,
                    if self.config.heteroscedastic {
                        "heteroscedastic"
                    } else {
                        "validation_noise"
                    }
                ),
                true,
                "false for a classification problem: labels have no Gaussian noise to estimate",
            ));
        }
        let (task, valid) = if self.config.validation_noise {
            let v = task.validation.ok_or_else(|| {
                ModelError::invalid(
                    format!("{}.validation_noise", self.name),
                    true,
                    "a problem with a validation set (problem.validation, or \
                     surrogate.split.validation > 0)",
                )
            })?;
            if v.x.is_empty() || v.y.len() != task.repetitions.len() {
                return Err(ModelError::invalid(
                    "validation set",
                    format!(
                        "{} inputs, targets for {} repetitions",
                        v.x.len() / task.d,
                        v.y.len()
                    ),
                    format!(
                        "at least one input and targets for all {}",
                        task.repetitions.len()
                    ),
                ));
            }
            combined = [task.x_test, v.x].concat();
            with_valid = Task {
                x_test: &combined,
                ..task.clone()
            };
            (&with_valid, Some(v))
        } else {
            (task, None)
        };
        let members = self.config.members;
        let het = self.config.heteroscedastic;
        let shape = self.config.net.shape(task.d, if het { 2 } else { 1 });
        let reps = task.repetitions.len();
        let replicas = task.replicas(&self.name, members);
        let (x_train, x_test) = task.inputs_f32(self.config.net.standardize);
        let targets = task.y_train_f32();
        let job = Job {
            shape: &shape,
            x_train: &x_train,
            targets: &targets,
            replica_targets: &replicas.targets,
            init_seeds: &replicas.init,
            stream_seeds: &replicas.stream,
            x_test: &x_test,
        };
        let out = engine::train(&job, &self.train_settings(task), resources, progress)?;
        let (mt, n) = (task.n_test(), task.n_train());
        // Per replica, the means `[M]` and (mean–variance members) the variances `[M]`: the
        // outputs are `[R, 1, M, 2]` (mean, log variance) then.
        let (means, variances): (Vec<f32>, Vec<f32>) = if het {
            out.test_out.chunks(2).map(|o| (o[0], o[1].exp())).unzip()
        } else {
            (out.test_out.clone(), Vec::new())
        };
        Ok((0..reps)
            .map(|k| {
                let replicas = k * members..(k + 1) * members;
                let members: Vec<Member<'_>> = replicas
                    .clone()
                    .map(|r| Member {
                        passes: vec![&means[r * mt..(r + 1) * mt]],
                        train: &out.train_pred[r * n..(r + 1) * n],
                        objective: out.final_objective[r],
                        diverged: out.diverged[r],
                    })
                    .collect();
                let family = if self.config.student_t {
                    Family::StudentT {
                        dof: members.len() as f64,
                    }
                } else {
                    self.config.intervals.family()
                };
                let mut o = combine_members(&members, family, keep_samples);
                if let Some(v) = valid {
                    // Split the validation points off and estimate σ̂² from them.
                    let m_test = mt - v.x.len() / task.d;
                    let sigma = validation_noise_sd(&v.y[k], &o.mean[m_test..], &o.std[m_test..]);
                    o.mean.truncate(m_test);
                    o.std.truncate(m_test);
                    if let Some(rows) = o.samples.as_mut() {
                        for row in rows {
                            row.truncate(m_test);
                        }
                    }
                    o.noise_std = Some(vec![sigma; m_test]);
                    o.scalars.insert("validation_noise_sd".to_string(), sigma);
                }
                if het {
                    // The noise variance: the mean of the members' variances (those kept, or
                    // all of them for a diverged repetition, as `combine_members`).
                    let kept: Vec<usize> = replicas
                        .clone()
                        .filter(|&r| o.diverged || !out.diverged[r])
                        .collect();
                    o.noise_std = Some(
                        (0..mt)
                            .map(|i| {
                                let sum: f64 =
                                    kept.iter().map(|&r| f64::from(variances[r * mt + i])).sum();
                                (sum / kept.len() as f64).sqrt()
                            })
                            .collect(),
                    );
                }
                o
            })
            .collect())
    }
}

/// [004]'s noise estimate from a validation set: σ̂ = sqrt(mean_j max((y_j − f̂_j)² − σ̂_ω,j², 0))
/// for validation targets `y`, the ensemble's predictions `mean` and its members' std `std`
/// there.
pub fn validation_noise_sd(y: &[f64], mean: &[f64], std: &[f64]) -> f64 {
    let excess: f64 = y
        .iter()
        .zip(mean)
        .zip(std)
        .map(|((y, m), s)| ((y - m).powi(2) - s * s).max(0.0))
        .sum();
    (excess / y.len() as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_validation_noise_estimate_recovers_sigma() {
        // y = f + ε with ε ~ N(0, 0.3²) at V = 20 000 points. With the truth as the prediction
        // and σ̂_ω = 0, σ̂² is the mean of ε²: 0.09 ± 0.09·√(2/V) = 0.0009 (sd); checked at 5 sd.
        // With σ̂_ω = 10 everywhere (members far more spread than the noise), every term is
        // clipped to 0.
        let mut rng = uqbench_anchor::Rng::new(42);
        let v = 20_000;
        let f: Vec<f64> = (0..v).map(|i| (i as f64 * 0.01).sin()).collect();
        let y: Vec<f64> = f.iter().map(|f| f + 0.3 * rng.normal()).collect();
        let s2 = validation_noise_sd(&y, &f, &vec![0.0; v]).powi(2);
        assert!((s2 - 0.09).abs() < 5.0 * 0.0009, "{s2}");
        assert_eq!(validation_noise_sd(&y, &f, &vec![10.0; v]), 0.0);
        // A known member std s = 0.1 removes s² from each squared residual before clipping:
        // E max(ε² − 0.01, 0) for ε ~ N(0, 0.09) (by numerical integration, midpoint rule).
        let expected: f64 = {
            let (n, lim) = (200_000, 3.0);
            let h = 2.0 * lim / n as f64;
            (0..n)
                .map(|i| {
                    let z = -lim + (i as f64 + 0.5) * h;
                    let e = 0.3 * z;
                    (e * e - 0.01).max(0.0) * (-0.5 * z * z).exp()
                        / (2.0 * std::f64::consts::PI).sqrt()
                        * h
                })
                .sum()
        };
        let got = validation_noise_sd(&y, &f, &vec![0.1; v]).powi(2);
        assert!((got - expected).abs() < 5.0 * 0.0009, "{got} vs {expected}");
    }
}
