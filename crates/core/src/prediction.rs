//! What a method returns for one repetition ([`Prediction`]), the shape of its predictive
//! distribution ([`Family`]) and the intervals that come from it, and the combination of an
//! ensemble's members.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

use crate::calibration::{Calibration, QuantileBand};

/// The shape of a method's predictive distribution of f(x*), which its intervals come from
/// (spec §2).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Family {
    /// Normal: mean ± z·std.
    #[default]
    Normal,
    /// Student t with `dof` degrees of freedom, location `mean` and scale `std`: mean ± t·std
    /// (the anchor with σ unknown; the naive bootstrap's t_M).
    StudentT {
        /// Degrees of freedom ν > 0.
        dof: f64,
    },
    /// The empirical distribution of the method's samples (members, MC passes or MCMC
    /// draws): intervals are their quantiles; the samples must be returned.
    Empirical,
    /// A Student t at every input with degrees of freedom and scales of its own
    /// ([`TMarginals`] in `Prediction::marginals_t`; location `mean`): deep evidential
    /// regression's 2α(x). Its intervals and CRPS are the t's, computed when the repetition
    /// is stored.
    StudentTPerInput,
}

/// Student-t marginals whose degrees of freedom differ between inputs (deep evidential
/// regression): at test input i, f ∼ t_{ν_i}(mean_i, `f_scale`_i²) and a new y ∼
/// t_{ν_i}(mean_i, `y_scale`_i²). Their product is the method's joint (spec §10).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TMarginals {
    /// ν_i per test input (> 0).
    pub dof: Vec<f64>,
    /// The scale of f's t per test input.
    pub f_scale: Vec<f64>,
    /// The scale of y's t per test input.
    pub y_scale: Vec<f64>,
}

/// How a method reports its intervals, as a spec setting (`intervals = "normal"` or
/// `"empirical"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalSetting {
    /// mean ± z·std of the members or passes ([000]'s mean ± 1.96·uncertainty).
    #[default]
    Normal,
    /// The empirical quantiles of the members or passes.
    Empirical,
}

impl IntervalSetting {
    /// The family this setting gives.
    pub fn family(self) -> Family {
        match self {
            IntervalSetting::Normal => Family::Normal,
            IntervalSetting::Empirical => Family::Empirical,
        }
    }
}

/// A method's result for one repetition.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prediction {
    /// Prediction of f at every test input.
    pub mean: Vec<f64>,
    /// Uncertainty (std of f) at every test input.
    pub std: Vec<f64>,
    /// Aleatoric noise sd at every test input, when the method models it.
    pub noise_std: Option<Vec<f64>>,
    /// Whether the method's noise model is the problem's known σ(x) (the anchor with σ
    /// known): its prediction intervals use σ(x), as a `None` noise sd reads, and no noise sd
    /// is estimated for it (`run.noise`).
    pub noise_known: bool,
    /// The predictive distribution's family: where the intervals come from.
    pub family: Family,
    /// Member predictions or Monte-Carlo samples, one row per member or sample: when asked,
    /// and always for the [`Family::Empirical`] family.
    pub samples: Option<Vec<Vec<f64>>>,
    /// The mean prediction at the training inputs (the training fit), when the method has one.
    pub train_mean: Option<Vec<f64>>,
    /// Scalars such as `learned_p`, `final_objective` or `diverged_members`.
    pub scalars: BTreeMap<String, f64>,
    /// Whether the repetition diverged and must be left out of the metrics: its replica
    /// diverged, or for an ensemble fewer than two members (one, for a single-member
    /// ensemble) remain after dropping diverged members.
    pub diverged: bool,
    /// What only some methods return (a mixture's sd, per-draw noise, per-input t's, a
    /// calibration, quantile bands, a closed-form joint), in one typed place.
    pub extra: Extra,
}

/// The outputs of a [`Prediction`] that only some methods have. Every field is `None` for a
/// method that does not return it, and each says which methods do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Extra {
    /// The sd of the predictive distribution of a new y at every test input, when it is not
    /// sqrt(std² + noise_std²): a mean–variance ensemble's mixture has variance
    /// mean_m σ²_m + (1/M)·Σ_m (μ_m − μ̄)² (Lakshminarayanan et al. 2017), with 1/M where the
    /// uncertainty of f, the members' sample std, has 1/(M − 1).
    pub predictive_std: Option<Vec<f64>>,
    /// The noise sd that goes with each sample (one per row of `samples`), when the method
    /// draws the noise with its samples (HMC's σ draws): the predictive of y is then the
    /// mixture of N(sample, σ_s²) over the samples, not a mixture with one σ.
    pub noise_samples: Option<Vec<f64>>,
    /// The noise sd of each row of `samples` at every test input, when each draw carries its
    /// own (a mean–variance ensemble's members, σ_m(x)): the joint predictive of y is then the
    /// mixture of Π_i N(sample_i, σ_m(x_i)²) (spec §10).
    pub sample_noise: Option<Vec<Vec<f64>>>,
    /// Student-t marginals of f and y per test input, when their degrees of freedom differ
    /// between inputs (deep evidential regression, family [`Family::StudentTPerInput`]): its
    /// intervals, CRPS and joint (their product, spec §10) come from them, whatever its
    /// samples, which then only give its W2 to the anchor.
    pub marginals_t: Option<TMarginals>,
    /// A post-hoc calibration of the interval of y (conformal, recalibration): when present,
    /// the prediction interval comes from it instead of the family (see
    /// [`crate::calibration`]); the interval of f stays the family's.
    pub calibration: Option<Calibration>,
    /// Central prediction intervals of y read off quantile outputs (quantile regression, the
    /// networks of CQR), one band per level: the PI at those levels when there is no
    /// calibration.
    pub quantiles: Option<Vec<QuantileBand>>,
    /// A Gaussian (or, with a Student-t family, t) joint of f at the test inputs, when the
    /// method has one in closed form (BLR, GP, linearised Laplace): the joint predictions'
    /// input (spec §10).
    pub joint: Option<FactorJoint>,
    /// The Monte Carlo standard errors of a sampler's predictive mean and sd of f at every test
    /// input (HMC): the summary reports them relative to the exact posterior's sd
    /// (`mcse_mean_rel_max`, `mcse_sd_rel_max`) where the problem has one.
    pub mcse: Option<MonteCarloErrors>,
}

/// Per test input, the Monte Carlo standard error of a sampler's estimate of the predictive
/// mean and of the predictive sd of f.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MonteCarloErrors {
    /// Of the mean, per test input.
    pub mean: Vec<f64>,
    /// Of the sd, per test input.
    pub sd: Vec<f64>,
}

impl Extra {
    /// Only a closed-form joint (the anchor, the GP, linearised Laplace), where there is one.
    pub fn joint(joint: Option<FactorJoint>) -> Extra {
        Extra {
            joint,
            ..Extra::default()
        }
    }
}

/// The covariance (a t's scale matrix) of f at the test inputs as a factor: Cov = F·Fᵀ.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FactorJoint {
    /// F `[M, rank]`, row-major: one row per test input.
    pub factor: Vec<f64>,
    /// The columns of F.
    pub rank: usize,
}

impl FactorJoint {
    /// Splits the rows after the first `m` off.
    pub fn split_off(&mut self, m: usize) -> FactorJoint {
        FactorJoint {
            factor: self.factor.split_off(m * self.rank),
            rank: self.rank,
        }
    }
}

impl Prediction {
    /// A normal predictive of f: `mean`, `std`, and the draws behind them if any.
    pub fn normal(mean: Vec<f64>, std: Vec<f64>, samples: Option<Vec<Vec<f64>>>) -> Prediction {
        Prediction {
            mean,
            std,
            family: Family::Normal,
            samples,
            ..Prediction::default()
        }
    }

    /// Splits the predictions at the test inputs after the first `m` off (inputs a caller
    /// appended to the task's test inputs: validation or calibration points) and returns
    /// them: mean, std, noise and predictive sd, and samples; the per-draw noise sds stay
    /// with both.
    pub fn split_tail(&mut self, m: usize) -> Prediction {
        let e = &mut self.extra;
        if let Some(c) = &mut e.calibration {
            c.truncate(m);
        }
        let tail = |v: &mut Option<Vec<f64>>| v.as_mut().map(|v| v.split_off(m));
        let rows = |v: &mut Option<Vec<Vec<f64>>>| {
            v.as_mut()
                .map(|rows| rows.iter_mut().map(|r| r.split_off(m)).collect())
        };
        Prediction {
            mean: self.mean.split_off(m),
            std: self.std.split_off(m),
            noise_std: tail(&mut self.noise_std),
            samples: rows(&mut self.samples),
            extra: Extra {
                predictive_std: tail(&mut e.predictive_std),
                noise_samples: e.noise_samples.clone(),
                sample_noise: rows(&mut e.sample_noise),
                quantiles: e.quantiles.as_mut().map(|bands| {
                    bands
                        .iter_mut()
                        .map(|b| QuantileBand {
                            level: b.level,
                            lower: b.lower.split_off(m),
                            upper: b.upper.split_off(m),
                        })
                        .collect()
                }),
                joint: e.joint.as_mut().map(|j| j.split_off(m)),
                ..Extra::default()
            },
            noise_known: self.noise_known,
            family: self.family,
            diverged: self.diverged,
            ..Prediction::default()
        }
    }
}

/// The factor q with P(|T| ≤ q) = level, T standard normal (`dof = None`) or Student t.
pub fn central_quantile(level: f64, dof: Option<f64>) -> f64 {
    assert!(
        level > 0.0 && level < 1.0,
        "interval level {level} must lie in (0, 1)"
    );
    let p = 0.5 + level / 2.0;
    match dof {
        None => Normal::standard().inverse_cdf(p),
        Some(nu) => StudentsT::new(0.0, 1.0, nu)
            .expect("degrees of freedom are positive")
            .inverse_cdf(p),
    }
}

/// Mean and sample standard deviation (n − 1 denominator; 0 for one row) over rows, per
/// column: members' passes in f32, a sampler's draws in f64.
pub fn mean_std<R: AsRef<[V]>, V: Copy + Into<f64>>(rows: &[R]) -> (Vec<f64>, Vec<f64>) {
    let m = rows[0].as_ref().len();
    let k = rows.len() as f64;
    let mut mean = vec![0.0; m];
    for r in rows {
        for (acc, &v) in mean.iter_mut().zip(r.as_ref()) {
            *acc += v.into();
        }
    }
    for v in &mut mean {
        *v /= k;
    }
    let mut std = vec![0.0; m];
    if rows.len() > 1 {
        for r in rows {
            for ((acc, &v), mu) in std.iter_mut().zip(r.as_ref()).zip(&mean) {
                *acc += (v.into() - mu).powi(2);
            }
        }
        for v in &mut std {
            *v = (*v / (k - 1.0)).sqrt();
        }
    }
    (mean, std)
}

/// One trained member (replica) of a repetition, as [`combine_members`] takes it.
#[derive(Debug, Clone)]
pub struct Member<'a> {
    /// Its test predictions, one row per prediction pass (one row without a stochastic
    /// layer).
    pub passes: Vec<&'a [f32]>,
    /// Its mean prediction at the training inputs.
    pub train: &'a [f32],
    /// Its final training objective.
    pub objective: f64,
    /// Whether its training diverged.
    pub diverged: bool,
}

/// The output of one repetition from its members: diverged members are dropped (counted in
/// the scalar `diverged_members`); the prediction and uncertainty are the mean and sample
/// std over the remaining members' passes, the training fit the mean of their training
/// predictions, `final_objective` the mean of their objectives. The repetition itself counts
/// as diverged when fewer than two members remain (fewer than one for a single member).
pub fn combine_members(members: &[Member<'_>], family: Family, keep_samples: bool) -> Prediction {
    let kept: Vec<&Member<'_>> = members.iter().filter(|m| !m.diverged).collect();
    let dropped = members.len() - kept.len();
    let diverged = kept.len() < members.len().min(2);
    // A diverged repetition still reports what it has (for the record), from all members.
    let used: Vec<&Member<'_>> = if diverged {
        members.iter().collect()
    } else {
        kept
    };
    let rows: Vec<&[f32]> = used.iter().flat_map(|m| m.passes.iter().copied()).collect();
    let (mean, std) = mean_std(&rows);
    let train_rows: Vec<&[f32]> = used.iter().map(|m| m.train).collect();
    let (train_mean, _) = mean_std(&train_rows);
    let mut scalars = BTreeMap::new();
    scalars.insert(
        "final_objective".to_string(),
        used.iter().map(|m| m.objective).sum::<f64>() / used.len() as f64,
    );
    if members.len() > 1 {
        scalars.insert("diverged_members".to_string(), dropped as f64);
    }
    Prediction {
        mean,
        std,
        noise_std: None,
        noise_known: false,
        family,
        samples: (keep_samples || family == Family::Empirical).then(|| {
            rows.iter()
                .map(|r| r.iter().map(|&v| f64::from(v)).collect())
                .collect()
        }),
        train_mean: Some(train_mean),
        scalars,
        diverged,
        extra: Extra::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diverged_members_are_dropped_and_counted() {
        fn member<'a>(p: &'a [f32], t: &'a [f32], diverged: bool) -> Member<'a> {
            Member {
                passes: vec![p],
                train: t,
                objective: 1.0,
                diverged,
            }
        }
        let (a, b, c, t) = (
            &[1.0f32, 2.0][..],
            &[3.0f32, 4.0][..],
            &[f32::NAN, f32::NAN][..],
            &[0.5f32][..],
        );
        let out = combine_members(
            &[member(a, t, false), member(c, t, true), member(b, t, false)],
            Family::Normal,
            false,
        );
        assert!(!out.diverged);
        assert_eq!(out.mean, vec![2.0, 3.0]);
        // Sample std of {1, 3} and {2, 4}: sqrt(2).
        assert!((out.std[0] - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(out.scalars["diverged_members"], 1.0);
        // One member left of three: the repetition is left out.
        let out = combine_members(
            &[member(a, t, false), member(c, t, true), member(c, t, true)],
            Family::Normal,
            false,
        );
        assert!(out.diverged);
        assert_eq!(out.scalars["diverged_members"], 2.0);
        // A single member that did not diverge is enough on its own.
        let out = combine_members(&[member(a, t, false)], Family::Normal, false);
        assert!(!out.diverged && !out.scalars.contains_key("diverged_members"));
        // The empirical family always returns its samples.
        let out = combine_members(
            &[member(a, t, false), member(b, t, false)],
            Family::Empirical,
            false,
        );
        assert_eq!(out.samples.unwrap().len(), 2);
    }
}
