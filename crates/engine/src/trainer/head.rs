//! Heads: the output layer's loss and its gradient. The trainer asks a head for the data term
//! of every replica and for δ at the output; it does not know which head it runs.

use std::fmt;

use burn::tensor::{Tensor, TensorData};

use crate::cpu::simd::Lanes;

/// The loss on a network's output, per point, and its gradient: what the engine's trainers
/// (tensor and host executions, and the autodiff route) ask of a head. The engine ships the
/// likelihoods' heads ([`HalfMse`], [`GaussianNll`], [`BernoulliLogit`], chosen by
/// [`super::TrainSettings::head`]); a method brings a head of its own through
/// `TrainSettings::own_head` (β-NLL, the evidential head and the pinball head live with their
/// methods in `uqbench-models`), and [`check`] holds its forms to each other.
///
/// Shapes: the tensor forms take the outputs `[R, n, outputs]` and targets `[R, n, 1]`; the
/// host forms one replica's outputs `[n, outputs]` (point-major) and targets `[n]`.
pub trait Head: fmt::Debug + Send + Sync {
    /// Outputs per point the network needs.
    fn outputs(&self) -> usize;
    /// What the outputs are, for the error that a network's outputs do not fit the head
    /// ("mean-only", "logit", …).
    fn describe(&self) -> &'static str;
    /// The data term per replica `[R, 1, 1]`, averaged over the n points.
    fn value(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3>;
    /// δ at the output `[R, n, outputs]`: the gradient of [`Head::value`] with respect to
    /// `out` (or what the head's reference takes as it: see [`Head::delta_is_gradient`]).
    fn delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3>;
    /// [`Head::delta`] for one replica on the host: δ `[n, outputs]` at its outputs `out`.
    fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]);
    /// [`Head::value`] for one replica on the host, in f32 like the device's objective (an
    /// overflow there is what divergence means), its sums in a fixed order on `lanes`.
    fn value_host(&self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32;
    /// Whether δ is the gradient of the value (false for a head with a stop-gradient, such as
    /// β-NLL's detached weight); [`check`] compares δ with finite differences where it is.
    fn delta_is_gradient(&self) -> bool {
        true
    }
    /// Whether N times the value is the data's negative log-likelihood up to the noise
    /// variance (½·MSE: N/σ² times it; the logit head: N times it), the potential an SG-MCMC
    /// chain samples; heads with learned variances, quantiles or evidence are not.
    fn is_scaled_log_likelihood(&self) -> bool {
        false
    }
}

/// One output, the mean, with MATLAB's ½·MSE ([000]'s reference implementation):
/// ½·mean (f − y)², δ = (f − y)/n.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HalfMse;

impl Head for HalfMse {
    fn outputs(&self) -> usize {
        1
    }

    fn describe(&self) -> &'static str {
        "mean-only"
    }

    fn value(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        (out - y.clone()).square().mean_dim(1).mul_scalar(0.5)
    }

    fn delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let n = out.dims()[1];
        (out - y.clone()).div_scalar(n as f64)
    }

    #[inline]
    fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]) {
        let inv_n = 1.0 / y.len() as f32;
        for ((d, &f), &yp) in delta.iter_mut().zip(out).zip(y) {
            *d = (f - yp) * inv_n;
        }
    }

    fn value_host(&self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32 {
        let resid: Vec<f32> = out.iter().zip(y).map(|(&f, &yp)| f - yp).collect();
        0.5 * (lanes.dot(&resid, &resid) / y.len() as f32)
    }

    fn is_scaled_log_likelihood(&self) -> bool {
        true
    }
}

/// Two outputs, mean and log variance s, with the Gaussian negative log-likelihood
/// ½·s + (y − μ)²/(2e^s) without its constant (heteroscedastic dropout, [004]):
/// ∂/∂μ = −(y − μ)·e^{−s}/n and ∂/∂s = ½·(1 − (y − μ)²·e^{−s})/n.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GaussianNll;

impl Head for GaussianNll {
    fn outputs(&self) -> usize {
        2
    }

    fn describe(&self) -> &'static str {
        "heteroscedastic (mean, log variance)"
    }

    fn value(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let (mu, log_var) = split(out);
        let sq = (y.clone() - mu).square() * log_var.clone().neg().exp();
        (log_var + sq).mul_scalar(0.5).mean_dim(1)
    }

    fn delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let n = out.dims()[1];
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

    #[inline]
    fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]) {
        let inv_n = 1.0 / y.len() as f32;
        for ((d, o), &yp) in delta.chunks_exact_mut(2).zip(out.chunks_exact(2)).zip(y) {
            let (resid, inv) = (yp - o[0], (-o[1]).exp());
            d[0] = -(resid * inv) * inv_n;
            d[1] = (1.0 - resid * resid * inv) * 0.5 * inv_n;
        }
    }

    fn value_host(&self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32 {
        let terms: Vec<f32> = (out.chunks_exact(2).zip(y))
            .map(|(o, &yp)| (o[1] + (yp - o[0]) * (yp - o[0]) * (-o[1]).exp()) * 0.5)
            .collect();
        lanes.sum(&terms) / y.len() as f32
    }
}

/// One output, the logit f of P(y = 1 | x) = sigmoid(f), with the Bernoulli negative
/// log-likelihood (binary cross-entropy) −y·log σ(f) − (1 − y)·log(1 − σ(f)) =
/// softplus(f) − y·f, for labels y ∈ {0, 1}; δ = (σ(f) − y)/n.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BernoulliLogit;

impl Head for BernoulliLogit {
    fn outputs(&self) -> usize {
        1
    }

    fn describe(&self) -> &'static str {
        "logit"
    }

    // softplus(f) = max(f, 0) + log(1 + e^{−|f|}): no overflow for large |f|.
    fn value(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let softplus = out.clone().clamp_min(0.0) + out.clone().abs().neg().exp().log1p();
        (softplus - out * y.clone()).mean_dim(1)
    }

    fn delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let n = out.dims()[1];
        (burn::tensor::activation::sigmoid(out) - y.clone()).div_scalar(n as f64)
    }

    #[inline]
    fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]) {
        let inv_n = 1.0 / y.len() as f32;
        for ((d, &f), &yp) in delta.iter_mut().zip(out).zip(y) {
            *d = (1.0 / (1.0 + (-f).exp()) - yp) * inv_n;
        }
    }

    fn value_host(&self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32 {
        let terms: Vec<f32> = (out.iter().zip(y))
            .map(|(&f, &yp)| f.max(0.0) + (-f.abs()).exp().ln_1p() - f * yp)
            .collect();
        lanes.sum(&terms) / y.len() as f32
    }

    fn is_scaled_log_likelihood(&self) -> bool {
        true
    }
}

/// The two columns of a heteroscedastic output `[R, n, 2]`: mean and log variance,
/// `[R, n, 1]` each.
pub fn split(out: Tensor<3>) -> (Tensor<3>, Tensor<3>) {
    let [r, n, _] = out.dims();
    (
        out.clone().slice([0..r, 0..n, 0..1]),
        out.slice([0..r, 0..n, 1..2]),
    )
}

/// Holds a head's four forms to each other at one replica's outputs `out` (`[n, outputs]`)
/// and targets `y` (`[n]`), on the flex backend: the host value and δ against the tensor
/// ones (to `tol`, relative to 1 + |value|), and, where [`Head::delta_is_gradient`], δ against
/// central differences of the host value with step h = 1e-3, to 2e-3·(1 + |value|) +
/// 1e-2·|δ|: the value is f32, whose rounding (about 1e-7·|value| per operation, over the
/// terms of lnΓ and the like) divided by 2h gives up to ~1e-4·(1 + |value|), truncation is
/// O(h²); a δ off by a factor or a sign misses by |δ| or more. The test every head a method
/// brings should pass; an error names the form and the output.
pub fn check(head: &dyn Head, out: &[f32], y: &[f32], tol: f32) -> Result<(), String> {
    let (n, k) = (y.len(), head.outputs());
    if out.len() != n * k {
        return Err(format!(
            "{} outputs for {n} points of a {k}-output head",
            out.len()
        ));
    }
    let device = crate::backend::open_device(crate::backend::BackendKind::Flex, true)
        .map_err(|e| e.to_string())?;
    let t_out = Tensor::<3>::from_data(TensorData::new(out.to_vec(), [1, n, k]), &device);
    let t_y = Tensor::<3>::from_data(TensorData::new(y.to_vec(), [1, n, 1]), &device);
    let read = |t: Tensor<3>| {
        t.into_data()
            .try_to_vec::<f32>()
            .map_err(|e| format!("{e:?}"))
    };
    let value = read(head.value(t_out.clone(), &t_y))?[0];
    let host_value = head.value_host(Lanes::BASELINE, out, y);
    if (value - host_value).abs() > tol * (1.0 + value.abs()) {
        return Err(format!("value: tensor {value}, host {host_value}"));
    }
    let delta = read(head.delta(t_out, &t_y))?;
    let mut host = vec![0.0f32; n * k];
    head.delta_host(out, y, &mut host);
    for (i, (d, h)) in delta.iter().zip(&host).enumerate() {
        if (d - h).abs() > tol * (1.0 + d.abs()) {
            return Err(format!("δ[{i}]: tensor {d}, host {h}"));
        }
    }
    if head.delta_is_gradient() {
        let h = 1e-3f32;
        let mut shifted = out.to_vec();
        for (i, &d) in delta.iter().enumerate() {
            shifted[i] = out[i] + h;
            let up = f64::from(head.value_host(Lanes::BASELINE, &shifted, y));
            shifted[i] = out[i] - h;
            let down = f64::from(head.value_host(Lanes::BASELINE, &shifted, y));
            shifted[i] = out[i];
            let fd = ((up - down) / (2.0 * f64::from(h))) as f32;
            if (fd - d).abs() > 2e-3 * (1.0 + value.abs()) + 1e-2 * d.abs() {
                return Err(format!("δ[{i}] = {d}, central difference {fd}"));
            }
        }
    }
    Ok(())
}

/// Trains a small network with `head` on both executions and compares what they return
/// ([`super::agree::executions_agree`] with the head as the settings' own): the second test
/// a method's own head passes (after [`check`]); `targets` maps the true function's value and a
/// standard normal to a target (a label for a logit head).
pub fn check_training(
    head: std::sync::Arc<dyn Head>,
    targets: impl Fn(f32, f64) -> f32,
) -> Result<(), String> {
    let settings = super::TrainSettings {
        own_head: Some(head),
        ..super::TrainSettings::paper(8, super::agree::POINTS)
    };
    super::agree::executions_agree(&settings, targets).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in heads pass [`check`], and [`check`] fails a head whose δ is off: a ½·MSE
    /// whose host δ drops the 1/n.
    #[test]
    fn the_built_in_heads_pass_the_check_and_a_wrong_delta_fails_it() {
        let out1 = [0.3f32, -1.0, 2.0];
        let out2 = [0.3f32, -0.5, -1.0, 0.8, 2.0, 0.1];
        let y = [0.1f32, 0.4, 1.5];
        let labels = [1.0f32, 0.0, 1.0];
        check(&HalfMse, &out1, &y, 1e-5).unwrap();
        check(&GaussianNll, &out2, &y, 1e-5).unwrap();
        check(&BernoulliLogit, &out1, &labels, 1e-5).unwrap();
        #[derive(Debug)]
        struct NoMean;
        impl Head for NoMean {
            fn outputs(&self) -> usize {
                1
            }
            fn describe(&self) -> &'static str {
                "wrong"
            }
            fn value(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
                HalfMse.value(out, y)
            }
            fn delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
                HalfMse.delta(out, y)
            }
            fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]) {
                for ((d, &f), &yp) in delta.iter_mut().zip(out).zip(y) {
                    *d = f - yp;
                }
            }
            fn value_host(&self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32 {
                HalfMse.value_host(lanes, out, y)
            }
        }
        let err = check(&NoMean, &out1, &y, 1e-5).unwrap_err();
        assert!(err.starts_with("δ[0]"), "{err}");
    }
}
