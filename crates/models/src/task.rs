//! The seam between learning and evaluation: what a method gets (a [`Task`]) and what it
//! returns (one [`RepOutput`] per repetition, on the host, in f64).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uqbench_anchor::SeedPath;

use crate::engine::Resources;
use crate::error::ModelError;

/// Where a task sits in an experiment, for seed derivation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedBase {
    /// The experiment's base seed.
    pub base: u64,
    /// The experiment's name.
    pub experiment: String,
    /// The setting's label.
    pub setting: String,
}

impl SeedBase {
    /// The seed of (repetition, member, purpose).
    pub fn seed(&self, repetition: u64, member: u64, purpose: &str) -> u64 {
        SeedPath {
            base: self.base,
            experiment: &self.experiment,
            setting: &self.setting,
            repetition,
            member,
            purpose,
        }
        .seed()
    }
}

/// One training-and-prediction task: a block of repetitions of one setting.
#[derive(Debug, Clone)]
pub struct Task<'a> {
    /// Input dimension.
    pub d: usize,
    /// Training inputs `[N, d]`, row-major (the same in every repetition).
    pub x_train: &'a [f64],
    /// Training targets of each repetition in the block.
    pub y_train: &'a [Vec<f64>],
    /// The repetition indices of the block (seed derivation).
    pub repetitions: &'a [u64],
    /// Test inputs `[M, d]`, row-major.
    pub x_test: &'a [f64],
    /// Training epochs (spec §3: 300·c).
    pub epochs: usize,
    /// The noise sd σ when the problem declares it known and constant (`sigma_known`, a
    /// number): what a method may use for its noise precision τ = 1/σ² (`tau = "known"`).
    pub known_sigma: Option<f64>,
    /// Seed context.
    pub seeds: SeedBase,
    /// The problem's features G when f is linear in them (not for a surrogate problem): what
    /// the GP's `features` kernel uses.
    pub features: Option<&'a uqbench_anchor::FeatureMap>,
    /// What the targets are: real numbers with Gaussian noise, or labels 0/1 (a
    /// classification problem, trained with the Bernoulli cross-entropy on a logit output).
    pub likelihood: Likelihood,
}

/// The likelihood of the targets, which fixes the network's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Likelihood {
    /// y = f(x) + Gaussian noise (regression).
    #[default]
    Gaussian,
    /// y ∈ {0, 1} with P(y = 1 | x) = sigmoid(f(x)): the network outputs the logit f, and
    /// every prediction (mean, samples) a method returns is on the logit scale.
    Bernoulli,
}

impl Task<'_> {
    /// Number of training points.
    pub fn n_train(&self) -> usize {
        self.x_train.len() / self.d
    }

    /// Number of test points.
    pub fn n_test(&self) -> usize {
        self.x_test.len() / self.d
    }

    /// Per input dimension, the training inputs' mean and standard deviation (n denominator;
    /// 1 for a constant column).
    pub fn input_moments(&self) -> Vec<(f64, f64)> {
        let n = self.n_train() as f64;
        (0..self.d)
            .map(|j| {
                let col = || self.x_train.iter().skip(j).step_by(self.d);
                let mean = col().sum::<f64>() / n;
                let sd = (col().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
                (mean, if sd > 0.0 { sd } else { 1.0 })
            })
            .collect()
    }

    /// Training and test inputs as f32 (device precision), each dimension standardised by the
    /// training inputs' mean and sd when `standardize` (see [`Task::input_moments`]).
    pub fn inputs_f32(&self, standardize: bool) -> (Vec<f32>, Vec<f32>) {
        let moments = standardize.then(|| self.input_moments());
        let map = |x: &[f64]| -> Vec<f32> {
            x.iter()
                .enumerate()
                .map(|(i, &v)| match &moments {
                    Some(m) => ((v - m[i % self.d].0) / m[i % self.d].1) as f32,
                    None => v as f32,
                })
                .collect()
        };
        (map(self.x_train), map(self.x_test))
    }

    /// The inputs as f32 (device precision).
    pub fn x_train_f32(&self) -> Vec<f32> {
        self.x_train.iter().map(|&v| v as f32).collect()
    }

    /// The test inputs as f32.
    pub fn x_test_f32(&self) -> Vec<f32> {
        self.x_test.iter().map(|&v| v as f32).collect()
    }

    /// The targets as f32.
    pub fn y_train_f32(&self) -> Vec<Vec<f32>> {
        self.y_train
            .iter()
            .map(|y| y.iter().map(|&v| v as f32).collect())
            .collect()
    }

    /// The replicas of `members` networks per repetition, repetition-major: which
    /// repetition's targets each trains on, and its seeds for initialisation
    /// (`METHOD/init`) and for its stream of mini-batch and noise draws (`METHOD/stream`),
    /// derived from (repetition, member).
    pub fn replicas(&self, method: &str, members: usize) -> Replicas {
        let (init_purpose, stream_purpose) = (format!("{method}/init"), format!("{method}/stream"));
        let mut r = Replicas {
            targets: Vec::new(),
            init: Vec::new(),
            stream: Vec::new(),
            ids: Vec::new(),
        };
        for (k, &rep) in self.repetitions.iter().enumerate() {
            for m in 0..members as u64 {
                r.targets.push(k);
                r.ids.push(rep * members as u64 + m);
                r.init.push(self.seeds.seed(rep, m, &init_purpose));
                r.stream.push(self.seeds.seed(rep, m, &stream_purpose));
            }
        }
        r
    }

    /// Per input dimension, max − min of the training inputs, in the units the network sees
    /// (divided by the sd when the inputs are standardised).
    pub fn input_range(&self, standardize: bool) -> Vec<f64> {
        let moments = self.input_moments();
        (0..self.d)
            .map(|j| {
                let col = self.x_train.iter().skip(j).step_by(self.d);
                let (lo, hi) = col.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                });
                if standardize {
                    (hi - lo) / moments[j].1
                } else {
                    hi - lo
                }
            })
            .collect()
    }

    /// An error for a method that has no classification version, when the task is one.
    pub fn require_gaussian(&self, method: &str) -> Result<(), ModelError> {
        match self.likelihood {
            Likelihood::Gaussian => Ok(()),
            Likelihood::Bernoulli => Err(ModelError::invalid(
                format!("method {method}"),
                "a classification problem",
                "a regression problem: this method has no Bernoulli likelihood (the classification \
                 track runs BD, CD, VD, Ens, EnsAdvA, EnsBS, EnsMCD, MFVI, HMC and Det, the deterministic net)",
            )),
        }
    }

    /// Checks shapes.
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.d == 0 || self.x_train.is_empty() || !self.x_train.len().is_multiple_of(self.d) {
            return Err(ModelError::invalid(
                "training inputs",
                self.x_train.len(),
                format!("N·d values, d = {}", self.d),
            ));
        }
        if self.x_test.is_empty() || !self.x_test.len().is_multiple_of(self.d) {
            return Err(ModelError::invalid(
                "test inputs",
                self.x_test.len(),
                format!("M·d values, d = {}", self.d),
            ));
        }
        if self.y_train.len() != self.repetitions.len() || self.y_train.is_empty() {
            return Err(ModelError::invalid(
                "repetitions",
                format!(
                    "{} target sets for {} repetitions",
                    self.y_train.len(),
                    self.repetitions.len()
                ),
                "one target set per repetition, at least one",
            ));
        }
        if self.epochs == 0 {
            return Err(ModelError::invalid("epochs", 0, "at least 1"));
        }
        if self.likelihood == Likelihood::Bernoulli {
            for (k, y) in self.y_train.iter().enumerate() {
                if let Some(v) = y.iter().find(|&&v| v != 0.0 && v != 1.0) {
                    return Err(ModelError::invalid(
                        format!("training labels of repetition {}", self.repetitions[k]),
                        v,
                        "0 or 1 (a classification problem's labels)",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The replicas of a task (see [`Task::replicas`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replicas {
    /// Per replica, the index of its repetition in the task.
    pub targets: Vec<usize>,
    /// Per replica, the seed of its initial weights.
    pub init: Vec<u64>,
    /// Per replica, the seed of its stream of draws.
    pub stream: Vec<u64>,
    /// Per replica, its identifier repetition·members + member: distinct between the replicas
    /// of a (setting, method), whichever repetitions a task holds.
    pub ids: Vec<u64>,
}

/// The shape of a method's predictive distribution of f(x*), which its intervals come from
/// (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Family {
    /// Normal: mean ± z·std.
    #[default]
    Normal,
    /// Student t with `dof` degrees of freedom, location `mean` and scale `std`: mean ± t·std
    /// (the anchor with σ unknown; the naive bootstrap's t_M).
    StudentT {
        /// Degrees of freedom ν > 0.
        dof: f64,
    },
    /// The empirical distribution of the method's samples (members, MC passes or MCMC
    /// draws): intervals are their quantiles; the samples must be returned.
    Empirical,
}

/// How a method reports its intervals, as a spec setting (`intervals = "normal"` or
/// `"empirical"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalSetting {
    /// mean ± z·std of the members or passes ([000]'s mean ± 1.96·uncertainty).
    #[default]
    Normal,
    /// The empirical quantiles of the members or passes.
    Empirical,
}

impl IntervalSetting {
    /// The family this setting gives.
    pub fn family(self) -> Family {
        match self {
            IntervalSetting::Normal => Family::Normal,
            IntervalSetting::Empirical => Family::Empirical,
        }
    }
}

/// A method's result for one repetition.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RepOutput {
    /// Prediction of f at every test input.
    pub mean: Vec<f64>,
    /// Uncertainty (std of f) at every test input.
    pub std: Vec<f64>,
    /// Aleatoric noise sd at every test input, when the method models it.
    pub noise_std: Option<Vec<f64>>,
    /// The sd of the predictive distribution of a new y at every test input, when it is not
    /// sqrt(std² + noise_std²): a mean–variance ensemble's mixture has variance
    /// mean_m σ²_m + (1/M)·Σ_m (μ_m − μ̄)² (Lakshminarayanan et al. 2017), with 1/M where the
    /// uncertainty of f, the members' sample std, has 1/(M − 1).
    pub predictive_std: Option<Vec<f64>>,
    /// The noise sd that goes with each sample (one per row of `samples`), when the method
    /// draws the noise with its samples (HMC's σ draws): the predictive of y is then the
    /// mixture of N(sample, σ_s²) over the samples, not a mixture with one σ.
    pub noise_samples: Option<Vec<f64>>,
    /// The predictive distribution's family: where the intervals come from.
    pub family: Family,
    /// Member predictions or Monte-Carlo samples, one row per member or sample: when asked,
    /// and always for the [`Family::Empirical`] family.
    pub samples: Option<Vec<Vec<f64>>>,
    /// The mean prediction at the training inputs (the training fit), when the method has one.
    pub train_mean: Option<Vec<f64>>,
    /// Scalars such as `learned_p`, `final_objective` or `diverged_members`.
    pub scalars: BTreeMap<String, f64>,
    /// Whether the repetition diverged and must be left out of the metrics: its replica
    /// diverged, or for an ensemble fewer than two members (one, for a single-member
    /// ensemble) remain after dropping diverged members.
    pub diverged: bool,
}

/// A deep UQ method: trains on a task's repetitions and predicts its test inputs.
pub trait Method: Send + Sync {
    /// The method's name in specs and results (`Ens`, `BD`, …).
    fn name(&self) -> &str;

    /// Replicas trained per repetition (members for ensembles, 1 for dropout methods).
    fn replicas_per_repetition(&self) -> usize;

    /// Trains and predicts. `progress` receives the number of replicas finished.
    fn run(
        &self,
        task: &Task<'_>,
        resources: &Resources,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<RepOutput>, ModelError>;
}

/// Mean and sample standard deviation (n − 1 denominator; 0 for one row) over rows, per
/// column.
pub fn mean_std(rows: &[&[f32]]) -> (Vec<f64>, Vec<f64>) {
    let m = rows[0].len();
    let k = rows.len() as f64;
    let mut mean = vec![0.0; m];
    for r in rows {
        for (acc, v) in mean.iter_mut().zip(r.iter()) {
            *acc += f64::from(*v);
        }
    }
    for v in &mut mean {
        *v /= k;
    }
    let mut std = vec![0.0; m];
    if rows.len() > 1 {
        for r in rows {
            for ((acc, v), mu) in std.iter_mut().zip(r.iter()).zip(&mean) {
                *acc += (f64::from(*v) - mu).powi(2);
            }
        }
        for v in &mut std {
            *v = (*v / (k - 1.0)).sqrt();
        }
    }
    (mean, std)
}

/// One trained member (replica) of a repetition, as [`combine_members`] takes it.
#[derive(Debug, Clone)]
pub struct Member<'a> {
    /// Its test predictions, one row per prediction pass (one row without a stochastic
    /// layer).
    pub passes: Vec<&'a [f32]>,
    /// Its mean prediction at the training inputs.
    pub train: &'a [f32],
    /// Its final training objective.
    pub objective: f64,
    /// Whether its training diverged.
    pub diverged: bool,
}

/// The output of one repetition from its members: diverged members are dropped (counted in
/// the scalar `diverged_members`); the prediction and uncertainty are the mean and sample
/// std over the remaining members' passes, the training fit the mean of their training
/// predictions, `final_objective` the mean of their objectives. The repetition itself counts
/// as diverged when fewer than two members remain (fewer than one for a single member).
pub fn combine_members(members: &[Member<'_>], family: Family, keep_samples: bool) -> RepOutput {
    let kept: Vec<&Member<'_>> = members.iter().filter(|m| !m.diverged).collect();
    let dropped = members.len() - kept.len();
    let diverged = kept.len() < members.len().min(2);
    // A diverged repetition still reports what it has (for the record), from all members.
    let used: Vec<&Member<'_>> = if diverged {
        members.iter().collect()
    } else {
        kept
    };
    let rows: Vec<&[f32]> = used.iter().flat_map(|m| m.passes.iter().copied()).collect();
    let (mean, std) = mean_std(&rows);
    let train_rows: Vec<&[f32]> = used.iter().map(|m| m.train).collect();
    let (train_mean, _) = mean_std(&train_rows);
    let mut scalars = BTreeMap::new();
    scalars.insert(
        "final_objective".to_string(),
        used.iter().map(|m| m.objective).sum::<f64>() / used.len() as f64,
    );
    if members.len() > 1 {
        scalars.insert("diverged_members".to_string(), dropped as f64);
    }
    RepOutput {
        mean,
        std,
        noise_std: None,
        predictive_std: None,
        noise_samples: None,
        family,
        samples: (keep_samples || family == Family::Empirical).then(|| {
            rows.iter()
                .map(|r| r.iter().map(|&v| f64::from(v)).collect())
                .collect()
        }),
        train_mean: Some(train_mean),
        scalars,
        diverged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diverged_members_are_dropped_and_counted() {
        fn member<'a>(p: &'a [f32], t: &'a [f32], diverged: bool) -> Member<'a> {
            Member {
                passes: vec![p],
                train: t,
                objective: 1.0,
                diverged,
            }
        }
        let (a, b, c, t) = (
            &[1.0f32, 2.0][..],
            &[3.0f32, 4.0][..],
            &[f32::NAN, f32::NAN][..],
            &[0.5f32][..],
        );
        let out = combine_members(
            &[member(a, t, false), member(c, t, true), member(b, t, false)],
            Family::Normal,
            false,
        );
        assert!(!out.diverged);
        assert_eq!(out.mean, vec![2.0, 3.0]);
        // Sample std of {1, 3} and {2, 4}: sqrt(2).
        assert!((out.std[0] - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(out.scalars["diverged_members"], 1.0);
        // One member left of three: the repetition is left out.
        let out = combine_members(
            &[member(a, t, false), member(c, t, true), member(c, t, true)],
            Family::Normal,
            false,
        );
        assert!(out.diverged);
        assert_eq!(out.scalars["diverged_members"], 2.0);
        // A single member that did not diverge is enough on its own.
        let out = combine_members(&[member(a, t, false)], Family::Normal, false);
        assert!(!out.diverged && !out.scalars.contains_key("diverged_members"));
        // The empirical family always returns its samples.
        let out = combine_members(
            &[member(a, t, false), member(b, t, false)],
            Family::Empirical,
            false,
        );
        assert_eq!(out.samples.unwrap().len(), 2);
    }
}
