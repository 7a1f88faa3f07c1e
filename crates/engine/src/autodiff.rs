//! The autodiff route: the built-in network as a `#[derive(Module)]` burn module
//! ([`McdNet`]: batched linear layers, leaky ReLU, a [`StochasticLinear`] last layer), trained
//! by burn's autodiff and the per-element Adam of [`crate::optim`] on the engine's scheduler
//! ([`run_chunks`]: chunks, threads, progress, divergence).
//!
//! It computes what the engine computes, from the same seeds and the same device noise
//! streams (draw 2t of the noise stream at step t, the prediction and fit streams at the
//! end), with burn's autodiff in place of the hand-written backward pass: a module of your
//! own can start here and be compared with the engine (`crates/engine/tests/engine/engine.rs` checks that
//! both routes agree for every built-in stochastic layer). It is about 3× slower than the
//! engine on the CPU (`uqbench bench train --route autodiff`), which is why the built-in
//! methods run on the engine.

use std::ops::Range;
use std::sync::Arc;

use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor};

use crate::cpu::kernels::KernelPath;
use crate::device_rng::DeviceRng;
use crate::layers::{BatchedLinear, BatchedLinearConfig, LeakyRelu, StochasticLinear};
use crate::mlp::{xavier_init, HostWeights, MlpShape};
use crate::optim::AdamState;
use crate::stack::Stack;
use crate::stochastic::StochasticLayer;
use crate::trainer::chunk::{PURPOSE_FIT, PURPOSE_NOISE, PURPOSE_PREDICT};
use crate::trainer::{
    run_chunks, try_download, upload, Batching, ChunkOut, ChunkTrainer, Job, Layout, Resources,
    TrainOutput, TrainSettings,
};
use uqbench_core::MethodError;

/// R replicas of the MLP with a stochastic layer in front of the last linear layer.
#[derive(Module, Debug)]
pub struct McdNet {
    /// The hidden layers, input to last hidden.
    pub hidden: Vec<BatchedLinear>,
    /// The activation after every hidden layer.
    pub activation: LeakyRelu,
    /// The stochastic last layer.
    pub last: StochasticLinear,
}

impl McdNet {
    /// The network for `seeds.len()` replicas, Xavier-initialised per replica as the engine.
    pub fn init(
        shape: &MlpShape,
        layer: Arc<dyn StochasticLayer>,
        seeds: &[u64],
        device: &Device,
    ) -> McdNet {
        McdNet::from_host(shape, layer, xavier_init(shape, seeds), device)
    }

    /// The network for `host.replicas` replicas starting from the weights `host`.
    pub fn from_host(
        shape: &MlpShape,
        layer: Arc<dyn StochasticLayer>,
        host: HostWeights,
        device: &Device,
    ) -> McdNet {
        let r = host.replicas;
        let mut layers: Vec<BatchedLinear> = host
            .layers
            .into_iter()
            .zip(shape.layers())
            .map(|((w, b), (d_in, d_out))| {
                BatchedLinearConfig { d_in, d_out }.from_host(w, b, r, device)
            })
            .collect();
        let last = layers.pop().expect("at least one layer");
        McdNet {
            hidden: layers,
            activation: LeakyRelu {
                slope: shape.negative_slope,
            },
            last: StochasticLinear::new(layer, last, device),
        }
    }

    /// Which parameters take weight decay, in visiting order: each layer's weight, not its
    /// bias, nor the stochastic layer's parameters.
    pub fn decay_mask(&self) -> Vec<bool> {
        let layers = self.hidden.len() + 1;
        let mut mask: Vec<bool> = (0..layers).flat_map(|_| [true, false]).collect();
        mask.extend(self.last.params.iter().map(|_| false));
        mask
    }

    /// Σ over layers of ‖W‖² per replica `[R, 1, 1]`.
    pub fn weight_norm(&self) -> Tensor<3> {
        self.hidden
            .iter()
            .chain([&self.last.linear])
            .map(|l| l.weight.val().square().sum_dim(2).sum_dim(1))
            .reduce(|a, b| a + b)
            .expect("at least one layer")
    }

    /// The forward pass. The noise is an explicit argument: with it the network is
    /// stochastic (training and MC prediction alike), without it deterministic.
    ///
    /// # Shapes
    /// - `x`: `[1 or R, n, d]`, `noise`: `[R, n, width]` → `[R, n, d_out]`
    pub fn forward(&self, x: Tensor<3>, noise: Option<Tensor<3>>) -> Tensor<3> {
        let w: Vec<Tensor<3>> = self.hidden.iter().map(|l| l.weight.val()).collect();
        let b: Vec<Tensor<3>> = self.hidden.iter().map(|l| l.bias.val()).collect();
        let stack = Stack {
            w: &w,
            b: &b,
            slope: self.activation.slope,
            path: KernelPath::Tensor,
        };
        let (h, _) = stack.hidden(x, w.len());
        self.last.forward(h, noise)
    }
}

/// Trains every replica of `job` on the autodiff route and predicts the test inputs, like
/// [`crate::trainer::train`] for settings with a stochastic layer, full batches and no
/// adversarial pass.
pub fn train(
    job: &Job<'_>,
    settings: &TrainSettings,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, MethodError> {
    settings.check_job(job)?;
    job.require_shared_inputs("the autodiff route")?;
    let layer = settings.dropout.clone().ok_or_else(|| {
        MethodError::invalid(
            "autodiff route: stochastic layer",
            "none",
            "a stochastic layer (the route trains McdNet)",
        )
    })?;
    if settings.batching != Batching::Full || settings.adversarial.is_some() {
        return Err(MethodError::invalid(
            "autodiff route: batching",
            format!("{:?}", settings.batching),
            "full batches without an adversarial pass",
        ));
    }
    let trainer = AutodiffTrainer {
        job,
        settings,
        layer,
        device: res.device.clone(),
        path: res.kernel_path(),
    };
    run_chunks(&trainer, res, progress)
}

/// [`McdNet`] on the engine's trainer: how one chunk of replicas trains and predicts.
struct AutodiffTrainer<'a> {
    job: &'a Job<'a>,
    settings: &'a TrainSettings,
    layer: Arc<dyn StochasticLayer>,
    device: Device,
    path: KernelPath,
}

impl AutodiffTrainer<'_> {
    fn k(&self) -> usize {
        *self.job.shape.hidden.last().unwrap_or(&self.job.shape.d_in)
    }

    fn noise(&self, rng: &DeviceRng, counter: u64, n: usize) -> Tensor<3> {
        let width = self.layer.noise_width(self.k(), self.job.shape.d_out);
        self.layer.draw(rng, counter, n, width)
    }
}

impl ChunkTrainer for AutodiffTrainer<'_> {
    fn layout(&self) -> Layout {
        Layout {
            rates: self.layer.rate_name().is_some(),
            ..self
                .job
                .layout(self.job.shape.d_out, self.settings.mc_passes)
        }
    }

    fn bytes_per_replica(&self) -> usize {
        // Parameters with gradients and Adam moments, and every layer's activations kept for
        // autodiff's backward pass, twice for safety (autodiff keeps more than the engine).
        let shape = self.job.shape;
        let (n, m) = self.points();
        let widths: usize = shape.hidden.iter().sum::<usize>() + shape.d_in + shape.d_out;
        let params = shape.params_per_replica() * 5;
        let activations = n.max(m) * widths * 4;
        2 * 4 * (params + activations + m * shape.d_out * self.settings.mc_passes)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        let (job, st) = (self.job, self.settings);
        let (shape, rc) = (job.shape, range.len());
        let (n, m) = self.points();
        let (d, dout) = (shape.d_in, shape.d_out);
        let device = self.device.clone().autodiff();
        let plain = self.device.clone();
        let seeds = &job.stream_seeds[range.clone()];
        let ids = &job.replica_ids[range.clone()];

        // Training: burn's autodiff for the gradients, Adam per element with λ on the weights.
        let init = job.initial_weights(range.clone());
        let mut model = McdNet::from_host(shape, self.layer.clone(), init, &device);
        let decay = model.decay_mask();
        let adam = st.adam();
        let mut optim = AdamState::new();
        let x = upload(job.x_train.to_vec(), [1, n, d], &device);
        let mut y_host = Vec::with_capacity(rc * n);
        for r in range.clone() {
            y_host.extend_from_slice(&job.targets[job.replica_targets[r]]);
        }
        let y = upload(y_host, [rc, n, 1], &device);
        let head = st.head();
        let noise_rng = DeviceRng::new(seeds, ids, PURPOSE_NOISE, &device);
        for t in 1..=st.epochs as u64 {
            let noise = self.noise(&noise_rng, 2 * t, n);
            let out = model.forward(x.clone(), Some(noise));
            // The sum over replicas of each replica's data term plus the stochastic layer's
            // regulariser; the L2 term enters through Adam's gradient (λ·W).
            let mut loss = head.value(out, &y).sum();
            if let Some(reg) = model.last.regularizer() {
                loss = loss + reg.sum();
            }
            let mut grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(model, &mut grads, &adam, st.weight_decay, &decay, self.path);
        }

        // The final objective per replica (the layer at its expectation), then T passes at
        // the test inputs and T at the training inputs from streams of their own.
        let model = model.valid();
        let (x, y) = (x.inner(), y.inner());
        let mut objective = head.value(model.forward(x.clone(), None), &y)
            + model.weight_norm().mul_scalar(0.5 * st.weight_decay);
        if let Some(reg) = model.last.regularizer() {
            objective = objective + reg;
        }
        let objective = download(objective)?.into_iter().map(f64::from).collect();
        let rates = match (self.layer.rate_name(), model.last.params.first()) {
            (Some(_), Some(p)) => download(p.val().slice([0..rc, 0..1, 0..1]))?
                .into_iter()
                .map(|v| self.layer.rate(f64::from(v)))
                .collect(),
            _ => Vec::new(),
        };
        let x_test = upload(job.x_test.to_vec(), [1, m, d], &plain);
        let t = st.mc_passes;
        let mut pred = vec![0.0f32; rc * t * m * dout];
        let mut train = vec![0.0f64; rc * n];
        let (predict_rng, fit_rng) = (
            DeviceRng::new(seeds, ids, PURPOSE_PREDICT, &plain),
            DeviceRng::new(seeds, ids, PURPOSE_FIT, &plain),
        );
        for pass in 0..t {
            let noise = self.noise(&predict_rng, pass as u64, m);
            let values = download(model.forward(x_test.clone(), Some(noise)))?;
            for r in 0..rc {
                let dst = ((r * t + pass) * m) * dout;
                pred[dst..dst + m * dout]
                    .copy_from_slice(&values[r * m * dout..(r + 1) * m * dout]);
            }
            let noise = self.noise(&fit_rng, pass as u64, n);
            let values = download(model.forward(x.clone(), Some(noise)))?;
            for (acc, v) in train.iter_mut().zip(values.iter().step_by(dout)) {
                *acc += f64::from(*v);
            }
        }
        let train = train.iter().map(|v| (v / t as f64) as f32).collect();
        Ok(ChunkOut {
            collected: Vec::new(),
            pred,
            train_pred: train,
            objective,
            rates,
            steps: st.epochs as u64,
            // Not counted on this route.
            uploads: 0,
            reads: 0,
        })
    }
}

fn download(t: Tensor<3>) -> Result<Vec<f32>, MethodError> {
    try_download(t, "prediction")
}
