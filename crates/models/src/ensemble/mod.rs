//! Deep ensembles [Lakshminarayanan et al. 2017] in the three variants of [000]: plain
//! (Ens), adversarial (EnsAdvA) and bootstrap (EnsBS). All members of all repetitions of a
//! task are trained as one batched job.

pub mod beta_nll;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::batched;
use crate::jackknife::{jackknife_plus, BagMember};
use beta_nll::BetaNll;
use uqbench_core::MethodError;
use uqbench_core::{
    combine_members, Compute, Family, IntervalSetting, Likelihood, Member, Method, Prediction,
    Task, WarmStart, WarmState,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::mlp::MlpShape;
use uqbench_engine::trainer::collect::{Resample, Resamples};
use uqbench_engine::trainer::{self, Batching, Resources, TrainSettings, WarmWeights};

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
    /// β-NLL (Seitzer et al. 2022) for mean–variance members: each point's Gaussian NLL
    /// weighted by stop-gradient(σ²(x)^β), β in [0, 1] (0, the plain NLL; the authors
    /// recommend 0.5). Needs `heteroscedastic = true`.
    pub beta_nll: f64,
    /// [004]'s naive bootstrap intervals: f̂ ± t_{1−α/2, M}·σ̂_ω, a Student-t with M degrees of
    /// freedom (M the members that did not diverge) and σ̂_ω the members' std (M − 1). Its
    /// prediction intervals f̂ ± t·sqrt(σ̂_ω² + σ̂²) take σ̂ from the run's noise source
    /// (`run.noise = "validation"` is [004]'s estimate).
    pub student_t: bool,
    /// Prediction intervals of y by jackknife+-after-bootstrap (Kim et al. 2020) from the
    /// members' out-of-bag predictions (the classic bootstrap only; no extra training).
    pub jackknife_plus: bool,
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
            beta_nll: 0.0,
            student_t: false,
            jackknife_plus: false,
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
    ) -> Result<Ensemble, MethodError> {
        if config.members == 0 {
            return Err(MethodError::invalid(
                format!("{name}.members"),
                0,
                "at least 1",
            ));
        }
        if config.jackknife_plus
            && (kind != EnsembleKind::Bootstrap || config.bootstrap != BootstrapScheme::Classic)
        {
            return Err(MethodError::invalid(
                format!("{name}.jackknife_plus"),
                true,
                "false, or kind = \"EnsBSClassic\" (or NaiveBootstrap): jackknife+ needs each \
                 member's resample of the N points",
            ));
        }
        if config.student_t && config.members < 2 {
            return Err(MethodError::invalid(
                format!("{name}.members"),
                config.members,
                "at least 2 for the naive bootstrap's member variance (student_t)",
            ));
        }
        if config.student_t && config.intervals == IntervalSetting::Empirical {
            return Err(MethodError::invalid(
                format!("{name}.student_t"),
                true,
                "false with intervals = \"empirical\": one family per method",
            ));
        }
        if !(config.adversarial_fraction.is_finite() && config.adversarial_fraction >= 0.0) {
            return Err(MethodError::invalid(
                format!("{name}.adversarial_fraction"),
                config.adversarial_fraction,
                "a number ≥ 0",
            ));
        }
        if !(config.batch_fraction > 0.0 && config.batch_fraction <= 1.0) {
            return Err(MethodError::invalid(
                format!("{name}.batch_fraction"),
                config.batch_fraction,
                "a fraction in (0, 1]",
            ));
        }
        if BetaNll::new(config.beta_nll).is_none() {
            return Err(MethodError::invalid(
                format!("{name}.beta_nll"),
                config.beta_nll,
                "a number in [0, 1]",
            ));
        }
        if config.beta_nll > 0.0 && !config.heteroscedastic {
            return Err(MethodError::invalid(
                format!("{name}.beta_nll"),
                config.beta_nll,
                "0, or heteroscedastic = true: β-NLL weights a mean–variance member's NLL",
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
            (EnsembleKind::Bootstrap, BootstrapScheme::Classic) => Batching::Resample {
                size: c.optim.batch_size.filter(|&b| b < n),
            },
            _ => c.optim.settings(task.epochs, n).batching,
        };
        let adversarial = (self.kind == EnsembleKind::Adversarial).then(|| {
            task.input_range(c.net.standardize)
                .iter()
                .map(|r| r * c.adversarial_fraction)
                .collect()
        });
        TrainSettings {
            collectors: if c.jackknife_plus {
                vec![Arc::new(Resamples)]
            } else {
                Vec::new()
            },
            batching,
            adversarial,
            heteroscedastic: c.heteroscedastic,
            own_head: (c.beta_nll > 0.0)
                .then(|| BetaNll::new(c.beta_nll))
                .flatten()
                .map(|h| Arc::new(h) as Arc<dyn trainer::Head>),
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

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(
            self.config.members
                * self
                    .config
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
        self.check_task(task)?;
        let out = trainer::train_task(
            task,
            &self.name,
            self.config.members,
            &self.shape(task),
            self.config.net.standardize,
            &self.train_settings(task),
            resources,
            progress,
        )?;
        Ok(self.predictions(task, &out, keep_samples))
    }

    fn warm_start(&self) -> Option<&dyn WarmStart> {
        Some(self)
    }

    /// The tasks as one engine job when they can share it ([`Ensemble::shared`]), else
    /// side by side as the default does.
    fn run_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        let shared = self.shared(tasks)?;
        batched::run_tasks(self, tasks, compute, keep_samples, shared, |t, out, _| {
            self.predictions(t, out, keep_samples)
        })
    }
}

/// Every member continues from its weights after the previous training (its inputs on the
/// scale the first training standardised them by); a member that diverged starts afresh. The
/// optimiser starts afresh at every training (Adam's moments at zero, its step count at 0).
impl WarmStart for Ensemble {
    fn run_warm(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        from: Option<&WarmState>,
    ) -> Result<(Vec<Prediction>, WarmState), MethodError> {
        let resources = &Resources::of(compute)?;
        self.check_task(task)?;
        let from = WarmWeights::of(from, &self.name)?;
        let (out, state) = trainer::train_task_from(
            task,
            &self.name,
            self.config.members,
            &self.shape(task),
            self.config.net.standardize,
            &self.train_settings(task),
            resources,
            from,
        )?;
        Ok((self.predictions(task, &out, keep_samples), Arc::new(state)))
    }

    /// The tasks as one engine job when they can share it ([`Ensemble::shared`]).
    fn run_warm_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
        from: &[Option<&WarmState>],
    ) -> Result<Vec<(Vec<Prediction>, WarmState)>, MethodError> {
        let shared = self.shared(tasks)?;
        batched::run_warm_tasks(
            self,
            tasks,
            compute,
            keep_samples,
            from,
            shared,
            |t, out, _| self.predictions(t, out, keep_samples),
        )
    }
}

impl Ensemble {
    /// The job `tasks` share, each task checked, when they can train as one: their optimiser
    /// settings are the same (the same numbers of points, epochs and likelihood;
    /// [`Ensemble::train_settings`] reads nothing else of a task but the adversarial step,
    /// which scales with each task's input range, so adversarial ensembles train each task on
    /// its own: `None`).
    fn shared(&self, tasks: &[Task<'_>]) -> Result<Option<batched::Shared<'_>>, MethodError> {
        if self.kind == EnsembleKind::Adversarial || !batched::same_shape(tasks, |_| ()) {
            return Ok(None);
        }
        for t in tasks {
            self.check_task(t)?;
        }
        Ok(Some(batched::Shared {
            name: &self.name,
            members: self.config.members,
            shape: self.shape(&tasks[0]),
            standardize: self.config.net.standardize,
            settings: self.train_settings(&tasks[0]),
        }))
    }

    /// The network on `task`'s inputs (a second output for mean–variance members).
    fn shape(&self, task: &Task<'_>) -> MlpShape {
        let het = self.config.heteroscedastic;
        self.config.net.shape(task.d, if het { 2 } else { 1 })
    }

    /// The task's checks and this method's own against it.
    fn check_task(&self, task: &Task<'_>) -> Result<(), MethodError> {
        task.validate()?;
        if task.likelihood == Likelihood::Bernoulli && self.config.heteroscedastic {
            return Err(MethodError::invalid(
                format!("{}.heteroscedastic", self.name),
                true,
                "false for a classification problem: labels have no Gaussian noise to estimate",
            ));
        }
        Ok(())
    }

    /// One prediction per repetition of `task` from the members' training `out`.
    fn predictions(
        &self,
        task: &Task<'_>,
        out: &trainer::TrainOutput,
        keep_samples: bool,
    ) -> Vec<Prediction> {
        let members = self.config.members;
        let het = self.config.heteroscedastic;
        let reps = task.repetitions.len();
        let (mt, n) = (task.n_test(), task.n_train());
        // Per replica, the means `[M]` and (mean–variance members) the variances `[M]`: the
        // outputs are `[R, 1, M, 2]` (mean, log variance) then.
        // The variance e^{log σ²} in f64: a member's log variance far outside the data can pass
        // 88, where e^x overflows f32 (seen on E1's test grid at f_main = 4).
        let (means, variances): (Vec<f32>, Vec<f64>) = if het {
            out.test_out
                .chunks(2)
                .map(|o| (o[0], f64::from(o[1]).exp()))
                .unzip()
        } else {
            (out.test_out.clone(), Vec::new())
        };
        (0..reps)
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
                        dof: naive_bootstrap_dof(&members),
                    }
                } else {
                    self.config.intervals.family()
                };
                let mut o = combine_members(&members, family, keep_samples);
                if het {
                    // The members' mixture N(μ_m, σ²_m), m over those kept (all of them for a
                    // diverged repetition, as `combine_members`): its noise variance is the mean
                    // of the σ²_m, and its predictive variance of y adds the spread of the
                    // means with 1/M, mean_m σ²_m + (1/M)·Σ_m (μ_m − μ̄)²
                    // (Lakshminarayanan et al. 2017, §2.4). The CI of f keeps the members'
                    // sample std (1/(M − 1)) as every ensemble's uncertainty.
                    let kept: Vec<usize> = replicas
                        .clone()
                        .filter(|&r| o.diverged || !out.diverged[r])
                        .collect();
                    let km = kept.len() as f64;
                    let (noise, predictive): (Vec<f64>, Vec<f64>) = (0..mt)
                        .map(|i| {
                            let var: f64 =
                                kept.iter().map(|&r| variances[r * mt + i]).sum::<f64>() / km;
                            let spread: f64 = kept
                                .iter()
                                .map(|&r| (f64::from(means[r * mt + i]) - o.mean[i]).powi(2))
                                .sum::<f64>()
                                / km;
                            (var.sqrt(), (var + spread).sqrt())
                        })
                        .unzip();
                    o.noise_std = Some(noise);
                    o.extra.predictive_std = Some(predictive);
                    // Each member's own σ_m(x), row for row with the samples (the members
                    // kept), for the joint predictive (spec §10).
                    if o.samples.is_some() {
                        o.extra.sample_noise = Some(member_sds(&variances, &kept, mt));
                    }
                }
                let resamples: Vec<&Resample> = match self.config.jackknife_plus {
                    true => out.collected(0),
                    false => Vec::new(),
                };
                if let (false, false) = (resamples.is_empty(), o.diverged) {
                    let bag: Vec<BagMember<'_>> = replicas
                        .clone()
                        .filter(|&r| !out.diverged[r])
                        .map(|r| BagMember {
                            test: &means[r * mt..(r + 1) * mt],
                            train: &out.train_pred[r * n..(r + 1) * n],
                            resample: &resamples[r].0,
                        })
                        .collect();
                    o.extra.calibration = jackknife_plus(&bag, &task.y_train[k]);
                    if let Some(c) = &o.extra.calibration {
                        o.scalars
                            .insert("out_of_bag_points".into(), c.points() as f64);
                    }
                }
                o
            })
            .collect()
    }
}

/// The degrees of freedom of [004]'s t_{1−α/2, M}: M counts the members that entered the
/// ensemble, those that did not diverge (all of them for a repetition with fewer than two
/// left, which is left out of the metrics anyway).
fn naive_bootstrap_dof(members: &[Member<'_>]) -> f64 {
    let survivors = members.iter().filter(|m| !m.diverged).count();
    (if survivors >= 2 {
        survivors
    } else {
        members.len()
    }) as f64
}

/// The noise sd σ_m(x) of each member `r` in `kept` at the `mt` test inputs, from the
/// members' variances `[R, mt]`.
fn member_sds(variances: &[f64], kept: &[usize], mt: usize) -> Vec<Vec<f64>> {
    kept.iter()
        .map(|&r| {
            variances[r * mt..(r + 1) * mt]
                .iter()
                .map(|&v| v.sqrt())
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_naive_bootstrap_counts_the_members_that_survived() {
        let pass = [0.0f32];
        let member = |diverged| Member {
            passes: vec![&pass[..]],
            train: &pass,
            objective: 0.0,
            diverged,
        };
        let five: Vec<Member<'_>> = (0..5).map(|k| member(k == 1 || k == 3)).collect();
        assert_eq!(naive_bootstrap_dof(&five), 3.0);
        let all: Vec<Member<'_>> = (0..5).map(|_| member(false)).collect();
        assert_eq!(naive_bootstrap_dof(&all), 5.0);
    }
}
