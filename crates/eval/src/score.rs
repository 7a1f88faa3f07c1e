//! Scoring predictions made elsewhere (`uqbench score`, the Python package): a method's
//! stored repetitions of one setting, summarised exactly like a native run's, with the anchor
//! alongside where the problem has one.

use std::collections::BTreeMap;

use uqbench_anchor::{Blr, Problem, Setting, ANCHOR};
use uqbench_core::Compute;

use crate::bail;
use crate::error::Result;
use crate::predict::{label_source, predict};
use crate::spec::ExperimentSpec;
use crate::summary::{SettingSummary, TestInfo};
use crate::track::{Stored, Track};

/// Summarises `method`'s repetitions `external` (repetition k at index k, in its track's
/// stored form) of `setting`, at interval `levels`, with the anchor computed for the same
/// repetitions through the same path as in a run.
pub fn score_setting(
    spec: &ExperimentSpec,
    setting: &Setting,
    problem: &Problem,
    method: &str,
    external: Vec<Stored>,
    levels: &[f64],
) -> Result<SettingSummary> {
    if method == ANCHOR {
        bail!("method name {ANCHOR}: that name is the anchor's; choose another");
    }
    let track = Track::of(problem);
    let reps: Vec<u64> = (0..external.len() as u64).collect();
    let mut methods = BTreeMap::new();
    if problem.linear().is_some() {
        let anchor = predict(
            spec,
            setting,
            problem,
            &Blr,
            &reps,
            &Compute::host(),
            &|_| {},
        )?;
        methods.insert(ANCHOR.to_string(), anchor);
    }
    methods.insert(method.to_string(), external);
    let labels = label_source(spec, problem);
    track.summarize_setting(
        &setting.label(),
        TestInfo::of(problem),
        methods,
        levels,
        &labels,
    )
}
