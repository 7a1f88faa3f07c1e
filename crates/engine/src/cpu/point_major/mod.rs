//! Register-blocked host loops for the engine's larger networks (E1–E3's 1-128-64-32-1,
//! `tcc`'s width 40): one replica's MLP forward and backward over its points, activations
//! point-major (`[points, width]`, the tensors' layout), every matrix product a register
//! tile of up to five rows × sixteen columns whose partial sums stay in registers while the
//! inner dimension runs. [`crate::cpu::feature_major`]'s feature-major loops suit [002]'s 1-W-1 networks
//! (a layer is in·out = W multiply-adds per point); for layers of thousands of weights they
//! do one pass over the points per weight, and burn's gemm pays for packing, dispatch and a
//! fresh output tensor per product on a chunk's small matrices (`docs/performance.md`).
//!
//! Every sum has its order written out: an output starts at its bias (or zero) and then
//! takes the products in the order of the inner index, each as one fused multiply-add (a·b + c
//! rounded once, IEEE 754's fusedMultiplyAdd: `f32::mul_add` at the baseline, `vfmadd` in
//! AVX2 and AVX-512 registers), so [`crate::cpu::simd::dispatch`]'s baseline, AVX2 and AVX-512
//! copies give the same bits (tested). A fused step is one instruction where a product and a
//! sum are two, which is what lets the products approach the machine's FMA-bound peak (issue
//! 61; before 2026-11-28 they were unfused, so results from earlier builds differ in the last
//! bits and, through training, at nearby weights). The order differs from gemm's, so from the same seeds a replica ends
//! at nearby, not identical, weights: equal in distribution (docs/performance.md).

mod product;
#[cfg(test)]
mod tests;

use self::product::{transpose, Layout, Product};
use super::{offsets, Part, ReplicaNet};
use crate::cpu::simd::Lanes;

/// C = A·B (`c`: `[m, n]`, `a`: `[m, k]`, `b`: `[k, n]`, all row-major) through the same
/// register tiles as the networks' products: what `cpu::peak` times as the machine's own
/// large-product rate.
#[inline(always)]
pub(crate) fn product(
    lanes: Lanes,
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) {
    Product {
        m,
        n,
        k,
        a,
        layout: Layout::Rows(k),
        b,
        bias: None,
    }
    .run(lanes, c);
}

/// One replica's network, point-major: layer shapes, flat parameters W₀ … W_L then b₀ … b_L
/// (W_l row-major `[in, out]`, [`crate::cpu::feature_major::Net`]'s layout), and scratch.
pub struct PointMajorNet {
    /// (in, out) per layer.
    layers: Vec<(usize, usize)>,
    /// The layers run: all of them ([`Part::Whole`]) or all but the last ([`Part::Body`]).
    run: usize,
    w_at: Vec<usize>,
    b_at: Vec<usize>,
    slope: f32,
    /// The inputs of the last forward pass, point-major `[points, d]`.
    x: Vec<f32>,
    /// Pre-activations per layer `[points, out]`.
    pre: Vec<Vec<f32>>,
    /// Activations per hidden layer `[points, out]`.
    acts: Vec<Vec<f32>>,
    /// δ buffers `[points, width]`, two alternating; `first` holds the first layer's after a
    /// backward pass.
    delta: [Vec<f32>; 2],
    first: usize,
    /// W_lᵀ, for δ·Wᵀ.
    wt: Vec<f32>,
    /// ∇ₓ point-major, for [`ReplicaNet::input_gradient`].
    gx: Vec<f32>,
    lanes: Lanes,
}

impl PointMajorNet {
    /// The network's `part` (see [`Part`]).
    pub fn new(layers: Vec<(usize, usize)>, slope: f64, points: usize, part: Part) -> Self {
        let (w_at, b_at, _) = offsets(&layers);
        let widest = layers.iter().map(|&(i, o)| i.max(o)).max().unwrap_or(1);
        let largest = layers.iter().map(|&(i, o)| i * o).max().unwrap_or(1);
        PointMajorNet {
            x: vec![0.0; points * layers.first().map_or(1, |l| l.0)],
            gx: vec![0.0; points * layers.first().map_or(1, |l| l.0)],
            pre: layers.iter().map(|&(_, o)| vec![0.0; points * o]).collect(),
            acts: layers.iter().map(|&(_, o)| vec![0.0; points * o]).collect(),
            delta: [vec![0.0; points * widest], vec![0.0; points * widest]],
            first: 0,
            wt: vec![0.0; largest],
            run: match part {
                Part::Whole => layers.len(),
                Part::Body => layers.len() - 1,
            },
            layers,
            w_at,
            b_at,
            slope: slope as f32,
            lanes: Lanes::BASELINE,
        }
    }
}

impl PointMajorNet {
    /// Outputs per point: the last layer's, or the body's units.
    fn outputs(&self) -> usize {
        self.layers[self.run - 1].1
    }
}

impl ReplicaNet for PointMajorNet {
    #[inline(always)]
    fn set_lanes(&mut self, lanes: Lanes) {
        self.lanes = lanes;
    }

    #[inline(always)]
    fn forward(&mut self, theta: &[f32], xt: &[f32], out: &mut [f32]) {
        let n = out.len() / self.outputs();
        let d = self.layers[0].0;
        // Point-major inputs from the feature-major ones.
        for (k, col) in xt[..d * n].chunks_exact(n).enumerate() {
            for (p, &v) in col.iter().enumerate() {
                self.x[p * d + k] = v;
            }
        }
        let last = self.layers.len() - 1;
        for (l, &(din, dout)) in self.layers[..self.run].iter().enumerate() {
            let (before, after) = self.acts.split_at_mut(l);
            let input: &[f32] = if l == 0 { &self.x } else { &before[l - 1] };
            let z = &mut self.pre[l][..n * dout];
            Product {
                m: n,
                n: dout,
                k: din,
                a: &input[..n * din],
                layout: Layout::Rows(din),
                b: &theta[self.w_at[l]..self.w_at[l] + din * dout],
                bias: Some(&theta[self.b_at[l]..self.b_at[l] + dout]),
            }
            .run(self.lanes, z);
            if l < last {
                let slope = self.slope;
                for (h, &zv) in after[0][..n * dout].iter_mut().zip(z.iter()) {
                    *h = if zv > 0.0 { zv } else { slope * zv };
                }
            }
        }
        // The outputs, point-major: the last layer's pre-activations or the body's units.
        let from = match self.run == self.layers.len() {
            true => &self.pre[last],
            false => &self.acts[self.run - 1],
        };
        out.copy_from_slice(&from[..out.len()]);
    }

    #[inline(always)]
    fn backward(&mut self, theta: &[f32], _xt: &[f32], delta_out: &[f32], grad: &mut [f32]) {
        let n = delta_out.len() / self.outputs();
        let mut cur = 0usize;
        self.delta[cur][..delta_out.len()].copy_from_slice(delta_out);
        if self.run < self.layers.len() {
            // The body's outputs are activated: δ at its last pre-activation.
            let z = &self.pre[self.run - 1][..delta_out.len()];
            for (d, &zv) in self.delta[cur].iter_mut().zip(z) {
                *d *= if zv > 0.0 { 1.0 } else { self.slope };
            }
        }
        for l in (0..self.run).rev() {
            let (din, dout) = self.layers[l];
            let w = &theta[self.w_at[l]..self.w_at[l] + din * dout];
            let [d0, d1] = &mut self.delta;
            let (dl, dprev) = if cur == 0 { (&*d0, d1) } else { (&*d1, d0) };
            let dl = &dl[..n * dout];
            let input: &[f32] = if l == 0 { &self.x } else { &self.acts[l - 1] };
            let input = &input[..n * din];
            let gw = &mut grad[self.w_at[l]..self.w_at[l] + din * dout];
            // ∂/∂W[i, j] = Σ_p a_p,i·δ_p,j, the points in order. One output: the same sums
            // as the row [1, in] = δᵀ·A, whose columns are the vector lanes.
            if dout == 1 {
                Product {
                    m: 1,
                    n: din,
                    k: n,
                    a: dl,
                    layout: Layout::Rows(n),
                    b: input,
                    bias: None,
                }
                .run(self.lanes, gw);
            } else {
                Product {
                    m: din,
                    n: dout,
                    k: n,
                    a: input,
                    layout: Layout::Cols(din),
                    b: dl,
                    bias: None,
                }
                .run(self.lanes, gw);
            }
            // ∂/∂b[j] = Σ_p δ_p,j, the points in order.
            let gb = &mut grad[self.b_at[l]..self.b_at[l] + dout];
            gb.fill(0.0);
            for row in dl.chunks_exact(dout) {
                for (g, &v) in gb.iter_mut().zip(row) {
                    *g += v;
                }
            }
            if l > 0 {
                // δ at the previous layer's output, δ·Wᵀ, times φ'(z) of its pre-activation.
                let wt = &mut self.wt[..din * dout];
                transpose(self.lanes, w, din, dout, wt);
                let dp = &mut dprev[..n * din];
                Product {
                    m: n,
                    n: din,
                    k: dout,
                    a: dl,
                    layout: Layout::Rows(dout),
                    b: wt,
                    bias: None,
                }
                .run(self.lanes, dp);
                let slope = self.slope;
                for (dv, &zv) in dp.iter_mut().zip(&self.pre[l - 1][..n * din]) {
                    *dv *= if zv > 0.0 { 1.0 } else { slope };
                }
            }
            self.first = cur;
            cur = 1 - cur;
        }
    }

    #[inline(always)]
    fn input_gradient(&mut self, theta: &[f32], gx: &mut [f32]) {
        let (din, dout) = self.layers[0];
        let n = gx.len() / din;
        let w = &theta[self.w_at[0]..self.w_at[0] + din * dout];
        let wt = &mut self.wt[..din * dout];
        transpose(self.lanes, w, din, dout, wt);
        // ∂/∂x_p,k = Σ_j δ₀_p,j·W₀[k, j], point-major, then feature-major into `gx`.
        let g = &mut self.gx[..n * din];
        Product {
            m: n,
            n: din,
            k: dout,
            a: &self.delta[self.first][..n * dout],
            layout: Layout::Rows(dout),
            b: wt,
            bias: None,
        }
        .run(self.lanes, g);
        for (k, col) in gx.chunks_exact_mut(n).enumerate() {
            for (p, v) in col.iter_mut().enumerate() {
                *v = g[p * din + k];
            }
        }
    }
}
