//! A problem's data for a block of repetitions, in the form a method's [`Task`] borrows: the
//! training inputs and each repetition's targets, the test inputs (then the validation inputs
//! when a run estimates the noise from them), the features G at those inputs for a linear
//! problem, and σ(x).

use uqbench_core::{Features, Likelihood, NoiseInfo, SeedBase, Task};

use crate::problem::Problem;

/// The owned arrays behind a [`Task`] for repetitions of one setting of a problem.
#[derive(Debug, Clone)]
pub struct TaskData {
    /// The repetitions.
    pub repetitions: Vec<u64>,
    /// Each repetition's training targets (labels 0/1 for a classification problem).
    pub y: Vec<Vec<f64>>,
    /// Each repetition's validation targets, when the problem has a validation set.
    pub validation_y: Vec<Vec<f64>>,
    /// The inputs the methods predict: the test inputs, then the validation inputs when
    /// `with_validation`.
    pub x_test: Vec<f64>,
    /// The number of test inputs among them (the rest are validation inputs).
    pub m_test: usize,
    /// σ(x) at those inputs.
    pub test_sigma: Vec<f64>,
    /// G at the training inputs and at `x_test`, and p, for a linear problem.
    pub features: Option<(usize, Vec<f64>, Vec<f64>)>,
    d: usize,
    x_train: Vec<f64>,
    train_sigma: Vec<f64>,
    sigma_known: bool,
    known_sigma: Option<f64>,
    likelihood: Likelihood,
}

impl Problem {
    /// The data of repetitions `reps`: their targets drawn from the problem's seeds, and with
    /// `with_validation` (a problem with a validation set) the validation inputs appended to
    /// the test inputs.
    pub fn task_data(&self, reps: &[u64], with_validation: bool) -> TaskData {
        let draws: Vec<_> = reps.iter().map(|&r| self.draw(r)).collect();
        let valid = self.validation.as_ref().filter(|_| with_validation);
        let mut x_test = self.test.inputs.as_slice().to_vec();
        let mut test_sigma = self.test.sigma.clone();
        if let Some((x, sigma, _)) = valid {
            x_test.extend_from_slice(x.as_slice());
            test_sigma.extend_from_slice(sigma);
        }
        let d = self.d();
        let features = self.linear().map(|(map, _)| {
            let p = map.p();
            let eval = |x: &[f64]| {
                let mut out = vec![0.0; x.len() / d * p];
                for (row, g) in x.chunks(d).zip(out.chunks_mut(p)) {
                    map.eval_into(row, g);
                }
                out
            };
            (p, eval(self.train.inputs.as_slice()), eval(&x_test))
        });
        TaskData {
            repetitions: reps.to_vec(),
            validation_y: draws
                .iter()
                .filter_map(|d| d.validation_y.clone())
                .collect(),
            y: draws.into_iter().map(|d| d.train_y).collect(),
            m_test: self.test.truth.len(),
            x_test,
            test_sigma,
            features,
            d,
            x_train: self.train.inputs.as_slice().to_vec(),
            train_sigma: self.train_sigma.clone(),
            sigma_known: self.sigma_known,
            known_sigma: self.known_sigma(),
            likelihood: if self.classification().is_some() {
                Likelihood::Bernoulli
            } else {
                Likelihood::Gaussian
            },
        }
    }
}

impl TaskData {
    /// The task over this data: `epochs` of training, seeds from `seeds`.
    pub fn task(&self, epochs: usize, seeds: SeedBase) -> Task<'_> {
        Task {
            d: self.d,
            x_train: &self.x_train,
            y_train: &self.y,
            repetitions: &self.repetitions,
            x_test: &self.x_test,
            epochs,
            known_sigma: self.known_sigma,
            seeds,
            features: self.features.as_ref().map(|(p, train, test)| Features {
                p: *p,
                train,
                test,
            }),
            noise: NoiseInfo {
                train: &self.train_sigma,
                test: &self.test_sigma,
                known: self.sigma_known,
            },
            likelihood: self.likelihood,
        }
    }
}
