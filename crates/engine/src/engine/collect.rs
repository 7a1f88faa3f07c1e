//! Training by-products as collectors: a method asks the engine for what it needs beyond the
//! predictions (final weights, SWA moments, resamples, snapshots) by putting a [`Collector`]
//! in `TrainSettings::collectors`. Both executions (host loops and tensors) show every
//! replica's training to a state of its own ([`Collected`]) through [`Event`]s, and hand the
//! states back in [`super::TrainOutput::collected`]. A new by-product is a collector in the
//! method's own file; the engine does not change.
//!
//! The tensor execution reads weights back from the device only at the events a collector
//! asks for ([`Collector::wants`]), so a collector that asks for nothing costs nothing.

use std::any::Any;
use std::collections::VecDeque;
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
        /// SG-MCMC with σ learned: the chain's σ after the epoch's Gibbs step.
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
    /// A fresh state for one replica.
    fn start(&self) -> Box<dyn Collected>;
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

/// Fresh states, `[collector][replica]`, for `replicas` replicas.
pub(crate) fn start_all(
    collectors: &[std::sync::Arc<dyn Collector>],
    replicas: usize,
) -> Vec<Vec<Box<dyn Collected>>> {
    collectors
        .iter()
        .map(|c| (0..replicas).map(|_| c.start()).collect())
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

    fn start(&self) -> Box<dyn Collected> {
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

    fn start(&self) -> Box<dyn Collected> {
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

/// Stochastic weight averaging's collection (Maddox et al. 2019, SWAG): at the end of every
/// epoch from `start` (0-based) on, each replica's parameters are folded into its running
/// first and second moments, with the last `rank` deviations from the running mean kept for
/// the low-rank part of the covariance (the reference implementation's `collect_model`: mean
/// and squared mean updated first, then the deviation θ − θ̄ against the updated mean). The
/// learning rate of those epochs is the settings' `lr_switch`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Swa {
    /// The first epoch (0-based) whose end is collected.
    pub start: usize,
    /// Deviations kept (the rank of the low-rank part).
    pub rank: usize,
}

/// One replica's collected SWA moments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwaMoments {
    /// Snapshots collected.
    pub n: usize,
    /// Running mean θ̄ of the parameters ([`Event::Epoch`]'s layout).
    pub mean: Vec<f64>,
    /// Running mean of θ².
    pub sq_mean: Vec<f64>,
    /// The last `rank` deviations θ − θ̄, oldest first.
    pub deviations: VecDeque<Vec<f64>>,
    /// Deviations kept (the rank of the low-rank part).
    pub rank: usize,
}

impl Collector for Swa {
    fn wants(&self, event: Want) -> bool {
        matches!(event, Want::Epoch(e) if e >= self.start)
    }

    fn start(&self) -> Box<dyn Collected> {
        Box::new(SwaMoments {
            rank: self.rank,
            ..SwaMoments::default()
        })
    }
}

impl Collected for SwaMoments {
    fn observe(&mut self, event: &Event<'_>) {
        if let Event::Epoch { params, .. } = event {
            self.collect(params);
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl SwaMoments {
    /// Folds in one snapshot.
    pub fn collect(&mut self, theta: &[f32]) {
        if self.n == 0 {
            self.mean = vec![0.0; theta.len()];
            self.sq_mean = vec![0.0; theta.len()];
        }
        let n = self.n as f64;
        for ((m, s), &t) in self.mean.iter_mut().zip(&mut self.sq_mean).zip(theta) {
            let t = f64::from(t);
            *m = (*m * n + t) / (n + 1.0);
            *s = (*s * n + t * t) / (n + 1.0);
        }
        self.n += 1;
        let dev = theta
            .iter()
            .zip(&self.mean)
            .map(|(&t, m)| f64::from(t) - m)
            .collect();
        self.deviations.push_back(dev);
        while self.deviations.len() > self.rank {
            self.deviations.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_are_running_means_and_deviations_are_the_last_rank() {
        let mut m = Swa { start: 0, rank: 2 }.start();
        for (epoch, v) in [1.0f32, 2.0, 3.0, 6.0].into_iter().enumerate() {
            m.observe(&Event::Epoch {
                epoch,
                params: &[v, -v],
                noise_sd: None,
            });
        }
        let m: &SwaMoments = m.as_any().downcast_ref().unwrap();
        assert_eq!(m.n, 4);
        assert!((m.mean[0] - 3.0).abs() < 1e-12 && (m.mean[1] + 3.0).abs() < 1e-12);
        assert!((m.sq_mean[0] - 12.5).abs() < 1e-12);
        // The last two deviations, each against the mean after its own update: 3 − 2 and 6 − 3.
        let d: Vec<f64> = m.deviations.iter().map(|d| d[0]).collect();
        assert_eq!(d, vec![1.0, 3.0]);
    }

    #[test]
    fn collectors_see_only_what_they_want() {
        let swa = Swa { start: 2, rank: 1 };
        assert!(!swa.wants(Want::Epoch(1)) && swa.wants(Want::Epoch(2)));
        assert!(!swa.wants(Want::Final) && !swa.wants(Want::Resample));
        assert!(FinalWeights.wants(Want::Final) && !FinalWeights.wants(Want::Epoch(0)));
        assert!(Resamples.wants(Want::Resample) && !Resamples.wants(Want::Final));
    }
}
