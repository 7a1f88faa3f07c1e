//! The two executions against each other through the public surface: what a method that brings
//! its own part (a head, an update, a collector) runs in its tests to hold its host form to its
//! tensor form. The engine's own tests (`host_tests.rs`) do the same for every built-in job.

use super::{train, Job, Resources, TrainOutput, TrainSettings};
use crate::backend::{open_device, BackendKind};
use crate::mlp::MlpShape;

/// Training points of [`executions_agree`]'s job.
pub const POINTS: usize = 43;

/// Trains three replicas of a 2-6-4-k network (k = the head's outputs) with `settings` on
/// both executions, the host loops and the tensors on flex, from the same seeds, on 43 points
/// whose targets are `targets(f(x), z)` (f a plane, z a standard normal draw), and compares
/// what they return: every prediction, fit and final objective, and every rate, within
/// 1e-4·(1 + |v|), and the divergence flags exactly. The executions differ only in the
/// floating-point order of their sums (f32, about 1e-7 relative per operation), which 8 steps
/// of lr 1e-2 carry into the weights at well under 1e-4; a host form that disagrees with its
/// tensor form moves a step by up to lr, a hundred times that. Returns both outputs (host,
/// tensors) for the caller's own comparisons (its collectors').
pub fn executions_agree(
    settings: &TrainSettings,
    targets: impl Fn(f32, f64) -> f32,
) -> Result<(TrainOutput, TrainOutput), String> {
    let (n, m, d) = (POINTS, 5, 2);
    let mut rng = uqbench_core::Rng::new(11);
    let mut draw =
        |k: usize| -> Vec<f32> { (0..k).map(|_| rng.uniform_in(-2.0, 2.0) as f32).collect() };
    let (x, x_test) = (draw(n * d), draw(m * d));
    let y: Vec<f32> = (0..n)
        .map(|p| targets(x[p * d] - 0.5 * x[p * d + 1], rng.normal()))
        .collect();
    let shape = MlpShape {
        d_in: d,
        hidden: vec![6, 4],
        d_out: settings.head().outputs(),
        negative_slope: 0.01,
    };
    let all = vec![y];
    let job = Job {
        shape: &shape,
        x_train: &x,
        targets: &all,
        replica_targets: &[0, 0, 0],
        init_seeds: &[1, 2, 3],
        stream_seeds: &[4, 5, 6],
        replica_ids: &[0, 1, 2],
        x_test: &x_test,
        init: None,
        inputs: None,
    };
    let device = open_device(BackendKind::Flex, true).map_err(|e| e.to_string())?;
    let mut res = Resources::new(BackendKind::Flex, device);
    res.threads = 1;
    let run = |host_loops: bool| {
        let res = Resources {
            host_loops,
            ..res.clone()
        };
        train(&job, settings, &res, &|_| {}).map_err(|e| e.to_string())
    };
    let (h, t) = (run(true)?, run(false)?);
    let close = |a: &[f64], b: &[f64], what: &str| -> Result<(), String> {
        for (i, (u, v)) in a.iter().zip(b).enumerate() {
            if !((u - v).abs() <= 1e-4 * (1.0 + v.abs())) {
                return Err(format!("{what}[{i}]: host {u}, tensors {v}"));
            }
        }
        Ok(())
    };
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    close(&wide(&h.test_out), &wide(&t.test_out), "prediction")?;
    close(&wide(&h.train_pred), &wide(&t.train_pred), "fit")?;
    close(&h.final_objective, &t.final_objective, "objective")?;
    match (&h.rates, &t.rates) {
        (Some(a), Some(b)) => close(a, b, "rate")?,
        (None, None) => {}
        _ => return Err("one execution reports rates, the other not".into()),
    }
    if h.diverged != t.diverged {
        return Err(format!(
            "divergence: host {:?}, tensors {:?}",
            h.diverged, t.diverged
        ));
    }
    Ok((h, t))
}
