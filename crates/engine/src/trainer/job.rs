//! A training job: shared inputs (or inputs per target), per-repetition targets and the
//! replicas' seeds.

use crate::mlp::{xavier_init, HostWeights, MlpShape};
use uqbench_core::MethodError;

/// Everything a training job needs: the shared inputs, per-repetition targets and the
/// replicas' seeds.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    /// The network.
    pub shape: &'a MlpShape,
    /// Training inputs, row-major `[N, d]`, shared by all replicas.
    pub x_train: &'a [f32],
    /// Training targets per repetition, each of length N.
    pub targets: &'a [Vec<f32>],
    /// For every replica, the index of its targets in `targets`.
    pub replica_targets: &'a [usize],
    /// For every replica, the seed of its initial weights.
    pub init_seeds: &'a [u64],
    /// For every replica, the seed of its stream of mini-batch (or resample) and dropout
    /// draws.
    pub stream_seeds: &'a [u64],
    /// For every replica, its identifier within the (setting, method) job, distinct between
    /// replicas: repetition·members + member ([`uqbench_core::Task::replicas`]). It keys the
    /// replica's device streams so that no two replicas share one (`crate::device_rng`).
    pub replica_ids: &'a [u64],
    /// Test inputs, row-major `[M, d]`.
    pub x_test: &'a [f32],
    /// Every replica's initial weights (a warm start: the decision track's `update =
    /// "warm"`), in place of Xavier's from `init_seeds`; `None` for a fresh start. Read by
    /// the built-in network's executions ([`super::train`]) through
    /// [`Job::initial_weights`]; a method's own network starts from its own seeds.
    pub init: Option<&'a HostWeights>,
    /// The inputs of every entry of `targets` where they differ between targets (the
    /// decision track's repetitions, each agent with the inputs it pulled, trained as one
    /// job: `crate::trainer::train_tasks`), one per target, each of `x_train`'s and
    /// `x_test`'s lengths; `None`: every target's inputs are `x_train` and `x_test`. Read
    /// through [`Job::x_train_of`] and [`Job::x_test_of`] (host loops, per replica) and
    /// [`Job::chunk_inputs`] (tensor programs) by the built-in network's executions and by
    /// the networks of their own (the epinet, BatchEnsemble); the autodiff route refuses them.
    pub inputs: Option<&'a [Inputs]>,
}

/// One target's own inputs, row-major (see [`Job::inputs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// Training inputs `[N, d]`.
    pub x_train: Vec<f32>,
    /// Test inputs `[M, d]`.
    pub x_test: Vec<f32>,
}

impl Job<'_> {
    /// Training points N.
    pub fn n_train(&self) -> usize {
        self.x_train.len() / self.shape.d_in
    }

    /// The initial weights of replicas `range`: [`Job::init`]'s when given, else Xavier's
    /// from their `init_seeds`.
    pub fn initial_weights(&self, range: std::ops::Range<usize>) -> HostWeights {
        match self.init {
            Some(w) => w.select(range),
            None => xavier_init(self.shape, &self.init_seeds[range]),
        }
    }

    /// The training inputs of `targets[t]`, `[N, d]`: its own ([`Job::inputs`]) or the
    /// shared ones.
    pub fn x_train_of(&self, t: usize) -> &[f32] {
        match self.inputs {
            Some(inputs) => &inputs[t].x_train,
            None => self.x_train,
        }
    }

    /// The test inputs of `targets[t]`, `[M, d]`: its own ([`Job::inputs`]) or the shared
    /// ones.
    pub fn x_test_of(&self, t: usize) -> &[f32] {
        match self.inputs {
            Some(inputs) => &inputs[t].x_test,
            None => self.x_test,
        }
    }

    /// Replicas `range`'s training inputs (the test inputs when `test`) as one block for a
    /// tensor program: the shared ones `[1, points, d]` (broadcast over the replicas), or
    /// each replica's own ([`Job::inputs`]) stacked `[replicas, points, d]`.
    pub fn chunk_inputs(
        &self,
        range: &std::ops::Range<usize>,
        test: bool,
    ) -> (Vec<f32>, [usize; 3]) {
        let d = self.shape.d_in;
        let of = |t: usize| {
            if test {
                self.x_test_of(t)
            } else {
                self.x_train_of(t)
            }
        };
        match self.inputs {
            None => {
                let x = of(0);
                (x.to_vec(), [1, x.len() / d, d])
            }
            Some(_) => {
                let rows: Vec<&[f32]> =
                    range.clone().map(|r| of(self.replica_targets[r])).collect();
                let points = rows[0].len() / d;
                (rows.concat(), [rows.len(), points, d])
            }
        }
    }

    /// An error naming `who` when the job's targets have inputs of their own, which `who`
    /// (a network that takes one set of inputs) cannot train on.
    pub fn require_shared_inputs(&self, who: &str) -> Result<(), MethodError> {
        match self.inputs {
            None => Ok(()),
            Some(_) => Err(MethodError::invalid(
                format!("{who}'s training inputs"),
                "inputs of their own per target",
                "one set of inputs shared by every replica (Job::inputs = None)",
            )),
        }
    }

    /// Test points M.
    pub fn n_test(&self) -> usize {
        self.x_test.len() / self.shape.d_in
    }

    /// Replicas `range`'s targets, each repeated `copies` times in a row (one block per
    /// member or index sample): `[replicas, copies·N]` row-major, for a network whose
    /// replicas stack several copies of the points.
    pub fn tiled_targets(&self, range: &std::ops::Range<usize>, copies: usize) -> Vec<f32> {
        let mut y = Vec::with_capacity(range.len() * copies * self.n_train());
        for r in range.clone() {
            for _ in 0..copies {
                y.extend_from_slice(&self.targets[self.replica_targets[r]]);
            }
        }
        y
    }

    /// The most points a pass takes: N or M.
    pub fn most_points(&self) -> usize {
        self.n_train().max(self.n_test())
    }

    /// Replicas R.
    pub fn replicas(&self) -> usize {
        self.replica_targets.len()
    }

    /// The [`super::Layout`] of a model on this job's replicas and points, with `outputs` per
    /// test point and `passes` prediction passes, reporting no rate.
    pub fn layout(&self, outputs: usize, passes: usize) -> super::Layout {
        super::Layout {
            replicas: self.replicas(),
            n_train: self.n_train(),
            n_test: self.n_test(),
            outputs,
            passes,
            rates: false,
        }
    }

    /// Checks the targets' own inputs ([`Job::inputs`]): one per target, each of `x_train`'s
    /// and `x_test`'s lengths.
    fn validate_own_inputs(&self) -> Result<(), MethodError> {
        if let Some(inputs) = self.inputs {
            if inputs.len() != self.targets.len() {
                return Err(MethodError::invalid(
                    "inputs per target",
                    inputs.len(),
                    format!("one per target ({})", self.targets.len()),
                ));
            }
            let (nx, mx) = (self.x_train.len(), self.x_test.len());
            if let Some((t, i)) = (inputs.iter().enumerate())
                .find(|(_, i)| i.x_train.len() != nx || i.x_test.len() != mx)
            {
                return Err(MethodError::invalid(
                    format!("inputs of target {t}"),
                    format!(
                        "{} training and {} test values",
                        i.x_train.len(),
                        i.x_test.len()
                    ),
                    format!("{nx} and {mx}: every target's N·d and M·d, as x_train's and x_test's"),
                ));
            }
        }
        Ok(())
    }

    /// Checks the job's shapes: inputs, targets and seeds against the network and replicas.
    pub fn validate(&self) -> Result<(), MethodError> {
        self.shape.validate()?;
        let d = self.shape.d_in;
        if self.x_train.is_empty() || !self.x_train.len().is_multiple_of(d) {
            return Err(MethodError::invalid(
                "training inputs",
                self.x_train.len(),
                format!("N·d values with d = {d}, N ≥ 1"),
            ));
        }
        if self.x_test.is_empty() || !self.x_test.len().is_multiple_of(d) {
            return Err(MethodError::invalid(
                "test inputs",
                self.x_test.len(),
                format!("M·d values with d = {d}, M ≥ 1"),
            ));
        }
        let n = self.n_train();
        if let Some((i, t)) = self.targets.iter().enumerate().find(|(_, t)| t.len() != n) {
            return Err(MethodError::invalid(
                format!("targets[{i}]"),
                format!("{} values", t.len()),
                format!("N = {n} values"),
            ));
        }
        let r = self.replicas();
        if r == 0 {
            return Err(MethodError::invalid("replicas", 0, "at least 1"));
        }
        if self.init_seeds.len() != r || self.stream_seeds.len() != r || self.replica_ids.len() != r
        {
            return Err(MethodError::invalid(
                "replica seeds",
                format!(
                    "{} init seeds, {} stream seeds and {} identifiers",
                    self.init_seeds.len(),
                    self.stream_seeds.len(),
                    self.replica_ids.len()
                ),
                format!("one of each per replica ({r})"),
            ));
        }
        if let Some(&id) = self
            .replica_ids
            .iter()
            .find(|&&id| id >= crate::device_rng::MAX_REPLICA_ID)
        {
            return Err(MethodError::invalid(
                "replica identifier (repetition·members + member)",
                id,
                format!(
                    "below {}: fewer repetitions × members per setting",
                    crate::device_rng::MAX_REPLICA_ID
                ),
            ));
        }
        if let Some(&t) = self
            .replica_targets
            .iter()
            .find(|&&t| t >= self.targets.len())
        {
            return Err(MethodError::invalid(
                "replica target index",
                t,
                format!("an index below {}", self.targets.len()),
            ));
        }
        if let Some(w) = self.init {
            w.validate(self.shape, r)?;
        }
        self.validate_own_inputs()?;
        let own = self.inputs.unwrap_or_default();
        let all = [self.x_train, self.x_test]
            .into_iter()
            .chain(own.iter().flat_map(|i| [&i.x_train[..], &i.x_test[..]]));
        for (k, v) in all.enumerate() {
            if v.iter().any(|x| !x.is_finite()) {
                let name = if k % 2 == 0 {
                    "training inputs"
                } else {
                    "test inputs"
                };
                return Err(MethodError::invalid(
                    name,
                    "a non-finite value",
                    "finite numbers",
                ));
            }
        }
        if self.targets.iter().flatten().any(|y| !y.is_finite()) {
            return Err(MethodError::invalid(
                "training targets",
                "a non-finite value",
                "finite numbers",
            ));
        }
        Ok(())
    }
}
