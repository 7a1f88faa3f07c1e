//! Heads: the output layer's loss and its gradient. The trainer asks a head for the data term
//! of every replica and for δ at the output; it does not know which head it runs.

use burn::tensor::{Tensor, TensorData};

use crate::cpu::simd::Lanes;

/// The quantile levels τ of a pinball head, in millionths (so that a head stays `Copy` and
/// `Eq`): at most [`MAX_QUANTILES`], the first the output that serves as the prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taus {
    count: u8,
    per_million: [u32; MAX_QUANTILES],
}

/// The most quantile outputs a pinball head has.
pub const MAX_QUANTILES: usize = 9;

impl Taus {
    /// From levels in (0, 1); `None` for none, too many, or one outside (0, 1).
    pub fn new(levels: &[f64]) -> Option<Taus> {
        if levels.is_empty()
            || levels.len() > MAX_QUANTILES
            || levels.iter().any(|t| !(*t > 0.0 && *t < 1.0))
        {
            return None;
        }
        let mut per_million = [0u32; MAX_QUANTILES];
        for (slot, t) in per_million.iter_mut().zip(levels) {
            *slot = (t * 1e6).round() as u32;
        }
        Some(Taus {
            count: levels.len() as u8,
            per_million,
        })
    }

    /// The levels.
    pub fn levels(&self) -> Vec<f64> {
        self.per_million[..self.count as usize]
            .iter()
            .map(|&v| f64::from(v) / 1e6)
            .collect()
    }

    /// The levels as a `[1, 1, K]` tensor on `out`'s device.
    fn tensor(&self, out: &Tensor<3>) -> Tensor<3> {
        let v: Vec<f32> = self.levels().iter().map(|&t| t as f32).collect();
        let k = v.len();
        Tensor::from_data(TensorData::new(v, [1, 1, k]), &out.device())
    }
}

/// The loss on the network's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Head {
    /// One output, the mean, with MATLAB's ½·MSE ([000]'s reference implementation).
    #[default]
    HalfMse,
    /// Two outputs, mean and log variance, with the Gaussian negative log-likelihood
    /// ½·log σ² + (y − μ)²/(2σ²) without its constant (heteroscedastic dropout, [004]).
    GaussianNll,
    /// One output, the logit f of P(y = 1 | x) = sigmoid(f), with the Bernoulli negative
    /// log-likelihood (binary cross-entropy) −y·log σ(f) − (1 − y)·log(1 − σ(f)) =
    /// softplus(f) − y·f, for labels y ∈ {0, 1}.
    BernoulliLogit,
    /// K outputs, quantiles of y at levels τ_k, with the pinball loss
    /// Σ_k ρ_τk(y − q_k), ρ_τ(u) = u·(τ − 1[u < 0]) (Koenker & Bassett 1978; the quantile
    /// networks of CQR, Romano et al. 2019).
    Pinball(Taus),
}

impl Head {
    /// Outputs per point the network needs for this head.
    pub fn outputs(self) -> usize {
        match self {
            Head::HalfMse | Head::BernoulliLogit => 1,
            Head::GaussianNll => 2,
            Head::Pinball(t) => t.count as usize,
        }
    }

    /// The data term per replica `[R, 1, 1]`, averaged over the n points.
    ///
    /// # Shapes
    /// - `out`: `[R, n, outputs]`, `y`: `[R, n, 1]` → `[R, 1, 1]`
    pub fn value(self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        match self {
            Head::HalfMse => (out - y.clone()).square().mean_dim(1).mul_scalar(0.5),
            Head::GaussianNll => {
                let (mu, log_var) = split(out);
                let sq = (y.clone() - mu).square() * log_var.clone().neg().exp();
                (log_var + sq).mul_scalar(0.5).mean_dim(1)
            }
            // softplus(f) = max(f, 0) + log(1 + e^{−|f|}): no overflow for large |f|.
            Head::BernoulliLogit => {
                let softplus = out.clone().clamp_min(0.0) + out.clone().abs().neg().exp().log1p();
                (softplus - out * y.clone()).mean_dim(1)
            }
            Head::Pinball(t) => {
                let taus = t.tensor(&out);
                let u = y.clone() - out;
                let below = u.clone().lower_elem(0.0).float();
                (u * (taus - below)).sum_dim(2).mean_dim(1)
            }
        }
    }

    /// δ at the output: the gradient of [`Head::value`] with respect to `out`.
    ///
    /// ½·MSE: (f − y)/n. Gaussian NLL with s = log σ²: ∂/∂μ = −(y − μ)·e^{−s}/n and
    /// ∂/∂s = ½·(1 − (y − μ)²·e^{−s})/n. Bernoulli: d/df (softplus(f) − y·f) = σ(f) − y, so
    /// (σ(f) − y)/n.
    ///
    /// # Shapes
    /// - `out`: `[R, n, outputs]`, `y`: `[R, n, 1]` → `[R, n, outputs]`
    pub fn delta(self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let n = out.dims()[1];
        match self {
            Head::HalfMse => (out - y.clone()).div_scalar(n as f64),
            Head::GaussianNll => {
                let (mu, log_var) = split(out);
                let resid = y.clone() - mu;
                let inv = log_var.neg().exp();
                let d_mu = (resid.clone() * inv.clone()).neg().div_scalar(n as f64);
                let d_lv = (resid.square() * inv)
                    .neg()
                    .add_scalar(1.0)
                    .mul_scalar(0.5)
                    .div_scalar(n as f64);
                Tensor::cat(vec![d_mu, d_lv], 2)
            }
            Head::BernoulliLogit => {
                (burn::tensor::activation::sigmoid(out) - y.clone()).div_scalar(n as f64)
            }
            // d/dq ρ_τ(y − q) = −(τ − 1[y < q]) (the subgradient 1 − τ… at y = q taken as −τ).
            Head::Pinball(t) => {
                let taus = t.tensor(&out);
                let below = (y.clone() - out).lower_elem(0.0).float();
                (below - taus).div_scalar(n as f64)
            }
        }
    }
}

impl Head {
    /// [`Head::delta`] for one replica on the host: δ `[n, outputs]` at its outputs `out`
    /// (`[n, outputs]`, point-major) for targets `y` (`[n]`).
    #[inline(always)]
    pub(crate) fn delta_host(self, out: &[f32], y: &[f32], delta: &mut [f32]) {
        let inv_n = 1.0 / y.len() as f32;
        match self {
            Head::HalfMse => {
                for ((d, &f), &yp) in delta.iter_mut().zip(out).zip(y) {
                    *d = (f - yp) * inv_n;
                }
            }
            Head::BernoulliLogit => {
                for ((d, &f), &yp) in delta.iter_mut().zip(out).zip(y) {
                    *d = (1.0 / (1.0 + (-f).exp()) - yp) * inv_n;
                }
            }
            Head::GaussianNll => {
                for ((d, o), &yp) in delta.chunks_exact_mut(2).zip(out.chunks_exact(2)).zip(y) {
                    let (resid, inv) = (yp - o[0], (-o[1]).exp());
                    d[0] = -(resid * inv) * inv_n;
                    d[1] = (1.0 - resid * resid * inv) * 0.5 * inv_n;
                }
            }
            Head::Pinball(t) => {
                let taus: Vec<f32> = t.levels().iter().map(|&v| v as f32).collect();
                let k = taus.len();
                for ((d, q), &yp) in delta.chunks_exact_mut(k).zip(out.chunks_exact(k)).zip(y) {
                    for ((dv, &qv), &tau) in d.iter_mut().zip(q).zip(&taus) {
                        let below = if yp - qv < 0.0 { 1.0 } else { 0.0 };
                        *dv = (below - tau) * inv_n;
                    }
                }
            }
        }
    }

    /// [`Head::value`] for one replica on the host, in f32 like the device's objective (an
    /// overflow there is what divergence means), its sums in a fixed order on `lanes`.
    /// ½·MSE: ½·mean (f − y)²; Bernoulli: mean softplus(f) − y·f with softplus(f) = max(f, 0)
    /// + log(1 + e^{−|f|}); Gaussian NLL: mean ½·(s + (y − μ)²·e^{−s}); pinball: mean
    /// Σ_k ρ_τk(y − q_k).
    pub(crate) fn value_host(self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32 {
        let n = y.len() as f32;
        match self {
            Head::HalfMse => {
                let resid: Vec<f32> = out.iter().zip(y).map(|(&f, &yp)| f - yp).collect();
                0.5 * (lanes.dot(&resid, &resid) / n)
            }
            Head::BernoulliLogit => {
                let terms: Vec<f32> = (out.iter().zip(y))
                    .map(|(&f, &yp)| f.max(0.0) + (-f.abs()).exp().ln_1p() - f * yp)
                    .collect();
                lanes.sum(&terms) / n
            }
            Head::GaussianNll => {
                let terms: Vec<f32> = (out.chunks_exact(2).zip(y))
                    .map(|(o, &yp)| (o[1] + (yp - o[0]) * (yp - o[0]) * (-o[1]).exp()) * 0.5)
                    .collect();
                lanes.sum(&terms) / n
            }
            Head::Pinball(t) => {
                let taus: Vec<f32> = t.levels().iter().map(|&v| v as f32).collect();
                let k = taus.len();
                let terms: Vec<f32> = (out.chunks_exact(k).zip(y))
                    .map(|(q, &yp)| {
                        (q.iter().zip(&taus))
                            .map(|(&qv, &tau)| {
                                let u = yp - qv;
                                u * (tau - if u < 0.0 { 1.0 } else { 0.0 })
                            })
                            .sum::<f32>()
                    })
                    .collect();
                lanes.sum(&terms) / n
            }
        }
    }
}

/// The two columns of a heteroscedastic output `[R, n, 2]`: mean and log variance,
/// `[R, n, 1]` each.
fn split(out: Tensor<3>) -> (Tensor<3>, Tensor<3>) {
    let [r, n, _] = out.dims();
    (
        out.clone().slice([0..r, 0..n, 0..1]),
        out.slice([0..r, 0..n, 1..2]),
    )
}
