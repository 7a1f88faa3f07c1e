//! Split conformal prediction's finite-sample guarantee, as a test: around any base (here the
//! anchor, the fastest base, once with σ known and once with σ's scale estimated), the
//! marginal coverage of a new y lies in [1 − α, 1 − α + 1/(n_cal + 1)) when the test points
//! are exchangeable with the calibration points. Each repetition draws its own training and
//! test inputs from the same design (the guarantee is over the inputs too), and the coverage
//! of each test point is the exact probability P(y ∈ interval | x) from the known noise.

use statrs::distribution::{ContinuousCDF, Normal};
use uqbench_anchor::{Blr, Rng};
use uqbench_core::{
    central_quantile, Compute, Features, Likelihood, Method, MethodError, NoiseInfo, Prediction,
    QuantileBand, SeedBase, Task,
};
use uqbench_posthoc::{Calibrated, ConformalConfig, RecalibratedConfig, Recalibration, Score};

const N: usize = 60;
const M: usize = 10;
const LEVELS: [f64; 4] = [0.5, 0.8, 0.9, 0.95];

/// f(x) = 1 − 2x + 0.5x³ with features [1, x, x², x³]; σ(x) = 0.3 + 0.5·|x|.
fn features(x: &[f64]) -> Vec<f64> {
    x.iter().flat_map(|&v| [1.0, v, v * v, v * v * v]).collect()
}
fn truth(x: f64) -> f64 {
    1.0 - 2.0 * x + 0.5 * x * x * x
}
fn sigma(x: f64) -> f64 {
    0.3 + 0.5 * x.abs()
}

/// Per repetition, the mean over its M test points of P(y ∈ PI | x) at every level.
fn coverage(method: &dyn Method, known: bool, reps: u64) -> Vec<Vec<f64>> {
    let unit = Normal::standard();
    (0..reps)
        .map(|r| {
            let mut rng = Rng::new(1000 + r);
            let x: Vec<f64> = (0..N).map(|_| rng.uniform_in(-1.0, 1.0)).collect();
            let xt: Vec<f64> = (0..M).map(|_| rng.uniform_in(-1.0, 1.0)).collect();
            let y = vec![x
                .iter()
                .map(|&v| truth(v) + sigma(v) * rng.normal())
                .collect::<Vec<f64>>()];
            let (g, gt) = (features(&x), features(&xt));
            let (s, st): (Vec<f64>, Vec<f64>) = (
                x.iter().map(|&v| sigma(v)).collect(),
                xt.iter().map(|&v| sigma(v)).collect(),
            );
            let task = Task {
                d: 1,
                x_train: &x,
                y_train: &y,
                repetitions: &[r],
                x_test: &xt,
                epochs: 1,
                known_sigma: None,
                seeds: SeedBase {
                    base: r,
                    experiment: "conformal".into(),
                    setting: String::new(),
                },
                features: Some(Features {
                    p: 4,
                    train: &g,
                    test: &gt,
                }),
                noise: NoiseInfo {
                    train: &s,
                    test: &st,
                    known,
                },
                likelihood: Likelihood::Gaussian,
            };
            let out: Prediction = method
                .run(&task, &Compute::host(), false, &|_| {})
                .unwrap()
                .remove(0);
            let cal = out
                .extra
                .calibration
                .as_ref()
                .expect("a calibrated prediction");
            LEVELS
                .iter()
                .map(|&level| {
                    let (lo, hi) = cal.interval(&out.mean, level).unwrap();
                    (0..M)
                        .map(|i| {
                            let (f, s) = (truth(xt[i]), sigma(xt[i]));
                            unit.cdf((hi[i] - f) / s) - unit.cdf((lo[i] - f) / s)
                        })
                        .sum::<f64>()
                        / M as f64
                })
                .collect()
        })
        .collect()
}

/// Mean and standard error over repetitions, per level.
fn mean_se(per_rep: &[Vec<f64>], j: usize) -> (f64, f64) {
    let k = per_rep.len() as f64;
    let mean = per_rep.iter().map(|v| v[j]).sum::<f64>() / k;
    let var = per_rep.iter().map(|v| (v[j] - mean).powi(2)).sum::<f64>() / (k - 1.0);
    (mean, (var / k).sqrt())
}

fn conformal(score: Score) -> Calibrated {
    Calibrated::conformal(
        "Conformal",
        Box::new(Blr),
        &ConformalConfig {
            base: "BLR".into(),
            calibration_fraction: 0.5,
            score,
        },
    )
    .unwrap()
}

#[test]
fn split_conformal_meets_its_finite_sample_guarantee_at_every_level() {
    // 2000 repetitions, n_cal = 30: the guarantee is coverage in [1 − α, 1 − α + 1/31). The
    // repetitions are independent, so the mean over them is within 4 standard errors (the
    // sample SE of the per-repetition coverages; a repetition's coverage given its
    // calibration set is Beta-distributed with sd ≈ sqrt(α(1 − α)/(n + 2)) ≈ 0.05 at α = 0.1,
    // so the SE is ≈ 0.001) of its expectation, with probability 1 − 6e-5 per check.
    let reps = 2000;
    for (score, known) in [
        (Score::Absolute, true),
        (Score::Normalized, true),
        (Score::Absolute, false),
    ] {
        let per_rep = coverage(&conformal(score), known, reps);
        for (j, &level) in LEVELS.iter().enumerate() {
            let (mean, se) = mean_se(&per_rep, j);
            let (lo, hi) = (level, level + 1.0 / 31.0);
            assert!(
                mean > lo - 4.0 * se && mean < hi + 4.0 * se,
                "{score:?}, σ known {known}, level {level}: coverage {mean:.4} ± {se:.4}, \
                 guaranteed [{lo:.4}, {hi:.4})"
            );
        }
    }
}

#[test]
fn recalibrating_an_exact_base_keeps_it_calibrated() {
    // The anchor with σ known is calibrated already: std scaling finds c ≈ 1 and isotonic
    // recalibration moves its quantiles only by the calibration sample's error, so both keep
    // the marginal coverage of y within 0.02 of nominal (the average over 400 repetitions of
    // a coverage whose per-repetition sd is ≤ 0.1: SE ≤ 0.005, so 0.02 is 4 SE).
    for recalibration in [Recalibration::StdScaling, Recalibration::Isotonic] {
        let m = Calibrated::recalibrated(
            "Recalibrated",
            Box::new(Blr),
            &RecalibratedConfig {
                base: "BLR".into(),
                calibration_fraction: 0.5,
                recalibration,
            },
        )
        .unwrap();
        let per_rep = coverage(&m, true, 400);
        for (j, &level) in LEVELS.iter().enumerate() {
            let (mean, _) = mean_se(&per_rep, j);
            assert!(
                (mean - level).abs() < 0.02,
                "{recalibration:?} at {level}: coverage {mean:.4}"
            );
        }
    }
}

#[test]
fn a_calibration_fraction_that_leaves_nothing_is_an_error() {
    for f in [0.0, 1.0, -0.1, 1.5] {
        let err = Calibrated::conformal(
            "Conformal",
            Box::new(Blr),
            &ConformalConfig {
                base: "BLR".into(),
                calibration_fraction: f,
                score: Score::Absolute,
            },
        )
        .err()
        .expect("an error")
        .to_string();
        assert!(err.contains("calibration_fraction"), "{err}");
    }
}

#[test]
fn a_rule_on_the_other_track_is_an_error_before_training() {
    // Conformal prediction and the recalibrations calibrate intervals of y, temperature
    // scaling rescales logits: each refuses the other track's task with an error that names
    // the table, the rule and what the problem takes instead.
    let x: Vec<f64> = (0..8).map(|i| f64::from(i) / 8.0).collect();
    let y = vec![x
        .iter()
        .map(|&v| f64::from(u8::from(v > 0.5)))
        .collect::<Vec<f64>>()];
    let task = |likelihood| Task {
        d: 1,
        x_train: &x,
        y_train: &y,
        repetitions: &[0],
        x_test: &x,
        epochs: 1,
        known_sigma: None,
        seeds: SeedBase {
            base: 0,
            experiment: "mismatch".into(),
            setting: String::new(),
        },
        features: None,
        noise: NoiseInfo {
            train: &[],
            test: &[],
            known: false,
        },
        likelihood,
    };
    let recalibrated = |recalibration| {
        let c = RecalibratedConfig {
            base: "BLR".into(),
            calibration_fraction: 0.25,
            recalibration,
        };
        Calibrated::recalibrated("R", Box::new(Blr), &c).unwrap()
    };
    for (method, likelihood, needles) in [
        (
            conformal(Score::Absolute),
            Likelihood::Bernoulli,
            [
                "split conformal prediction on a classification problem",
                "temperature",
            ],
        ),
        (
            recalibrated(Recalibration::Isotonic),
            Likelihood::Bernoulli,
            [
                "isotonic recalibration on a classification problem",
                "temperature",
            ],
        ),
        (
            recalibrated(Recalibration::Temperature),
            Likelihood::Gaussian,
            ["temperature scaling on a regression problem", "std_scaling"],
        ),
    ] {
        let err = method
            .run(&task(likelihood), &Compute::host(), false, &|_| {})
            .err()
            .expect("an error")
            .to_string();
        for needle in needles {
            assert!(err.contains(needle), "{needle:?} not in {err}");
        }
    }
}

/// A quantile base from the anchor, deliberately too narrow: per level the band
/// μ ± 0.5·z·sqrt(std² + σ²) of y (half the exact predictive band's width).
struct NarrowBands;

impl Method for NarrowBands {
    fn name(&self) -> &str {
        "NarrowBands"
    }
    fn replicas_per_repetition(&self) -> usize {
        1
    }
    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let mut out = Blr.run(task, compute, keep, progress)?;
        for p in &mut out {
            let sd: Vec<f64> = p
                .std
                .iter()
                .zip(task.noise.test)
                .map(|(s, n)| (s * s + n * n).sqrt())
                .collect();
            p.extra.quantiles = Some(
                LEVELS
                    .iter()
                    .map(|&level| {
                        let z = 0.5 * central_quantile(level, None);
                        QuantileBand {
                            level,
                            lower: p.mean.iter().zip(&sd).map(|(m, s)| m - z * s).collect(),
                            upper: p.mean.iter().zip(&sd).map(|(m, s)| m + z * s).collect(),
                        }
                    })
                    .collect(),
            );
        }
        Ok(out)
    }
}

#[test]
fn cqr_meets_the_split_conformal_guarantee_around_too_narrow_bands() {
    // The bands alone cover far less than nominal (half-width bands of a normal: at level
    // 0.9 about 0.59); CQR's scores widen them to the guarantee [1 − α, 1 − α + 1/31), within
    // 4 standard errors over 2000 independent repetitions (as above).
    let cqr = Calibrated::cqr("CQR", Box::new(NarrowBands), 0.5).unwrap();
    let per_rep = coverage(&cqr, true, 2000);
    for (j, &level) in LEVELS.iter().enumerate() {
        let (mean, se) = mean_se(&per_rep, j);
        let (lo, hi) = (level, level + 1.0 / 31.0);
        assert!(
            mean > lo - 4.0 * se && mean < hi + 4.0 * se,
            "CQR at level {level}: coverage {mean:.4} ± {se:.4}, guaranteed [{lo:.4}, {hi:.4})"
        );
    }
}
