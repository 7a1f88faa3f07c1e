//! The metric catalogue: every metric uqbench computes, once, with its track, how its name is
//! indexed, which way it is better, where it is computed, and where the report and the
//! figures show it. `compare` takes a metric's direction from here, the report its column
//! headers, and a test holds every aggregate of a run to it, so a metric is its computation
//! plus one entry here (and its name in [`super::names`]).

use serde::Serialize;

use super::names as n;

/// The tracks a metric is computed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum On {
    /// Regression problems only.
    Regression,
    /// Classification problems only.
    Classification,
    /// Both tracks.
    Both,
    /// The decision track (`uqbench decide`: bandits and active learning).
    Decision,
}

/// How a metric's name is indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Index {
    /// The name alone (`deviation`).
    None,
    /// Per interval level (`cicf_0.95`, [`super::names::at`]).
    Level,
    /// Per number of joint inputs τ (`joint_kl_10`).
    Tau,
    /// Per retained fraction q of a referral curve (`referral_accuracy_0.5`).
    Fraction,
    /// Per bin of a reliability diagram (`reliability_accuracy_3`).
    Bin,
}

/// Which way a metric is better, as paired comparisons rank it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Smaller is better (errors, distances, proper scores).
    Lower,
    /// Larger is better (accuracy, AUC).
    Higher,
    /// It has a target, not an order (a coverage near its level, a ratio near 1).
    Target,
    /// Neither (an uncertainty, a width, a count, a diagnostic).
    Neither,
}

/// One metric of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MetricInfo {
    /// Its name, or the prefix of an indexed family.
    pub name: &'static str,
    /// How the name is indexed.
    pub index: Index,
    /// Its tracks.
    pub on: On,
    /// Which way it is better.
    pub better: Better,
    /// Where it is computed.
    pub computed: &'static str,
    /// Its column header in `report.md`'s tables, where the report shows it.
    pub column: Option<&'static str>,
    /// The figures (file stems) that draw it.
    pub figures: &'static [&'static str],
    /// What it is.
    pub about: &'static str,
}

const fn metric(name: &'static str, on: On, better: Better, computed: &'static str) -> MetricInfo {
    MetricInfo {
        name,
        index: Index::None,
        on,
        better,
        computed,
        column: None,
        figures: &[],
        about: "",
    }
}

impl MetricInfo {
    const fn indexed(mut self, index: Index) -> MetricInfo {
        self.index = index;
        self
    }
    const fn column(mut self, header: &'static str) -> MetricInfo {
        self.column = Some(header);
        self
    }
    const fn figures(mut self, stems: &'static [&'static str]) -> MetricInfo {
        self.figures = stems;
        self
    }
    const fn about(mut self, about: &'static str) -> MetricInfo {
        self.about = about;
        self
    }
}

use Better::{Higher, Lower, Neither, Target};
use On::{Both, Classification, Decision, Regression};

const COMPUTE: &str = "experiment::summary::compute";
const REP: &str = "experiment::summary::types (per repetition)";
const DISTANCE: &str = "experiment::summary::distance";
const CLASSIFY: &str = "experiment::summary::classify";
const JOINT: &str = "experiment::summary::joint";
const MCMC: &str = "samplers::hmc (per repetition)";
const AGAINST: &[&str] = &["aggregates"];
const DECIDE: &str = "experiment::decision::results";

/// Every metric, regression first.
pub const METRICS: &[MetricInfo] = &[
    metric(n::DEVIATION, Regression, Lower, COMPUTE)
        .column("deviation")
        .figures(&["aggregates", "complexity"])
        .about("mean |prediction − truth| (spec §2)"),
    metric(n::UNCERTAINTY, Regression, Neither, COMPUTE)
        .column("uncertainty")
        .figures(&["aggregates", "complexity"])
        .about("mean predictive std of f (spec §2)"),
    metric(n::COVERAGE, Regression, Target, COMPUTE)
        .column("coverage")
        .figures(&["aggregates", "complexity"])
        .about("coverage of f by the 95% interval (spec §2)"),
    metric(n::CRPS, Regression, Lower, COMPUTE)
        .about("CRPS of the predictive of f against the truth"),
    metric(n::W2_ANCHOR, Regression, Lower, DISTANCE)
        .column("W2 to BLR")
        .figures(&["aggregates", "distance_along"])
        .about("2-Wasserstein distance of the predictive of f to the anchor's"),
    metric(n::KL_ANCHOR, Regression, Lower, DISTANCE)
        .about("KL(method ‖ anchor) of the predictive of f (normal and t families)"),
    metric(n::RMSE, Regression, Lower, COMPUTE).about("root mean squared deviation per point"),
    metric(n::UNCERTAINTY_RATIO, Regression, Target, COMPUTE)
        .column("uncertainty / BLR")
        .about("uncertainty over the anchor's (median over a region)"),
    metric(n::DEVIATION_RATIO, Regression, Neither, COMPUTE)
        .column("deviation / BLR")
        .about("in-distribution deviation over the anchor's (the underfit check)"),
    // Neither, not lower: a fit's training MSE is ≈ σ²·(1 − p_eff/N), and below that it
    // overfits the noise; the target depends on the method's p_eff, which is not known.
    metric(n::FIT_RATIO, Regression, Neither, REP)
        .column("fit ratio")
        .about("training MSE over σ²: about 1 − p_eff/N for a good fit, lower overfits"),
    metric(n::TRAIN_MSE, Regression, Neither, REP)
        .about("training MSE of the mean prediction (≈ σ²·(1 − p_eff/N) for a good fit)"),
    metric(n::CICF, Regression, Target, COMPUTE)
        .indexed(Index::Level)
        .figures(&["coverage_along", "coverage_hist"])
        .about("[004]'s pointwise coverage of f"),
    metric(n::PICF, Regression, Target, COMPUTE)
        .indexed(Index::Level)
        .figures(&["coverage_along", "picf_hist"])
        .about("[004]'s pointwise coverage of y"),
    metric(n::CICP, Regression, Target, COMPUTE)
        .indexed(Index::Level)
        .figures(AGAINST)
        .about("[004]'s marginal coverage of f"),
    metric(n::PICP, Regression, Target, COMPUTE)
        .indexed(Index::Level)
        .about("[004]'s marginal coverage of y"),
    metric(n::CICF_BRIER, Regression, Neither, COMPUTE)
        .indexed(Index::Level)
        .column("CICF Brier")
        .about("Brier score of the CICF against the level"),
    metric(n::PICF_BRIER, Regression, Neither, COMPUTE)
        .indexed(Index::Level)
        .about("Brier score of the PICF against the level"),
    metric(n::WIDTH, Both, Neither, COMPUTE)
        .indexed(Index::Level)
        .column("width")
        .figures(AGAINST)
        .about("mean width of the interval of f (classification: of P(y = 1 | x))"),
    metric(n::PI_WIDTH, Regression, Neither, COMPUTE)
        .indexed(Index::Level)
        .about("mean width of the prediction interval of y"),
    metric(n::JOINT_KL, Regression, Lower, JOINT)
        .indexed(Index::Tau)
        .figures(&["joint", "aggregates"])
        .about("KL from the exact posterior predictive of y at τ inputs (spec §10)"),
    metric(n::ENV_KL, Both, Lower, JOINT)
        .indexed(Index::Tau)
        .figures(&["joint", "aggregates"])
        .about("KL from the data-generating distribution at τ inputs (spec §10)"),
    metric(n::POINTS, Both, Neither, COMPUTE).about("test inputs in a region"),
    metric(n::DIVERGED, Both, Neither, COMPUTE).about("repetitions left out: training diverged"),
    metric(n::PROB, Classification, Neither, CLASSIFY).about("the predicted P(y = 1 | x)"),
    metric(n::ABS_ERROR, Classification, Lower, CLASSIFY)
        .column("abs error")
        .figures(AGAINST)
        .about("mean |P̂ − P|"),
    metric(n::PREDICTIVE_ENTROPY, Classification, Neither, CLASSIFY)
        .about("entropy of the mean probability"),
    metric(n::EXPECTED_ENTROPY, Classification, Neither, CLASSIFY)
        .about("mean entropy of the draws"),
    metric(n::MUTUAL_INFORMATION, Classification, Neither, CLASSIFY)
        .column("MI")
        .about("predictive minus expected entropy"),
    metric(n::ECE, Classification, Lower, CLASSIFY)
        .column("ECE")
        .figures(AGAINST)
        .about("expected calibration error on fresh labels"),
    metric(n::BRIER, Classification, Lower, CLASSIFY)
        .column("Brier")
        .about("Brier score on fresh labels"),
    metric(n::BRIER_RELIABILITY, Classification, Neither, CLASSIFY)
        .about("the Brier score's reliability"),
    metric(n::BRIER_RESOLUTION, Classification, Neither, CLASSIFY)
        .about("the Brier score's resolution"),
    metric(n::BRIER_UNCERTAINTY, Classification, Neither, CLASSIFY)
        .about("the Brier score's uncertainty"),
    metric(n::NLL, Classification, Lower, CLASSIFY)
        .column("NLL")
        .about("negative log-likelihood of fresh labels"),
    metric(n::ACCURACY, Classification, Higher, CLASSIFY)
        .column("accuracy")
        .about("accuracy on fresh labels"),
    metric(n::AUC, Classification, Higher, CLASSIFY)
        .column("AUC")
        .about("ROC AUC on fresh labels"),
    metric(n::COVERAGE_AT, Classification, Target, CLASSIFY)
        .indexed(Index::Level)
        .column("coverage")
        .figures(AGAINST)
        .about("coverage of P(y = 1 | x) by the draws' central interval"),
    metric(n::REFERRAL_ACCURACY, Classification, Higher, CLASSIFY)
        .indexed(Index::Fraction)
        .column("referral")
        .figures(&["referral"])
        .about("[003]'s accuracy on the retained fraction q"),
    metric(n::REFERRAL_AUC, Classification, Higher, CLASSIFY)
        .indexed(Index::Fraction)
        .figures(&["referral"])
        .about("[003]'s AUC on the retained fraction q"),
    metric(n::RANDOM_ACCURACY, Classification, Neither, CLASSIFY)
        .indexed(Index::Fraction)
        .column("random")
        .figures(&["referral"])
        .about("random referral's accuracy"),
    metric(n::RANDOM_AUC, Classification, Neither, CLASSIFY)
        .indexed(Index::Fraction)
        .figures(&["referral"])
        .about("random referral's AUC"),
    metric(n::RELIABILITY_CONFIDENCE, Classification, Neither, CLASSIFY)
        .indexed(Index::Bin)
        .figures(&["reliability"])
        .about("a reliability diagram's mean confidence in a bin (all repetitions pooled)"),
    metric(n::RELIABILITY_ACCURACY, Classification, Neither, CLASSIFY)
        .indexed(Index::Bin)
        .figures(&["reliability"])
        .about("a reliability diagram's accuracy in a bin"),
    metric(n::RELIABILITY_SHARE, Classification, Neither, CLASSIFY)
        .indexed(Index::Bin)
        .about("a reliability diagram's share of the points in a bin"),
    metric(n::RHAT_FLAGGED, Both, Neither, MCMC).about("chains that did not mix (R̂ flagged)"),
    metric(n::EBFMI_FLAGGED, Both, Neither, MCMC).about("a chain with E-BFMI below 0.3"),
    metric(n::DIVERGENT_TRANSITIONS, Both, Neither, MCMC)
        .about("divergent transitions after warm-up"),
    metric(n::REFERENCE_GRADE, Both, Neither, MCMC).about("posteriordb's reference standard met"),
    metric(n::REGRET, Decision, Lower, DECIDE)
        .figures(&["decisions"])
        .about("a bandit's cumulative regret at the horizon, on f (spec §12)"),
    metric(n::REGRET_RATIO, Decision, Lower, DECIDE)
        .about("regret / the exact Thompson sampler's; aggregated as the ratio of means"),
    metric(n::OPTIMAL_FRACTION, Decision, Higher, DECIDE)
        .about("the share of a bandit policy's actions on the best arm"),
    metric(n::AL_AUC, Decision, Lower, DECIDE)
        .figures(&["decisions"])
        .about("active learning: mean RMSE of the mean against f over the steps (spec §12)"),
    metric(n::AL_AUC_RATIO, Decision, Lower, DECIDE)
        .about("al_auc / the exact learner's; aggregated as the ratio of means"),
    metric(n::AL_NLL, Decision, Lower, DECIDE)
        .about("active learning: mean NLL of f under the predictive of f at the horizon"),
];

/// The catalogue entry of a metric as summaries spell it (`deviation`, `cicf_0.95`,
/// `joint_kl_10`, `referral_accuracy_0.5`), or `None` for a name it does not hold (a method's
/// own scalar, such as `learned_p`).
pub fn lookup(name: &str) -> Option<&'static MetricInfo> {
    if let Some(m) = METRICS
        .iter()
        .find(|m| m.index == Index::None && m.name == name)
    {
        return Some(m);
    }
    let (prefix, suffix) = name.rsplit_once('_')?;
    // An integer is a τ or a bin, a number in (0, 1) a level, in (0, 1] a retained fraction:
    // the entry says which.
    let v: f64 = suffix.parse().ok()?;
    METRICS.iter().find(|m| {
        m.name == prefix
            && match m.index {
                Index::Tau | Index::Bin => suffix.parse::<usize>().is_ok(),
                Index::Level => v > 0.0 && v < 1.0,
                Index::Fraction => v > 0.0 && v <= 1.0,
                Index::None => false,
            }
    })
}

/// The report's column header of a metric, by its catalogue name (`width`) or as summaries
/// spell it (`width_0.9`); the name itself where the catalogue gives it none.
pub fn column(name: &str) -> &str {
    METRICS
        .iter()
        .find(|m| m.name == name)
        .or_else(|| lookup(name))
        .and_then(|m| m.column)
        .unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_one_entry_and_found_by_its_spelling() {
        for (i, m) in METRICS.iter().enumerate() {
            // One entry per (name, index kind); `coverage` is regression's 95% coverage and
            // classification's levelled coverage of P.
            let twins = METRICS[i + 1..]
                .iter()
                .filter(|o| {
                    o.name == m.name && (o.index == Index::None) == (m.index == Index::None)
                })
                .count();
            assert_eq!(twins, 0, "{} twice", m.name);
            assert!(!m.about.is_empty(), "{} has no description", m.name);
            let spelt = match m.index {
                Index::None => m.name.to_string(),
                Index::Level => n::at(m.name, 0.95),
                Index::Tau => format!("{}_10", m.name),
                Index::Fraction => format!("{}_0.5", m.name),
                Index::Bin => format!("{}_3", m.name),
            };
            assert_eq!(lookup(&spelt), Some(m), "{spelt}");
        }
        assert_eq!(lookup("learned_p"), None);
        assert_eq!(lookup("joint_kl_0.5"), None);
        assert_eq!(lookup("cicf_1"), None);
        let all_kept = lookup("referral_auc_1").map(|m| m.index);
        assert_eq!(all_kept, Some(Index::Fraction));
        assert_eq!(column(n::WIDTH), "width");
        assert_eq!(column(&n::at(n::CICF_BRIER, 0.9)), "CICF Brier");
        assert_eq!(column(n::CRPS), n::CRPS);
        assert_eq!(
            lookup("cicf_brier_0.9").map(|m| m.name),
            Some(n::CICF_BRIER)
        );
        assert_eq!(
            lookup("coverage_0.9").map(|m| m.on),
            Some(On::Classification)
        );
        assert_eq!(lookup("coverage").map(|m| m.on), Some(On::Regression));
    }
}
