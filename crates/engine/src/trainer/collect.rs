//! Training by-products as collectors: a method asks the engine for what it needs beyond the
//! predictions (final weights, resamples; SWAG's moments and SG-MCMC's draws are collectors of their
//! methods) by putting a [`Collector`]
//! in `TrainSettings::collectors`. Both executions (host loops and tensors) show every
//! replica's training to a state of its own ([`Collected`]) through [`Event`]s, and hand the
//! states back in [`super::TrainOutput::collected`]. A new by-product is a collector in the
//! method's own file; the engine does not change.
//!
//! The tensor execution reads weights back from the device only at the events a collector
//! asks for ([`Collector::wants`]), so a collector that asks for nothing costs nothing.

use std::any::Any;
use std::fmt::Debug;

/// What a replica's training shows its collectors.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// The classic bootstrap's resample, before the first step: N indices into the training
    /// points.
    Resample(&'a [u32]),
    /// The end of epoch `epoch` (0-based), with the replica's parameters: layer by layer its
    /// weights `[in, out]` (row-major) then its biases `[out]`.
    Epoch {
        /// The epoch that ended.
        epoch: usize,
        /// The parameters.
        params: &'a [f32],
        /// The noise sd of an update that learns one (`super::update`: an SG-MCMC chain's σ
        /// after the epoch's Gibbs step).
        noise_sd: Option<f64>,
    },
    /// The end of training, with the final parameters (the same layout).
    Final {
        /// The parameters.
        params: &'a [f32],
    },
}

/// Which events a collector wants to see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// [`Event::Resample`] (only the classic bootstrap draws one).
    Resample,
    /// [`Event::Epoch`] at the end of this epoch.
    Epoch(usize),
    /// [`Event::Final`].
    Final,
}

/// A by-product of training that a method asks the engine for.
pub trait Collector: Debug + Send + Sync {
    /// Whether the collector wants to see `event`.
    fn wants(&self, event: Want) -> bool;
    /// A fresh state for replica `replica` (its index in the job: a collector of several
    /// tasks' replicas, `super::train_tasks`, tells them apart by it).
    fn start(&self, replica: usize) -> Box<dyn Collected>;
}

/// One replica's collected state.
pub trait Collected: Debug + Send + Sync {
    /// Shows the state one event it [`Collector::wants`].
    fn observe(&mut self, event: &Event<'_>);
    /// The state, for a method to downcast (see [`super::TrainOutput::collected`]).
    fn as_any(&self) -> &dyn Any;
}

/// Whether any of `collectors` wants `event`.
pub(crate) fn any_wants(collectors: &[std::sync::Arc<dyn Collector>], event: Want) -> bool {
    collectors.iter().any(|c| c.wants(event))
}

/// Fresh states, `[collector][replica]`, for the job's replicas `replicas`.
pub(crate) fn start_all(
    collectors: &[std::sync::Arc<dyn Collector>],
    replicas: std::ops::Range<usize>,
) -> Vec<Vec<Box<dyn Collected>>> {
    collectors
        .iter()
        .map(|c| replicas.clone().map(|r| c.start(r)).collect())
        .collect()
}

/// Shows `event` (of kind `want`) to every collector of replica `r` that wants it.
pub(crate) fn observe_all(
    collectors: &[std::sync::Arc<dyn Collector>],
    states: &mut [Vec<Box<dyn Collected>>],
    r: usize,
    want: Want,
    event: &Event<'_>,
) {
    for (c, s) in collectors.iter().zip(states.iter_mut()) {
        if c.wants(want) {
            s[r].observe(event);
        }
    }
}

/// Every replica's final parameters (what Laplace builds on).
#[derive(Debug, Clone, Copy, Default)]
pub struct FinalWeights;

/// One replica's final parameters, layer by layer W then b ([`Event::Final`]'s layout).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Weights(pub Vec<f32>);

impl Collector for FinalWeights {
    fn wants(&self, event: Want) -> bool {
        event == Want::Final
    }

    fn start(&self, _replica: usize) -> Box<dyn Collected> {
        Box::new(Weights::default())
    }
}

impl Collected for Weights {
    fn observe(&mut self, event: &Event<'_>) {
        if let Event::Final { params } = event {
            self.0 = params.to_vec();
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Every replica's bootstrap resample (what jackknife+-after-bootstrap needs: which points
/// each member left out).
#[derive(Debug, Clone, Copy, Default)]
pub struct Resamples;

/// One replica's resample: N indices into the training points.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resample(pub Vec<u32>);

impl Collector for Resamples {
    fn wants(&self, event: Want) -> bool {
        event == Want::Resample
    }

    fn start(&self, _replica: usize) -> Box<dyn Collected> {
        Box::new(Resample::default())
    }
}

impl Collected for Resample {
    fn observe(&mut self, event: &Event<'_>) {
        if let Event::Resample(idx) = event {
            self.0 = idx.to_vec();
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collectors_see_only_what_they_want() {
        assert!(FinalWeights.wants(Want::Final) && !FinalWeights.wants(Want::Epoch(0)));
        assert!(Resamples.wants(Want::Resample) && !Resamples.wants(Want::Final));
    }
}
