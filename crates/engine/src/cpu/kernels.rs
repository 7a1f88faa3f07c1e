//! The element-wise parts of a training step, written once with burn tensor operations (every
//! backend) and once as fused in-place loops for burn's flex backend.
//!
//! The fused versions are burn backend extensions in the sense of burn 0.22: they take the
//! flex primitive out of the tensor (`Tensor::try_into_primitive::<Flex>`), update its
//! storage in place, and put it back (`Tensor::from_primitive`). Each replaces three to eight
//! tensor operations (each a pass over memory and usually an allocation) with one pass.
//! Both versions compute the same formulas per element, so results agree to rounding; each
//! is exactly per-element or per-replica, so a replica's numbers never depend on the others.
//! The fused loops run through [`simd::dispatch`]: AVX2 where the CPU has it, the same bits.

use burn::backend::flex::FlexTensor;
use burn::backend::Flex;
use burn::tensor::Tensor;

use crate::cpu::simd;

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

#[inline(always)]
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
            simd::dispatch(BiasAct {
                out,
                bias,
                shape: [r, n, o],
                slope,
                activate,
            });
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
            simd::dispatch(LeakyBackward { d, a, slope });
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
            {
                let ps = view_mut(&mut pf);
                let ms = view_mut(&mut mf);
                let vs = view_mut(&mut vf);
                simd::dispatch(Adam {
                    p: ps,
                    m: ms,
                    v: vs,
                    g: gs,
                    step: s,
                });
            }
            (from_flex(pf), from_flex(mf), from_flex(vf))
        }
    }
}

/// One Adam step on host slices, element by element (the flex path's loop, and the host
/// trainers'): p, m and v updated in place from the gradient g, with λ·p added to g.
#[inline(always)]
pub fn adam_slice(p: &mut [f32], m: &mut [f32], v: &mut [f32], g: &[f32], s: &AdamStep) {
    let n = p.len();
    let (m, v, g) = (&mut m[..n], &mut v[..n], &g[..n]);
    let (b1, b2, lr_t, eps_t, wd) = (s.beta1, s.beta2, s.lr_t, s.eps_t, s.weight_decay);
    for i in 0..n {
        let gi = g[i] + wd * p[i];
        let mi = m[i] * b1 + gi * (1.0 - b1);
        let vi = v[i] * b2 + (gi * gi) * (1.0 - b2);
        m[i] = mi;
        v[i] = vi;
        p[i] -= (mi * lr_t) / (vi.sqrt() + eps_t);
    }
}

// The fused loops as operations for [`simd::dispatch`]: structs rather than closures, because
// a closure's body is compiled in a call shim that is not inlined into the AVX2 copy.

/// z + b, then the leaky ReLU when `activate`, in place (`out`: `[r, n, o]`, `bias`: `[r, o]`).
struct BiasAct<'a> {
    out: &'a mut [f32],
    bias: &'a [f32],
    shape: [usize; 3],
    slope: f32,
    activate: bool,
}

impl simd::Op for BiasAct<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self, _: simd::Lanes) {
        let [r, n, o] = self.shape;
        for rep in 0..r {
            let brow = &self.bias[rep * o..(rep + 1) * o];
            for row in self.out[rep * n * o..(rep + 1) * n * o].chunks_exact_mut(o) {
                if self.activate {
                    for (v, bb) in row.iter_mut().zip(brow) {
                        *v = leaky(*v + bb, self.slope);
                    }
                } else {
                    for (v, bb) in row.iter_mut().zip(brow) {
                        *v += bb;
                    }
                }
            }
        }
    }
}

/// δ·φ'(a) in place.
struct LeakyBackward<'a> {
    d: &'a mut [f32],
    a: &'a [f32],
    slope: f32,
}

impl simd::Op for LeakyBackward<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self, _: simd::Lanes) {
        for (dv, av) in self.d.iter_mut().zip(self.a) {
            *dv *= if *av > 0.0 { 1.0 } else { self.slope };
        }
    }
}

/// [`adam_slice`] as an operation.
struct Adam<'a> {
    p: &'a mut [f32],
    m: &'a mut [f32],
    v: &'a mut [f32],
    g: &'a [f32],
    step: &'a AdamStep,
}

impl simd::Op for Adam<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self, _: simd::Lanes) {
        adam_slice(self.p, self.m, self.v, self.g, self.step);
    }
}
