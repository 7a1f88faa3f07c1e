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

use crate::cpu::simd;
use crate::device_rng::{DeviceRng, HostStream};
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

    // The host execution (`crate::cpu::trainer`): the same layer for one replica, on host
    // slices, point-major. Each method computes what its tensor twin above computes, from the
    // same noise (`draw_host` gives the device's numbers; see `HostStream`).

    /// [`draw`](Self::draw) for one replica: `out` (`[n, width]`) from its stream.
    fn draw_host(&self, stream: &HostStream, counter: u64, out: &mut [f32]);

    /// [`forward`](Self::forward) for one replica: the output `[n, o]` into `out`, what the
    /// backward pass needs into `cache`.
    fn forward_host(&self, x: &HostLast<'_>, noise: &[f32], out: &mut [f32], cache: &mut HostCache);

    /// [`backward`](Self::backward) for one replica, from δ at the output `[n, o]`: writes
    /// every gradient of `g`.
    fn backward_host(
        &self,
        x: &HostLast<'_>,
        noise: &[f32],
        cache: &HostCache,
        delta: &[f32],
        g: &mut HostGrads<'_>,
    );

    /// [`regularizer`](Self::regularizer) for one replica (`w`: `[k, o]`), or `None`.
    fn regularizer_host(&self, _w: &[f32], _k: usize, _params: &[f32]) -> Option<f32> {
        None
    }

    /// [`regularize`](Self::regularize) for one replica: adds to `gw` and `gparams`.
    fn regularize_host(
        &self,
        _w: &[f32],
        _k: usize,
        _params: &[f32],
        _gw: &mut [f32],
        _gparams: &mut [f32],
    ) {
    }
}

/// One replica's last layer on the host: the units `h` (`[n, k]`, point-major), W (`[k, o]`,
/// row-major), b (`[o]`) and the layer's parameters, slot after slot.
#[derive(Clone, Copy)]
pub struct HostLast<'a> {
    /// The units `[n, k]`.
    pub h: &'a [f32],
    /// The last layer's weights `[k, o]`.
    pub w: &'a [f32],
    /// Its biases `[o]`.
    pub b: &'a [f32],
    /// The layer's parameters ([`ParamSlot`]s, flat, in slot order).
    pub params: &'a [f32],
    /// Units k.
    pub k: usize,
    /// Outputs o.
    pub o: usize,
    /// The instruction set a layer may run its heavy loops at ([`simd::dispatch_at`]).
    pub level: simd::Level,
}

impl HostLast<'_> {
    /// Points n.
    pub fn n(&self) -> usize {
        self.h.len() / self.k
    }
}

/// What a layer's host forward pass keeps for its backward pass: buffers reused from step to
/// step (a layer uses those it needs; sized by the layer).
#[derive(Debug, Default)]
pub struct HostCache {
    /// The noisy units h̃ `[n, k]`.
    pub ht: Vec<f32>,
    /// A per-unit factor `[n, k]` (the scaled mask).
    pub factor: Vec<f32>,
    /// The layer's own `[n, k]` or `[n, o]` values.
    pub aux: Vec<f32>,
}

/// The last layer's gradients for one replica on the host: ∂/∂W `[k, o]`, ∂/∂b `[o]`, δ at
/// the units `[n, k]`, and ∂/∂ the layer's parameters (flat, slot order).
pub struct HostGrads<'a> {
    /// ∂/∂W.
    pub gw: &'a mut [f32],
    /// ∂/∂b.
    pub gb: &'a mut [f32],
    /// δ at h.
    pub dh: &'a mut [f32],
    /// ∂/∂ parameters.
    pub gparams: &'a mut [f32],
}

/// The linear part on the host: `out` (`[n, o]`) = h̃·W + b, every output its bias plus the
/// products (one output: [`simd::dot`]'s order; more: the order of the units).
#[inline(always)]
pub(crate) fn linear_host(ht: &[f32], w: &[f32], b: &[f32], out: &mut [f32]) {
    let o = b.len();
    let k = w.len() / o;
    if o == 1 {
        for (v, row) in out.iter_mut().zip(ht.chunks_exact(k)) {
            *v = b[0] + simd::dot(row, w);
        }
        return;
    }
    for (vals, row) in out.chunks_exact_mut(o).zip(ht.chunks_exact(k)) {
        vals.copy_from_slice(b);
        for (&hk, wk) in row.iter().zip(w.chunks_exact(o)) {
            for (v, &wkj) in vals.iter_mut().zip(wk) {
                *v += hk * wkj;
            }
        }
    }
}

/// The linear part's backward on the host, from δ at the output (`[n, o]`): ∂/∂W = h̃ᵀ·δ,
/// ∂/∂b = Σ_n δ, and δ·Wᵀ (`[n, k]`) into `dht`.
#[inline(always)]
pub(crate) fn linear_backward_host(
    ht: &[f32],
    w: &[f32],
    delta: &[f32],
    gw: &mut [f32],
    gb: &mut [f32],
    dht: &mut [f32],
) {
    let o = gb.len();
    let k = w.len() / o;
    gw.fill(0.0);
    gb.fill(0.0);
    for ((row, d), dr) in (ht.chunks_exact(k))
        .zip(delta.chunks_exact(o))
        .zip(dht.chunks_exact_mut(k))
    {
        for (g, &dj) in gb.iter_mut().zip(d) {
            *g += dj;
        }
        if o == 1 {
            let dj = d[0];
            for ((g, &hk), (dv, &wk)) in gw.iter_mut().zip(row).zip(dr.iter_mut().zip(w)) {
                *g += hk * dj;
                *dv = dj * wk;
            }
            continue;
        }
        for ((&hk, gk), (dv, wk)) in
            (row.iter().zip(gw.chunks_exact_mut(o))).zip(dr.iter_mut().zip(w.chunks_exact(o)))
        {
            let mut acc = 0.0;
            for ((g, &dj), &wkj) in gk.iter_mut().zip(d).zip(wk) {
                *g += hk * dj;
                acc += dj * wkj;
            }
            *dv = acc;
        }
    }
}

/// δ at h for h̃ = h ⊙ factor, in place: `dh` (δ·Wᵀ on entry) ⊙ factor.
#[inline(always)]
pub(crate) fn times_factor(dh: &mut [f32], factor: &[f32]) {
    for (d, &f) in dh.iter_mut().zip(factor) {
        *d *= f;
    }
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
