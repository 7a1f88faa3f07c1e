//! The seam between learning and evaluation: what a method gets (a [`Task`]) and what it
//! returns (one [`RepOutput`] per repetition, on the host, in f64).

use std::collections::BTreeMap;

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
    /// Seed context.
    pub seeds: SeedBase,
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
        };
        for (k, &rep) in self.repetitions.iter().enumerate() {
            for m in 0..members as u64 {
                r.targets.push(k);
                r.init.push(self.seeds.seed(rep, m, &init_purpose));
                r.stream.push(self.seeds.seed(rep, m, &stream_purpose));
            }
        }
        r
    }

    /// Per input dimension, max − min of the training inputs.
    pub fn input_range(&self) -> Vec<f64> {
        (0..self.d)
            .map(|j| {
                let col = self.x_train.iter().skip(j).step_by(self.d);
                let (lo, hi) = col.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                });
                hi - lo
            })
            .collect()
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
    /// Member predictions or Monte-Carlo samples, one row per member or sample, when asked.
    pub samples: Option<Vec<Vec<f64>>>,
    /// Scalars such as `learned_p` or `final_loss`.
    pub scalars: BTreeMap<String, f64>,
    /// Whether training diverged (any member or the replica itself).
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
