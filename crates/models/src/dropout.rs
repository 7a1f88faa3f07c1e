//! Stochastic layers on the input of the network's last linear layer (the output of the
//! 32-unit layer in the paper's 128-64-32 network: "dropout on the next-to-last layer"):
//! Bernoulli (MC) dropout, concrete dropout and variational (Gaussian) dropout, with their
//! forward passes, hand-written backward passes and regularisers.
//!
//! Randomness is an explicit input: every step and every prediction pass draws its noise on
//! the host from the replica's own generator and uploads it, so the layer cannot silently
//! switch itself off and a replica's noise does not depend on the other replicas.

use burn::tensor::activation::sigmoid;
use burn::tensor::{Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use uqbench_anchor::Rng;

use crate::engine::device_rng::DeviceRng;
use uqbench_core::MethodError;

/// The stochastic layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Dropout {
    /// MC dropout [Gal & Ghahramani 2016]: each unit kept with probability 1 − p and scaled
    /// by 1/(1 − p), in training and at prediction.
    Bernoulli {
        /// Drop rate p ∈ (0, 1).
        p: f64,
    },
    /// Concrete dropout [Gal, Hron, Kendall 2017]: p = sigmoid(θ) learned per replica through
    /// the relaxed mask z = 1 − sigmoid((θ + log u − log(1 − u))/t); units scaled by
    /// 1/(1 − p); regulariser weight_reg·‖W‖²/(1 − p) + dropout_reg·K·(p log p + (1−p) log(1−p)).
    Concrete {
        /// Initial p.
        init_p: f64,
        /// Temperature t of the relaxation (0.1).
        temperature: f64,
        /// l²/(2τN) (see `dropout_method::Tau`).
        weight_reg: f64,
        /// 1/(τN).
        dropout_reg: f64,
    },
    /// Variational dropout [Kingma, Salimans, Welling 2015]: multiplicative noise N(1, α) on
    /// the units with α learned per replica, sampled through the local reparameterisation
    /// (noise on the pre-activations: mean h·W, variance α·(h²)·(W²)); regulariser
    /// kl_weight·Σ_weights KL(α) with Molchanov et al.'s (2017) approximation of the KL.
    Variational {
        /// Initial α.
        init_alpha: f64,
        /// Weight of the KL term (1/(τN)).
        kl_weight: f64,
    },
}

/// Molchanov et al. (2017), eq. 14: −KL ≈ k1·σ(k2 + k3·log α) − ½·log(1 + 1/α) − k1.
/// Variational dropout's log α is clipped to [−LOG_ALPHA_CLIP, LOG_ALPHA_CLIP] wherever it is
/// used (the noise, the KL), with zero gradient outside, as in Molchanov et al.'s reference
/// implementation (bayesgroup/variational-dropout-sparsifies-dnn, `nets/layers.py`:
/// `clip(log_sigma2 − log W², to=8)` by `T.switch`). Their KL approximation is fitted on that
/// range; beyond it α's noise swamps or vanishes from the layer.
pub const LOG_ALPHA_CLIP: f64 = 8.0;

/// log α clipped to the reference range.
fn clip_log_alpha(log_alpha: Tensor<3>) -> Tensor<3> {
    log_alpha.clamp(-LOG_ALPHA_CLIP, LOG_ALPHA_CLIP)
}

/// 1 where log α lies strictly inside the clip range (its gradient passes), 0 outside.
fn inside_clip(log_alpha: &Tensor<3>) -> Tensor<3> {
    log_alpha.clone().abs().lower_elem(LOG_ALPHA_CLIP).float()
}

const K1: f64 = 0.63576;
const K2: f64 = 1.87320;
const K3: f64 = 1.48695;

/// Lower clamp of the concrete relaxation's uniform noise (the reference implementation's
/// 1e-7), so that log u and log(1 − u) stay finite.
const U_EPS: f64 = 1e-7;

impl Dropout {
    /// Checks the settings once, up front.
    pub fn validate(&self) -> Result<(), MethodError> {
        let in_unit = |name: &str, v: f64| {
            if v > 0.0 && v < 1.0 {
                Ok(())
            } else {
                Err(MethodError::invalid(
                    name,
                    v,
                    "a rate strictly between 0 and 1",
                ))
            }
        };
        let non_negative = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                Err(MethodError::invalid(name, v, "a finite number ≥ 0"))
            }
        };
        match self {
            Dropout::Bernoulli { p } => in_unit("dropout p", *p),
            Dropout::Concrete {
                init_p,
                temperature,
                weight_reg,
                dropout_reg,
            } => {
                in_unit("concrete init_p", *init_p)?;
                if !(temperature.is_finite() && *temperature > 0.0) {
                    return Err(MethodError::invalid(
                        "concrete temperature",
                        temperature,
                        "a positive number",
                    ));
                }
                non_negative("concrete weight_reg", *weight_reg)?;
                non_negative("concrete dropout_reg", *dropout_reg)
            }
            Dropout::Variational {
                init_alpha,
                kl_weight,
            } => {
                if !(init_alpha.is_finite() && *init_alpha > 0.0) {
                    return Err(MethodError::invalid(
                        "variational init_alpha",
                        init_alpha,
                        "a positive number",
                    ));
                }
                non_negative("variational kl_weight", *kl_weight)
            }
        }
    }

    /// The learnable per-replica scalar's initial value (θ = logit p, or log α).
    pub(crate) fn initial_param(&self) -> Option<f64> {
        match self {
            Dropout::Bernoulli { .. } => None,
            Dropout::Concrete { init_p, .. } => Some((init_p / (1.0 - init_p)).ln()),
            Dropout::Variational { init_alpha, .. } => Some(init_alpha.ln()),
        }
    }

    /// The reported rate from the learnable scalar: p = sigmoid(θ), or α = exp(log α).
    pub(crate) fn rate_of(&self, param: f64) -> f64 {
        match self {
            Dropout::Bernoulli { p } => *p,
            Dropout::Concrete { .. } => 1.0 / (1.0 + (-param).exp()),
            Dropout::Variational { .. } => param.clamp(-LOG_ALPHA_CLIP, LOG_ALPHA_CLIP).exp(),
        }
    }

    /// The name of the learned rate in results.
    pub fn rate_name(&self) -> Option<&'static str> {
        match self {
            Dropout::Bernoulli { .. } => None,
            Dropout::Concrete { .. } => Some("learned_p"),
            Dropout::Variational { .. } => Some("learned_alpha"),
        }
    }

    /// Draws one pass's noise for `rngs.len()` replicas, `n` points, `k` units feeding `o`
    /// outputs: a scaled keep-mask `[R, n, k]` (Bernoulli), uniforms `[R, n, k]` (concrete)
    /// or standard normals `[R, n, o]` (variational, on the pre-activations).
    pub fn draw(
        &self,
        rngs: &mut [Rng],
        n: usize,
        k: usize,
        o: usize,
        device: &Device,
    ) -> Tensor<3> {
        let r = rngs.len();
        match self {
            Dropout::Bernoulli { p } => {
                let keep = (1.0 / (1.0 - p)) as f32;
                let mut v = Vec::with_capacity(r * n * k);
                for g in rngs.iter_mut() {
                    for _ in 0..n * k {
                        v.push(if g.uniform() >= *p { keep } else { 0.0 });
                    }
                }
                Tensor::from_data(TensorData::new(v, [r, n, k]), device)
            }
            Dropout::Concrete { .. } => {
                let mut v = Vec::with_capacity(r * n * k);
                for g in rngs.iter_mut() {
                    for _ in 0..n * k {
                        v.push(g.uniform().clamp(U_EPS, 1.0 - U_EPS) as f32);
                    }
                }
                Tensor::from_data(TensorData::new(v, [r, n, k]), device)
            }
            Dropout::Variational { .. } => {
                let mut v = Vec::with_capacity(r * n * o);
                for g in rngs.iter_mut() {
                    for _ in 0..n * o {
                        v.push(g.normal() as f32);
                    }
                }
                Tensor::from_data(TensorData::new(v, [r, n, o]), device)
            }
        }
    }

    /// Like [`Dropout::draw`], computed on the device from counter-based streams: draw
    /// `counter` of the replicas' streams `rng` (what the engine uses; no host work).
    pub(crate) fn draw_device(
        &self,
        rng: &DeviceRng,
        counter: u64,
        n: usize,
        k: usize,
        o: usize,
    ) -> Tensor<3> {
        match self {
            Dropout::Bernoulli { p } => rng
                .uniform(counter, n, k)
                .greater_equal_elem(*p)
                .float()
                .mul_scalar(1.0 / (1.0 - p)),
            Dropout::Concrete { .. } => rng.uniform(counter, n, k).clamp(U_EPS, 1.0 - U_EPS),
            Dropout::Variational { .. } => rng.normal(counter, n, o),
        }
    }
}

/// What the backward pass of the last layer needs from its forward pass.
pub(crate) struct LastCache {
    /// The units entering the layer, h `[R, n, k]`.
    h: Tensor<3>,
    /// The units after the noise, h̃ (what multiplies W), when the noise is on the units.
    ht: Option<Tensor<3>>,
    /// Bernoulli: the mask; concrete: z·/(1 − p); variational: 1 where log α lies inside the
    /// clip range, 0 where it is clipped (`[R, 1, 1]`: the gradient's mask).
    factor: Option<Tensor<3>>,
    /// Concrete: z; variational: the normals ε.
    noise: Option<Tensor<3>>,
    /// Concrete: p `[R, 1, 1]`; variational: α `[R, 1, 1]`.
    rate: Option<Tensor<3>>,
    /// Variational: s = sqrt(α·v + 1e-8) `[R, n, o]`.
    s: Option<Tensor<3>>,
}

/// The stochastic last layer's forward pass: out = noisy(h)·W + b.
///
/// # Shapes
/// - `h`: `[R, n, k]`, `w`: `[R, k, o]`, `b`: `[R, 1, o]`, `param`: `[R, 1, 1]`,
///   `noise`: from [`Dropout::draw`] → `[R, n, o]`
pub(crate) fn forward_last(
    dropout: &Dropout,
    h: Tensor<3>,
    w: &Tensor<3>,
    b: &Tensor<3>,
    param: Option<&Tensor<3>>,
    noise: Tensor<3>,
) -> (Tensor<3>, LastCache) {
    match dropout {
        Dropout::Bernoulli { .. } => {
            let ht = h.clone() * noise.clone();
            let out = ht.clone().matmul(w.clone()) + b.clone();
            (
                out,
                LastCache {
                    h,
                    ht: Some(ht),
                    factor: Some(noise),
                    noise: None,
                    rate: None,
                    s: None,
                },
            )
        }
        Dropout::Concrete { temperature, .. } => {
            let theta = param.expect("concrete dropout has θ").clone();
            let p = sigmoid(theta.clone());
            let a = (noise.clone().log() - noise.neg().add_scalar(1.0).log() + theta)
                .div_scalar(*temperature);
            let z = sigmoid(a).neg().add_scalar(1.0);
            let factor = z.clone() / p.clone().neg().add_scalar(1.0);
            let ht = h.clone() * factor.clone();
            let out = ht.clone().matmul(w.clone()) + b.clone();
            (
                out,
                LastCache {
                    h,
                    ht: Some(ht),
                    factor: Some(factor),
                    noise: Some(z),
                    rate: Some(p),
                    s: None,
                },
            )
        }
        Dropout::Variational { .. } => {
            let log_alpha = param.expect("variational dropout has log α").clone();
            let mask = inside_clip(&log_alpha);
            let alpha = clip_log_alpha(log_alpha).exp();
            let mu = h.clone().matmul(w.clone());
            let v = h.clone().square().matmul(w.clone().square());
            let s = (v * alpha.clone()).add_scalar(1e-8).sqrt();
            let out = mu + b.clone() + s.clone() * noise.clone();
            (
                out,
                LastCache {
                    h,
                    ht: None,
                    factor: Some(mask),
                    noise: Some(noise),
                    rate: Some(alpha),
                    s: Some(s),
                },
            )
        }
    }
}

/// Gradients of the last layer: (dW, db, δ at h, d param).
pub(crate) struct LastGrads {
    pub gw: Tensor<3>,
    pub gb: Tensor<3>,
    pub dh: Tensor<3>,
    pub gparam: Option<Tensor<3>>,
}

/// The stochastic last layer's backward pass from δ at its output `[R, n, o]`.
pub(crate) fn backward_last(
    dropout: &Dropout,
    cache: &LastCache,
    w: &Tensor<3>,
    delta: Tensor<3>,
) -> LastGrads {
    let gb = delta.clone().sum_dim(1);
    match dropout {
        Dropout::Bernoulli { .. } | Dropout::Concrete { .. } => {
            let ht = cache.ht.as_ref().expect("units are noisy");
            let gw = ht.clone().swap_dims(1, 2).matmul(delta.clone());
            let dht = delta.matmul(w.clone().swap_dims(1, 2));
            let factor = cache.factor.as_ref().expect("factor");
            let dh = dht.clone() * factor.clone();
            let gparam = match dropout {
                Dropout::Concrete { temperature, .. } => {
                    // d h̃/dθ = h·s·z·(p − (1 − z)/t) with s = 1/(1 − p), i.e. h̃·(p − (1 − z)/t).
                    let z = cache.noise.as_ref().expect("z");
                    let p = cache.rate.as_ref().expect("p");
                    let dz = z.clone().neg().add_scalar(1.0).div_scalar(*temperature);
                    let local = ht.clone() * (dz.neg() + p.clone());
                    Some((dht * local).sum_dim(2).sum_dim(1))
                }
                _ => None,
            };
            LastGrads { gw, gb, dh, gparam }
        }
        Dropout::Variational { .. } => {
            let (h, eps, alpha, s) = (
                &cache.h,
                cache.noise.as_ref().expect("ε"),
                cache.rate.as_ref().expect("α"),
                cache.s.as_ref().expect("s"),
            );
            // out = μ + b + s·ε, s = sqrt(α·v + 1e-8), μ = hW, v = h²W².
            let ds = delta.clone() * eps.clone();
            let dv = ds.clone() * alpha.clone() / s.clone().mul_scalar(2.0);
            // ∂/∂ log α (zero where log α is clipped; see `inside_clip`): α·v/(2s)·ds·… summed,
            // times the clip mask below.
            let gparam = (ds * s.clone()).mul_scalar(0.5).sum_dim(2).sum_dim(1)
                * cache.factor.clone().expect("the clip mask");
            let h2 = h.clone().square();
            let gw = h.clone().swap_dims(1, 2).matmul(delta.clone())
                + h2.swap_dims(1, 2).matmul(dv.clone()) * w.clone().mul_scalar(2.0);
            let dh = delta.matmul(w.clone().swap_dims(1, 2))
                + dv.matmul(w.clone().square().swap_dims(1, 2)) * h.clone().mul_scalar(2.0);
            LastGrads {
                gw,
                gb,
                dh,
                gparam: Some(gparam),
            }
        }
    }
}

/// The regulariser (beyond the global L2) per replica `[R, 1, 1]`, or `None` for Bernoulli
/// dropout, which has none:
/// - concrete: weight_reg·‖W‖²/(1 − p) + dropout_reg·K·(p log p + (1 − p) log(1 − p));
/// - variational: kl_weight·Σ_weights KL(α), KL ≈ k1 − k1·σ(k2 + k3 log α) + ½·log(1 + 1/α).
pub(crate) fn regularizer_value(
    dropout: &Dropout,
    w: &Tensor<3>,
    param: Option<&Tensor<3>>,
) -> Option<Tensor<3>> {
    match dropout {
        Dropout::Bernoulli { .. } => None,
        Dropout::Concrete {
            weight_reg,
            dropout_reg,
            ..
        } => {
            let p = sigmoid(param.expect("θ").clone());
            let keep = p.clone().neg().add_scalar(1.0);
            let k = w.dims()[1] as f64;
            let sq = w.clone().square().sum_dim(2).sum_dim(1);
            let entropy = p.clone() * p.log() + keep.clone() * keep.clone().log();
            Some(sq.mul_scalar(*weight_reg) / keep + entropy.mul_scalar(dropout_reg * k))
        }
        Dropout::Variational { kl_weight, .. } => {
            let log_alpha = clip_log_alpha(param.expect("log α").clone());
            let count = (w.dims()[1] * w.dims()[2]) as f64;
            let u = sigmoid(log_alpha.clone().mul_scalar(K3).add_scalar(K2));
            let kl = u.mul_scalar(-K1).add_scalar(K1)
                + log_alpha.neg().exp().add_scalar(1.0).log().mul_scalar(0.5);
            Some(kl.mul_scalar(kl_weight * count))
        }
    }
}

/// Adds the regulariser's gradients (beyond the global L2) to the last layer's weight
/// gradient and to the learnable scalar's gradient (see [`regularizer_value`]).
pub(crate) fn regularize(
    dropout: &Dropout,
    w: &Tensor<3>,
    param: Option<&Tensor<3>>,
    grads: &mut LastGrads,
) {
    match dropout {
        Dropout::Bernoulli { .. } => {}
        Dropout::Concrete {
            weight_reg,
            dropout_reg,
            ..
        } => {
            let theta = param.expect("θ").clone();
            let p = sigmoid(theta.clone());
            let keep = p.clone().neg().add_scalar(1.0);
            let k = w.dims()[1] as f64;
            let sq = w.clone().square().sum_dim(2).sum_dim(1);
            // d/dW: 2·wr·W/(1 − p); d/dθ: wr·‖W‖²·p/(1 − p) + dr·K·θ·p(1 − p), since
            // d/dθ [p log p + (1 − p) log(1 − p)] = p(1 − p)·log(p/(1 − p)) = p(1 − p)·θ.
            grads.gw = grads.gw.clone() + w.clone().mul_scalar(2.0 * weight_reg) / keep.clone();
            let dtheta = sq.mul_scalar(*weight_reg) * p.clone() / keep.clone()
                + theta * p * keep * (dropout_reg * k);
            grads.gparam = Some(grads.gparam.take().expect("θ gradient") + dtheta);
        }
        Dropout::Variational { kl_weight, .. } => {
            let raw = param.expect("log α").clone();
            let mask = inside_clip(&raw);
            let log_alpha = clip_log_alpha(raw);
            let count = (w.dims()[1] * w.dims()[2]) as f64;
            let u = sigmoid(log_alpha.clone().mul_scalar(K3).add_scalar(K2));
            // d KL/d log α = −k1·k3·u(1 − u) − ½·σ(−log α), zero where log α is clipped.
            let dkl = (u.clone() * u.neg().add_scalar(1.0) * (-K1 * K3)
                - sigmoid(log_alpha.neg()).mul_scalar(0.5))
                * mask;
            grads.gparam = Some(
                grads.gparam.take().expect("log α gradient") + dkl.mul_scalar(kl_weight * count),
            );
        }
    }
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
        let vd = Dropout::Variational {
            init_alpha: 0.3,
            kl_weight: 0.01,
        };
        for (log_alpha, inside) in [(0.5f32, true), (9.0, false), (-9.0, false)] {
            let param = t(vec![log_alpha], [1, 1, 1]);
            let (_, cache) = forward_last(&vd, h.clone(), &w, &b, Some(&param), eps.clone());
            let rate = f64::from(scalar(cache.rate.clone().expect("α")));
            let expected = f64::from(log_alpha)
                .clamp(-LOG_ALPHA_CLIP, LOG_ALPHA_CLIP)
                .exp();
            assert!(
                (rate / expected - 1.0).abs() < 1e-5,
                "{log_alpha}: α {rate}"
            );
            let mut g = backward_last(&vd, &cache, &w, delta.clone());
            let data = scalar(g.gparam.clone().expect("∂/∂ log α"));
            regularize(&vd, &w, Some(&param), &mut g);
            let total = scalar(g.gparam.expect("∂/∂ log α"));
            if inside {
                assert!(data != 0.0 && total != data, "{log_alpha}: {data} {total}");
            } else {
                assert_eq!((data, total), (0.0, 0.0), "{log_alpha}");
            }
        }
        assert_eq!(vd.rate_of(9.0), LOG_ALPHA_CLIP.exp());
    }
}
