//! The network of spec §3 as R independent replicas: widths, Xavier initialisation per
//! replica from its own seed, and the host-side layout of the replicas' weights.

use serde::{Deserialize, Serialize};
use uqbench_anchor::Rng;

use uqbench_core::MethodError;

/// Shape of the MLP shared by all replicas.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MlpShape {
    /// Input dimension d.
    pub d_in: usize,
    /// Hidden widths (spec §3: 128, 64, 32).
    pub hidden: Vec<usize>,
    /// Output dimension (1; 2 for a heteroscedastic mean-and-variance head).
    pub d_out: usize,
    /// Negative slope of the leaky ReLU between layers (spec §3: 0.01).
    pub negative_slope: f64,
}

impl MlpShape {
    /// The spec's network for inputs of dimension `d_in`: 128-64-32, one output, slope 0.01.
    pub fn paper(d_in: usize) -> MlpShape {
        MlpShape {
            d_in,
            hidden: vec![128, 64, 32],
            d_out: 1,
            negative_slope: 0.01,
        }
    }

    /// Weights and biases.
    pub fn parameters(&self) -> usize {
        let mut dims = vec![self.d_in];
        dims.extend(&self.hidden);
        dims.push(self.d_out);
        dims.windows(2).map(|w| w[0] * w[1] + w[1]).sum()
    }

    /// Checks the shape once, up front.
    pub fn validate(&self) -> Result<(), MethodError> {
        if self.d_in == 0 || self.d_out == 0 || self.hidden.contains(&0) {
            return Err(MethodError::invalid(
                "network widths",
                format!(
                    "d_in = {}, hidden = {:?}, d_out = {}",
                    self.d_in, self.hidden, self.d_out
                ),
                "every width must be at least 1",
            ));
        }
        if !(self.negative_slope.is_finite() && (0.0..1.0).contains(&self.negative_slope)) {
            return Err(MethodError::invalid(
                "negative_slope",
                self.negative_slope,
                "a slope in [0, 1)",
            ));
        }
        Ok(())
    }

    /// The widths, input, hidden…, output.
    pub fn widths(&self) -> Vec<usize> {
        let mut widths = vec![self.d_in];
        widths.extend(&self.hidden);
        widths.push(self.d_out);
        widths
    }

    /// (fan_in, fan_out) of every layer, input to output.
    pub fn layers(&self) -> Vec<(usize, usize)> {
        self.widths().windows(2).map(|w| (w[0], w[1])).collect()
    }

    /// Σ fan_in·fan_out: multiply-adds per point and forward pass.
    pub fn macs_per_point(&self) -> usize {
        self.layers().iter().map(|(i, o)| i * o).sum()
    }

    /// Parameters per replica (weights and biases).
    pub fn params_per_replica(&self) -> usize {
        self.layers().iter().map(|(i, o)| i * o + o).sum()
    }

    /// Whether the fused host loops (HMC's and MFVI's, one replica at a time over its points)
    /// beat tensor operations over a chunk of replicas on the CPU: every layer has
    /// in·out ≤ 800. Measured for HMC with `tcc --profile cpu --methods HMC` at one width
    /// (2-W-W-W-1 networks, 20 repetitions × 4 chains of 300 + 300 iterations): host 49 s
    /// against tensors 78 s at W = 20 (layers of 400), 165 s against 104 s at W = 40 (1 600);
    /// the ratio grows about as W^1.3, crossing 1 near W = 28 (784). The host loops do a layer
    /// as in·out passes over the points where the tensors do one gemm; [002]'s 1-W-1
    /// networks (in·out = W) always run on the host.
    pub fn host_sized(&self) -> bool {
        self.layers().iter().all(|&(i, o)| i * o <= 800)
    }
}

/// Weights and biases of R replicas on the host, layer by layer: weights `[R, in, out]` and
/// biases `[R, out]`, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct HostWeights {
    /// Number of replicas.
    pub replicas: usize,
    /// Per layer: (weights, biases).
    pub layers: Vec<(Vec<f32>, Vec<f32>)>,
}

impl HostWeights {
    /// Replicas `range` of these weights.
    pub fn select(&self, range: std::ops::Range<usize>) -> HostWeights {
        let r = self.replicas.max(1);
        HostWeights {
            replicas: range.len(),
            layers: (self.layers.iter())
                .map(|(w, b)| {
                    let (pw, pb) = (w.len() / r, b.len() / r);
                    (
                        w[range.start * pw..range.end * pw].to_vec(),
                        b[range.start * pb..range.end * pb].to_vec(),
                    )
                })
                .collect(),
        }
    }

    /// `parts`' replicas one after another (every part of one network's layers).
    pub fn concat(parts: &[HostWeights]) -> HostWeights {
        let layers = parts.first().map_or(0, |p| p.layers.len());
        HostWeights {
            replicas: parts.iter().map(|p| p.replicas).sum(),
            layers: (0..layers)
                .map(|l| {
                    let w = parts.iter().flat_map(|p| p.layers[l].0.iter().copied());
                    let b = parts.iter().flat_map(|p| p.layers[l].1.iter().copied());
                    (w.collect(), b.collect())
                })
                .collect(),
        }
    }

    /// The weights of `flats.len()` replicas from each replica's parameters in the layout the
    /// collectors see ([`crate::trainer::collect::Event::Final`]: layer by layer, the weights
    /// `[in, out]` row-major, then the biases): the inverse of reading them back.
    pub fn from_flat(shape: &MlpShape, flats: &[&[f32]]) -> Result<HostWeights, MethodError> {
        let layers = shape.layers();
        let per = shape.params_per_replica();
        if let Some((r, f)) = flats.iter().enumerate().find(|(_, f)| f.len() != per) {
            return Err(MethodError::invalid(
                format!("parameters of replica {r}"),
                format!("{} values", f.len()),
                format!(
                    "{per}: the network {:?}'s weights and biases",
                    shape.widths()
                ),
            ));
        }
        let mut out: Vec<(Vec<f32>, Vec<f32>)> = (layers.iter())
            .map(|&(i, o)| {
                (
                    Vec::with_capacity(flats.len() * i * o),
                    Vec::with_capacity(flats.len() * o),
                )
            })
            .collect();
        for flat in flats {
            let mut at = 0;
            for (slot, &(i, o)) in out.iter_mut().zip(&layers) {
                slot.0.extend_from_slice(&flat[at..at + i * o]);
                slot.1.extend_from_slice(&flat[at + i * o..at + i * o + o]);
                at += i * o + o;
            }
        }
        Ok(HostWeights {
            replicas: flats.len(),
            layers: out,
        })
    }

    /// Checks that these are the weights of `replicas` replicas of `shape`.
    pub fn validate_shape(&self, shape: &MlpShape, replicas: usize) -> Result<(), MethodError> {
        let layers = shape.layers();
        let fits = self.replicas == replicas
            && self.layers.len() == layers.len()
            && (self.layers.iter().zip(&layers))
                .all(|((w, b), &(i, o))| w.len() == replicas * i * o && b.len() == replicas * o);
        if !fits {
            return Err(MethodError::invalid(
                "initial weights",
                format!("{} replicas of {} layers", self.replicas, self.layers.len()),
                format!(
                    "{replicas} replicas of the network {:?} (one per replica of the job)",
                    shape.widths()
                ),
            ));
        }
        Ok(())
    }

    /// Whether replica `r`'s weights and biases are all finite.
    fn finite_at(&self, r: usize) -> bool {
        let k = self.replicas.max(1);
        (self.layers.iter()).all(|(w, b)| {
            let (pw, pb) = (w.len() / k, b.len() / k);
            (w[r * pw..(r + 1) * pw].iter())
                .chain(&b[r * pb..(r + 1) * pb])
                .all(|v| v.is_finite())
        })
    }

    /// These weights with every replica that has a non-finite value (its training diverged)
    /// replaced by Xavier's weights from its seed in `seeds` (one per replica): a fresh start
    /// for that replica alone.
    pub fn finite_or_fresh(&self, shape: &MlpShape, seeds: &[u64]) -> HostWeights {
        let mut out = self.clone();
        for r in (0..self.replicas).filter(|&r| !self.finite_at(r)) {
            let fresh = xavier_init(shape, &seeds[r..r + 1]);
            for ((w, b), (fw, fb)) in out.layers.iter_mut().zip(fresh.layers) {
                w[r * fw.len()..(r + 1) * fw.len()].copy_from_slice(&fw);
                b[r * fb.len()..(r + 1) * fb.len()].copy_from_slice(&fb);
            }
        }
        out
    }

    /// Checks that these are the finite weights of `replicas` replicas of `shape`.
    pub fn validate(&self, shape: &MlpShape, replicas: usize) -> Result<(), MethodError> {
        self.validate_shape(shape, replicas)?;
        if !(0..self.replicas).all(|r| self.finite_at(r)) {
            return Err(MethodError::invalid(
                "initial weights",
                "a non-finite value",
                "finite numbers (a warm start from a training that diverged?)",
            ));
        }
        Ok(())
    }
}

/// Glorot/Xavier uniform initialisation, independently per replica: every weight of a layer
/// with fan-in a and fan-out b is U(−√(6/(a+b)), √(6/(a+b))), biases are zero (as MATLAB's
/// `glorot` initialiser, used by [000]). Replica r draws from `Rng::new(seeds[r])`, layer by
/// layer in row-major order, so its weights do not depend on which other replicas exist.
pub fn xavier_init(shape: &MlpShape, seeds: &[u64]) -> HostWeights {
    let layers = shape.layers();
    let r = seeds.len();
    let mut out: Vec<(Vec<f32>, Vec<f32>)> = layers
        .iter()
        .map(|&(i, o)| (Vec::with_capacity(r * i * o), vec![0.0; r * o]))
        .collect();
    for &seed in seeds {
        let mut rng = Rng::new(seed);
        for (l, &(i, o)) in layers.iter().enumerate() {
            let limit = (6.0 / (i + o) as f64).sqrt();
            for _ in 0..i * o {
                out[l].0.push(rng.uniform_in(-limit, limit) as f32);
            }
        }
    }
    HostWeights {
        replicas: r,
        layers: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_shape_counts() {
        let s = MlpShape::paper(1);
        assert_eq!(s.layers(), vec![(1, 128), (128, 64), (64, 32), (32, 1)]);
        assert_eq!(s.macs_per_point(), 128 + 8192 + 2048 + 32);
        assert_eq!(s.params_per_replica(), 10_400 + 128 + 64 + 32 + 1);
        assert!(MlpShape {
            negative_slope: 1.5,
            ..s.clone()
        }
        .validate()
        .is_err());
        assert!(MlpShape {
            hidden: vec![0],
            ..s
        }
        .validate()
        .is_err());
    }

    #[test]
    fn xavier_is_per_replica_and_in_range() {
        let s = MlpShape::paper(2);
        let both = xavier_init(&s, &[11, 22]);
        let alone = xavier_init(&s, &[22]);
        let (w, _) = &both.layers[1];
        let per = 128 * 64;
        assert_eq!(&w[per..], &alone.layers[1].0[..]);
        let limit = (6.0f64 / 192.0).sqrt() as f32;
        assert!(w.iter().all(|v| v.abs() <= limit));
        // Var of U(−a, a) is a²/3: the sample variance of 8192 draws has relative sd ≈
        // sqrt(0.8/8192) ≈ 0.0099 (kurtosis of the uniform: 1.8); allow 5 sd.
        let var = alone.layers[1]
            .0
            .iter()
            .map(|v| f64::from(*v).powi(2))
            .sum::<f64>()
            / per as f64;
        let want = f64::from(limit).powi(2) / 3.0;
        assert!((var / want - 1.0).abs() < 0.05, "{var} vs {want}");
        assert!(both.layers[0].1.iter().all(|b| *b == 0.0));
    }
}
