//! A rank-1 ensemble (BatchEnsemble, Wen, Tran & Ba 2020) on the host loops: per replica, M
//! members share one weight matrix per layer, member m's weights W ∘ (r_m s_mᵀ) with fast
//! weights r_m (inputs), s_m (outputs) and a bias b_m of its own, trained together on the mean
//! over members of each member's loss, with λ/2·‖W‖² on the shared weights.
//!
//! Each step materialises member m's weights W_m = W ∘ r_m s_mᵀ in the layout of a plain
//! network and runs it through the host network's forward and backward ([`ReplicaNet`], the
//! loops an ensemble member runs on), which give G_m = ∂L/∂W_m and ∂L/∂b_m; the chain rule of
//! the rank-1 product then gives, per layer,
//!
//! ```text
//! ∂L/∂W_ij   = Σ_m G_m,ij · r_m,i · s_m,j
//! ∂L/∂r_m,i  = Σ_j G_m,ij · W_ij · s_m,j
//! ∂L/∂s_m,j  = Σ_i G_m,ij · W_ij · r_m,i
//! ```
//!
//! So a step costs M networks' passes plus about 6·in·out multiply-adds per member and layer,
//! a few per cent of the passes at E1's 50 points. Adam (the engine's, per element) then steps
//! W with λ and the fast weights and biases without, as the tensor route (`uqbench_models`'
//! `batch_ensemble::net`) does: the same objective, initial weights and optimiser, with the
//! floating-point order of the host loops, so equal in distribution, not bit for bit.

use std::ops::Range;

use uqbench_core::MethodError;
use uqbench_engine::cpu::feature_major::feature_major;
use uqbench_engine::cpu::kernels::AdamStep;
use uqbench_engine::cpu::simd::{self, Lanes, Level};
use uqbench_engine::cpu::{adam_at, backward_at, forward_at, offsets, Part, ReplicaNet};
use uqbench_engine::mlp::{xavier_init, HostWeights, MlpShape};
use uqbench_engine::trainer::{
    host_chunk, run_chunks, ChunkOut, ChunkTrainer, HostChunk, Job, Layout, Resources, TrainOutput,
    TrainSettings,
};

/// A replica's fast weights, layer by layer: (r `[M, in]`, s `[M, out]`), member-major.
pub type FastWeights = Vec<(Vec<f32>, Vec<f32>)>;

/// What a rank-1 ensemble's replicas need beyond the job.
pub struct Rank1Parts<'a> {
    /// Members M per replica.
    pub members: usize,
    /// Replica `r`'s initial fast weights (its index in the job); the member biases start at
    /// zero and the shared weights are the job's Glorot weights.
    pub fast: &'a (dyn Fn(usize) -> FastWeights + Sync),
}

/// Trains every replica of `job` as a rank-1 ensemble of `parts.members` members on the host
/// loops and predicts every member at the test inputs (the passes of the output, `[R, M, T]`);
/// the training fit is the members' mean. Full batches, no stochastic layer, no collectors.
pub fn train_rank1_host(
    job: &Job<'_>,
    parts: &Rank1Parts<'_>,
    settings: &TrainSettings,
    res: &Resources,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, MethodError> {
    settings.check_job(job)?;
    settings.check_plain(job.shape, "a rank-1 ensemble")?;
    if parts.members == 0 {
        return Err(MethodError::invalid("members", 0, "at least 1"));
    }
    let trainer = Rank1Host {
        job,
        parts,
        settings,
        level: res.simd,
    };
    run_chunks(&trainer, res, progress)
}

struct Rank1Host<'a> {
    job: &'a Job<'a>,
    parts: &'a Rank1Parts<'a>,
    settings: &'a TrainSettings,
    level: Level,
}

impl Rank1Host<'_> {
    /// Shared weights, fast weights and biases per replica.
    fn params(&self) -> (usize, usize) {
        let layers = self.job.shape.layers();
        let shared: usize = layers.iter().map(|&(i, o)| i * o).sum();
        let own: usize = layers.iter().map(|&(i, o)| i + 2 * o).sum();
        (shared, self.parts.members * own)
    }
}

impl ChunkTrainer for Rank1Host<'_> {
    fn layout(&self) -> Layout {
        self.job.layout(1, self.parts.members)
    }

    fn bytes_per_replica(&self) -> usize {
        // The parameters with their Adam moments and gradient, one member's network and its
        // gradient, the net's activations and δ at the larger point set.
        let (shared, own) = self.params();
        let (n, m) = self.points();
        let (_, _, dim) = offsets(&self.job.shape.layers());
        let widths: usize = self.job.shape.widths().iter().sum();
        4 * (4 * (shared + own) + 2 * dim + 4 * n.max(m) * widths + self.parts.members * m)
    }

    fn train_chunk(&self, range: Range<usize>) -> Result<ChunkOut, MethodError> {
        Ok(host_chunk(self, range))
    }
}

impl HostChunk for Rank1Host<'_> {
    fn replica_net(&self) -> (&MlpShape, usize, Part) {
        (self.job.shape, self.job.most_points(), Part::Whole)
    }

    fn train_on<N: ReplicaNet>(&self, mut net: N, range: Range<usize>) -> ChunkOut {
        let (job, st) = (self.job, self.settings);
        let (d, n, mt, members) = (
            job.shape.d_in,
            job.n_train(),
            job.n_test(),
            self.parts.members,
        );
        let rc = range.len();
        let init = xavier_init(job.shape, &job.init_seeds[range.clone()]);
        let mut out = ChunkOut {
            pred: vec![0.0; rc * members * mt],
            train_pred: vec![0.0; rc * n],
            objective: vec![0.0; rc],
            steps: st.epochs as u64,
            ..ChunkOut::default()
        };
        for r in 0..rc {
            let at = range.start + r;
            // The replica's inputs feature-major: the job's, or its target's own.
            let own = job.replica_targets[at];
            let (xt, xt_test) = (
                feature_major(job.x_train_of(own), d),
                feature_major(job.x_test_of(own), d),
            );
            let mut replica = Replica::new(self, &init, r, (self.parts.fast)(at));
            let y = &job.targets[job.replica_targets[at]];
            for epoch in 0..st.epochs {
                replica.step(&mut net, &xt, y, epoch as u64 + 1, st.lr_at(epoch));
            }
            out.objective[r] = f64::from(replica.finish(
                &mut net,
                (&xt, y),
                &xt_test,
                &mut out.pred[r * members * mt..(r + 1) * members * mt],
                &mut out.train_pred[r * n..(r + 1) * n],
            ));
        }
        out
    }
}

/// One replica's parameters, Adam state and scratch. `p` holds the shared weights (layer by
/// layer, `[in, out]` row-major), then per layer and member r_m, s_m and b_m.
struct Replica<'t> {
    trainer: &'t Rank1Host<'t>,
    p: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
    grad: Vec<f32>,
    /// Per layer: the offset of W in `p`, and of its members' (r, s, b) block.
    w_at: Vec<usize>,
    own_at: Vec<usize>,
    /// One member's network (the plain layout: W₀ … W_L, b₀ … b_L), its gradient, and the
    /// offsets of its W_l and b_l.
    theta: Vec<f32>,
    theta_grad: Vec<f32>,
    net_w: Vec<usize>,
    net_b: Vec<usize>,
    out: Vec<f32>,
    delta: Vec<f32>,
    /// A row of G ∘ W (the chain rule's scratch).
    row: Vec<f32>,
    shared: usize,
}

impl<'t> Replica<'t> {
    fn new(
        trainer: &'t Rank1Host<'t>,
        init: &HostWeights,
        r: usize,
        fast: FastWeights,
    ) -> Replica<'t> {
        let layers = trainer.job.shape.layers();
        let members = trainer.parts.members;
        let (shared, own) = trainer.params();
        let mut p = Vec::with_capacity(shared + own);
        let mut w_at = Vec::new();
        for (l, &(i, o)) in layers.iter().enumerate() {
            w_at.push(p.len());
            p.extend_from_slice(&init.layers[l].0[r * i * o..(r + 1) * i * o]);
        }
        let mut own_at = Vec::new();
        for ((rf, sf), &(i, o)) in fast.iter().zip(&layers) {
            own_at.push(p.len());
            for k in 0..members {
                p.extend_from_slice(&rf[k * i..(k + 1) * i]);
                p.extend_from_slice(&sf[k * o..(k + 1) * o]);
                p.extend(std::iter::repeat_n(0.0, o));
            }
        }
        let (net_w, net_b, dim) = offsets(&layers);
        let points = trainer.job.n_train().max(trainer.job.n_test());
        let len = p.len();
        Replica {
            trainer,
            p,
            m: vec![0.0; len],
            v: vec![0.0; len],
            grad: vec![0.0; len],
            w_at,
            own_at,
            theta: vec![0.0; dim],
            theta_grad: vec![0.0; dim],
            net_w,
            net_b,
            out: vec![0.0; points],
            delta: vec![0.0; points],
            row: vec![0.0; layers.iter().map(|&(_, o)| o).max().unwrap_or(0)],
            shared,
        }
    }

    /// Member k's loops ([`Members`]): its weights W ∘ r_k s_kᵀ and bias b_k into `theta`,
    /// or with `chain` its network gradient (`theta_grad`) into the shared and member
    /// gradients.
    fn members(&mut self, k: usize, chain: bool) {
        let layers = self.trainer.job.shape.layers();
        let (theta, chain) = if chain {
            let scratch = (&mut self.grad[..], self.shared, &mut self.row[..]);
            (&mut self.theta_grad, Some(scratch))
        } else {
            (&mut self.theta, None)
        };
        let op = Members {
            layers: &layers,
            p: &self.p,
            w_at: &self.w_at,
            own_at: &self.own_at,
            k,
            net: (&self.net_w, &self.net_b),
            theta,
            chain,
        };
        simd::dispatch_at(self.trainer.level, op);
    }

    /// One full-batch step t (from 1) at learning rate `lr`: every member's pass, the chain
    /// rule, then Adam (λ on the shared weights).
    fn step<N: ReplicaNet>(&mut self, net: &mut N, xt: &[f32], y: &[f32], t: u64, lr: f64) {
        let (st, level) = (self.trainer.settings, self.trainer.level);
        let members = self.trainer.parts.members;
        let n = y.len();
        let head = st.head();
        // The loss is the mean over members of each member's loss: δ/M.
        let inv_m = 1.0 / members as f32;
        // W's gradient sums over members, s_m's over the rows of W: both start at zero.
        self.grad.fill(0.0);
        for k in 0..members {
            self.members(k, false);
            forward_at(level, net, &self.theta, xt, &mut self.out[..n]);
            head.delta_host(&self.out[..n], y, &mut self.delta[..n]);
            for d in &mut self.delta[..n] {
                *d *= inv_m;
            }
            backward_at(
                level,
                net,
                &self.theta,
                xt,
                &self.delta[..n],
                &mut self.theta_grad,
                None,
            );
            self.members(k, true);
        }
        let weights = AdamStep::new(lr, st.beta1, st.beta2, st.eps, t, st.weight_decay);
        let plain = AdamStep {
            weight_decay: 0.0,
            ..weights
        };
        let s = self.shared;
        let (pw, po) = self.p.split_at_mut(s);
        let (mw, mo) = self.m.split_at_mut(s);
        let (vw, vo) = self.v.split_at_mut(s);
        let (gw, go) = self.grad.split_at(s);
        adam_at(level, pw, mw, vw, gw, &weights);
        adam_at(level, po, mo, vo, go, &plain);
    }

    /// The objective at the training inputs (the members' mean loss and λ/2·‖W‖²), the fit
    /// (the members' mean) and every member at the test inputs (`pred` `[M, T]`).
    fn finish<N: ReplicaNet>(
        &mut self,
        net: &mut N,
        (xt, y): (&[f32], &[f32]),
        xt_test: &[f32],
        pred: &mut [f32],
        train: &mut [f32],
    ) -> f32 {
        let (st, level) = (self.trainer.settings, self.trainer.level);
        let members = self.trainer.parts.members;
        let (n, mt) = (y.len(), pred.len() / members);
        let mut loss = 0.0f32;
        let mut fit = vec![0.0f64; n];
        for k in 0..members {
            self.members(k, false);
            forward_at(level, net, &self.theta, xt, &mut self.out[..n]);
            loss += st.head().value_host(Lanes::BASELINE, &self.out[..n], y);
            for (f, &o) in fit.iter_mut().zip(&self.out[..n]) {
                *f += f64::from(o);
            }
            forward_at(level, net, &self.theta, xt_test, &mut self.out[..mt]);
            pred[k * mt..(k + 1) * mt].copy_from_slice(&self.out[..mt]);
        }
        for (t, f) in train.iter_mut().zip(&fit) {
            *t = (f / members as f64) as f32;
        }
        let w = &self.p[..self.shared];
        loss / members as f32 + (0.5 * st.weight_decay) as f32 * simd::dot(w, w)
    }
}

/// Member k's loops over every layer, dispatched at the run's instruction set: without
/// `chain`, its weights W ∘ r_k s_kᵀ and biases into `theta` (the plain network's layout);
/// with it, `theta` holds the member network's gradient G and the chain rule adds it to the
/// gradients of W, r_k, s_k and b_k (`(gradient, shared weights, a row's scratch)`).
struct Members<'a> {
    layers: &'a [(usize, usize)],
    p: &'a [f32],
    w_at: &'a [usize],
    own_at: &'a [usize],
    k: usize,
    net: (&'a [usize], &'a [usize]),
    theta: &'a mut [f32],
    chain: Option<(&'a mut [f32], usize, &'a mut [f32])>,
}

impl simd::Op for Members<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self, lanes: Lanes) {
        let (net_w, net_b) = self.net;
        let mut chain = self.chain;
        for (l, &(i, o)) in self.layers.iter().enumerate() {
            let w = &self.p[self.w_at[l]..self.w_at[l] + i * o];
            let at = self.own_at[l] + self.k * (i + 2 * o);
            let (rf, rest) = self.p[at..at + i + 2 * o].split_at(i);
            let (sf, b) = rest.split_at(o);
            let Some((grad, shared, row)) = chain.as_mut() else {
                let tw = &mut self.theta[net_w[l]..net_w[l] + i * o];
                for ((trow, wrow), &ra) in tw.chunks_exact_mut(o).zip(w.chunks_exact(o)).zip(rf) {
                    for ((t, &wv), &sv) in trow.iter_mut().zip(wrow).zip(sf) {
                        *t = wv * ra * sv;
                    }
                }
                self.theta[net_b[l]..net_b[l] + o].copy_from_slice(b);
                continue;
            };
            let (shared_grad, own_grad) = grad.split_at_mut(*shared);
            let g = &self.theta[net_w[l]..net_w[l] + i * o];
            let gw = &mut shared_grad[self.w_at[l]..self.w_at[l] + i * o];
            let own = at - *shared;
            let (gr, rest) = own_grad[own..own + i + 2 * o].split_at_mut(i);
            let (gs, gb) = rest.split_at_mut(o);
            let gw_s = &mut row[..o];
            for a in 0..i {
                let ra = rf[a];
                let (grow, wrow) = (&g[a * o..(a + 1) * o], &w[a * o..(a + 1) * o]);
                for (((gwr, gs), (&gv, &wv)), (&sv, t)) in (gw[a * o..(a + 1) * o].iter_mut())
                    .zip(gs.iter_mut())
                    .zip(grow.iter().zip(wrow))
                    .zip(sf.iter().zip(gw_s.iter_mut()))
                {
                    *gwr += gv * ra * sv;
                    *t = gv * wv;
                    *gs += *t * ra;
                }
                gr[a] = lanes.dot(gw_s, sf);
            }
            gb.copy_from_slice(&self.theta[net_b[l]..net_b[l] + o]);
        }
    }
}
