//! Stochastic layers: noise on the input of the network's last linear layer (the output of
//! the 32-unit layer in the paper's 128-64-32 network, "dropout on the next-to-last layer"),
//! with their forward passes, hand-written backward passes and regularisers.
//!
//! A layer is one implementation of [`StochasticLayer`]; the engine (`crate::engine`) owns
//! its learnable parameters (one `[R, a, b]` slot per [`ParamSlot`], updated by the engine's
//! Adam like the weights), draws its noise from each replica's own device stream, and calls
//! its forward, backward and regulariser. The built-in layers, one file each:
//! - [`Bernoulli`]: MC dropout [Gal & Ghahramani 2016];
//! - [`Concrete`]: concrete dropout [Gal, Hron, Kendall 2017];
//! - [`Variational`]: variational (Gaussian) dropout [Kingma, Salimans, Welling 2015] with
//!   Molchanov et al.'s KL.
//!
//! Adding a layer: a new file here with a struct implementing [`StochasticLayer`] (the
//! backward pass checked by `stochastic_layers_backward_matches_autodiff` in `layers.rs` and
//! the finite differences of `engine/probe.rs`, where it joins the lists of cases), and a
//! method that puts it in `TrainSettings::dropout` (see `ens_mcd.rs` for a whole method in
//! one file).
//!
//! Randomness is an explicit input: every step and every prediction pass draws its noise from
//! the replica's own counter-based stream ([`DeviceRng`]), so the layer cannot silently switch
//! itself off and a replica's noise does not depend on the other replicas.

use std::any::Any;
use std::fmt::Debug;

use burn::tensor::Tensor;

use crate::device_rng::DeviceRng;
use uqbench_core::MethodError;

mod bernoulli;
mod concrete;
mod variational;

pub use bernoulli::Bernoulli;
pub use concrete::Concrete;
pub use variational::{Variational, LOG_ALPHA_CLIP};

/// What a layer's forward pass keeps for its backward pass (the layer's own type, boxed).
pub type LayerCache = Box<dyn Any>;

/// A learnable parameter of the layer: `[R, a, b]` on the device, every replica starting at
/// `init` (e.g. concrete dropout's θ = logit p, `[R, 1, 1]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamSlot {
    /// `[a, b]`: the slot's shape per replica.
    pub dims: [usize; 2],
    /// The initial value of every element.
    pub init: f64,
}

/// Gradients of the stochastic last layer: ∂/∂W, ∂/∂b, δ at its input h, and one gradient
/// per [`ParamSlot`], in slot order.
pub struct LastGrads {
    /// `[R, k, o]`.
    pub gw: Tensor<3>,
    /// `[R, 1, o]`.
    pub gb: Tensor<3>,
    /// `[R, n, k]`.
    pub dh: Tensor<3>,
    /// One per slot, shaped like the slot.
    pub gparams: Vec<Tensor<3>>,
}

/// A stochastic layer in front of the last linear layer: out = noisy(h)·W + b, for R replicas
/// at once (`h`: `[R, n, k]`, `w`: `[R, k, o]`, `b`: `[R, 1, o]`).
///
/// The engine calls, per step: [`draw`](Self::draw), [`forward`](Self::forward),
/// [`backward`](Self::backward) then [`regularize`](Self::regularize); at the end
/// [`regularizer`](Self::regularizer) for the final objective and [`rate`](Self::rate) for
/// the reported rate. Without noise (the final objective, a deterministic pass) the engine
/// uses the plain linear layer: the layer's expectation must be the identity on h.
pub trait StochasticLayer: Debug + Send + Sync {
    /// Checks the settings once, up front, naming a bad one.
    fn validate(&self) -> Result<(), MethodError>;

    /// The learnable parameters per replica for `k` units feeding `o` outputs (none by
    /// default).
    fn params(&self, _k: usize, _o: usize) -> Vec<ParamSlot> {
        Vec::new()
    }

    /// The name of the learned rate in results (e.g. `learned_p`), or `None` when the layer
    /// learns none.
    fn rate_name(&self) -> Option<&'static str> {
        None
    }

    /// The reported rate of one replica from the first element of its first parameter slot
    /// (only called when [`rate_name`](Self::rate_name) is `Some`).
    fn rate(&self, _first_param: f64) -> f64 {
        f64::NAN
    }

    /// The width of one point's noise: `k` for noise on the units (the default), `o` for
    /// noise on the pre-activations.
    fn noise_width(&self, k: usize, _o: usize) -> usize {
        k
    }

    /// One pass's noise `[R, n, width]`: draw `counter` of the replicas' streams `rng`.
    fn draw(&self, rng: &DeviceRng, counter: u64, n: usize, width: usize) -> Tensor<3>;

    /// The forward pass with `noise` from [`draw`](Self::draw) and the parameters in slot
    /// order: the output `[R, n, o]` and what the backward pass needs.
    fn forward(
        &self,
        h: Tensor<3>,
        w: &Tensor<3>,
        b: &Tensor<3>,
        params: &[Tensor<3>],
        noise: Tensor<3>,
    ) -> (Tensor<3>, LayerCache);

    /// The backward pass of the data term from δ at the output `[R, n, o]`.
    fn backward(
        &self,
        cache: &LayerCache,
        w: &Tensor<3>,
        params: &[Tensor<3>],
        delta: Tensor<3>,
    ) -> LastGrads;

    /// The regulariser beyond the global L2, per replica `[R, 1, 1]`, or `None` (the default).
    fn regularizer(&self, _w: &Tensor<3>, _params: &[Tensor<3>]) -> Option<Tensor<3>> {
        None
    }

    /// Adds the regulariser's gradients to `grads` (nothing by default).
    fn regularize(&self, _w: &Tensor<3>, _params: &[Tensor<3>], _grads: &mut LastGrads) {}

    /// The layer as [`Any`], for tests and reports that need its settings.
    fn as_any(&self) -> &dyn Any;
}

/// The cache of a layer's forward pass as the layer's own type.
pub(crate) fn cache_of<'a, T: 'static>(cache: &'a LayerCache, layer: &str) -> &'a T {
    cache
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("{layer}: a cache from another layer's forward pass"))
}

/// The backward pass shared by layers whose noise multiplies the units, h̃ = h ⊙ factor:
/// ∂/∂W = h̃ᵀ·δ, ∂/∂b = Σ_n δ, ∂/∂h̃ = δ·Wᵀ, δ at h = ∂/∂h̃ ⊙ factor. Returns the
/// gradients (with no parameter gradients) and ∂/∂h̃ for the layer's own parameters.
pub(crate) fn multiplicative_backward(
    ht: &Tensor<3>,
    factor: &Tensor<3>,
    w: &Tensor<3>,
    delta: Tensor<3>,
) -> (LastGrads, Tensor<3>) {
    let gb = delta.clone().sum_dim(1);
    let gw = ht.clone().swap_dims(1, 2).matmul(delta.clone());
    let dht = delta.matmul(w.clone().swap_dims(1, 2));
    let dh = dht.clone() * factor.clone();
    (
        LastGrads {
            gw,
            gb,
            dh,
            gparams: Vec::new(),
        },
        dht,
    )
}
