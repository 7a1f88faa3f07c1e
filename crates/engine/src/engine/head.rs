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
    /// β-NLL (Seitzer et al. 2022): the Gaussian NLL of each point weighted by
    /// stop-gradient(σ²(x)^β), β in millionths ([`Head::beta_nll`]). As the reference
    /// implementation (`beta_nll_loss` of martius-lab/beta-nll): loss = ½(log σ² + (y − μ)²/σ²)
    /// · σ²^β with σ² detached in the weight; β = 0 is the Gaussian NLL, β = 1 gives the mean
    /// the gradient of ½·MSE.
    BetaNll(u32),
    /// Deep evidential regression (Amini et al. 2020): four outputs, a Normal–Inverse-Gamma's
    /// (γ, ν, α, β) through the reference's link, with the NIG negative log-likelihood plus λ
    /// times the evidential regulariser |y − γ|·(2ν + α), λ in millionths ([`Head::evidential`];
    /// the loss and its gradient in `nig.rs`).
    Evidential(u32),
    /// K outputs, quantiles of y at levels τ_k, with the pinball loss
    /// Σ_k ρ_τk(y − q_k), ρ_τ(u) = u·(τ − 1[u < 0]) (Koenker & Bassett 1978; the quantile
    /// networks of CQR, Romano et al. 2019).
    Pinball(Taus),
}

impl Head {
    /// The β-NLL head for β in [0, 1] (`None` outside), β kept to millionths.
    pub fn beta_nll(beta: f64) -> Option<Head> {
        (0.0..=1.0)
            .contains(&beta)
            .then(|| Head::BetaNll((beta * 1e6).round() as u32))
    }

    /// The evidential head with regulariser coefficient λ in [0, 1000] (`None` outside).
    pub fn evidential(lambda: f64) -> Option<Head> {
        (0.0..=1000.0)
            .contains(&lambda)
            .then(|| Head::Evidential((lambda * 1e6).round() as u32))
    }

    /// Outputs per point the network needs for this head.
    pub fn outputs(self) -> usize {
        match self {
            Head::HalfMse | Head::BernoulliLogit => 1,
            Head::GaussianNll | Head::BetaNll(_) => 2,
            Head::Evidential(_) => 4,
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
            Head::BetaNll(b) => {
                let (mu, log_var) = split(out);
                let weight = log_var.clone().mul_scalar(millionths(b)).exp();
                let sq = (y.clone() - mu).square() * log_var.clone().neg().exp();
                ((log_var + sq) * weight).mul_scalar(0.5).mean_dim(1)
            }
            Head::Evidential(l) => super::nig::value(out, y, millionths(l)),
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
            // The weight σ²^β = e^{β·s} is a constant of the gradient (stop-gradient): the
            // Gaussian NLL's δ times it.
            Head::BetaNll(b) => {
                let weight = out
                    .clone()
                    .slice([0..out.dims()[0], 0..n, 1..2])
                    .mul_scalar(millionths(b))
                    .exp();
                Head::GaussianNll.delta(out, y) * weight
            }
            Head::BernoulliLogit => {
                (burn::tensor::activation::sigmoid(out) - y.clone()).div_scalar(n as f64)
            }
            Head::Evidential(l) => super::nig::delta(out, y, millionths(l)),
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
            Head::BetaNll(b) => {
                let beta = millionths(b) as f32;
                for ((d, o), &yp) in delta.chunks_exact_mut(2).zip(out.chunks_exact(2)).zip(y) {
                    let (resid, inv) = (yp - o[0], (-o[1]).exp());
                    let weight = (beta * o[1]).exp();
                    d[0] = -(resid * inv) * inv_n * weight;
                    d[1] = (1.0 - resid * resid * inv) * 0.5 * inv_n * weight;
                }
            }
            Head::Evidential(l) => {
                let lambda = millionths(l) as f32;
                for ((d, o), &yp) in delta.chunks_exact_mut(4).zip(out.chunks_exact(4)).zip(y) {
                    super::nig::delta_host(o, yp, lambda, d);
                    for v in d.iter_mut() {
                        *v *= inv_n;
                    }
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
    /// + log(1 + e^{−|f|}); Gaussian NLL: mean ½·(s + (y − μ)²·e^{−s}); β-NLL: the same terms
    /// times e^{β·s}; pinball: mean
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
            Head::BetaNll(b) => {
                let beta = millionths(b) as f32;
                let terms: Vec<f32> = (out.chunks_exact(2).zip(y))
                    .map(|(o, &yp)| {
                        let nll = (o[1] + (yp - o[0]) * (yp - o[0]) * (-o[1]).exp()) * 0.5;
                        nll * (beta * o[1]).exp()
                    })
                    .collect();
                lanes.sum(&terms) / n
            }
            Head::Evidential(l) => {
                let lambda = millionths(l) as f32;
                let terms: Vec<f32> = (out.chunks_exact(4).zip(y))
                    .map(|(o, &yp)| super::nig::value_host(o, yp, lambda))
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

/// A setting kept in millionths (so that a head stays `Copy` and `Eq`), as a number.
fn millionths(v: u32) -> f64 {
    f64::from(v) / 1e6
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{open_device, BackendKind};
    use crate::cpu::simd::Lanes;

    /// β-NLL's gradient is the Gaussian NLL's times the detached weight σ²^β = e^{β·s}, so it
    /// is not the gradient of its value (the weight is a constant of the step, as in the
    /// reference's `variance.detach() ** beta`); β = 0 is the Gaussian NLL exactly. Tensor and
    /// host forms agree to f32 rounding.
    #[test]
    fn beta_nll_is_the_gaussian_nll_with_a_detached_weight() {
        let device = open_device(BackendKind::Flex, true).unwrap();
        // Three points: (mean, log variance) outputs and targets.
        let out = [0.3f32, -0.5, -1.0, 0.8, 2.0, 0.1];
        let y = [0.1f32, 0.4, 1.5];
        let t_out = Tensor::<3>::from_data(TensorData::new(out.to_vec(), [1, 3, 2]), &device);
        let t_y = Tensor::<3>::from_data(TensorData::new(y.to_vec(), [1, 3, 1]), &device);
        let read = |t: Tensor<3>| t.into_data().try_to_vec::<f32>().unwrap();
        let gauss = read(Head::GaussianNll.delta(t_out.clone(), &t_y));
        for beta in [0.0, 0.5, 1.0] {
            let head = Head::beta_nll(beta).unwrap();
            let delta = read(head.delta(t_out.clone(), &t_y));
            let mut host = [0.0f32; 6];
            head.delta_host(&out, &y, &mut host);
            for (i, ((d, h), g)) in delta.iter().zip(&host).zip(&gauss).enumerate() {
                let weight = (beta as f32 * out[2 * (i / 2) + 1]).exp();
                assert!(
                    (d - g * weight).abs() < 1e-6,
                    "β {beta}, δ[{i}]: {d} vs {}",
                    g * weight
                );
                assert!(
                    (d - h).abs() < 1e-6,
                    "β {beta}, δ[{i}]: tensor {d}, host {h}"
                );
            }
            let value = read(head.value(t_out.clone(), &t_y))[0];
            let host_value = head.value_host(Lanes::BASELINE, &out, &y);
            let want: f32 = (0..3)
                .map(|p| {
                    let (mu, s) = (out[2 * p], out[2 * p + 1]);
                    0.5 * (s + (y[p] - mu).powi(2) * (-s).exp()) * (beta as f32 * s).exp()
                })
                .sum::<f32>()
                / 3.0;
            assert!((value - want).abs() < 1e-6 && (host_value - want).abs() < 1e-6);
        }
        assert_eq!(Head::beta_nll(1.5), None);
    }
}
