//! The element-wise parts of a training step, written once with burn tensor operations (every
//! backend) and once as fused in-place loops for burn's flex backend.
//!
//! The fused versions are burn backend extensions in the sense of burn 0.22: they take the
//! flex primitive out of the tensor (`Tensor::try_into_primitive::<Flex>`), update its
//! storage in place, and put it back (`Tensor::from_primitive`). Each replaces three to eight
//! tensor operations (each a pass over memory and usually an allocation) with one pass.
//! Both versions compute the same formulas per element, so results agree to rounding; each
//! is exactly per-element or per-replica, so a replica's numbers never depend on the others.

use burn::backend::flex::FlexTensor;
use burn::backend::Flex;
use burn::tensor::Tensor;

/// Adam's hyper-parameters for one step (bias correction folded in).
#[derive(Debug, Clone, Copy)]
pub struct AdamStep {
    /// β₁.
    pub beta1: f32,
    /// β₂.
    pub beta2: f32,
    /// lr·sqrt(1 − β₂ᵗ)/(1 − β₁ᵗ).
    pub lr_t: f32,
    /// ε·sqrt(1 − β₂ᵗ).
    pub eps_t: f32,
    /// L2 factor λ added to the gradient as λ·w (0 for biases).
    pub weight_decay: f32,
}

impl AdamStep {
    /// The step-t constants for PyTorch's Adam, p ← p − lr·m̂/(√v̂ + ε) with m̂ = m/(1−β₁ᵗ),
    /// v̂ = v/(1−β₂ᵗ), rewritten as p ← p − lr_t·m/(√v + ε_t).
    pub fn new(lr: f64, beta1: f64, beta2: f64, eps: f64, t: u64, weight_decay: f64) -> AdamStep {
        let c1 = 1.0 - beta1.powf(t as f64);
        let c2 = (1.0 - beta2.powf(t as f64)).sqrt();
        AdamStep {
            beta1: beta1 as f32,
            beta2: beta2 as f32,
            lr_t: (lr * c2 / c1) as f32,
            eps_t: (eps * c2) as f32,
            weight_decay: weight_decay as f32,
        }
    }
}

/// Whether the fused flex kernels apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// Generic burn tensor operations.
    Tensor,
    /// Fused in-place loops on flex storage.
    Flex,
}

fn into_flex<const D: usize>(t: Tensor<D>) -> FlexTensor {
    let f = t
        .try_into_primitive::<Flex>()
        .expect("the flex kernel path is only chosen for tensors on the flex backend");
    if f.is_contiguous() && f.layout().contiguous_offsets().is_some_and(|(s, _)| s == 0) {
        f
    } else {
        f.to_contiguous()
    }
}

fn from_flex<const D: usize>(f: FlexTensor) -> Tensor<D> {
    Tensor::from_primitive::<Flex>(f)
}

fn view(f: &FlexTensor) -> &[f32] {
    let (s, e) = f.layout().contiguous_offsets().expect("contiguous");
    &f.storage::<f32>()[s..e]
}

fn view_mut(f: &mut FlexTensor) -> &mut [f32] {
    let (s, e) = f.layout().contiguous_offsets().expect("contiguous");
    &mut f.storage_mut::<f32>()[s..e]
}

#[inline]
fn leaky(v: f32, slope: f32) -> f32 {
    if v > 0.0 {
        v
    } else {
        v * slope
    }
}

/// z + b, followed by the leaky ReLU when `activate`.
///
/// # Shapes
/// - `z`: `[R, N, O]`, `b`: `[R, 1, O]` → `[R, N, O]`
pub fn bias_act(
    path: KernelPath,
    z: Tensor<3>,
    b: &Tensor<3>,
    slope: f64,
    activate: bool,
) -> Tensor<3> {
    match path {
        KernelPath::Tensor => {
            let z = z + b.clone();
            if activate {
                burn::tensor::activation::leaky_relu(z, slope)
            } else {
                z
            }
        }
        KernelPath::Flex => {
            let [r, n, o] = z.dims();
            let mut zf = into_flex(z);
            let bf = into_flex(b.clone());
            let bias = view(&bf);
            let out = view_mut(&mut zf);
            let slope = slope as f32;
            for rep in 0..r {
                let brow = &bias[rep * o..(rep + 1) * o];
                for row in out[rep * n * o..(rep + 1) * n * o].chunks_exact_mut(o) {
                    if activate {
                        for (v, bb) in row.iter_mut().zip(brow) {
                            *v = leaky(*v + bb, slope);
                        }
                    } else {
                        for (v, bb) in row.iter_mut().zip(brow) {
                            *v += bb;
                        }
                    }
                }
            }
            from_flex(zf)
        }
    }
}

/// Back-propagates through the leaky ReLU: δ·1 where the activation is positive, δ·slope
/// elsewhere. `act` is the layer's output; for slope > 0 its sign is the pre-activation's.
///
/// # Shapes
/// - `delta`, `act`: `[R, N, O]`
pub fn leaky_backward(
    path: KernelPath,
    delta: Tensor<3>,
    act: &Tensor<3>,
    slope: f64,
) -> Tensor<3> {
    match path {
        KernelPath::Tensor => {
            let scaled = delta.clone().mul_scalar(slope);
            delta.mask_where(act.clone().lower_equal_elem(0.0), scaled)
        }
        KernelPath::Flex => {
            let mut df = into_flex(delta);
            let af = into_flex(act.clone());
            let a = view(&af);
            let d = view_mut(&mut df);
            let slope = slope as f32;
            // Branch-free: the sign of an activation is as good as random, so a branch would
            // mispredict about half the time.
            for (dv, av) in d.iter_mut().zip(a) {
                *dv *= if *av > 0.0 { 1.0 } else { slope };
            }
            from_flex(df)
        }
    }
}

/// One Adam step on a parameter tensor with its moment estimates; returns (p, m, v).
pub fn adam<const D: usize>(
    path: KernelPath,
    p: Tensor<D>,
    m: Tensor<D>,
    v: Tensor<D>,
    g: Tensor<D>,
    s: &AdamStep,
) -> (Tensor<D>, Tensor<D>, Tensor<D>) {
    match path {
        KernelPath::Tensor => {
            let g = if s.weight_decay != 0.0 {
                g + p.clone().mul_scalar(s.weight_decay)
            } else {
                g
            };
            let m = m.mul_scalar(s.beta1) + g.clone().mul_scalar(1.0 - s.beta1);
            let v = v.mul_scalar(s.beta2) + g.square().mul_scalar(1.0 - s.beta2);
            let step = m.clone().mul_scalar(s.lr_t) / (v.clone().sqrt().add_scalar(s.eps_t));
            (p - step, m, v)
        }
        KernelPath::Flex => {
            let mut pf = into_flex(p);
            let mut mf = into_flex(m);
            let mut vf = into_flex(v);
            let gf = into_flex(g);
            let gs = view(&gf);
            let (b1, b2) = (s.beta1, s.beta2);
            {
                let ps = view_mut(&mut pf);
                let ms = view_mut(&mut mf);
                let vs = view_mut(&mut vf);
                for i in 0..ps.len() {
                    let g = gs[i] + s.weight_decay * ps[i];
                    let m = ms[i] * b1 + g * (1.0 - b1);
                    let v = vs[i] * b2 + (g * g) * (1.0 - b2);
                    ms[i] = m;
                    vs[i] = v;
                    ps[i] -= (m * s.lr_t) / (v.sqrt() + s.eps_t);
                }
            }
            (from_flex(pf), from_flex(mf), from_flex(vf))
        }
    }
}
