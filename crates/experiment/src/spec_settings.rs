//! Settings given on the command line or from Python (`--setting f_main=2`): checked against
//! the spec's sweep.

use std::collections::BTreeMap;

use crate::bail;
use crate::error::{Context, Result};
use crate::spec::ExperimentSpec;
use uqbench_anchor::Setting;

impl ExperimentSpec {
    /// A setting from `KEY=VALUE` arguments. Keys must be sweep variables and values among
    /// the sweep's (any finite number where the spec says `off_sweep = true`); a variable not
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
            let values = &self.sweep[key];
            if !self.off_sweep && !values.contains(&v) {
                let listed: Vec<String> = values.iter().map(|v| v.to_string()).collect();
                bail!(
                    "--setting {arg:?}: {v} is not one of sweep.{key}'s values; valid: {} (or \
                     `off_sweep = true` at the top of the spec, to allow any value)",
                    listed.join(", ")
                );
            }
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
