//! A batch of τ test inputs with repeats (dyadic sampling draws τ inputs from κ anchors), in
//! its distinct inputs: what the joint metrics cost per batch is then O(κ³ + M·κ), not
//! O(τ³ + M·τ).
//!
//! At a distinct input u with n_u copies, y's copies share f(u) and have independent noise of
//! variance v_u. An orthogonal (Helmert) change of variables within each group gives the
//! scaled group mean w_u = √n_u·ȳ_u and n_u − 1 contrasts, which carry only the noise: for an
//! elliptical joint (Gaussian, or t with one common scale) with covariance or scale
//! C_f + diag(v) at the inputs,
//!
//! ```text
//! w ~ (μ_w = √n ⊙ μ, Σ_w = D C_f D + diag(v)),  D = diag(√n),
//! q(y) = (w − μ_w)ᵀ Σ_w⁻¹ (w − μ_w) + Σ_u SS_u / v_u,     SS_u = Σ_i∈u (y_i − ȳ_u)²,
//! ln|C_y| = ln|Σ_w| + Σ_u (n_u − 1) ln v_u,
//! ```
//!
//! and a mixture component Π_i N(y_i; f_u, s_u²) is Σ_u [−(n_u/2) ln 2π − n_u ln s_u −
//! (SS_u + n_u (ȳ_u − f_u)²) / (2 s_u²)]. So (ȳ, SS) are sufficient, and y is drawn as them:
//! w = μ_w + g·L z, SS_u = g² v_u χ²_{n_u − 1}, g = 1 (Gaussian) or √(ν/χ²_ν) (t).

use nalgebra::{Cholesky, DMatrix, DVector, Dyn};
use statrs::function::gamma::ln_gamma;
use uqbench_core::Rng;
use uqbench_metrics::joint::{log_mean_exp, ENUMERATE_MAX_TAU};

use crate::bail;
use crate::error::Result;

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// A batch's distinct inputs and their copies.
#[derive(Debug, Clone, PartialEq)]
pub struct Groups {
    /// The distinct inputs (indices into the test inputs), ascending.
    pub inputs: Vec<usize>,
    /// n_u.
    pub counts: Vec<usize>,
}

impl Groups {
    /// The groups of a batch of input indices.
    pub fn of(x: &[usize]) -> Groups {
        let mut sorted = x.to_vec();
        sorted.sort_unstable();
        let (mut inputs, mut counts) = (Vec::new(), Vec::new());
        for i in sorted {
            if inputs.last() == Some(&i) {
                *counts.last_mut().expect("pushed with the input") += 1;
            } else {
                inputs.push(i);
                counts.push(1);
            }
        }
        Groups { inputs, counts }
    }

    /// τ.
    pub fn tau(&self) -> usize {
        self.counts.iter().sum()
    }
}

/// The sufficient statistics of y at a batch: ȳ_u and SS_u per distinct input.
#[derive(Debug, Clone)]
pub struct Stats {
    ybar: Vec<f64>,
    ss: Vec<f64>,
}

/// An elliptical joint (Gaussian, or t with `dof`) of y at a batch's distinct inputs: mean
/// μ_u, a factor F_u (`[κ, rank]`, Cov f = F·Fᵀ) and noise variances v_u.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    /// μ_u.
    pub mean: Vec<f64>,
    /// F rows at the distinct inputs.
    pub factor: Vec<f64>,
    /// Columns of F.
    pub rank: usize,
    /// v_u.
    pub var: Vec<f64>,
    /// ν of a t.
    pub dof: Option<f64>,
}

/// [`Parts`] prepared: Σ_w's Cholesky factor and the log-determinant of C_y.
pub struct Elliptic<'g> {
    groups: &'g Groups,
    parts: Parts,
    w_mean: DVector<f64>,
    chol: Cholesky<f64, Dyn>,
    log_det: f64,
}

impl<'g> Elliptic<'g> {
    /// Factorises Σ_w = D F Fᵀ D + diag(v); an error when it is not positive definite.
    pub fn new(groups: &'g Groups, parts: Parts) -> Result<Elliptic<'g>> {
        let k = groups.inputs.len();
        let sq: Vec<f64> = groups.counts.iter().map(|&n| (n as f64).sqrt()).collect();
        let mut s = DMatrix::<f64>::zeros(k, k);
        for a in 0..k {
            for b in 0..=a {
                let fa = &parts.factor[a * parts.rank..(a + 1) * parts.rank];
                let fb = &parts.factor[b * parts.rank..(b + 1) * parts.rank];
                let c: f64 = fa.iter().zip(fb).map(|(x, y)| x * y).sum::<f64>() * sq[a] * sq[b];
                s[(a, b)] = c;
                s[(b, a)] = c;
            }
            s[(a, a)] += parts.var[a];
        }
        if let Some(v) = parts.var.iter().find(|v| !(**v > 0.0 && v.is_finite())) {
            bail!("a noise variance of the joint = {v}; valid: finite and > 0");
        }
        let Some(chol) = s.cholesky() else {
            bail!(
                "the joint's covariance at a batch of {k} distinct inputs is not positive definite"
            );
        };
        let within: f64 = (groups.counts.iter().zip(&parts.var))
            .map(|(&n, v)| (n as f64 - 1.0) * v.ln())
            .sum();
        let log_det = 2.0
            * chol
                .l_dirty()
                .diagonal()
                .iter()
                .map(|d| d.ln())
                .sum::<f64>()
            + within;
        let w_mean = DVector::from_iterator(k, parts.mean.iter().zip(&sq).map(|(m, s)| m * s));
        Ok(Elliptic {
            groups,
            parts,
            w_mean,
            chol,
            log_det,
        })
    }

    /// Whether it is Gaussian.
    pub fn gaussian(&self) -> bool {
        self.parts.dof.is_none()
    }

    /// ln p(y) from y's statistics.
    pub fn ln_pdf(&self, y: &Stats) -> f64 {
        let tau = self.groups.tau() as f64;
        let w = DVector::from_iterator(
            y.ybar.len(),
            (y.ybar.iter().zip(&self.groups.counts)).map(|(m, &n)| m * (n as f64).sqrt()),
        );
        let z = self
            .chol
            .l_dirty()
            .solve_lower_triangular(&(w - &self.w_mean))
            .expect("a Cholesky factor");
        let q = z.norm_squared()
            + y.ss
                .iter()
                .zip(&self.parts.var)
                .map(|(s, v)| s / v)
                .sum::<f64>();
        match self.parts.dof {
            None => -0.5 * (q + self.log_det + tau * LN_2PI),
            Some(nu) => {
                ln_gamma((nu + tau) / 2.0)
                    - ln_gamma(nu / 2.0)
                    - 0.5 * tau * (nu * std::f64::consts::PI).ln()
                    - 0.5 * self.log_det
                    - 0.5 * (nu + tau) * (q / nu).ln_1p()
            }
        }
    }

    /// Draws y's statistics: w = μ_w + g·L z, SS_u = g² v_u χ²_{n_u − 1}.
    pub fn draw(&self, rng: &mut Rng) -> Stats {
        let k = self.groups.inputs.len();
        let g2 = self.parts.dof.map_or(1.0, |nu| {
            let chi2: f64 = (0..nu.round().max(1.0) as usize)
                .map(|_| rng.normal().powi(2))
                .sum();
            nu / chi2
        });
        let z = DVector::from_iterator(k, (0..k).map(|_| rng.normal()));
        let w = &self.w_mean + self.chol.l_dirty().lower_triangle() * z * g2.sqrt();
        let ybar = (w.iter().zip(&self.groups.counts))
            .map(|(w, &n)| w / (n as f64).sqrt())
            .collect();
        let ss = (self.groups.counts.iter().zip(&self.parts.var))
            .map(|(&n, v)| g2 * v * (1..n).map(|_| rng.normal().powi(2)).sum::<f64>())
            .collect();
        Stats { ybar, ss }
    }
}

/// KL(P ‖ Q) of two Gaussian joints at a batch, in closed form: the κ-dimensional KL of the
/// scaled group means plus, per contrast, ½(v_P/v_Q − 1 − ln(v_P/v_Q)).
pub fn kl_gaussian(p: &Elliptic<'_>, q: &Elliptic<'_>) -> f64 {
    let k = p.w_mean.len() as f64;
    let lp = p.chol.l_dirty().lower_triangle();
    let trace = q.chol.solve(&(&lp * lp.transpose())).trace();
    let d = &q.w_mean - &p.w_mean;
    let maha = q
        .chol
        .l_dirty()
        .solve_lower_triangular(&d)
        .expect("a Cholesky factor")
        .norm_squared();
    let ld = |e: &Elliptic<'_>| {
        2.0 * e
            .chol
            .l_dirty()
            .diagonal()
            .iter()
            .map(|d| d.ln())
            .sum::<f64>()
    };
    let w_part = 0.5 * (trace + maha - k + ld(q) - ld(p));
    let within: f64 = (p.groups.counts.iter().zip(&p.parts.var).zip(&q.parts.var))
        .map(|((&n, vp), vq)| (n as f64 - 1.0) * 0.5 * (vp / vq - 1.0 - (vp / vq).ln()))
        .sum();
    w_part + within
}

/// ln of a mixture of draws at a batch: (1/S) Σ_s Π_i N(y_i; f_s(x_i), s_s(x_i)²), from the
/// draws at all M test inputs and their 1/s and ln s, input-major (`[M, S]`: each input's S
/// draws contiguous, so that a batch reads a few whole columns rather than one value of every
/// row).
pub fn ln_mixture(
    groups: &Groups,
    y: &Stats,
    (draws, inv_sd, ln_sd): (&[f64], &[f64], &[f64]),
    m: usize,
) -> f64 {
    let tau = groups.tau() as f64;
    let s = draws.len() / m;
    let mut terms = vec![-0.5 * tau * LN_2PI; s];
    for (g, &u) in groups.inputs.iter().enumerate() {
        let n = groups.counts[g] as f64;
        let column = u * s..(u + 1) * s;
        let (ybar, ss) = (y.ybar[g], y.ss[g]);
        for (((acc, &f), &w), &l) in terms
            .iter_mut()
            .zip(&draws[column.clone()])
            .zip(&inv_sd[column.clone()])
            .zip(&ln_sd[column])
        {
            let d = ybar - f;
            *acc -= n * l + 0.5 * (ss + n * d * d) * w * w;
        }
    }
    log_mean_exp(&terms)
}

/// KL from independent labels y_i ∼ Bern(p(x_i)) at a batch to a method's mixture
/// (1/S) Σ_s Π_i Bern(q_s(x_i)) (`q` `[S, M]` at all M test inputs). Only the number of ones
/// k_u among each group's n_u copies matters (the binomial coefficients cancel in the
/// ratio), so the 2^τ label vectors are enumerated as the Π_u (n_u + 1) ≤ 2^τ count vectors:
/// exact for τ ≤ [`ENUMERATE_MAX_TAU`] (spec §10); above, one count vector drawn from P.
///
/// The enumeration needs no exponential per draw: a draw's probability of the counts k is
/// Π_u q_u^k_u (1 − q_u)^(n_u − k_u), a product of powers tabulated once per draw and group,
/// and the mixture is their plain mean. With q clipped to [1e-12, 1 − 1e-12] and τ ≤ 12, no
/// such product is below 1e-144, far above f64's smallest normal number.
pub fn kl_bernoulli(groups: &Groups, p: &[f64], q: &BernoulliDraws, rng: &mut Rng) -> f64 {
    let k = groups.inputs.len();
    // ln p and ln(1 − p) per group, once.
    let (l1, l0): (Vec<f64>, Vec<f64>) = (groups.inputs.iter())
        .map(|&u| (clip(p[u]).ln(), (-clip(p[u])).ln_1p()))
        .unzip();
    let ln_p = |counts: &[usize]| -> f64 {
        (0..k)
            .map(|g| counts[g] as f64 * l1[g] + (groups.counts[g] - counts[g]) as f64 * l0[g])
            .sum()
    };
    if groups.tau() <= ENUMERATE_MAX_TAU {
        let mixture = mixture_of_counts(groups, &q.q, q.m);
        // ln j! for j ≤ τ, for the binomial coefficients.
        let ln_fact: Vec<f64> = (0..=groups.tau())
            .scan(0.0, |acc, j| {
                if j > 1 {
                    *acc += (j as f64).ln();
                }
                Some(*acc)
            })
            .collect();
        let mut counts = vec![0usize; k];
        let mut sum = 0.0;
        for q_c in mixture {
            let lp = ln_p(&counts);
            let ln_mult: f64 = (0..k)
                .map(|g| {
                    let (n, j) = (groups.counts[g], counts[g]);
                    ln_fact[n] - ln_fact[j] - ln_fact[n - j]
                })
                .sum();
            sum += (lp + ln_mult).exp() * (lp - q_c.ln());
            next_counts(&mut counts, &groups.counts);
        }
        return sum;
    }
    let counts: Vec<usize> = (0..k)
        .map(|g| {
            (0..groups.counts[g])
                .filter(|_| rng.uniform() < p[groups.inputs[g]])
                .count()
        })
        .collect();
    let (ln1, ln0) = q.logs();
    let terms: Vec<f64> = (ln1.chunks_exact(q.m).zip(ln0.chunks_exact(q.m)))
        .map(|(l1, l0)| {
            (0..k)
                .map(|g| {
                    let u = groups.inputs[g];
                    counts[g] as f64 * l1[u] + (groups.counts[g] - counts[g]) as f64 * l0[u]
                })
                .sum()
        })
        .collect();
    ln_p(&counts) - log_mean_exp(&terms)
}

/// A method's draws of P(y = 1 | x) `[S, M]` at the M test inputs, with their clipped
/// logarithms ln q and ln(1 − q), taken once per repetition when the first Monte Carlo batch
/// (τ > 12) needs them.
#[derive(Debug, Clone)]
pub struct BernoulliDraws {
    q: Vec<f64>,
    logs: std::sync::OnceLock<(Vec<f64>, Vec<f64>)>,
    m: usize,
}

impl BernoulliDraws {
    /// The draws `q` (row-major `[S, M]`).
    pub fn new(q: Vec<f64>, m: usize) -> BernoulliDraws {
        BernoulliDraws {
            q,
            logs: std::sync::OnceLock::new(),
            m,
        }
    }

    /// ln q and ln(1 − q), clipped.
    fn logs(&self) -> &(Vec<f64>, Vec<f64>) {
        self.logs.get_or_init(|| {
            self.q
                .iter()
                .map(|&v| (clip(v).ln(), (-clip(v)).ln_1p()))
                .unzip()
        })
    }
}

fn clip(v: f64) -> f64 {
    v.clamp(1e-12, 1.0 - 1e-12)
}

/// The counts' odometer: the next count vector after `counts` (each k_u ≤ n_u, the first
/// group fastest); back to all zeros after the last.
fn next_counts(counts: &mut [usize], n: &[usize]) {
    for (c, &nu) in counts.iter_mut().zip(n) {
        if *c < nu {
            *c += 1;
            return;
        }
        *c = 0;
    }
}

/// The mixture's probability of one label vector with each count vector (in odometer order,
/// the first group fastest): (1/S) Σ_s Π_u q_su^k_u (1 − q_su)^(n_u − k_u). Per draw, the
/// product over the groups is built as a chain of outer products of the groups' power tables,
/// the last added straight into the mixture (Π_u (n_u + 1) multiply–adds and fewer
/// multiplications per draw).
fn mixture_of_counts(groups: &Groups, q: &[f64], m: usize) -> Vec<f64> {
    let n = &groups.counts;
    let total: usize = n.iter().map(|n| n + 1).product();
    let mut table = vec![0.0; n.iter().map(|n| n + 1).max().unwrap_or(1)];
    let mut prod = vec![0.0; total];
    let mut mixture = vec![0.0; total];
    let rows = q.len() / m;
    let last = n.len() - 1;
    for qs in q.chunks_exact(m) {
        let mut len = 1;
        prod[0] = 1.0;
        for (g, (&u, &nu)) in groups.inputs.iter().zip(n).enumerate() {
            // table[k] = q^k (1 − q)^(n_u − k), from both ends by multiplication.
            let (q1, q0) = (clip(qs[u]), 1.0 - clip(qs[u]));
            let t = &mut table[..=nu];
            t.iter_mut().for_each(|v| *v = 1.0);
            let (mut up, mut down) = (1.0, 1.0);
            for j in 0..=nu {
                t[j] *= up;
                t[nu - j] *= down;
                up *= q1;
                down *= q0;
            }
            if g == last {
                // The last group's products go straight into the mixture.
                for (k, &tk) in t.iter().enumerate() {
                    let block = &mut mixture[k * len..(k + 1) * len];
                    for (mx, &p) in block.iter_mut().zip(&prod[..len]) {
                        *mx += p * tk;
                    }
                }
                break;
            }
            // prod[i + len·k] = prod[i]·t[k]: the block of k = 0 last, in place.
            let (head, rest) = prod.split_at_mut(len);
            for k in 1..=nu {
                let tk = t[k];
                for (d, &s) in rest[(k - 1) * len..k * len].iter_mut().zip(head.iter()) {
                    *d = s * tk;
                }
            }
            head.iter_mut().for_each(|v| *v *= t[0]);
            len *= nu + 1;
        }
    }
    mixture.iter_mut().for_each(|v| *v /= rows as f64);
    mixture
}

#[cfg(test)]
mod tests {
    use super::*;
    use uqbench_metrics::joint::{ln_pdf, Joint};

    /// The reduced densities equal the full τ-dimensional ones at a y with repeats.
    #[test]
    fn reduced_densities_equal_the_full_ones() {
        let x = [3, 1, 3, 3, 1, 0];
        let g = Groups::of(&x);
        assert_eq!(
            (g.inputs.clone(), g.counts.clone()),
            (vec![0, 1, 3], vec![1, 2, 3])
        );
        let factor_all = [0.3, 0.1, 0.5, -0.2, 0.0, 0.0, 0.7, 0.4];
        let mean_all = [0.1, -0.4, 0.0, 1.2];
        let var_all = [0.2, 0.3, 0.0, 0.5];
        let y = [1.0, -0.2, 1.5, 0.9, -0.6, 0.3];
        for dof in [None, Some(7.0)] {
            let full = Joint::StudentT {
                mean: x.iter().map(|&i| mean_all[i]).collect(),
                factor: x
                    .iter()
                    .flat_map(|&i| factor_all[2 * i..2 * i + 2].to_vec())
                    .collect(),
                rank: 2,
                noise_var: x.iter().map(|&i| var_all[i]).collect(),
                dof: dof.unwrap_or(1.0),
            };
            let full = match (dof, full) {
                (
                    None,
                    Joint::StudentT {
                        mean,
                        factor,
                        rank,
                        noise_var,
                        ..
                    },
                ) => Joint::Gaussian {
                    mean,
                    factor,
                    rank,
                    noise_var,
                },
                (_, j) => j,
            };
            let parts = Parts {
                mean: g.inputs.iter().map(|&i| mean_all[i]).collect(),
                factor: g
                    .inputs
                    .iter()
                    .flat_map(|&i| factor_all[2 * i..2 * i + 2].to_vec())
                    .collect(),
                rank: 2,
                var: g.inputs.iter().map(|&i| var_all[i]).collect(),
                dof,
            };
            let e = Elliptic::new(&g, parts).unwrap();
            let stats = stats_of(&g, &x, &y);
            let (a, b) = (e.ln_pdf(&stats), ln_pdf(&full, &y).unwrap());
            assert!((a - b).abs() < 1e-12, "{dof:?}: {a} against {b}");
        }
        // A mixture of two draws at the 4 inputs, noise sd per draw and input.
        let draws = [0.0, 0.5, 9.0, 1.0, 0.2, -0.1, 9.0, 0.8];
        let sd = [0.4, 0.5, 1.0, 0.6, 0.3, 0.7, 1.0, 0.5];
        let inv: Vec<f64> = sd.iter().map(|s| 1.0 / s).collect();
        let ln: Vec<f64> = sd.iter().map(|s: &f64| s.ln()).collect();
        let full = Joint::Mixture {
            draws: (0..2)
                .flat_map(|k| x.iter().map(move |&i| draws[4 * k + i]))
                .collect(),
            sd: (0..2)
                .flat_map(|k| x.iter().map(move |&i| sd[4 * k + i]))
                .collect(),
            tau: x.len(),
        };
        // Input-major, as ln_mixture reads them.
        let t = |v: &[f64]| -> Vec<f64> { (0..4).flat_map(|i| [v[i], v[4 + i]]).collect() };
        let a = ln_mixture(
            &g,
            &stats_of(&g, &x, &y),
            (&t(&draws), &t(&inv), &t(&ln)),
            4,
        );
        let b = ln_pdf(&full, &y).unwrap();
        assert!((a - b).abs() < 1e-12, "mixture: {a} against {b}");
    }

    fn stats_of(g: &Groups, x: &[usize], y: &[f64]) -> Stats {
        let mut ybar = vec![0.0; g.inputs.len()];
        let mut ss = vec![0.0; g.inputs.len()];
        for (k, &u) in g.inputs.iter().enumerate() {
            let ys: Vec<f64> = x
                .iter()
                .zip(y)
                .filter(|(i, _)| **i == u)
                .map(|(_, v)| *v)
                .collect();
            ybar[k] = ys.iter().sum::<f64>() / ys.len() as f64;
            ss[k] = ys.iter().map(|v| (v - ybar[k]).powi(2)).sum();
        }
        Stats { ybar, ss }
    }

    /// Enumerating counts equals enumerating the 2^τ label vectors.
    #[test]
    fn bernoulli_counts_equal_the_label_enumeration() {
        let x = [1, 0, 1, 1, 2, 0];
        let g = Groups::of(&x);
        let p = [0.2, 0.7, 0.45];
        let q = [0.3, 0.6, 0.5, 0.1, 0.9, 0.4];
        let full_p: Vec<f64> = x.iter().map(|&i| p[i]).collect();
        let full_q: Vec<f64> = (0..2)
            .flat_map(|s| x.iter().map(move |&i| q[3 * s + i]))
            .collect();
        let want = uqbench_metrics::joint::kl_bernoulli(&full_p, &full_q, &[])
            .unwrap()
            .value;
        let got = kl_bernoulli(
            &g,
            &p,
            &BernoulliDraws::new(q.to_vec(), 3),
            &mut Rng::new(1),
        );
        assert!((got - want).abs() < 1e-12, "{got} against {want}");
    }

    /// With more draws than any budget (4 000 at τ = 10), the tabulated enumeration still
    /// equals the 2^τ label enumeration of the metrics library (log-sum-exp per label vector).
    #[test]
    fn bernoulli_enumeration_with_many_draws_equals_the_label_enumeration() {
        let x = [0, 1, 0, 0, 1, 1, 1, 0, 0, 1];
        let (p, rows, q) = two_input_mixture(4000);
        let full_p: Vec<f64> = x.iter().map(|&i| p[i]).collect();
        let full_q: Vec<f64> = (0..rows)
            .flat_map(|s| x.iter().map(|&i| q[2 * s + i]).collect::<Vec<_>>())
            .collect();
        let want = uqbench_metrics::joint::kl_bernoulli(&full_p, &full_q, &[])
            .unwrap()
            .value;
        let draws = BernoulliDraws::new(q, 2);
        let got = kl_bernoulli(&Groups::of(&x), &p, &draws, &mut Rng::new(1));
        assert!((got - want).abs() < 1e-10 * want, "{got} against {want}");
    }

    fn two_input_mixture(rows: usize) -> ([f64; 2], usize, Vec<f64>) {
        let q = (0..rows)
            .flat_map(|s| {
                let t = s as f64 / rows as f64;
                [0.1 + 0.5 * t, 0.9 - 0.6 * t]
            })
            .collect();
        ([0.3, 0.8], rows, q)
    }

    /// Above the enumeration limit (τ = 14 > 12), the Monte Carlo mean over label counts
    /// agrees with the exact sum over the (n_0 + 1)(n_1 + 1) count vectors, written out here
    /// with log-sum-exp, within 4.5 standard errors (|N(0,1)| > 4.5: 7e-6).
    #[test]
    fn bernoulli_monte_carlo_agrees_with_the_enumeration() {
        let x = [0, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1];
        let g = Groups::of(&x);
        assert_eq!(g.counts, vec![6, 8]);
        let (p, _, q) = two_input_mixture(500);
        let ln_bin = |n: usize, j: usize| {
            ln_gamma(n as f64 + 1.0) - ln_gamma(j as f64 + 1.0) - ln_gamma((n - j) as f64 + 1.0)
        };
        let ln_lik = |pr: [f64; 2], c: [usize; 2]| -> f64 {
            (0..2)
                .map(|u| {
                    c[u] as f64 * pr[u].ln() + (g.counts[u] - c[u]) as f64 * (1.0 - pr[u]).ln()
                })
                .sum()
        };
        let mut exact = 0.0;
        for c0 in 0..=6 {
            for c1 in 0..=8 {
                let lp = ln_lik(p, [c0, c1]);
                let terms: Vec<f64> = q
                    .chunks_exact(2)
                    .map(|qs| ln_lik([qs[0], qs[1]], [c0, c1]))
                    .collect();
                exact += (lp + ln_bin(6, c0) + ln_bin(8, c1)).exp() * (lp - log_mean_exp(&terms));
            }
        }
        let mut rng = Rng::new(5);
        let draws = BernoulliDraws::new(q, 2);
        let v: Vec<f64> = (0..3000)
            .map(|_| kl_bernoulli(&g, &p, &draws, &mut rng))
            .collect();
        let e = uqbench_metrics::joint::Estimate::of(&v);
        assert!(
            (e.value - exact).abs() < 4.5 * e.stderr,
            "{e:?} against {exact}"
        );
    }

    /// The reduced closed form equals the full one.
    #[test]
    fn reduced_closed_form_equals_the_full_one() {
        let x = [2, 0, 2, 2];
        let g = Groups::of(&x);
        let p_all = (
            [0.1, 0.0, 0.4],
            [0.5, 0.1, 0.0, 0.0, 0.3, 0.6],
            [0.2, 0.0, 0.3],
        );
        let q_all = (
            [0.3, 0.0, 0.1],
            [0.2, 0.0, 0.0, 0.0, 0.1, 0.2],
            [0.5, 0.0, 0.2],
        );
        let full = |a: &([f64; 3], [f64; 6], [f64; 3])| Joint::Gaussian {
            mean: x.iter().map(|&i| a.0[i]).collect(),
            factor: x
                .iter()
                .flat_map(|&i| a.1[2 * i..2 * i + 2].to_vec())
                .collect(),
            rank: 2,
            noise_var: x.iter().map(|&i| a.2[i]).collect(),
        };
        let parts = |a: &([f64; 3], [f64; 6], [f64; 3])| Parts {
            mean: g.inputs.iter().map(|&i| a.0[i]).collect(),
            factor: g
                .inputs
                .iter()
                .flat_map(|&i| a.1[2 * i..2 * i + 2].to_vec())
                .collect(),
            rank: 2,
            var: g.inputs.iter().map(|&i| a.2[i]).collect(),
            dof: None,
        };
        let (p, q) = (
            Elliptic::new(&g, parts(&p_all)).unwrap(),
            Elliptic::new(&g, parts(&q_all)).unwrap(),
        );
        let want = uqbench_metrics::joint::kl_gaussian(&full(&p_all), &full(&q_all)).unwrap();
        assert!(
            (kl_gaussian(&p, &q) - want).abs() < 1e-12,
            "{} against {want}",
            kl_gaussian(&p, &q)
        );
    }
}
