//! The built-in network: a stack of batched linear layers with leaky-ReLU activations, an
//! optional stochastic layer in front of the last linear layer, and a [`Head`]. Forward and
//! backward are written out here, in one place.
//!
//! Per replica r, layer l computes z_l = h_{l−1}·W_l + b_l (`[n, in]·[in, out]`) and
//! h_l = φ(z_l) with φ the leaky ReLU (slope a), except the last layer, which is linear. With
//! δ_L = ∂loss/∂z_L from the head, the backward recurrence is
//!
//! - ∂loss/∂W_l = h_{l−1}ᵀ·δ_l, ∂loss/∂b_l = Σ_n δ_l,
//! - δ_{l−1} = (δ_l·W_lᵀ) ⊙ φ'(z_{l−1}), with φ'(z) = 1 for z > 0 and a otherwise,
//!
//! batched over replicas (`[R, in, out]` weights; a shared input `[1, n, d]` broadcasts).
//! The L2 term's gradient λ·W is not added here: Adam's step adds it to the weights' gradient
//! (decoupled from the biases, which are not regularised), see [`State::adam_step`]. The
//! stochastic layer's forward, backward and regulariser live in [`crate::stochastic`].

use std::sync::Arc;

use burn::tensor::{Device, Tensor, TensorData};

use super::head::Head;
use super::update::{TensorSlot, TensorUpdate};
use crate::cpu::kernels::{self, AdamStep, KernelPath};
use crate::mlp::HostWeights;
use crate::stack::Stack;
use crate::stochastic::{LayerCache, ParamSlot, StochasticLayer};

/// One chunk's parameters and Adam moments on the device.
pub(crate) struct State {
    /// Weights `[R, in, out]` per layer.
    pub w: Vec<Tensor<3>>,
    /// Biases `[R, 1, out]` per layer.
    pub b: Vec<Tensor<3>>,
    /// The stochastic layer's learnable parameters per replica `[R, a, b]`, one per
    /// [`ParamSlot`] (concrete dropout's logit p, variational dropout's log α).
    pub params: Vec<Tensor<3>>,
    /// Adam's first and second moments per parameter slot, in slot order: the weights, the
    /// biases, then the stochastic layer's. Empty when the state is not trained.
    pub moments: Vec<[Tensor<3>; 2]>,
    /// The state of an update of the method's own ([`super::update`]).
    pub update: Option<Box<dyn TensorUpdate>>,
}

/// Gradients in the layout of [`State`].
pub(crate) struct Grads {
    pub w: Vec<Tensor<3>>,
    pub b: Vec<Tensor<3>>,
    pub params: Vec<Tensor<3>>,
}

impl Grads {
    /// Adds another pass's gradients (EnsAdvA's adversarial pass).
    pub fn add(&mut self, other: Grads) {
        for (a, b) in self.w.iter_mut().zip(other.w) {
            *a = a.clone() + b;
        }
        for (a, b) in self.b.iter_mut().zip(other.b) {
            *a = a.clone() + b;
        }
        for (a, b) in self.params.iter_mut().zip(other.params) {
            *a = a.clone() + b;
        }
    }
}

/// A host tensor `[a, b, c]` on the device.
pub fn upload(values: Vec<f32>, shape: [usize; 3], device: &Device) -> Tensor<3> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

pub(crate) fn download(t: Tensor<3>) -> Vec<f32> {
    t.into_data().try_into_vec_as::<f32>().expect("float data")
}

/// `download` for the models on the trainer that report a failed read as an error naming
/// `what` was read.
pub fn try_download(t: Tensor<3>, what: &str) -> Result<Vec<f32>, uqbench_core::MethodError> {
    t.into_data()
        .try_into_vec_as::<f32>()
        .map_err(|e| uqbench_core::MethodError::invalid(what, format!("{e:?}"), "f32 data"))
}

impl State {
    /// Host weights on the device, with zero Adam moments when `trained`, and the stochastic
    /// layer's parameters at their initial values for every replica.
    pub fn new(
        host: &HostWeights,
        layers: &[(usize, usize)],
        slots: &[ParamSlot],
        trained: bool,
        dev: &Device,
    ) -> State {
        let r = host.replicas;
        let w: Vec<Tensor<3>> = host
            .layers
            .iter()
            .zip(layers)
            .map(|((w, _), &(i, o))| upload(w.clone(), [r, i, o], dev))
            .collect();
        let b: Vec<Tensor<3>> = host
            .layers
            .iter()
            .zip(layers)
            .map(|((_, b), &(_, o))| upload(b.clone(), [r, 1, o], dev))
            .collect();
        let params: Vec<Tensor<3>> = slots
            .iter()
            .map(|s| Tensor::<3>::full([r, s.dims[0], s.dims[1]], s.init, dev))
            .collect();
        let moments = if trained {
            w.iter()
                .chain(&b)
                .chain(&params)
                .map(|t| [Tensor::zeros(t.dims(), dev), Tensor::zeros(t.dims(), dev)])
                .collect()
        } else {
            Vec::new()
        };
        State {
            w,
            b,
            params,
            moments,
            update: None,
        }
    }

    /// One Adam step on every parameter slot: the weights with weight decay (λ·W added to
    /// the gradient, MATLAB's L2), the biases and the stochastic layer's parameters without.
    pub fn adam_step(&mut self, grads: Grads, path: KernelPath, weights: &AdamStep) {
        let plain = AdamStep {
            weight_decay: 0.0,
            ..*weights
        };
        let State {
            w,
            b,
            params,
            moments,
            ..
        } = self;
        let slots = w
            .iter_mut()
            .map(|p| (p, weights))
            .chain(b.iter_mut().map(|p| (p, &plain)))
            .chain(params.iter_mut().map(|p| (p, &plain)));
        let grads = grads.w.into_iter().chain(grads.b).chain(grads.params);
        for (((p, step), [m, v]), g) in slots.zip(moments.iter_mut()).zip(grads) {
            let (np, nm, nv) = kernels::adam(path, p.extract(), m.extract(), v.extract(), g, step);
            (*p, *m, *v) = (np, nm, nv);
        }
    }
}

impl State {
    /// The update's step in place of Adam ([`super::update`]): every layer's weights (with
    /// the job's λ) then biases, each with its gradient and Adam's first moments as the
    /// second buffer; `normals(j, [rows, cols])` draws slot j's normals of the step.
    pub fn update_step(
        &mut self,
        grads: Grads,
        weight_decay: f64,
        (t, total): (u64, u64),
        normals: &dyn Fn(u64, [usize; 2]) -> Tensor<3>,
    ) {
        let State {
            w,
            b,
            moments,
            update,
            ..
        } = self;
        let params =
            (w.iter_mut().map(|p| (p, Some(weight_decay)))).chain(b.iter_mut().map(|p| (p, None)));
        let grads = grads.w.into_iter().chain(grads.b);
        let slots = (params.zip(moments.iter_mut()).zip(grads))
            .map(
                |(((params, weight_decay), [momenta, _]), grad)| TensorSlot {
                    params,
                    momenta,
                    grad,
                    weight_decay,
                },
            )
            .collect();
        update
            .as_mut()
            .expect("an update's step")
            .step(t, total, slots, normals);
    }
}

/// The network's structure (its parameters live in a [`State`]).
#[derive(Debug, Clone)]
pub(crate) struct Network<'a> {
    pub path: KernelPath,
    /// Leaky-ReLU slope a.
    pub slope: f64,
    /// The stochastic layer in front of the last linear layer.
    pub dropout: Option<Arc<dyn StochasticLayer>>,
    pub head: &'a dyn Head,
}

/// What the backward pass needs from the forward pass.
pub(crate) struct Cache {
    /// The input of every layer (for the last layer with dropout: its input before noise).
    inputs: Vec<Tensor<3>>,
    last: Option<LayerCache>,
}

impl Network<'_> {
    /// The state's layers as the shared device MLP.
    fn stack<'a>(&self, s: &'a State) -> Stack<'a> {
        Stack {
            w: &s.w,
            b: &s.b,
            slope: self.slope,
            path: self.path,
        }
    }

    /// The hidden layers: the last hidden activation and every layer's input up to it.
    pub fn hidden(&self, s: &State, x: Tensor<3>) -> (Tensor<3>, Vec<Tensor<3>>) {
        self.stack(s).hidden(x, s.w.len() - 1)
    }

    /// The last layer: deterministic without noise, stochastic with it.
    pub fn last(
        &self,
        s: &State,
        h: Tensor<3>,
        noise: Option<Tensor<3>>,
    ) -> (Tensor<3>, Option<LayerCache>) {
        let l = s.w.len() - 1;
        match (&self.dropout, noise) {
            (Some(dropout), Some(noise)) => {
                let (out, cache) = dropout.forward(h, &s.w[l], &s.b[l], &s.params, noise);
                (out, Some(cache))
            }
            _ => (self.stack(s).output(h), None),
        }
    }

    /// Forward pass keeping what the backward pass needs. Without `noise` the dropout
    /// layer is replaced by its expectation (the identity for all three kinds).
    ///
    /// # Shapes
    /// - `x`: `[1 or R, n, d]`, `noise`: from [`StochasticLayer::draw`] → output
    ///   `[R, n, d_out]`
    pub fn forward(&self, s: &State, x: Tensor<3>, noise: Option<Tensor<3>>) -> (Tensor<3>, Cache) {
        let (h, mut inputs) = self.hidden(s, x);
        inputs.push(h.clone());
        let (out, last) = self.last(s, h, noise);
        (out, Cache { inputs, last })
    }

    /// Backward pass from δ at the output (the recurrence in the module docs); returns the
    /// gradients (of the data term, plus the stochastic layer's regulariser) and, when asked,
    /// δ at the input. The plain layers are the shared [`Stack`]'s; a stochastic last layer
    /// is the stochastic layer's own.
    pub fn backward(
        &self,
        s: &State,
        cache: &Cache,
        delta: Tensor<3>,
        want_input: bool,
    ) -> (Grads, Option<Tensor<3>>) {
        let layers = s.w.len();
        let stack = self.stack(s);
        let (Some(last), Some(dropout)) = (&cache.last, &self.dropout) else {
            let g = stack.backward(&cache.inputs, layers, delta, want_input);
            let grads = Grads {
                w: g.w,
                b: g.b,
                params: Vec::new(),
            };
            return (grads, g.input);
        };
        let l = layers - 1;
        let mut top = dropout.backward(last, &s.w[l], &s.params, delta);
        dropout.regularize(&s.w[l], &s.params, &mut top);
        let (mut w, mut b, input) = if l == 0 {
            (Vec::new(), Vec::new(), want_input.then_some(top.dh))
        } else {
            let delta = stack.activation_backward(top.dh, &cache.inputs[l]);
            let g = stack.backward(&cache.inputs, l, delta, want_input);
            (g.w, g.b, g.input)
        };
        w.push(top.gw);
        b.push(top.gb);
        let grads = Grads {
            w,
            b,
            params: top.gparams,
        };
        (grads, input)
    }

    /// The optimised objective per replica `[R, 1, 1]` for an output `out` of the network:
    /// the head's data term + (λ/2)·Σ‖W‖² + the stochastic layer's regulariser.
    pub fn objective(
        &self,
        s: &State,
        out: Tensor<3>,
        y: &Tensor<3>,
        weight_decay: f64,
    ) -> Tensor<3> {
        let mut objective = self.head.value(out, y);
        for w in &s.w {
            objective = objective
                + w.clone()
                    .square()
                    .sum_dim(2)
                    .sum_dim(1)
                    .mul_scalar(0.5 * weight_decay);
        }
        if let Some(dropout) = &self.dropout {
            if let Some(reg) = dropout.regularizer(&s.w[s.w.len() - 1], &s.params) {
                objective = objective + reg;
            }
        }
        objective
    }
}
