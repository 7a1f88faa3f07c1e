//! BatchEnsemble's network and its training: R replicas (one per repetition), each M members
//! sharing one weight matrix per layer, as a `#[derive(Module)]` burn module trained by burn's
//! autodiff and the engine's per-element Adam on the engine's scheduler ([`run_chunks`]:
//! chunks, threads, progress, divergence). One tensor program for all replicas and members, on
//! every backend (flex on the CPU, wgpu on a GPU).
//!
//! The members are laid out as M blocks of the points (`[R, M·n, ·]`), so one matrix product
//! with the shared W serves all of them (the paper's vectorisation):
//!
//! ```text
//! layer(h) = ((h ∘ r_m) · W) ∘ s_m + b_m      r_m [in], s_m [out], b_m [out] per member
//!          = h · (W ∘ r_m s_mᵀ) + b_m
//! ```
//!
//! and the head's mean over the M·n points is the mean over members of each member's mean
//! loss. A replica's numbers depend on its own seeds only: every product is batched per
//! replica.

use std::ops::Range;

use burn::module::{Module, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};

use super::host::{train_rank1_host, FastWeights, Rank1Parts};
use uqbench_core::{MethodError, Rng};
use uqbench_engine::cpu::kernels::KernelPath;
use uqbench_engine::layers::LeakyRelu;
use uqbench_engine::mlp::{xavier_init, MlpShape};
use uqbench_engine::optim::AdamState;
use uqbench_engine::trainer::{
    run_chunks, trains_on_host, try_download, upload, ChunkOut, ChunkTrainer, Job, Layout,
    Resources, TrainOutput, TrainSettings,
};

/// R replicas of one BatchEnsemble layer of M members.
#[derive(Module, Debug)]
pub struct BatchLayer {
    /// The shared weights `[R, in, out]`.
    pub weight: Param<Tensor<3>>,
    /// The input fast weights r_m `[R, M, in]`.
    pub fast_in: Param<Tensor<3>>,
    /// The output fast weights s_m `[R, M, out]`.
    pub fast_out: Param<Tensor<3>>,
    /// The members' biases `[R, M, out]`.
    pub bias: Param<Tensor<3>>,
}

/// A per-member `[R, M, w]` tensor repeated over the n points of each member's block:
/// `[R, M·n, w]`.
fn tile(t: Tensor<3>, n: usize) -> Tensor<3> {
    let [r, m, w] = t.dims();
    t.unsqueeze_dim::<4>(2)
        .expand([r, m, n, w])
        .reshape([r, m * n, w])
}

impl BatchLayer {
    /// # Shapes
    /// - `h`: `[R, M·n, in]` (M blocks of n points) → `[R, M·n, out]`
    pub fn forward(&self, h: Tensor<3>, n: usize) -> Tensor<3> {
        let z = (h * tile(self.fast_in.val(), n)).matmul(self.weight.val());
        z * tile(self.fast_out.val(), n) + tile(self.bias.val(), n)
    }
}

/// One replica's initial fast weights from its seed: layer by layer, for every member r_m
/// then s_m, each N(1, `fast_sd`²) (the draws' order is the format of both routes).
pub fn fast_init(shape: &MlpShape, members: usize, seed: u64, fast_sd: f64) -> FastWeights {
    let mut rng = Rng::new(seed);
    shape
        .layers()
        .into_iter()
        .map(|(d_in, d_out)| {
            let (mut fast_in, mut fast_out) = (Vec::new(), Vec::new());
            for _ in 0..members {
                fast_in.extend((0..d_in).map(|_| (1.0 + fast_sd * rng.normal()) as f32));
                fast_out.extend((0..d_out).map(|_| (1.0 + fast_sd * rng.normal()) as f32));
            }
            (fast_in, fast_out)
        })
        .collect()
}

/// R replicas of an M-member BatchEnsemble MLP.
#[derive(Module, Debug)]
pub struct BatchEnsembleNet {
    /// The layers, input to output.
    pub layers: Vec<BatchLayer>,
    /// The hidden layers' activation.
    pub activation: LeakyRelu,
}

impl BatchEnsembleNet {
    /// The network for `shared_seeds.len()` replicas of `members` members: shared weights
    /// Glorot-initialised from each replica's own seed, fast weights N(1, `fast_sd`²) from
    /// its `fast_seeds` entry, member biases zero.
    pub fn init(
        shape: &MlpShape,
        members: usize,
        shared_seeds: &[u64],
        fast_seeds: &[u64],
        fast_sd: f64,
        device: &Device,
    ) -> BatchEnsembleNet {
        let r = shared_seeds.len();
        let fast: Vec<FastWeights> = fast_seeds
            .iter()
            .map(|&s| fast_init(shape, members, s, fast_sd))
            .collect();
        let param =
            |v: Vec<f32>, dims: [usize; 3]| Param::from_data(TensorData::new(v, dims), device);
        let layers = xavier_init(shape, shared_seeds)
            .layers
            .into_iter()
            .zip(shape.layers())
            .enumerate()
            .map(|(l, ((w, _), (d_in, d_out)))| {
                let fast_in = fast.iter().flat_map(|f| f[l].0.iter().copied()).collect();
                let fast_out = fast.iter().flat_map(|f| f[l].1.iter().copied()).collect();
                BatchLayer {
                    weight: param(w, [r, d_in, d_out]),
                    fast_in: param(fast_in, [r, members, d_in]),
                    fast_out: param(fast_out, [r, members, d_out]),
                    bias: param(vec![0.0; r * members * d_out], [r, members, d_out]),
                }
            })
            .collect();
        BatchEnsembleNet {
            layers,
            activation: LeakyRelu {
                slope: shape.negative_slope,
            },
        }
    }

    /// Members M.
    pub fn members(&self) -> usize {
        self.layers[0].fast_in.dims()[1]
    }

    /// Which parameters take weight decay, in visiting order: the shared weights only.
    pub fn decay_mask(&self) -> Vec<bool> {
        self.layers
            .iter()
            .flat_map(|_| [true, false, false, false])
            .collect()
    }

    /// Σ over layers of ‖W‖² of the shared weights per replica `[R, 1, 1]`.
    pub fn weight_norm(&self) -> Tensor<3> {
        self.layers
            .iter()
            .map(|l| l.weight.val().square().sum_dim(2).sum_dim(1))
            .reduce(|a, b| a + b)
            .expect("at least one layer")
    }

    /// Every member's output at the inputs `x` `[1, n, d]`: `[R, M·n, out]`, M blocks of the
    /// n points.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [_, n, d] = x.dims();
        let r = self.layers[0].weight.dims()[0];
        let m = self.members();
        let mut h = x
            .unsqueeze_dim::<4>(1)
            .expand([r, m, n, d])
            .reshape([r, m * n, d]);
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward(h, n);
            if i < last {
                h = self.activation.forward(h);
            }
        }
        h
    }
}

/// What BatchEnsemble's trainer needs beyond the engine's job.
pub struct BatchParts<'a> {
    /// Members M.
    pub members: usize,
    /// Per replica, the fast weights' seed.
    pub fast_seeds: &'a [u64],
    /// The fast weights' initial sd around 1.
    pub fast_init_sd: f64,
}

/// Trains every replica of `job` (one per repetition) and predicts its M members at the test
/// inputs (the passes of the output).
pub fn train(
    job: &Job<'_>,
    parts: &BatchParts<'_>,
    settings: &TrainSettings,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, MethodError> {
    if trains_on_host(res) {
        // The CPU's host loops: each member through an ensemble member's passes.
        let fast = |r: usize| {
            fast_init(
                job.shape,
                parts.members,
                parts.fast_seeds[r],
                parts.fast_init_sd,
            )
        };
        let rank1 = Rank1Parts {
            members: parts.members,
            fast: &fast,
        };
        return train_rank1_host(job, &rank1, settings, res, progress);
    }
    settings.check_job(job)?;
    let trainer = BatchTrainer {
        job,
        parts,
        settings,
        device: res.device.clone(),
        path: res.kernel_path(),
    };
    run_chunks(&trainer, res, progress)
}

struct BatchTrainer<'a> {
    job: &'a Job<'a>,
    parts: &'a BatchParts<'a>,
    settings: &'a TrainSettings,
    device: Device,
    path: KernelPath,
}

impl BatchTrainer<'_> {
    /// Replicas `range`'s targets, once per member `[R, M·n, 1]`.
    fn targets(&self, range: &Range<usize>, device: &Device) -> Tensor<3> {
        let m = self.parts.members;
        let y = self.job.tiled_targets(range, m);
        upload(y, [range.len(), m * self.job.n_train(), 1], device)
    }
}

impl ChunkTrainer for BatchTrainer<'_> {
    fn layout(&self) -> Layout {
        self.job.layout(1, self.parts.members)
    }

    fn bytes_per_replica(&self) -> usize {
        // Parameters with gradients and Adam moments; per layer and member the products
        // autodiff keeps (input ∘ r, ·W, ∘ s, + b, the activation), on the larger point set;
        // twice for safety.
        let shape = self.job.shape;
        let m = self.parts.members;
        let (n, mt) = self.points();
        let fast: usize = shape.layers().iter().map(|&(i, o)| m * (i + 2 * o)).sum();
        let params = (shape.params_per_replica() + fast) * 5;
        let widths: usize = shape.layers().iter().map(|&(i, o)| i + 4 * o).sum();
        2 * 4 * (params + m * n.max(mt) * widths)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        let (job, st, parts) = (self.job, self.settings, self.parts);
        let rc = range.len();
        let (n, _) = self.points();
        let m = parts.members;
        let device = self.device.clone().autodiff();
        let mut model = BatchEnsembleNet::init(
            job.shape,
            m,
            &job.init_seeds[range.clone()],
            &parts.fast_seeds[range.clone()],
            parts.fast_init_sd,
            &device,
        );
        let decay = model.decay_mask();
        let adam = st.adam();
        let mut optim = AdamState::new();
        let (values, shape) = job.chunk_inputs(&range, false);
        let x = upload(values, shape, &device);
        let y = self.targets(&range, &device);
        let head = st.head();
        for _ in 0..st.epochs {
            // The sum over replicas of each replica's loss, the mean over its members; the L2
            // term enters through Adam's gradient (λ·W on the shared weights).
            let loss = head.value(model.forward(x.clone()), &y).sum();
            let mut grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(model, &mut grads, &adam, st.weight_decay, &decay, self.path);
        }

        // The members at the test inputs: `[R, M·m]` is the engine's `[rc, T, m]` with the
        // members as the passes. At the training inputs, the members' mean and the objective.
        let model = model.valid();
        let plain = self.device.clone();
        let (values, shape) = job.chunk_inputs(&range, true);
        let x_test = upload(values, shape, &plain);
        let pred = try_download(model.forward(x_test), "prediction")?;
        let out = model.forward(x.inner());
        let y = y.inner();
        let fit = try_download(out.clone(), "training fit")?;
        let train_pred = (0..rc)
            .flat_map(|r| {
                let fit = &fit;
                (0..n).map(move |i| {
                    let sum: f64 = (0..m).map(|k| f64::from(fit[(r * m + k) * n + i])).sum();
                    (sum / m as f64) as f32
                })
            })
            .collect();
        let loss = try_download(head.value(out, &y), "objective")?;
        let norm = try_download(model.weight_norm(), "weight norm")?;
        let objective = loss
            .iter()
            .zip(norm)
            .map(|(&l, w)| f64::from(l) + 0.5 * st.weight_decay * f64::from(w))
            .collect();
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

    fn host(t: Tensor<3>) -> Vec<f64> {
        let v = try_download(t, "test").unwrap();
        v.into_iter().map(f64::from).collect()
    }

    /// Member `k` of replica `r` on the host, from the layers' values: per layer
    /// z_j = Σ_i h_i r_i W_ij s_j + b_j (the rank-1 member weights of eq. 2 written out),
    /// leaky ReLU between layers.
    fn member(net: &BatchEnsembleNet, r: usize, k: usize, x: &[f64]) -> f64 {
        let m = net.members();
        let mut h = x.to_vec();
        for (l, layer) in net.layers.iter().enumerate() {
            let [_, i, o] = layer.weight.dims();
            let (w, rin) = (host(layer.weight.val()), host(layer.fast_in.val()));
            let (sout, b) = (host(layer.fast_out.val()), host(layer.bias.val()));
            h = (0..o)
                .map(|j| {
                    let dot: f64 = (0..i)
                        .map(|a| h[a] * rin[(r * m + k) * i + a] * w[(r * i + a) * o + j])
                        .sum();
                    let z = dot * sout[(r * m + k) * o + j] + b[(r * m + k) * o + j];
                    if l + 1 < net.layers.len() && z < 0.0 {
                        net.activation.slope * z
                    } else {
                        z
                    }
                })
                .collect();
        }
        h[0]
    }

    fn shape() -> MlpShape {
        MlpShape {
            d_in: 2,
            hidden: vec![5, 3],
            d_out: 1,
            negative_slope: 0.1,
        }
    }

    /// The tensor forward pass is every member's rank-1-modulated network (two replicas,
    /// three members, fast weights far from 1); members differ.
    #[test]
    fn every_member_is_its_own_rank_one_network() {
        let device = Device::flex();
        let (r, m, n) = (2, 3, 4);
        let net = BatchEnsembleNet::init(&shape(), m, &[11, 12], &[21, 22], 0.5, &device);
        let xs: Vec<f32> = (0..n * 2).map(|i| (i as f32 * 0.37).sin()).collect();
        let out = host(net.forward(upload(xs.clone(), [1, n, 2], &device)));
        assert_eq!(out.len(), r * m * n);
        for rep in 0..r {
            for k in 0..m {
                for i in 0..n {
                    let x = [f64::from(xs[2 * i]), f64::from(xs[2 * i + 1])];
                    let want = member(&net, rep, k, &x);
                    let got = out[(rep * m + k) * n + i];
                    assert!(
                        (got - want).abs() < 1e-5 * (1.0 + want.abs()),
                        "{got} vs {want}"
                    );
                }
            }
        }
        let spread = (0..n)
            .map(|i| (out[i] - out[n + i]).abs())
            .fold(0.0, f64::max);
        assert!(spread > 1e-3, "members 0 and 1 differ: {spread}");
    }

    /// The host loops (`super::host`) follow the tensor route step for step: 8 epochs of
    /// lr 1e-2 from the same weights and fast weights, for the feature-major loops (2-6-4-1)
    /// and the point-major tiles (2-30-37-1: in·out = 1 110 > 800), three replicas of three
    /// members. The two differ in the floating-point order of their sums only (f32, about 1e-7
    /// relative per operation), which eight Adam steps carry into the outputs at well under
    /// 1e-4; a wrong gradient of W, r, s or b moves a step by up to lr = 1e-2, a hundred times
    /// that. With unit fast weights the members stay one network on the host too.
    #[test]
    fn the_host_loops_follow_the_tensor_route() {
        use uqbench_engine::backend::BackendKind;
        use uqbench_engine::trainer::{Job, TrainSettings};
        let n = 43;
        let x: Vec<f32> = (0..2 * n).map(|i| (i as f32 * 0.61).sin()).collect();
        let y: Vec<f32> = (0..n)
            .map(|i| (i as f32 * 0.3).cos() + 0.2 * x[2 * i])
            .collect();
        let x_test: Vec<f32> = (0..2 * 17).map(|i| (i as f32 * 0.23).cos()).collect();
        let targets = vec![y];
        for (hidden, fast_sd) in [(vec![6, 4], 0.5), (vec![30, 37], 0.5), (vec![6, 4], 0.0)] {
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
            let settings = TrainSettings::paper(8, n);
            let parts = BatchParts {
                members: 3,
                fast_seeds: &[7, 8, 9],
                fast_init_sd: fast_sd,
            };
            let run = |host: bool| {
                let mut res = Resources::new(BackendKind::Flex, Device::flex());
                res.host_loops = host;
                res.threads = 1;
                train(&job, &parts, &settings, &res, &|_| {}).unwrap()
            };
            let (h, t) = (run(true), run(false));
            let case = format!("{:?}, fast sd {fast_sd}", shape.hidden);
            crate::own_net::assert_routes_agree(&h, &t, &case);
            // Members [R, M, T]: distinct with fast weights, one network without.
            let m = x_test.len() / 2;
            let spread = (0..m)
                .map(|i| (h.test_out[i] - h.test_out[m + i]).abs())
                .fold(0.0f32, f32::max);
            if fast_sd > 0.0 {
                assert!(
                    spread > 1e-3,
                    "{case}: members differ after training: {spread}"
                );
            } else {
                assert_eq!(spread, 0.0, "{case}: unit fast weights are one network");
            }
        }
    }

    /// With unit fast weights every member is the plain MLP of the shared weights, the Glorot
    /// network the replica's seed gives every network method.
    #[test]
    fn unit_fast_weights_are_one_network() {
        let device = Device::flex();
        let (m, n) = (4, 5);
        let net = BatchEnsembleNet::init(&shape(), m, &[31], &[41], 0.0, &device);
        let xs: Vec<f32> = (0..n * 2).map(|i| (i as f32 * 0.71).cos()).collect();
        let out = host(net.forward(upload(xs.clone(), [1, n, 2], &device)));
        let init = xavier_init(&shape(), &[31]);
        for i in 0..n {
            let mut h = vec![f64::from(xs[2 * i]), f64::from(xs[2 * i + 1])];
            for (l, ((w, _), (d_in, d_out))) in init.layers.iter().zip(shape().layers()).enumerate()
            {
                h = (0..d_out)
                    .map(|j| {
                        let z: f64 = (0..d_in).map(|a| h[a] * f64::from(w[a * d_out + j])).sum();
                        if l < 2 && z < 0.0 {
                            0.1 * z
                        } else {
                            z
                        }
                    })
                    .collect();
            }
            for k in 0..m {
                let got = out[k * n + i];
                assert!(
                    (got - h[0]).abs() < 1e-5 * (1.0 + h[0].abs()),
                    "member {k}: {got} vs {}",
                    h[0]
                );
            }
        }
    }
}
