//! A trained network on the host, in f64, from the engine's weights: its output, its
//! Jacobian with respect to a parameter subset (hand-written backward), its last hidden
//! layer, and an exact weighted ridge solve of its last layer. What the post-training methods
//! build on (Laplace's curvature, SWAG's samples).

use nalgebra::{DMatrix, DVector};

use uqbench_core::{MethodError, Rng};
use uqbench_engine::mlp::MlpShape;

/// The engine's f32 inputs (row-major, `d` per point) as a `[points, d]` matrix in f64, what
/// [`TrainedNet::forward_batch`] takes.
pub fn inputs(x: &[f32], d: usize) -> DMatrix<f64> {
    let wide: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    DMatrix::from_row_slice(wide.len() / d, d, &wide)
}

/// A trained network on the host: per layer W `[in, out]` (row-major) and b `[out]`.
#[derive(Clone)]
pub struct TrainedNet {
    /// Widths: input, hidden…, output (1).
    pub dims: Vec<usize>,
    /// Per layer W `[in, out]`, row-major.
    pub w: Vec<Vec<f64>>,
    /// Per layer b `[out]`.
    pub b: Vec<Vec<f64>>,
    /// The leaky ReLU's negative slope.
    pub slope: f64,
}

/// One layer's Jacobian factors at an input: the layer's input a and δ = ∂f/∂z.
pub type LayerFactors = (Vec<f64>, Vec<f64>);

/// Which parameters a Jacobian covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subset {
    /// The last layer's weights and bias.
    LastLayer,
    /// Every weight and bias.
    All,
}

impl TrainedNet {
    /// A fixed random network of `shape` (a prior function): layer by layer the weights
    /// N(0, sd(fan_in)²) row-major from one stream seeded `seed`, the biases 0.
    pub fn gaussian(shape: &MlpShape, seed: u64, sd: impl Fn(usize) -> f64) -> TrainedNet {
        let mut rng = Rng::new(seed);
        let (w, b) = shape
            .layers()
            .iter()
            .map(|&(i, o)| {
                let s = sd(i);
                let w = (0..i * o).map(|_| s * rng.normal()).collect();
                (w, vec![0.0; o])
            })
            .unzip();
        TrainedNet {
            dims: shape.widths(),
            w,
            b,
            slope: shape.negative_slope,
        }
    }

    /// Weights drawn as haiku's default `Linear` initialiser draws them,
    /// `TruncatedNormal(stddev = sd(fan_in))`: a normal with that sd truncated at ±2 sd (not
    /// rescaled, so its own sd is 0.8796·sd), by rejection; biases 0.
    pub fn truncated_normal(shape: &MlpShape, seed: u64, sd: impl Fn(usize) -> f64) -> TrainedNet {
        let mut rng = Rng::new(seed);
        let mut draw = || loop {
            let z = rng.normal();
            if z.abs() <= 2.0 {
                return z;
            }
        };
        let (w, b) = shape
            .layers()
            .iter()
            .map(|&(i, o)| {
                let s = sd(i);
                let w = (0..i * o).map(|_| s * draw()).collect();
                (w, vec![0.0; o])
            })
            .unzip();
        TrainedNet {
            dims: shape.widths(),
            w,
            b,
            slope: shape.negative_slope,
        }
    }

    /// The engine's flat parameters of one replica (layer by layer W then b) for a network of
    /// widths `dims` (input, hidden…, 1).
    pub fn from_flat(flat: &[f32], dims: &[usize], slope: f64) -> TrainedNet {
        let wide: Vec<f64> = flat.iter().map(|&v| f64::from(v)).collect();
        TrainedNet::from_flat_f64(&wide, dims, slope)
    }

    /// The same from parameters in f64.
    pub fn from_flat_f64(flat: &[f64], dims: &[usize], slope: f64) -> TrainedNet {
        let (mut w, mut b, mut at) = (Vec::new(), Vec::new(), 0);
        for l in 0..dims.len() - 1 {
            let (i, o) = (dims[l], dims[l + 1]);
            w.push(flat[at..at + i * o].to_vec());
            at += i * o;
            b.push(flat[at..at + o].to_vec());
            at += o;
        }
        TrainedNet {
            dims: dims.to_vec(),
            w,
            b,
            slope,
        }
    }

    /// Parameters in the subset.
    pub fn count(&self, subset: Subset) -> usize {
        let layers = self.dims.len() - 1;
        let from = if subset == Subset::LastLayer {
            layers - 1
        } else {
            0
        };
        (from..layers)
            .map(|l| self.dims[l] * self.dims[l + 1] + self.dims[l + 1])
            .sum()
    }

    /// The subset's parameters as one vector, in [`TrainedNet::jacobian`]'s order.
    pub fn params(&self, subset: Subset) -> Vec<f64> {
        let layers = self.dims.len() - 1;
        let from = if subset == Subset::LastLayer {
            layers - 1
        } else {
            0
        };
        (from..layers)
            .flat_map(|l| self.w[l].iter().chain(&self.b[l]).copied())
            .collect()
    }

    /// The output f(x) and its gradient with respect to the subset's parameters (layer by
    /// layer W row-major then b) at input `x`: per layer the outer product of the layer's
    /// input and δ = ∂f/∂z, then δ (see [`TrainedNet::factors`]).
    pub fn jacobian(&self, x: &[f64], subset: Subset) -> (f64, Vec<f64>) {
        let (f, factors) = self.factors(x, subset);
        let mut j = Vec::with_capacity(self.count(subset));
        for (a, g) in &factors {
            for ar in a {
                j.extend(g.iter().map(|gc| ar * gc));
            }
            j.extend_from_slice(g);
        }
        (f, j)
    }

    /// The output f(x) and, per layer of the subset, its input a and δ = ∂f/∂z at its
    /// pre-activation z (the Kronecker factors of its Jacobian: ∂f/∂W = a ⊗ δ, ∂f/∂b = δ).
    pub fn factors(&self, x: &[f64], subset: Subset) -> (f64, Vec<LayerFactors>) {
        let layers = self.dims.len() - 1;
        // Forward: the activations entering each layer and the pre-activations.
        let mut acts: Vec<Vec<f64>> = vec![x.to_vec()];
        let mut pre: Vec<Vec<f64>> = Vec::new();
        for l in 0..layers {
            let o = self.dims[l + 1];
            let mut z = self.b[l].clone();
            for (a, row) in acts[l].iter().zip(self.w[l].chunks(o)) {
                for (zj, wj) in z.iter_mut().zip(row) {
                    *zj += a * wj;
                }
            }
            if l + 1 < layers {
                acts.push(
                    z.iter()
                        .map(|&v| if v > 0.0 { v } else { self.slope * v })
                        .collect(),
                );
            }
            pre.push(z);
        }
        let f = pre[layers - 1][0];
        // Backward: δ_L = 1; δ_{l−1} = (W_l δ_l) ⊙ leaky'(z_{l−1}).
        let from = if subset == Subset::LastLayer {
            layers - 1
        } else {
            0
        };
        let mut out: Vec<LayerFactors> = Vec::with_capacity(layers - from);
        let mut delta = vec![1.0];
        for l in (from..layers).rev() {
            let o = self.dims[l + 1];
            let next = (l > from).then(|| {
                (0..self.dims[l])
                    .map(|r| {
                        let s: f64 = self.w[l][r * o..(r + 1) * o]
                            .iter()
                            .zip(&delta)
                            .map(|(w, d)| w * d)
                            .sum();
                        if pre[l - 1][r] > 0.0 {
                            s
                        } else {
                            self.slope * s
                        }
                    })
                    .collect()
            });
            out.push((acts[l].clone(), delta));
            match next {
                Some(d) => delta = d,
                None => break,
            }
        }
        out.reverse();
        (f, out)
    }

    /// The output f(x).
    pub fn forward(&self, x: &[f64]) -> f64 {
        let h = self.last_hidden(x);
        let last = self.w.len() - 1;
        self.b[last][0] + h.iter().zip(&self.w[last]).map(|(a, w)| a * w).sum::<f64>()
    }

    /// f at many inputs at once, `x` `[points, d_in]`: each layer one matrix product (what a
    /// sampler's hundreds of draws at a thousand test inputs need; [`TrainedNet::forward`]
    /// per point is a vector product per layer).
    pub fn forward_batch(&self, x: &DMatrix<f64>) -> Vec<f64> {
        let layers = self.dims.len() - 1;
        let mut h = x.clone();
        for l in 0..layers {
            let (i, o) = (self.dims[l], self.dims[l + 1]);
            let w = DMatrix::from_row_slice(i, o, &self.w[l]);
            let mut z = &h * w;
            for mut row in z.row_iter_mut() {
                for (v, b) in row.iter_mut().zip(&self.b[l]) {
                    *v += b;
                }
            }
            if l + 1 < layers {
                z.apply(|v| {
                    if *v < 0.0 {
                        *v *= self.slope;
                    }
                });
            }
            h = z;
        }
        h.column(0).iter().copied().collect()
    }

    /// The last hidden layer's output (the input for a network without hidden layers).
    pub fn last_hidden(&self, x: &[f64]) -> Vec<f64> {
        let layers = self.dims.len() - 1;
        let mut h = x.to_vec();
        for l in 0..layers - 1 {
            let o = self.dims[l + 1];
            let mut z = self.b[l].clone();
            for (a, row) in h.iter().zip(self.w[l].chunks(o)) {
                for (zj, wj) in z.iter_mut().zip(row) {
                    *zj += a * wj;
                }
            }
            h = z
                .into_iter()
                .map(|v| if v > 0.0 { v } else { self.slope * v })
                .collect();
        }
        h
    }

    /// Replaces the last layer by the exact minimiser of Σ (y_i − f(x_i))²/(2σ_i²) + δ/2·‖θ_L‖²
    /// given the hidden layers (a weighted ridge solve): the MAP found precisely where the
    /// optimiser in f32 leaves it approximate.
    pub fn solve_last_layer(
        &mut self,
        x: &[Vec<f64>],
        y: &[f64],
        sigma: &[f64],
        delta: f64,
    ) -> Result<(), MethodError> {
        // The last hidden width (the input dimension without hidden layers).
        let k = self.dims[self.dims.len() - 2];
        let n = x.len();
        let mut a = DMatrix::<f64>::zeros(n, k + 1);
        let mut rhs = DVector::<f64>::zeros(n);
        for (i, xi) in x.iter().enumerate() {
            let h = self.last_hidden(xi);
            for (j, v) in h.iter().enumerate() {
                a[(i, j)] = v / sigma[i];
            }
            a[(i, k)] = 1.0 / sigma[i];
            rhs[i] = y[i] / sigma[i];
        }
        // The augmented least-squares system [A; √δ·I] β = [b; 0], solved by SVD (not the
        // normal equations, whose condition number is squared: with nearly collinear hidden
        // units they lose every digit). A singular value below 1e-12 of the largest marks a
        // direction the data do not determine: under the flat prior that is an error.
        let mut aug = DMatrix::<f64>::zeros(n + k + 1, k + 1);
        aug.view_mut((0, 0), (n, k + 1)).copy_from(&a);
        let mut rhs_aug = DVector::<f64>::zeros(n + k + 1);
        rhs_aug.rows_mut(0, n).copy_from(&rhs);
        for j in 0..=k {
            aug[(n + j, j)] = delta.sqrt();
        }
        let svd = aug.svd(true, true);
        let top = svd.singular_values.max();
        let tol = 1e-12 * top;
        if delta == 0.0 && svd.singular_values.min() <= tol {
            return Err(MethodError::Failed(format!(
                "Laplace: the last layer's least-squares problem ({} parameters) is singular: \
                 the training data do not determine every parameter under a flat prior \
                 (prior_precision = 0); use a positive prior_precision or \"marglik\"",
                k + 1
            )));
        }
        let beta = svd
            .solve(&rhs_aug, tol)
            .map_err(|e| MethodError::Failed(format!("Laplace: the last layer's solve: {e}")))?;
        let last = self.w.len() - 1;
        self.w[last] = beta.iter().take(k).copied().collect();
        self.b[last] = vec![beta[k]];
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_normal_weights_are_haikus_default() {
        // haiku's TruncatedNormal(stddev = s): N(0, s²) cut at ±2s, not rescaled, so its sd is
        // s·√(1 − 4φ(2)/(2Φ(2) − 1)) = 0.87962·s. 400·50 = 20 000 weights of fan-in 400
        // (s = 0.05): the sample sd's relative error is about √((κ − 1)/(4n)) ≈ 0.003 (κ ≈
        // 2.2, the truncated normal's kurtosis), checked at 1.5% (5 sds).
        let shape = MlpShape {
            d_in: 400,
            hidden: vec![50],
            d_out: 1,
            negative_slope: 0.0,
        };
        let net = TrainedNet::truncated_normal(&shape, 3, |fan_in| (fan_in as f64).recip().sqrt());
        let w = &net.w[0];
        assert_eq!(w.len(), 20_000);
        let sd = (w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64).sqrt();
        assert!((sd / (0.879_62 * 0.05) - 1.0).abs() < 0.015, "sd {sd}");
        assert!(
            w.iter().all(|v| v.abs() <= 2.0 * 0.05),
            "a weight beyond ±2 sd"
        );
        assert!(net.b.iter().flatten().all(|&b| b == 0.0));
    }

    #[test]
    fn the_batched_forward_is_the_pointwise_one() {
        let dims = [2, 5, 3, 1];
        let count: usize = dims.windows(2).map(|w| w[0] * w[1] + w[1]).sum();
        let flat: Vec<f64> = (0..count)
            .map(|k| ((k * 37 % 11) as f64 - 5.0) / 7.0)
            .collect();
        let net = TrainedNet::from_flat_f64(&flat, &dims, 0.1);
        let x = DMatrix::from_row_slice(4, 2, &[0.3, -1.2, 2.0, 0.5, -0.7, -0.1, 1.1, 1.9]);
        let batch = net.forward_batch(&x);
        for (i, f) in batch.iter().enumerate() {
            let row: Vec<f64> = x.row(i).iter().copied().collect();
            assert!((f - net.forward(&row)).abs() < 1e-12, "point {i}");
        }
    }

    fn net() -> TrainedNet {
        // 2-3-1 with slope 0.1.
        TrainedNet {
            dims: vec![2, 3, 1],
            w: vec![vec![0.5, -1.0, 0.3, 0.2, 0.7, -0.4], vec![1.5, -0.5, 0.8]],
            b: vec![vec![0.1, 0.2, -0.3], vec![0.05]],
            slope: 0.1,
        }
    }

    #[test]
    fn jacobian_matches_finite_differences() {
        let x = [0.3, -0.8];
        let base = net();
        let (f0, j) = base.jacobian(&x, Subset::All);
        assert_eq!(j.len(), base.count(Subset::All));
        let h = 1e-6;
        let mut k = 0;
        for l in 0..2 {
            for which in 0..2 {
                let len = if which == 0 {
                    base.w[l].len()
                } else {
                    base.b[l].len()
                };
                for e in 0..len {
                    let mut p = net();
                    let slot = if which == 0 {
                        &mut p.w[l][e]
                    } else {
                        &mut p.b[l][e]
                    };
                    *slot += h;
                    let (f1, _) = p.jacobian(&x, Subset::All);
                    assert!(((f1 - f0) / h - j[k]).abs() < 1e-5, "param {k}");
                    k += 1;
                }
            }
        }
        let (_, last) = base.jacobian(&x, Subset::LastLayer);
        assert_eq!(last, j[j.len() - 4..].to_vec());
    }
}
