//! Updates in place of Adam: a method that moves the replicas' parameters its own way (an
//! SG-MCMC method's Langevin dynamics, `uqbench_models::sgmcmc`) brings an [`Update`] in
//! `TrainSettings::update`. The engine still computes every step's batch, forward pass, head
//! and gradient on both executions; it then hands the parameters to the update slot by slot,
//! in the order of the network's layout (each layer's weights, then each layer's biases),
//! with the gradient of the data term alone (the L2 pull is the update's: the slot says
//! whether it is a weight slot and the job's λ), the slot's second buffer (Adam's first
//! moments, zero at the start: momenta for an update that needs them), and the step's normals
//! from the replica's own stream (purpose `PURPOSE_UPDATE`: draw t·S + j for slot j of S at
//! step t, the same numbers on the host and on the device).
//!
//! An update keeps per-replica state of its own (a chain's σ², say): [`HostUpdate`] for one
//! replica on the host loops, [`TensorUpdate`] for a chunk of replicas on the device. Both see
//! every step's batch (outputs and targets at the step's parameters, before the update) and
//! every epoch's end, and may report a noise sd per replica to the collectors
//! (`collect::Event::Epoch::noise_sd`).

use std::fmt::Debug;

use burn::tensor::{Device, Tensor};

use super::TrainSettings;
use uqbench_core::MethodError;

/// A parameter update in place of Adam (module docs).
pub trait Update: Debug + Send + Sync {
    /// Checks the update against the job's settings, before anything trains.
    fn validate(&self, settings: &TrainSettings) -> Result<(), MethodError>;
    /// One replica's state on the host, from its stream keys (seed, identifier) and targets.
    fn host(&self, keys: (u64, u64), y: &[f32]) -> Box<dyn HostUpdate>;
    /// A chunk's state on the device, from its replicas' stream keys and targets (`[rc, N]`,
    /// row-major); `upload` puts host values on the device (counted as the chunk's uploads).
    fn tensor(
        &self,
        keys: &[(u64, u64)],
        y: &[f32],
        device: &Device,
        upload: &mut dyn FnMut(Vec<f32>, [usize; 3]) -> Tensor<3>,
    ) -> Box<dyn TensorUpdate>;
}

/// One slot of a host step: a layer's weights or biases of one replica.
pub struct HostSlot<'a> {
    /// The parameters.
    pub params: &'a mut [f32],
    /// The slot's second buffer (zero at the start, the update's to keep).
    pub momenta: &'a mut [f32],
    /// The gradient of the step's data term.
    pub grad: &'a [f32],
    /// The job's λ for a weight slot, `None` for biases (never pulled).
    pub weight_decay: Option<f64>,
}

/// A host step's slots in layout order (each layer's weights, then each layer's biases), split
/// off one replica's flat parameters, second buffer and gradient as they are visited: no
/// allocation per step.
pub struct HostSlots<'a> {
    params: &'a mut [f32],
    momenta: &'a mut [f32],
    grad: &'a [f32],
    /// (in, out) per layer.
    layers: &'a [(usize, usize)],
    weight_decay: f64,
    /// The next slot: j < L a layer's weights, then L + l layer l's biases.
    next: usize,
}

impl<'a> HostSlots<'a> {
    /// The slots of a network with `layers` ((in, out) per layer) over buffers in its layout:
    /// every layer's weights `[in, out]`, then every layer's biases; λ = `weight_decay`.
    pub fn new(
        params: &'a mut [f32],
        momenta: &'a mut [f32],
        grad: &'a [f32],
        layers: &'a [(usize, usize)],
        weight_decay: f64,
    ) -> HostSlots<'a> {
        HostSlots {
            params,
            momenta,
            grad,
            layers,
            weight_decay,
            next: 0,
        }
    }
}

impl<'a> Iterator for HostSlots<'a> {
    type Item = HostSlot<'a>;

    fn next(&mut self) -> Option<HostSlot<'a>> {
        let l = self.layers.len();
        let (len, weight_decay) = match self.next {
            j if j < l => (self.layers[j].0 * self.layers[j].1, Some(self.weight_decay)),
            j if j < 2 * l => (self.layers[j - l].1, None),
            _ => return None,
        };
        self.next += 1;
        let (params, rest) = std::mem::take(&mut self.params).split_at_mut(len);
        self.params = rest;
        let (momenta, rest) = std::mem::take(&mut self.momenta).split_at_mut(len);
        self.momenta = rest;
        let (grad, rest) = self.grad.split_at(len);
        self.grad = rest;
        Some(HostSlot {
            params,
            momenta,
            grad,
            weight_decay,
        })
    }
}

/// One replica's update on the host.
pub trait HostUpdate: Send {
    /// A step's batch: the outputs (`[b, outputs]`) at the step's parameters and its targets.
    fn batch(&mut self, _out: &[f32], _y: &[f32]) {}
    /// Step `t` (from 1) of `total`: every slot in layout order; `normals(j, z)` fills `z`
    /// with slot j's normals of this step.
    fn step(
        &mut self,
        t: u64,
        total: u64,
        slots: HostSlots<'_>,
        normals: &mut dyn FnMut(u64, &mut [f32]),
    );
    /// The end of an epoch over N training points.
    fn epoch_end(&mut self, _n: usize) {}
    /// The replica's noise sd, where the update learns one.
    fn noise_sd(&self) -> Option<f64> {
        None
    }
}

/// One slot of a tensor step: a layer's weights or biases of a chunk's replicas (`[R, a, b]`).
pub struct TensorSlot<'a> {
    /// The parameters.
    pub params: &'a mut Tensor<3>,
    /// The slot's second buffer (zero at the start, the update's to keep).
    pub momenta: &'a mut Tensor<3>,
    /// The gradient of the step's data term.
    pub grad: Tensor<3>,
    /// The job's λ for a weight slot, `None` for biases (never pulled).
    pub weight_decay: Option<f64>,
}

/// A chunk's update on the device.
pub trait TensorUpdate: Send {
    /// A step's batch: the outputs `[R, b, outputs]` at the step's parameters and the
    /// targets `[R, b, 1]`.
    fn batch(&mut self, _out: &Tensor<3>, _y: &Tensor<3>) {}
    /// Step `t` (from 1) of `total`: every slot in layout order; `normals(j, [a, b])` draws
    /// slot j's normals of this step.
    fn step(
        &mut self,
        t: u64,
        total: u64,
        slots: Vec<TensorSlot<'_>>,
        normals: &dyn Fn(u64, [usize; 2]) -> Tensor<3>,
    );
    /// The end of an epoch over N training points; `read` brings a tensor back to the host
    /// and `upload` puts values on the device (both counted as the chunk's transfers).
    fn epoch_end(
        &mut self,
        _n: usize,
        _read: &mut dyn FnMut(Tensor<3>) -> Vec<f32>,
        _upload: &mut dyn FnMut(Vec<f32>, [usize; 3]) -> Tensor<3>,
    ) {
    }
    /// Replica `r`'s noise sd, where the update learns one.
    fn noise_sd(&self, _r: usize) -> Option<f64> {
        None
    }
}
