//! [`Calibrated`]: a base method whose predictions are calibrated on held-out training
//! points by a [`Calibrator`]. The base trains on the rest of every repetition's training set
//! and predicts the test inputs and the held-out points at once ([`crate::split`]); the rule
//! sees both. The interval of f stays the base's: these methods calibrate the prediction of a
//! new y (or, for classification, the probability of a label), which is what their guarantees
//! are about.

use uqbench_core::{Compute, Likelihood, Method, MethodError, Prediction, Task};

use crate::conformal::{Conformal, ConformalConfig};
use crate::cqr::Cqr;
use crate::recalibration::RecalibratedConfig;
use crate::split::{held_out, HeldOut, Split};
use crate::Calibrator;

/// A base method calibrated on held-out training points by a rule.
pub struct Calibrated {
    name: String,
    base: Box<dyn Method>,
    rule: Box<dyn Calibrator>,
    fraction: f64,
}

impl Calibrated {
    /// `base` calibrated by `rule` on `fraction` of every repetition's training points.
    pub fn new(
        name: &str,
        base: Box<dyn Method>,
        rule: Box<dyn Calibrator>,
        fraction: f64,
    ) -> Result<Self, MethodError> {
        MethodError::rate(&format!("[methods.{name}] calibration_fraction"), fraction)?;
        Ok(Calibrated {
            name: name.to_string(),
            base,
            rule,
            fraction,
        })
    }

    /// Split conformal prediction around `base`.
    pub fn conformal(
        name: &str,
        base: Box<dyn Method>,
        c: &ConformalConfig,
    ) -> Result<Self, MethodError> {
        let rule = Box::new(Conformal { score: c.score });
        Self::new(name, base, rule, c.calibration_fraction)
    }

    /// Recalibration of `base` (std scaling, isotonic or temperature scaling).
    pub fn recalibrated(
        name: &str,
        base: Box<dyn Method>,
        c: &RecalibratedConfig,
    ) -> Result<Self, MethodError> {
        Self::new(name, base, c.calibrator(), c.calibration_fraction)
    }

    /// Conformalised quantile regression around a `base` that returns quantile bands
    /// (Romano et al. 2019).
    pub fn cqr(name: &str, base: Box<dyn Method>, fraction: f64) -> Result<Self, MethodError> {
        Self::new(name, base, Box::new(Cqr), fraction)
    }

    /// The rule's likelihood against the task's: an error naming both when they differ.
    fn check_likelihood(&self, task: &Task<'_>) -> Result<(), MethodError> {
        let wanted = self.rule.likelihood();
        if task.likelihood == wanted {
            return Ok(());
        }
        let problem = |l: Likelihood| match l {
            Likelihood::Gaussian => "a regression problem",
            Likelihood::Bernoulli => "a classification problem",
        };
        Err(MethodError::invalid(
            format!("[methods.{}]", self.name),
            format!("{} on {}", self.rule.describe(), problem(task.likelihood)),
            match wanted {
                Likelihood::Gaussian => format!(
                    "{} calibrates intervals of y, on {}; a classification problem takes kind = \
                     \"Recalibrated\" with recalibration = \"temperature\" (its logits are \
                     rescaled)",
                    self.rule.describe(),
                    problem(wanted)
                ),
                Likelihood::Bernoulli => format!(
                    "{} rescales logits, on {}; a regression problem takes recalibration = \
                     \"std_scaling\" or \"isotonic\"",
                    self.rule.describe(),
                    problem(wanted)
                ),
            },
        ))
    }
}

impl Method for Calibrated {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.base.replicas_per_repetition()
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        self.base.parameters(task)
    }

    fn check(&self, task: &Task<'_>, levels: &[f64]) -> Result<(), MethodError> {
        task.validate()?;
        self.check_likelihood(task)?;
        let held = held_out(&self.name, self.fraction, task)?;
        if self.rule.conformal() {
            // Split conformal's interval at each scored level needs ⌈(n + 1)·level⌉ ≤ n.
            for &level in levels {
                uqbench_core::calibration::conformal_rank(held.len(), level).map_err(|e| {
                    MethodError::Failed(format!(
                        "[methods.{}] calibration_fraction = {} holds out {} of the {} \
                         training points: {e}",
                        self.name,
                        self.fraction,
                        held.len(),
                        task.n_train()
                    ))
                })?;
            }
        }
        let split = Split::new(task, held);
        self.base.check(&split.task(task), levels)
    }

    fn band_levels(&self) -> Option<Vec<f64>> {
        self.base.band_levels()
    }

    fn cost(&self, n_train: usize, epochs: usize) -> f64 {
        self.base.cost(
            ((1.0 - self.fraction) * n_train as f64).round() as usize,
            epochs,
        )
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        task.validate()?;
        self.check_likelihood(task)?;
        let split = Split::new(task, held_out(&self.name, self.fraction, task)?);
        let sub = split.task(task);
        let m = task.n_test();
        let mut outs = self.base.run(&sub, compute, keep_samples, progress)?;
        for (k, out) in outs.iter_mut().enumerate() {
            let cal = out.split_tail(m);
            if out.diverged {
                continue;
            }
            let held = HeldOut {
                table: &self.name,
                task,
                split: &split,
                k,
            };
            self.rule.calibrate(&held, out, &cal)?;
        }
        Ok(outs)
    }
}
