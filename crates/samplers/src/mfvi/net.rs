//! MFVI's network on the host: one replica's mean-field Gaussian MLP over its points, with
//! the local reparameterisation's forward and backward passes written out as loops over
//! feature-major activations (the weights are sampled per point, so this is a third layout
//! of an MLP beside the engine's `cpu::feature_major` and `cpu::point_major`, which share their
//! weights across points). MFVI's host trainer (`super::host`) runs it.
//!
//! Per layer, for an input a (feature-major `[in, n]`), with σ² = e^{2ρ}:
//!   m_j = μ_b,j + Σ_k μ_W,kj·a_k,   v_j = σ²_b,j + Σ_k σ²_W,kj·a_k²,
//!   s_j = √v_j,   z_j = m_j + s_j·ε_j,   h_j = φ(z_j) (hidden layers),
//! and backward from δ_j = ∂L/∂z_j, with δv_j = δ_j·ε_j/(2·s_j):
//!   ∂L/∂μ_W,kj = Σ_p a_k·δ_j,   ∂L/∂ρ_W,kj = 2σ²_W,kj·Σ_p a_k²·δv_j,
//!   ∂L/∂μ_b,j = Σ_p δ_j,         ∂L/∂ρ_b,j = 2σ²_b,j·Σ_p δv_j,
//!   ∂L/∂a_k = Σ_j μ_W,kj·δ_j + 2a_k·Σ_j σ²_W,kj·δv_j.

use uqbench_anchor::Rng;

use uqbench_engine::cpu::feature_major::combine;
use uqbench_engine::cpu::simd;

/// Offsets of one layer's parameters in the flat vector.
#[derive(Debug, Clone, Copy)]
pub struct LayerAt {
    /// Inputs.
    pub d_in: usize,
    /// Outputs.
    pub d_out: usize,
    /// Offset of μ_W.
    pub mu_w: usize,
    /// Offset of ρ_W.
    pub rho_w: usize,
    /// Offset of μ_b.
    pub mu_b: usize,
    /// Offset of ρ_b.
    pub rho_b: usize,
}

/// The flat parameter layout: per layer μ_W `[in, out]` (row-major), ρ_W, μ_b `[out]`, ρ_b;
/// then s = ln σ_n when it is learned.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Per layer, its offsets.
    pub layers: Vec<LayerAt>,
    /// The offset of s = ln σ_n when it is learned.
    pub s: Option<usize>,
    /// Parameters in all.
    pub dim: usize,
}

impl Layout {
    /// The layout of a network with these (in, out) layers, with s when `learn_noise`.
    pub fn new(layers: &[(usize, usize)], learn_noise: bool) -> Layout {
        let mut at = 0;
        let layers = layers
            .iter()
            .map(|&(i, o)| {
                let l = LayerAt {
                    d_in: i,
                    d_out: o,
                    mu_w: at,
                    rho_w: at + i * o,
                    mu_b: at + 2 * i * o,
                    rho_b: at + 2 * i * o + o,
                };
                at += 2 * (i * o + o);
                l
            })
            .collect();
        let s = learn_noise.then_some(at);
        Layout {
            layers,
            s,
            dim: at + usize::from(learn_noise),
        }
    }
}

/// One replica's network with scratch for `points` points, feature-major.
pub struct MfviNet {
    /// The parameter layout.
    pub at: Layout,
    slope: f32,
    /// Per layer, its input (layer 0: empty, the data is read in place) and its square,
    /// `[in, points]`.
    acts: Vec<Vec<f32>>,
    sq: Vec<Vec<f32>>,
    /// Per layer, the pre-activations z and the sds s, `[out, points]`.
    z: Vec<Vec<f32>>,
    sd: Vec<Vec<f32>>,
    /// Per layer, the noise ε `[out, points]`.
    pub eps: Vec<Vec<f32>>,
    /// σ² of every weight and bias, per layer (from ρ, once per pass).
    var_w: Vec<Vec<f32>>,
    var_b: Vec<Vec<f32>>,
    /// δ at the current and the previous layer, and δv, `[width, points]`.
    delta: [Vec<f32>; 2],
    dvar: Vec<f32>,
    /// One output's weight gradients, `[2, widest]` (μ's, then ρ's before their factor).
    gw: Vec<f32>,
    /// What the reductions run on: set by the operation that runs the net.
    pub lanes: simd::Lanes,
}

impl MfviNet {
    /// A network of layout `at` with leaky-ReLU slope `slope` and scratch for `points` points.
    pub fn new(at: Layout, slope: f64, points: usize) -> MfviNet {
        let widest = at
            .layers
            .iter()
            .map(|l| l.d_in.max(l.d_out))
            .max()
            .unwrap_or(1);
        let per = |f: &dyn Fn(usize, &LayerAt) -> usize| -> Vec<Vec<f32>> {
            (at.layers.iter().enumerate())
                .map(|(i, l)| vec![0.0; f(i, l) * points])
                .collect()
        };
        MfviNet {
            acts: per(&|i, l| if i == 0 { 0 } else { l.d_in }),
            sq: per(&|_, l| l.d_in),
            z: per(&|_, l| l.d_out),
            sd: per(&|_, l| l.d_out),
            eps: per(&|_, l| l.d_out),
            var_w: at
                .layers
                .iter()
                .map(|l| vec![0.0; l.d_in * l.d_out])
                .collect(),
            var_b: at.layers.iter().map(|l| vec![0.0; l.d_out]).collect(),
            delta: [vec![0.0; widest * points], vec![0.0; widest * points]],
            dvar: vec![0.0; widest * points],
            gw: vec![0.0; 2 * widest],
            lanes: simd::Lanes::BASELINE,
            slope: slope as f32,
            at,
        }
    }

    /// Draws ε for `n` points from the stream, in the tensor route's order: layer by layer,
    /// point-major within a layer (`[n, out]` row-major), stored feature-major.
    pub fn draw(&mut self, rng: &mut Rng, n: usize) {
        for (l, eps) in self.at.layers.iter().zip(&mut self.eps) {
            for p in 0..n {
                for j in 0..l.d_out {
                    eps[j * n + p] = rng.normal() as f32;
                }
            }
        }
    }

    /// f at `n` points (`xt`: feature-major `[d, n]`) into `out`, sampled with the drawn ε
    /// when `sampled`, through the means otherwise.
    #[inline(always)]
    pub fn forward(&mut self, theta: &[f32], xt: &[f32], out: &mut [f32], sampled: bool) {
        let n = out.len();
        let last = self.at.layers.len() - 1;
        let slope = self.slope;
        for l in 0..=last {
            let la = self.at.layers[l];
            let (din, dout) = (la.d_in, la.d_out);
            let mu_w = &theta[la.mu_w..la.mu_w + din * dout];
            let mu_b = &theta[la.mu_b..la.mu_b + dout];
            if sampled {
                for (v, &r) in self.var_w[l].iter_mut().zip(&theta[la.rho_w..]) {
                    *v = (2.0 * r).exp();
                }
                for (v, &r) in self.var_b[l].iter_mut().zip(&theta[la.rho_b..]) {
                    *v = (2.0 * r).exp();
                }
            }
            let (before, after) = self.acts.split_at_mut(l + 1);
            let input: &[f32] = if l == 0 {
                &xt[..din * n]
            } else {
                &before[l][..din * n]
            };
            let sq = &mut self.sq[l][..din * n];
            for (s, &a) in sq.iter_mut().zip(input) {
                *s = a * a;
            }
            for j in 0..dout {
                let zj = &mut self.z[l][j * n..(j + 1) * n];
                combine(zj, mu_b[j], &mu_w[j..], dout, input);
                if sampled {
                    let sj = &mut self.sd[l][j * n..(j + 1) * n];
                    combine(sj, self.var_b[l][j], &self.var_w[l][j..], dout, sq);
                    let ej = &self.eps[l][j * n..(j + 1) * n];
                    for ((z, s), &e) in zj.iter_mut().zip(sj.iter_mut()).zip(ej) {
                        *s = s.sqrt();
                        *z += *s * e;
                    }
                }
                if l < last {
                    let h = &mut after[0][j * n..(j + 1) * n];
                    for (hv, &zv) in h.iter_mut().zip(zj.iter()) {
                        *hv = if zv > 0.0 { zv } else { slope * zv };
                    }
                }
            }
        }
        out.copy_from_slice(&self.z[last][..n]);
    }

    /// ∇ of Σ_p δ_p·f(x_p) with respect to the layers' parameters into `grad` (overwritten),
    /// for δ at the output and the state of the last sampled [`MfviNet::forward`] at `xt`.
    #[inline(always)]
    pub fn backward(&mut self, theta: &[f32], xt: &[f32], delta_out: &[f32], grad: &mut [f32]) {
        let n = delta_out.len();
        let slope = self.slope;
        let mut cur = 0usize;
        self.delta[cur][..n].copy_from_slice(delta_out);
        for l in (0..self.at.layers.len()).rev() {
            let la = self.at.layers[l];
            let (din, dout) = (la.d_in, la.d_out);
            let [d0, d1] = &mut self.delta;
            let (dl, dprev) = if cur == 0 { (&*d0, d1) } else { (&*d1, d0) };
            let input: &[f32] = if l == 0 {
                &xt[..din * n]
            } else {
                &self.acts[l][..din * n]
            };
            let sq = &self.sq[l][..din * n];
            for j in 0..dout {
                let (dj, ej, sj) = (
                    &dl[j * n..(j + 1) * n],
                    &self.eps[l][j * n..(j + 1) * n],
                    &self.sd[l][j * n..(j + 1) * n],
                );
                for (((dv, &d), &e), &s) in self.dvar[j * n..(j + 1) * n]
                    .iter_mut()
                    .zip(dj)
                    .zip(ej)
                    .zip(sj)
                {
                    *dv = d * e / (2.0 * s);
                }
                let dvj = &self.dvar[j * n..(j + 1) * n];
                // Σ_p a_k,p·δ_j,p and Σ_p a²_k,p·δv_j,p for every input k, four k at a time.
                let (gmu, grho) = self.gw.split_at_mut(din);
                self.lanes.dot_rows(dj, input, gmu);
                self.lanes.dot_rows(dvj, sq, &mut grho[..din]);
                for k in 0..din {
                    grad[la.mu_w + k * dout + j] = gmu[k];
                    grad[la.rho_w + k * dout + j] = 2.0 * self.var_w[l][k * dout + j] * grho[k];
                }
                grad[la.mu_b + j] = self.lanes.sum(dj);
                grad[la.rho_b + j] = 2.0 * self.var_b[l][j] * self.lanes.sum(dvj);
            }
            if l > 0 {
                // ∂L/∂a_k, times φ'(z) of the previous layer's pre-activation.
                let mu_w = &theta[la.mu_w..la.mu_w + din * dout];
                let z = &self.z[l - 1];
                for k in 0..din {
                    let dk = &mut dprev[k * n..(k + 1) * n];
                    let sk = &mut self.sq[l][k * n..(k + 1) * n];
                    // Σ_j σ²_W,kj·δv_j into the square's slot (no longer needed), then
                    // δ_k = Σ_j μ_W,kj·δ_j + 2a_k·that.
                    combine(dk, 0.0, &mu_w[k * dout..], 1, &dl[..dout * n]);
                    let var_w = &self.var_w[l][k * dout..];
                    combine(sk, 0.0, var_w, 1, &self.dvar[..dout * n]);
                    let a = &input[k * n..(k + 1) * n];
                    for (((d, &s), &av), &zv) in dk
                        .iter_mut()
                        .zip(sk.iter())
                        .zip(a)
                        .zip(&z[k * n..(k + 1) * n])
                    {
                        *d = (*d + 2.0 * av * s) * if zv > 0.0 { 1.0 } else { slope };
                    }
                }
            }
            cur = 1 - cur;
        }
    }
}
