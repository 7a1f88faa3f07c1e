//! Every loop written for the CPU's speed, in one place: the host execution of the engine and
//! of the samplers, and what they run on.
//!
//! - [`simd`]: runtime dispatch of a loop to the CPU's widest instruction set (AVX2 or
//!   AVX-512 through `pulp`, no `unsafe` of ours), the same bits at every level;
//! - one replica's MLP forward and backward over its points ([`ReplicaNet`]), in the two
//!   layouts the work needs: [`feature_major`] (`[width, points]`: every inner loop runs over
//!   the points; [002]'s 1-W-1 networks, whose layers are too small for a matrix product to
//!   pay) and [`point_major`] (`[points, width]`, register-tiled products; E1–E3's
//!   1-128-64-32-1 and wider);
//! - the dispatched passes ([`forward_at`], [`backward_at`], [`adam_at`]) that the engine's
//!   host execution (`crate::engine`'s `host.rs`) and the samplers' host loops
//!   (`uqbench-samplers`) run the networks through;
//! - [`kernels`]: fused in-place element-wise loops on flex tensors (bias and activation,
//!   their backward, Adam), for the tensor execution on the CPU;
//! - [`peak`]: the machine's own f32 peaks, measured in the process (a large product
//!   through the same register tiles, and independent fused multiply-adds), which
//!   `bench train` reports its rate against.
//!
//! Whether host loops run, and at which instruction set, are settings of the run
//! (`Resources::host_loops` and `Resources::simd`, from `Compute`), recorded in `run.json`.

pub mod feature_major;
pub mod kernels;
pub mod math;
pub mod peak;
pub(crate) mod point_major;
pub mod simd;

pub use point_major::PointMajorNet;
use simd::Lanes;

/// Which part of a network a [`ReplicaNet`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Every layer, the last one linear: the network's outputs.
    Whole,
    /// Every layer but the last, the last one run activated: the last hidden layer's units,
    /// which a stochastic layer and the last linear layer take from there. The parameters
    /// keep the whole network's layout.
    Body,
}

/// One replica's MLP (leaky-ReLU hidden layers) on the host, over its points. Parameters are
/// flat, the whole network's layout: W₀ … W_L then b₀ … b_L (W_l row-major `[in, out]`).
/// Inputs are feature-major (`[d, points]`), outputs and δ at the outputs point-major
/// (`[points, outputs]`). Callers run it through [`simd::dispatch`].
pub trait ReplicaNet {
    /// The lanes the reductions run on (set by the [`simd::Op`] that runs the net).
    fn set_lanes(&mut self, lanes: Lanes);
    /// The outputs of the part at the points of `xt` (`[d, n]`) into `out` (`[n, outputs]`),
    /// keeping the activations.
    fn forward(&mut self, theta: &[f32], xt: &[f32], out: &mut [f32]);
    /// ∇θ of Σ_p Σ_j δ_p,j·out_p,j into `grad` (the part's slots of it), after a
    /// [`ReplicaNet::forward`] at `xt`.
    fn backward(&mut self, theta: &[f32], xt: &[f32], delta_out: &[f32], grad: &mut [f32]);
    /// ∇ₓ of the same sum into `gx` (`[d, n]`), after a [`ReplicaNet::backward`].
    fn input_gradient(&mut self, theta: &[f32], gx: &mut [f32]);
}

/// [`ReplicaNet::forward`] dispatched at `level`: one compiled copy of the network's loops
/// per instruction set, whichever loop calls it (inlining a whole training loop into each
/// dispatched copy multiplied the register-tiled products' code and the compile time).
pub fn forward_at<N: ReplicaNet>(
    level: simd::Level,
    net: &mut N,
    theta: &[f32],
    xt: &[f32],
    out: &mut [f32],
) {
    simd::dispatch_at(
        level,
        NetOp::Forward {
            net,
            theta,
            xt,
            out,
        },
    );
}

/// [`ReplicaNet::backward`], then with `gx` [`ReplicaNet::input_gradient`], dispatched at
/// `level`.
pub fn backward_at<N: ReplicaNet>(
    level: simd::Level,
    net: &mut N,
    theta: &[f32],
    xt: &[f32],
    delta: &[f32],
    grad: &mut [f32],
    gx: Option<&mut [f32]>,
) {
    simd::dispatch_at(
        level,
        NetOp::Backward {
            net,
            theta,
            xt,
            delta,
            grad,
            gx,
        },
    );
}

/// A network operation for [`simd::dispatch_at`].
enum NetOp<'a, N> {
    Forward {
        net: &'a mut N,
        theta: &'a [f32],
        xt: &'a [f32],
        out: &'a mut [f32],
    },
    Backward {
        net: &'a mut N,
        theta: &'a [f32],
        xt: &'a [f32],
        delta: &'a [f32],
        grad: &'a mut [f32],
        gx: Option<&'a mut [f32]>,
    },
}

impl<N: ReplicaNet> simd::Op for NetOp<'_, N> {
    type Output = ();

    #[inline(always)]
    fn call(self, lanes: Lanes) {
        match self {
            NetOp::Forward {
                net,
                theta,
                xt,
                out,
            } => {
                net.set_lanes(lanes);
                net.forward(theta, xt, out);
            }
            NetOp::Backward {
                net,
                theta,
                xt,
                delta,
                grad,
                gx,
            } => {
                net.set_lanes(lanes);
                net.backward(theta, xt, delta, grad);
                if let Some(gx) = gx {
                    net.input_gradient(theta, gx);
                }
            }
        }
    }
}

/// [`kernels::adam_slice`] dispatched at `level`.
pub fn adam_at(
    level: simd::Level,
    p: &mut [f32],
    m: &mut [f32],
    v: &mut [f32],
    g: &[f32],
    step: &kernels::AdamStep,
) {
    struct Adam<'a> {
        p: &'a mut [f32],
        m: &'a mut [f32],
        v: &'a mut [f32],
        g: &'a [f32],
        step: &'a kernels::AdamStep,
    }
    impl simd::Op for Adam<'_> {
        type Output = ();
        #[inline(always)]
        fn call(self, _: Lanes) {
            kernels::adam_slice(self.p, self.m, self.v, self.g, self.step);
        }
    }
    simd::dispatch_at(level, Adam { p, m, v, g, step });
}

/// The layer offsets of a flat parameter vector: W₀ … W_L, then b₀ … b_L. Returns (the
/// offsets of the W_l, of the b_l, the dimension).
pub fn offsets(layers: &[(usize, usize)]) -> (Vec<usize>, Vec<usize>, usize) {
    let (mut w_at, mut b_at, mut at) = (Vec::new(), Vec::new(), 0);
    for &(i, o) in layers {
        w_at.push(at);
        at += i * o;
    }
    for &(_, o) in layers {
        b_at.push(at);
        at += o;
    }
    (w_at, b_at, at)
}

/// `out` (`[n, w]`) from `src` (`[w, n]`), or back: a transpose of a row-major matrix with
/// `rows` rows.
#[inline(always)]
pub fn transpose_into(src: &[f32], rows: usize, out: &mut [f32]) {
    let cols = src.len() / rows.max(1);
    for (r, row) in src.chunks_exact(cols).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::feature_major::FeatureMajorNet;
    use super::point_major::PointMajorNet;
    use super::*;

    /// Σ_p Σ_j δ_p,j·out_p,j (in f64) of `net`'s part, its gradient, and the signs of the
    /// pre-activations the part ran.
    fn run<N: ReplicaNet>(
        net: &mut N,
        theta: &[f32],
        xt: &[f32],
        delta: &[f32],
    ) -> (f64, Vec<f32>) {
        let mut out = vec![0.0f32; delta.len()];
        net.forward(theta, xt, &mut out);
        let mut grad = vec![0.0f32; theta.len()];
        net.backward(theta, xt, delta, &mut grad);
        let value = (out.iter().zip(delta))
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        (value, grad)
    }

    #[test]
    fn both_layouts_run_the_whole_net_and_its_body_with_the_right_gradient() {
        // A 2-7-5-3 network at 11 points: the whole net (three outputs, point-major) and its
        // body (the five units of the last hidden layer, activated). The two layouts compute
        // the same sums in different orders (f32: agree to ~1e-6), and the gradient of
        // Σ δ·out matches central differences where the step keeps every kink's side (f is
        // then affine in one parameter: exact but for f32 rounding, ≲ 1e-2 on the quotient).
        let layers = vec![(2, 7), (7, 5), (5, 3)];
        let n = 11;
        let (_, _, dim) = offsets(&layers);
        let theta: Vec<f32> = (0..dim).map(|i| ((i as f32) * 0.377).sin() * 0.6).collect();
        let xt: Vec<f32> = (0..2 * n).map(|i| ((i as f32) * 1.91).cos()).collect();
        for (part, width) in [(Part::Whole, 3), (Part::Body, 5)] {
            let delta: Vec<f32> = (0..n * width).map(|i| ((i as f32) * 0.61).sin()).collect();
            let mut fm = FeatureMajorNet::part(layers.clone(), 0.01, n, part);
            let mut pm = PointMajorNet::new(layers.clone(), 0.01, n, part);
            let (vf, gf) = run(&mut fm, &theta, &xt, &delta);
            let (vp, gp) = run(&mut pm, &theta, &xt, &delta);
            assert!((vf - vp).abs() < 1e-5, "{part:?}: {vf} vs {vp}");
            for (i, (a, b)) in gf.iter().zip(&gp).enumerate() {
                assert!((a - b).abs() < 1e-5, "{part:?}: gradient {i}: {a} vs {b}");
            }
            // The body leaves the last layer's slots alone (zero here).
            if part == Part::Body {
                let (w_at, b_at, _) = offsets(&layers);
                assert!(gf[w_at[2]..w_at[2] + 15].iter().all(|&g| g == 0.0));
                assert_eq!(gf[b_at[2]..b_at[2] + 3], [0.0; 3]);
            }
            let mut checked = 0;
            for i in 0..dim {
                let h = 0.02f32;
                let (mut up, mut down) = (theta.clone(), theta.clone());
                up[i] += h;
                down[i] -= h;
                let value = |th: &[f32]| {
                    run(
                        &mut FeatureMajorNet::part(layers.clone(), 0.01, n, part),
                        th,
                        &xt,
                        &delta,
                    )
                    .0
                };
                let fd = (value(&up) - value(&down)) / (2.0 * f64::from(h));
                // A parameter whose step crosses a kink gives a quotient between the two
                // sides' slopes; those are few, and skipped by their disagreement with the
                // one-sided quotients.
                let (fu, fl) = (
                    (value(&up) - vf) / f64::from(h),
                    (vf - value(&down)) / f64::from(h),
                );
                if (fu - fl).abs() > 1e-2 * (1.0 + fu.abs()) {
                    continue;
                }
                checked += 1;
                let g = f64::from(gf[i]);
                assert!(
                    (fd - g).abs() <= 1e-2 * (1.0 + g.abs()),
                    "{part:?}: θ{i}: {g} vs {fd}"
                );
            }
            assert!(
                checked >= dim * 3 / 4,
                "{part:?}: only {checked} of {dim} checked"
            );
        }
    }
}
