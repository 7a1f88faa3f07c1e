//! The MLP on the device: one forward and one backward pass for every network built from the
//! plain layers of spec §3, batched over replicas.
//!
//! A [`Stack`] borrows the weights `[R, in, out]` and biases `[R, 1, out]` of its layers
//! (whoever owns them: the engine's [`crate::trainer`] state, HMC's chains, a burn module's
//! parameters) and computes, per replica r and layer l,
//!
//! - z_l = h_{l−1}·W_l + b_l, h_l = φ(z_l) with φ the leaky ReLU (slope a) after every layer
//!   but the last, which is linear;
//! - from δ_l = ∂loss/∂z_l: ∂loss/∂W_l = h_{l−1}ᵀ·δ_l, ∂loss/∂b_l = Σ_n δ_l, and
//!   δ_{l−1} = (δ_l·W_lᵀ) ⊙ φ'(z_{l−1}), φ'(z) = 1 for z > 0 and a otherwise.
//!
//! Who builds on it: the engine's network (every ensemble, dropout and SG-MCMC method, its
//! stochastic last layer apart), HMC's chains (the prior's gradient added to the likelihood's),
//! the autodiff route's [`crate::autodiff::McdNet`] and the epinet's base network (forward only:
//! burn's autodiff differentiates it, so they run it on [`KernelPath::Tensor`]). Where the maths
//! does not allow it: MFVI's layers are distributions over weights and its forward pass
//! propagates a mean and a variance per unit (the local reparameterisation), and a
//! BatchEnsemble layer is (x ∘ r)·W ∘ s with W shared by the members; neither is a stack of
//! per-replica weight matrices, and writing one out as such (W ∘ r sᵀ per member) would give up
//! the memory BatchEnsemble exists to save.

use burn::tensor::Tensor;

use crate::cpu::kernels::{self, KernelPath};
use crate::layers::{linear_backward, product};

/// The layers of an MLP on the device, borrowed from whoever owns them.
#[derive(Clone, Copy)]
pub struct Stack<'a> {
    /// Weights `[R, in, out]` per layer, input to output.
    pub w: &'a [Tensor<3>],
    /// Biases `[R, 1, out]` per layer.
    pub b: &'a [Tensor<3>],
    /// The leaky ReLU's slope a.
    pub slope: f64,
    /// Where the bias, activation and its derivative run: the CPU's fused kernels
    /// ([`KernelPath::Flex`]) or the backend's tensor operations (which autodiff follows).
    pub path: KernelPath,
}

/// The gradients of a [`Stack`]'s layers (of those the backward pass went through).
pub struct StackGrads {
    /// ∂loss/∂W_l `[R, in, out]`.
    pub w: Vec<Tensor<3>>,
    /// ∂loss/∂b_l `[R, 1, out]`.
    pub b: Vec<Tensor<3>>,
    /// ∂loss/∂x `[R, n, d]`, when asked for.
    pub input: Option<Tensor<3>>,
}

impl Stack<'_> {
    /// The number of layers.
    pub fn layers(&self) -> usize {
        self.w.len()
    }

    /// Layers 0..k, each followed by the activation: h_{k−1}, and the input of each of the k
    /// layers (what [`Stack::backward`] needs).
    ///
    /// # Shapes
    /// - `x`: `[1 or R, n, d]` (a shared input broadcasts) → `[R, n, width of layer k−1]`
    pub fn hidden(&self, x: Tensor<3>, k: usize) -> (Tensor<3>, Vec<Tensor<3>>) {
        let mut inputs = Vec::with_capacity(self.w.len());
        let mut h = x;
        for l in 0..k {
            let z = product(h.clone(), self.w[l].clone());
            inputs.push(h);
            h = kernels::bias_act(self.path, z, &self.b[l], self.slope, true);
        }
        (h, inputs)
    }

    /// The last layer, linear, on the last hidden activation `h`.
    pub fn output(&self, h: Tensor<3>) -> Tensor<3> {
        let l = self.w.len() - 1;
        let z = product(h, self.w[l].clone());
        kernels::bias_act(self.path, z, &self.b[l], self.slope, false)
    }

    /// Every layer: the output and the input of every layer.
    ///
    /// # Shapes
    /// - `x`: `[1 or R, n, d]` → `[R, n, d_out]`
    pub fn forward(&self, x: Tensor<3>) -> (Tensor<3>, Vec<Tensor<3>>) {
        let (h, mut inputs) = self.hidden(x, self.w.len() - 1);
        inputs.push(h.clone());
        (self.output(h), inputs)
    }

    /// δ at the input of the activation from δ at its output `back`, with `act` the
    /// activation's output (its sign is the pre-activation's for a > 0).
    pub fn activation_backward(&self, back: Tensor<3>, act: &Tensor<3>) -> Tensor<3> {
        kernels::leaky_backward(self.path, back, act, self.slope)
    }

    /// Back through layers k−1, …, 0 from `delta` = ∂loss/∂z_{k−1} (the recurrence in the module
    /// docs), with `inputs` the layers' inputs from the forward pass; δ at the input when
    /// `want_input`.
    pub fn backward(
        &self,
        inputs: &[Tensor<3>],
        k: usize,
        mut delta: Tensor<3>,
        want_input: bool,
    ) -> StackGrads {
        let mut w = Vec::with_capacity(k);
        let mut b = Vec::with_capacity(k);
        let mut input = None;
        for l in (0..k).rev() {
            let g = linear_backward(&inputs[l], delta.clone(), &self.w[l], l > 0 || want_input);
            w.push(g.weight);
            b.push(g.bias);
            if l == 0 {
                input = g.input;
            } else {
                let back = g.input.expect("asked for above the first layer");
                delta = self.activation_backward(back, &inputs[l]);
            }
        }
        w.reverse();
        b.reverse();
        StackGrads { w, b, input }
    }
}
