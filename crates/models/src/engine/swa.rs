//! Stochastic weight averaging's collection (Maddox et al. 2019, SWAG): from epoch `start` on
//! the optimiser runs at `lr`, and at the end of every such epoch each replica's parameters
//! are read back and folded into its running first and second moments, with the last `rank`
//! deviations from the running mean kept for the low-rank part of the covariance (the
//! reference implementation's `collect_model`: mean and squared mean updated first, then the
//! deviation θ − θ̄ against the updated mean).

use std::collections::VecDeque;

/// When and how the weights are collected.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Swa {
    /// The first epoch (0-based) whose end is collected.
    pub start: usize,
    /// The learning rate from `start` on.
    pub lr: f64,
    /// Deviations kept (the rank of the low-rank part).
    pub rank: usize,
}

/// One replica's collected moments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SwaMoments {
    /// Snapshots collected.
    pub n: usize,
    /// Running mean θ̄ of the parameters (the engine's flat layout: per layer W then b).
    pub mean: Vec<f64>,
    /// Running mean of θ².
    pub sq_mean: Vec<f64>,
    /// The last `rank` deviations θ − θ̄, oldest first.
    pub deviations: VecDeque<Vec<f64>>,
}

impl SwaMoments {
    /// Folds in one snapshot.
    pub fn collect(&mut self, theta: &[f32], rank: usize) {
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
        while self.deviations.len() > rank {
            self.deviations.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_are_running_means_and_deviations_are_the_last_rank() {
        let mut m = SwaMoments::default();
        for v in [1.0f32, 2.0, 3.0, 6.0] {
            m.collect(&[v, -v], 2);
        }
        assert_eq!(m.n, 4);
        assert!((m.mean[0] - 3.0).abs() < 1e-12 && (m.mean[1] + 3.0).abs() < 1e-12);
        assert!((m.sq_mean[0] - 12.5).abs() < 1e-12);
        // The last two deviations, each against the mean after its own update: 3 − 2 and 6 − 3.
        let d: Vec<f64> = m.deviations.iter().map(|d| d[0]).collect();
        assert_eq!(d, vec![1.0, 3.0]);
    }
}
