//! The epinet (Osband, Wen, Asghari, Dwaracherla, Ibrahimi, Lu & Van Roy 2023, "Epistemic
//! neural networks"), spec §11: one base network μ(x) and a small epinet beside it, which
//! together give a function f(x, z) for every index z ∼ N(0, I_D); one z is one function, so
//! its draws are joint across inputs. Network and training: [`net`].
//!
//! **The reference implementation's convention** (the Neural Testbed's `epinet` agent on
//! `enn`'s `make_mlp_epinet`), and where uqbench departs from it:
//! - the epinet's input is (z, φ(x)) with φ(x) = sg[(x, h_L(x))], the inputs and the base's
//!   last hidden layer, gradients stopped (`ExposedMLP` with `expose_layers` on the last
//!   hidden layer); its D outputs are dotted with z (`ProjectedMLP`), ReLU hidden layers
//!   of widths `epinet_hidden` (15, 15);
//! - the prior: the Testbed's agent sets the epinet-shaped prior's scale to 0 and adds
//!   β·Σ_d z_d p_d(x), D fixed random ReLU MLPs of widths `prior_hidden` (5, 5) on the
//!   inputs (`make_mlp_ensemble_prior_fns`, `combine_functions_linear_in_index`), β =
//!   `prior_scale` 0.3 (the agent's 0.3 divided by the Testbed's temperature, 1 for
//!   regression). uqbench takes that form. p_d's weights are drawn by haiku's default
//!   `Linear` initialiser, `TruncatedNormal(stddev = 1/√fan_in)`: a normal truncated at ±2
//!   sd and not rescaled, so their sd is 0.8796/√fan_in; biases 0;
//! - the loss is the data loss averaged over K index samples per step, K = `index_samples`
//!   (the agent's `average_single_index_loss(…, index_dim)`: K = D);
//! - D = `index_dim` 8;
//! - departures, for uqbench's shared conventions: the base network, its initialiser
//!   (Glorot), its leaky ReLU, the optimiser (Adam with the method's `lr`) and the L2 term
//!   (λ on the weights of the base and the epinet, not the biases, 1/N unless set; the
//!   Testbed's 0.2·(d/N)^0.7 on every trainable parameter) are those of every network method
//!   here, so that Epinet differs from Ens by its epinet only; training is full-batch (the
//!   Testbed draws mini-batches of 100), `batch_size` is refused.
//!
//! Prediction: T = `passes` indices per repetition, each a function at every test input;
//! the uncertainty of f is the sd over them, the intervals from `intervals` (normal or their
//! empirical quantiles), the joint from the draws themselves.

pub mod host;
pub mod net;

use serde::{Deserialize, Serialize};

use crate::host_net::{self, TrainedNet};
use crate::own_net::{per_task, repetition_seeds, run_one, run_together, OwnNetJob};
use net::EpinetParts;
use uqbench_core::{par_map, Compute, IntervalSetting, Method, MethodError, Prediction, Task};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::mlp::MlpShape;
use uqbench_engine::trainer::{Inputs, Resources};

/// The epinet's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EpinetSettings {
    /// Index dimension D (8).
    pub index_dim: usize,
    /// The epinet's hidden widths (15, 15).
    pub epinet_hidden: Vec<usize>,
    /// β, the additive prior's scale (0.3; 0: no prior).
    pub prior_scale: f64,
    /// The prior networks' hidden widths (5, 5).
    pub prior_hidden: Vec<usize>,
    /// Index samples K per training step; D when unset.
    pub index_samples: Option<usize>,
    /// Index samples T at prediction (100).
    pub passes: usize,
    /// Intervals from mean ± z·std of the index samples (`normal`) or their quantiles.
    pub intervals: IntervalSetting,
}

impl Default for EpinetSettings {
    fn default() -> Self {
        EpinetSettings {
            index_dim: 8,
            epinet_hidden: vec![15, 15],
            prior_scale: 0.3,
            prior_hidden: vec![5, 5],
            index_samples: None,
            passes: 100,
            intervals: IntervalSetting::Normal,
        }
    }
}

/// Settings of the epinet: the base network, the optimiser and [`EpinetSettings`].
pub type EpinetConfig = MethodConfig<EpinetSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct Epinet {
    name: String,
    config: EpinetConfig,
}

impl Epinet {
    /// Checks the settings up front.
    pub fn new(name: &str, config: EpinetConfig) -> Result<Epinet, MethodError> {
        let c = &config;
        let positive = |key: &str, v: usize| {
            if v == 0 {
                Err(MethodError::invalid(
                    format!("{name}.{key}"),
                    0,
                    "at least 1",
                ))
            } else {
                Ok(())
            }
        };
        positive("index_dim", c.index_dim)?;
        positive("passes", c.passes)?;
        positive("index_samples", c.index_samples.unwrap_or(1))?;
        if !(c.prior_scale.is_finite() && c.prior_scale >= 0.0) {
            return Err(MethodError::invalid(
                format!("{name}.prior_scale"),
                c.prior_scale,
                "a number ≥ 0 (0: no prior)",
            ));
        }
        if c.net.hidden.is_empty() {
            return Err(MethodError::invalid(
                format!("{name}.hidden"),
                "[]",
                "at least one hidden layer: the epinet reads the base's last hidden layer",
            ));
        }
        for (key, widths) in [
            ("epinet_hidden", &c.epinet_hidden),
            ("prior_hidden", &c.prior_hidden),
        ] {
            if widths.contains(&0) {
                return Err(MethodError::invalid(
                    format!("{name}.{key}"),
                    format!("{widths:?}"),
                    "positive widths (or [] for a linear map)",
                ));
            }
        }
        if let Some(b) = c.optim.batch_size {
            return Err(MethodError::invalid(
                format!("{name}.batch_size"),
                b,
                "unset: the epinet trains on full batches",
            ));
        }
        c.net.shape(1, 1).validate()?;
        Ok(Epinet {
            name: name.to_string(),
            config,
        })
    }

    /// The epinet's shape for `d` inputs.
    fn epi_shape(&self, d: usize) -> MlpShape {
        let c = &self.config;
        let h = *c.net.hidden.last().expect("checked in new");
        MlpShape {
            d_in: c.index_dim + d + h,
            hidden: c.epinet_hidden.clone(),
            d_out: c.index_dim,
            negative_slope: 0.0,
        }
    }

    /// Prior network p_d of one repetition: ReLU, weights from haiku's default initialiser
    /// (a normal of sd 1/√fan_in truncated at ±2 sd), biases 0.
    fn prior_net(&self, d: usize, seed: u64) -> TrainedNet {
        let shape = MlpShape {
            d_in: d,
            hidden: self.config.prior_hidden.clone(),
            d_out: 1,
            negative_slope: 0.0,
        };
        TrainedNet::truncated_normal(&shape, seed, |fan_in| (fan_in as f64).recip().sqrt())
    }
}

impl Method for Epinet {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        let base = self.config.net.shape(task.d, 1).parameters();
        Some(base + self.epi_shape(task.d).parameters())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        run_one(task, |tasks| {
            self.train(tasks, compute, keep_samples, progress)
        })
    }

    /// The tasks as one engine job when they can share one, else side by side.
    fn run_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        run_together(self, tasks, compute, keep_samples, |tasks| {
            self.train(tasks, compute, keep_samples, &|_| {})
        })
    }
}

impl Epinet {
    /// Every task's repetitions trained as one job ([`OwnNetJob::of_tasks`]; the caller
    /// validated the tasks and checked that they can share one).
    fn train(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        let c = &self.config;
        let resources = &Resources::of(compute)?;
        let data = OwnNetJob::of_tasks(tasks, &self.name, c);
        let (mut epi_seeds, mut prior_train, mut prior_test) = (Vec::new(), Vec::new(), Vec::new());
        for (task, inputs) in tasks.iter().zip(&data.inputs) {
            epi_seeds.extend(repetition_seeds(task, &format!("{}/epinet", self.name)));
            for (train, test) in self.priors(task, inputs) {
                prior_train.extend(train);
                prior_test.extend(test);
            }
        }
        let parts = EpinetParts {
            epi: self.epi_shape(tasks[0].d),
            epi_seeds: &epi_seeds,
            prior_train: &prior_train,
            prior_test: &prior_test,
            prior_scale: c.prior_scale,
            index_samples: c.index_samples.unwrap_or(c.index_dim),
            passes: c.passes,
        };
        let out = net::train(&data.job(), &parts, &data.settings, resources, progress)?;
        Ok(per_task(
            out,
            tasks,
            &data.counts,
            c.intervals.family(),
            keep_samples,
        ))
    }

    /// Per repetition of `task`: the D prior functions at its (standardised) training and
    /// test inputs, `[points, D]` row-major each (zeros without a prior).
    fn priors(&self, task: &Task<'_>, inputs: &Inputs) -> Vec<(Vec<f32>, Vec<f32>)> {
        let c = &self.config;
        let (n, mt, dz) = (task.n_train(), task.n_test(), c.index_dim);
        let (rows_train, rows_test) = (
            host_net::inputs(&inputs.x_train, task.d),
            host_net::inputs(&inputs.x_test, task.d),
        );
        let prior_purpose = format!("{}/prior", self.name);
        par_map(task.repetitions.len(), |k| {
            let rep = task.repetitions[k];
            let (mut train, mut test) = (vec![0.0f32; n * dz], vec![0.0f32; mt * dz]);
            if c.prior_scale > 0.0 {
                for j in 0..dz {
                    let net =
                        self.prior_net(task.d, task.seeds.seed(rep, j as u64, &prior_purpose));
                    for (out, rows) in [(&mut train, &rows_train), (&mut test, &rows_test)] {
                        for (i, v) in net.forward_batch(rows).into_iter().enumerate() {
                            out[i * dz + j] = v as f32;
                        }
                    }
                }
            }
            (train, test)
        })
    }
}
