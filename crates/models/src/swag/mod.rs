//! SWAG (Maddox et al. 2019) and MultiSWAG (Wilson & Izmailov 2020): each member trains on the
//! engine with stochastic weight averaging from epoch `swa_start` on at `swa_lr`, collecting
//! its weights at the end of every epoch ([`collect::Swa`]); its posterior is then the
//! Gaussian with the SWA mean θ̄, the diagonal variance diag(θ²‾ − θ̄²) (clamped at 1e-30) and
//! the low-rank part D Dᵀ/(R − 1) from the last (at most R = `rank`) deviations. A draw is, as
//! in the reference implementation's `sample(scale, cov=True)`,
//! θ = θ̄ + √scale·(σ_diag ⊙ z₁ + D z₂/√(R − 1)), z₁ ~ N(0, I_P), z₂ ~ N(0, I_K), with the
//! reference's divisor √(max_num_models − 1) = √(R − 1) also when fewer than R snapshots were
//! collected (K < R: `swa_snapshots` records how many; the low-rank part is then K − 1 over
//! R − 1 of the K deviations' sample covariance, as in the reference), with
//! `scale` = 0.5 (the paper's 1/2 on the covariance, its experiments' setting). Prediction:
//! `samples` draws per member, each a forward pass on the host in f64; the prediction and
//! uncertainty are their mean and std over all members' draws, the training fit the SWA
//! means' (`intervals = "empirical"` takes the draws' quantiles instead of mean ± z·std).
//! MultiSWAG is `members > 1`.

pub mod collect;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::host_net::TrainedNet;
use collect::{Swa, SwaMoments};
use uqbench_core::{
    combine_members, Compute, IntervalSetting, Member, Method, MethodError, Prediction, Rng, Task,
};
use uqbench_engine::config::MethodConfig;
use uqbench_engine::trainer::{self, LrSwitch, Resources, TrainSettings};

/// SWAG's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwagSettings {
    /// SWAG members (1: SWAG; more: MultiSWAG).
    pub members: usize,
    /// The first epoch (0-based) collected; half the epochs when left out.
    pub swa_start: Option<usize>,
    /// The learning rate from `swa_start` on; the optimiser's when left out.
    pub swa_lr: Option<f64>,
    /// Deviations kept for the low-rank covariance (the reference's `max_num_models`, 20).
    pub rank: usize,
    /// Draws per member at prediction (30, as the reference's evaluation).
    pub samples: usize,
    /// The covariance's scale in a draw (0.5).
    pub scale: f64,
    /// Intervals from mean ± z·std (`normal`) or the draws' quantiles (`empirical`).
    pub intervals: IntervalSetting,
}

impl Default for SwagSettings {
    fn default() -> Self {
        SwagSettings {
            members: 1,
            swa_start: None,
            swa_lr: None,
            rank: 20,
            samples: 30,
            scale: 0.5,
            intervals: IntervalSetting::Normal,
        }
    }
}

/// Settings of SWAG: the network, its optimiser and [`SwagSettings`].
pub type SwagConfig = MethodConfig<SwagSettings>;

/// The method.
#[derive(Debug, Clone)]
pub struct Swag {
    name: String,
    config: SwagConfig,
}

impl Swag {
    /// Checks the settings up front.
    pub fn new(name: &str, config: SwagConfig) -> Result<Swag, MethodError> {
        config.net.shape(1, 1).validate()?;
        if config.members == 0 || config.samples < 2 || config.rank < 2 {
            return Err(MethodError::invalid(
                format!("{name}.members, samples, rank"),
                format!("{}, {}, {}", config.members, config.samples, config.rank),
                "at least 1 member, 2 samples and rank 2",
            ));
        }
        MethodError::positive(&format!("{name}.scale"), config.scale)?;
        if let Some(lr) = config.swa_lr {
            MethodError::positive(&format!("{name}.swa_lr"), lr)?;
        }
        Ok(Swag {
            name: name.to_string(),
            config,
        })
    }

    /// The collection's settings for `epochs` of training.
    fn swa(&self, epochs: usize) -> Result<Swa, MethodError> {
        let c = &self.config;
        let start = c.swa_start.unwrap_or(epochs / 2);
        if start + 2 > epochs {
            return Err(MethodError::invalid(
                format!("{}.swa_start", self.name),
                start,
                format!(
                    "an epoch that leaves at least 2 of the {epochs} epochs to collect \
                     (0 ≤ swa_start ≤ {})",
                    epochs.saturating_sub(2)
                ),
            ));
        }
        Ok(Swa {
            start,
            rank: c.rank,
        })
    }
}

/// `count` draws of the member's SWAG posterior with `rank` = R (the reference's
/// `max_num_models`), flat parameters each.
fn draws(m: &SwaMoments, rank: usize, count: usize, scale: f64, rng: &mut Rng) -> Vec<Vec<f64>> {
    let k = m.deviations.len();
    let sd: Vec<f64> = m
        .mean
        .iter()
        .zip(&m.sq_mean)
        .map(|(mu, sq)| (sq - mu * mu).max(1e-30).sqrt())
        .collect();
    let root = scale.sqrt();
    // swag.py: `cov_sample /= (self.max_num_models - 1) ** 0.5`, whatever the number of
    // deviations collected so far.
    let low_rank = if k > 1 {
        1.0 / ((rank.max(2) - 1) as f64).sqrt()
    } else {
        0.0
    };
    (0..count)
        .map(|_| {
            let z2: Vec<f64> = (0..k).map(|_| rng.normal()).collect();
            m.mean
                .iter()
                .zip(&sd)
                .enumerate()
                .map(|(j, (mu, s))| {
                    let cov: f64 = m.deviations.iter().zip(&z2).map(|(d, z)| d[j] * z).sum();
                    mu + root * (s * rng.normal() + low_rank * cov)
                })
                .collect()
        })
        .collect()
}

impl Method for Swag {
    fn name(&self) -> &str {
        &self.name
    }

    fn replicas_per_repetition(&self) -> usize {
        self.config.members
    }

    fn parameters(&self, task: &Task<'_>) -> Option<usize> {
        Some(self.config.members * self.config.net.shape(task.d, 1).parameters())
    }

    fn run(
        &self,
        task: &Task<'_>,
        compute: &Compute,
        keep_samples: bool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        task.require_gaussian(&self.name)?;
        let c = &self.config;
        let (n, m, members) = (task.n_train(), task.n_test(), c.members);
        let swa = self.swa(task.epochs)?;
        let settings = TrainSettings {
            lr_switch: Some(LrSwitch {
                epoch: swa.start,
                lr: c.swa_lr.unwrap_or(c.optim.lr),
            }),
            collectors: vec![Arc::new(swa)],
            ..c.optim.settings(task.epochs, n)
        };
        let shape = c.net.shape(task.d, 1);
        let resources = &Resources::of(compute)?;
        let out = trainer::train_task(
            task,
            &self.name,
            members,
            &shape,
            c.net.standardize,
            &settings,
            resources,
            progress,
        )?;
        let moments: Vec<&SwaMoments> = out.collected(0);
        let (x_train, x_test) = task.inputs_f32(c.net.standardize);
        let rows = |x: &[f32]| -> Vec<Vec<f64>> {
            x.chunks(task.d)
                .map(|r| r.iter().map(|&v| f64::from(v)).collect())
                .collect()
        };
        let (x_train, x_test) = (rows(&x_train), rows(&x_test));
        let mut dims = vec![task.d];
        dims.extend(&c.net.hidden);
        dims.push(1);
        let purpose = format!("{}/swag", self.name);
        // Per replica (repetition-major): its draws at the test inputs and its SWA mean's fit.
        let per_replica = uqbench_core::par_map(out.diverged.len(), |r| {
            let (k, member) = (r / members, (r % members) as u64);
            let rep = task.repetitions[k];
            let mut rng = Rng::new(task.seeds.seed(rep, member, &purpose));
            let slope = c.net.negative_slope;
            let mean_net = TrainedNet::from_flat_f64(&moments[r].mean, &dims, slope);
            let fit: Vec<f32> = x_train.iter().map(|x| mean_net.forward(x) as f32).collect();
            let passes: Vec<Vec<f32>> = draws(&moments[r], c.rank, c.samples, c.scale, &mut rng)
                .iter()
                .map(|theta| {
                    let net = TrainedNet::from_flat_f64(theta, &dims, slope);
                    x_test.iter().map(|x| net.forward(x) as f32).collect()
                })
                .collect();
            (passes, fit)
        });
        Ok((0..task.repetitions.len())
            .map(|k| {
                let first = k * members;
                let kept: Vec<Member<'_>> = (first..first + members)
                    .map(|r| {
                        let (passes, fit) = &per_replica[r];
                        let diverged =
                            out.diverged[r] || passes.iter().flatten().any(|v| !v.is_finite());
                        Member {
                            passes: passes.iter().map(Vec::as_slice).collect(),
                            train: fit,
                            objective: out.final_objective[r],
                            diverged,
                        }
                    })
                    .collect();
                let mut p = combine_members(&kept, c.intervals.family(), keep_samples);
                p.scalars
                    .insert("swa_snapshots".into(), moments[first].n as f64);
                debug_assert_eq!(p.mean.len(), m);
                p
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_have_the_swag_covariance() {
        // One parameter, diagonal variance 0.04 and deviations ±0.3 (K = 2 = R): a draw's
        // variance is scale·(0.04 + (0.09 + 0.09)/(R − 1)) = 0.5·0.22 = 0.11. Over 40 000 draws
        // the sample variance's standard error is 0.11·sqrt(2/40 000) ≈ 0.0008; checked at 0.004.
        let m = SwaMoments {
            n: 5,
            mean: vec![1.0],
            sq_mean: vec![1.04],
            deviations: vec![vec![0.3], vec![-0.3]].into(),
            ..SwaMoments::default()
        };
        let variance = |rank: usize| {
            let d = draws(&m, rank, 40_000, 0.5, &mut Rng::new(3));
            let mean = d.iter().map(|v| v[0]).sum::<f64>() / d.len() as f64;
            assert!((mean - 1.0).abs() < 0.01, "{mean}");
            d.iter().map(|v| (v[0] - mean).powi(2)).sum::<f64>() / (d.len() - 1) as f64
        };
        let var = variance(2);
        assert!((var - 0.11).abs() < 0.004, "{var}");
        // Fewer snapshots than rank (K = 2 of R = 20): the reference's divisor √(R − 1),
        // 0.5·(0.04 + 0.18/19) = 0.024737; standard error 0.0002, checked at 0.001.
        let var = variance(20);
        assert!((var - 0.5 * (0.04 + 0.18 / 19.0)).abs() < 0.001, "{var}");
    }
}
