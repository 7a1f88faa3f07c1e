//! Exact Gaussian-process regression in f64 ([002]'s GP), one fit per repetition.
//!
//! Model: y = f(x) + ε, f ~ GP(0, k), ε ~ N(0, σ_n²), with
//! k(x, x′) = c² + s²·ρ(‖x − x′‖/ℓ) for a stationary kernel ρ (exponential = Matérn ½,
//! [002]'s choice; Matérn 3/2 and 5/2; squared exponential), or k(x, x′) = s²·G(x)ᵀG(x′)
//! for the `features` kernel on a problem that declares its features G (a Bayesian linear
//! regression with prior γ ~ N(0, s²I): as s → ∞ with σ_n known it is the anchor).
//!
//! With K = k(X, X) + σ_n² I = LLᵀ (nalgebra's Cholesky; no matrix is inverted) and
//! α = K⁻¹y by two triangular solves, the predictive distribution of f(x*) is normal with
//! mean k*ᵀα and variance k(x*, x*) − ‖L⁻¹k*‖², and that of y* adds σ_n².
//!
//! Hyper-parameters not fixed in the spec are fitted per repetition by maximising the log
//! marginal likelihood
//!   log p(y | θ) = −½ yᵀα − Σ_i log L_ii − (n/2) log 2π
//! in θ = log(s, ℓ, σ_n, c), with its analytic gradient
//!   ∂/∂θ_j log p = ½ tr((ααᵀ − K⁻¹) ∂K/∂θ_j)          (Rasmussen & Williams eq. 5.9),
//!   ∂K/∂log s = 2·s²ρ(r), ∂K/∂log ℓ = s²·r·(−ρ′(r)), ∂K/∂log σ_n = 2σ_n² I, ∂K/∂log c = 2c²,
//! plus weak log-normal hyper-priors (sd 3 in log space, i.e. a factor e³ ≈ 20, centred on
//! scales read off the data) that keep θ finite where the likelihood is flat. [002] fits its
//! GP in Stan with half-normal and inverse-gamma hyper-priors and integrates over them; we
//! take the maximum (type-II MAP), the usual practice and far cheaper. The optimiser is
//! argmin's L-BFGS with the Moré–Thuente line search, started from `restarts` points drawn
//! around those scales from the repetition's seed; the best end point wins. Where K is
//! numerically singular a growing jitter (10⁻¹⁰ to 10⁻⁴ of its mean diagonal) is added
//! before giving up on that θ.

use argmin::core::{Executor, State};
use argmin::solver::linesearch::MoreThuenteLineSearch;
use argmin::solver::quasinewton::LBFGS;
use nalgebra::DVector;
use serde::{Deserialize, Serialize};
use uqbench_core::noise::{KnownSigma, Tau};
use uqbench_core::{
    Compute, Extra, FactorJoint, Family, Method, MethodError, Prediction, Rng, Task,
};

mod marginal;

pub use marginal::Kernel;
use marginal::{cross, evaluate, Eval, Inputs, Objective, Plan, L, N, NAMES, S};

/// The GP's settings (`[methods.GP]`). A hyper-parameter given a number is fixed; one left
/// out is fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpConfig {
    /// The covariance function (`exponential`, `matern32`, `matern52`,
    /// `squared_exponential`, `features`).
    pub kernel: Kernel,
    /// Signal sd s.
    pub signal_sd: Option<f64>,
    /// Length scale ℓ (in the units of the inputs; stationary kernels).
    pub length_scale: Option<f64>,
    /// Noise sd σ_n: a number, or `"known"` for the problem's known σ.
    pub noise_sd: Option<Tau>,
    /// Sd c of the constant term (stationary kernels; the prior on f's level).
    pub constant_sd: Option<f64>,
    /// Optimiser starts per repetition (5).
    pub restarts: usize,
    /// L-BFGS iterations per start (200).
    pub max_iterations: usize,
}

impl Default for GpConfig {
    fn default() -> Self {
        GpConfig {
            kernel: Kernel::Exponential,
            signal_sd: None,
            length_scale: None,
            noise_sd: None,
            constant_sd: None,
            restarts: 5,
            max_iterations: 200,
        }
    }
}

/// Exact GP regression as a method.
#[derive(Debug, Clone)]
pub struct Gp {
    name: String,
    config: GpConfig,
}

impl Gp {
    /// Validates the settings.
    pub fn new(name: &str, config: GpConfig) -> Result<Gp, MethodError> {
        let positive = |key: &str, v: Option<f64>| -> Result<(), MethodError> {
            match v {
                Some(v) if !(v.is_finite() && v > 0.0) => Err(MethodError::invalid(
                    format!("{name}.{key}"),
                    v,
                    "a positive, finite scale (leave it out to fit it)",
                )),
                _ => Ok(()),
            }
        };
        positive("signal_sd", config.signal_sd)?;
        positive("length_scale", config.length_scale)?;
        positive("constant_sd", config.constant_sd)?;
        if let Some(Tau::Value(v)) = config.noise_sd {
            positive("noise_sd", Some(v))?;
        }
        if config.kernel == Kernel::Features
            && (config.length_scale.is_some() || config.constant_sd.is_some())
        {
            return Err(MethodError::invalid(
                format!("{name}.kernel"),
                "features",
                "no length_scale or constant_sd with the features kernel (it has only \
                 signal_sd and noise_sd)",
            ));
        }
        if config.restarts == 0 || config.max_iterations == 0 {
            return Err(MethodError::invalid(
                format!("{name}.restarts / max_iterations"),
                format!("{} / {}", config.restarts, config.max_iterations),
                "at least 1 each",
            ));
        }
        Ok(Gp {
            name: name.to_string(),
            config,
        })
    }
}

impl Gp {
    fn plan(&self, task: &Task<'_>, y: &[f64]) -> Result<Plan, MethodError> {
        let c = &self.config;
        let n = y.len() as f64;
        let mean = y.iter().sum::<f64>() / n;
        let sd = (y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n)
            .sqrt()
            .max(1e-12);
        let range = task
            .input_range(false)
            .into_iter()
            .fold(0.0_f64, f64::max)
            .max(1e-12);
        let noise = match c.noise_sd {
            Some(Tau::Value(v)) => Some(v),
            Some(Tau::Known(KnownSigma::Known)) => Some(task.known_sigma.ok_or_else(|| {
                MethodError::invalid(
                    format!("{}.noise_sd", self.name),
                    "\"known\"",
                    "a number, or left out to fit it: this problem's σ is not a known constant",
                )
            })?),
            None => None,
        };
        let fixed = [c.signal_sd, c.length_scale, noise, c.constant_sd];
        // Prior centres: the signal at the data's sd, the length scale at a fifth of the
        // input range, the noise at a third of the data's sd, the level at its mean's size.
        let centre = [
            sd.ln(),
            (range / 5.0).ln(),
            (sd / 3.0).ln(),
            (mean.abs() + sd).ln(),
        ];
        let features = c.kernel == Kernel::Features;
        let mut free = [false; 4];
        let mut theta = centre;
        for j in 0..4 {
            let used = !features || j == S || j == N;
            match fixed[j] {
                Some(v) => theta[j] = v.ln(),
                None => free[j] = used,
            }
            if !used {
                // Unused by the features kernel: a level of 0 (c² = e^{−∞} is exactly 0).
                theta[j] = f64::NEG_INFINITY;
            }
        }
        if features {
            theta[L] = 0.0;
        }
        Ok(Plan {
            free,
            theta,
            centre,
        })
    }

    /// The type-II MAP hyper-parameters and their objective (NaN when every one is fixed),
    /// from `restarts` L-BFGS runs; `None` when no run reached a finite objective.
    fn optimise(
        &self,
        task: &Task<'_>,
        inputs: &Inputs<'_>,
        y: &DVector<f64>,
        plan: &Plan,
        k: usize,
    ) -> Option<([f64; 4], f64)> {
        let kernel = self.config.kernel;
        let free: Vec<usize> = (0..4).filter(|&j| plan.free[j]).collect();
        let mut best: Option<([f64; 4], f64)> = None;
        if free.is_empty() {
            best = Some((plan.theta, f64::NAN));
        } else {
            let mut rng = Rng::new(task.seeds.seed(task.repetitions[k], 0, "gp/restarts"));
            for start in 0..self.config.restarts {
                let x0: Vec<f64> = free
                    .iter()
                    .map(|&j| {
                        // The first start at the prior centres, the others spread around them.
                        plan.centre[j] + if start == 0 { 0.0 } else { rng.normal() }
                    })
                    .collect();
                let problem = Objective {
                    kernel,
                    inputs,
                    y,
                    plan,
                    free: &free,
                };
                let solver = LBFGS::new(MoreThuenteLineSearch::new(), 7)
                    .with_tolerance_grad(1e-6)
                    .expect("a positive tolerance")
                    .with_tolerance_cost(1e-12)
                    .expect("a positive tolerance");
                // A start whose first evaluation fails (K singular even with jitter) or whose
                // line search breaks down is skipped; the others decide.
                let Ok(result) = Executor::new(problem, solver)
                    .configure(|state| state.param(x0).max_iters(self.config.max_iterations as u64))
                    .run()
                else {
                    continue;
                };
                let state = result.state();
                let (Some(x), value) = (state.get_best_param(), state.get_best_cost()) else {
                    continue;
                };
                let mut theta = plan.theta;
                for (v, &j) in x.iter().zip(&free) {
                    theta[j] = *v;
                }
                if value.is_finite() && best.is_none_or(|(_, b)| value < b) {
                    best = Some((theta, value));
                }
            }
        }
        best
    }

    fn fit_one(
        &self,
        task: &Task<'_>,
        inputs: &Inputs<'_>,
        x_test: &[f64],
        test_features: Option<&[f64]>,
        k: usize,
    ) -> Result<Prediction, MethodError> {
        let y_host = &task.y_train[k];
        let y = DVector::from_column_slice(y_host);
        let plan = self.plan(task, y_host)?;
        let kernel = self.config.kernel;
        let best = self.optimise(task, inputs, &y, &plan, k);
        let Some((theta, _)) = best else {
            return Ok(Prediction {
                diverged: true,
                mean: vec![f64::NAN; task.n_test()],
                std: vec![f64::NAN; task.n_test()],
                ..Default::default()
            });
        };
        let Some(e) = evaluate(kernel, &theta, inputs, &y, false) else {
            return Err(MethodError::invalid(
                format!("{}: the covariance matrix", self.name),
                format!("{:?}", hyper(&theta)),
                "positive definite (the fixed hyper-parameters make it singular: give a \
                 positive noise_sd)",
            ));
        };
        let f = inputs.features.as_deref();
        let predict = |xs: &[f64], fs: Option<&[f64]>| predict(kernel, &theta, inputs, &e, xs, fs);
        let (mean, std) = predict(x_test, test_features);
        let joint = joint(kernel, &theta, inputs, &e, x_test, test_features);
        let (train_mean, _) = predict(inputs.x, f);
        let h = hyper(&theta);
        let mut scalars = std::collections::BTreeMap::new();
        for (j, name) in NAMES.iter().enumerate() {
            if plan.free[j] {
                scalars.insert(format!("gp_{name}"), h[j]);
            }
        }
        scalars.insert("gp_log_marginal_likelihood".into(), -e.nlml);
        Ok(Prediction {
            noise_std: Some(vec![h[N]; mean.len()]),
            noise_known: false,
            mean,
            std,
            family: Family::Normal,
            samples: None,
            train_mean: Some(train_mean),
            scalars,
            diverged: false,
            extra: Extra::joint(Some(joint)),
        })
    }
}

/// The joint of f at inputs `xs`: Cov = K** − VᵀV (V = L⁻¹K*), as the factor U·√Λ⁺ of its
/// symmetric eigendecomposition (negative rounding eigenvalues set to 0), for the joint
/// predictions (spec §10).
fn joint(
    kernel: Kernel,
    theta: &[f64; 4],
    inputs: &Inputs<'_>,
    e: &Eval,
    xs: &[f64],
    fs: Option<&[f64]>,
) -> FactorJoint {
    let f = inputs.features.as_deref();
    let (ks, _) = cross(
        kernel,
        theta,
        (inputs.x, f),
        (xs, fs),
        inputs.d,
        inputs.p,
        false,
    );
    let (kss, _) = cross(kernel, theta, (xs, fs), (xs, fs), inputs.d, inputs.p, false);
    let v = e
        .chol
        .l_dirty()
        .solve_lower_triangular(&ks)
        .expect("L is invertible");
    let c = kss - v.transpose() * v;
    let c = (&c + c.transpose()) * 0.5;
    let eig = c.symmetric_eigen();
    let m = eig.eigenvalues.len();
    let mut factor = vec![0.0; m * m];
    for i in 0..m {
        for j in 0..m {
            factor[i * m + j] = eig.eigenvectors[(i, j)] * eig.eigenvalues[j].max(0.0).sqrt();
        }
    }
    FactorJoint { factor, rank: m }
}

/// The predictive mean and sd of f at inputs `xs` (features `fs` for the features kernel)
/// given the fit `e` at hyper-parameters `theta`.
fn predict(
    kernel: Kernel,
    theta: &[f64; 4],
    inputs: &Inputs<'_>,
    e: &Eval,
    xs: &[f64],
    fs: Option<&[f64]>,
) -> (Vec<f64>, Vec<f64>) {
    let f = inputs.features.as_deref();
    let (ks, _) = cross(
        kernel,
        theta,
        (inputs.x, f),
        (xs, fs),
        inputs.d,
        inputs.p,
        false,
    );
    let mean = ks.transpose() * &e.alpha;
    let v = e
        .chol
        .l_dirty()
        .solve_lower_triangular(&ks)
        .expect("L is invertible");
    let m = ks.ncols();
    let mut var = Vec::with_capacity(m);
    for j in 0..m {
        let (kss, _) = cross(
            kernel,
            theta,
            (
                &xs[j * inputs.d..(j + 1) * inputs.d],
                fs.map(|f| &f[j * inputs.p..(j + 1) * inputs.p]),
            ),
            (
                &xs[j * inputs.d..(j + 1) * inputs.d],
                fs.map(|f| &f[j * inputs.p..(j + 1) * inputs.p]),
            ),
            inputs.d,
            inputs.p,
            false,
        );
        var.push((kss[(0, 0)] - v.column(j).norm_squared()).max(0.0).sqrt());
    }
    (mean.iter().copied().collect(), var)
}

fn hyper(theta: &[f64; 4]) -> [f64; 4] {
    theta.map(f64::exp)
}

impl Method for Gp {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn cost(&self, n_train: usize, _epochs: usize) -> f64 {
        // A Cholesky of N × N per L-BFGS evaluation, about 50 evaluations per restart, in
        // units of a replica-step over one point (≈ 10⁴ flops for the paper's network).
        let n = n_train as f64;
        (self.config.restarts.max(1) as f64) * 50.0 * n * n * n / 3.0 / 1e4
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        _keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        task.validate()?;
        task.require_gaussian(&self.name)?;
        let (train_features, test_features, p) = if self.config.kernel == Kernel::Features {
            let f = task.features.ok_or_else(|| {
                MethodError::invalid(
                    format!("{}.kernel", self.name),
                    "features",
                    "a problem linear in declared features (this one has none: a surrogate)",
                )
            })?;
            (Some(f.train.to_vec()), Some(f.test.to_vec()), f.p)
        } else {
            (None, None, 0)
        };
        let inputs = Inputs {
            d: task.d,
            x: task.x_train,
            features: train_features,
            p,
        };
        let reps = task.y_train.len();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<std::sync::Mutex<Option<Result<Prediction, MethodError>>>> =
            (0..reps).map(|_| std::sync::Mutex::new(None)).collect();
        // Repetitions are independent: spread them over the worker threads.
        std::thread::scope(|scope| {
            for _ in 0..compute.threads.clamp(1, reps) {
                scope.spawn(|| loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if k >= reps {
                        break;
                    }
                    let out = self.fit_one(task, &inputs, task.x_test, test_features.as_deref(), k);
                    *results[k].lock().expect("no panics while holding it") = Some(out);
                    progress(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
                });
            }
        });
        results
            .into_iter()
            .map(|r| {
                r.into_inner()
                    .expect("not poisoned")
                    .expect("every repetition ran")
            })
            .collect()
    }
}
