//! Heads: the output layer's loss and its gradient. The trainer asks a head for the data term
//! of every replica and for δ at the output; it does not know which head it runs.

use burn::tensor::Tensor;

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
}

impl Head {
    /// Outputs per point the network needs for this head.
    pub fn outputs(self) -> usize {
        match self {
            Head::HalfMse | Head::BernoulliLogit => 1,
            Head::GaussianNll => 2,
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
