//! The names of metrics, regions and the scalars the report reads, as summaries and files
//! spell them, in one place: a new metric is named here once, described once in
//! [`super::catalogue`], and every reader (figures, report, compare, tests) uses the
//! constant. Metrics with a level are the prefix and the level's name (`cicf_0.95`), see
//! [`at`]; the joint metrics the prefix and τ (`joint_kl_10`).

use super::levels::level_name;

/// The region of every test input; the others are `uqbench_anchor::Region`'s names.
pub const ALL: &str = "all";
/// Test inputs inside the training region.
pub const IN: &str = "in";
/// Test inputs in a hole of the training region.
pub const GAP: &str = "gap";
/// Test inputs outside the training region.
pub const OUT: &str = "out";

/// Mean |prediction − truth| (spec §2).
pub const DEVIATION: &str = "deviation";
/// Mean predictive std of f (spec §2).
pub const UNCERTAINTY: &str = "uncertainty";
/// Spec §2's coverage of f by the 95% interval (mean ± 1.96·std for a normal family).
pub const COVERAGE: &str = "coverage";
/// CRPS of the predictive distribution of f against the truth.
pub const CRPS: &str = "crps";
/// 2-Wasserstein distance from the method's predictive distribution of f to the anchor's, in
/// the same repetition.
pub const W2_ANCHOR: &str = "w2_anchor";
/// KL(method ‖ anchor) between the predictive distributions of f (normal and Student-t
/// families).
pub const KL_ANCHOR: &str = "kl_anchor";
/// Root mean squared deviation per point.
pub const RMSE: &str = "rmse";
/// Uncertainty over the anchor's (median over a region).
pub const UNCERTAINTY_RATIO: &str = "uncertainty_ratio";
/// In-distribution deviation over the anchor's.
pub const DEVIATION_RATIO: &str = "deviation_ratio";
/// Test inputs in a region.
pub const POINTS: &str = "points";
/// Repetitions left out because training diverged.
pub const DIVERGED: &str = "diverged";
/// Training MSE of the mean prediction over σ².
pub const FIT_RATIO: &str = "fit_ratio";
/// [004]'s pointwise coverage of f, per level.
pub const CICF: &str = "cicf";
/// [004]'s pointwise coverage of y, per level.
pub const PICF: &str = "picf";
/// [004]'s marginal coverage of f, per level.
pub const CICP: &str = "cicp";
/// [004]'s marginal coverage of y, per level.
pub const PICP: &str = "picp";
/// Brier score of the CICF, per level.
pub const CICF_BRIER: &str = "cicf_brier";
/// Brier score of the PICF, per level.
pub const PICF_BRIER: &str = "picf_brier";
/// Mean width of the interval of f (regression) or of P(y = 1 | x) (classification), per
/// level.
pub const WIDTH: &str = "width";
/// Mean width of the prediction interval of y, per level.
pub const PI_WIDTH: &str = "pi_width";

/// Classification: the predicted P(y = 1 | x).
pub const PROB: &str = "prob";
/// Classification: mean |P̂ − P|.
pub const ABS_ERROR: &str = "abs_error";
/// Classification: entropy of the mean probability.
pub const PREDICTIVE_ENTROPY: &str = "predictive_entropy";
/// Classification: mean entropy of the draws.
pub const EXPECTED_ENTROPY: &str = "expected_entropy";
/// Classification: predictive minus expected entropy.
pub const MUTUAL_INFORMATION: &str = "mutual_information";
/// Classification: expected calibration error on fresh labels.
pub const ECE: &str = "ece";
/// Classification: Brier score on fresh labels.
pub const BRIER: &str = "brier";
/// Classification: NLL on fresh labels.
pub const NLL: &str = "nll";
/// Classification: accuracy on fresh labels.
pub const ACCURACY: &str = "accuracy";
/// Classification: ROC AUC on fresh labels.
pub const AUC: &str = "auc";
/// Classification: the coverage of P(y = 1 | x) by the draws' interval, per level.
pub const COVERAGE_AT: &str = "coverage";
/// [003]'s accuracy on the retained fraction q.
pub const REFERRAL_ACCURACY: &str = "referral_accuracy";
/// [003]'s AUC on the retained fraction q.
pub const REFERRAL_AUC: &str = "referral_auc";
/// Random referral's accuracy.
pub const RANDOM_ACCURACY: &str = "random_accuracy";
/// Random referral's AUC.
pub const RANDOM_AUC: &str = "random_auc";

/// Mean squared error of the training fit, (ŷ_i − y_i)² over the training inputs.
pub const TRAIN_MSE: &str = "train_mse";
/// Classification: the reliability part of the Brier score's decomposition.
pub const BRIER_RELIABILITY: &str = "brier_reliability";
/// Classification: the resolution part of the Brier score's decomposition.
pub const BRIER_RESOLUTION: &str = "brier_resolution";
/// Classification: the uncertainty part of the Brier score's decomposition.
pub const BRIER_UNCERTAINTY: &str = "brier_uncertainty";
/// KL from the exact posterior predictive at τ inputs (spec §10), per τ (`joint_kl_10`).
pub const JOINT_KL: &str = "joint_kl";
/// KL from the data-generating distribution at τ inputs (spec §10), per τ.
pub const ENV_KL: &str = "env_kl";
/// Classification: a reliability diagram's mean confidence per bin (`_B`).
pub const RELIABILITY_CONFIDENCE: &str = "reliability_confidence";
/// Classification: a reliability diagram's accuracy per bin.
pub const RELIABILITY_ACCURACY: &str = "reliability_accuracy";
/// Classification: a reliability diagram's share of the points per bin.
pub const RELIABILITY_SHARE: &str = "reliability_share";
/// MCMC: whether a repetition's chains did not mix (R̂ above the threshold).
pub const RHAT_FLAGGED: &str = "rhat_flagged";
/// MCMC: whether a repetition has a chain with E-BFMI below 0.3.
pub const EBFMI_FLAGGED: &str = "ebfmi_flagged";
/// MCMC: divergent transitions after warm-up.
pub const DIVERGENT_TRANSITIONS: &str = "divergent_transitions";
/// MCMC: whether a repetition meets posteriordb's reference standard.
pub const REFERENCE_GRADE: &str = "reference_grade";
/// MCMC: a sampler's Monte Carlo error of its predictive mean of f over the exact posterior's
/// sd, at its worst test input.
pub const MCSE_MEAN_REL_MAX: &str = "mcse_mean_rel_max";
/// MCMC: the same for its predictive sd of f.
pub const MCSE_SD_REL_MAX: &str = "mcse_sd_rel_max";

/// Method scalar: concrete dropout's learned rate p.
pub const LEARNED_P: &str = "learned_p";
/// Method scalar: variational dropout's learned α.
pub const LEARNED_ALPHA: &str = "learned_alpha";
/// Scalar of every trained method: its number of parameters per replica (set by the runner).
pub const PARAMETERS: &str = "parameters";
/// Method scalar: a post-hoc method's held-out points.
pub const CALIBRATION_POINTS: &str = "calibration_points";

/// A levelled metric's name: `at(CICF, 0.95)` is `cicf_0.95`.
pub fn at(prefix: &str, level: f64) -> String {
    format!("{prefix}_{}", level_name(level))
}

/// Decision track: cumulative regret at the horizon.
pub const REGRET: &str = "regret";
/// Decision track: regret / the exact Thompson sampler's.
pub const REGRET_RATIO: &str = "regret_ratio";
/// Decision track: the share of actions on the best arm.
pub const OPTIMAL_FRACTION: &str = "optimal_fraction";
/// Decision track: mean RMSE of the mean against f over the labelling steps.
pub const AL_AUC: &str = "al_auc";
/// Decision track: al_auc / the exact learner's.
pub const AL_AUC_RATIO: &str = "al_auc_ratio";
/// Decision track: mean NLL of f at the horizon of active learning.
pub const AL_NLL: &str = "al_nll";
