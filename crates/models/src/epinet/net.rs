//! The epinet's network and its training: R replicas (one per repetition) of a base MLP
//! μ(x) with an epinet σ_L beside it, as a `#[derive(Module)]` burn module trained by burn's
//! autodiff and the engine's per-element Adam on the engine's scheduler ([`run_chunks`]:
//! chunks, threads, progress, divergence). One tensor program for all replicas, on every
//! backend (flex on the CPU, wgpu on a GPU).
//!
//! Forward pass for inputs x and K indices z_k ∼ N(0, I_D) per replica (Osband et al. 2023,
//! the `enn` library's `make_mlp_epinet` with `ExposedMLP` and `ProjectedMLP`):
//!
//! ```text
//! h = MLP_base hidden(x)                  φ(x) = sg[(x, h)]   (the inputs and the last hidden layer)
//! μ(x) = last(h)
//! σ_L(x, z) = g_θ((z, φ(x)))ᵀ z           g_θ: ReLU MLP with D outputs, z concatenated to its input
//! σ_P(x, z) = β · Σ_d z_d p_d(x)          p_d fixed random ReLU MLPs on x (precomputed)
//! f(x, z) = μ(x) + σ_L(x, z) + σ_P(x, z)
//! ```
//!
//! The K index samples are laid out as K blocks of the points (`[R, K·n, ·]`), so the head's
//! mean over points is the mean over indices of each index's mean loss, as
//! `average_single_index_loss` in `enn`. A replica's numbers depend on its own seeds and
//! streams only: every product is batched per replica.

use std::ops::Range;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};

use super::host::train_epinet_host;
pub use super::host::EpinetParts;
use uqbench_core::MethodError;
use uqbench_engine::cpu::kernels::KernelPath;
use uqbench_engine::device_rng::DeviceRng;
use uqbench_engine::layers::{BatchedLinear, BatchedLinearConfig, LeakyRelu};
use uqbench_engine::mlp::{xavier_init, MlpShape};
use uqbench_engine::optim::AdamState;
use uqbench_engine::stack::Stack;
use uqbench_engine::trainer::{
    run_chunks, trains_on_host, try_download, upload, ChunkOut, ChunkTrainer, Job, Layout,
    Resources, TrainOutput, TrainSettings, PURPOSE_FIT, PURPOSE_NOISE, PURPOSE_PREDICT,
};

/// R replicas of the base network and the trainable epinet.
#[derive(Module, Debug)]
pub struct EpinetNet {
    /// The base network's hidden layers.
    pub base: Vec<BatchedLinear>,
    /// The base network's output layer (μ).
    pub head: BatchedLinear,
    /// The epinet g_θ's layers, input (z, φ) to D outputs.
    pub epi: Vec<BatchedLinear>,
    /// The base network's activation.
    pub activation: LeakyRelu,
}

/// Builds R replicas of an MLP's layers on `device` from the engine's Glorot initialiser.
fn layers(shape: &MlpShape, seeds: &[u64], device: &Device) -> Vec<BatchedLinear> {
    let r = seeds.len();
    xavier_init(shape, seeds)
        .layers
        .into_iter()
        .zip(shape.layers())
        .map(|((w, b), (d_in, d_out))| {
            BatchedLinearConfig { d_in, d_out }.from_host(w, b, r, device)
        })
        .collect()
}

impl EpinetNet {
    /// The network for `base_seeds.len()` replicas: the base MLP `base` (its last hidden
    /// layer exposed) and the epinet `epi` (input D + d + last hidden width, output D), each
    /// Glorot-initialised from its replica's own seed.
    pub fn init(
        base: &MlpShape,
        epi: &MlpShape,
        base_seeds: &[u64],
        epi_seeds: &[u64],
        device: &Device,
    ) -> EpinetNet {
        let mut hidden = layers(base, base_seeds, device);
        let head = hidden.pop().expect("an output layer");
        EpinetNet {
            base: hidden,
            head,
            epi: layers(epi, epi_seeds, device),
            activation: LeakyRelu {
                slope: base.negative_slope,
            },
        }
    }

    /// Which parameters take weight decay, in visiting order: every weight, no bias.
    pub fn decay_mask(&self) -> Vec<bool> {
        let layers = self.base.len() + 1 + self.epi.len();
        (0..layers).flat_map(|_| [true, false]).collect()
    }

    /// Σ over layers of ‖W‖² per replica `[R, 1, 1]`.
    pub fn weight_norm(&self) -> Tensor<3> {
        self.base
            .iter()
            .chain([&self.head])
            .chain(&self.epi)
            .map(|l| l.weight.val().square().sum_dim(2).sum_dim(1))
            .reduce(|a, b| a + b)
            .expect("at least one layer")
    }

    /// The base network: μ(x) `[R, n, 1]` and the epinet's features φ(x) = sg[(x, h)]
    /// `[R, n, d + H]`.
    ///
    /// # Shapes
    /// - `x`: `[1, n, d]` (shared by the replicas) or `[R, n, d]` (each replica's own)
    pub fn base(&self, x: Tensor<3>) -> (Tensor<3>, Tensor<3>) {
        let w: Vec<Tensor<3>> = self
            .base
            .iter()
            .chain([&self.head])
            .map(|l| l.weight.val())
            .collect();
        let b: Vec<Tensor<3>> = self
            .base
            .iter()
            .chain([&self.head])
            .map(|l| l.bias.val())
            .collect();
        // The shared device MLP on tensor operations, which burn's autodiff follows.
        let stack = Stack {
            w: &w,
            b: &b,
            slope: self.activation.slope,
            path: KernelPath::Tensor,
        };
        let (h, _) = stack.hidden(x.clone(), self.base.len());
        let mu = stack.output(h.clone());
        let [r, n, _] = mu.dims();
        let d = x.dims()[2];
        let features = Tensor::cat(vec![x.expand([r, n, d]), h], 2).detach();
        (mu, features)
    }

    /// f(x, z_k) for K indices `z` `[R, K, D]` given the base's output: `[R, K·n, 1]`, the
    /// K blocks of the n points. `prior` holds p_d(x) `[R, n, D]`, scaled by `beta`.
    pub fn with_index(
        &self,
        mu: &Tensor<3>,
        features: &Tensor<3>,
        z: Tensor<3>,
        prior: &Tensor<3>,
        beta: f64,
    ) -> Tensor<3> {
        let [r, k, dz] = z.dims();
        let n = mu.dims()[1];
        let tile = |t: Tensor<3>| {
            let w = t.dims()[2];
            t.unsqueeze_dim::<4>(1)
                .expand([r, k, n, w])
                .reshape([r, k * n, w])
        };
        let zk = z
            .unsqueeze_dim::<4>(2)
            .expand([r, k, n, dz])
            .reshape([r, k * n, dz]);
        let mut e = Tensor::cat(vec![zk.clone(), tile(features.clone())], 2);
        let last = self.epi.len() - 1;
        for (i, layer) in self.epi.iter().enumerate() {
            e = layer.forward(e);
            if i < last {
                e = burn::tensor::activation::relu(e);
            }
        }
        let sigma_l = (e * zk.clone()).sum_dim(2);
        let sigma_p = (tile(prior.clone()) * zk).sum_dim(2).mul_scalar(beta);
        tile(mu.clone()) + sigma_l + sigma_p
    }
}

/// Trains every replica of `job` (one per repetition) and predicts T = `parts.passes` index
/// samples at the test inputs.
pub fn train(
    job: &Job<'_>,
    parts: &EpinetParts<'_>,
    settings: &TrainSettings,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, MethodError> {
    if trains_on_host(res) {
        // The CPU's host loops (`super::host`).
        return train_epinet_host(job, parts, settings, res, progress);
    }
    settings.check_job(job)?;
    let trainer = EpinetTrainer {
        job,
        parts,
        settings,
        device: res.device.clone(),
        path: res.kernel_path(),
    };
    run_chunks(&trainer, res, progress)
}

struct EpinetTrainer<'a> {
    job: &'a Job<'a>,
    parts: &'a EpinetParts<'a>,
    settings: &'a TrainSettings,
    device: Device,
    path: KernelPath,
}

impl EpinetTrainer<'_> {
    fn dz(&self) -> usize {
        self.parts.epi.d_out
    }

    /// Replicas `range` of a `[R, points, D]` host array as a tensor.
    fn prior(
        &self,
        all: &[f32],
        points: usize,
        range: &Range<usize>,
        device: &Device,
    ) -> Tensor<3> {
        let per = points * self.dz();
        let values = all[range.start * per..range.end * per].to_vec();
        upload(values, [range.len(), points, self.dz()], device)
    }

    /// Replicas `range`'s targets, `copies` times over (one block per index) `[R, copies·n, 1]`.
    fn targets(&self, range: &Range<usize>, copies: usize, device: &Device) -> Tensor<3> {
        let y = self.job.tiled_targets(range, copies);
        upload(y, [range.len(), copies * self.points().0, 1], device)
    }

    /// T index samples' outputs at `x` `[R, T·n, 1]`, from stream `rng`, in groups of passes
    /// whose size does not change the values (every pass's z is drawn at once).
    fn passes(
        &self,
        model: &EpinetNet,
        x: Tensor<3>,
        prior: &Tensor<3>,
        rng: &DeviceRng,
    ) -> Vec<Tensor<3>> {
        let t = self.parts.passes;
        let (mu, features) = model.base(x);
        let z = rng.normal(0, t, self.dz());
        let [r, n, _] = mu.dims();
        let group = (4096 / n).clamp(1, t);
        (0..t)
            .step_by(group)
            .map(|s| {
                let e = (s + group).min(t);
                let zg = z.clone().slice([0..r, s..e, 0..self.dz()]);
                model.with_index(&mu, &features, zg, prior, self.parts.prior_scale)
            })
            .collect()
    }
}

impl ChunkTrainer for EpinetTrainer<'_> {
    fn layout(&self) -> Layout {
        self.job.layout(1, self.parts.passes)
    }

    fn bytes_per_replica(&self) -> usize {
        // Parameters with gradients and Adam moments, the base's activations, and the
        // epinet's on K·n points (training) or a group of passes (prediction), every one kept
        // for autodiff's backward pass, twice for safety.
        let (shape, epi) = (self.job.shape, &self.parts.epi);
        let (n, m) = self.points();
        let base: usize = shape.hidden.iter().sum::<usize>() + shape.d_in + 1;
        let epi_widths: usize = epi.hidden.iter().sum::<usize>() + epi.d_in + 2 * epi.d_out;
        let params = (shape.params_per_replica() + epi.params_per_replica()) * 5;
        let k = self.parts.index_samples;
        let activations = n.max(m) * base + (k * n).max(4096) * epi_widths * 3;
        2 * 4 * (params + activations + m * self.parts.passes)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        let (job, st, parts) = (self.job, self.settings, self.parts);
        let rc = range.len();
        let (n, m) = self.points();
        let (k, dz) = (parts.index_samples, self.dz());
        let device = self.device.clone().autodiff();
        let plain = self.device.clone();
        let (seeds, ids) = (
            &job.stream_seeds[range.clone()],
            &job.replica_ids[range.clone()],
        );

        let mut model = EpinetNet::init(
            job.shape,
            &parts.epi,
            &job.init_seeds[range.clone()],
            &parts.epi_seeds[range.clone()],
            &device,
        );
        let decay = model.decay_mask();
        let adam = st.adam();
        let mut optim = AdamState::new();
        let (values, shape) = job.chunk_inputs(&range, false);
        let x = upload(values, shape, &device);
        let y = self.targets(&range, k, &device);
        let prior = self.prior(parts.prior_train, n, &range, &device);
        let head = st.head();
        let index_rng = DeviceRng::new(seeds, ids, PURPOSE_NOISE, &device);
        for t in 1..=st.epochs as u64 {
            let z = index_rng.normal(t, k, dz);
            let (mu, features) = model.base(x.clone());
            let out = model.with_index(&mu, &features, z, &prior, parts.prior_scale);
            // The sum over replicas of each replica's loss, averaged over its K indices; the
            // L2 term enters through Adam's gradient (λ·W).
            let loss = head.value(out, &y).sum();
            let mut grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(model, &mut grads, &adam, st.weight_decay, &decay, self.path);
        }

        // T index samples at the test inputs and T at the training inputs, from streams of
        // their own; the objective per replica is the loss over the latter's indices.
        let model = model.valid();
        let x = x.inner();
        let (values, shape) = job.chunk_inputs(&range, true);
        let x_test = upload(values, shape, &plain);
        let prior_test = self.prior(parts.prior_test, m, &range, &plain);
        let prior = prior.inner();
        let t = parts.passes;
        let predict = DeviceRng::new(seeds, ids, PURPOSE_PREDICT, &plain);
        let groups = self.passes(&model, x_test, &prior_test, &predict);
        let mut pred = vec![0.0f32; rc * t * m];
        let mut done = 0;
        for g in groups {
            let size = g.dims()[1] / m;
            let values = try_download(g, "prediction")?;
            for r in 0..rc {
                let dst = (r * t + done) * m;
                pred[dst..dst + size * m]
                    .copy_from_slice(&values[r * size * m..(r + 1) * size * m]);
            }
            done += size;
        }
        let fit = DeviceRng::new(seeds, ids, PURPOSE_FIT, &plain);
        let y_one = self.targets(&range, 1, &plain);
        let mut train = vec![0.0f64; rc * n];
        let mut loss = vec![0.0f64; rc];
        for g in self.passes(&model, x, &prior, &fit) {
            let size = g.dims()[1] / n;
            let values = try_download(g.clone(), "training fit")?;
            for r in 0..rc {
                for (i, acc) in train[r * n..(r + 1) * n].iter_mut().enumerate() {
                    for p in 0..size {
                        *acc += f64::from(values[(r * size + p) * n + i]);
                    }
                }
            }
            for p in 0..size {
                let one = g.clone().slice([0..rc, p * n..(p + 1) * n, 0..1]);
                let v = try_download(head.value(one, &y_one), "objective")?;
                for (l, v) in loss.iter_mut().zip(v) {
                    *l += f64::from(v);
                }
            }
        }
        let norm = try_download(model.weight_norm(), "weight norm")?;
        let objective = loss
            .iter()
            .zip(norm)
            .map(|(l, w)| l / t as f64 + 0.5 * st.weight_decay * f64::from(w))
            .collect();
        let train_pred = train.iter().map(|v| (v / t as f64) as f32).collect();
        Ok(ChunkOut {
            collected: Vec::new(),
            pred,
            train_pred,
            objective,
            rates: Vec::new(),
            steps: st.epochs as u64,
            // Not counted on this route.
            uploads: 0,
            reads: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(t: Tensor<3>) -> (Vec<f64>, [usize; 3]) {
        let dims = t.dims();
        let v = try_download(t, "test").unwrap();
        (v.into_iter().map(f64::from).collect(), dims)
    }

    /// A dense layer `[n, in] → [n, out]` of replica `r` on the host.
    fn dense(layer: &BatchedLinear, r: usize, x: &[Vec<f64>], relu: Option<f64>) -> Vec<Vec<f64>> {
        let (w, [_, i, o]) = host(layer.weight.val());
        let (b, _) = host(layer.bias.val());
        x.iter()
            .map(|row| {
                (0..o)
                    .map(|j| {
                        let z = b[r * o + j]
                            + (0..i).map(|k| row[k] * w[(r * i + k) * o + j]).sum::<f64>();
                        match relu {
                            Some(a) if z < 0.0 => a * z,
                            _ => z,
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// The tensor forward pass against the formula of the module docs written out on the host,
    /// for two replicas and three indices each; at z = 0 the function is the base's μ.
    #[test]
    fn the_forward_pass_is_the_epinet_formula() {
        let device = Device::flex();
        let base = MlpShape {
            d_in: 2,
            hidden: vec![5, 3],
            d_out: 1,
            negative_slope: 0.1,
        };
        let dz = 4;
        let epi = MlpShape {
            d_in: dz + 2 + 3,
            hidden: vec![6],
            d_out: dz,
            negative_slope: 0.0,
        };
        let net = EpinetNet::init(&base, &epi, &[11, 12], &[21, 22], &device);
        let (r, n, k, beta) = (2, 4, 3, 0.7);
        let xs: Vec<f32> = (0..n * 2).map(|i| (i as f32 * 0.37).sin()).collect();
        let x = upload(xs.clone(), [1, n, 2], &device);
        let zs: Vec<f32> = (0..r * k * dz).map(|i| (i as f32 * 0.91).cos()).collect();
        let z = upload(zs.clone(), [r, k, dz], &device);
        let ps: Vec<f32> = (0..r * n * dz).map(|i| (i as f32 * 0.53).sin()).collect();
        let prior = upload(ps.clone(), [r, n, dz], &device);
        let (mu, features) = net.base(x.clone());
        let (out, dims) = host(net.with_index(&mu, &features, z, &prior, beta));
        assert_eq!(dims, [r, k * n, 1]);
        let rows: Vec<Vec<f64>> = (0..n)
            .map(|i| vec![f64::from(xs[2 * i]), f64::from(xs[2 * i + 1])])
            .collect();
        for rep in 0..r {
            let h1 = dense(&net.base[0], rep, &rows, Some(0.1));
            let h2 = dense(&net.base[1], rep, &h1, Some(0.1));
            let mu_host = dense(&net.head, rep, &h2, None);
            for kk in 0..k {
                let zk: Vec<f64> = (0..dz)
                    .map(|j| f64::from(zs[(rep * k + kk) * dz + j]))
                    .collect();
                let inputs: Vec<Vec<f64>> = (0..n)
                    .map(|i| [zk.clone(), rows[i].clone(), h2[i].clone()].concat())
                    .collect();
                let g = dense(
                    &net.epi[1],
                    rep,
                    &dense(&net.epi[0], rep, &inputs, Some(0.0)),
                    None,
                );
                for i in 0..n {
                    let sigma_l: f64 = (0..dz).map(|j| g[i][j] * zk[j]).sum();
                    let sigma_p: f64 = (0..dz)
                        .map(|j| f64::from(ps[(rep * n + i) * dz + j]) * zk[j])
                        .sum();
                    let want = mu_host[i][0] + sigma_l + beta * sigma_p;
                    let got = out[rep * k * n + kk * n + i];
                    assert!(
                        (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                        "{got} vs {want}"
                    );
                }
            }
        }
        let zero = upload(vec![0.0; r * dz], [r, 1, dz], &device);
        let (at_zero, _) = host(net.with_index(&mu, &features, zero, &prior, beta));
        let (mu, _) = host(mu);
        assert_eq!(at_zero, mu, "f(x, 0) = μ(x)");
    }

    /// The host loops (`super::host`) follow the tensor route step for step: 8 epochs of
    /// lr 1e-2 from the same weights with the same index draws (training, prediction and
    /// fit streams), three replicas, for the base network on the feature-major loops (2-6-4-1)
    /// and on the point-major tiles (2-30-37-1), with the prior (β = 0.7) and K = 3 indices
    /// of D = 4. The two differ in the floating-point order of their sums only, which eight
    /// Adam steps carry into the outputs at well under 1e-4; a wrong gradient of either
    /// network moves a step by up to lr = 1e-2, a hundred times that (a flipped sign of the
    /// output bias's gradient, or the epinet's gradient left out, fail it by 0.02–0.3). Adam's
    /// step is blind to a constant factor on a whole parameter's gradient, so the scale of the
    /// loss is checked through the objective, which both routes compute.
    #[test]
    fn the_host_loops_follow_the_tensor_route() {
        use uqbench_engine::backend::BackendKind;
        use uqbench_engine::trainer::TrainSettings;
        let (n, m, dz) = (43, 17, 4);
        let x: Vec<f32> = (0..2 * n).map(|i| (i as f32 * 0.61).sin()).collect();
        let y: Vec<f32> = (0..n)
            .map(|i| (i as f32 * 0.3).cos() + 0.2 * x[2 * i])
            .collect();
        let x_test: Vec<f32> = (0..2 * m).map(|i| (i as f32 * 0.23).cos()).collect();
        let targets = vec![y];
        let prior_train: Vec<f32> = (0..3 * n * dz).map(|i| (i as f32 * 0.53).sin()).collect();
        let prior_test: Vec<f32> = (0..3 * m * dz).map(|i| (i as f32 * 0.29).cos()).collect();
        for hidden in [vec![6, 4], vec![30, 37]] {
            let h = *hidden.last().unwrap();
            let shape = MlpShape {
                d_in: 2,
                hidden,
                d_out: 1,
                negative_slope: 0.01,
            };
            let job = Job {
                shape: &shape,
                x_train: &x,
                targets: &targets,
                replica_targets: &[0, 0, 0],
                init_seeds: &[1, 2, 3],
                stream_seeds: &[4, 5, 6],
                replica_ids: &[0, 1, 2],
                x_test: &x_test,
                init: None,
                inputs: None,
            };
            let parts = EpinetParts {
                epi: MlpShape {
                    d_in: dz + 2 + h,
                    hidden: vec![7, 5],
                    d_out: dz,
                    negative_slope: 0.0,
                },
                epi_seeds: &[7, 8, 9],
                prior_train: &prior_train,
                prior_test: &prior_test,
                prior_scale: 0.7,
                index_samples: 3,
                passes: 5,
            };
            let settings = TrainSettings::paper(8, n);
            let run = |host: bool| {
                let mut res = Resources::new(BackendKind::Flex, Device::flex());
                res.host_loops = host;
                res.threads = 1;
                train(&job, &parts, &settings, &res, &|_| {}).unwrap()
            };
            let (h, t) = (run(true), run(false));
            let case = format!("{:?}", shape.hidden);
            crate::own_net::assert_routes_agree(&h, &t, &case);
            // The passes are distinct functions.
            let spread = (0..m)
                .map(|i| (h.test_out[i] - h.test_out[m + i]).abs())
                .fold(0.0f32, f32::max);
            assert!(spread > 1e-3, "{case}: index samples differ: {spread}");
        }
    }

    /// The epinet reads the base's features with their gradient stopped: the base's gradient
    /// is the one it gets with the epinet's output held constant (not so without `detach`,
    /// where the epinet's path reaches the hidden layers).
    #[test]
    fn the_base_learns_only_through_its_own_output() {
        let device = Device::flex().autodiff();
        let base = MlpShape {
            d_in: 1,
            hidden: vec![4],
            d_out: 1,
            negative_slope: 0.0,
        };
        let epi = MlpShape {
            d_in: 3 + 1 + 4,
            hidden: vec![5],
            d_out: 3,
            negative_slope: 0.0,
        };
        let net = EpinetNet::init(&base, &epi, &[3], &[4], &device);
        let x = upload(vec![-0.5, 0.1, 0.9], [1, 3, 1], &device);
        let z = upload(vec![0.3, -1.2, 0.8, 1.1, 0.2, -0.4], [1, 2, 3], &device);
        let prior = upload(vec![0.0; 9], [1, 3, 3], &device);
        let grad_of_hidden = |held: bool| {
            let (mu, features) = net.base(x.clone());
            let out = net.with_index(&mu, &features, z.clone(), &prior, 0.0);
            let out = if held {
                let tiled = Tensor::cat(vec![mu.clone(), mu], 1);
                let rest = (out - tiled.clone()).detach();
                tiled + rest
            } else {
                out
            };
            let grads = out.square().sum().backward();
            let g = net.base[0].weight.val().grad(&grads).expect("a gradient");
            try_download(g, "gradient").unwrap()
        };
        let (free, held) = (grad_of_hidden(false), grad_of_hidden(true));
        for (a, b) in free.iter().zip(&held) {
            assert!(
                (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                "{free:?} vs {held:?}"
            );
        }
        assert!(
            held.iter().any(|g| g.abs() > 1e-4),
            "the base does learn: {held:?}"
        );
    }
}
