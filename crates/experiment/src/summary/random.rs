//! The test inputs of a random-design setting (`design = "random"`, issue 40 §1): every
//! repetition drew its own, so the summary keeps each repetition's truth, σ and regions for
//! its metrics, and reports each test slot (the i-th test input of every repetition, which is
//! its i-th smallest along a 1-D or diagonal design) at its mean position.
//!
//! What that means for the numbers:
//! - a region aggregate is, per repetition, the mean over *that repetition's* points in the
//!   region, then the mean over repetitions: marginal over the inputs, the quantity split
//!   conformal's guarantee is about;
//! - a per-point metric pools slot i over repetitions: along x that is a quantile bin (the
//!   i-th order statistic of the test points), drawn at the slot's mean position;
//! - [004]'s Brier scores of the coverage fractions need the same point in every repetition
//!   and are not reported.

use std::collections::BTreeMap;

use uqbench_anchor::{Problem, Region};

use super::types::{RepInputs, TestInfo};
use crate::bail;
use crate::error::Result;

/// The design name a random-design summary records.
pub const RANDOM: &str = "random";

impl TestInfo {
    /// The test inputs of repetitions `reps` of `problem`: [`TestInfo::of`] for a fixed
    /// design; for a random design each repetition's own, with every slot's mean position,
    /// truth and σ as the per-point fields (region: the mean position's).
    pub fn for_repetitions(problem: &Problem, reps: &[u64]) -> Result<TestInfo> {
        if !problem.is_random_design() || reps.is_empty() {
            return Ok(TestInfo::of(problem));
        }
        let mut own = BTreeMap::new();
        for &r in reps {
            let p = problem.at_repetition(r)?;
            own.insert(
                r,
                RepInputs {
                    x: p.test.inputs.as_slice().to_vec(),
                    region: p.test.region.clone(),
                    truth: p.test.truth.clone(),
                    sigma: p.test.sigma.clone(),
                    coord: p.test.coord.as_ref().map(|(_, c)| c.clone()),
                },
            );
        }
        let mut out = TestInfo::of(problem);
        let k = own.len() as f64;
        // Each slot's mean over the repetitions of a per-slot quantity.
        let mean_of = |f: &dyn Fn(&RepInputs) -> &Vec<f64>| -> Vec<f64> {
            let mut sum = vec![0.0; own.values().next().map_or(0, |r| f(r).len())];
            for r in own.values() {
                for (s, v) in sum.iter_mut().zip(f(r)) {
                    *s += v;
                }
            }
            sum.into_iter().map(|s| s / k).collect()
        };
        let x: Vec<Vec<f64>> = mean_of(&|r| &r.x)
            .chunks(problem.d())
            .map(<[f64]>::to_vec)
            .collect();
        let (truth, sigma) = (mean_of(&|r| &r.truth), mean_of(&|r| &r.sigma));
        if let Some((_, values)) = out.coord.as_mut() {
            // x along a 1-D design, λ along a diagonal: each slot's mean over repetitions.
            *values = mean_of(&|r| {
                r.coord
                    .as_ref()
                    .expect("the same design in every repetition")
            });
        }
        out.region = x.iter().map(|p| problem.train.region_of(p)).collect();
        out.x = x;
        out.truth = truth;
        out.sigma = sigma;
        out.design = Some(RANDOM.to_string());
        out.test_as_train = problem
            .random
            .as_ref()
            .map(|r| r.test.same_distribution(&r.train));
        out.repetitions = Some(own);
        Ok(out)
    }

    /// Whether the repetitions drew their own test inputs.
    pub fn is_random(&self) -> bool {
        self.repetitions.is_some()
    }

    /// Repetition `rep`'s own test inputs, or `None` for a fixed design; an error when a
    /// random design's summary lacks the repetition.
    pub(super) fn own(&self, rep: u64) -> Result<Option<&RepInputs>> {
        match &self.repetitions {
            None => Ok(None),
            Some(map) => match map.get(&rep) {
                Some(r) => Ok(Some(r)),
                None => bail!(
                    "repetition {rep}: its test inputs are not in the random-design summary \
                     (repetitions {:?})",
                    map.keys().collect::<Vec<_>>()
                ),
            },
        }
    }

    /// The truth at repetition `rep`'s test inputs.
    pub(super) fn truth_of(&self, rep: u64) -> Result<&[f64]> {
        Ok(self.own(rep)?.map_or(&self.truth[..], |r| &r.truth[..]))
    }

    /// σ at repetition `rep`'s test inputs.
    pub(super) fn sigma_of(&self, rep: u64) -> Result<&[f64]> {
        Ok(self.own(rep)?.map_or(&self.sigma[..], |r| &r.sigma[..]))
    }

    /// The regions of repetition `rep`'s test inputs.
    pub(super) fn region_of(&self, rep: u64) -> Result<&[Region]> {
        Ok(self.own(rep)?.map_or(&self.region[..], |r| &r.region[..]))
    }
}
