//! Running an experiment: the plan of work units, executing them into the run directory,
//! and summarising a run directory.
//!
//! A run directory holds `spec.resolved.toml` (the spec with the profile applied), one file
//! per (setting, method, repetition) under `reps/`, and the summaries, figures and report.
//! A work unit is a block of repetitions of one method at one setting; its files are written
//! atomically when it finishes, so an interrupted run loses at most the units in progress, and
//! `--resume` skips every unit whose files exist. Results depend only on seeds, never on which
//! units ran together, so resumed, sharded-and-merged and uninterrupted runs are identical.

mod execute;
mod finish;
mod preflight;
pub mod shards;
pub mod timings;

use std::ops::Range;
use std::path::Path;

use anyhow::{bail, Context, Result};
use uqbench_anchor::{Anchor, Problem, Setting};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::rep_path;
use uqbench_experiment::summary::ANCHOR;

use uqbench_methods as registry;

pub use preflight::check_methods;

pub use execute::{execute, schedule, Event};
pub use finish::{finish, finish_partial};

/// One block of repetitions of one method at one setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Index into the plan's settings.
    pub setting: usize,
    /// Method name.
    pub method: String,
    /// Repetitions.
    pub reps: Range<u64>,
}

/// Everything a run does, in a fixed order.
#[derive(Clone)]
pub struct Plan {
    /// The spec (profile applied).
    pub spec: ExperimentSpec,
    /// Settings of the sweep.
    pub settings: Vec<Setting>,
    /// Method names, the anchor first when the problem has one.
    pub methods: Vec<String>,
    /// The work units, in order.
    pub units: Vec<Unit>,
}

impl Plan {
    /// The plan of `spec`, optionally restricted to `only` (names from `run.methods`).
    pub fn new(spec: ExperimentSpec, only: Option<&[String]>) -> Result<Plan> {
        let run = spec.run_spec()?.clone();
        // A surrogate problem has no anchor; `BLR` may then not be listed either.
        let has_anchor = spec.problem.has_anchor();
        if !has_anchor && run.methods.iter().any(|m| m == ANCHOR) {
            bail!(
                "run.methods lists {ANCHOR}, the anchor, but this problem has none (a \
                 [surrogate] problem's f is a random forest; a [classification] problem's truth \
                 is the exact P(y = 1 | x), not a linear model)"
            );
        }
        let mut methods = if has_anchor {
            vec![ANCHOR.to_string()]
        } else {
            Vec::new()
        };
        for m in &run.methods {
            if m != ANCHOR && !methods.contains(m) {
                methods.push(m.clone());
            }
        }
        if let Some(only) = only {
            for m in only {
                if !methods.contains(m) {
                    bail!(
                        "--methods {m}: not a method of this spec; its methods are {}",
                        methods.join(", ")
                    );
                }
            }
            methods.retain(|m| m == ANCHOR || only.contains(m));
        }
        let settings = spec.settings();
        for m in &methods {
            for s in &settings {
                registry::build_for(&spec, m, s).with_context(|| {
                    if s.values.is_empty() {
                        format!("run.methods: `{m}`")
                    } else {
                        format!("run.methods: `{m}` at setting {}", s.label())
                    }
                })?;
            }
        }
        // Tables a listed post-hoc method uses as its base need not be listed themselves.
        let used = spec.tables_used(&run.methods);
        for name in spec.methods.keys() {
            if !used.contains(name) {
                bail!(
                    "[methods.{name}] configures a method that run.methods does not list ({})",
                    run.methods.join(", ")
                );
            }
        }
        for s in &settings {
            spec.epochs(s)?;
        }
        let mut units = Vec::new();
        for (si, _) in settings.iter().enumerate() {
            for m in &methods {
                let mut start = 0;
                while start < run.repetitions {
                    let end = (start + run.block).min(run.repetitions);
                    units.push(Unit {
                        setting: si,
                        method: m.clone(),
                        reps: start..end,
                    });
                    start = end;
                }
            }
        }
        Ok(Plan {
            spec,
            settings,
            methods,
            units,
        })
    }

    /// Keeps only repetitions `reps` of every unit (units are cut at its ends; empty ones
    /// go). A repetition's result does not depend on which others its unit holds.
    pub fn restrict(&mut self, reps: Range<u64>) {
        self.units.retain_mut(|u| {
            u.reps = u.reps.start.max(reps.start)..u.reps.end.min(reps.end);
            u.reps.start < u.reps.end
        });
    }

    /// Repetitions per setting.
    pub fn repetitions(&self) -> u64 {
        self.spec.run.as_ref().map_or(0, |r| r.repetitions)
    }
}

/// Whether every file of `unit` exists.
pub fn unit_done(dir: &Path, plan: &Plan, unit: &Unit) -> bool {
    unit.reps
        .clone()
        .all(|r| rep_path(dir, &plan.settings[unit.setting], &unit.method, r).is_file())
}

/// A setting's resolved problem, its design checked.
pub struct Resolved {
    /// The problem.
    pub problem: Problem,
}

impl Resolved {
    /// Resolves `setting` of `spec`, and for a problem with an anchor checks its design (a
    /// rank-deficient design is an error before anything trains).
    pub fn new(spec: &ExperimentSpec, setting: &Setting) -> Result<Resolved> {
        let problem = spec.resolve(setting)?;
        if problem.linear().is_some() {
            Anchor::fit(&problem)
                .with_context(|| format!("anchor of {}", problem.display_name()))?;
        }
        Ok(Resolved { problem })
    }
}

#[cfg(test)]
mod tests {
    use super::execute::merge_for_gpu;
    use super::*;

    fn unit(setting: usize, method: &str, reps: Range<u64>) -> Unit {
        Unit {
            setting,
            method: method.into(),
            reps,
        }
    }

    #[test]
    fn a_problem_without_an_anchor_cannot_list_it() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/boston.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let blr = text.replace(
            "methods = [\"Bootstrap\", \"CD\", \"EnsNLL\"]",
            "methods = [\"BLR\", \"CD\"]",
        );
        let spec = ExperimentSpec::from_toml_str(&blr, None).unwrap();
        let err = format!("{:#}", Plan::new(spec, None).err().unwrap());
        assert!(err.contains("run.methods lists BLR"), "{err}");
    }

    #[test]
    fn gpu_merging_fills_small_jobs_only() {
        // Blocks of 5 repetitions: BD (1 replica per repetition) merges up to ≥ 12 replicas,
        // Ens (120 per repetition) never; different settings, methods or a gap never merge.
        let units = [
            unit(0, "BD", 0..5),
            unit(0, "BD", 5..10),
            unit(0, "BD", 10..15),
            unit(0, "BD", 15..20),
            unit(0, "Ens", 0..5),
            unit(0, "Ens", 5..10),
            unit(1, "BD", 0..5),
            unit(1, "BD", 10..15),
        ];
        let refs: Vec<&Unit> = units.iter().collect();
        let per = |m: &str| if m == "Ens" { 120 } else { 1 };
        let merged = merge_for_gpu(&refs, &per, 12);
        assert_eq!(
            merged,
            vec![
                unit(0, "BD", 0..15),
                unit(0, "BD", 15..20),
                unit(0, "Ens", 0..5),
                unit(0, "Ens", 5..10),
                unit(1, "BD", 0..5),
                unit(1, "BD", 10..15),
            ]
        );
    }
}
