//! Problems y ~ N(G(x)ᵀγ, σ(x)²): their spec, their resolution for one setting, and the
//! generation of one repetition's data.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::design::{Design, DesignSpec, Inputs, Region};
use crate::error::AnchorError;
use crate::expr::{Expr, Num};
use crate::features::{FeatureMap, FeatureSpec};
use crate::seed::{purpose, Rng, SeedPath};
use crate::surrogate::{self, SurrogateSpec, Table};
use crate::tcc::{ClassificationSpec, Tcc};

mod model;
mod random;
mod sources;

pub use model::{Model, ProblemKind, SurrogateInfo};
pub use random::{DesignMode, RandomInputs};

/// The parameters γ as written in a spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    deny_unknown_fields,
    expecting = "a list of numbers (one per feature), or { uniform = [low, high] }, \
                 { normal = [mean, sd] } or { tile = [..] } (repeated to the number of features)"
)]
pub enum GammaSpec {
    /// Explicit values, one per feature.
    Values(Vec<Num>),
    /// Each γ_j uniform on [low, high], drawn once per setting from the seed.
    Uniform {
        /// [low, high].
        uniform: [Num; 2],
    },
    /// Each γ_j normal(mean, sd), drawn once per setting from the seed.
    Normal {
        /// [mean, sd].
        normal: [Num; 2],
    },
    /// The list repeated until it has one entry per feature ([000] E2: (2.5, −8, 0.5) per
    /// dimension).
    Tile {
        /// The pattern.
        tile: Vec<Num>,
    },
}

/// A point at which results are reported, appended to the test inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a number (position along a 1-D or diagonal test design: x or λ) or a list of \
                 coordinates"
)]
pub enum ReportPoint {
    /// Position along the test design (x for a 1-D grid, λ for a diagonal).
    Coord(f64),
    /// Full coordinates.
    Point(Vec<f64>),
}

/// A regression problem as written in a spec (`[problem]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemSpec {
    /// Input dimension d (may be an expression in the sweep variables, e.g. `"d"`).
    pub d: Num,
    /// Feature families making up G.
    pub features: Vec<FeatureSpec>,
    /// The parameters γ.
    pub gamma: GammaSpec,
    /// Noise standard deviation: a number, or an expression in the inputs (`x` in 1-D, `x1`,
    /// `x2`, … in general) and the sweep variables for heteroscedastic noise.
    pub sigma: Num,
    /// Whether the anchor treats σ as known (default, normal posterior) or only its shape as
    /// known, with the scale estimated from the residuals (Student-t posterior, the OLS oracle
    /// of [002]).
    #[serde(default = "default_true")]
    pub sigma_known: bool,
    /// Training inputs (fixed across repetitions).
    pub train: DesignSpec,
    /// Test inputs.
    pub test: DesignSpec,
    /// Optional validation inputs (targets drawn per repetition), e.g. for noise estimation.
    #[serde(default)]
    pub validation: Option<DesignSpec>,
    /// Extra test points at which results are reported.
    #[serde(default)]
    pub report: Vec<ReportPoint>,
    /// `"fixed"` (default): the inputs are drawn once per setting and every repetition redraws
    /// only y, so every result is conditional on those inputs. `"random"`: every repetition
    /// draws its training, validation and test inputs afresh ([`DesignMode`]).
    #[serde(default)]
    pub design: DesignMode,
}

fn default_true() -> bool {
    true
}

/// One setting of an experiment's sweep: the values of its sweep variables.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Setting {
    /// (name, value) pairs, in sweep order.
    pub values: Vec<(String, f64)>,
}

impl Setting {
    /// The canonical label, `f_main=2` (several variables joined by `,`; empty without sweep).
    pub fn label(&self) -> String {
        self.values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The value of a sweep variable.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.values.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// All settings of a sweep (the Cartesian product, keys in sorted order, values in the
    /// order given). No sweep gives one empty setting.
    pub fn all(sweep: &BTreeMap<String, Vec<f64>>) -> Vec<Setting> {
        let mut out = vec![Setting::default()];
        for (key, values) in sweep {
            out = out
                .into_iter()
                .flat_map(|s| {
                    values.iter().map(move |v| {
                        let mut s = s.clone();
                        s.values.push((key.clone(), *v));
                        s
                    })
                })
                .collect();
        }
        out
    }
}

/// Names that cannot be sweep variables because expressions use them for other things.
pub fn reserved_name(name: &str) -> bool {
    matches!(name, "x" | "pi" | "e")
        || (name.starts_with('x')
            && name.len() > 1
            && name[1..].chars().all(|c| c.is_ascii_digit()))
}

/// The test inputs of a resolved problem with everything known about them.
#[derive(Debug, Clone, PartialEq)]
pub struct TestSet {
    /// The points: the test design's, then the report points.
    pub inputs: Inputs,
    /// Position along the design (`x` or `lambda`) when the design is 1-D-parametrised.
    pub coord: Option<(String, Vec<f64>)>,
    /// In, gap or out of the training region.
    pub region: Vec<Region>,
    /// Labels of report points (`x=-2.38`, `lambda=0.5996`); `None` for design points.
    pub label: Vec<Option<String>>,
    /// The noise-free truth G(x)ᵀγ.
    pub truth: Vec<f64>,
    /// σ(x).
    pub sigma: Vec<f64>,
}

/// The noise model of a resolved problem.
#[derive(Debug, Clone, PartialEq)]
pub enum Noise {
    /// σ constant.
    Constant(f64),
    /// σ(x) given by an expression.
    Function(Expr),
    /// σ(x) from a forest fitted to a data set, known only at the data's rows (tabulated in
    /// the problem's training, validation and test sets).
    Surrogate,
    /// Labels y ~ Bernoulli(P(y = 1 | x)) (a classification problem); the tabulated σ is the
    /// Bernoulli sd √(p(1 − p)).
    Bernoulli,
}

/// A problem resolved for one setting: feature map, γ, σ and designs are fixed numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The experiment's name.
    pub name: String,
    /// The experiment's base seed.
    pub seed: u64,
    /// The setting.
    pub setting: Setting,
    /// Input dimension d.
    pub d: usize,
    /// The true f: G(x)ᵀγ, or a surrogate forest.
    pub model: Model,
    /// σ.
    pub noise: Noise,
    /// Whether the anchor treats σ as known.
    pub sigma_known: bool,
    /// Training inputs.
    pub train: Design,
    /// σ at the training inputs.
    pub train_sigma: Vec<f64>,
    /// G(x)ᵀγ at the training inputs.
    pub train_truth: Vec<f64>,
    /// Test inputs.
    pub test: TestSet,
    /// Validation inputs with σ and truth there.
    pub validation: Option<(Inputs, Vec<f64>, Vec<f64>)>,
    /// With `design = "random"`, the designs every repetition redraws its inputs from (the
    /// problem itself holds repetition 0's); `None` for a fixed design.
    pub random: Option<Box<RandomInputs>>,
}

/// One repetition's data.
#[derive(Debug, Clone, PartialEq)]
pub struct Draw {
    /// The repetition index.
    pub repetition: u64,
    /// Training targets.
    pub train_y: Vec<f64>,
    /// Validation targets, when the problem has a validation design.
    pub validation_y: Option<Vec<f64>>,
}

/// The generator of a per-setting draw (γ, a design) for `purpose`: repetition and member 0.
pub(crate) fn setting_rng(seed: u64, name: &str, label: &str, purpose: &str) -> Rng {
    repetition_rng(seed, name, label, 0, purpose)
}

/// The generator of repetition `repetition`'s draw for `purpose` (member 0): a random
/// design's inputs; repetition 0 is the per-setting draw.
pub(crate) fn repetition_rng(
    seed: u64,
    name: &str,
    label: &str,
    repetition: u64,
    purpose: &str,
) -> Rng {
    SeedPath {
        base: seed,
        experiment: name,
        setting: label,
        repetition,
        member: 0,
        purpose,
    }
    .rng()
}

pub(crate) fn int_field(
    num: &Num,
    vars: &[(String, f64)],
    field: &str,
    min: f64,
) -> Result<usize, AnchorError> {
    let v = num.eval(vars)?;
    if v.fract() != 0.0 || v < min || v > 1e6 {
        return Err(AnchorError::invalid(
            field,
            v,
            format!("a whole number ≥ {min}"),
        ));
    }
    Ok(v as usize)
}

impl Problem {
    /// Resolves `spec` for `setting`. Random parts (γ, designs) are drawn from seeds derived
    /// from (seed, name, setting).
    pub fn resolve(
        name: &str,
        seed: u64,
        spec: &ProblemSpec,
        setting: &Setting,
    ) -> Result<Problem, AnchorError> {
        let label = setting.label();
        let vars = setting.values.clone();
        let rng_for = |what: &str| setting_rng(seed, name, &label, what);
        let d = int_field(&spec.d, &vars, "problem.d", 1.0)?;
        let features = FeatureMap::from_specs(&spec.features, d, &vars)?;
        let p = features.p();
        let gamma = resolve_gamma(&spec.gamma, p, &vars, &mut rng_for(purpose::GAMMA))?;

        let noise = match &spec.sigma {
            Num::Value(v) => Noise::Constant(*v),
            Num::Expr(s) => {
                let e = Expr::parse(s)?;
                if e.variables().is_empty() {
                    Noise::Constant(spec.sigma.eval(&vars)?)
                } else {
                    Noise::Function(e)
                }
            }
        };
        if let Noise::Constant(s) = noise {
            if !(s.is_finite() && s > 0.0) {
                return Err(AnchorError::invalid(
                    "problem.sigma",
                    s,
                    "a positive, finite noise standard deviation",
                ));
            }
        }

        let train = Design {
            inputs: Inputs::new(d, Vec::new()),
            coord: None,
            support: Vec::new(),
            diagonal: None,
        };
        let mut problem = Problem {
            name: name.to_string(),
            seed,
            setting: setting.clone(),
            d,
            model: Model::Linear { features, gamma },
            noise,
            sigma_known: spec.sigma_known,
            train_sigma: Vec::new(),
            train_truth: Vec::new(),
            train,
            test: TestSet {
                inputs: Inputs::new(d, Vec::new()),
                coord: None,
                region: Vec::new(),
                label: Vec::new(),
                truth: Vec::new(),
                sigma: Vec::new(),
            },
            validation: None,
            random: None,
        };
        let inputs = RandomInputs {
            train: spec.train.clone(),
            test: spec.test.clone(),
            validation: spec.validation.clone(),
            report: spec.report.clone(),
            vars,
            held: 0,
        };
        // Repetition 0's inputs in both modes: a fixed design's are every repetition's.
        problem.place_inputs(&inputs, 0, spec.design)?;
        if spec.design == DesignMode::Random {
            problem.random = Some(Box::new(inputs));
        }
        Ok(problem)
    }

    /// σ when the problem declares it known (`sigma_known`) and constant: what a method may
    /// use as its noise precision τ = 1/σ².
    pub fn known_sigma(&self) -> Option<f64> {
        match (&self.noise, self.sigma_known) {
            (Noise::Constant(s), true) => Some(*s),
            _ => None,
        }
    }

    /// The problem's kind.
    pub fn kind(&self) -> ProblemKind {
        match &self.model {
            Model::Linear { .. } => ProblemKind::Linear,
            Model::Surrogate(_) => ProblemKind::Surrogate,
            Model::Classification(_) => ProblemKind::Classification,
        }
    }

    /// The TCC model when this is a classification problem (targets are labels 0/1 and the
    /// truth is P(y = 1 | x)).
    pub fn classification(&self) -> Option<&Tcc> {
        match &self.model {
            Model::Classification(t) => Some(t),
            _ => None,
        }
    }

    /// Input dimension.
    pub fn d(&self) -> usize {
        self.d
    }

    /// G and γ when f is linear in known features (the anchor exists); `None` for a
    /// surrogate problem.
    pub fn linear(&self) -> Option<(&FeatureMap, &[f64])> {
        match &self.model {
            Model::Linear { features, gamma } => Some((features, gamma)),
            Model::Surrogate(_) | Model::Classification(_) => None,
        }
    }

    /// A label for messages: `e1 (setting f_main=2)`.
    pub fn display_name(&self) -> String {
        let label = self.setting.label();
        if label.is_empty() {
            self.name.clone()
        } else {
            format!("{} (setting {label})", self.name)
        }
    }

    fn truth_at(&self, inputs: &Inputs) -> Result<Vec<f64>, AnchorError> {
        if let Model::Classification(tcc) = &self.model {
            return Ok(inputs.rows().map(|x| tcc.prob1(x)).collect());
        }
        let Some((features, gamma)) = self.linear() else {
            return Err(AnchorError::invalid(
                "problem",
                "a surrogate problem",
                "a problem whose f can be evaluated away from its data's rows",
            ));
        };
        Ok(inputs.rows().map(|x| features.dot(x, gamma)).collect())
    }

    /// σ(x) at every point; an error if σ is not positive and finite somewhere.
    pub fn sigma_at(&self, inputs: &Inputs, which: &str) -> Result<Vec<f64>, AnchorError> {
        match &self.noise {
            Noise::Constant(s) => Ok(vec![*s; inputs.len()]),
            Noise::Function(expr) => {
                let d = inputs.d();
                let mut known: Vec<String> = (1..=d).map(|j| format!("x{j}")).collect();
                if d == 1 {
                    known.insert(0, "x".to_string());
                }
                known.extend(self.setting.values.iter().map(|(k, _)| k.clone()));
                let mut out = Vec::with_capacity(inputs.len());
                for x in inputs.rows() {
                    let lookup = |name: &str| -> Option<f64> {
                        if name == "x" && d == 1 {
                            return Some(x[0]);
                        }
                        if let Some(j) =
                            name.strip_prefix('x').and_then(|s| s.parse::<usize>().ok())
                        {
                            return (1..=d).contains(&j).then(|| x[j - 1]);
                        }
                        self.setting.get(name)
                    };
                    let s = expr.eval(&lookup, &|| known.clone())?;
                    if !(s.is_finite() && s > 0.0) {
                        return Err(AnchorError::invalid(
                            "problem.sigma",
                            format!("`{expr}` = {s} at {which} input {x:?}"),
                            "a noise standard deviation that is positive and finite at every input",
                        ));
                    }
                    out.push(s);
                }
                Ok(out)
            }
            Noise::Surrogate => Err(AnchorError::invalid(
                "problem.sigma",
                format!("σ(x) of a surrogate problem at {which} inputs"),
                "inputs among the data's rows (σ(x) is known there only)",
            )),
            Noise::Bernoulli => Ok(self
                .truth_at(inputs)?
                .iter()
                .map(|p| (p * (1.0 - p)).sqrt())
                .collect()),
        }
    }

    pub(crate) fn test_set(
        &self,
        design: Design,
        report: &[ReportPoint],
    ) -> Result<TestSet, AnchorError> {
        let d = self.d();
        let mut data = design.inputs.as_slice().to_vec();
        let mut coord = design.coord.clone();
        let mut label = vec![None; design.inputs.len()];
        for (i, r) in report.iter().enumerate() {
            let field = format!("problem.report[{i}]");
            match r {
                ReportPoint::Coord(v) => {
                    let Some((name, values)) = coord.as_mut() else {
                        return Err(AnchorError::invalid(
                            field,
                            v,
                            "a list of coordinates: a single number is a position along a 1-D \
                             or diagonal test design, and this test design is neither",
                        ));
                    };
                    let x = match design.diagonal {
                        Some((from, to)) => vec![(1.0 - v) * from + v * to; d],
                        None => vec![*v],
                    };
                    data.extend_from_slice(&x);
                    values.push(*v);
                    label.push(Some(format!("{name}={v}")));
                }
                ReportPoint::Point(p) => {
                    if p.len() != d {
                        return Err(AnchorError::invalid(
                            field,
                            format!("{p:?}"),
                            format!("{d} coordinates (the problem has d = {d})"),
                        ));
                    }
                    if design.diagonal.is_some() {
                        return Err(AnchorError::invalid(
                            field,
                            format!("{p:?}"),
                            "a position λ along the diagonal test design (a single number)",
                        ));
                    }
                    if let Some((_, values)) = coord.as_mut() {
                        values.push(p[0]);
                    }
                    data.extend_from_slice(p);
                    let text = if d == 1 {
                        format!("x={}", p[0])
                    } else {
                        format!(
                            "x=({})",
                            p.iter()
                                .map(|v| v.to_string())
                                .collect::<Vec<_>>()
                                .join(",")
                        )
                    };
                    label.push(Some(text));
                }
            }
        }
        let inputs = Inputs::new(d, data);
        let region = inputs.rows().map(|x| self.train.region_of(x)).collect();
        let truth = self.truth_at(&inputs)?;
        let sigma = self.sigma_at(&inputs, "test")?;
        Ok(TestSet {
            inputs,
            coord,
            region,
            label,
            truth,
            sigma,
        })
    }

    /// The data of repetition `r`: y = G(x)ᵀγ + σ(x)·ε with ε drawn from the seed of
    /// (experiment, setting, r, purpose "noise").
    pub fn draw(&self, repetition: u64) -> Draw {
        if let Some(r) = &self.random {
            assert_eq!(
                r.held, repetition,
                "{}: a random design draws repetition {repetition}'s targets at its own inputs \
                 (Problem::at_repetition), not at repetition {}'s",
                self.name, r.held
            );
        }
        let label = self.setting.label();
        let path = |what| SeedPath {
            base: self.seed,
            experiment: &self.name,
            setting: &label,
            repetition,
            member: 0,
            purpose: what,
        };
        let noisy = |truth: &[f64], sigma: &[f64], rng: &mut Rng| -> Vec<f64> {
            truth
                .iter()
                .zip(sigma)
                .map(|(f, s)| f + s * rng.normal())
                .collect()
        };
        let train_y = if self.noise == Noise::Bernoulli {
            // Labels: 1 with probability P(y = 1 | x_i).
            let mut rng = path(purpose::NOISE).rng();
            self.train_truth
                .iter()
                .map(|&p| if rng.uniform() < p { 1.0 } else { 0.0 })
                .collect()
        } else {
            noisy(
                &self.train_truth,
                &self.train_sigma,
                &mut path(purpose::NOISE).rng(),
            )
        };
        let validation_y = self.validation.as_ref().map(|(_, sigma, truth)| {
            noisy(truth, sigma, &mut path(purpose::VALIDATION_NOISE).rng())
        });
        Draw {
            repetition,
            train_y,
            validation_y,
        }
    }
}

fn resolve_gamma(
    spec: &GammaSpec,
    p: usize,
    vars: &[(String, f64)],
    rng: &mut Rng,
) -> Result<Vec<f64>, AnchorError> {
    let pair = |pair: &[Num; 2]| -> Result<(f64, f64), AnchorError> {
        Ok((pair[0].eval(vars)?, pair[1].eval(vars)?))
    };
    let gamma = match spec {
        GammaSpec::Values(values) => {
            if values.len() != p {
                return Err(AnchorError::invalid(
                    "problem.gamma",
                    format!("{} values", values.len()),
                    format!("one value per feature: the feature map has p = {p}"),
                ));
            }
            values
                .iter()
                .map(|v| v.eval(vars))
                .collect::<Result<Vec<_>, _>>()?
        }
        GammaSpec::Uniform { uniform } => {
            let (lo, hi) = pair(uniform)?;
            if !(lo.is_finite() && hi.is_finite() && lo < hi) {
                return Err(AnchorError::invalid(
                    "problem.gamma.uniform",
                    format!("[{lo}, {hi}]"),
                    "a non-empty finite range [low, high] with low < high",
                ));
            }
            (0..p).map(|_| rng.uniform_in(lo, hi)).collect()
        }
        GammaSpec::Normal { normal } => {
            let (mean, sd) = pair(normal)?;
            if !(mean.is_finite() && sd.is_finite() && sd > 0.0) {
                return Err(AnchorError::invalid(
                    "problem.gamma.normal",
                    format!("[{mean}, {sd}]"),
                    "[mean, sd] with a positive sd",
                ));
            }
            (0..p).map(|_| mean + sd * rng.normal()).collect()
        }
        GammaSpec::Tile { tile } => {
            if tile.is_empty() || !p.is_multiple_of(tile.len()) {
                return Err(AnchorError::invalid(
                    "problem.gamma.tile",
                    format!("{} values", tile.len()),
                    format!("a pattern whose length divides the number of features p = {p}"),
                ));
            }
            let t = tile
                .iter()
                .map(|v| v.eval(vars))
                .collect::<Result<Vec<_>, _>>()?;
            (0..p).map(|j| t[j % t.len()]).collect()
        }
    };
    if let Some(g) = gamma.iter().find(|g| !g.is_finite()) {
        return Err(AnchorError::invalid("problem.gamma", g, "finite numbers"));
    }
    Ok(gamma)
}
