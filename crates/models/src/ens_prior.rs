//! Ensemble+ with randomized prior functions (Osband, Aslanides & Cassirer 2018, "Randomized
//! prior functions for deep reinforcement learning"), spec §11: member m predicts
//! f_θm(x) + β·p_m(x), where p_m is a network of the same shape drawn at the member's
//! initialisation and never trained; optionally each member sees its own noisy targets
//! y + σ̃·ε_m (ε_m ∼ N(0, I), drawn once) and an L2 pull on θ_m.
//!
//! **Engine speed with no engine code.** p_m is fixed, so for the Gaussian head
//! ½(y + σ̃ε_m − f_θ(x) − β·p_m(x))² is ½·MSE of f_θ on the shifted targets
//! y + σ̃ε_m − β·p_m(x): every member trains as a plain ensemble member on its own targets
//! (the engine's per-replica targets), on the host loops on a CPU and as tensors on a GPU, and
//! β·p_m is added back to its predictions. The prior function is evaluated once, on the host.
//! The decision track's repetitions at a step (`run_tasks`, `run_warm_tasks`) train as one
//! engine job the same way ([`trainer::train_tasks`] with each task's shifted targets as its
//! replicas' own), when they share the optimiser settings (points, epochs, L2 factor).
//!
//! **The reference implementation's convention, and the exact limit.** Osband et al.'s code
//! (the `enn` library's ensemble+, as in the Neural Testbed) regularises the trainable
//! network toward zero with weight decay and carries the prior draw in p_m. Spec §11 writes
//! the same thing in the parameters of the sum: for a model linear in features Φ,
//! p_m(x) = Φ(x)ᵀθ̃_m and θ = θ' + θ̃_m, so
//!
//! ```text
//! min_θ' ‖y + ε_m − Φ(θ' + θ̃_m)‖² + (σ²/σ_p²)‖θ'‖²  ⇔  min_θ ‖y + ε_m − Φθ‖² + (σ²/σ_p²)‖θ − θ̃_m‖²
//! ```
//!
//! With θ̃_m ∼ N(0, σ_p² I) and ε_m ∼ N(0, σ² I) the minimiser is
//! θ_m = A⁻¹(Φᵀ(y + ε_m) + (σ²/σ_p²)θ̃_m), A = ΦᵀΦ + (σ²/σ_p²)I: Gaussian with mean A⁻¹Φᵀy and
//! covariance A⁻¹(σ²ΦᵀΦ + σ⁴/σ_p²)A⁻¹ = σ²A⁻¹, the posterior under the prior N(0, σ_p² I) and
//! known σ: every member is an exact posterior draw. With σ_p → ∞ (no prior function, no
//! pull) it is the flat-prior posterior, the anchor. `prior_sd = σ_p` sets both halves: the
//! prior function's weights are N(0, σ_p²) (biases 0), and the engine's L2 factor is
//! λ = σ̄²/(N·σ_p²), since its objective is ½·mean_n r_n² + (λ/2)‖W‖² = (1/2N)(‖r‖² + Nλ‖W‖²)
//! (σ̄² the mean of σ(x_i)² at the training inputs: exact for a constant σ; where σ is not
//! known, σ̃² of a numeric `target_noise`). As everywhere in
//! the engine, biases are not pulled: the output bias has a flat prior (the intercept, which
//! `inputs = "features"` leaves to the bias). Without `prior_sd`, the prior network is drawn
//! with the engine's own initialiser (Glorot uniform, as Osband et al.'s prior networks use
//! their library's default initialiser) and scaled by β, and λ is the method's
//! `weight_decay` (1/N unless set).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::batched;
use crate::host_net::{self, TrainedNet};
use uqbench_core::{
    combine_members, par_map, run_each, run_warm_each, Compute, IntervalSetting, Member, Method,
    MethodError, Prediction, Replicas, Rng, Task, WarmStart, WarmState,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::mlp::{xavier_init, MlpShape};
use uqbench_engine::trainer::{self, Job, Resources, TrainOutput, WarmWeights};

/// Each member's target noise σ̃ (spec §11).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TargetNoise {
    /// `false`: none; `true`: σ̃ = the problem's σ(x_i), which must be known.
    Switch(bool),
    /// A fixed σ̃ > 0 (in the units of y).
    Sd(f64),
}

impl Default for TargetNoise {
    fn default() -> Self {
        TargetNoise::Switch(false)
    }
}

/// Ensemble+'s own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnsPriorSettings {
    /// Members M (10).
    pub members: usize,
    /// β, the prior function's scale (1; Osband et al. tune it in {1, 3, 10}).
    pub prior_scale: f64,
    /// σ_p: the prior N(0, σ_p²) on the weights, which sets the prior network's weights and
    /// the L2 factor λ = σ̄²/(N·σ_p²) (module docs). Unset: Glorot-initialised prior networks
    /// and the method's `weight_decay`.
    pub prior_sd: Option<f64>,
    /// Per-member target noise: `false` (default), `true` (σ̃ = σ(x), known σ only) or σ̃.
    pub target_noise: TargetNoise,
    /// Intervals from mean ± z·std of the members (`normal`) or their empirical quantiles.
    pub intervals: IntervalSetting,
}

impl Default for EnsPriorSettings {
    fn default() -> Self {
        EnsPriorSettings {
            members: 10,
            prior_scale: 1.0,
            prior_sd: None,
            target_noise: TargetNoise::default(),
            intervals: IntervalSetting::Normal,
        }
    }
}

/// Settings of ensemble+: network, optimiser and [`EnsPriorSettings`].
pub type EnsPriorConfig = MethodConfig<EnsPriorSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct EnsPrior {
    name: String,
    config: EnsPriorConfig,
}

impl EnsPrior {
    /// Checks the settings up front.
    pub fn new(name: &str, config: EnsPriorConfig) -> Result<EnsPrior, MethodError> {
        let c = &config;
        if c.members == 0 {
            return Err(MethodError::invalid(
                format!("{name}.members"),
                0,
                "at least 1",
            ));
        }
        if !(c.prior_scale.is_finite() && c.prior_scale >= 0.0) {
            return Err(MethodError::invalid(
                format!("{name}.prior_scale"),
                c.prior_scale,
                "a number ≥ 0 (0: no prior function)",
            ));
        }
        if let Some(sd) = c.prior_sd {
            if !(sd.is_finite() && sd > 0.0) {
                return Err(MethodError::invalid(
                    format!("{name}.prior_sd"),
                    sd,
                    "a positive number",
                ));
            }
            if let Some(wd) = c.optim.weight_decay {
                return Err(MethodError::invalid(
                    format!("{name}.weight_decay"),
                    wd,
                    "unset with prior_sd: the prior sets the L2 factor λ = σ²/(N·σ_p²)",
                ));
            }
        }
        if let TargetNoise::Sd(s) = c.target_noise {
            if !(s.is_finite() && s > 0.0) {
                return Err(MethodError::invalid(
                    format!("{name}.target_noise"),
                    s,
                    "true, false or a positive σ̃",
                ));
            }
        }
        c.net.shape(1, 1).validate()?;
        Ok(EnsPrior {
            name: name.to_string(),
            config,
        })
    }

    /// σ̃ at each training input, or `None` without target noise.
    fn target_sd(&self, task: &Task<'_>) -> Result<Option<Vec<f64>>, MethodError> {
        match self.config.target_noise {
            TargetNoise::Switch(false) => Ok(None),
            TargetNoise::Sd(s) => Ok(Some(vec![s; task.n_train()])),
            TargetNoise::Switch(true) if task.noise.known => Ok(Some(task.noise.train.to_vec())),
            TargetNoise::Switch(true) => Err(MethodError::invalid(
                format!("{}.target_noise", self.name),
                true,
                "a number σ̃ here: the problem's σ is not known (sigma_known = false)",
            )),
        }
    }

    /// The L2 factor λ: σ̄²/(N·σ_p²) under `prior_sd` (module docs), else the optimiser's.
    fn lambda(&self, task: &Task<'_>) -> Result<f64, MethodError> {
        let n = task.n_train();
        let Some(sd) = self.config.prior_sd else {
            return Ok(self.config.optim.lambda(n));
        };
        // σ̄²: the problem's σ(x)² when known, else the target noise σ̃² given as a number.
        let mean_var = match (task.noise.known, self.config.target_noise) {
            (true, _) => task.noise.train.iter().map(|s| s * s).sum::<f64>() / n as f64,
            (false, TargetNoise::Sd(s)) => s * s,
            (false, _) => {
                return Err(MethodError::invalid(
                    format!("{}.prior_sd", self.name),
                    sd,
                    "unset, or target_noise = σ̃ as a number: the L2 factor σ²/(N·σ_p²) needs \
                     a noise sd, and this problem's σ is not known (sigma_known = false)",
                ))
            }
        };
        Ok(mean_var / (n as f64 * sd * sd))
    }

    /// Member `seed`'s prior network: weights N(0, σ_p²) under `prior_sd`, else the engine's
    /// Glorot initialisation; biases 0.
    fn prior_net(&self, shape: &MlpShape, seed: u64) -> TrainedNet {
        if let Some(sd) = self.config.prior_sd {
            return TrainedNet::gaussian(shape, seed, |_| sd);
        }
        let (w, b) = xavier_init(shape, &[seed])
            .layers
            .into_iter()
            .map(|(w, b)| {
                let wide = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<_>>();
                (wide(w), wide(b))
            })
            .unzip();
        TrainedNet {
            dims: shape.widths(),
            w,
            b,
            slope: shape.negative_slope,
        }
    }
}

/// One member's prior function β·p_m at the training and test inputs.
struct PriorValues {
    train: Vec<f64>,
    test: Vec<f64>,
}

impl Method for EnsPrior {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.members
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(self.config.members * self.config.net.shape(task.d, 1).parameters())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        Ok(self.train(task, compute, keep_samples, progress, None)?.0)
    }

    fn warm_start(&self) -> Option<&dyn WarmStart> {
        Some(self)
    }

    /// The tasks as one engine job when they share their settings, else side by side.
    fn run_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
    ) -> Result<Vec<Vec<Prediction>>, MethodError> {
        match self.train_together(tasks, compute, keep_samples, None)? {
            Some(trained) => Ok(trained.into_iter().map(|(p, _)| p).collect()),
            None => run_each(self, tasks, compute, keep_samples),
        }
    }
}

/// Every member's trained network continues from its weights after the previous training (its
/// inputs on the scale the first training standardised them by, so that its prior function,
/// a network of its seed on those inputs, stays the same function of x); a diverged member
/// starts afresh; the optimiser starts afresh (Adam's moments at zero). The target noise is
/// redrawn from each training's seeds, as a retraining's.
impl WarmStart for EnsPrior {
    fn run_warm(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        from: Option<&WarmState>,
    ) -> Result<(Vec<Prediction>, WarmState), MethodError> {
        let from = WarmWeights::of(from, &self.name)?;
        let (pred, state) = self.train(task, compute, keep_samples, &|_| {}, Some(from))?;
        let state = state.expect("a warm start's weights");
        Ok((pred, Arc::new(state)))
    }

    /// The tasks as one engine job when they share their settings, else side by side.
    fn run_warm_tasks(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
        from: &[Option<&WarmState>],
    ) -> Result<Vec<(Vec<Prediction>, WarmState)>, MethodError> {
        match self.train_together(tasks, compute, keep_samples, Some(from))? {
            Some(trained) => Ok((trained.into_iter())
                .map(|(p, state)| {
                    let state = state.expect("a warm training returns its weights");
                    (p, Arc::new(state) as WarmState)
                })
                .collect()),
            None => run_warm_each(self, tasks, compute, keep_samples, from),
        }
    }
}

impl EnsPrior {
    /// Every replica's prior function β·p_m at the training and test inputs (as the network
    /// sees them), replica `i` being (repetition, member) `pairs[i]`.
    fn priors(
        &self,
        task: &Task<'_>,
        shape: &MlpShape,
        pairs: &[(u64, u64)],
        (x_train, x_test): (&[f32], &[f32]),
    ) -> Vec<PriorValues> {
        let (rows_train, rows_test) = (
            host_net::inputs(x_train, task.d),
            host_net::inputs(x_test, task.d),
        );
        let prior_purpose = format!("{}/prior", self.name);
        let beta = self.config.prior_scale;
        par_map(pairs.len(), |i| {
            let (rep, j) = pairs[i];
            if beta == 0.0 {
                return PriorValues {
                    train: vec![0.0; task.n_train()],
                    test: vec![0.0; task.n_test()],
                };
            }
            let net = self.prior_net(shape, task.seeds.seed(rep, j, &prior_purpose));
            let eval = |x: &nalgebra::DMatrix<f64>| {
                net.forward_batch(x).into_iter().map(|f| beta * f).collect()
            };
            PriorValues {
                train: eval(&rows_train),
                test: eval(&rows_test),
            }
        })
    }

    /// A task's training: its settings, standardisation (`warm`'s, else its own when the
    /// network standardises), inputs, replicas, and per replica (repetition k, member j) its
    /// prior function and targets y + σ̃ε − β·p_m(x), from seeds of their own purposes.
    fn prepare(
        &self,
        task: &Task<'_>,
        warm: Option<&WarmWeights>,
    ) -> Result<Prepared, MethodError> {
        task.validate()?;
        task.require_gaussian(&self.name)?;
        let c = &self.config;
        let (n, members) = (task.n_train(), c.members);
        let shape = c.net.shape(task.d, 1);
        let target_sd = self.target_sd(task)?;
        let settings = trainer::TrainSettings {
            weight_decay: self.lambda(task)?,
            likelihood: task.likelihood,
            ..c.optim.settings(task.epochs, n)
        };
        let replicas = task.replicas(&self.name, members);
        let moments = WarmWeights::moments_for(warm, c.net.standardize, task);
        let (x_train, x_test) = task.inputs_f32_by(moments.as_deref());
        let pairs: Vec<(u64, u64)> = task
            .repetitions
            .iter()
            .flat_map(|&rep| (0..members as u64).map(move |j| (rep, j)))
            .collect();
        let noise_purpose = format!("{}/target-noise", self.name);
        let priors = self.priors(task, &shape, &pairs, (&x_train, &x_test));
        let targets: Vec<Vec<f32>> = replicas
            .targets
            .iter()
            .zip(&pairs)
            .zip(&priors)
            .map(|((&k, &(rep, j)), prior)| {
                let mut rng = target_sd
                    .as_ref()
                    .map(|_| Rng::new(task.seeds.seed(rep, j, &noise_purpose)));
                (0..n)
                    .map(|i| {
                        let noise = match (&mut rng, &target_sd) {
                            (Some(rng), Some(sd)) => sd[i] * rng.normal(),
                            _ => 0.0,
                        };
                        (task.y_train[k][i] + noise - prior.train[i]) as f32
                    })
                    .collect()
            })
            .collect();
        Ok(Prepared {
            settings,
            shape,
            moments,
            x_train,
            x_test,
            replicas,
            priors,
            targets,
        })
    }

    /// Trains and predicts; `warm`: a warm start (from the given weights, or from scratch
    /// when `Some(None)`), returning the weights after it.
    fn train(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
        warm: Option<Option<&WarmWeights>>,
    ) -> Result<(Vec<Prediction>, Option<WarmWeights>), MethodError> {
        let resources = &Resources::of(compute)?;
        let p = self.prepare(task, warm.flatten())?;
        let own: Vec<usize> = (0..p.targets.len()).collect();
        let job = Job {
            shape: &p.shape,
            x_train: &p.x_train,
            targets: &p.targets,
            replica_targets: &own,
            init_seeds: &p.replicas.init,
            stream_seeds: &p.replicas.stream,
            replica_ids: &p.replicas.ids,
            x_test: &p.x_test,
            init: None,
            inputs: None,
        };
        let (out, after) = match warm {
            None => (
                trainer::train(&job, &p.settings, resources, progress)?,
                None,
            ),
            Some(from) => {
                let (out, weights) =
                    trainer::train_from(&job, &p.settings, resources, from.map(|w| &w.weights))?;
                let moments = p.moments.clone();
                (out, Some(WarmWeights { weights, moments }))
            }
        };
        Ok((self.predictions(task, &p, &out, keep_samples), after))
    }

    /// A task's predictions from its training's output: β·p_m added back, the members'
    /// functions f_θm + β·p_m at the test and training inputs.
    fn predictions(
        &self,
        task: &Task<'_>,
        p: &Prepared,
        out: &TrainOutput,
        keep_samples: bool,
    ) -> Vec<Prediction> {
        let (n, mt, members) = (task.n_train(), task.n_test(), self.config.members);
        let add = |at: &[f32], prior: &[f64]| -> Vec<f32> {
            at.iter()
                .zip(prior)
                .map(|(&f, &p)| (f64::from(f) + p) as f32)
                .collect()
        };
        let replicas = p.targets.len();
        let test: Vec<Vec<f32>> = (0..replicas)
            .map(|r| add(&out.test_out[r * mt..(r + 1) * mt], &p.priors[r].test))
            .collect();
        let train: Vec<Vec<f32>> = (0..replicas)
            .map(|r| add(&out.train_pred[r * n..(r + 1) * n], &p.priors[r].train))
            .collect();
        (0..task.repetitions.len())
            .map(|k| {
                let members: Vec<Member<'_>> = (k * members..(k + 1) * members)
                    .map(|r| Member {
                        passes: vec![&test[r][..]],
                        train: &train[r],
                        objective: out.final_objective[r],
                        diverged: out.diverged[r],
                    })
                    .collect();
                let family = self.config.intervals.family();
                let mut o = combine_members(&members, family, keep_samples);
                o.scalars
                    .insert("l2_factor".into(), p.settings.weight_decay);
                o
            })
            .collect()
    }

    /// Several tasks trained as one engine job (each task's shifted targets its replicas' own,
    /// [`trainer::train_tasks`]), fresh (`from` = `None`) or from every task's warm state,
    /// when they can share one: the same settings (points, epochs, likelihood and L2 factor);
    /// `None` when they cannot.
    #[allow(clippy::type_complexity)]
    fn train_together(
        &self,
        tasks: &[Task<'_>],
        compute: &Compute,
        keep_samples: bool,
        from: Option<&[Option<&WarmState>]>,
    ) -> Result<Option<Vec<(Vec<Prediction>, Option<WarmWeights>)>>, MethodError> {
        let lambda = |t: &Task<'_>| self.lambda(t).ok().map(f64::to_bits);
        let counted = from.is_none_or(|f| f.len() == tasks.len());
        if !(counted && batched::same_shape(tasks, lambda)) {
            return Ok(None);
        }
        let warm = (from.into_iter().flatten())
            .map(|f| WarmWeights::of(*f, &self.name))
            .collect::<Result<Vec<_>, _>>()?;
        let warm = from.map(|_| warm);
        let prepared = (tasks.iter().enumerate())
            .map(|(k, t)| self.prepare(t, warm.as_ref().and_then(|w| w[k])))
            .collect::<Result<Vec<_>, _>>()?;
        let targets: Vec<Vec<Vec<f32>>> = prepared.iter().map(|p| p.targets.clone()).collect();
        let first = &prepared[0];
        let trained = trainer::train_tasks(
            tasks,
            warm.as_deref(),
            Some(&targets),
            &self.name,
            self.config.members,
            &first.shape,
            self.config.net.standardize,
            &first.settings,
            &Resources::of(compute)?,
        )?;
        Ok(Some(
            (trained.into_iter().zip(tasks).zip(&prepared))
                .map(|(((out, after), t), p)| (self.predictions(t, p, &out, keep_samples), after))
                .collect(),
        ))
    }
}

/// One task's training of ensemble+ ([`EnsPrior::prepare`]).
struct Prepared {
    settings: trainer::TrainSettings,
    shape: MlpShape,
    moments: Option<Vec<(f64, f64)>>,
    x_train: Vec<f32>,
    x_test: Vec<f32>,
    replicas: Replicas,
    priors: Vec<PriorValues>,
    targets: Vec<Vec<f32>>,
}
