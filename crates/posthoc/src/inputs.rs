//! `inputs = "features"`: any method sees the problem's features G(x) as its inputs instead
//! of x ([`FeatureInputs`]). With `hidden = []` a network is then linear in the features,
//! the model class of the anchor, which makes the exact limits of the methods testable
//! (Laplace, HMC and MFVI on the linear model against the exact posterior).
//!
//! Features that are constant over the training inputs (the intercept of a polynomial) are
//! dropped: the network's output bias stands for them, and keeping them would make the linear
//! network's parameters unidentifiable (a flat-prior posterior would not exist).

use uqbench_core::{Compute, Method, MethodError, Prediction, Task};

/// A method trained and evaluated on the features G(x) of a linear problem.
pub struct FeatureInputs {
    base: Box<dyn Method>,
}

impl FeatureInputs {
    /// `base` with the features as its inputs.
    pub fn new(base: Box<dyn Method>) -> FeatureInputs {
        FeatureInputs { base }
    }
}

/// The columns of `train` (row-major, `p` columns) that vary over its rows.
fn varying_columns(train: &[f64], p: usize) -> Vec<usize> {
    (0..p)
        .filter(|&j| {
            let first = train[j];
            train.iter().skip(j).step_by(p).any(|&v| v != first)
        })
        .collect()
}

fn select(data: &[f64], p: usize, cols: &[usize]) -> Vec<f64> {
    data.chunks(p)
        .flat_map(|row| cols.iter().map(move |&j| row[j]))
        .collect()
}

impl Method for FeatureInputs {
    fn name(&self) -> &str {
        self.base.name()
    }

    fn replicas_per_repetition(&self) -> usize {
        self.base.replicas_per_repetition()
    }

    fn cost(&self, n_train: usize, epochs: usize) -> f64 {
        self.base.cost(n_train, epochs)
    }

    fn check(&self, task: &Task<'_>, levels: &[f64]) -> Result<(), MethodError> {
        // What the features change (the inputs, their number) is checked by run; the rest of
        // the base's configuration does not depend on them.
        self.base.check(task, levels)
    }

    fn band_levels(&self) -> Option<Vec<f64>> {
        self.base.band_levels()
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        let f = task.features?;
        let d = varying_columns(f.train, f.p).len();
        self.base.parameters(&Task {
            d,
            seeds: task.seeds.clone(),
            ..task.clone()
        })
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let Some(f) = task.features else {
            return Err(MethodError::invalid(
                format!("[methods.{}] inputs", self.base.name()),
                "\"features\"",
                "\"x\" here: the problem has no declared features (a surrogate or \
                 classification problem)",
            ));
        };
        let cols = varying_columns(f.train, f.p);
        if cols.is_empty() {
            return Err(MethodError::invalid(
                format!("[methods.{}] inputs", self.base.name()),
                "\"features\"",
                "a problem with at least one feature that varies over the training inputs",
            ));
        }
        let (x_train, x_test) = (select(f.train, f.p, &cols), select(f.test, f.p, &cols));
        let sub = Task {
            d: cols.len(),
            x_train: &x_train,
            x_test: &x_test,
            seeds: task.seeds.clone(),
            ..task.clone()
        };
        self.base.run(&sub, compute, keep_samples, progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_columns_are_dropped() {
        // Rows [1, x, 5]: only the middle column varies.
        let g = [1.0, 0.5, 5.0, 1.0, -0.5, 5.0, 1.0, 2.0, 5.0];
        assert_eq!(varying_columns(&g, 3), vec![1]);
        assert_eq!(select(&g, 3, &[1]), vec![0.5, -0.5, 2.0]);
    }
}
