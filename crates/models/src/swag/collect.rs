//! SWAG's collector: the running moments of each replica's parameters at the ends of the SWA
//! epochs, folded in as the engine shows them ([`Event::Epoch`]).

use std::any::Any;
use std::collections::VecDeque;

use uqbench_engine::trainer::collect::{Collected, Collector, Event, Want};

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

    fn start(&self, _replica: usize) -> Box<dyn Collected> {
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
        let mut m = Swa { start: 0, rank: 2 }.start(0);
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
    fn swa_sees_the_epochs_from_its_start() {
        let swa = Swa { start: 2, rank: 1 };
        assert!(!swa.wants(Want::Epoch(1)) && swa.wants(Want::Epoch(2)));
        assert!(!swa.wants(Want::Final) && !swa.wants(Want::Resample));
    }
}
