//! What a method gets: a [`Task`] (a block of repetitions of one setting, host data in f64),
//! the [`Compute`] it may use, and the [`Method`] trait every method implements (the deep
//! methods on burn, the GP and the anchor alike).

use std::any::Any;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::MethodError;
use crate::prediction::Prediction;
use crate::seed::SeedPath;

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
    /// The problem's features G at the training and test inputs when f is linear in declared
    /// features (not for a surrogate or classification problem): what the anchor and the
    /// GP's `features` kernel use.
    pub features: Option<Features<'a>>,
    /// The noise sd σ(x) at the training and test inputs and whether the problem declares it
    /// known: what the anchor uses (its weights, and its t posterior when σ's scale is
    /// estimated).
    pub noise: NoiseInfo<'a>,
    /// What the targets are: real numbers with Gaussian noise, or labels 0/1 (a
    /// classification problem, trained with the Bernoulli cross-entropy on a logit output).
    pub likelihood: Likelihood,
}

/// The features G(x) of a linear problem, row-major with `p` columns.
#[derive(Debug, Clone, Copy)]
pub struct Features<'a> {
    /// Features per input.
    pub p: usize,
    /// G at the training inputs `[N, p]`.
    pub train: &'a [f64],
    /// G at the test inputs `[M, p]`.
    pub test: &'a [f64],
}

/// The problem's noise sd at the inputs of a task.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoiseInfo<'a> {
    /// σ(x) at the training inputs.
    pub train: &'a [f64],
    /// σ(x) at the test inputs.
    pub test: &'a [f64],
    /// Whether σ is known (`sigma_known`); otherwise only its shape is, and its scale is
    /// estimated.
    pub known: bool,
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
        self.inputs_f32_by(standardize.then(|| self.input_moments()).as_deref())
    }

    /// Training and test inputs as f32, each dimension standardised by the given (mean, sd)
    /// when there are some (a warm start keeps the scale its first training saw), else as
    /// they are.
    pub fn inputs_f32_by(&self, moments: Option<&[(f64, f64)]>) -> (Vec<f32>, Vec<f32>) {
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

    /// The targets of every replica of `replicas`, replica-major `[R, N]` in f32 (what a
    /// trainer uploads).
    pub fn replica_targets_f32(&self, replicas: &Replicas) -> Vec<f32> {
        replicas
            .targets
            .iter()
            .flat_map(|&k| self.y_train[k].iter().map(|&v| v as f32))
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
    pub fn require_gaussian(&self, method: &str) -> Result<(), MethodError> {
        match self.likelihood {
            Likelihood::Gaussian => Ok(()),
            Likelihood::Bernoulli => Err(MethodError::invalid(
                format!("method {method}"),
                "a classification problem",
                "a regression problem: this method has no Bernoulli likelihood (the classification \
                 track runs BD, CD, VD, Ens, EnsAdvA, EnsBS, EnsMCD, MFVI, HMC and Det, the deterministic net)",
            )),
        }
    }

    /// Checks shapes.
    pub fn validate(&self) -> Result<(), MethodError> {
        if self.d == 0 || self.x_train.is_empty() || !self.x_train.len().is_multiple_of(self.d) {
            return Err(MethodError::invalid(
                "training inputs",
                self.x_train.len(),
                format!("N·d values, d = {}", self.d),
            ));
        }
        if self.x_test.is_empty() || !self.x_test.len().is_multiple_of(self.d) {
            return Err(MethodError::invalid(
                "test inputs",
                self.x_test.len(),
                format!("M·d values, d = {}", self.d),
            ));
        }
        if self.y_train.len() != self.repetitions.len() || self.y_train.is_empty() {
            return Err(MethodError::invalid(
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
            return Err(MethodError::invalid("epochs", 0, "at least 1"));
        }
        if self.likelihood == Likelihood::Bernoulli {
            for (k, y) in self.y_train.iter().enumerate() {
                if let Some(v) = y.iter().find(|&&v| v != 0.0 && v != 1.0) {
                    return Err(MethodError::invalid(
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

/// Where and how a method runs: worker threads and memory for every method, and for the
/// methods on burn the backend's device, opaque here (`uqbench_engine::trainer::Resources` reads it),
/// so that this crate and the methods without burn never see it.
#[derive(Clone)]
pub struct Compute {
    /// The backend's name (`flex`, `ndarray`, `wgpu`, `cuda`).
    pub backend: String,
    /// Whether the backend is a GPU.
    pub gpu: bool,
    /// Worker threads (CPU backends; a GPU device uses one).
    pub threads: usize,
    /// Upper bound on the memory a training chunk's tensors may take, in bytes.
    pub memory_budget: usize,
    /// Replicas per training chunk; `None` chooses from the memory budget.
    pub chunk: Option<usize>,
    /// The backend's device (a `burn::tensor::Device`), when a backend was opened.
    pub device: Option<Arc<dyn Any + Send + Sync>>,
    /// How a CPU backend trains and samples: in loops per replica on the host (the default,
    /// faster) or as batched tensors; a setting of the run, recorded in `run.json`.
    pub host_loops: bool,
    /// The widest instruction set the host loops may use (they give the same bits at every
    /// level; a cap is for comparing speeds).
    pub simd: SimdCap,
}

/// The widest instruction set the host loops may use: the CPU's best (AVX-512, AVX2 or the
/// baseline) or a cap below it (`--simd`, `UQBENCH_SIMD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimdCap {
    /// The CPU's widest.
    #[default]
    Best,
    /// At most AVX2 (leaves AVX-512 out).
    Avx2,
    /// The build's baseline (SSE2 on x86-64).
    Baseline,
}

impl std::str::FromStr for SimdCap {
    type Err = MethodError;

    fn from_str(s: &str) -> Result<SimdCap, MethodError> {
        match s.to_ascii_lowercase().as_str() {
            "best" | "" => Ok(SimdCap::Best),
            "avx2" => Ok(SimdCap::Avx2),
            "baseline" => Ok(SimdCap::Baseline),
            other => Err(MethodError::invalid(
                "simd",
                other,
                "best (the CPU's widest), avx2 or baseline",
            )),
        }
    }
}

impl std::fmt::Debug for Compute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compute")
            .field("backend", &self.backend)
            .field("gpu", &self.gpu)
            .field("threads", &self.threads)
            .field("memory_budget", &self.memory_budget)
            .field("chunk", &self.chunk)
            .field("host_loops", &self.host_loops)
            .field("simd", &self.simd)
            .finish_non_exhaustive()
    }
}

impl Compute {
    /// The same compute on one worker thread (a task of several trained side by side).
    pub fn one_thread(&self) -> Compute {
        Compute {
            threads: 1,
            ..self.clone()
        }
    }

    /// The host only: all cores, no device (what methods without burn need; the tests of
    /// such methods use it).
    pub fn host() -> Compute {
        Compute {
            backend: "host".into(),
            gpu: false,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_budget: 2 << 30,
            chunk: None,
            device: None,
            host_loops: true,
            simd: SimdCap::Best,
        }
    }
}

/// A UQ method: trains on a task's repetitions and predicts its test inputs, one
/// [`Prediction`] per repetition in the task's order.
pub trait Method: Send + Sync {
    /// The method's name in specs and results (`Ens`, `BD`, …).
    fn name(&self) -> &str;

    /// Replicas trained per repetition (members for ensembles, 1 for dropout methods).
    fn replicas_per_repetition(&self) -> usize;

    /// The expected work of one repetition on `n_train` points with `epochs` of training, in
    /// replica-steps over one training point: what balances shards of a run (only ratios
    /// between methods matter). By default replicas × epochs × N.
    fn cost(&self, n_train: usize, epochs: usize) -> f64 {
        (self.replicas_per_repetition().max(1) * epochs.max(1) * n_train) as f64
    }

    /// The number of parameters one repetition fits (all members of an ensemble; a mean and
    /// an sd per weight for MFVI), reported as the scalar `parameters`; `None` where it has
    /// no fixed count (the GP).
    fn parameters(&self, _task: &Task<'_>) -> Option<usize> {
        None
    }

    /// Checks what the method needs of `task` before anything trains (a noise sd it takes as
    /// known against the problem's, draws against epochs, …), with the errors `run` would
    /// give: `uqbench check` and the start of a run call it for every setting, so that a
    /// configuration error surfaces in the first second, not after hours. `levels`: every
    /// interval level the run scores (its levels and 0.95). By default nothing beyond the task
    /// itself.
    fn check(&self, task: &Task<'_>, _levels: &[f64]) -> Result<(), MethodError> {
        task.validate()
    }

    /// The central levels of the quantile bands its intervals of y come from (quantile
    /// regression and CQR); None for a method with a predictive distribution. A run's levels
    /// (and 0.95) must be among them.
    fn band_levels(&self) -> Option<Vec<f64>> {
        None
    }

    /// The method's warm start, when it can continue a previous training on more data (the
    /// decision track's `update = "warm"`); `None` (the default) when every training starts
    /// from scratch.
    fn warm_start(&self) -> Option<&dyn WarmStart> {
        None
    }

    /// Trains and predicts. `progress` receives the number of replicas finished.
    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError>;

    /// Trains and predicts several tasks (the decision track's repetitions at one step, each
    /// with the data its agent gathered): one prediction list per task, in order, each what
    /// `run` gives on that task alone. By default `run` on every task, the tasks spread over
    /// the cores (each task's training on one thread); a method whose trainings can share one
    /// engine job (the ensembles, ensemble+, SG-MCMC and the dropout family on the built-in
    /// network) trains them as one, batched across tasks × members, which a GPU runs in one
    /// program per step.
    fn run_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        run_each(self, tasks, compute, keep_samples)
    }
}

/// [`Method::run_tasks`]'s default: `run` on every task, the tasks spread over the cores
/// (for a method whose override trains some sets of tasks as one job and the rest alone).
pub fn run_each(
    method: &(impl Method + ?Sized),
    tasks: &[Task<'_>],
    compute: &Compute,
    keep_samples: bool,
) -> Result<Vec<Vec<Prediction>>, MethodError> {
    let one = compute.one_thread();
    crate::par_map(tasks.len(), |k| {
        method.run(&tasks[k], &one, keep_samples, &|_| {})
    })
    .into_iter()
    .collect()
}

/// [`WarmStart::run_warm_tasks`]'s default (see [`run_each`]).
pub fn run_warm_each(
    warm: &(impl WarmStart + ?Sized),
    tasks: &[Task<'_>],
    compute: &Compute,
    keep_samples: bool,
    from: &[Option<&WarmState>],
) -> Result<Vec<(Vec<Prediction>, WarmState)>, MethodError> {
    if from.len() != tasks.len() {
        return Err(MethodError::invalid(
            "warm states",
            from.len(),
            format!("one per task ({})", tasks.len()),
        ));
    }
    let one = compute.one_thread();
    crate::par_map(tasks.len(), |k| {
        warm.run_warm(&tasks[k], &one, keep_samples, from[k])
    })
    .into_iter()
    .collect()
}

/// A method's state after a training, opaque (the method's own: a network's weights and the
/// scale of the inputs it saw), for a [`WarmStart`] to continue from.
pub type WarmState = Arc<dyn Any + Send + Sync>;

/// A method that continues its training from the state a previous training left (the decision
/// track's `update = "warm"`: at every step the agent's networks keep their weights and train
/// on the grown data, instead of starting from scratch).
pub trait WarmStart: Send + Sync {
    /// Trains on `task` from `from` (a state this method returned for the same repetitions, in
    /// the task's order; `None`: from scratch, as [`Method::run`]), predicts as `run` does,
    /// and returns the state after this training beside the predictions. The task's seeds
    /// key the training's streams (mini-batches, noise) as in `run`.
    fn run_warm(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        from: Option<&WarmState>,
    ) -> Result<(Vec<Prediction>, WarmState), MethodError>;

    /// [`WarmStart::run_warm`] on several tasks, task `k` from `from[k]` (as
    /// [`Method::run_tasks`]: by default each task in turn, spread over the cores; the
    /// ensembles train them as one job).
    fn run_warm_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
        from: &[Option<&WarmState>],
    ) -> Result<Vec<(Vec<Prediction>, WarmState)>, MethodError> {
        run_warm_each(self, tasks, compute, keep_samples, from)
    }
}
