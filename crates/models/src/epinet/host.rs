//! The epinet (Osband et al. 2023) on the host loops: per replica a base network μ(x) and a
//! small ReLU MLP g_θ beside it, f(x, z) = μ(x) + g_θ((z, sg[x, h(x)]))ᵀz + β·Σ_d z_d p_d(x),
//! trained on the mean over K index samples z_k ∼ N(0, I_D) per step of each sample's loss
//! (the tensor route, `uqbench_models`' `epinet::net`, documents the conventions).
//!
//! One step: the base network's body once at the N points (its last hidden layer h, the
//! host network's loops), μ = h·w + b, then g_θ once on the K·N points of the K index blocks
//! (the input rows z, x, h; feature-major, the loops of [002]'s small networks), then the
//! head's δ at the K·N outputs. The epinet's backward takes δ·z at its D outputs; the base's
//! takes Σ_k δ_k at μ (μ does not depend on z, and the features' gradient is stopped), so
//! the base runs one forward and one backward per step, as an ensemble member does. Adam (the
//! engine's, per element) steps both networks with λ on their weights. The same objective,
//! initial weights, index draws (the replica's own streams, [`HostStream`] for the device's
//! `DeviceRng`) and optimiser as the tensor route, with the floating-point order of the host
//! loops: equal in distribution, not bit for bit.

use std::ops::Range;

use uqbench_core::MethodError;
use uqbench_engine::cpu::feature_major::{feature_major, FeatureMajorNet};
use uqbench_engine::cpu::kernels::AdamStep;
use uqbench_engine::cpu::simd::{self, Lanes, Level};
use uqbench_engine::cpu::{adam_at, backward_at, forward_at, offsets, Part, ReplicaNet};
use uqbench_engine::device_rng::HostStream;
use uqbench_engine::mlp::{xavier_init, HostWeights, MlpShape};
use uqbench_engine::trainer::{
    host_chunk, run_chunks, ChunkOut, ChunkTrainer, HostChunk, Job, Layout, Resources, TrainOutput,
    TrainSettings, PURPOSE_FIT, PURPOSE_NOISE, PURPOSE_PREDICT,
};

/// What the epinet's trainer needs beyond the engine's job (the base network is the job's).
pub struct EpinetParts<'a> {
    /// The epinet g_θ's shape: input D + d + H, hidden, output D (ReLU).
    pub epi: MlpShape,
    /// Per replica, the epinet's initialisation seed.
    pub epi_seeds: &'a [u64],
    /// p_d at the training inputs `[R, n, D]`, row-major.
    pub prior_train: &'a [f32],
    /// p_d at the test inputs `[R, m, D]`.
    pub prior_test: &'a [f32],
    /// β, the prior's scale.
    pub prior_scale: f64,
    /// Index samples K per training step.
    pub index_samples: usize,
    /// Index samples T at prediction.
    pub passes: usize,
}

/// Trains every replica of `job` (one per repetition) as an epinet on the host loops and
/// predicts T = `parts.passes` index samples at the test inputs (`[R, T, m]`). Full batches,
/// one output, no stochastic layer or collectors.
pub fn train_epinet_host(
    job: &Job<'_>,
    parts: &EpinetParts<'_>,
    settings: &TrainSettings,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, MethodError> {
    settings.check_job(job)?;
    settings.check_plain(job.shape, "an epinet")?;
    if job.shape.hidden.is_empty() || parts.index_samples == 0 || parts.passes == 0 {
        return Err(MethodError::Failed(
            "an epinet needs a hidden layer (its features), an index sample per step and a \
             prediction pass"
                .into(),
        ));
    }
    let trainer = EpinetHost {
        job,
        parts,
        settings,
        level: res.simd,
    };
    run_chunks(&trainer, res, progress)
}

struct EpinetHost<'a> {
    job: &'a Job<'a>,
    parts: &'a EpinetParts<'a>,
    settings: &'a TrainSettings,
    level: Level,
}

impl EpinetHost<'_> {
    /// The base network's last hidden width H and the index dimension D.
    fn widths(&self) -> (usize, usize) {
        let h = *self
            .job
            .shape
            .hidden
            .last()
            .expect("checked: a hidden layer");
        (h, self.parts.epi.d_out)
    }
}

impl ChunkTrainer for EpinetHost<'_> {
    fn layout(&self) -> Layout {
        self.job.layout(1, self.parts.passes)
    }

    fn bytes_per_replica(&self) -> usize {
        // Both networks' parameters, Adam moments and gradients; the base's activations at
        // the larger point set, the epinet's at K·N points (or the test inputs), their
        // inputs and δ; the predictions.
        let (n, m) = self.points();
        let (base, epi) = (self.job.shape, &self.parts.epi);
        let params = 4 * (base.params_per_replica() + epi.params_per_replica());
        let k = self.parts.index_samples;
        let base_acts = 4 * n.max(m) * base.widths().iter().sum::<usize>();
        let epi_acts = 4 * (k * n).max(m) * (epi.widths().iter().sum::<usize>() + epi.d_in);
        4 * (params + base_acts + epi_acts + m * self.parts.passes)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        Ok(host_chunk(self, range))
    }
}

impl HostChunk for EpinetHost<'_> {
    fn replica_net(&self) -> (&MlpShape, usize, Part) {
        (self.job.shape, self.job.most_points(), Part::Body)
    }

    fn train_on<N: ReplicaNet>(&self, base: N, range: Range<usize>) -> ChunkOut {
        let (job, st, parts) = (self.job, self.settings, self.parts);
        let (d, n, m, t) = (job.shape.d_in, job.n_train(), job.n_test(), parts.passes);
        let (_, dz) = self.widths();
        let rc = range.len();
        let init = (
            xavier_init(job.shape, &job.init_seeds[range.clone()]),
            xavier_init(&parts.epi, &parts.epi_seeds[range.clone()]),
        );
        let mut out = ChunkOut {
            pred: vec![0.0; rc * t * m],
            train_pred: vec![0.0; rc * n],
            objective: vec![0.0; rc],
            steps: st.epochs as u64,
            ..ChunkOut::default()
        };
        let epi_points = (parts.index_samples * n).max(m);
        let mut nets = (
            base,
            FeatureMajorNet::part(parts.epi.layers(), 0.0, epi_points, Part::Whole),
        );
        for r in 0..rc {
            let at = range.start + r;
            // The replica's inputs feature-major: the job's, or its target's own.
            let own = job.replica_targets[at];
            let (xt, xt_test) = (
                feature_major(job.x_train_of(own), d),
                feature_major(job.x_test_of(own), d),
            );
            let mut replica = Replica::new(self, &init, r, at);
            let y = &job.targets[job.replica_targets[at]];
            let prior = &parts.prior_train[at * n * dz..(at + 1) * n * dz];
            for step in 1..=st.epochs as u64 {
                replica.step(
                    &mut nets,
                    (&xt, y, prior),
                    step,
                    st.lr_at(step as usize - 1),
                );
            }
            let prior_test = &parts.prior_test[at * m * dz..(at + 1) * m * dz];
            let pred = &mut out.pred[r * t * m..(r + 1) * t * m];
            replica.passes(&mut nets, &xt_test, prior_test, PURPOSE_PREDICT, |p, f| {
                pred[p * m..(p + 1) * m].copy_from_slice(f);
            });
            // The fit and the objective: T index samples at the training inputs, from a
            // stream of their own.
            let head = st.head();
            let (mut fit, mut loss) = (vec![0.0f64; n], 0.0f64);
            replica.passes(&mut nets, &xt, prior, PURPOSE_FIT, |_, f| {
                for (acc, &v) in fit.iter_mut().zip(f) {
                    *acc += f64::from(v);
                }
                loss += f64::from(head.value_host(Lanes::BASELINE, f, y));
            });
            for (o, f) in out.train_pred[r * n..(r + 1) * n].iter_mut().zip(&fit) {
                *o = (f / t as f64) as f32;
            }
            out.objective[r] = loss / t as f64 + 0.5 * st.weight_decay * replica.weight_norm();
        }
        out
    }
}

/// One replica's two networks (flat, each in the plain layout W₀ … W_L, b₀ … b_L), their Adam
/// state, and scratch.
struct Replica<'t> {
    trainer: &'t EpinetHost<'t>,
    /// The base's and the epinet's parameters, moments and gradients.
    theta: [Vec<f32>; 2],
    m: [Vec<f32>; 2],
    v: [Vec<f32>; 2],
    grad: [Vec<f32>; 2],
    /// Where each network's weights end (the biases follow).
    n_weights: [usize; 2],
    /// The base's last layer: the offsets of its w `[H]` and b in θ₀.
    last: (usize, usize),
    keys: (u64, u64),
    /// h `[points, H]`, μ, the epinet's input (feature-major) and outputs `[points, D]`,
    /// f, δ at f, at the epinet's outputs, at μ and at h, and the K index samples.
    h: Vec<f32>,
    mu: Vec<f32>,
    e_in: Vec<f32>,
    e_out: Vec<f32>,
    f: Vec<f32>,
    delta: Vec<f32>,
    e_delta: Vec<f32>,
    d_mu: Vec<f32>,
    dh: Vec<f32>,
    z: Vec<f32>,
    y_tiled: Vec<f32>,
}

impl<'t> Replica<'t> {
    fn new(
        trainer: &'t EpinetHost<'t>,
        init: &(HostWeights, HostWeights),
        r: usize,
        at: usize,
    ) -> Replica<'t> {
        let (job, parts) = (trainer.job, trainer.parts);
        let flat = |shape: &MlpShape, w: &HostWeights| {
            let layers = shape.layers();
            let mut theta = Vec::new();
            for (l, &(i, o)) in layers.iter().enumerate() {
                theta.extend_from_slice(&w.layers[l].0[r * i * o..(r + 1) * i * o]);
            }
            for (l, &(_, o)) in layers.iter().enumerate() {
                theta.extend_from_slice(&w.layers[l].1[r * o..(r + 1) * o]);
            }
            let (_, b_at, _) = offsets(&layers);
            (theta, b_at[0])
        };
        let (base, nb) = flat(job.shape, &init.0);
        let (epi, ne) = flat(&parts.epi, &init.1);
        let layers = job.shape.layers();
        let (w_at, b_at, _) = offsets(&layers);
        let (hw, dz) = trainer.widths();
        let (n, m) = (job.n_train(), job.n_test());
        let (k, din) = (parts.index_samples, parts.epi.d_in);
        let big = (k * n).max(m);
        let points = n.max(m);
        let zeros = |len: usize| vec![0.0f32; len];
        let (lb, le) = (base.len(), epi.len());
        Replica {
            trainer,
            m: [zeros(lb), zeros(le)],
            v: [zeros(lb), zeros(le)],
            grad: [zeros(lb), zeros(le)],
            theta: [base, epi],
            n_weights: [nb, ne],
            last: (w_at[layers.len() - 1], b_at[layers.len() - 1]),
            keys: (job.stream_seeds[at], job.replica_ids[at]),
            h: zeros(points * hw),
            mu: zeros(points),
            e_in: zeros(din * big),
            e_out: zeros(big * dz),
            f: zeros(big),
            delta: zeros(big),
            e_delta: zeros(big * dz),
            d_mu: zeros(points),
            dh: zeros(points * hw),
            z: zeros(k.max(parts.passes) * dz),
            // The targets once per index block, for the head over the K·n points.
            y_tiled: job.targets[job.replica_targets[at]].repeat(k),
        }
    }

    /// The base at the `n` points of `xt`: h into `self.h`, μ into `self.mu`.
    fn base<N: ReplicaNet>(&mut self, net: &mut N, xt: &[f32], n: usize) {
        let (hw, _) = self.trainer.widths();
        let level = self.trainer.level;
        forward_at(level, net, &self.theta[0], xt, &mut self.h[..n * hw]);
        let (wl, bl) = self.last;
        let (w, b) = (&self.theta[0][wl..wl + hw], self.theta[0][bl]);
        for (mu, row) in self.mu[..n].iter_mut().zip(self.h.chunks_exact(hw)) {
            *mu = b + simd::dot(row, w);
        }
    }

    /// f at the `n` points of `xt` for the `k` indices in `self.z[..k·D]` into `self.f[..k·n]`
    /// (index-major blocks), after [`Replica::base`] at the same points: the epinet on the k·n
    /// points, its outputs dotted with z, plus μ and the prior `prior` (`[n, D]`).
    fn with_index(
        &mut self,
        net: &mut FeatureMajorNet,
        xt: &[f32],
        prior: &[f32],
        n: usize,
        k: usize,
    ) {
        let (hw, dz) = self.trainer.widths();
        let d = xt.len() / n;
        let kn = k * n;
        // The input rows, feature-major over the k·n points: z, then x, then h.
        for row in 0..dz {
            for b in 0..k {
                self.e_in[row * kn + b * n..row * kn + (b + 1) * n].fill(self.z[b * dz + row]);
            }
        }
        for (j, xrow) in xt.chunks_exact(n).enumerate() {
            let at = (dz + j) * kn;
            for b in 0..k {
                self.e_in[at + b * n..at + (b + 1) * n].copy_from_slice(xrow);
            }
        }
        for j in 0..hw {
            let at = (dz + d + j) * kn;
            for i in 0..n {
                self.e_in[at + i] = self.h[i * hw + j];
            }
            for b in 1..k {
                self.e_in.copy_within(at..at + n, at + b * n);
            }
        }
        let din = dz + d + hw;
        forward_at(
            self.trainer.level,
            net,
            &self.theta[1],
            &self.e_in[..din * kn],
            &mut self.e_out[..kn * dz],
        );
        let beta = self.trainer.parts.prior_scale as f32;
        for b in 0..k {
            let z = &self.z[b * dz..(b + 1) * dz];
            for i in 0..n {
                let p = b * n + i;
                let sigma_l = simd::dot(&self.e_out[p * dz..(p + 1) * dz], z);
                let sigma_p = simd::dot(&prior[i * dz..(i + 1) * dz], z);
                self.f[p] = self.mu[i] + sigma_l + beta * sigma_p;
            }
        }
    }

    /// One full-batch step t (from 1) at learning rate `lr`: the K index samples of draw t of
    /// the replica's noise stream, both networks' gradients, then Adam (λ on the weights).
    fn step<N: ReplicaNet>(
        &mut self,
        (base, epi): &mut (N, FeatureMajorNet),
        (xt, y, prior): (&[f32], &[f32], &[f32]),
        t: u64,
        lr: f64,
    ) {
        let (st, level) = (self.trainer.settings, self.trainer.level);
        let (hw, dz) = self.trainer.widths();
        let (n, k) = (y.len(), self.trainer.parts.index_samples);
        let kn = k * n;
        let stream = HostStream::new(self.keys.0, self.keys.1, PURPOSE_NOISE).at(level);
        stream.normal(t, &mut self.z[..k * dz]);
        self.base(base, xt, n);
        self.with_index(epi, xt, prior, n, k);
        // δ at f: the head's over the K·n points, the mean over indices of each mean loss.
        st.head()
            .delta_host(&self.f[..kn], &self.y_tiled[..kn], &mut self.delta[..kn]);
        // The epinet: δ·z at its D outputs.
        for (p, &dp) in self.delta[..kn].iter().enumerate() {
            let z = &self.z[(p / n) * dz..(p / n + 1) * dz];
            for (e, &zd) in self.e_delta[p * dz..(p + 1) * dz].iter_mut().zip(z) {
                *e = dp * zd;
            }
        }
        let din = self.trainer.parts.epi.d_in;
        backward_at(
            level,
            epi,
            &self.theta[1],
            &self.e_in[..din * kn],
            &self.e_delta[..kn * dz],
            &mut self.grad[1],
            None,
        );
        // The base: Σ_k δ_k at μ; the last layer by hand, the body from δ at h.
        for (i, dm) in self.d_mu[..n].iter_mut().enumerate() {
            *dm = (0..k).map(|b| self.delta[b * n + i]).sum();
        }
        let (wl, bl) = self.last;
        {
            let (before, biases) = self.grad[0].split_at_mut(bl);
            let gw = &mut before[wl..wl + hw];
            gw.fill(0.0);
            for (row, &dm) in self.h.chunks_exact(hw).zip(&self.d_mu[..n]) {
                for (g, &hv) in gw.iter_mut().zip(row) {
                    *g += hv * dm;
                }
            }
            biases[0] = self.d_mu[..n].iter().sum();
        }
        let w = &self.theta[0][wl..wl + hw];
        for (row, &dm) in self.dh.chunks_exact_mut(hw).zip(&self.d_mu[..n]) {
            for (o, &wv) in row.iter_mut().zip(w) {
                *o = dm * wv;
            }
        }
        backward_at(
            level,
            base,
            &self.theta[0],
            xt,
            &self.dh[..n * hw],
            &mut self.grad[0],
            None,
        );
        let weights = AdamStep::new(lr, st.beta1, st.beta2, st.eps, t, st.weight_decay);
        let plain = AdamStep {
            weight_decay: 0.0,
            ..weights
        };
        for net in 0..2 {
            let nw = self.n_weights[net];
            let (pw, pb) = self.theta[net].split_at_mut(nw);
            let (mw, mb) = self.m[net].split_at_mut(nw);
            let (vw, vb) = self.v[net].split_at_mut(nw);
            let (gw, gb) = self.grad[net].split_at(nw);
            adam_at(level, pw, mw, vw, gw, &weights);
            adam_at(level, pb, mb, vb, gb, &plain);
        }
    }

    /// T = `passes` index samples at the points of `xt` (draw 0 of stream `purpose`), pass by
    /// pass: `each(pass, f)` with f at the points.
    fn passes<N: ReplicaNet>(
        &mut self,
        (base, epi): &mut (N, FeatureMajorNet),
        xt: &[f32],
        prior: &[f32],
        purpose: u64,
        mut each: impl FnMut(usize, &[f32]),
    ) {
        let (_, dz) = self.trainer.widths();
        let (t, level) = (self.trainer.parts.passes, self.trainer.level);
        let n = prior.len() / dz;
        let stream = HostStream::new(self.keys.0, self.keys.1, purpose).at(level);
        let mut all = vec![0.0f32; t * dz];
        stream.normal(0, &mut all);
        self.base(base, xt, n);
        for (p, z) in all.chunks_exact(dz).enumerate() {
            self.z[..dz].copy_from_slice(z);
            self.with_index(epi, xt, prior, n, 1);
            each(p, &self.f[..n]);
        }
    }

    /// Σ‖W‖² of both networks' weights.
    fn weight_norm(&self) -> f64 {
        (0..2)
            .map(|net| {
                let w = &self.theta[net][..self.n_weights[net]];
                f64::from(simd::dot(w, w))
            })
            .sum()
    }
}
