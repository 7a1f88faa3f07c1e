//! β-NLL (Seitzer et al. 2022), the head of a mean–variance member with `beta_nll > 0`: the
//! Gaussian NLL of each point weighted by stop-gradient(σ²(x)^β). As the reference
//! implementation (`beta_nll_loss` of martius-lab/beta-nll):
//! loss = ½(log σ² + (y − μ)²/σ²)·σ²^β with σ² detached in the weight, so δ is the Gaussian
//! NLL's δ times e^{β·s} (s = log σ²), not the gradient of the loss; β = 0 is the Gaussian
//! NLL, β = 1 gives the mean the gradient of ½·MSE.

use burn::tensor::Tensor;

use uqbench_engine::cpu::simd::Lanes;
use uqbench_engine::trainer::head::{split, GaussianNll, Head};

/// The β-NLL head: two outputs (mean, log variance), β in [0, 1] kept to millionths.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BetaNll {
    beta: f64,
}

impl BetaNll {
    /// The head for β in [0, 1] (`None` outside).
    pub fn new(beta: f64) -> Option<BetaNll> {
        (0.0..=1.0).contains(&beta).then(|| BetaNll {
            beta: (beta * 1e6).round() / 1e6,
        })
    }
}

impl Head for BetaNll {
    fn outputs(&self) -> usize {
        2
    }

    fn describe(&self) -> &'static str {
        "heteroscedastic (mean, log variance)"
    }

    fn value(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let (mu, log_var) = split(out);
        let weight = log_var.clone().mul_scalar(self.beta).exp();
        let sq = (y.clone() - mu).square() * log_var.clone().neg().exp();
        ((log_var + sq) * weight).mul_scalar(0.5).mean_dim(1)
    }

    // The weight σ²^β = e^{β·s} is a constant of the gradient (stop-gradient): the Gaussian
    // NLL's δ times it.
    fn delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let n = out.dims()[1];
        let weight = out
            .clone()
            .slice([0..out.dims()[0], 0..n, 1..2])
            .mul_scalar(self.beta)
            .exp();
        GaussianNll.delta(out, y) * weight
    }

    fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]) {
        let inv_n = 1.0 / y.len() as f32;
        let beta = self.beta as f32;
        for ((d, o), &yp) in delta.chunks_exact_mut(2).zip(out.chunks_exact(2)).zip(y) {
            let (resid, inv) = (yp - o[0], (-o[1]).exp());
            let weight = (beta * o[1]).exp();
            d[0] = -(resid * inv) * inv_n * weight;
            d[1] = (1.0 - resid * resid * inv) * 0.5 * inv_n * weight;
        }
    }

    fn value_host(&self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32 {
        let beta = self.beta as f32;
        let terms: Vec<f32> = (out.chunks_exact(2).zip(y))
            .map(|(o, &yp)| {
                let nll = (o[1] + (yp - o[0]) * (yp - o[0]) * (-o[1]).exp()) * 0.5;
                nll * (beta * o[1]).exp()
            })
            .collect();
        lanes.sum(&terms) / y.len() as f32
    }

    fn delta_is_gradient(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uqbench_engine::trainer::head;

    /// β-NLL's δ is the Gaussian NLL's times the detached weight σ²^β = e^{β·s}, so it is not
    /// the gradient of its value (the weight is a constant of the step, as in the reference's
    /// `variance.detach() ** beta`); β = 0 is the Gaussian NLL exactly. Tensor and host forms
    /// agree to f32 rounding ([`head::check`]), and the value is the formula's.
    #[test]
    fn beta_nll_is_the_gaussian_nll_with_a_detached_weight() {
        // Three points: (mean, log variance) outputs and targets.
        let out = [0.3f32, -0.5, -1.0, 0.8, 2.0, 0.1];
        let y = [0.1f32, 0.4, 1.5];
        let mut gauss = [0.0f32; 6];
        GaussianNll.delta_host(&out, &y, &mut gauss);
        for beta in [0.0, 0.5, 1.0] {
            let head = BetaNll::new(beta).unwrap();
            head::check(&head, &out, &y, 1e-5).unwrap();
            let mut delta = [0.0f32; 6];
            head.delta_host(&out, &y, &mut delta);
            for (i, (d, g)) in delta.iter().zip(&gauss).enumerate() {
                let weight = (beta as f32 * out[2 * (i / 2) + 1]).exp();
                assert!(
                    (d - g * weight).abs() < 1e-6,
                    "β {beta}, δ[{i}]: {d} vs {}",
                    g * weight
                );
            }
            let value = head.value_host(Lanes::BASELINE, &out, &y);
            let want: f32 = (0..3)
                .map(|p| {
                    let (mu, s) = (out[2 * p], out[2 * p + 1]);
                    0.5 * (s + (y[p] - mu).powi(2) * (-s).exp()) * (beta as f32 * s).exp()
                })
                .sum::<f32>()
                / 3.0;
            assert!((value - want).abs() < 1e-6);
        }
        // β = 0 is the Gaussian NLL, whose δ is the gradient: the check's finite differences.
        head::check(&GaussianNll, &out, &y, 1e-5).unwrap();
        assert_eq!(BetaNll::new(1.5), None);
    }

    /// The host loops and the tensors train the same networks with the head (8 epochs, within
    /// f32 rounding: `head::check_training`).
    #[test]
    fn both_executions_train_the_beta_nll_head_alike() {
        let head = std::sync::Arc::new(BetaNll::new(0.5).unwrap());
        head::check_training(head, |f, z| f + 0.3 * z as f32).unwrap();
    }
}
