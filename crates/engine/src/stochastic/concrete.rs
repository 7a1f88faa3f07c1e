//! Concrete dropout [Gal, Hron, Kendall 2017]: p = sigmoid(θ) learned per replica through the
//! relaxed mask z = 1 − sigmoid((θ + log u − log(1 − u))/t); units scaled by 1/(1 − p);
//! regulariser weight_reg·‖W‖²/(1 − p) + dropout_reg·K·(p log p + (1 − p) log(1 − p)).
//! The constants follow the reference implementation (yaringal/ConcreteDropout); see
//! `dropout_method::DropoutMethod::dropout` for how weight_reg and dropout_reg are set.

use std::any::Any;

use burn::tensor::activation::sigmoid;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use super::{
    cache_of, linear_backward_host, linear_host, multiplicative_backward, times_factor, HostCache,
    HostGrads, HostLast, LastGrads, LayerCache, ParamSlot, StochasticLayer,
};
use crate::cpu::{math, simd};
use crate::device_rng::{DeviceRng, HostStream};
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

    /// The device's uniforms (exact), clamped to [1e-7, 1 − 1e-7] in f32.
    fn draw_host(&self, stream: &HostStream, counter: u64, out: &mut [f32]) {
        stream.uniform(counter, out);
        let (lo, hi) = (U_EPS as f32, (1.0 - U_EPS) as f32);
        for v in out.iter_mut() {
            *v = v.clamp(lo, hi);
        }
    }

    /// z = 1 − σ((θ + log u − log(1 − u))/t), factor = z/(1 − p), h̃ = h·factor; the cache
    /// keeps h̃, the factor and z.
    fn forward_host(
        &self,
        x: &HostLast<'_>,
        noise: &[f32],
        out: &mut [f32],
        cache: &mut HostCache,
    ) {
        let theta = x.params[0];
        let len = noise.len();
        cache.ht.resize(len, 0.0);
        cache.factor.resize(len, 0.0);
        cache.aux.resize(len, 0.0);
        // Three transcendentals per unit and point: vectorised (`cpu::math`), at the run's
        // instruction set.
        simd::dispatch_at(
            x.level,
            Relax {
                theta,
                keep: 1.0 - math::sigmoid(theta),
                t: self.temperature as f32,
                noise,
                h: x.h,
                ht: &mut cache.ht,
                factor: &mut cache.factor,
                z: &mut cache.aux,
            },
        );
        linear_host(&cache.ht, x.w, x.b, out);
    }

    /// The linear part's gradients; ∂/∂θ = Σ (δ·Wᵀ) ⊙ h̃ ⊙ (p − (1 − z)/t) (the tensor
    /// twin's d h̃/dθ); δ at h = (δ·Wᵀ) ⊙ factor.
    fn backward_host(
        &self,
        x: &HostLast<'_>,
        _noise: &[f32],
        cache: &HostCache,
        delta: &[f32],
        g: &mut HostGrads<'_>,
    ) {
        linear_backward_host(&cache.ht, x.w, delta, g.gw, g.gb, g.dh);
        let p = sigmoid_host(x.params[0]);
        let t = self.temperature as f32;
        let terms: Vec<f32> = (g.dh.iter().zip(&cache.ht))
            .zip(&cache.aux)
            .map(|((&d, &ht), &z)| d * (ht * (p - (1.0 - z) / t)))
            .collect();
        g.gparams[0] = crate::cpu::simd::sum(&terms);
        times_factor(g.dh, &cache.factor);
    }

    fn regularizer_host(&self, w: &[f32], k: usize, params: &[f32]) -> Option<f32> {
        let p = sigmoid_host(params[0]);
        let keep = 1.0 - p;
        let sq: f32 = w.iter().map(|v| v * v).sum();
        let entropy = p * p.ln() + keep * keep.ln();
        Some(sq * self.weight_reg as f32 / keep + entropy * (self.dropout_reg * k as f64) as f32)
    }

    fn regularize_host(
        &self,
        w: &[f32],
        k: usize,
        params: &[f32],
        gw: &mut [f32],
        gparams: &mut [f32],
    ) {
        let theta = params[0];
        let p = sigmoid_host(theta);
        let keep = 1.0 - p;
        let wr = self.weight_reg as f32;
        let sq: f32 = w.iter().map(|v| v * v).sum();
        for (g, &v) in gw.iter_mut().zip(w) {
            *g += v * (2.0 * wr) / keep;
        }
        gparams[0] += sq * wr * p / keep + theta * p * keep * (self.dropout_reg * k as f64) as f32;
    }
}

/// The logistic function in f32.
fn sigmoid_host(x: f32) -> f32 {
    math::sigmoid(x)
}

/// The relaxed mask of every unit and point as an operation for [`simd::dispatch_at`]:
/// z = 1 − σ((θ + log u − log(1 − u))/t), factor = z/(1 − p), h̃ = h·factor.
struct Relax<'a> {
    theta: f32,
    keep: f32,
    t: f32,
    noise: &'a [f32],
    h: &'a [f32],
    ht: &'a mut [f32],
    factor: &'a mut [f32],
    z: &'a mut [f32],
}

impl simd::Op for Relax<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self, _: simd::Lanes) {
        let (theta, keep, t) = (self.theta, self.keep, self.t);
        for ((((&u, &h), ht), f), z) in (self.noise.iter().zip(self.h))
            .zip(self.ht.iter_mut())
            .zip(self.factor.iter_mut())
            .zip(self.z.iter_mut())
        {
            let a = (math::ln(u) - math::ln(1.0 - u) + theta) / t;
            *z = 1.0 - math::sigmoid(a);
            *f = *z / keep;
            *ht = h * *f;
        }
    }
}
