//! Layers as burn modules, batched over replicas: the building blocks of a user's network on
//! the autodiff route (`autodiff::McdNet` is built from them), each with its forward pass and
//! its hand-written backward pass in one place. The built-in network (`engine/network.rs`)
//! uses the same backward equations ([`linear_backward`]) with its parameters held in the
//! trainer's flat slot list, so that Adam's fused in-place kernels can own them.
//!
//! Every layer's parameters carry a leading replica dimension R: replica r's weights are
//! `weight[r]`, and no operation mixes replicas (batched matmul, per-replica sums).

use std::sync::Arc;

use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor, TensorData};

use crate::mlp::{xavier_init, MlpShape};
use crate::stochastic::StochasticLayer;

/// The shape of a [`BatchedLinear`] layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchedLinearConfig {
    /// Input width.
    pub d_in: usize,
    /// Output width.
    pub d_out: usize,
}

impl BatchedLinearConfig {
    /// One layer per seed, Xavier (Glorot) uniform weights drawn from the replica's own seed
    /// (as [`xavier_init`] for a one-layer network) and zero biases.
    pub fn init(&self, seeds: &[u64], device: &Device) -> BatchedLinear {
        let shape = MlpShape {
            d_in: self.d_in,
            hidden: Vec::new(),
            d_out: self.d_out,
            negative_slope: 0.0,
        };
        let host = xavier_init(&shape, seeds);
        let (w, b) = host.layers.into_iter().next().expect("one layer");
        self.from_host(w, b, seeds.len(), device)
    }

    /// The layer for R replicas from host values: weights `[R, in, out]` and biases
    /// `[R, 1, out]`, row-major.
    pub fn from_host(&self, w: Vec<f32>, b: Vec<f32>, r: usize, device: &Device) -> BatchedLinear {
        BatchedLinear {
            weight: Param::from_data(TensorData::new(w, [r, self.d_in, self.d_out]), device),
            bias: Param::from_data(TensorData::new(b, [r, 1, self.d_out]), device),
        }
    }
}

/// R replicas of a linear layer z = x·W + b.
#[derive(Module, Debug)]
pub struct BatchedLinear {
    /// Weights `[R, in, out]`.
    pub weight: Param<Tensor<3>>,
    /// Biases `[R, 1, out]`.
    pub bias: Param<Tensor<3>>,
}

/// Gradients of a [`BatchedLinear`] layer.
#[derive(Debug, Clone)]
pub struct LinearGrads {
    /// ∂loss/∂W `[R, in, out]`.
    pub weight: Tensor<3>,
    /// ∂loss/∂b `[R, 1, out]`.
    pub bias: Tensor<3>,
    /// ∂loss/∂x `[R, n, in]`, when asked for.
    pub input: Option<Tensor<3>>,
}

impl BatchedLinear {
    /// # Shapes
    /// - `x`: `[1 or R, n, in]` → `[R, n, out]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        x.matmul(self.weight.val()) + self.bias.val()
    }

    /// The hand-written backward pass, see [`linear_backward`].
    pub fn backward(&self, input: &Tensor<3>, delta: Tensor<3>, want_input: bool) -> LinearGrads {
        linear_backward(input, delta, &self.weight.val(), want_input)
    }
}

/// The batched product a·b (`[B or 1, m, k]·[B, k, n]`, a batch of one broadcasting). With
/// k = 1 it is an outer product, each entry one multiplication, which a broadcast
/// multiplication gives without a matrix product's call and packing (the same values: a
/// 1-D problem's first layer, the one-output last layer's input gradient).
pub fn product(a: Tensor<3>, b: Tensor<3>) -> Tensor<3> {
    match a.dims()[2] {
        1 => a * b,
        _ => a.matmul(b),
    }
}

/// Backward pass of z = x·W + b per replica, from δ = ∂loss/∂z:
/// ∂loss/∂W = xᵀ·δ, ∂loss/∂b = Σ_n δ, ∂loss/∂x = δ·Wᵀ. The L2 term's λ·W is not included
/// (Adam's step adds it to the weights only).
///
/// # Shapes
/// - `input`: `[1 or R, n, in]` (a shared input broadcasts), `delta`: `[R, n, out]`,
///   `weight`: `[R, in, out]`
pub fn linear_backward(
    input: &Tensor<3>,
    delta: Tensor<3>,
    weight: &Tensor<3>,
    want_input: bool,
) -> LinearGrads {
    let grad_w = input.clone().swap_dims(1, 2).matmul(delta.clone());
    let grad_b = delta.clone().sum_dim(1);
    let grad_x = want_input.then(|| product(delta, weight.clone().swap_dims(1, 2)));
    LinearGrads {
        weight: grad_w,
        bias: grad_b,
        input: grad_x,
    }
}

/// The leaky ReLU φ(z) = z for z > 0, a·z otherwise; no parameters.
#[derive(Module, Debug)]
pub struct LeakyRelu {
    /// The slope a for z ≤ 0 (a constant, not a parameter).
    #[module(skip)]
    pub slope: f64,
}

impl LeakyRelu {
    /// # Shapes
    /// - `z`: any → same
    pub fn forward(&self, z: Tensor<3>) -> Tensor<3> {
        burn::tensor::activation::leaky_relu(z, self.slope)
    }

    /// δ at the input from δ at the output: δ ⊙ φ'(z), φ'(z) = 1 for z > 0 and a otherwise.
    /// (φ(z) > 0 exactly where z > 0, so the layer's output can stand in for z.)
    pub fn backward(&self, z: &Tensor<3>, delta: Tensor<3>) -> Tensor<3> {
        let positive = z.clone().greater_elem(0.0).float();
        let factor = positive
            .clone()
            .mul_scalar(1.0 - self.slope)
            .add_scalar(self.slope);
        delta * factor
    }
}

/// The stochastic last layer as a burn module: a [`BatchedLinear`] with a
/// [`StochasticLayer`] in front (Bernoulli, concrete or variational dropout, or a layer of
/// your own), and the layer's learnable parameters as burn parameters (concrete dropout's
/// θ = logit p, variational dropout's log α, `[R, 1, 1]` each; none for Bernoulli). The noise
/// is an explicit input ([`StochasticLayer::draw`]), so the layer is stochastic at prediction
/// by construction. Its forward pass, hand-written backward pass and regulariser are the
/// layer's own (the engine's); burn autodiff through [`Self::forward`] and
/// [`Self::regularizer`] gives the same gradients (tested below for every built-in layer).
#[derive(Module, Debug)]
pub struct StochasticLinear {
    /// The linear layer the noisy units feed.
    pub linear: BatchedLinear,
    /// The layer's learnable parameters, one per [`crate::stochastic::ParamSlot`].
    pub params: Vec<Param<Tensor<3>>>,
    /// Which layer, with its constants (a setting, not a parameter).
    #[module(skip)]
    pub kind: Arc<dyn StochasticLayer>,
}

/// Gradients of a [`StochasticLinear`] layer (data term plus regulariser).
#[derive(Debug, Clone)]
pub struct StochasticGrads {
    /// ∂/∂W, ∂/∂b and ∂/∂h.
    pub linear: LinearGrads,
    /// One per parameter slot.
    pub params: Vec<Tensor<3>>,
}

impl StochasticLinear {
    /// The layer for R replicas: `linear`, and the parameters at the layer's initial values.
    pub fn new(
        kind: Arc<dyn StochasticLayer>,
        linear: BatchedLinear,
        device: &Device,
    ) -> StochasticLinear {
        let [r, k, o] = linear.weight.val().dims();
        let params = kind
            .params(k, o)
            .iter()
            .map(|s| {
                Param::from_tensor(Tensor::<3>::full([r, s.dims[0], s.dims[1]], s.init, device))
            })
            .collect();
        StochasticLinear {
            linear,
            params,
            kind,
        }
    }

    fn values(&self) -> Vec<Tensor<3>> {
        self.params.iter().map(|p| p.val()).collect()
    }

    /// out = noisy(h)·W + b; without noise, the expectation h·W + b.
    ///
    /// # Shapes
    /// - `h`: `[R, n, k]`, `noise`: from [`StochasticLayer::draw`] → `[R, n, o]`
    pub fn forward(&self, h: Tensor<3>, noise: Option<Tensor<3>>) -> Tensor<3> {
        match noise {
            Some(noise) => {
                let (w, b) = (self.linear.weight.val(), self.linear.bias.val());
                self.kind.forward(h, &w, &b, &self.values(), noise).0
            }
            None => self.linear.forward(h),
        }
    }

    /// The regulariser per replica `[R, 1, 1]` beyond the global L2, if the layer has one.
    pub fn regularizer(&self) -> Option<Tensor<3>> {
        self.kind
            .regularizer(&self.linear.weight.val(), &self.values())
    }

    /// The hand-written backward pass from δ at the output, for the pass with `noise`,
    /// including the regulariser's gradients.
    pub fn backward(&self, h: &Tensor<3>, noise: Tensor<3>, delta: Tensor<3>) -> StochasticGrads {
        let (w, b) = (self.linear.weight.val(), self.linear.bias.val());
        let params = self.values();
        let (_, cache) = self.kind.forward(h.clone(), &w, &b, &params, noise);
        let mut g = self.kind.backward(&cache, &w, &params, delta);
        self.kind.regularize(&w, &params, &mut g);
        StochasticGrads {
            linear: LinearGrads {
                weight: g.gw,
                bias: g.gb,
                input: Some(g.dh),
            },
            params: g.gparams,
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Device;

    use super::*;
    use crate::device_rng::DeviceRng;
    use crate::stochastic::{Bernoulli, Concrete, Variational};

    fn host(t: Tensor<3>) -> Vec<f32> {
        t.into_data().try_into_vec_as::<f32>().unwrap()
    }

    #[test]
    fn hand_written_backward_matches_autodiff() {
        // A linear layer followed by a leaky ReLU, loss = Σ (φ(xW + b) ⊙ c) for fixed c: the
        // hand-written gradients must equal burn's autodiff to f32 rounding.
        let plain = Device::flex();
        let device = plain.clone().autodiff();
        let config = BatchedLinearConfig { d_in: 3, d_out: 4 };
        let layer = config.init(&[5, 6], &device);
        let act = LeakyRelu { slope: 0.1 };
        let x_values: Vec<f32> = (0..2 * 5 * 3)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 3.0)
            .collect();
        let c_values: Vec<f32> = (0..2 * 5 * 4)
            .map(|i| ((i * 3 % 7) as f32 - 3.0) / 2.0)
            .collect();
        let x = Tensor::<3>::from_data(TensorData::new(x_values.clone(), [2, 5, 3]), &device)
            .require_grad();
        let c = Tensor::<3>::from_data(TensorData::new(c_values.clone(), [2, 5, 4]), &device);
        let z = layer.forward(x.clone());
        let loss = (act.forward(z.clone()) * c).sum();
        let grads = loss.backward();
        let auto_w = host(layer.weight.val().grad(&grads).unwrap());
        let auto_b = host(layer.bias.val().grad(&grads).unwrap());
        let auto_x = host(x.grad(&grads).unwrap());

        let xp = Tensor::<3>::from_data(TensorData::new(x_values, [2, 5, 3]), &plain);
        let cp = Tensor::<3>::from_data(TensorData::new(c_values, [2, 5, 4]), &plain);
        let lin = config.from_host(
            host(layer.weight.val().inner()),
            host(layer.bias.val().inner()),
            2,
            &plain,
        );
        let zp = lin.forward(xp.clone());
        let delta = act.backward(&zp, cp);
        let g = lin.backward(&xp, delta, true);
        for (name, hand, auto) in [
            ("weight", host(g.weight), auto_w),
            ("bias", host(g.bias), auto_b),
            ("input", host(g.input.unwrap()), auto_x),
        ] {
            assert_eq!(hand.len(), auto.len(), "{name}");
            for (a, b) in hand.iter().zip(&auto) {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{name}: {a} vs {b}"
                );
            }
        }
    }

    #[test]
    fn stochastic_layers_backward_matches_autodiff() {
        // loss = Σ (out ⊙ c) + Σ_r regulariser_r for fixed noise: the hand-written gradients
        // of W, b, h and the rate must equal burn's autodiff to f32 rounding, for Bernoulli,
        // concrete and variational dropout.
        let plain = Device::flex();
        let device = plain.clone().autodiff();
        let kinds: [Arc<dyn StochasticLayer>; 3] = [
            Arc::new(Bernoulli { p: 0.3 }),
            Arc::new(Concrete {
                init_p: 0.2,
                temperature: 0.1,
                weight_reg: 0.05,
                dropout_reg: 0.4,
            }),
            Arc::new(Variational {
                init_alpha: 0.3,
                kl_weight: 0.2,
            }),
        ];
        let (r, n, k, o) = (2, 5, 3, 2);
        for kind in kinds {
            let width = kind.noise_width(k, o);
            let streams = DeviceRng::new(&[1, 2], &[0, 1], 1, &plain);
            let noise = host(kind.draw(&streams, 0, n, width));
            let h_values: Vec<f32> = (0..r * n * k)
                .map(|i| ((i * 5 % 9) as f32 - 4.0) / 3.0)
                .collect();
            let c_values: Vec<f32> = (0..r * n * o)
                .map(|i| ((i * 3 % 7) as f32 - 3.0) / 2.0)
                .collect();
            let make = |dev: &Device| {
                let linear = BatchedLinearConfig { d_in: k, d_out: o }.init(&[3, 4], dev);
                StochasticLinear::new(kind.clone(), linear, dev)
            };
            let layer = make(&device);
            let h = Tensor::<3>::from_data(TensorData::new(h_values.clone(), [r, n, k]), &device)
                .require_grad();
            let c = Tensor::<3>::from_data(TensorData::new(c_values.clone(), [r, n, o]), &device);
            let eps =
                Tensor::<3>::from_data(TensorData::new(noise.clone(), [r, n, width]), &device);
            let mut loss = (layer.forward(h.clone(), Some(eps)) * c).sum();
            if let Some(reg) = layer.regularizer() {
                loss = loss + reg.sum();
            }
            let grads = loss.backward();
            let auto = [
                host(layer.linear.weight.val().grad(&grads).unwrap()),
                host(layer.linear.bias.val().grad(&grads).unwrap()),
                host(h.grad(&grads).unwrap()),
            ];
            let auto_params: Vec<Vec<f32>> = (layer.params.iter())
                .map(|p| host(p.val().grad(&grads).unwrap()))
                .collect();

            let hand_layer = make(&plain);
            let hp = Tensor::<3>::from_data(TensorData::new(h_values, [r, n, k]), &plain);
            let cp = Tensor::<3>::from_data(TensorData::new(c_values, [r, n, o]), &plain);
            let ep = Tensor::<3>::from_data(TensorData::new(noise, [r, n, width]), &plain);
            let g = hand_layer.backward(&hp, ep, cp);
            let hand = [
                host(g.linear.weight),
                host(g.linear.bias),
                host(g.linear.input.unwrap()),
            ];
            let close = |what: &str, a: &[f32], b: &[f32]| {
                assert_eq!(a.len(), b.len(), "{kind:?} {what}");
                for (x, y) in a.iter().zip(b) {
                    assert!(
                        (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                        "{kind:?} {what}: {x} vs {y}"
                    );
                }
            };
            for ((name, a), b) in ["weight", "bias", "input"].iter().zip(&hand).zip(&auto) {
                close(name, a, b);
            }
            assert_eq!(auto_params.len(), g.params.len(), "{kind:?}");
            for (a, b) in g.params.into_iter().zip(&auto_params) {
                close("layer parameter", &host(a), b);
            }
        }
    }
}
