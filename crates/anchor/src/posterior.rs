//! The exact posterior of Bayesian linear regression with the flat prior π(γ) ∝ 1 (the
//! anchor), in f64.
//!
//! With Φ the N×p matrix of training features and W = diag(1/σ(x_i)),
//!
//! ```text
//! γ | D ~ N(γ̂, (ΦᵀW²Φ)⁻¹),          γ̂ = (ΦᵀW²Φ)⁻¹ ΦᵀW² y
//! f(x*) | D ~ N(G(x*)ᵀγ̂, G(x*)ᵀ(ΦᵀW²Φ)⁻¹G(x*))
//! ```
//!
//! which for constant σ is spec §1's σ²·G(x*)ᵀVG(x*). It is computed from a Householder QR of
//! the column-equilibrated weighted design, W Φ D = Q R (D scales every column to unit
//! norm), never an explicit inverse: γ̂ = D R⁻¹ Qᵀ W y and Var f(x*) = ‖R⁻ᵀ D G(x*)‖². The
//! numerical rank comes from the singular values of R (those of W Φ D): a singular value below
//! 1e-10 of the largest counts as zero, and a rank below p is an error naming the problem.
//!
//! When only the shape of σ(x) is known (`sigma_known = false`), the scale τ is estimated by
//! s² = ‖W(y − Φγ̂)‖² / (N − p) and the posterior of f(x*) under the prior π(γ, τ) ∝ 1/τ is a
//! Student t with N − p degrees of freedom, location G(x*)ᵀγ̂ and scale s·‖R⁻ᵀ D G(x*)‖ (the
//! classical OLS intervals of the oracle in [002]).
//!
//! The fit depends only on the inputs, so [`Anchor::fit`] runs once per setting and
//! [`Anchor::posterior`] costs O(N·p + M·p) per repetition.

use nalgebra::{DMatrix, DVector};
use uqbench_core::central_quantile;

use crate::design::Inputs;
use crate::error::AnchorError;
use crate::features::FeatureMap;
use crate::problem::Problem;

/// Singular values of the equilibrated design below this fraction of the largest count as
/// zero when determining the rank.
pub const RANK_TOLERANCE: f64 = 1e-10;

/// The anchor for one problem and setting: everything that does not depend on y.
#[derive(Debug, Clone)]
pub struct Anchor {
    n: usize,
    p: usize,
    /// Thin Q (N×p) of W Φ D.
    q: DMatrix<f64>,
    /// R (p×p), upper triangular.
    r: DMatrix<f64>,
    /// Column scales D.
    col_scale: DVector<f64>,
    /// W = 1/σ(x_i).
    weights: DVector<f64>,
    /// Test features G(x*) (M×p).
    test_g: DMatrix<f64>,
    /// Z = R⁻ᵀ D G(x*)ᵀ (p×M): the covariance of f at the test inputs is scale²·ZᵀZ.
    test_z: DMatrix<f64>,
    /// ‖R⁻ᵀ D G(x*)‖² per test point.
    test_var: Vec<f64>,
    /// σ(x*) per test point.
    test_sigma: Vec<f64>,
    sigma_known: bool,
    condition: f64,
}

/// The posterior at the test inputs for one data set.
#[derive(Debug, Clone, PartialEq)]
pub struct Posterior {
    /// Posterior mean of f(x*) (the prediction).
    pub mean: Vec<f64>,
    /// Posterior standard deviation of f(x*) (the epistemic uncertainty). For the Student-t
    /// case, the scale of the t distribution.
    pub std: Vec<f64>,
    /// The noise standard deviation at x* (σ(x*), or its estimate s·σ(x*) when only the shape
    /// is known).
    pub noise_std: Vec<f64>,
    /// Degrees of freedom of the Student-t posterior; `None` for the normal posterior.
    pub dof: Option<f64>,
    /// The joint of f at the test inputs: a factor F `[M, p]` (row-major) with Cov f = F·Fᵀ
    /// (for the Student-t posterior, the scale matrix), F = scale·(R⁻ᵀ D G*ᵀ)ᵀ. Its rows'
    /// norms are `std`.
    pub factor: Vec<f64>,
    /// γ̂.
    pub gamma_hat: Vec<f64>,
    /// The fitted values G(x_i)ᵀγ̂ at the training inputs.
    pub fitted: Vec<f64>,
}

impl Posterior {
    /// Standard deviation (scale) of the predictive distribution of a new y at x*:
    /// sqrt(std² + noise_std²).
    pub fn predictive_std(&self) -> Vec<f64> {
        self.std
            .iter()
            .zip(&self.noise_std)
            .map(|(s, n)| (s * s + n * n).sqrt())
            .collect()
    }

    /// The covariance of f at the test inputs (a t's scale matrix), F·Fᵀ, as rows.
    pub fn cov(&self) -> Vec<Vec<f64>> {
        let m = self.mean.len();
        let p = self.factor.len() / m.max(1);
        let row = |i: usize| &self.factor[i * p..(i + 1) * p];
        (0..m)
            .map(|i| {
                (0..m)
                    .map(|j| row(i).iter().zip(row(j)).map(|(a, b)| a * b).sum())
                    .collect()
            })
            .collect()
    }

    /// The two-sided quantile factor for central intervals at `level` (e.g. 1.959964 for
    /// 0.95 under the normal posterior; a t quantile otherwise).
    pub fn quantile_factor(&self, level: f64) -> f64 {
        central_quantile(level, self.dof)
    }

    /// Central credible interval for f(x*) at `level`: (lower, upper) per test point.
    pub fn credible_interval(&self, level: f64) -> (Vec<f64>, Vec<f64>) {
        let q = self.quantile_factor(level);
        interval(&self.mean, &self.std, q)
    }

    /// Central prediction interval for a new y at x* at `level`.
    pub fn prediction_interval(&self, level: f64) -> (Vec<f64>, Vec<f64>) {
        let q = self.quantile_factor(level);
        interval(&self.mean, &self.predictive_std(), q)
    }
}

fn interval(mean: &[f64], scale: &[f64], q: f64) -> (Vec<f64>, Vec<f64>) {
    mean.iter()
        .zip(scale)
        .map(|(m, s)| (m - q * s, m + q * s))
        .unzip()
}

impl Anchor {
    /// Fits the anchor for a resolved problem; an error for a surrogate problem, which has
    /// none (check [`Problem::linear`] first).
    pub fn fit(problem: &Problem) -> Result<Anchor, AnchorError> {
        let Some((features, _)) = problem.linear() else {
            return Err(AnchorError::invalid(
                "problem",
                format!("`{}`, a surrogate of a data set", problem.name),
                "a problem linear in known features: a surrogate problem has no anchor",
            ));
        };
        Anchor::from_design(
            features,
            &problem.train.inputs,
            &problem.train_sigma,
            &problem.test.inputs,
            &problem.test.sigma,
            problem.sigma_known,
            &problem.name,
            &problem.setting.label(),
        )
    }

    /// Fits the anchor from its ingredients. `name` and `setting` only label errors.
    #[allow(clippy::too_many_arguments)]
    pub fn from_design(
        features: &FeatureMap,
        train: &Inputs,
        train_sigma: &[f64],
        test: &Inputs,
        test_sigma: &[f64],
        sigma_known: bool,
        name: &str,
        setting: &str,
    ) -> Result<Anchor, AnchorError> {
        let p = features.p();
        let eval = |x: &Inputs| {
            let mut out = vec![0.0; x.len() * p];
            for (row, g) in x.rows().zip(out.chunks_mut(p)) {
                features.eval_into(row, g);
            }
            out
        };
        Anchor::from_features(
            p,
            &eval(train),
            train_sigma,
            &eval(test),
            test_sigma,
            sigma_known,
            name,
            setting,
        )
    }

    /// Fits the anchor from the features G at the training and test inputs (row-major, `p`
    /// columns) and σ(x) there. `name` and `setting` only label errors.
    #[allow(clippy::too_many_arguments)]
    pub fn from_features(
        p: usize,
        train_g: &[f64],
        train_sigma: &[f64],
        test_g: &[f64],
        test_sigma: &[f64],
        sigma_known: bool,
        name: &str,
        setting: &str,
    ) -> Result<Anchor, AnchorError> {
        Anchor::fit_features(
            p,
            train_g,
            train_sigma,
            (test_g, test_sigma),
            sigma_known,
            None,
            (name, setting),
        )
    }

    /// The Bayesian linear regression posterior under the Gaussian prior γ_j ∼ N(0, σ_p²) on
    /// every feature that varies over the training inputs, the flat prior on the constant ones
    /// (the intercept), and σ known: what a network linear in the features with its biases
    /// unregularised and its weights pulled by the L2 factor σ²/(N·σ_p²) targets (ensemble+,
    /// SG-MCMC with that prior). The prior enters the same QR as p more rows of the design,
    /// √(1/σ_p²)·e_jᵀ with target 0, so nothing forms an inverse either.
    #[allow(clippy::too_many_arguments)]
    pub fn with_gaussian_prior(
        p: usize,
        train_g: &[f64],
        train_sigma: &[f64],
        test_g: &[f64],
        test_sigma: &[f64],
        prior_sd: f64,
        name: &str,
        setting: &str,
    ) -> Result<Anchor, AnchorError> {
        if !(prior_sd.is_finite() && prior_sd > 0.0) {
            return Err(AnchorError::invalid(
                format!("problem `{name}`: prior_sd"),
                prior_sd,
                "a positive number",
            ));
        }
        Anchor::fit_features(
            p,
            train_g,
            train_sigma,
            (test_g, test_sigma),
            true,
            Some(prior_sd),
            (name, setting),
        )
    }

    fn fit_features(
        p: usize,
        train_g: &[f64],
        train_sigma: &[f64],
        (test_g, test_sigma): (&[f64], &[f64]),
        sigma_known: bool,
        prior_sd: Option<f64>,
        (name, setting): (&str, &str),
    ) -> Result<Anchor, AnchorError> {
        let n = train_g.len() / p.max(1);
        if train_sigma.len() != n {
            return Err(AnchorError::Shape {
                what: "σ at the training inputs".into(),
                expected: n,
                got: train_sigma.len(),
            });
        }
        let m = test_g.len() / p.max(1);
        if test_sigma.len() != m {
            return Err(AnchorError::Shape {
                what: "σ at the test inputs".into(),
                expected: m,
                got: test_sigma.len(),
            });
        }
        let setting = if setting.is_empty() {
            String::new()
        } else {
            format!(" (setting {setting})")
        };
        let min_n = if sigma_known { p } else { p + 1 };
        if n < min_n {
            return Err(AnchorError::RankDeficient {
                problem: name.to_string(),
                setting,
                rank: n.min(p),
                p,
                n,
                detail: if sigma_known {
                    format!(": N = {n} < p = {p}, so γ is not determined")
                } else {
                    format!(
                        ": the Student-t anchor (sigma_known = false) needs N > p to estimate σ, \
                         got N = {n}, p = {p}"
                    )
                },
            });
        }

        let (phi, weights, col_scale) = scaled_design(train_g, train_sigma, n, p);
        if phi.iter().any(|v| !v.is_finite()) {
            return Err(AnchorError::invalid(
                format!("problem `{name}`{setting}: training features"),
                "non-finite values",
                "finite features at every training input",
            ));
        }

        let phi = match prior_sd {
            None => phi,
            Some(sd) => with_prior_rows(phi, train_g, &col_scale, sd),
        };
        let qr = phi.qr();
        // With prior rows, only Q's first N rows meet the data (the prior's targets are 0).
        let q = qr.q().rows(0, n).into_owned();
        let r = qr.r();
        let singular = r.clone().svd(false, false).singular_values;
        let smax = singular.max();
        let smin = singular.min();
        let rank = singular
            .iter()
            .filter(|&&s| s > RANK_TOLERANCE * smax)
            .count();
        let condition = if smin > 0.0 {
            smax / smin
        } else {
            f64::INFINITY
        };
        if rank < p {
            return Err(AnchorError::RankDeficient {
                problem: name.to_string(),
                setting,
                rank,
                p,
                n,
                detail: format!(
                    " (condition number {condition:.3e} of the column-scaled design; singular \
                     values below {RANK_TOLERANCE:e} of the largest count as zero)"
                ),
            });
        }

        let test_g = DMatrix::<f64>::from_row_slice(m, p, test_g);
        // Z = R⁻ᵀ D G*ᵀ (p×M); the variance at test point i is ‖Z[:, i]‖².
        let mut dg = test_g.transpose();
        for j in 0..p {
            let s = col_scale[j];
            dg.row_mut(j).scale_mut(s);
        }
        let z = r
            .tr_solve_upper_triangular(&dg)
            .expect("R has full rank: checked above");
        let test_var = z.column_iter().map(|c| c.norm_squared()).collect();

        Ok(Anchor {
            n,
            p,
            q,
            r,
            col_scale,
            weights,
            test_g,
            test_z: z,
            test_var,
            test_sigma: test_sigma.to_vec(),
            sigma_known,
            condition,
        })
    }

    /// Number of training points N.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Number of features p.
    pub fn p(&self) -> usize {
        self.p
    }

    /// Condition number of the column-equilibrated weighted design.
    pub fn condition(&self) -> f64 {
        self.condition
    }

    /// σ's scale as the Student-t posterior estimates it from `y`: √(RSS_w/(N − p)) of the
    /// residuals weighted by 1/σ(x)'s shape (the unbiased estimate, in units of that shape);
    /// 1 where σ is known.
    pub fn noise_scale(&self, y: &[f64]) -> Result<f64, AnchorError> {
        let post = self.posterior(y)?;
        Ok(match (post.noise_std.first(), self.test_sigma.first()) {
            (Some(s), Some(shape)) if *shape > 0.0 => s / shape,
            _ => 1.0,
        })
    }

    /// The posterior for training targets `y`.
    pub fn posterior(&self, y: &[f64]) -> Result<Posterior, AnchorError> {
        if y.len() != self.n {
            return Err(AnchorError::Shape {
                what: "training targets y".into(),
                expected: self.n,
                got: y.len(),
            });
        }
        if let Some(v) = y.iter().find(|v| !v.is_finite()) {
            return Err(AnchorError::invalid(
                "training targets y",
                v,
                "finite numbers",
            ));
        }
        let yw = DVector::from_iterator(
            self.n,
            y.iter().zip(self.weights.iter()).map(|(y, w)| y * w),
        );
        let c = self.q.tr_mul(&yw);
        let zeta = self
            .r
            .solve_upper_triangular(&c)
            .expect("R has full rank: checked at fit");
        let gamma_hat = zeta.component_mul(&self.col_scale);
        let mean = (&self.test_g * &gamma_hat).iter().copied().collect();

        // Fitted values: W Φ γ̂ = Q c, unweighted by 1/W.
        let qc = &self.q * &c;
        let fitted = qc
            .iter()
            .zip(self.weights.iter())
            .map(|(v, w)| v / w)
            .collect();
        let (scale, dof) = if self.sigma_known {
            (1.0, None)
        } else {
            // Residual of the weighted fit: W y − W Φ γ̂ = W y − Q c.
            let resid = &yw - &qc;
            let dof = (self.n - self.p) as f64;
            ((resid.norm_squared() / dof).sqrt(), Some(dof))
        };
        Ok(Posterior {
            mean,
            std: self.test_var.iter().map(|v| scale * v.sqrt()).collect(),
            noise_std: self.test_sigma.iter().map(|s| scale * s).collect(),
            dof,
            // Z is column-major p×M: its storage, column after column, is Zᵀ row-major.
            factor: self.test_z.iter().map(|v| scale * v).collect(),
            gamma_hat: gamma_hat.iter().copied().collect(),
            fitted,
        })
    }
}

/// The scaled design with the Gaussian prior's rows below it: for every column j that varies
/// over the training rows, the row √(1/σ_p²)·D_j·e_jᵀ, since the penalty γ_j²/σ_p² reads
/// (D_j ζ_j)²/σ_p² in the scaled coordinates ζ = D⁻¹γ; a constant column (the intercept) gets
/// a row of zeros: its prior stays flat.
fn with_prior_rows(
    phi: DMatrix<f64>,
    train_g: &[f64],
    col_scale: &DVector<f64>,
    prior_sd: f64,
) -> DMatrix<f64> {
    let (n, p) = phi.shape();
    let mut out = phi.resize_vertically(n + p, 0.0);
    for j in 0..p {
        let first = train_g[j];
        if train_g.iter().skip(j).step_by(p).any(|&v| v != first) {
            out[(n + j, j)] = col_scale[j] / prior_sd;
        }
    }
    out
}

/// The weighted design W·G (row i divided by σ_i) with its columns scaled to unit norm (a
/// column of zeros keeps scale 1), the weights 1/σ_i and the column scales D: the matrix whose
/// QR the anchor uses, so that its conditioning reflects the problem, not the units.
fn scaled_design(
    train_g: &[f64],
    train_sigma: &[f64],
    n: usize,
    p: usize,
) -> (DMatrix<f64>, DVector<f64>, DVector<f64>) {
    let weights = DVector::from_iterator(n, train_sigma.iter().map(|s| 1.0 / s));
    let mut phi = DMatrix::<f64>::zeros(n, p);
    for (i, g) in train_g.chunks(p).enumerate() {
        for j in 0..p {
            phi[(i, j)] = g[j] * weights[i];
        }
    }
    let col_scale = DVector::from_iterator(
        p,
        phi.column_iter().map(|c| {
            let norm = c.norm();
            if norm > 0.0 && norm.is_finite() {
                1.0 / norm
            } else {
                1.0
            }
        }),
    );
    for j in 0..p {
        let s = col_scale[j];
        phi.column_mut(j).scale_mut(s);
    }
    (phi, weights, col_scale)
}

#[cfg(test)]
mod tests {

    #[test]
    fn t_quantiles_match_reference_values() {
        // Two-sided quantiles t_{1−α/2, ν} from standard tables (R's qt): the naive bootstrap
        // uses ν = M members, the anchor ν = N − p.
        for (level, dof, q) in [
            (0.95, 5.0, 2.570_582),
            (0.95, 50.0, 2.008_559),
            (0.90, 7.0, 1.894_579),
            (0.80, 10.0, 1.372_184),
        ] {
            let got = central_quantile(level, Some(dof));
            assert!(
                (got - q).abs() < 1e-5,
                "t({level}, {dof}) = {got}, reference {q}"
            );
        }
        assert!((central_quantile(0.95, None) - 1.959_964).abs() < 1e-6);
    }
    use super::*;
    use crate::features::Term;

    fn line() -> FeatureMap {
        FeatureMap::new(1, vec![Term::Const, Term::Monomial(vec![1])]).unwrap()
    }

    #[test]
    fn straight_line_matches_the_textbook_formulas() {
        // y = a + b x with known σ: Var(â + b̂ x*) = σ² (1/N + (x* − x̄)² / Sxx) and
        // b̂ = Sxy / Sxx, â = ȳ − b̂ x̄ (e.g. Draper & Smith, Applied Regression Analysis, §1.4).
        let xs = [-2.0, -0.5, 0.0, 1.0, 3.0, 4.5];
        let ys = [1.0, 2.5, 2.0, 4.0, 6.5, 9.0];
        let sigma = 0.7;
        let n = xs.len() as f64;
        let xbar = xs.iter().sum::<f64>() / n;
        let ybar = ys.iter().sum::<f64>() / n;
        let sxx: f64 = xs.iter().map(|x| (x - xbar).powi(2)).sum();
        let sxy: f64 = xs
            .iter()
            .zip(&ys)
            .map(|(x, y)| (x - xbar) * (y - ybar))
            .sum();
        let b = sxy / sxx;
        let a = ybar - b * xbar;
        let test = [-6.0, 0.0, 1.2, 10.0];
        let train = Inputs::new(1, xs.to_vec());
        let test_in = Inputs::new(1, test.to_vec());
        let anchor = Anchor::from_design(
            &line(),
            &train,
            &[sigma; 6],
            &test_in,
            &[sigma; 4],
            true,
            "line",
            "",
        )
        .unwrap();
        let post = anchor.posterior(&ys).unwrap();
        assert!((post.gamma_hat[0] - a).abs() < 1e-12 && (post.gamma_hat[1] - b).abs() < 1e-12);
        for (i, &x) in test.iter().enumerate() {
            let var = sigma * sigma * (1.0 / n + (x - xbar).powi(2) / sxx);
            assert!((post.mean[i] - (a + b * x)).abs() < 1e-12, "mean at {x}");
            assert!((post.std[i] - var.sqrt()).abs() < 1e-12, "std at {x}");
            let pred = (var + sigma * sigma).sqrt();
            assert!((post.predictive_std()[i] - pred).abs() < 1e-12);
        }
        // The 95% factor is Φ⁻¹(0.975) = 1.959963984540054.
        assert!((post.quantile_factor(0.95) - 1.959963984540054).abs() < 1e-9);

        // Student-t version: s² = RSS / (N − 2), intervals with t_{N−2}.
        let t_anchor = Anchor::from_design(
            &line(),
            &train,
            &[1.0; 6],
            &test_in,
            &[1.0; 4],
            false,
            "line",
            "",
        )
        .unwrap();
        let tpost = t_anchor.posterior(&ys).unwrap();
        let rss: f64 = xs
            .iter()
            .zip(&ys)
            .map(|(x, y)| (y - a - b * x).powi(2))
            .sum();
        let s2 = rss / (n - 2.0);
        assert_eq!(tpost.dof, Some(4.0));
        for (i, &x) in test.iter().enumerate() {
            let var = s2 * (1.0 / n + (x - xbar).powi(2) / sxx);
            assert!((tpost.std[i] - var.sqrt()).abs() < 1e-12);
        }
        // t_{4, 0.975} = 2.7764451051977987.
        assert!((tpost.quantile_factor(0.95) - 2.776445105197799).abs() < 1e-9);
    }

    #[test]
    fn heteroscedastic_weights_match_weighted_least_squares() {
        // Weighted LS for a constant: γ̂ = Σ w_i y_i / Σ w_i, Var = 1 / Σ w_i, w_i = 1/σ_i².
        let map = FeatureMap::new(1, vec![Term::Const]).unwrap();
        let sig = [0.5, 1.0, 2.0];
        let ys = [1.0, 2.0, 4.0];
        let w: Vec<f64> = sig.iter().map(|s| 1.0 / (s * s)).collect();
        let sw: f64 = w.iter().sum();
        let mean = w.iter().zip(&ys).map(|(w, y)| w * y).sum::<f64>() / sw;
        let train = Inputs::new(1, vec![0.0, 1.0, 2.0]);
        let test = Inputs::new(1, vec![5.0]);
        let post = Anchor::from_design(&map, &train, &sig, &test, &[1.0], true, "c", "")
            .unwrap()
            .posterior(&ys)
            .unwrap();
        assert!((post.mean[0] - mean).abs() < 1e-12);
        assert!((post.std[0] - (1.0 / sw).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn rank_deficiency_is_an_error_naming_problem_and_rank() {
        // Two identical features: rank 1 of 2.
        let map =
            FeatureMap::new(1, vec![Term::Monomial(vec![1]), Term::Monomial(vec![1])]).unwrap();
        let train = Inputs::new(1, vec![0.0, 1.0, 2.0]);
        let err = Anchor::from_design(
            &map, &train, &[1.0; 3], &train, &[1.0; 3], true, "dup", "f_main=2",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`dup`") && err.contains("f_main=2") && err.contains("rank 1 of"),
            "{err}"
        );
        // N < p.
        let err = Anchor::from_design(
            &line(),
            &Inputs::new(1, vec![1.0]),
            &[1.0],
            &train,
            &[1.0; 3],
            true,
            "few",
            "",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("N = 1 < p = 2"), "{err}");
        // Duplicate inputs: two distinct x values cannot fit a quadratic.
        let quad = FeatureMap::new(
            1,
            vec![
                Term::Const,
                Term::Monomial(vec![1]),
                Term::Monomial(vec![2]),
            ],
        )
        .unwrap();
        let dup = Inputs::new(1, vec![1.0, 1.0, 2.0, 2.0]);
        let err = Anchor::from_design(&quad, &dup, &[1.0; 4], &train, &[1.0; 3], true, "dupx", "")
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank 2 of"), "{err}");
    }
}
