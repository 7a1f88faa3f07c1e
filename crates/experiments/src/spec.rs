//! Experiment specs: the TOML files in `experiments/`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use uqbench_anchor::{problem::reserved_name, Problem, ProblemSpec, Setting};

/// One experiment: a problem, the sweep over its settings, and (later) methods and profiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    /// Short name, used in seeds and file names (letters, digits, `_`, `-`).
    pub name: String,
    /// One line saying what the experiment is.
    #[serde(default)]
    pub description: String,
    /// Base seed of every random draw in the experiment.
    pub seed: u64,
    /// Sweep variables and their values (`f_main = [1, 2, 3]`); settings are their product.
    #[serde(default)]
    pub sweep: BTreeMap<String, Vec<f64>>,
    /// The regression problem.
    pub problem: ProblemSpec,
}

impl ExperimentSpec {
    /// Reads and validates a spec file.
    pub fn load(path: &Path) -> Result<ExperimentSpec> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read spec file {}", path.display()))?;
        let spec: ExperimentSpec = toml::from_str(&text).with_context(|| {
            format!(
                "spec file {} is not a valid experiment spec",
                path.display()
            )
        })?;
        spec.validate()
            .with_context(|| format!("spec file {}", path.display()))?;
        Ok(spec)
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

    /// The problem resolved at `setting`.
    pub fn resolve(&self, setting: &Setting) -> Result<Problem> {
        let label = setting.label();
        Problem::resolve(&self.name, self.seed, &self.problem, setting).with_context(|| {
            if label.is_empty() {
                format!("experiment `{}`", self.name)
            } else {
                format!("experiment `{}`, setting {label}", self.name)
            }
        })
    }

    /// A setting from `KEY=VALUE` arguments. Keys must be sweep variables; a variable not
    /// given takes its first sweep value.
    pub fn parse_setting(&self, args: &[String]) -> Result<Setting> {
        let mut given: BTreeMap<String, f64> = BTreeMap::new();
        for arg in args {
            let Some((key, value)) = arg.split_once('=') else {
                bail!("--setting {arg:?}: expected KEY=VALUE, e.g. --setting f_main=2");
            };
            let key = key.trim();
            if !self.sweep.contains_key(key) {
                let keys: Vec<&str> = self.sweep.keys().map(String::as_str).collect();
                if keys.is_empty() {
                    bail!(
                        "--setting {arg:?}: experiment `{}` has no sweep variables",
                        self.name
                    );
                }
                bail!(
                    "--setting {arg:?}: `{key}` is not a sweep variable of experiment `{}`; valid: {}",
                    self.name,
                    keys.join(", ")
                );
            }
            let v: f64 = value
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .with_context(|| format!("--setting {arg:?}: `{value}` is not a finite number"))?;
            given.insert(key.to_string(), v);
        }
        Ok(Setting {
            values: self
                .sweep
                .iter()
                .map(|(k, values)| (k.clone(), given.get(k).copied().unwrap_or(values[0])))
                .collect(),
        })
    }
}
