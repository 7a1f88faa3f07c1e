//! Experiment specs: the TOML files in `experiments/`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::bail;
use crate::decision::DecisionSpec;
use crate::draws::DrawFormat;
use crate::error::{Context, Result};
use crate::summary::joint::JointSettings;
use crate::track::Track;
use serde::{Deserialize, Serialize};
use uqbench_anchor::{
    problem::reserved_name, ClassificationSpec, Expr, Num, Problem, ProblemKind, ProblemSpec,
    Setting, SurrogateSpec,
};

/// One experiment: a problem, the sweep over its settings, the methods and how to run them,
/// and named profiles that override any of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawSpec", into = "RawSpec")]
pub struct ExperimentSpec {
    /// Short name, used in seeds and file names (letters, digits, `_`, `-`).
    pub name: String,
    /// One line saying what the experiment is.
    pub description: String,
    /// Base seed of every random draw in the experiment.
    pub seed: u64,
    /// Sweep variables and their values (`f_main = [1, 2, 3]`); settings are their product.
    pub sweep: BTreeMap<String, Vec<f64>>,
    /// Whether a setting off the sweep's values (`--setting f_main=3.7`, Python's
    /// `Problem(setting=…)`) is valid: `off_sweep = true` at the top of the spec. Off by
    /// default, so that a mistyped value is an error rather than a silently different problem.
    pub off_sweep: bool,
    /// The problem: one of `[problem]`, `[surrogate]` or `[classification]` in the file.
    pub problem: ProblemDecl,
    /// How to run it (`uqbench run`); a spec used only for `anchor`, `check`, `export` or
    /// `score` may leave it out.
    pub run: Option<RunSpec>,
    /// Settings per method: `[methods.Ens] members = 120`. A table may name a registered
    /// kind (`kind = "EnsBS"`) to configure a second variant under another name.
    pub methods: BTreeMap<String, toml::Table>,
    /// Named profiles: tables merged over the spec (`[profiles.quick] run.repetitions = 5`).
    pub profiles: BTreeMap<String, toml::Table>,
    /// The decision track (`[decision]`, spec §12): the problem as a bandit or an
    /// active-learning pool, run by `uqbench decide`.
    pub decision: Option<DecisionSpec>,
}

/// The problem of a spec: the kinds of problem uqbench generates.
#[derive(Debug, Clone, PartialEq)]
pub enum ProblemDecl {
    /// `[problem]`: a regression problem linear in known features, whose exact posterior (the
    /// anchor) exists.
    Linear(ProblemSpec),
    /// `[surrogate]`: a simulation from a real data set ([004] §5.5), random forests as f and
    /// σ²(x); no anchor.
    Surrogate(SurrogateSpec),
    /// `[classification]`: [002]'s two-class problem with its exact P(y = 1 | x); labels
    /// instead of targets, no anchor.
    Classification(ClassificationSpec),
}

impl ProblemDecl {
    /// The problem's kind, as its resolved [`Problem`] will have it.
    pub fn kind(&self) -> ProblemKind {
        match self {
            ProblemDecl::Linear(_) => ProblemKind::Linear,
            ProblemDecl::Surrogate(_) => ProblemKind::Surrogate,
            ProblemDecl::Classification(_) => ProblemKind::Classification,
        }
    }

    /// Which track its results take.
    pub fn track(&self) -> Track {
        Track::of_kind(self.kind())
    }

    /// Whether the problem has an anchor (the exact posterior).
    pub fn has_anchor(&self) -> bool {
        self.kind().has_anchor()
    }

    /// Whether the problem has a validation set.
    pub fn has_validation(&self) -> bool {
        match self {
            ProblemDecl::Linear(p) => p.validation.is_some(),
            ProblemDecl::Surrogate(s) => s.split.validation > 0,
            ProblemDecl::Classification(_) => false,
        }
    }
}

/// The spec as written: the three problem tables side by side (one must be present), with
/// every key checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    name: String,
    #[serde(default)]
    description: String,
    seed: u64,
    #[serde(default)]
    sweep: BTreeMap<String, Vec<f64>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    off_sweep: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    problem: Option<ProblemSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    surrogate: Option<SurrogateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    classification: Option<ClassificationSpec>,
    #[serde(default)]
    run: Option<RunSpec>,
    #[serde(default)]
    methods: BTreeMap<String, toml::Table>,
    #[serde(default)]
    profiles: BTreeMap<String, toml::Table>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision: Option<DecisionSpec>,
}

impl TryFrom<RawSpec> for ExperimentSpec {
    type Error = String;

    fn try_from(raw: RawSpec) -> Result<ExperimentSpec, String> {
        let declared: Vec<&str> = [
            ("[problem]", raw.problem.is_some()),
            ("[surrogate]", raw.surrogate.is_some()),
            ("[classification]", raw.classification.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, present)| present.then_some(name))
        .collect();
        let problem = match (raw.problem, raw.surrogate, raw.classification) {
            (Some(p), None, None) => ProblemDecl::Linear(p),
            (None, Some(s), None) => ProblemDecl::Surrogate(s),
            (None, None, Some(c)) => ProblemDecl::Classification(c),
            (None, None, None) => {
                return Err(
                    "no [problem]: declare the problem in a [problem] table (features, \
                            γ, σ, designs), a [surrogate] table (a data set and its split) or a \
                            [classification] table ([002]'s two-class problem)"
                        .into(),
                )
            }
            _ => {
                return Err(format!(
                    "{}: a spec has one problem, either linear in known features ([problem]), a \
                     surrogate of a data set ([surrogate]) or the two-class problem \
                     ([classification])",
                    declared.join(" and ")
                ))
            }
        };
        Ok(ExperimentSpec {
            name: raw.name,
            description: raw.description,
            seed: raw.seed,
            sweep: raw.sweep,
            off_sweep: raw.off_sweep,
            problem,
            run: raw.run,
            methods: raw.methods,
            profiles: raw.profiles,
            decision: raw.decision,
        })
    }
}

impl From<ExperimentSpec> for RawSpec {
    fn from(spec: ExperimentSpec) -> RawSpec {
        let (mut problem, mut surrogate, mut classification) = (None, None, None);
        match spec.problem {
            ProblemDecl::Linear(p) => problem = Some(p),
            ProblemDecl::Surrogate(s) => surrogate = Some(s),
            ProblemDecl::Classification(c) => classification = Some(c),
        }
        RawSpec {
            name: spec.name,
            description: spec.description,
            seed: spec.seed,
            sweep: spec.sweep,
            off_sweep: spec.off_sweep,
            problem,
            surrogate,
            classification,
            run: spec.run,
            methods: spec.methods,
            profiles: spec.profiles,
            decision: spec.decision,
        }
    }
}

/// How an experiment is run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSpec {
    /// Repetitions k per setting (fresh noise, fresh training).
    pub repetitions: u64,
    /// Training epochs, a number or an expression in the sweep variables (spec §3: 300·c).
    pub epochs: Num,
    /// Methods to run, by name; the anchor (BLR) is always included when the problem has one.
    pub methods: Vec<String>,
    /// Interval levels of the CICF/PICF/width metrics.
    #[serde(default = "default_levels")]
    pub levels: Vec<f64>,
    /// Repetitions per work unit: the granularity of `--resume` and `--shard`.
    #[serde(default = "default_block")]
    pub block: u64,
    /// The repetition drawn in the band figures.
    #[serde(default)]
    pub band_repetition: u64,
    /// Where the noise sd of a new y comes from for methods without a noise model of their
    /// own (their prediction intervals): `known` ([000]: σ(x) known to every method),
    /// `validation` ([004]: estimated from the problem's validation set) or `residual`
    /// (from the training residuals of the method's mean).
    #[serde(default)]
    pub noise: NoiseSource,
    /// The joint predictions' batch sizes τ (spec §10; `[]` turns them off).
    #[serde(default = "default_joint_tau")]
    pub joint_tau: Vec<usize>,
    /// Dyadic sampling's anchors κ.
    #[serde(default = "default_joint_kappa")]
    pub joint_kappa: usize,
    /// Batches per repetition, region and τ.
    #[serde(default = "default_joint_batches")]
    pub joint_batches: usize,
    /// How each repetition's joint predictive (draws, Gaussian joint) is stored beside its
    /// repetition file: `i8` (8 bits per value, the default), `f32` or `none` (see
    /// [`crate::draws`]). Left out of the recorded spec when it is the default, so that a run
    /// directory written before the setting existed resumes and merges.
    #[serde(default, skip_serializing_if = "DrawFormat::is_default")]
    pub draws: DrawFormat,
}

impl RunSpec {
    /// The joint metrics' settings, `None` when `joint_tau` is empty.
    pub fn joint(&self) -> Option<JointSettings> {
        (!self.joint_tau.is_empty()).then(|| JointSettings {
            tau: self.joint_tau.clone(),
            kappa: self.joint_kappa,
            batches: self.joint_batches,
        })
    }
}

fn default_joint_tau() -> Vec<usize> {
    JointSettings::default().tau
}

fn default_joint_kappa() -> usize {
    JointSettings::default().kappa
}

fn default_joint_batches() -> usize {
    JointSettings::default().batches
}

/// The source of the noise sd of y for methods without a noise model (`run.noise`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseSource {
    /// The problem's true σ(x), as [000] gives it to every method. The PI of a method without
    /// a noise model is then nominal wherever its CI is: its PICF says little.
    #[default]
    Known,
    /// [004]'s estimate from the validation set, per repetition: σ̂² = mean_j max((y_j −
    /// f̂(x_j))² − σ̂_f(x_j)², 0), with f̂ and σ̂_f the method's mean and uncertainty at the
    /// validation inputs (predicted with the test inputs).
    Validation,
    /// The training residuals of the method's mean, per repetition: σ̂² = mean_i (y_i −
    /// f̂(x_i))² (no correction for the net's effective degrees of freedom, which are unknown:
    /// an overfit net estimates σ too small, which is what the PICF then shows).
    Residual,
}

impl NoiseSource {
    /// How the report states it.
    pub fn describe(self) -> &'static str {
        match self {
            NoiseSource::Known => "the true σ(x) (known to every method, [000])",
            NoiseSource::Validation => {
                "estimated per repetition from the validation set ([004]: mean of max((y − f̂)² − σ̂_f², 0))"
            }
            NoiseSource::Residual => {
                "estimated per repetition from the training residuals (mean of (y − f̂)²)"
            }
        }
    }
}

pub use crate::summary::joint::MAX_JOINT_TAU;

fn default_levels() -> Vec<f64> {
    vec![0.95, 0.9, 0.8, 0.7]
}

fn default_block() -> u64 {
    10
}

/// A profile that sets `run.methods` runs a different set of methods: the method tables it
/// does not run (listed, or the `base` of a listed post-hoc method, transitively) are dropped,
/// so that the check that every table is run still catches a misspelt name in the spec itself.
fn prune_methods(table: &mut toml::Table) {
    let listed: Vec<String> = table
        .get("run")
        .and_then(|r| r.get("methods"))
        .and_then(|m| m.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let Some(toml::Value::Table(methods)) = table.get_mut("methods") else {
        return;
    };
    let keep = with_bases(&listed, |m| {
        methods.get(m)?.get("base")?.as_str().map(String::from)
    });
    methods.retain(|k, _| keep.iter().any(|m| m == k));
}

/// The method tables `listed` methods use: themselves and, transitively, the `base` of each
/// post-hoc one (`base_of` reads a table's `base`).
fn with_bases(listed: &[String], base_of: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut keep = listed.to_vec();
    let mut i = 0;
    while i < keep.len() {
        if let Some(base) = base_of(&keep[i]) {
            if !keep.contains(&base) {
                keep.push(base);
            }
        }
        i += 1;
    }
    keep
}

/// Merges `over` into `base`: tables merge key by key, everything else is replaced.
fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

impl ExperimentSpec {
    /// The joint metrics' settings: `[run]`'s (`None` when it turns them off), the defaults
    /// for a spec without `[run]` (scored, not run).
    pub fn joint_settings(&self) -> Option<JointSettings> {
        match &self.run {
            Some(run) => run.joint(),
            None => Some(JointSettings::default()),
        }
    }

    /// The method tables the `listed` methods use: themselves and, transitively, the `base`
    /// of each post-hoc one.
    pub fn tables_used(&self, listed: &[String]) -> Vec<String> {
        with_bases(listed, |m| {
            self.methods.get(m)?.get("base")?.as_str().map(String::from)
        })
    }

    /// Reads and validates a spec file.
    pub fn load(path: &Path) -> Result<ExperimentSpec> {
        Self::load_profile(path, None)
    }

    /// Reads a spec file, applies the named profile, and validates the result.
    pub fn load_profile(path: &Path, profile: Option<&str>) -> Result<ExperimentSpec> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read spec file {}", path.display()))?;
        Self::from_toml_str(&text, profile).with_context(|| format!("spec file {}", path.display()))
    }

    /// Parses a spec from TOML text, applying the named profile. Several profiles may be
    /// given separated by commas (`quick,literal`); they are merged in that order, so a later
    /// one wins where two set the same key.
    pub fn from_toml_str(text: &str, profile: Option<&str>) -> Result<ExperimentSpec> {
        let mut table: toml::Table = toml::from_str(text).context("not valid TOML")?;
        if let Some(names) = profile {
            let profiles = table
                .get("profiles")
                .and_then(|p| p.as_table())
                .cloned()
                .unwrap_or_default();
            for name in names.split(',').map(str::trim) {
                let Some(over) = profiles.get(name).and_then(|p| p.as_table()) else {
                    let known: Vec<&str> = profiles.keys().map(|s| s.as_str()).collect();
                    bail!(
                        "--profile {name}: no such profile; this spec has {} (several may be \
                         given separated by commas)",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    );
                };
                merge(&mut table, over);
                if over
                    .get("run")
                    .and_then(|r| r.as_table())
                    .is_some_and(|r| r.contains_key("methods"))
                {
                    prune_methods(&mut table);
                }
            }
        }
        let spec: ExperimentSpec = toml::Value::Table(table)
            .try_into()
            .context("not a valid experiment spec")?;
        spec.validate()?;
        Ok(spec)
    }

    /// The spec as TOML, without its profiles (what a run directory records).
    pub fn resolved_toml(&self) -> Result<String> {
        let mut copy = self.clone();
        copy.profiles.clear();
        Ok(toml::to_string(&copy)?)
    }

    /// Checks what serde cannot: names, sweep keys and values.
    pub fn validate(&self) -> Result<()> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            bail!(
                "name = {:?}: use letters, digits, `_` and `-` only (it names files and seeds)",
                self.name
            );
        }
        if let Some(run) = &self.run {
            if run.repetitions == 0 {
                bail!("run.repetitions = 0: at least one repetition is needed");
            }
            if run.block == 0 {
                bail!("run.block = 0: a work unit holds at least one repetition");
            }
            for level in &run.levels {
                if !(*level > 0.0 && *level < 1.0) {
                    bail!(
                        "run.levels contains {level}: interval levels lie strictly between 0 and 1"
                    );
                }
            }
            if let Some(joint) = run.joint() {
                joint.check("run.joint_")?;
            }
            if run.band_repetition >= run.repetitions {
                bail!(
                    "run.band_repetition = {}: must be one of the repetitions 0..{}",
                    run.band_repetition,
                    run.repetitions
                );
            }
            let has_validation = self.problem.has_validation();
            if run.noise == NoiseSource::Validation && !has_validation {
                bail!(
                    "run.noise = \"validation\": this problem has no validation set; declare \
                     problem.validation (or surrogate.split.validation > 0), or use \"known\" or \
                     \"residual\""
                );
            }
            if run.noise != NoiseSource::Known && self.problem.track() == Track::Classification {
                bail!(
                    "run.noise = {:?}: a classification problem's labels have no noise sd; leave \
                     run.noise out",
                    run.noise
                );
            }
        }
        for (key, values) in &self.sweep {
            let ident = key
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ident || reserved_name(key) {
                bail!(
                    "sweep.{key}: not a usable variable name; use letters, digits and `_`, \
                     starting with a letter, and not x, x1, x2, …, pi or e (expressions use those)"
                );
            }
            if values.is_empty() {
                bail!("sweep.{key} = []: give at least one value");
            }
            if let Some(v) = values.iter().find(|v| !v.is_finite()) {
                bail!("sweep.{key} contains {v}: values must be finite numbers");
            }
            for (i, v) in values.iter().enumerate() {
                if values[..i].contains(v) {
                    bail!("sweep.{key} lists {v} twice: each setting must be distinct");
                }
            }
        }
        Ok(())
    }

    /// All settings of the sweep, in order.
    pub fn settings(&self) -> Vec<Setting> {
        Setting::all(&self.sweep)
    }

    /// The run section, or an error saying the spec cannot be run.
    pub fn run_spec(&self) -> Result<&RunSpec> {
        self.run.as_ref().with_context(|| {
            format!("experiment `{}` has no [run] section (repetitions, epochs, methods): it cannot be run", self.name)
        })
    }

    /// Training epochs at `setting`: `run.epochs` evaluated with the setting's variables.
    pub fn epochs(&self, setting: &Setting) -> Result<usize> {
        let run = self.run_spec()?;
        let e = run.epochs.eval(&setting.values).context("run.epochs")?;
        if !(e.fract() == 0.0 && (1.0..=1e7).contains(&e)) {
            bail!(
                "run.epochs = {e} at setting {}: a whole number of epochs ≥ 1",
                setting.label()
            );
        }
        Ok(e as usize)
    }

    /// The sweep variables the problem reads (in any of its expressions). The others are
    /// method or training settings (`width`, `wd`, …): the data do not depend on them.
    pub fn problem_variables(&self) -> Vec<String> {
        fn strings(v: &toml::Value, out: &mut Vec<String>) {
            match v {
                toml::Value::String(s) => out.push(s.clone()),
                toml::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
                toml::Value::Table(t) => t.values().for_each(|v| strings(v, out)),
                _ => {}
            }
        }
        let mut texts = Vec::new();
        let value = match &self.problem {
            ProblemDecl::Linear(p) => toml::Value::try_from(p).ok(),
            ProblemDecl::Classification(c) => toml::Value::try_from(c).ok(),
            ProblemDecl::Surrogate(_) => None,
        };
        if let Some(v) = value {
            strings(&v, &mut texts);
        }
        let read: Vec<String> = texts
            .iter()
            .filter_map(|t| Expr::parse(t).ok())
            .flat_map(|e| e.variables())
            .collect();
        self.sweep
            .keys()
            .filter(|k| read.contains(k))
            .cloned()
            .collect()
    }

    /// `setting` restricted to the variables the problem reads: what its data (γ, designs,
    /// noise) are drawn from, so that settings differing only in a method variable share
    /// their data sets and compare paired.
    pub fn problem_setting(&self, setting: &Setting) -> Setting {
        let vars = self.problem_variables();
        Setting {
            values: setting
                .values
                .iter()
                .filter(|(k, _)| vars.contains(k))
                .cloned()
                .collect(),
        }
    }

    /// The settings table of method `name` at `setting`: every string that is an expression
    /// in the sweep variables (`"width"`, `"1e-4 * wd"`) or in constants is replaced by its
    /// value (an integer when whole, so that it can set counts such as `members` or
    /// `hidden`). Other strings (`kind`, `bootstrap = "classic"`) stay as they are.
    pub fn method_table(&self, name: &str, setting: &Setting) -> Result<Option<toml::Table>> {
        fn eval(
            v: &mut toml::Value,
            path: &str,
            spec: &ExperimentSpec,
            setting: &Setting,
        ) -> Result<()> {
            match v {
                toml::Value::String(s) => {
                    let Ok(e) = Expr::parse(s) else {
                        return Ok(());
                    };
                    if !e
                        .variables()
                        .iter()
                        .all(|name| spec.sweep.contains_key(name))
                    {
                        return Ok(());
                    }
                    let x = Num::Expr(s.clone())
                        .eval(&setting.values)
                        .with_context(|| format!("{path} = {s:?}"))?;
                    if !x.is_finite() {
                        bail!(
                            "{path} = {s:?} is {x} at setting {}: settings must be finite",
                            setting.label()
                        );
                    }
                    *v = if x.fract() == 0.0 && x.abs() < 9e15 {
                        toml::Value::Integer(x as i64)
                    } else {
                        toml::Value::Float(x)
                    };
                }
                toml::Value::Array(a) => {
                    for (i, v) in a.iter_mut().enumerate() {
                        eval(v, &format!("{path}[{i}]"), spec, setting)?;
                    }
                }
                toml::Value::Table(t) => {
                    for (k, v) in t.iter_mut() {
                        eval(v, &format!("{path}.{k}"), spec, setting)?;
                    }
                }
                _ => {}
            }
            Ok(())
        }
        let Some(table) = self.methods.get(name) else {
            return Ok(None);
        };
        let mut table = table.clone();
        for (k, v) in table.iter_mut() {
            if k != "kind" {
                eval(v, &format!("[methods.{name}] {k}"), self, setting)?;
            }
        }
        Ok(Some(table))
    }

    /// The problem resolved at `setting` (at the variables it reads, see
    /// [`ExperimentSpec::problem_setting`]).
    pub fn resolve(&self, setting: &Setting) -> Result<Problem> {
        let label = setting.label();
        let setting = &self.problem_setting(setting);
        match &self.problem {
            ProblemDecl::Linear(p) => Problem::resolve(&self.name, self.seed, p, setting),
            ProblemDecl::Surrogate(s) => Problem::from_surrogate(&self.name, self.seed, s, setting),
            ProblemDecl::Classification(c) => {
                Problem::from_classification(&self.name, self.seed, c, setting)
            }
        }
        .with_context(|| {
            if label.is_empty() {
                format!("experiment `{}`", self.name)
            } else {
                format!("experiment `{}`, setting {label}", self.name)
            }
        })
    }
}

#[path = "spec_settings.rs"]
mod settings;

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
