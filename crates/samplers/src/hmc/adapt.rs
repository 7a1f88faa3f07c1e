//! HMC's warm-up: the step size by dual averaging, and a diagonal mass matrix (the "metric")
//! from the draws of Stan's windowed adaptation.
//!
//! Stan's schedule (Stan Reference Manual, "HMC algorithm parameters"): an initial fast
//! interval (75 iterations) adapts only the step; then slow windows of 25, 50, 100, …
//! iterations each estimate the posterior variance of every parameter from their draws, set the
//! inverse mass to it (regularised: (n/(n + 5))·var + 10⁻³·5/(n + 5)) at the window's end and
//! restart the step's dual averaging; a terminal fast interval (50) adapts the step to the
//! final metric. When 75 + 25 + 50 exceed the warm-up, the three parts take 15%, 75% and 10%
//! of it; under 20 warm-up iterations the metric stays the identity. The last slow window
//! stretches to the terminal interval when doubling would overrun it.
//!
//! With the metric M⁻¹ = diag(m), the momenta are ρ ~ N(0, M), the kinetic energy ½ρᵀM⁻¹ρ and
//! the position moves by ε·M⁻¹ρ: each parameter moves on its own posterior scale, where the
//! identity metric moves every parameter on the scale of the narrowest.

use serde::{Deserialize, Serialize};

/// Nesterov dual averaging of each replica's step size during warm-up (Hoffman & Gelman
/// 2014, Algorithm 5: γ = 0.05, t₀ = 10, κ = 0.75, μ = ln 10ε₀), restarted (μ = ln 10ε, the
/// counters cleared) after every metric update.
pub(crate) struct DualAveraging {
    mu: Vec<f64>,
    pub(crate) eps: Vec<f64>,
    h_bar: Vec<f64>,
    log_eps_bar: Vec<f64>,
    count: usize,
}

impl DualAveraging {
    const GAMMA: f64 = 0.05;
    const T0: f64 = 10.0;
    const KAPPA: f64 = 0.75;

    pub(crate) fn new(step_size: f64, replicas: usize) -> DualAveraging {
        DualAveraging {
            mu: vec![(10.0 * step_size).ln(); replicas],
            eps: vec![step_size; replicas],
            h_bar: vec![0.0; replicas],
            log_eps_bar: vec![0.0; replicas],
            count: 0,
        }
    }

    /// Adapts after a warm-up iteration with acceptance probabilities `alphas`; with `last`
    /// (the last warm-up iteration) every ε becomes its averaged ε̄.
    pub(crate) fn update(&mut self, alphas: &[f64], target: f64, last: bool) {
        self.count += 1;
        let m_it = self.count as f64;
        for (r, &alpha) in alphas.iter().enumerate() {
            let w = 1.0 / (m_it + Self::T0);
            self.h_bar[r] = (1.0 - w) * self.h_bar[r] + w * (target - alpha);
            let log_eps = self.mu[r] - m_it.sqrt() / Self::GAMMA * self.h_bar[r];
            let eta = m_it.powf(-Self::KAPPA);
            self.log_eps_bar[r] = eta * log_eps + (1.0 - eta) * self.log_eps_bar[r];
            self.eps[r] = log_eps.exp();
        }
        if last {
            for (e, bar) in self.eps.iter_mut().zip(&self.log_eps_bar) {
                *e = bar.exp();
            }
        }
    }

    /// Restarts the averaging around each replica's current ε (after a metric update).
    pub(crate) fn restart(&mut self) {
        for r in 0..self.eps.len() {
            self.mu[r] = (10.0 * self.eps[r]).ln();
            self.h_bar[r] = 0.0;
            self.log_eps_bar[r] = 0.0;
        }
        self.count = 0;
    }
}

/// The warm-up's metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// A diagonal mass matrix adapted in Stan's windows (the default).
    #[default]
    Diag,
    /// The identity: every parameter on one scale.
    Unit,
}

/// Stan's warm-up windows for `warmup` iterations: which iterations feed the variance
/// estimate, and after which the metric is updated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Windows {
    /// `(start, end)` of each slow window, end exclusive.
    slow: Vec<(usize, usize)>,
}

impl Windows {
    pub(crate) fn new(warmup: usize, metric: Metric) -> Windows {
        if metric == Metric::Unit || warmup < 20 {
            return Windows { slow: Vec::new() };
        }
        let (init, term, base) = if 75 + 25 + 50 > warmup {
            let init = (0.15 * warmup as f64) as usize;
            let term = (0.1 * warmup as f64) as usize;
            (init, term, warmup - init - term)
        } else {
            (75, 50, 25)
        };
        let end = warmup - term;
        let mut slow = Vec::new();
        let (mut start, mut size) = (init, base);
        while start < end {
            // Stretch this window to the terminal interval if the next one would overrun it.
            let stop = if start + size + 2 * size > end {
                end
            } else {
                start + size
            };
            slow.push((start, stop));
            start = stop;
            size *= 2;
        }
        Windows { slow }
    }

    /// Whether warm-up iteration `it`'s state feeds the variance estimate.
    pub(crate) fn collects(&self, it: usize) -> bool {
        self.slow.iter().any(|&(a, b)| (a..b).contains(&it))
    }

    /// Whether the metric is updated after warm-up iteration `it`.
    pub(crate) fn ends(&self, it: usize) -> bool {
        self.slow.iter().any(|&(_, b)| b == it + 1)
    }
}

/// Welford's running mean and variance of every parameter of one replica, over one window.
#[derive(Debug, Clone)]
pub(crate) struct Welford {
    n: usize,
    mean: Vec<f64>,
    m2: Vec<f64>,
}

impl Welford {
    pub(crate) fn new(dim: usize) -> Welford {
        Welford {
            n: 0,
            mean: vec![0.0; dim],
            m2: vec![0.0; dim],
        }
    }

    pub(crate) fn push(&mut self, theta: &[f32]) {
        self.n += 1;
        let n = self.n as f64;
        for ((m, s), &x) in self.mean.iter_mut().zip(&mut self.m2).zip(theta) {
            let d = f64::from(x) - *m;
            *m += d / n;
            *s += d * (f64::from(x) - *m);
        }
    }

    /// Stan's regularised inverse mass from the window's draws, (n/(n + 5))·var +
    /// 10⁻³·5/(n + 5), and a fresh accumulator.
    pub(crate) fn take_inverse_mass(&mut self) -> Vec<f32> {
        let n = self.n as f64;
        let out = self
            .m2
            .iter()
            .map(|s| {
                let var = if self.n > 1 { s / (n - 1.0) } else { 1.0 };
                ((n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))) as f32
            })
            .collect();
        *self = Welford::new(self.mean.len());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stan_windows() {
        // 1 000 iterations: 75 fast, slow 25, 50, 100, 200, 500 (the last stretched from 400
        // to the terminal 50), as Stan's defaults.
        let w = Windows::new(1000, Metric::Diag);
        assert_eq!(
            w.slow,
            vec![(75, 100), (100, 150), (150, 250), (250, 450), (450, 950)]
        );
        assert!(!w.collects(74) && w.collects(75) && w.collects(949) && !w.collects(950));
        assert!(w.ends(99) && w.ends(949) && !w.ends(100));
        // 500: 75, then 25, 50, 100, 200 (the last stretched to 450).
        let w = Windows::new(500, Metric::Diag);
        assert_eq!(w.slow, vec![(75, 100), (100, 150), (150, 250), (250, 450)]);
        // 100: 15 fast, one slow window of 75, 10 terminal.
        assert_eq!(Windows::new(100, Metric::Diag).slow, vec![(15, 90)]);
        assert!(Windows::new(10, Metric::Diag).slow.is_empty());
        assert!(Windows::new(1000, Metric::Unit).slow.is_empty());
    }

    #[test]
    fn welford_and_the_regularised_inverse_mass() {
        let mut w = Welford::new(2);
        for x in [
            [1.0f32, 10.0],
            [2.0, 10.0],
            [3.0, 10.0],
            [4.0, 10.0],
            [5.0, 10.0],
        ] {
            w.push(&x);
        }
        // Variances 2.5 and 0; n = 5: (5/10)·2.5 + 1e-3·(5/10) and 1e-3·0.5.
        let m = w.take_inverse_mass();
        assert!(
            (m[0] - 1.2505).abs() < 1e-6 && (m[1] - 0.0005).abs() < 1e-9,
            "{m:?}"
        );
        assert_eq!(w.n, 0);
    }

    #[test]
    fn dual_averaging_restarts_around_the_current_step() {
        let mut d = DualAveraging::new(0.1, 1);
        for _ in 0..50 {
            d.update(&[0.2], 0.8, false);
        }
        // Too little acceptance: the step shrank.
        assert!(d.eps[0] < 0.1);
        let eps = d.eps[0];
        d.restart();
        assert_eq!(d.count, 0);
        assert!((d.mu[0] - (10.0 * eps).ln()).abs() < 1e-12);
        d.update(&[0.8], 0.8, true);
        assert!(d.eps[0].is_finite());
    }
}
