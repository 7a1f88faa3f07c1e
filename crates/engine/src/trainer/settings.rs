//! Optimisation settings shared by all replicas of a job, and the batching schemes.

use super::collect::Collector;
use super::head::{BernoulliLogit, GaussianNll, HalfMse, Head};
use super::update::Update;
use super::Job;
use std::sync::Arc;

use crate::mlp::MlpShape;
use crate::optim::AdamConfig;
use crate::stochastic::StochasticLayer;
use uqbench_core::Likelihood;
use uqbench_core::MethodError;

/// How each step's training points are chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum Batching {
    /// Every step uses all N points (one step per epoch).
    Full,
    /// Every epoch, the points in a fresh random order cut into mini-batches of `size`
    /// (the last may be smaller): ⌈N/size⌉ steps per epoch.
    Shuffled {
        /// Mini-batch size.
        size: usize,
    },
    /// Every epoch, `per_epoch` mini-batches of `size` points drawn with replacement
    /// ([000]'s EnsBS: size N/2, two per epoch).
    WithReplacement {
        /// Mini-batch size.
        size: usize,
        /// Mini-batches per epoch.
        per_epoch: usize,
    },
    /// One resample of N points with replacement per replica, drawn before training (the
    /// classic bootstrap of [002]/[004]), then used full-batch (`size: None`) or, every epoch,
    /// in a fresh random order cut into mini-batches of `size` (⌈N/size⌉ steps per epoch).
    Resample {
        /// Mini-batch size within the resample, or `None` for full batches.
        size: Option<usize>,
    },
}

/// Optimisation settings shared by all replicas of a job.
#[derive(Debug, Clone)]
pub struct TrainSettings {
    /// Passes over the training data.
    pub epochs: usize,
    /// Adam learning rate.
    pub lr: f64,
    /// Adam β₁.
    pub beta1: f64,
    /// Adam β₂.
    pub beta2: f64,
    /// Adam ε (PyTorch's 1e-8; burn's default is 1e-5).
    pub eps: f64,
    /// L2 factor λ on the weights (spec §3: 1/N).
    pub weight_decay: f64,
    /// Point selection per step.
    pub batching: Batching,
    /// Adversarial training ([000] EnsAdvA): per input dimension the ε of
    /// x' = x + ε·sign(∇ₓ loss); the step's loss is loss(x) + loss(x').
    pub adversarial: Option<Vec<f64>>,
    /// A stochastic layer in front of the last linear layer (the dropout methods).
    pub dropout: Option<Arc<dyn StochasticLayer>>,
    /// A two-output head (mean, log variance) trained with the Gaussian NLL; the network's
    /// `d_out` must be 2.
    pub heteroscedastic: bool,
    /// The targets' likelihood: Gaussian (the ½·MSE or Gaussian NLL head) or Bernoulli (the
    /// logit head with the binary cross-entropy).
    pub likelihood: Likelihood,
    /// Stochastic forward passes at prediction (1 for deterministic networks).
    pub mc_passes: usize,
    /// From an epoch on, a learning rate of its own (stochastic weight averaging's).
    pub lr_switch: Option<LrSwitch>,
    /// A head of the method's own in place of the likelihood's ([`Head`]: β-NLL, the
    /// evidential head, CQR's pinball head).
    pub own_head: Option<Arc<dyn Head>>,
    /// An update of the method's own in place of Adam ([`super::update`]: SG-MCMC's Langevin
    /// dynamics, whose replicas are chains).
    pub update: Option<Arc<dyn Update>>,
    /// The training by-products a method asks for ([`super::collect`]), returned per
    /// replica in [`super::TrainOutput::collected`], in this order.
    pub collectors: Vec<Arc<dyn Collector>>,
}

/// A learning rate from an epoch on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSwitch {
    /// The first epoch (0-based) at the new rate.
    pub epoch: usize,
    /// The rate.
    pub lr: f64,
}

impl TrainSettings {
    /// The jobs the host trainers of networks of their own take (BatchEnsemble's, the
    /// epinet's, in `uqbench_models`): one output
    /// on full batches, without a stochastic layer, adversarial pass, update of its own or
    /// collectors; otherwise an error naming `what` and what it takes.
    pub fn check_plain(&self, shape: &MlpShape, what: &str) -> Result<(), MethodError> {
        let plain = matches!(self.batching, Batching::Full)
            && self.dropout.is_none()
            && self.adversarial.is_none()
            && self.update.is_none()
            && self.collectors.is_empty()
            && shape.d_out == 1;
        if plain {
            return Ok(());
        }
        Err(MethodError::Failed(format!(
            "{what} on the host trains one output on full batches, without a stochastic layer, \
             adversarial pass, update of its own or collectors"
        )))
    }

    /// The [`super::Layout`] of the built-in network on `job`: its outputs, the prediction
    /// passes, and a rate per replica where the stochastic layer learns one.
    pub fn layout(&self, job: &super::Job<'_>) -> super::Layout {
        super::Layout {
            rates: (self.dropout.as_ref()).is_some_and(|d| d.rate_name().is_some()),
            ..job.layout(job.shape.d_out, self.mc_passes)
        }
    }

    /// Spec §3's optimiser for N training points: Adam(1e-2, 0.9, 0.999, 1e-8), λ = 1/N,
    /// full batch.
    pub fn paper(epochs: usize, n_train: usize) -> TrainSettings {
        TrainSettings {
            epochs,
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1.0 / n_train as f64,
            batching: Batching::Full,
            adversarial: None,
            dropout: None,
            heteroscedastic: false,
            likelihood: Likelihood::Gaussian,
            mc_passes: 1,
            lr_switch: None,
            own_head: None,
            update: None,
            collectors: Vec::new(),
        }
    }

    /// Adam's settings of this job.
    pub fn adam(&self) -> AdamConfig {
        AdamConfig {
            lr: self.lr,
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
        }
    }

    /// The head the settings train: the method's own, else the Bernoulli cross-entropy on a
    /// logit for labels, the Gaussian NLL for a heteroscedastic network, else ½·MSE.
    pub fn head(&self) -> &dyn Head {
        if let Some(h) = &self.own_head {
            return h.as_ref();
        }
        match (self.likelihood, self.heteroscedastic) {
            (Likelihood::Bernoulli, _) => &BernoulliLogit,
            (Likelihood::Gaussian, true) => &GaussianNll,
            (Likelihood::Gaussian, false) => &HalfMse,
        }
    }

    /// The entry check of every trainer: the job's own (shapes, seeds, finite data), then these
    /// settings against its training points and network.
    pub fn check_job(&self, job: &Job<'_>) -> Result<(), MethodError> {
        job.validate()?;
        self.validate(job.n_train(), job.shape)
    }

    /// Checks the settings against the number of training points and the network.
    pub fn validate(&self, n_train: usize, shape: &MlpShape) -> Result<(), MethodError> {
        let d_in = shape.d_in;
        if self.mc_passes == 0 {
            return Err(MethodError::invalid("prediction passes T", 0, "at least 1"));
        }
        if self.dropout.is_none() && self.mc_passes != 1 {
            return Err(MethodError::invalid(
                "prediction passes T",
                self.mc_passes,
                "1: a network without a stochastic layer gives the same prediction every pass",
            ));
        }
        if let Some(d) = &self.dropout {
            d.validate()?;
        }
        if self.heteroscedastic && self.likelihood == Likelihood::Bernoulli {
            return Err(MethodError::invalid(
                "heteroscedastic",
                true,
                "false for labels: a Bernoulli likelihood has no noise variance to learn",
            ));
        }
        let want = self.head().outputs();
        if shape.d_out != want {
            return Err(MethodError::invalid(
                "network outputs",
                shape.d_out,
                format!("{want} for a {} head", self.head().describe()),
            ));
        }
        if self.epochs == 0 {
            return Err(MethodError::invalid("epochs", 0, "at least 1"));
        }
        MethodError::positive("lr", self.lr)?;
        MethodError::positive("eps", self.eps)?;
        for (name, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return Err(MethodError::invalid(name, b, "a number in [0, 1)"));
            }
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(MethodError::invalid(
                "weight_decay",
                self.weight_decay,
                "a number ≥ 0",
            ));
        }
        match &self.batching {
            Batching::Shuffled { size }
            | Batching::WithReplacement { size, .. }
            | Batching::Resample { size: Some(size) }
                if *size == 0 || *size > n_train =>
            {
                return Err(MethodError::invalid(
                    "batch size",
                    size,
                    format!("between 1 and the number of training points, {n_train}"),
                ))
            }
            Batching::WithReplacement { per_epoch: 0, .. } => {
                return Err(MethodError::invalid("batches per epoch", 0, "at least 1"))
            }
            _ => {}
        }
        if let Some(u) = &self.update {
            u.validate(self)?;
        }
        if let Some(eps) = &self.adversarial {
            if eps.len() != d_in || eps.iter().any(|e| !(e.is_finite() && *e >= 0.0)) {
                return Err(MethodError::invalid(
                    "adversarial epsilon",
                    format!("{eps:?}"),
                    format!("{d_in} finite values ≥ 0, one per input dimension"),
                ));
            }
        }
        Ok(())
    }

    /// The learning rate of epoch `epoch` (0-based).
    pub fn lr_at(&self, epoch: usize) -> f64 {
        match self.lr_switch {
            Some(s) if epoch >= s.epoch => s.lr,
            _ => self.lr,
        }
    }

    /// Optimiser steps per epoch.
    pub fn steps_per_epoch(&self, n_train: usize) -> usize {
        match self.batching {
            Batching::Full | Batching::Resample { size: None } => 1,
            Batching::Shuffled { size } | Batching::Resample { size: Some(size) } => {
                n_train.div_ceil(size)
            }
            Batching::WithReplacement { per_epoch, .. } => per_epoch,
        }
    }
}
