//! Concrete dropout [Gal, Hron, Kendall 2017]: p = sigmoid(θ) learned per replica through the
//! relaxed mask z = 1 − sigmoid((θ + log u − log(1 − u))/t); units scaled by 1/(1 − p);
//! regulariser weight_reg·‖W‖²/(1 − p) + dropout_reg·K·(p log p + (1 − p) log(1 − p)).
//! The constants follow the reference implementation (yaringal/ConcreteDropout); see
//! `dropout_method::DropoutMethod::dropout` for how weight_reg and dropout_reg are set.

use std::any::Any;

use burn::tensor::activation::sigmoid;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use super::{cache_of, multiplicative_backward, LastGrads, LayerCache, ParamSlot, StochasticLayer};
use crate::device_rng::DeviceRng;
use uqbench_core::MethodError;

/// Lower clamp of the relaxation's uniform noise (the reference implementation's 1e-7), so
/// that log u and log(1 − u) stay finite.
const U_EPS: f64 = 1e-7;

/// Concrete dropout's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Concrete {
    /// Initial p.
    pub init_p: f64,
    /// Temperature t of the relaxation (0.1).
    pub temperature: f64,
    /// l²/(2τN) (see `uqbench_core::noise::Tau`).
    pub weight_reg: f64,
    /// 1/(τN).
    pub dropout_reg: f64,
}

/// The forward pass's h̃, the factor z/(1 − p), z and p.
struct Cache {
    ht: Tensor<3>,
    factor: Tensor<3>,
    z: Tensor<3>,
    p: Tensor<3>,
}

impl StochasticLayer for Concrete {
    fn validate(&self) -> Result<(), MethodError> {
        MethodError::rate("concrete init_p", self.init_p)?;
        MethodError::positive("concrete temperature", self.temperature)?;
        MethodError::non_negative("concrete weight_reg", self.weight_reg)?;
        MethodError::non_negative("concrete dropout_reg", self.dropout_reg)
    }

    /// θ = logit p `[R, 1, 1]`.
    fn params(&self, _k: usize, _o: usize) -> Vec<ParamSlot> {
        vec![ParamSlot {
            dims: [1, 1],
            init: (self.init_p / (1.0 - self.init_p)).ln(),
        }]
    }

    fn rate_name(&self) -> Option<&'static str> {
        Some("learned_p")
    }

    /// p = sigmoid(θ).
    fn rate(&self, theta: f64) -> f64 {
        1.0 / (1.0 + (-theta).exp())
    }

    /// Uniforms `[R, n, k]`, clamped to [1e-7, 1 − 1e-7].
    fn draw(&self, rng: &DeviceRng, counter: u64, n: usize, width: usize) -> Tensor<3> {
        rng.uniform(counter, n, width).clamp(U_EPS, 1.0 - U_EPS)
    }

    fn forward(
        &self,
        h: Tensor<3>,
        w: &Tensor<3>,
        b: &Tensor<3>,
        params: &[Tensor<3>],
        noise: Tensor<3>,
    ) -> (Tensor<3>, LayerCache) {
        let theta = params[0].clone();
        let p = sigmoid(theta.clone());
        let a = (noise.clone().log() - noise.neg().add_scalar(1.0).log() + theta)
            .div_scalar(self.temperature);
        let z = sigmoid(a).neg().add_scalar(1.0);
        let factor = z.clone() / p.clone().neg().add_scalar(1.0);
        let ht = h * factor.clone();
        let out = ht.clone().matmul(w.clone()) + b.clone();
        (out, Box::new(Cache { ht, factor, z, p }))
    }

    fn backward(
        &self,
        cache: &LayerCache,
        w: &Tensor<3>,
        _params: &[Tensor<3>],
        delta: Tensor<3>,
    ) -> LastGrads {
        let c: &Cache = cache_of(cache, "concrete dropout");
        let (mut g, dht) = multiplicative_backward(&c.ht, &c.factor, w, delta);
        // d h̃/dθ = h·s·z·(p − (1 − z)/t) with s = 1/(1 − p), i.e. h̃·(p − (1 − z)/t).
        let dz =
            c.z.clone()
                .neg()
                .add_scalar(1.0)
                .div_scalar(self.temperature);
        let local = c.ht.clone() * (dz.neg() + c.p.clone());
        g.gparams = vec![(dht * local).sum_dim(2).sum_dim(1)];
        g
    }

    /// weight_reg·‖W‖²/(1 − p) + dropout_reg·K·(p log p + (1 − p) log(1 − p)).
    fn regularizer(&self, w: &Tensor<3>, params: &[Tensor<3>]) -> Option<Tensor<3>> {
        let p = sigmoid(params[0].clone());
        let keep = p.clone().neg().add_scalar(1.0);
        let k = w.dims()[1] as f64;
        let sq = w.clone().square().sum_dim(2).sum_dim(1);
        let entropy = p.clone() * p.log() + keep.clone() * keep.clone().log();
        Some(sq.mul_scalar(self.weight_reg) / keep + entropy.mul_scalar(self.dropout_reg * k))
    }

    fn regularize(&self, w: &Tensor<3>, params: &[Tensor<3>], grads: &mut LastGrads) {
        let theta = params[0].clone();
        let p = sigmoid(theta.clone());
        let keep = p.clone().neg().add_scalar(1.0);
        let k = w.dims()[1] as f64;
        let sq = w.clone().square().sum_dim(2).sum_dim(1);
        // d/dW: 2·wr·W/(1 − p); d/dθ: wr·‖W‖²·p/(1 − p) + dr·K·θ·p(1 − p), since
        // d/dθ [p log p + (1 − p) log(1 − p)] = p(1 − p)·log(p/(1 − p)) = p(1 − p)·θ.
        grads.gw = grads.gw.clone() + w.clone().mul_scalar(2.0 * self.weight_reg) / keep.clone();
        let dtheta = sq.mul_scalar(self.weight_reg) * p.clone() / keep.clone()
            + theta * p * keep * (self.dropout_reg * k);
        grads.gparams[0] = grads.gparams[0].clone() + dtheta;
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
