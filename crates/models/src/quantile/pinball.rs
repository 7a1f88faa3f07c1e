//! The pinball head of the quantile networks: K outputs, quantiles of y at levels τ_k, with the
//! loss Σ_k ρ_τk(y − q_k), ρ_τ(u) = u·(τ − 1[u < 0]) (Koenker & Bassett 1978; the quantile
//! networks of CQR, Romano et al. 2019), averaged over the points.

use burn::tensor::{Tensor, TensorData};

use uqbench_engine::cpu::simd::Lanes;
use uqbench_engine::trainer::head::Head;

/// The most quantile outputs a pinball head has.
pub const MAX_QUANTILES: usize = 9;

/// The pinball head at quantile levels τ (in millionths, as the configuration gives them): at
/// most [`MAX_QUANTILES`], the first the output that serves as the prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct Pinball {
    taus: Vec<f64>,
}

impl Pinball {
    /// From levels in (0, 1); `None` for none, too many, or one outside (0, 1).
    pub fn new(levels: &[f64]) -> Option<Pinball> {
        if levels.is_empty()
            || levels.len() > MAX_QUANTILES
            || levels.iter().any(|t| !(*t > 0.0 && *t < 1.0))
        {
            return None;
        }
        Some(Pinball {
            taus: levels.iter().map(|t| (t * 1e6).round() / 1e6).collect(),
        })
    }

    /// The levels.
    pub fn levels(&self) -> &[f64] {
        &self.taus
    }

    /// The levels as a `[1, 1, K]` tensor on `out`'s device.
    fn tensor(&self, out: &Tensor<3>) -> Tensor<3> {
        let v: Vec<f32> = self.taus.iter().map(|&t| t as f32).collect();
        let k = v.len();
        Tensor::from_data(TensorData::new(v, [1, 1, k]), &out.device())
    }

    fn taus_f32(&self) -> Vec<f32> {
        self.taus.iter().map(|&v| v as f32).collect()
    }
}

impl Head for Pinball {
    fn outputs(&self) -> usize {
        self.taus.len()
    }

    fn describe(&self) -> &'static str {
        "quantile"
    }

    fn value(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let taus = self.tensor(&out);
        let u = y.clone() - out;
        let below = u.clone().lower_elem(0.0).float();
        (u * (taus - below)).sum_dim(2).mean_dim(1)
    }

    // d/dq ρ_τ(y − q) = −(τ − 1[y < q]) (the subgradient at y = q taken as −τ).
    fn delta(&self, out: Tensor<3>, y: &Tensor<3>) -> Tensor<3> {
        let n = out.dims()[1];
        let taus = self.tensor(&out);
        let below = (y.clone() - out).lower_elem(0.0).float();
        (below - taus).div_scalar(n as f64)
    }

    fn delta_host(&self, out: &[f32], y: &[f32], delta: &mut [f32]) {
        let inv_n = 1.0 / y.len() as f32;
        let taus = self.taus_f32();
        let k = taus.len();
        for ((d, q), &yp) in delta.chunks_exact_mut(k).zip(out.chunks_exact(k)).zip(y) {
            for ((dv, &qv), &tau) in d.iter_mut().zip(q).zip(&taus) {
                let below = if yp - qv < 0.0 { 1.0 } else { 0.0 };
                *dv = (below - tau) * inv_n;
            }
        }
    }

    fn value_host(&self, lanes: Lanes, out: &[f32], y: &[f32]) -> f32 {
        let taus = self.taus_f32();
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
        lanes.sum(&terms) / y.len() as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uqbench_engine::trainer::head;

    /// The head's forms agree and δ is the (sub)gradient of the value away from the kinks
    /// (no output within the finite difference's step of its target here).
    #[test]
    fn the_pinball_head_passes_the_head_check() {
        let head = Pinball::new(&[0.5, 0.05, 0.95]).unwrap();
        let out = [0.3f32, -0.5, 1.0, -1.0, 0.8, 2.0];
        head::check(&head, &out, &[0.1, 0.4], 1e-5).unwrap();
        assert_eq!(Pinball::new(&[0.5, 1.0]), None);
        assert_eq!(Pinball::new(&[0.5; 10]), None);
    }

    /// The host loops and the tensors train the same networks with the head (8 epochs, within
    /// f32 rounding: `head::check_training`). Levels that no batch of 43 points balances
    /// exactly: the bias gradient Σ_p (1[y_p < q_p] − τ)/n vanishes in exact arithmetic when
    /// n·τ of the points lie below, and Adam's first steps turn the f32 rounding left of that
    /// zero into steps of ±lr, different on the two executions; with n·τ never an integer the
    /// sums stay away from zero.
    #[test]
    fn both_executions_train_the_pinball_head_alike() {
        let head = std::sync::Arc::new(Pinball::new(&[0.13, 0.47, 0.91]).unwrap());
        head::check_training(head, |f, z| f + 0.3 * z as f32).unwrap();
    }
}
