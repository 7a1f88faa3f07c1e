//! Adam per element over a module's parameter slots, as a burn [`ModuleMapper`].
//!
//! One loop over the parameters in the module's visiting order (slot 0, 1, …): each slot has
//! its moment estimates and its own weight decay (λ on weights, 0 on biases and rates, as
//! MATLAB's `BiasL2Factor = 0`). The update is PyTorch's Adam with the L2 term added to the
//! gradient (not AdamW), element by element, so replicas stored along a parameter's first
//! dimension never influence each other.
//!
//! Gradients come from a [`GradSource`]: in slot order from a hand-written backward pass, or
//! by parameter id from burn's autodiff ([`GradientsParams`]).

use burn::module::{ModuleMapper, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Shape, Tensor};

use crate::cpu::kernels::{self, AdamStep, KernelPath};

/// Adam's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamConfig {
    /// Learning rate.
    pub lr: f64,
    /// β₁.
    pub beta1: f64,
    /// β₂.
    pub beta2: f64,
    /// ε (PyTorch's 1e-8; burn's default is 1e-5).
    pub eps: f64,
}

/// Where a step's gradients come from.
pub trait GradSource {
    /// The gradient of parameter slot `slot` (id `id`, shape `shape`) on the plain
    /// (non-autodiff) device; `None` when the parameter got no gradient this step.
    fn take<const D: usize>(&mut self, slot: usize, id: ParamId, shape: Shape)
        -> Option<Tensor<D>>;
}

/// Gradients in slot order, as a hand-written backward pass produces them.
impl GradSource for Vec<Option<Tensor<3>>> {
    fn take<const D: usize>(
        &mut self,
        slot: usize,
        _id: ParamId,
        shape: Shape,
    ) -> Option<Tensor<D>> {
        Some(self.get_mut(slot)?.take()?.reshape(shape))
    }
}

/// Gradients by parameter id, from burn's autodiff.
impl GradSource for GradientsParams {
    fn take<const D: usize>(
        &mut self,
        _slot: usize,
        id: ParamId,
        _shape: Shape,
    ) -> Option<Tensor<D>> {
        self.remove::<D>(id)
    }
}

/// Adam's moment estimates for every parameter slot of a module, and the step count.
#[derive(Debug, Default)]
pub struct AdamState {
    /// Per slot: (first moment, second moment), flattened; created on the first step.
    moments: Vec<Option<(Tensor<1>, Tensor<1>)>>,
    /// Steps taken.
    t: u64,
}

impl AdamState {
    /// Fresh state (zero moments, t = 0).
    pub fn new() -> AdamState {
        AdamState::default()
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.t
    }

    /// One Adam step of every parameter of `module`: slot i decays with `decay[i]`·λ (λ =
    /// `weight_decay`; a slot beyond `decay` does not decay).
    pub fn step<M: burn::module::Module>(
        &mut self,
        module: M,
        grads: &mut impl GradSource,
        config: &AdamConfig,
        weight_decay: f64,
        decay: &[bool],
        path: KernelPath,
    ) -> M {
        self.t += 1;
        let step = AdamStep::new(
            config.lr,
            config.beta1,
            config.beta2,
            config.eps,
            self.t,
            weight_decay,
        );
        let mut mapper = AdamMapper {
            state: self,
            grads,
            step,
            decay,
            path,
            slot: 0,
        };
        module.map(&mut mapper)
    }
}

struct AdamMapper<'a, G: GradSource> {
    state: &'a mut AdamState,
    grads: &'a mut G,
    step: AdamStep,
    decay: &'a [bool],
    path: KernelPath,
    slot: usize,
}

impl<G: GradSource> ModuleMapper for AdamMapper<'_, G> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let slot = self.slot;
        self.slot += 1;
        let (id, tensor, mapper) = param.consume();
        let shape = tensor.shape();
        let Some(grad) = self.grads.take::<D>(slot, id, shape.clone()) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let autodiff = tensor.is_autodiff();
        let require_grad = tensor.is_require_grad();
        let numel = shape.num_elements();
        let p = tensor.inner().reshape([numel]);
        let g = grad.reshape([numel]);
        if self.state.moments.len() <= slot {
            self.state.moments.resize(slot + 1, None);
        }
        let (m, v) = self.state.moments[slot]
            .take()
            .unwrap_or_else(|| (p.zeros_like(), p.zeros_like()));
        let step = AdamStep {
            weight_decay: if self.decay.get(slot).copied().unwrap_or(false) {
                self.step.weight_decay
            } else {
                0.0
            },
            ..self.step
        };
        let (p, m, v) = kernels::adam(self.path, p, m, v, g, &step);
        self.state.moments[slot] = Some((m, v));
        let mut p = p.reshape(shape);
        if autodiff {
            p = Tensor::from_inner(p);
            if require_grad {
                p = p.require_grad();
            }
        }
        Param::from_mapped_value(id, p, mapper)
    }
}
