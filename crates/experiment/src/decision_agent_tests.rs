//! Method agents (`decision::agent`): the task a method is retrained on at every step, and
//! the decisions drawn from its predictive (Thompson sampling from its draws and from its
//! Gaussian joint, the log-det batch on its draws' covariance), against a method whose
//! prediction is fixed.

use std::sync::Mutex;

use std::sync::Arc;

use uqbench_core::{
    Compute, Extra, FactorJoint, Method, MethodError, Prediction, Rng, SimdCap, Task, WarmStart,
    WarmState,
};

use crate::decision::agent::{thompson_draw, AgentSeeds, MethodAgent};
use crate::decision::bandit::Policy;
use crate::decision::env::{Actions, History};
use crate::decision::DecisionKind;

/// What the method saw of one task: training inputs, targets, setting label, repetitions.
type Seen = (Vec<f64>, Vec<f64>, String, Vec<u64>);

/// A method whose prediction is fixed, recording the tasks it is given and, warm-started, the
/// epochs and the state (the count of trainings before) each training started from.
struct Fixed {
    pred: Prediction,
    seen: Mutex<Vec<Seen>>,
    warm: Mutex<Vec<(usize, Option<usize>)>>,
}

impl WarmStart for Fixed {
    fn run_warm(
        &self,
        task: &Task<'_>,
        c: &Compute,
        keep: bool,
        from: Option<&WarmState>,
    ) -> Result<(Vec<Prediction>, WarmState), MethodError> {
        let from = from.map(|s| *s.downcast_ref::<usize>().unwrap());
        let mut warm = self.warm.lock().unwrap();
        warm.push((task.epochs, from));
        let state: WarmState = Arc::new(warm.len());
        drop(warm);
        Ok((self.run(task, c, keep, &|_| {})?, state))
    }
}

impl Method for Fixed {
    fn name(&self) -> &str {
        "Fixed"
    }

    fn replicas_per_repetition(&self) -> usize {
        1
    }

    fn warm_start(&self) -> Option<&dyn WarmStart> {
        Some(self)
    }

    fn run(
        &self,
        task: &Task<'_>,
        _: &Compute,
        _: bool,
        _: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Prediction>, MethodError> {
        let seen = (task.x_train.to_vec(), task.y_train[0].clone());
        let (setting, reps) = (task.seeds.setting.clone(), task.repetitions.to_vec());
        self.seen
            .lock()
            .unwrap()
            .push((seen.0, seen.1, setting, reps));
        Ok(vec![self.pred.clone()])
    }
}

fn fixed(pred: Prediction) -> Fixed {
    Fixed {
        pred,
        seen: Mutex::new(Vec::new()),
        warm: Mutex::new(Vec::new()),
    }
}

fn compute() -> Compute {
    Compute {
        backend: "none".into(),
        gpu: false,
        threads: 1,
        memory_budget: 1 << 20,
        chunk: None,
        device: None,
        host_loops: true,
        simd: SimdCap::Best,
    }
}

/// K actions at x = 10·a with one feature each, σ = 1 known.
fn actions(k: usize) -> Actions {
    Actions {
        d: 1,
        x: (0..k).map(|a| 10.0 * a as f64).collect(),
        p: 1,
        g: vec![1.0; k],
        sigma: vec![1.0; k],
        sigma_known: true,
    }
}

fn agent<'a>(method: &'a Fixed, compute: &'a Compute, kind: DecisionKind) -> MethodAgent<'a> {
    MethodAgent {
        method,
        compute,
        epochs: 50,
        warm: None,
        kind,
        seeds: AgentSeeds {
            base: 1,
            experiment: "test".into(),
            setting: "f=1".into(),
            repetition: 7,
        },
        diverged: false,
    }
}

/// Draws `[S, K]`: draw s is `rows[s]`.
fn draws(rows: Vec<Vec<f64>>) -> Prediction {
    let k = rows[0].len();
    Prediction::normal(vec![0.0; k], vec![1.0; k], Some(rows))
}

#[test]
fn an_agent_is_retrained_on_exactly_its_pulls_with_a_seed_of_its_own_per_step() {
    let method = fixed(draws(vec![vec![0.0, 0.0, 1.0]]));
    let c = compute();
    let mut a = agent(&method, &c, DecisionKind::Bandit);
    let mut h = History::default();
    h.push(2, 0.5);
    h.push(0, -1.0);
    let mut rng = Rng::new(3);
    assert_eq!(a.choose(&actions(3), &h, 1, &mut rng).unwrap(), vec![2]);
    h.push(2, 0.25);
    a.choose(&actions(3), &h, 1, &mut rng).unwrap();
    let seen = method.seen.lock().unwrap();
    assert_eq!(seen[0].0, vec![20.0, 0.0]);
    assert_eq!(seen[0].1, vec![0.5, -1.0]);
    assert_eq!(seen[0].3, vec![7]);
    assert_eq!(seen[1].0, vec![20.0, 0.0, 20.0]);
    // The setting label keys the fit's seeds: a fresh one after every step.
    assert_eq!(seen[0].2, "f=1/decision/Fixed/n2");
    assert_eq!(seen[1].2, "f=1/decision/Fixed/n3");
}

#[test]
fn a_warm_agent_continues_from_the_state_its_last_training_left() {
    let method = fixed(draws(vec![vec![0.0, 0.0, 1.0]]));
    let c = compute();
    let mut a = agent(&method, &c, DecisionKind::Bandit);
    // update = "warm" with initial_epochs = 200 and update_epochs = 50.
    a.warm = Some((200, None));
    let mut h = History::default();
    h.push(2, 0.5);
    h.push(0, -1.0);
    let mut rng = Rng::new(3);
    for pull in [2, 1] {
        assert_eq!(a.choose(&actions(3), &h, 1, &mut rng).unwrap(), vec![2]);
        h.push(pull, 0.25);
    }
    a.choose(&actions(3), &h, 1, &mut rng).unwrap();
    // The first training from scratch for 200 epochs, every later one for 50 from the state
    // the one before returned.
    let warm = method.warm.lock().unwrap();
    assert_eq!(*warm, vec![(200, None), (50, Some(1)), (50, Some(2))]);
    let seen = method.seen.lock().unwrap();
    assert_eq!(seen[2].0, vec![20.0, 0.0, 20.0, 10.0]);
    // Each training's streams still have a seed of their own (the setting label).
    assert_eq!(seen[2].2, "f=1/decision/Fixed/n4");
}

#[test]
fn thompson_sampling_from_draws_acts_on_one_draw_at_a_time() {
    // Four draws whose argmax is 0, 1, 2, 2: the arms' probabilities are 1/4, 1/4, 1/2.
    let method = fixed(draws(vec![
        vec![1.0, 0.0, 0.0],
        vec![0.0, 1.0, 0.0],
        vec![0.0, 0.0, 1.0],
        vec![0.0, -1.0, 1.0],
    ]));
    let c = compute();
    let mut a = agent(&method, &c, DecisionKind::Bandit);
    let mut h = History::default();
    h.push(0, 0.0);
    let n = 4000;
    let chosen = a.choose(&actions(3), &h, n, &mut Rng::new(11)).unwrap();
    let count = |arm| chosen.iter().filter(|&&x| x == arm).count() as f64;
    // Binomial(4000, p): sd 27.4 at p = 1/4 and 31.6 at p = 1/2; 5 sd each (a correct
    // sampler fails one of the three with probability below 2e-6).
    assert!((count(0) - 1000.0).abs() < 5.0 * 27.4, "{}", count(0));
    assert!((count(1) - 1000.0).abs() < 5.0 * 27.4, "{}", count(1));
    assert!((count(2) - 2000.0).abs() < 5.0 * 31.6, "{}", count(2));
}

#[test]
fn a_gaussian_joint_is_drawn_with_its_mean_and_covariance() {
    // F = [[1, 0], [0.5, 0.5]]: Var f₀ = 1, Var f₁ = 0.5, Cov = 0.5.
    let mut pred = Prediction::normal(vec![1.0, -1.0], vec![1.0, 0.5f64.sqrt()], None);
    pred.extra = Extra::joint(Some(FactorJoint {
        factor: vec![1.0, 0.0, 0.5, 0.5],
        rank: 2,
    }));
    let n = 20_000;
    let mut rng = Rng::new(5);
    let d: Vec<Vec<f64>> = (0..n).map(|_| thompson_draw(&pred, &mut rng)).collect();
    let nf = n as f64;
    let mean = |i: usize| d.iter().map(|r| r[i]).sum::<f64>() / nf;
    let (m0, m1) = (mean(0), mean(1));
    let cov = |i: usize, j: usize| {
        d.iter()
            .map(|r| (r[i] - [m0, m1][i]) * (r[j] - [m0, m1][j]))
            .sum::<f64>()
            / (nf - 1.0)
    };
    // Tolerances at 5 standard errors: the means' sd/√n; a sample covariance's
    // √((σᵢᵢσⱼⱼ + σᵢⱼ²)/n), 0.0061 for Cov(f₀, f₁) and 0.0050 for Var f₁.
    assert!((m0 - 1.0).abs() < 5.0 / nf.sqrt(), "{m0}");
    assert!((m1 + 1.0).abs() < 5.0 * 0.5f64.sqrt() / nf.sqrt(), "{m1}");
    assert!((cov(0, 1) - 0.5).abs() < 5.0 * 0.0061, "{}", cov(0, 1));
    assert!((cov(1, 1) - 0.5).abs() < 5.0 * 0.0050, "{}", cov(1, 1));
}

#[test]
fn the_active_agent_s_batch_uses_the_covariance_of_its_draws() {
    // Action 1 varies most; action 2 moves with it (correlation 1); action 3 varies less but
    // independently of both. Labelling 1 teaches most of what 2 would: the log-det batch of
    // two is [1, 3], where the largest marginal variances would give [1, 2].
    let method = fixed(draws(vec![
        vec![0.0, 2.0, 1.8, 1.5],
        vec![0.0, -2.0, -1.8, 1.5],
        vec![0.0, 2.0, 1.8, -1.5],
        vec![0.0, -2.0, -1.8, -1.5],
    ]));
    let c = compute();
    let mut a = agent(&method, &c, DecisionKind::Active);
    let mut h = History::default();
    h.push(0, 0.0);
    let batch = a.choose(&actions(4), &h, 2, &mut Rng::new(1)).unwrap();
    assert_eq!(batch, vec![1, 3]);
}

#[test]
fn spearman_s_rho_ranks_with_ties_and_matches_its_closed_form() {
    use crate::rank::{ranks, spearman};
    assert_eq!(ranks(&[3.0, 1.0, 3.0, 2.0]), vec![3.5, 1.0, 3.5, 2.0]);
    // No ties: ρ = 1 − 6Σd²/(m(m² − 1)); d = (1, 1, 1, 1, 0) gives 1 − 24/120 = 0.8.
    let rho = spearman(&[1.0, 2.0, 3.0, 4.0, 5.0], &[2.0, 1.0, 4.0, 3.0, 5.0]);
    assert!((rho - 0.8).abs() < 1e-12, "{rho}");
    assert_eq!(spearman(&[1.0, 2.0, 3.0], &[30.0, 20.0, 10.0]), -1.0);
}

#[test]
fn the_rank_correlation_pairs_methods_across_the_two_runs() {
    use crate::compare::RepRow;
    use crate::rank::rank_correlations;
    let row = |method: &str, metric: &str, repetition: u64, value: f64| RepRow {
        setting: "s".into(),
        method: method.into(),
        region: "all".into(),
        metric: metric.into(),
        repetition,
        value,
    };
    // Four methods, 30 repetitions each; regret m + noise ordered as joint_kl_10, the
    // reverse of kl_anchor; coverage 0.95 ± (m + 1)/10 alternating in sign.
    let mut rng = Rng::new(9);
    let (mut dec, mut std) = (Vec::new(), Vec::new());
    for (m, name) in ["A", "B", "C", "D"].iter().enumerate() {
        let m = m as f64;
        for r in 0..30 {
            dec.push(row(name, "regret", r, 10.0 * m + rng.normal()));
            std.push(row(name, "joint_kl_10", r, m + 0.1 * rng.normal()));
            std.push(row(name, "kl_anchor", r, -m + 0.1 * rng.normal()));
            let sign = if m as usize % 2 == 0 { 1.0 } else { -1.0 };
            std.push(row(name, "coverage", r, 0.95 + sign * (m + 1.0) / 10.0));
        }
    }
    let table = rank_correlations(&dec, &std, "regret", 1).unwrap();
    let get = |a: &str| table.iter().find(|c| c.against == a).unwrap();
    // The means are 10 units apart against a standard error of 1/√30 per mean: the full-data
    // ranks, and every resample's, are exact.
    assert_eq!(get("joint_kl_10").rho, 1.0);
    assert_eq!(
        (get("joint_kl_10").lower, get("joint_kl_10").upper),
        (1.0, 1.0)
    );
    assert_eq!(get("kl_anchor").rho, -1.0);
    assert_eq!(get("coverage_error").rho, 1.0);
    assert_eq!(get("joint_kl_10").methods, vec!["A", "B", "C", "D"]);
    assert!(table.iter().all(|c| c.against != "crps"));
    // Runs of different settings share nothing: a clear error.
    let other: Vec<RepRow> = std
        .iter()
        .map(|r| RepRow {
            setting: "t".into(),
            ..r.clone()
        })
        .collect();
    let e = rank_correlations(&dec, &other, "regret", 1).unwrap_err();
    assert!(e.to_string().contains("share no setting"), "{e}");
}

#[test]
fn a_diverged_training_ends_the_agent_s_run_and_leaves_its_repetition_out() {
    let mut pred = draws(vec![vec![0.0, 1.0, 0.0]]);
    pred.diverged = true;
    let method = fixed(pred);
    let c = compute();
    let mut a = agent(&method, &c, DecisionKind::Bandit);
    let mut h = History::default();
    h.push(0, 0.0);
    assert!(!a.diverged());
    a.choose(&actions(3), &h, 1, &mut Rng::new(1)).unwrap();
    assert!(a.diverged());
    // No further training once diverged.
    a.choose(&actions(3), &h, 1, &mut Rng::new(1)).unwrap();
    assert_eq!(method.seen.lock().unwrap().len(), 1);
    // A repetition without a value is left out of the ratio's pairs.
    let (r, _) = crate::decision::results::ratio_of_means(&[1.0, f64::NAN, 3.0], &[1.0, 5.0, 1.0]);
    assert_eq!(r, 2.0);
}
