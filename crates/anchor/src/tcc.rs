//! [002]'s two-class classification problem (TCC, §4.2 and its supplement) with its exact
//! class probability P(y = 1 | x).
//!
//! A label y ~ Bernoulli(p₁) picks one of two 2-D Gaussians, z is drawn from it, and x is z
//! after two maps:
//! - the "black hole" scaling z_s = g(r)·(cos θ, sin θ) with r = ‖z‖, θ = atan2(z₂, z₁) and
//!   g(r) = r·(1 − e^{−λ_scale·r}), so points near the origin are pulled in faster;
//! - the "spiral" rotation x = Rot(λ_rot·‖z_s‖)·z_s.
//!
//! [002]'s supplement writes the scaling as S(z)·z with S = g(r)·diag(cos θ, sin θ), which
//! taken literally gives g(r)·r·(cos²θ, sin²θ): every point lands in the first quadrant and
//! the map is not invertible. The text ("samples closer to the origin are pulled in
//! faster") and the issue that specified this track describe the radial map above, which is
//! what we implement.
//!
//! Both maps are bijections of the plane: the rotation keeps the norm, and g is strictly
//! increasing from g(0) = 0 (g′(r) = 1 − e^{−λr} + λr·e^{−λr} > 0 for r > 0). So x has
//! exactly one pre-image z, and P(y = 1 | x) = p₁N(z; μ₁, Σ₁) / Σ_c p_c N(z; μ_c, Σ_c): the
//! Jacobian of the map is the same for both classes and cancels. The inverse of g is found
//! by safeguarded Newton iteration on a bracket that always holds the root (see
//! [`Tcc::radius_of`]), in f64.
//!
//! As every problem of this crate, the training inputs are drawn once per setting and every
//! repetition draws fresh labels at them: here y_i ~ Bernoulli(P(y = 1 | x_i)), which is the
//! generative model conditioned on the inputs.

use serde::{Deserialize, Serialize};

use crate::design::{Design, DesignSpec, Inputs};
use crate::error::AnchorError;
use crate::expr::Num;
use crate::seed::Rng;

/// One class's Gaussian as written in a spec: `{ mean = [m1, m2], cov = [[a, b], [b, c]] }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassSpec {
    /// The mean of z given the class.
    pub mean: [f64; 2],
    /// The covariance of z given the class (symmetric positive definite).
    pub cov: [[f64; 2]; 2],
}

fn half() -> Num {
    Num::Value(0.5)
}

/// The TCC problem as written in a spec (`[classification]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassificationSpec {
    /// The Gaussian of class 0.
    pub class0: ClassSpec,
    /// The Gaussian of class 1.
    pub class1: ClassSpec,
    /// P(y = 1) (default ½, [002]'s 50/50 mixture).
    #[serde(default = "half")]
    pub p1: Num,
    /// λ_scale of the "black hole" scaling ([002]: 0.2).
    pub lambda_scale: Num,
    /// λ_rot of the "spiral" rotation ([002]: 0.4).
    pub lambda_rot: Num,
    /// Number of training points, drawn from the generative model once per setting.
    pub n_train: Num,
    /// Test inputs (a 2-D design, typically a grid over the plane).
    pub test: DesignSpec,
}

/// A 2-D Gaussian with its precision and log normaliser.
#[derive(Debug, Clone, PartialEq)]
pub struct Gaussian2 {
    /// Mean.
    pub mean: [f64; 2],
    /// Covariance.
    pub cov: [[f64; 2]; 2],
    /// Lower Cholesky factor of the covariance (for sampling).
    chol: [[f64; 2]; 2],
    /// Inverse covariance.
    precision: [[f64; 2]; 2],
    /// −log(2π) − ½·log det Σ.
    log_norm: f64,
}

impl Gaussian2 {
    fn new(spec: &ClassSpec, field: &str) -> Result<Gaussian2, AnchorError> {
        let [[a, b], [b2, c]] = spec.cov;
        let all = [spec.mean[0], spec.mean[1], a, b, b2, c];
        if all.iter().any(|v| !v.is_finite()) {
            return Err(AnchorError::invalid(
                field,
                format!("{spec:?}"),
                "finite numbers in mean and cov",
            ));
        }
        let det = a * c - b * b;
        if b != b2 || a <= 0.0 || det <= 0.0 {
            return Err(AnchorError::invalid(
                format!("{field}.cov"),
                format!("{:?}", spec.cov),
                "a symmetric positive definite 2×2 matrix [[a, b], [b, c]] with a > 0 and \
                 a·c − b² > 0",
            ));
        }
        let l11 = a.sqrt();
        let l21 = b / l11;
        let l22 = (c - l21 * l21).sqrt();
        Ok(Gaussian2 {
            mean: spec.mean,
            cov: spec.cov,
            chol: [[l11, 0.0], [l21, l22]],
            precision: [[c / det, -b / det], [-b / det, a / det]],
            log_norm: -(2.0 * std::f64::consts::PI).ln() - 0.5 * det.ln(),
        })
    }

    /// log N(z; μ, Σ).
    pub fn log_density(&self, z: [f64; 2]) -> f64 {
        let (u, v) = (z[0] - self.mean[0], z[1] - self.mean[1]);
        let p = &self.precision;
        self.log_norm - 0.5 * (p[0][0] * u * u + 2.0 * p[0][1] * u * v + p[1][1] * v * v)
    }

    fn sample(&self, rng: &mut Rng) -> [f64; 2] {
        let (e1, e2) = (rng.normal(), rng.normal());
        let l = &self.chol;
        [
            self.mean[0] + l[0][0] * e1,
            self.mean[1] + l[1][0] * e1 + l[1][1] * e2,
        ]
    }
}

/// The resolved TCC generative model.
#[derive(Debug, Clone, PartialEq)]
pub struct Tcc {
    /// The Gaussians of class 0 and class 1.
    pub classes: [Gaussian2; 2],
    /// P(y = 1).
    pub p1: f64,
    /// λ_scale.
    pub lambda_scale: f64,
    /// λ_rot.
    pub lambda_rot: f64,
}

fn positive(field: &str, v: f64) -> Result<f64, AnchorError> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(AnchorError::invalid(field, v, "a positive, finite number"))
    }
}

impl Tcc {
    /// Resolves the model's numbers of `spec` at the sweep values `vars`.
    pub fn resolve(spec: &ClassificationSpec, vars: &[(String, f64)]) -> Result<Tcc, AnchorError> {
        let p1 = spec.p1.eval(vars)?;
        if !(p1 > 0.0 && p1 < 1.0) {
            return Err(AnchorError::invalid(
                "classification.p1",
                p1,
                "a probability strictly between 0 and 1",
            ));
        }
        Ok(Tcc {
            classes: [
                Gaussian2::new(&spec.class0, "classification.class0")?,
                Gaussian2::new(&spec.class1, "classification.class1")?,
            ],
            p1,
            lambda_scale: positive("classification.lambda_scale", spec.lambda_scale.eval(vars)?)?,
            lambda_rot: positive("classification.lambda_rot", spec.lambda_rot.eval(vars)?)?,
        })
    }

    /// The radial map g(r) = r·(1 − e^{−λ_scale·r}) (1 − e^{−t} as −expm1(−t), exact for
    /// small t).
    pub fn scaled_radius(&self, r: f64) -> f64 {
        r * -(-self.lambda_scale * r).exp_m1()
    }

    /// g⁻¹(ρ) for ρ ≥ 0: the unique r ≥ 0 with g(r) = ρ.
    ///
    /// The root lies in [ρ, ρ + 1/(λe)]: g(r) ≤ r gives g(ρ) ≤ ρ, and r·e^{−λr} ≤ 1/(λe)
    /// gives g(r) ≥ r − 1/(λe), so g(ρ + 1/(λe)) ≥ ρ. Newton steps that leave the bracket
    /// are replaced by bisection, and the bracket shrinks every iteration, so it converges
    /// whatever g′ does near 0 (where g ≈ λr² and Newton alone overshoots).
    pub fn radius_of(&self, rho: f64) -> f64 {
        if rho <= 0.0 {
            return 0.0;
        }
        let lam = self.lambda_scale;
        let (mut lo, mut hi) = (rho, rho + 1.0 / (lam * std::f64::consts::E));
        let mut r = 0.5 * (lo + hi);
        for _ in 0..200 {
            let f = self.scaled_radius(r) - rho;
            if f == 0.0 {
                return r;
            }
            if f < 0.0 {
                lo = r;
            } else {
                hi = r;
            }
            let e = (-lam * r).exp();
            let slope = 1.0 - e + lam * r * e;
            let newton = r - f / slope;
            let next = if slope > 0.0 && newton > lo && newton < hi {
                newton
            } else {
                0.5 * (lo + hi)
            };
            if (next - r).abs() <= 4.0 * f64::EPSILON * r || hi - lo <= 4.0 * f64::EPSILON * hi {
                return next;
            }
            r = next;
        }
        r
    }

    /// x = T(z): the black-hole scaling, then the spiral rotation.
    pub fn forward(&self, z: [f64; 2]) -> [f64; 2] {
        let r = z[0].hypot(z[1]);
        if r == 0.0 {
            return [0.0, 0.0];
        }
        let rho = self.scaled_radius(r);
        let zs = [z[0] / r * rho, z[1] / r * rho];
        let (s, c) = (self.lambda_rot * rho).sin_cos();
        [c * zs[0] - s * zs[1], s * zs[0] + c * zs[1]]
    }

    /// z = T⁻¹(x): rotate back by λ_rot·‖x‖ (the rotation keeps the norm, so ‖x‖ = ‖z_s‖),
    /// then invert the radial scaling.
    pub fn inverse(&self, x: [f64; 2]) -> [f64; 2] {
        let rho = x[0].hypot(x[1]);
        if rho == 0.0 {
            return [0.0, 0.0];
        }
        let (s, c) = (self.lambda_rot * rho).sin_cos();
        let zs = [c * x[0] + s * x[1], -s * x[0] + c * x[1]];
        let r = self.radius_of(rho);
        [zs[0] / rho * r, zs[1] / rho * r]
    }

    /// The exact P(y = 1 | x): the class posterior at the pre-image z, computed as the
    /// logistic of the log odds so that it stays accurate far from both means.
    pub fn prob1(&self, x: &[f64]) -> f64 {
        let z = self.inverse([x[0], x[1]]);
        let log_odds = self.p1.ln() - (1.0 - self.p1).ln() + self.classes[1].log_density(z)
            - self.classes[0].log_density(z);
        logistic(log_odds)
    }

    /// One draw (y, x) of the generative model.
    pub fn sample(&self, rng: &mut Rng) -> (u8, [f64; 2]) {
        let y = u8::from(rng.uniform() < self.p1);
        (y, self.forward(self.classes[usize::from(y)].sample(rng)))
    }

    /// `n` training inputs drawn from the generative model (their labels are discarded: every
    /// repetition draws its own from P(y = 1 | x)), with the bounding box as the region the
    /// training data cover.
    pub fn training_design(&self, n: usize, rng: &mut Rng) -> Design {
        let mut data = Vec::with_capacity(2 * n);
        for _ in 0..n {
            let (_, x) = self.sample(rng);
            data.extend_from_slice(&x);
        }
        Design::bounding_box(Inputs::new(2, data))
    }
}

/// 1/(1 + e^{−t}), without overflow for large |t|.
pub fn logistic(t: f64) -> f64 {
    if t >= 0.0 {
        1.0 / (1.0 + (-t).exp())
    } else {
        let e = t.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn paper() -> Tcc {
        let spec = ClassificationSpec {
            class0: ClassSpec {
                mean: [-2.0, -1.0],
                cov: [[2.0, 0.6], [0.6, 1.5]],
            },
            class1: ClassSpec {
                mean: [2.0, 1.0],
                cov: [[1.5, -0.4], [-0.4, 2.5]],
            },
            p1: half(),
            lambda_scale: Num::Value(0.2),
            lambda_rot: Num::Value(0.4),
            n_train: Num::Value(10.0),
            test: DesignSpec::Points {
                points: vec![vec![0.0, 0.0]],
            },
        };
        Tcc::resolve(&spec, &[]).unwrap()
    }

    #[test]
    fn round_trip_and_norms() {
        let t = paper();
        let mut rng = Rng::new(3);
        let mut worst: f64 = 0.0;
        for k in 0..20_000 {
            // Radii from 1e-6 to 30: near the origin g ≈ λr² is flattest.
            let r = if k % 4 == 0 {
                1e-6 * 10f64.powf(6.0 * rng.uniform())
            } else {
                30.0 * rng.uniform()
            };
            let th = 2.0 * std::f64::consts::PI * rng.uniform();
            let z = [r * th.cos(), r * th.sin()];
            let x = t.forward(z);
            // The rotation keeps the norm: ‖x‖ = g(‖z‖).
            assert!((x[0].hypot(x[1]) - t.scaled_radius(r)).abs() <= 1e-12 * (1.0 + r));
            let back = t.inverse(x);
            let err = (back[0] - z[0]).hypot(back[1] - z[1]) / r.max(1e-300);
            worst = worst.max(err);
            // And x → z → x.
            let again = t.forward(back);
            assert!((again[0] - x[0]).hypot(again[1] - x[1]) <= 1e-12 * (1.0 + x[0].hypot(x[1])));
        }
        // g⁻¹ near 0 loses half the digits (r ≈ √(ρ/λ)): relative error ≤ √ε·10.
        assert!(worst < 1.5e-7, "worst relative round-trip error {worst}");
        assert_eq!(t.inverse([0.0, 0.0]), [0.0, 0.0]);
        // g is monotone with g(0) = 0: the inverse of a grid of radii is increasing.
        let radii: Vec<f64> = (0..1000).map(|i| t.radius_of(i as f64 * 0.03)).collect();
        assert!(radii.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn exact_probability_by_hand() {
        let t = paper();
        // At x = T(z) the probability is the class posterior at z, computed directly.
        let z = [0.3, -0.7];
        let x = t.forward(z);
        let dens = |c: &Gaussian2| {
            let [[a, b], [_, cc]] = c.cov;
            let det = a * cc - b * b;
            let (u, v) = (z[0] - c.mean[0], z[1] - c.mean[1]);
            let q = (cc * u * u - 2.0 * b * u * v + a * v * v) / det;
            (-0.5 * q).exp() / (2.0 * std::f64::consts::PI * det.sqrt())
        };
        let (d0, d1) = (dens(&t.classes[0]), dens(&t.classes[1]));
        let want = d1 / (d0 + d1);
        assert!(
            (t.prob1(&x) - want).abs() < 1e-12,
            "{} vs {want}",
            t.prob1(&x)
        );
        // Far away the log-odds form stays in [0, 1] without NaN.
        let p = t.prob1(&[80.0, -60.0]);
        assert!((0.0..=1.0).contains(&p));
    }

    #[test]
    fn label_frequencies_match_the_exact_probability() {
        // Draw (y, x) from the generative model and bin x into cells; in every cell with at
        // least 400 draws the mean label must match the mean exact probability of the draws
        // in it. Given the x's, the labels are independent Bernoulli(P(y=1|x_i)), so the
        // count has variance Σ p_i(1 − p_i); allow 4.5 sd per cell (over ~40 cells the
        // chance of a false alarm is below 40·7e-6).
        let t = paper();
        let mut rng = Rng::new(11);
        const CELLS: usize = 12;
        let (lo, hi) = (-8.0, 8.0);
        let mut sum_y = vec![0.0; CELLS * CELLS];
        let mut sum_p = vec![0.0; CELLS * CELLS];
        let mut sum_v = vec![0.0; CELLS * CELLS];
        let mut count = vec![0usize; CELLS * CELLS];
        for _ in 0..200_000 {
            let (y, x) = t.sample(&mut rng);
            let cell = |v: f64| ((v - lo) / (hi - lo) * CELLS as f64).floor();
            let (i, j) = (cell(x[0]), cell(x[1]));
            if !(0.0..CELLS as f64).contains(&i) || !(0.0..CELLS as f64).contains(&j) {
                continue;
            }
            let k = i as usize * CELLS + j as usize;
            let p = t.prob1(&x);
            sum_y[k] += f64::from(y);
            sum_p[k] += p;
            sum_v[k] += p * (1.0 - p);
            count[k] += 1;
        }
        let mut checked = 0;
        let mut mixed = 0;
        for k in 0..CELLS * CELLS {
            if count[k] < 400 {
                continue;
            }
            checked += 1;
            let sd = sum_v[k].sqrt().max(1.0);
            let z = (sum_y[k] - sum_p[k]) / sd;
            assert!(
                z.abs() < 4.5,
                "cell {k}: {} labels, expected {:.1} (z = {z:.2})",
                sum_y[k],
                sum_p[k]
            );
            let frac = sum_p[k] / count[k] as f64;
            if (0.1..0.9).contains(&frac) {
                mixed += 1;
            }
        }
        assert!(checked >= 20, "only {checked} cells with enough draws");
        // The check has power only where both classes occur.
        assert!(mixed >= 3, "only {mixed} cells with mixed labels");
    }

    #[test]
    fn bad_settings_are_named() {
        let mut spec = ClassificationSpec {
            class0: ClassSpec {
                mean: [0.0, 0.0],
                cov: [[1.0, 0.0], [0.0, 1.0]],
            },
            class1: ClassSpec {
                mean: [1.0, 0.0],
                cov: [[1.0, 2.0], [2.0, 1.0]],
            },
            p1: half(),
            lambda_scale: Num::Value(0.2),
            lambda_rot: Num::Value(0.4),
            n_train: Num::Value(10.0),
            test: DesignSpec::Points { points: vec![] },
        };
        let e = Tcc::resolve(&spec, &[]).unwrap_err().to_string();
        assert!(e.contains("classification.class1.cov"), "{e}");
        spec.class1.cov = [[1.0, 0.0], [0.0, 1.0]];
        spec.lambda_scale = Num::Value(0.0);
        let e = Tcc::resolve(&spec, &[]).unwrap_err().to_string();
        assert!(e.contains("lambda_scale") && e.contains("positive"), "{e}");
        spec.lambda_scale = Num::Value(0.2);
        spec.lambda_rot = Num::Value(-1.0);
        let e = Tcc::resolve(&spec, &[]).unwrap_err().to_string();
        assert!(e.contains("lambda_rot"), "{e}");
        spec.lambda_rot = Num::Value(0.4);
        spec.p1 = Num::Value(1.0);
        let e = Tcc::resolve(&spec, &[]).unwrap_err().to_string();
        assert!(e.contains("p1"), "{e}");
    }
}
