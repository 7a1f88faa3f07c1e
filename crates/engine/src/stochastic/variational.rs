//! Variational dropout [Kingma, Salimans, Welling 2015]: multiplicative noise N(1, α) on the
//! units with α learned per replica, sampled through the local reparameterisation (noise on
//! the pre-activations: mean h·W, variance α·(h²)·(W²)); regulariser kl_weight·Σ_weights KL(α)
//! with Molchanov et al.'s (2017) approximation of the KL.

use std::any::Any;

use burn::tensor::activation::sigmoid;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use super::{
    cache_of, HostCache, HostGrads, HostLast, LastGrads, LayerCache, ParamSlot, StochasticLayer,
};
use crate::device_rng::{DeviceRng, HostStream};
use uqbench_core::MethodError;

/// Molchanov et al. (2017), eq. 14: −KL ≈ k1·σ(k2 + k3·log α) − ½·log(1 + 1/α) − k1.
/// Variational dropout's log α is clipped to [−LOG_ALPHA_CLIP, LOG_ALPHA_CLIP] wherever it is
/// used (the noise, the KL), with zero gradient outside, as in Molchanov et al.'s reference
/// implementation (bayesgroup/variational-dropout-sparsifies-dnn, `nets/layers.py`:
/// `clip(log_sigma2 − log W², to=8)` by `T.switch`). Their KL approximation is fitted on that
/// range; beyond it α's noise swamps or vanishes from the layer.
pub const LOG_ALPHA_CLIP: f64 = 8.0;

const K1: f64 = 0.63576;
const K2: f64 = 1.87320;
const K3: f64 = 1.48695;

/// log α clipped to the reference range.
fn clip_log_alpha(log_alpha: Tensor<3>) -> Tensor<3> {
    log_alpha.clamp(-LOG_ALPHA_CLIP, LOG_ALPHA_CLIP)
}

/// 1 where log α lies strictly inside the clip range (its gradient passes), 0 outside.
fn inside_clip(log_alpha: &Tensor<3>) -> Tensor<3> {
    log_alpha.clone().abs().lower_elem(LOG_ALPHA_CLIP).float()
}

/// Variational dropout's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Variational {
    /// Initial α.
    pub init_alpha: f64,
    /// Weight of the KL term (1/(τN)).
    pub kl_weight: f64,
}

/// The forward pass's h, ε, α, s = sqrt(α·v + 1e-8) and the clip mask.
struct Cache {
    h: Tensor<3>,
    eps: Tensor<3>,
    alpha: Tensor<3>,
    s: Tensor<3>,
    mask: Tensor<3>,
}

impl StochasticLayer for Variational {
    fn validate(&self) -> Result<(), MethodError> {
        MethodError::positive("variational init_alpha", self.init_alpha)?;
        MethodError::non_negative("variational kl_weight", self.kl_weight)
    }

    /// log α `[R, 1, 1]`.
    fn params(&self, _k: usize, _o: usize) -> Vec<ParamSlot> {
        vec![ParamSlot {
            dims: [1, 1],
            init: self.init_alpha.ln(),
        }]
    }

    fn rate_name(&self) -> Option<&'static str> {
        Some("learned_alpha")
    }

    /// α = exp(clip(log α)).
    fn rate(&self, log_alpha: f64) -> f64 {
        log_alpha.clamp(-LOG_ALPHA_CLIP, LOG_ALPHA_CLIP).exp()
    }

    /// On the pre-activations: `o` per point.
    fn noise_width(&self, _k: usize, o: usize) -> usize {
        o
    }

    /// Standard normals `[R, n, o]`.
    fn draw(&self, rng: &DeviceRng, counter: u64, n: usize, width: usize) -> Tensor<3> {
        rng.normal(counter, n, width)
    }

    fn forward(
        &self,
        h: Tensor<3>,
        w: &Tensor<3>,
        b: &Tensor<3>,
        params: &[Tensor<3>],
        noise: Tensor<3>,
    ) -> (Tensor<3>, LayerCache) {
        let log_alpha = params[0].clone();
        let mask = inside_clip(&log_alpha);
        let alpha = clip_log_alpha(log_alpha).exp();
        let mu = h.clone().matmul(w.clone());
        let v = h.clone().square().matmul(w.clone().square());
        let s = (v * alpha.clone()).add_scalar(1e-8).sqrt();
        let out = mu + b.clone() + s.clone() * noise.clone();
        let cache = Cache {
            h,
            eps: noise,
            alpha,
            s,
            mask,
        };
        (out, Box::new(cache))
    }

    fn backward(
        &self,
        cache: &LayerCache,
        w: &Tensor<3>,
        _params: &[Tensor<3>],
        delta: Tensor<3>,
    ) -> LastGrads {
        let c: &Cache = cache_of(cache, "variational dropout");
        let gb = delta.clone().sum_dim(1);
        // out = μ + b + s·ε, s = sqrt(α·v + 1e-8), μ = hW, v = h²W².
        let ds = delta.clone() * c.eps.clone();
        let dv = ds.clone() * c.alpha.clone() / c.s.clone().mul_scalar(2.0);
        // ∂/∂ log α = α·v/(2s)·ds = (s² − 1e-8)/(2s)·ds ≈ ½·s·ds summed, zero where log α
        // is clipped (`inside_clip`).
        let gparam = (ds * c.s.clone()).mul_scalar(0.5).sum_dim(2).sum_dim(1) * c.mask.clone();
        let h2 = c.h.clone().square();
        let gw = c.h.clone().swap_dims(1, 2).matmul(delta.clone())
            + h2.swap_dims(1, 2).matmul(dv.clone()) * w.clone().mul_scalar(2.0);
        let dh = delta.matmul(w.clone().swap_dims(1, 2))
            + dv.matmul(w.clone().square().swap_dims(1, 2)) * c.h.clone().mul_scalar(2.0);
        LastGrads {
            gw,
            gb,
            dh,
            gparams: vec![gparam],
        }
    }

    /// kl_weight·Σ_weights KL(α), KL ≈ k1 − k1·σ(k2 + k3 log α) + ½·log(1 + 1/α).
    fn regularizer(&self, w: &Tensor<3>, params: &[Tensor<3>]) -> Option<Tensor<3>> {
        let log_alpha = clip_log_alpha(params[0].clone());
        let count = (w.dims()[1] * w.dims()[2]) as f64;
        let u = sigmoid(log_alpha.clone().mul_scalar(K3).add_scalar(K2));
        let kl = u.mul_scalar(-K1).add_scalar(K1)
            + log_alpha.neg().exp().add_scalar(1.0).log().mul_scalar(0.5);
        Some(kl.mul_scalar(self.kl_weight * count))
    }

    fn regularize(&self, w: &Tensor<3>, params: &[Tensor<3>], grads: &mut LastGrads) {
        let raw = params[0].clone();
        let mask = inside_clip(&raw);
        let log_alpha = clip_log_alpha(raw);
        let count = (w.dims()[1] * w.dims()[2]) as f64;
        let u = sigmoid(log_alpha.clone().mul_scalar(K3).add_scalar(K2));
        // d KL/d log α = −k1·k3·u(1 − u) − ½·σ(−log α), zero where log α is clipped.
        let dkl = (u.clone() * u.neg().add_scalar(1.0) * (-K1 * K3)
            - sigmoid(log_alpha.neg()).mul_scalar(0.5))
            * mask;
        grads.gparams[0] = grads.gparams[0].clone() + dkl.mul_scalar(self.kl_weight * count);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    /// The device's normals (Box–Muller in f32).
    fn draw_host(&self, stream: &HostStream, counter: u64, out: &mut [f32]) {
        stream.normal(counter, out);
    }

    /// out = h·W + b + s·ε with s = √(α·(h²)·(W²) + 1e-8); the cache keeps s `[n, o]`.
    fn forward_host(
        &self,
        x: &HostLast<'_>,
        noise: &[f32],
        out: &mut [f32],
        cache: &mut HostCache,
    ) {
        let alpha = clipped(x.params[0]).exp();
        let (k, o) = (x.k, x.o);
        cache.aux.resize(noise.len(), 0.0);
        for (((vals, sv), eps), row) in (out.chunks_exact_mut(o))
            .zip(cache.aux.chunks_exact_mut(o))
            .zip(noise.chunks_exact(o))
            .zip(x.h.chunks_exact(k))
        {
            for j in 0..o {
                let (mut mu, mut v) = (0.0f32, 0.0f32);
                for (&h, wk) in row.iter().zip(x.w.chunks_exact(o)) {
                    mu += h * wk[j];
                    v += (h * h) * (wk[j] * wk[j]);
                }
                sv[j] = (v * alpha + 1e-8).sqrt();
                vals[j] = mu + x.b[j] + sv[j] * eps[j];
            }
        }
    }

    /// The tensor twin's gradients: with ds = δ·ε and dv = ds·α/(2s), ∂/∂W = hᵀδ +
    /// (h²)ᵀdv ⊙ 2W, δ at h = δ·Wᵀ + (dv·(W²)ᵀ) ⊙ 2h, ∂/∂ log α = Σ ½·s·ds (0 when clipped).
    fn backward_host(
        &self,
        x: &HostLast<'_>,
        noise: &[f32],
        cache: &HostCache,
        delta: &[f32],
        g: &mut HostGrads<'_>,
    ) {
        let raw = x.params[0];
        let alpha = clipped(raw).exp();
        let (k, o) = (x.k, x.o);
        g.gw.fill(0.0);
        g.gb.fill(0.0);
        let mut dalpha = Vec::with_capacity(delta.len());
        for ((((d, eps), sv), row), dh) in (delta.chunks_exact(o))
            .zip(noise.chunks_exact(o))
            .zip(cache.aux.chunks_exact(o))
            .zip(x.h.chunks_exact(k))
            .zip(g.dh.chunks_exact_mut(k))
        {
            dh.fill(0.0);
            for j in 0..o {
                let ds = d[j] * eps[j];
                let dv = ds * alpha / (sv[j] * 2.0);
                dalpha.push(ds * sv[j] * 0.5);
                g.gb[j] += d[j];
                for (((&h, wk), gk), dhk) in (row.iter().zip(x.w.chunks_exact(o)))
                    .zip(g.gw.chunks_exact_mut(o))
                    .zip(dh.iter_mut())
                {
                    gk[j] += h * d[j] + (h * h) * dv * (wk[j] * 2.0);
                    *dhk += d[j] * wk[j] + dv * (wk[j] * wk[j]) * (h * 2.0);
                }
            }
        }
        let inside = raw.abs() < LOG_ALPHA_CLIP as f32;
        g.gparams[0] = if inside {
            crate::cpu::simd::sum(&dalpha)
        } else {
            0.0
        };
    }

    fn regularizer_host(&self, w: &[f32], _k: usize, params: &[f32]) -> Option<f32> {
        let log_alpha = clipped(params[0]);
        let u = 1.0 / (1.0 + (-(log_alpha * K3 as f32 + K2 as f32)).exp());
        let kl = K1 as f32 - u * K1 as f32 + (1.0 + (-log_alpha).exp()).ln() * 0.5;
        Some(kl * (self.kl_weight * w.len() as f64) as f32)
    }

    fn regularize_host(
        &self,
        w: &[f32],
        _k: usize,
        params: &[f32],
        _gw: &mut [f32],
        gparams: &mut [f32],
    ) {
        let raw = params[0];
        if raw.abs() >= LOG_ALPHA_CLIP as f32 {
            return;
        }
        let u = 1.0 / (1.0 + (-(raw * K3 as f32 + K2 as f32)).exp());
        let s = 1.0 / (1.0 + raw.exp());
        let dkl = u * (1.0 - u) * (-K1 * K3) as f32 - s * 0.5;
        gparams[0] += dkl * (self.kl_weight * w.len() as f64) as f32;
    }
}

/// log α clipped to the reference range, in f32.
#[inline(always)]
fn clipped(log_alpha: f32) -> f32 {
    log_alpha.clamp(-LOG_ALPHA_CLIP as f32, LOG_ALPHA_CLIP as f32)
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};

    use super::*;

    fn scalar(t: Tensor<3>) -> f32 {
        t.into_data().iter::<f32>().next().expect("one value")
    }

    #[test]
    fn variational_log_alpha_is_clipped_with_no_gradient_outside() {
        // One replica, 2 points, 3 units, 1 output. Inside the clip range log α reaches the
        // noise and gets a gradient; at log α = 9 (> 8) the layer uses α = e⁸ and neither the
        // data term nor the KL moves log α.
        let dev = Device::flex();
        let t = |v: Vec<f32>, s: [usize; 3]| Tensor::<3>::from_data(TensorData::new(v, s), &dev);
        let h = t(vec![0.5, -1.0, 2.0, 1.5, 0.3, -0.7], [1, 2, 3]);
        let w = t(vec![0.4, -0.2, 0.9], [1, 3, 1]);
        let b = t(vec![0.1], [1, 1, 1]);
        let eps = t(vec![0.8, -1.3], [1, 2, 1]);
        let delta = t(vec![1.0, 0.5], [1, 2, 1]);
        let vd = Variational {
            init_alpha: 0.3,
            kl_weight: 0.01,
        };
        for (log_alpha, inside) in [(0.5f32, true), (9.0, false), (-9.0, false)] {
            let params = [t(vec![log_alpha], [1, 1, 1])];
            let (_, cache) = vd.forward(h.clone(), &w, &b, &params, eps.clone());
            let rate = f64::from(scalar(cache_of::<Cache>(&cache, "test").alpha.clone()));
            let expected = f64::from(log_alpha)
                .clamp(-LOG_ALPHA_CLIP, LOG_ALPHA_CLIP)
                .exp();
            assert!(
                (rate / expected - 1.0).abs() < 1e-5,
                "{log_alpha}: α {rate}"
            );
            let mut g = vd.backward(&cache, &w, &params, delta.clone());
            let data = scalar(g.gparams[0].clone());
            vd.regularize(&w, &params, &mut g);
            let total = scalar(g.gparams[0].clone());
            if inside {
                assert!(data != 0.0 && total != data, "{log_alpha}: {data} {total}");
            } else {
                assert_eq!((data, total), (0.0, 0.0), "{log_alpha}");
            }
        }
        assert_eq!(vd.rate(9.0), LOG_ALPHA_CLIP.exp());
    }
}
