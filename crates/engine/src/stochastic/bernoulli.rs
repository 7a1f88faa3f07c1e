//! MC (Bernoulli) dropout [Gal & Ghahramani 2016]: each unit kept with probability 1 − p and
//! scaled by 1/(1 − p), in training and at prediction. No learnable parameter, no regulariser
//! beyond the global L2.

use std::any::Any;

use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use super::{
    cache_of, linear_backward_host, linear_host, multiplicative_backward, times_factor, HostCache,
    HostGrads, HostLast, LastGrads, LayerCache, StochasticLayer,
};
use crate::device_rng::{DeviceRng, HostStream};
use uqbench_core::MethodError;

/// MC dropout with drop rate `p`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bernoulli {
    /// Drop rate p ∈ (0, 1).
    pub p: f64,
}

/// The forward pass's h̃ = h ⊙ mask and the mask (0 or 1/(1 − p) per unit).
struct Cache {
    ht: Tensor<3>,
    mask: Tensor<3>,
}

impl StochasticLayer for Bernoulli {
    fn validate(&self) -> Result<(), MethodError> {
        MethodError::rate("dropout p", self.p)
    }

    /// The scaled keep-mask `[R, n, k]`: 1/(1 − p) where u ≥ p, else 0.
    fn draw(&self, rng: &DeviceRng, counter: u64, n: usize, width: usize) -> Tensor<3> {
        rng.uniform(counter, n, width)
            .greater_equal_elem(self.p)
            .float()
            .mul_scalar(1.0 / (1.0 - self.p))
    }

    fn forward(
        &self,
        h: Tensor<3>,
        w: &Tensor<3>,
        b: &Tensor<3>,
        _params: &[Tensor<3>],
        noise: Tensor<3>,
    ) -> (Tensor<3>, LayerCache) {
        let ht = h * noise.clone();
        let out = ht.clone().matmul(w.clone()) + b.clone();
        (out, Box::new(Cache { ht, mask: noise }))
    }

    fn backward(
        &self,
        cache: &LayerCache,
        w: &Tensor<3>,
        _params: &[Tensor<3>],
        delta: Tensor<3>,
    ) -> LastGrads {
        let c: &Cache = cache_of(cache, "Bernoulli dropout");
        multiplicative_backward(&c.ht, &c.mask, w, delta).0
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// The device's mask, exactly: 1/(1 − p) in f32 where the uniform (exact) is ≥ p in f32.
    fn draw_host(&self, stream: &HostStream, counter: u64, out: &mut [f32]) {
        stream.uniform(counter, out);
        let (p, scale) = (self.p as f32, (1.0 / (1.0 - self.p)) as f32);
        for v in out.iter_mut() {
            *v = if *v >= p { scale } else { 0.0 };
        }
    }

    fn forward_host(
        &self,
        x: &HostLast<'_>,
        noise: &[f32],
        out: &mut [f32],
        cache: &mut HostCache,
    ) {
        cache.ht.clear();
        cache.ht.extend(x.h.iter().zip(noise).map(|(&h, &m)| h * m));
        linear_host(&cache.ht, x.w, x.b, out);
    }

    fn backward_host(
        &self,
        x: &HostLast<'_>,
        noise: &[f32],
        cache: &HostCache,
        delta: &[f32],
        g: &mut HostGrads<'_>,
    ) {
        linear_backward_host(&cache.ht, x.w, delta, g.gw, g.gb, g.dh);
        times_factor(g.dh, noise);
    }
}
