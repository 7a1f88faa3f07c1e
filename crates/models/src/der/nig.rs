//! Deep evidential regression's head (Amini et al. 2020, spec §11): four outputs per point,
//! (γ, ν, α, β) of a Normal–Inverse-Gamma, with the reference implementation's link
//! (aamini/evidential-deep-learning, `DenseNormalGamma`): γ the raw output,
//! ν = softplus(o₂), α = softplus(o₃) + 1, β = softplus(o₄). Its loss per point, as the
//! reference's `EvidentialRegression` (`NIG_NLL` + coeff·`NIG_Reg`), with r = y − γ and
//! Ω = 2β(1 + ν):
//!
//! ```text
//! L = ½·ln(π/ν) − α·ln Ω + (α + ½)·ln(ν r² + Ω) + lnΓ(α) − lnΓ(α + ½) + λ·|r|·(2ν + α)
//! ```
//!
//! and its gradient, with D = ν r² + Ω (2β/Ω = 1/(1 + ν), 2(1 + ν)/Ω = 1/β):
//!
//! ```text
//! ∂L/∂γ = −(α + ½)·2νr/D − λ·sign(r)·(2ν + α)
//! ∂L/∂ν = −1/(2ν) − α/(1 + ν) + (α + ½)(r² + 2β)/D + 2λ|r|
//! ∂L/∂α = ln(D/Ω) + ψ(α) − ψ(α + ½) + λ|r|
//! ∂L/∂β = −α/β + (α + ½)·2(1 + ν)/D
//! ```
//!
//! times the links' derivatives sigmoid(o) for ν, α, β. lnΓ and the digamma ψ come from their
//! asymptotic series after shifting the argument by 6 (α ≥ 1, so z ≥ 7: the first omitted
//! terms are below 1e-9), in f32 like everything the device computes; the tests hold the
//! gradient to finite differences of the value (`head::check`).

use burn::tensor::Tensor;

use uqbench_engine::cpu::simd::Lanes;
use uqbench_engine::trainer::head::Head;

/// The evidential head: four outputs, (γ, ν, α, β) through the link above, the NIG negative
/// log-likelihood plus λ times the evidential regulariser |y − γ|·(2ν + α). λ is kept to
/// millionths, as the configuration gives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidential {
    lambda: f64,
}

impl Evidential {
    /// The head with regulariser coefficient λ in [0, 1000] (`None` outside), λ kept to
    /// millionths.
    pub fn new(lambda: f64) -> Option<Evidential> {
        (0.0..=1000.0).contains(&lambda).then(|| Evidential {
            lambda: (lambda * 1e6).round() / 1e6,
        })
    }
}

impl Head for Evidential {
    fn outputs(&self) -> usize {
        4
    }

    fn describe(&self) -> &'static str {
        "evidential (γ, ν, α, β)"
    }

    fn value(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        value(out, y, self.lambda)
    }

    fn delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        delta(out, y, self.lambda)
    }

    fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]) {
        let inv_n = 1.0 / y.len() as f32;
        let lambda = self.lambda as f32;
        for ((d, o), &yp) in delta.chunks_exact_mut(4).zip(out.chunks_exact(4)).zip(y) {
            delta_host(o, yp, lambda, d);
            for v in d.iter_mut() {
                *v *= inv_n;
            }
        }
    }

    fn value_host(&self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32 {
        let lambda = self.lambda as f32;
        let terms: Vec<f32> = (out.chunks_exact(4).zip(y))
            .map(|(o, &yp)| value_host(o, yp, lambda))
            .collect();
        lanes.sum(&terms) / y.len() as f32
    }
}

/// ½·ln(2π).
const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;

/// lnΓ(x) for x ≥ 1 (host, f32 arithmetic in f64 for the series' constants).
fn ln_gamma(x: f32) -> f32 {
    let shift: f32 = (0..6).map(|k| (x + k as f32).ln()).sum();
    let z = f64::from(x) + 6.0;
    let series = (z - 0.5) * z.ln() - z + HALF_LN_2PI + 1.0 / (12.0 * z)
        - 1.0 / (360.0 * z.powi(3))
        + 1.0 / (1260.0 * z.powi(5));
    series as f32 - shift
}

/// ψ(x) for x ≥ 1.
fn digamma(x: f32) -> f32 {
    let shift: f32 = (0..6).map(|k| 1.0 / (x + k as f32)).sum();
    let z = f64::from(x) + 6.0;
    let z2 = z * z;
    let series = z.ln() - 0.5 / z - 1.0 / (12.0 * z2) + 1.0 / (120.0 * z2 * z2)
        - 1.0 / (252.0 * z2 * z2 * z2);
    series as f32 - shift
}

/// lnΓ on a tensor of values ≥ 1.
fn ln_gamma_t(x: Tensor<3>) -> Tensor<3> {
    let mut shift = x.clone().log();
    for k in 1..6 {
        shift = shift + x.clone().add_scalar(k as f64).log();
    }
    let z = x.add_scalar(6.0);
    let inv = z.clone().recip();
    let inv2 = inv.clone().square();
    let tail = inv.clone().mul_scalar(1.0 / 12.0)
        - (inv.clone() * inv2.clone()).mul_scalar(1.0 / 360.0)
        + (inv * inv2.clone() * inv2).mul_scalar(1.0 / 1260.0);
    (z.clone().sub_scalar(0.5) * z.clone().log() - z).add_scalar(HALF_LN_2PI) + tail - shift
}

/// ψ on a tensor of values ≥ 1.
fn digamma_t(x: Tensor<3>) -> Tensor<3> {
    let mut shift = x.clone().recip();
    for k in 1..6 {
        shift = shift + x.clone().add_scalar(k as f64).recip();
    }
    let z = x.add_scalar(6.0);
    let inv = z.clone().recip();
    let inv2 = inv.clone().square();
    let inv4 = inv2.clone().square();
    z.log() - inv.mul_scalar(0.5) - inv2.clone().mul_scalar(1.0 / 12.0)
        + inv4.clone().mul_scalar(1.0 / 120.0)
        - (inv4 * inv2).mul_scalar(1.0 / 252.0)
        - shift
}

/// softplus(x) = max(x, 0) + ln(1 + e^{−|x|}), without overflow.
fn softplus_t(x: Tensor<3>) -> Tensor<3> {
    x.clone().clamp_min(0.0) + x.abs().neg().exp().log1p()
}

/// The same on the host.
fn softplus(x: f32) -> f32 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// (γ, ν, α, β) from a point's four raw outputs (the reference's link).
fn link(o: &[f32]) -> [f32; 4] {
    [o[0], softplus(o[1]), softplus(o[2]) + 1.0, softplus(o[3])]
}

/// The same link in f64, for the predictions: (γ, ν, α − 1, β), with α − 1 = softplus(o₃)
/// kept apart, since 1 + a small softplus rounds to 1 in f32 and would make the variances
/// β/(α − 1) infinite where the network's are finite.
pub fn link_f64(o: &[f32]) -> [f64; 4] {
    let sp = |x: f32| {
        let x = f64::from(x);
        x.max(0.0) + (-x.abs()).exp().ln_1p()
    };
    [f64::from(o[0]), sp(o[1]), sp(o[2]), sp(o[3])]
}

/// The four `[R, n, 1]` columns of `out` `[R, n, 4]`.
fn columns(out: &Tensor<3>) -> [Tensor<3>; 4] {
    let [r, n, _] = out.dims();
    std::array::from_fn(|k| out.clone().slice([0..r, 0..n, k..k + 1]))
}

/// The mean loss per replica `[R, 1, 1]` (module docs), coefficient λ.
fn value(out: Tensor<3>, y: &Tensor<3>, lambda: f64) -> Tensor<3> {
    let [g, o_nu, o_alpha, o_beta] = columns(&out);
    let (nu, alpha, beta) = (
        softplus_t(o_nu),
        softplus_t(o_alpha).add_scalar(1.0),
        softplus_t(o_beta),
    );
    let r = y.clone() - g;
    let omega = beta * nu.clone().add_scalar(1.0).mul_scalar(2.0);
    let d = nu.clone() * r.clone().square() + omega.clone();
    let nll = nu
        .clone()
        .recip()
        .mul_scalar(std::f64::consts::PI)
        .log()
        .mul_scalar(0.5)
        - alpha.clone() * omega.log()
        + alpha.clone().add_scalar(0.5) * d.log()
        + ln_gamma_t(alpha.clone())
        - ln_gamma_t(alpha.clone().add_scalar(0.5));
    let reg = r.abs() * (nu.mul_scalar(2.0) + alpha);
    (nll + reg.mul_scalar(lambda)).mean_dim(1)
}

/// δ at the outputs `[R, n, 4]`: the gradient of [`value`].
fn delta(out: Tensor<3>, y: &Tensor<3>, lambda: f64) -> Tensor<3> {
    let n = out.dims()[1] as f64;
    let [g, o_nu, o_alpha, o_beta] = columns(&out);
    let sig = |o: &Tensor<3>| burn::tensor::activation::sigmoid(o.clone());
    let (s_nu, s_alpha, s_beta) = (sig(&o_nu), sig(&o_alpha), sig(&o_beta));
    let (nu, alpha, beta) = (
        softplus_t(o_nu),
        softplus_t(o_alpha).add_scalar(1.0),
        softplus_t(o_beta),
    );
    let r = y.clone() - g;
    let omega = beta.clone() * nu.clone().add_scalar(1.0).mul_scalar(2.0);
    let d = nu.clone() * r.clone().square() + omega.clone();
    let a_half = alpha.clone().add_scalar(0.5);
    let evidence = nu.clone().mul_scalar(2.0) + alpha.clone();
    let d_gamma = (a_half.clone() * nu.clone() * r.clone() / d.clone()).mul_scalar(-2.0)
        - r.clone().sign() * evidence.mul_scalar(lambda);
    let d_nu = nu.clone().recip().mul_scalar(-0.5) - alpha.clone() / nu.clone().add_scalar(1.0)
        + a_half.clone() * (r.clone().square() + beta.clone().mul_scalar(2.0)) / d.clone()
        + r.clone().abs().mul_scalar(2.0 * lambda);
    let d_alpha = (d.clone() / omega).log() + digamma_t(alpha.clone())
        - digamma_t(alpha.clone().add_scalar(0.5))
        + r.abs().mul_scalar(lambda);
    let d_beta = (alpha / beta).neg() + a_half * nu.add_scalar(1.0).mul_scalar(2.0) / d;
    Tensor::cat(
        vec![d_gamma, d_nu * s_nu, d_alpha * s_alpha, d_beta * s_beta],
        2,
    )
    .div_scalar(n)
}

/// One point's loss on the host.
fn value_host(o: &[f32], y: f32, lambda: f32) -> f32 {
    let [g, nu, alpha, beta] = link(o);
    let r = y - g;
    let omega = 2.0 * beta * (1.0 + nu);
    let d = nu * r * r + omega;
    0.5 * (std::f32::consts::PI / nu).ln() - alpha * omega.ln()
        + (alpha + 0.5) * d.ln()
        + ln_gamma(alpha)
        - ln_gamma(alpha + 0.5)
        + lambda * r.abs() * (2.0 * nu + alpha)
}

/// One point's δ on the host (without the 1/n).
fn delta_host(o: &[f32], y: f32, lambda: f32, out: &mut [f32]) {
    let [g, nu, alpha, beta] = link(o);
    let r = y - g;
    let omega = 2.0 * beta * (1.0 + nu);
    let d = nu * r * r + omega;
    let a_half = alpha + 0.5;
    let sign = if r > 0.0 {
        1.0
    } else if r < 0.0 {
        -1.0
    } else {
        0.0
    };
    out[0] = -2.0 * a_half * nu * r / d - lambda * sign * (2.0 * nu + alpha);
    out[1] = (-0.5 / nu - alpha / (1.0 + nu)
        + a_half * (r * r + 2.0 * beta) / d
        + 2.0 * lambda * r.abs())
        * sigmoid(o[1]);
    out[2] = ((d / omega).ln() + digamma(alpha) - digamma(alpha + 0.5) + lambda * r.abs())
        * sigmoid(o[2]);
    out[3] = (-alpha / beta + a_half * 2.0 * (1.0 + nu) / d) * sigmoid(o[3]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use uqbench_engine::trainer::head;

    /// The head's tensor and host forms agree, and δ is the gradient of the value (central
    /// differences), at λ = 0.3 and outputs whose ν, α, β links are far from and near 0.
    #[test]
    fn the_evidential_head_passes_the_head_check() {
        let out = [
            0.3f32, -0.5, 0.2, 1.0, //
            -1.0, 0.8, -2.0, 0.1, //
            2.0, 1.5, 0.7, -0.4,
        ];
        let y = [0.1f32, 0.4, 1.5];
        head::check(&Evidential::new(0.3).unwrap(), &out, &y, 1e-5).unwrap();
        head::check(&Evidential::new(0.0).unwrap(), &out, &y, 1e-5).unwrap();
        assert_eq!(Evidential::new(-1.0), None);
    }

    /// The host loops and the tensors train the same networks with the head (8 epochs, within
    /// f32 rounding: `head::check_training`).
    #[test]
    fn both_executions_train_the_evidential_head_alike() {
        let head = std::sync::Arc::new(Evidential::new(0.1).unwrap());
        head::check_training(head, |f, z| f + 0.3 * z as f32).unwrap();
    }

    #[test]
    fn special_functions_match_reference_values() {
        // lnΓ(1) = lnΓ(2) = 0, lnΓ(1.5) = ln(√π/2), lnΓ(10) = ln 9!; ψ(1) = −γ_E,
        // ψ(1.5) = 2 − γ_E − 2 ln 2, ψ(10) = H₉ − γ_E.
        let euler = 0.577_215_7_f32;
        for (x, want) in [
            (1.0, 0.0),
            (2.0, 0.0),
            (1.5, (std::f32::consts::PI.sqrt() / 2.0).ln()),
            (10.0, 362_880.0_f32.ln()),
        ] {
            assert!(
                (ln_gamma(x) - want).abs() < 2e-6,
                "lnΓ({x}) = {}",
                ln_gamma(x)
            );
        }
        let h9: f32 = (1..10).map(|k| 1.0 / k as f32).sum();
        for (x, want) in [
            (1.0, -euler),
            (1.5, 2.0 - euler - 2.0 * 2.0_f32.ln()),
            (10.0, h9 - euler),
        ] {
            assert!((digamma(x) - want).abs() < 2e-6, "ψ({x}) = {}", digamma(x));
        }
    }
}
