//! One replica's MLP (leaky-ReLU hidden layers, one linear output layer) forward and
//! backward over its points, with activations stored feature-major (`[width, points]`) so
//! that every inner loop runs over the points, contiguous and vectorised. A replica's
//! parameters and activations (a few kB for [002]'s 1-W-1 networks) stay in cache, and
//! nothing is allocated per pass. HMC's host chains (`uqbench_samplers`' `hmc/host.rs`) and
//! the engine's host trainer for small networks (`trainer/host.rs`) run on it, MFVI's network
//! (`mfvi/net.rs`) on its [`combine`] and [`feature_major`]; callers run it through
//! [`crate::cpu::simd::dispatch`].
//!
//! Every reduction has its order written out (eight partial sums added in a fixed order, on
//! [`Lanes`]), so the loops give the same bits at any vector width.

use super::{offsets, transpose_into, Part, ReplicaNet};
use crate::cpu::simd::Lanes;

impl ReplicaNet for FeatureMajorNet {
    #[inline(always)]
    fn set_lanes(&mut self, lanes: Lanes) {
        self.lanes = lanes;
    }

    #[inline(always)]
    fn forward(&mut self, theta: &[f32], xt: &[f32], out: &mut [f32]) {
        FeatureMajorNet::forward(self, theta, xt, out);
    }

    #[inline(always)]
    fn backward(&mut self, theta: &[f32], xt: &[f32], delta_out: &[f32], grad: &mut [f32]) {
        FeatureMajorNet::backward(self, theta, xt, delta_out, grad);
    }

    #[inline(always)]
    fn input_gradient(&mut self, theta: &[f32], gx: &mut [f32]) {
        FeatureMajorNet::input_gradient(self, theta, gx);
    }
}

/// One replica's network: layer shapes, flat parameter layout W₀ … W_L then b₀ … b_L (the
/// order in which the tensor version draws momenta; W_l row-major `[in, out]`), and scratch
/// for every layer's activations, feature-major (`[width, points]`, so that every inner loop
/// runs over the points, contiguous and vectorised).
pub struct FeatureMajorNet {
    /// (in, out) per layer.
    layers: Vec<(usize, usize)>,
    /// The layers run: all of them ([`Part::Whole`]) or all but the last ([`Part::Body`]).
    run: usize,
    /// Offsets of W_l and b_l in the flat parameters.
    w_at: Vec<usize>,
    b_at: Vec<usize>,
    /// Parameters (weights, then biases).
    pub dim: usize,
    slope: f32,
    /// Per layer, its input `[in, points]` (layer 0: empty; the data is read in place).
    acts: Vec<Vec<f32>>,
    /// Pre-activations per layer `[out, points]`.
    pre: Vec<Vec<f32>>,
    /// δ buffers `[width, points]`, two alternating.
    delta: [Vec<f32>; 2],
    /// What the reductions run on: set by the [`crate::cpu::simd::Op`] that runs the network to
    /// the lanes it was given (the baseline's until then).
    pub lanes: Lanes,
}

/// Inputs feature-major `[d, points]` from row-major `[points, d]`: the layout every fused
/// loop reads.
pub fn feature_major(x: &[f32], d: usize) -> Vec<f32> {
    let points = x.len() / d;
    (0..d * points)
        .map(|i| x[(i % points) * d + i / points])
        .collect()
}

/// y += a·x, element by element.
#[inline(always)]
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (yi, &xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// `out`_p = init + Σ_k c_k·rows_k,p at every point p, for the rows of `rows` (`[K, n]`, n =
/// `out.len()`) and c_k = `coefs[k·stride]`, adding in the order k = 0, 1, …: the sums of
/// `fill(init)` and then one [`axpy`] per row, bit for bit. Thirty-two points at a time stay
/// in registers while every row is added, instead of one pass over `out` (a load and a
/// store per element) per row.
#[inline(always)]
pub fn combine(out: &mut [f32], init: f32, coefs: &[f32], stride: usize, rows: &[f32]) {
    const BLOCK: usize = 32;
    let n = out.len();
    if n == 0 {
        return;
    }
    let count = rows.len() / n;
    let mut blocks = out.chunks_exact_mut(BLOCK);
    let mut at = 0;
    for o in &mut blocks {
        let mut acc = [init; BLOCK];
        for k in 0..count {
            let c = coefs[k * stride];
            let r: &[f32; BLOCK] = rows[k * n + at..k * n + at + BLOCK]
                .try_into()
                .expect("a block");
            for p in 0..BLOCK {
                acc[p] += c * r[p];
            }
        }
        o.copy_from_slice(&acc);
        at += BLOCK;
    }
    let tail = blocks.into_remainder();
    tail.fill(init);
    for k in 0..count {
        axpy(tail, coefs[k * stride], &rows[k * n + at..(k + 1) * n]);
    }
}

impl FeatureMajorNet {
    /// The whole network of these (in, out) layers, leaky-ReLU slope `slope`, with scratch
    /// for `points` points.
    pub fn new(layers: Vec<(usize, usize)>, slope: f64, points: usize) -> FeatureMajorNet {
        FeatureMajorNet::part(layers, slope, points, Part::Whole)
    }

    /// The network's `part` (see [`Part`]).
    pub fn part(
        layers: Vec<(usize, usize)>,
        slope: f64,
        points: usize,
        part: Part,
    ) -> FeatureMajorNet {
        let (w_at, b_at, at) = offsets(&layers);
        let widest = layers.iter().map(|&(i, o)| i.max(o)).max().unwrap_or(1);
        FeatureMajorNet {
            acts: (layers.iter().enumerate())
                .map(|(l, &(i, _))| {
                    if l == 0 {
                        Vec::new()
                    } else {
                        vec![0.0; points * i]
                    }
                })
                .collect(),
            pre: layers.iter().map(|&(_, o)| vec![0.0; points * o]).collect(),
            delta: [vec![0.0; points * widest], vec![0.0; points * widest]],
            run: match part {
                Part::Whole => layers.len(),
                Part::Body => layers.len() - 1,
            },
            layers,
            w_at,
            b_at,
            dim: at,
            slope: slope as f32,
            lanes: Lanes::BASELINE,
        }
    }

    /// Outputs per point: the last layer's, or the body's units.
    pub fn outputs(&self) -> usize {
        match self.run == self.layers.len() {
            true => self.layers[self.run - 1].1,
            false => self.layers[self.run].0,
        }
    }

    /// The part's outputs at `n` points (`xt`: feature-major `[d, n]`) into `out` (`[n,
    /// outputs]`), keeping the activations.
    #[inline(always)]
    pub fn forward(&mut self, theta: &[f32], xt: &[f32], out: &mut [f32]) {
        let n = out.len() / self.outputs();
        let last = self.layers.len() - 1;
        for (l, &(din, dout)) in self.layers[..self.run].iter().enumerate() {
            let w = &theta[self.w_at[l]..self.w_at[l] + din * dout];
            let b = &theta[self.b_at[l]..self.b_at[l] + dout];
            let (before, after) = self.acts.split_at_mut(l + 1);
            let input: &[f32] = if l == 0 { xt } else { &before[l] };
            let z = &mut self.pre[l];
            let slope = self.slope;
            for j in 0..dout {
                let zj = &mut z[j * n..(j + 1) * n];
                if din == 1 && l < last {
                    // One input (a 1-D problem's first layer): z and φ(z) in one pass; the
                    // same numbers as the general loop (b + w·x, then φ).
                    let (bj, wj) = (b[j], w[j]);
                    let h = &mut after[0][j * n..(j + 1) * n];
                    for ((zv, hv), &xv) in zj.iter_mut().zip(h.iter_mut()).zip(&input[..n]) {
                        *zv = bj + wj * xv;
                        *hv = if *zv > 0.0 { *zv } else { slope * *zv };
                    }
                    continue;
                }
                combine(zj, b[j], &w[j..], dout, &input[..din * n]);
                if l < last {
                    for (h, &zv) in after[0][j * n..(j + 1) * n].iter_mut().zip(zj.iter()) {
                        *h = if zv > 0.0 { zv } else { slope * zv };
                    }
                }
            }
        }
        // The outputs, point-major: the last layer's pre-activations, or the body's units.
        let (rows, from) = match self.run == self.layers.len() {
            true => (self.layers[last].1, &self.pre[last]),
            false => (self.layers[self.run].0, &self.acts[self.run]),
        };
        if rows == 1 {
            out.copy_from_slice(&from[..n]);
        } else {
            transpose_into(&from[..rows * n], rows, out);
        }
    }

    /// ∇ of Σ_p Σ_j δ_p,j·out_p,j with respect to θ into `grad`, for δ at the outputs (`[n,
    /// outputs]`) and the activations of the last [`FeatureMajorNet::forward`] at the same
    /// inputs `xt`.
    #[inline(always)]
    pub fn backward(&mut self, theta: &[f32], xt: &[f32], delta_out: &[f32], grad: &mut [f32]) {
        let width = self.outputs();
        let n = delta_out.len() / width;
        let mut cur = 0usize;
        if width == 1 {
            self.delta[cur][..n].copy_from_slice(delta_out);
        } else {
            transpose_into(delta_out, n, &mut self.delta[cur][..width * n]);
        }
        if self.run < self.layers.len() {
            // The body's outputs are activated: δ at its last pre-activation.
            let z = &self.pre[self.run - 1][..width * n];
            for (d, &zv) in self.delta[cur].iter_mut().zip(z) {
                *d *= if zv > 0.0 { 1.0 } else { self.slope };
            }
        }
        for l in (0..self.run).rev() {
            let (din, dout) = self.layers[l];
            let w = &theta[self.w_at[l]..self.w_at[l] + din * dout];
            let [d0, d1] = &mut self.delta;
            let (dl, dprev) = if cur == 0 { (&*d0, d1) } else { (&*d1, d0) };
            let input: &[f32] = if l == 0 { xt } else { &self.acts[l] };
            let gw = &mut grad[self.w_at[l]..self.w_at[l] + din * dout];
            // ∂/∂W[k, j] = Σ_p a_k,p·δ_j,p: each row of the wider side against the other's
            // (four dot products in flight), the same sums either way.
            if dout == 1 {
                self.lanes.dot_rows(&dl[..n], &input[..din * n], gw);
            } else {
                for k in 0..din {
                    let a = &input[k * n..(k + 1) * n];
                    (self.lanes).dot_rows(a, &dl[..dout * n], &mut gw[k * dout..(k + 1) * dout]);
                }
            }
            let gb = &mut grad[self.b_at[l]..self.b_at[l] + dout];
            self.lanes.sum_rows(&dl[..dout * n], n, gb);
            if l > 0 {
                // δ at the previous layer's output, times φ'(z) of its pre-activation.
                let z = &self.pre[l - 1];
                let slope = self.slope;
                for k in 0..din {
                    let dk = &mut dprev[k * n..(k + 1) * n];
                    if dout == 1 {
                        // One output (the last layer): w·δ·φ'(z) in one pass, the same
                        // numbers as the general loop (0 + w·δ, then the mask).
                        let wk = w[k];
                        let (d0, zk) = (&dl[..n], &z[k * n..(k + 1) * n]);
                        for ((d, &dv), &zv) in dk.iter_mut().zip(d0).zip(zk) {
                            *d = wk * dv * if zv > 0.0 { 1.0 } else { slope };
                        }
                        continue;
                    }
                    combine(dk, 0.0, &w[k * dout..], 1, &dl[..dout * n]);
                    for (d, &zv) in dk.iter_mut().zip(&z[k * n..(k + 1) * n]) {
                        *d *= if zv > 0.0 { 1.0 } else { slope };
                    }
                }
            }
            cur = 1 - cur;
        }
    }

    /// ∇ₓ of Σ_p δ_p·f(x_p) at the inputs of the last [`FeatureMajorNet::backward`] (`[n]`
    /// points) into `gx` (feature-major `[d, n]`): ∂/∂x_k,p = Σ_j W₀[k, j]·δ₀_j,p, with δ₀ the
    /// first layer's δ, which that pass left in buffer (L − 1) mod 2 for the L layers it ran
    /// (layer l's δ is in buffer (L − 1 − l) mod 2: the output's in 0, and each layer writes
    /// the other).
    #[inline(always)]
    pub fn input_gradient(&self, theta: &[f32], gx: &mut [f32]) {
        let (din, dout) = self.layers[0];
        let n = gx.len() / din;
        let w = &theta[self.w_at[0]..self.w_at[0] + din * dout];
        let d0 = &self.delta[(self.run - 1) % 2][..dout * n];
        for (k, gk) in gx.chunks_exact_mut(n).enumerate() {
            combine(gk, 0.0, &w[k * dout..], 1, d0);
        }
    }
}
