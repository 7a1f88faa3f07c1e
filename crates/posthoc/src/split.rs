//! The held-out split of a post-hoc method and what a [`crate::Calibrator`] sees of it.
//!
//! **Which points are held out.** A fixed random subset of round(fraction·N) training inputs,
//! the same in every repetition of a setting (the inputs are shared by the repetitions of a
//! task; the targets, hence the residuals, are fresh in each). It is drawn from the seed of
//! (experiment, setting, purpose `NAME/calibration`). Under `design = "random"` every
//! repetition's inputs are its own, so its held-out points are fresh draws too.
//!
//! **Its training fit** is reported over all N training points: the base's fit at the points
//! it trained on and its predictions at the held-out ones.

use uqbench_core::{Calibration, Features, MethodError, NoiseInfo, Prediction, Rng, Task};

/// The share of each repetition's training points a post-hoc method holds out by default.
pub const DEFAULT_CALIBRATION_FRACTION: f64 = 0.25;

pub(crate) fn default_fraction() -> f64 {
    DEFAULT_CALIBRATION_FRACTION
}

/// The held-out training indices (sorted) of a task with `n` points: round(`fraction`·n) of
/// them, drawn from the seed of (experiment, setting, purpose `table/calibration`).
pub fn held_out(table: &str, fraction: f64, task: &Task<'_>) -> Result<Vec<usize>, MethodError> {
    let n = task.n_train();
    let k = (fraction * n as f64).round() as usize;
    if k < 1 || n < k + 2 {
        return Err(MethodError::invalid(
            format!("[methods.{table}] calibration_fraction"),
            fraction,
            format!(
                "a share of the {n} training points that holds out at least 1 and leaves at \
                 least 2 to train on (it holds out {k})"
            ),
        ));
    }
    let purpose = format!("{table}/calibration");
    let mut rng = Rng::new(task.seeds.seed(0, 0, &purpose));
    let mut idx: Vec<usize> = (0..n).collect();
    for i in 0..k {
        let j = i + rng.below((n - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut out = idx[..k].to_vec();
    out.sort_unstable();
    Ok(out)
}

/// A task's data with some training points (the held-out ones) moved to the end of its test
/// inputs: the base trains on the rest and predicts both at once.
pub struct Split {
    fit: Vec<usize>,
    cal: Vec<usize>,
    x_train: Vec<f64>,
    y_train: Vec<Vec<f64>>,
    x_test: Vec<f64>,
    features: Option<(usize, Vec<f64>, Vec<f64>)>,
    noise_train: Vec<f64>,
    noise_test: Vec<f64>,
}

impl Split {
    /// The split of `task` that holds out the sorted training indices `cal`.
    pub fn new(task: &Task<'_>, cal: Vec<usize>) -> Split {
        let n = task.n_train();
        let fit: Vec<usize> = (0..n).filter(|i| cal.binary_search(i).is_err()).collect();
        let rows = |data: &[f64], w: usize, idx: &[usize]| -> Vec<f64> {
            idx.iter()
                .flat_map(|&i| data[i * w..(i + 1) * w].iter().copied())
                .collect()
        };
        let appended = |test: &[f64], train: &[f64], w: usize| -> Vec<f64> {
            let mut v = test.to_vec();
            v.extend(rows(train, w, &cal));
            v
        };
        let noise = |v: &[f64], idx: &[usize]| -> Vec<f64> {
            if v.len() == n {
                rows(v, 1, idx)
            } else {
                Vec::new()
            }
        };
        Split {
            x_train: rows(task.x_train, task.d, &fit),
            y_train: task.y_train.iter().map(|y| rows(y, 1, &fit)).collect(),
            x_test: appended(task.x_test, task.x_train, task.d),
            features: task.features.map(|f| {
                (
                    f.p,
                    rows(f.train, f.p, &fit),
                    appended(f.test, f.train, f.p),
                )
            }),
            noise_train: noise(task.noise.train, &fit),
            noise_test: if task.noise.train.len() == n {
                appended(task.noise.test, task.noise.train, 1)
            } else {
                Vec::new()
            },
            fit,
            cal,
        }
    }

    /// The task the base gets: the kept training points, the test inputs and then the held-out
    /// ones.
    pub fn task<'a>(&'a self, task: &Task<'a>) -> Task<'a> {
        Task {
            x_train: &self.x_train,
            y_train: &self.y_train,
            x_test: &self.x_test,
            features: self.features.as_ref().map(|(p, train, test)| Features {
                p: *p,
                train,
                test,
            }),
            noise: NoiseInfo {
                train: &self.noise_train,
                test: &self.noise_test,
                known: task.noise.known,
            },
            seeds: task.seeds.clone(),
            ..task.clone()
        }
    }
}

/// What a [`crate::Calibrator`] sees of one repetition: its task, the split and the method
/// table's name (for errors).
pub struct HeldOut<'a> {
    /// The `[methods.NAME]` table of the post-hoc method.
    pub table: &'a str,
    /// The whole task (all N training points).
    pub task: &'a Task<'a>,
    /// The split.
    pub split: &'a Split,
    /// The repetition's index in the task.
    pub k: usize,
}

impl HeldOut<'_> {
    /// The repetition's training targets at all N points.
    pub fn targets(&self) -> &[f64] {
        &self.task.y_train[self.k]
    }

    /// The held-out training indices (sorted).
    pub fn indices(&self) -> &[usize] {
        &self.split.cal
    }

    /// The training indices the base trained on (sorted).
    pub fn fit_indices(&self) -> &[usize] {
        &self.split.fit
    }

    /// The targets at the held-out points.
    pub fn labels(&self) -> Vec<f64> {
        let y = self.targets();
        self.split.cal.iter().map(|&i| y[i]).collect()
    }

    /// The problem's σ(x) at the held-out points, where the task has it.
    pub fn noise(&self) -> Vec<f64> {
        let task = self.task;
        if task.noise.train.len() == task.n_train() {
            self.split
                .cal
                .iter()
                .map(|&i| task.noise.train[i])
                .collect()
        } else {
            Vec::new()
        }
    }

    /// Replaces `out`'s training fit by the fit over all N points: the base's fit where it
    /// trained, its prediction `cal` where a point was held out.
    pub fn full_fit(&self, out: &mut Prediction, cal: &Prediction) {
        if let Some(fit) = out.train_mean.take() {
            let mut full = vec![0.0; self.task.n_train()];
            for (&i, v) in self.split.fit.iter().zip(fit) {
                full[i] = v;
            }
            for (&i, &v) in self.split.cal.iter().zip(&cal.mean) {
                full[i] = v;
            }
            out.train_mean = Some(full);
        }
    }
}

/// Attaches a repetition's calibration with its scalars: the held-out points and the rule's
/// summary.
pub fn attach(out: &mut Prediction, calibration: Calibration) {
    out.scalars
        .insert("calibration_points".into(), calibration.points() as f64);
    if let Some((name, v)) = calibration.summary_scalar() {
        out.scalars.insert(name.into(), v);
    }
    out.extra.calibration = Some(calibration);
}
