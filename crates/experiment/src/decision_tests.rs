//! The decision track's tests: the regret bookkeeping by hand, the exact Thompson sampler's
//! action probabilities against their closed form and a numerical integral, the exact
//! learner's batch, and the policies' ordering on a problem of uqbench.

use std::path::Path;

use statrs::distribution::{Continuous, ContinuousCDF, Normal, StudentsT};
use uqbench_core::{Rng, SeedPath};

use crate::decision::active::{self, ExactLearner};
use crate::decision::bandit::{self, ExactThompson, Policy, Schedule, Uniform};
use crate::decision::env::{Actions, Environment, History, Regret};
use crate::decision::exact::{greedy_logdet, ExactPosterior};
use crate::decision::{baselines, run_repetition, DecisionKind, DecisionSpec, Update};
use crate::spec::ExperimentSpec;

/// K arms with a parameter each: G = I_K, σ = 1 (its shape when not known).
fn arms(k: usize, sigma_known: bool) -> Actions {
    let mut g = vec![0.0; k * k];
    for a in 0..k {
        g[a * k + a] = 1.0;
    }
    Actions {
        d: 1,
        x: (0..k).map(|a| a as f64).collect(),
        p: k,
        g,
        sigma: vec![1.0; k],
        sigma_known,
    }
}

fn history(pulls: &[(usize, f64)]) -> History {
    let mut h = History::default();
    for &(a, y) in pulls {
        h.push(a, y);
    }
    h
}

#[test]
fn the_regret_is_counted_on_the_true_means_step_by_step() {
    // f = (1, 3, 2): the best mean 3 at arm 1. Steps [0], [1, 2], [2]: regrets 2, 0 + 1, 1.
    let env = Environment {
        actions: arms(3, true),
        truth: vec![1.0, 3.0, 2.0],
        reward_seed: 7,
    };
    let r = Regret::of(&env, &[vec![0], vec![1, 2], vec![2]]);
    assert_eq!(r.curve, vec![2.0, 3.0, 4.0]);
    assert_eq!(r.total(), 4.0);
    assert_eq!(r.optimal_fraction, 0.25);
    // The Oracle's regret is zero at every step, and a policy's run counts only its own
    // steps (the initial pulls are everyone's).
    let mut oracle = bandit::Oracle {
        best: env.optimal(),
    };
    let schedule = Schedule { steps: 4, batch: 2 };
    let trace = bandit::run(&env, schedule, &[0, 2], &mut oracle, 1).unwrap();
    assert_eq!(trace.regret.curve, vec![0.0; 4]);
    assert_eq!(trace.regret.optimal_fraction, 1.0);
    assert_eq!(trace.history.len(), 2 + 8);
    // Rewards are f + σ·ε with the (step, slot)'s ε, whoever pulls: the initial pull of arm 0
    // in slot 0 is the same number in every policy's run.
    assert_eq!(trace.history.rewards[0], env.reward(0, 0, 0));
    assert_ne!(env.reward(1, 0, 1), env.reward(1, 1, 1));
}

/// P(f̃_0 > f̃_1) as a numerical integral of the density of d = f̃_0 − f̃_1 over d > 0
/// (Simpson's rule on [0, loc + 60·scale]).
fn integral(pdf: impl Fn(f64) -> f64, hi: f64) -> f64 {
    let n = 200_000;
    let h = hi / n as f64;
    let mut s = pdf(0.0) + pdf(hi);
    for i in 1..n {
        s += if i % 2 == 1 { 4.0 } else { 2.0 } * pdf(i as f64 * h);
    }
    s * h / 3.0
}

/// The share of `n` exact Thompson decisions on `h` that pick arm 0.
fn share_of_arm_0(actions: &Actions, h: &History, n: usize) -> f64 {
    let mut rng = Rng::new(2026);
    let picks = ExactThompson.choose(actions, h, n, &mut rng).unwrap();
    picks.iter().filter(|&&a| a == 0).count() as f64 / n as f64
}

#[test]
fn the_exact_thompson_sampler_picks_each_arm_with_its_posterior_probability() {
    let pulls = [(0, 0.2), (0, 0.5), (0, -0.1), (1, 0.4), (1, 0.9)];
    let h = history(&pulls);
    let n = 40_000;
    // σ known (= 1): f_0 ∼ N(0.2, 1/3), f_1 ∼ N(0.65, 1/2) independently, so
    // P(pick 0) = Φ((0.2 − 0.65)/√(1/3 + 1/2)).
    let (loc, scale) = (0.2 - 0.65, (1.0 / 3.0 + 1.0 / 2.0f64).sqrt());
    let closed = Normal::new(0.0, 1.0).unwrap().cdf(loc / scale);
    let d = Normal::new(loc, scale).unwrap();
    let numeric = integral(|u| d.pdf(u), loc.abs() + 60.0 * scale);
    assert!((closed - numeric).abs() < 1e-9, "{closed} vs {numeric}");
    let share = share_of_arm_0(&arms(2, true), &h, n);
    // Binomial: sd √(p(1−p)/n) ≈ 0.0023; 4.5 sd fails a correct sampler with probability
    // below 1e-5.
    let sd = (closed * (1.0 - closed) / n as f64).sqrt();
    assert!(
        (share - closed).abs() < 4.5 * sd,
        "share {share}, P = {closed}, sd {sd}"
    );

    // σ's scale estimated: s² = RSS/(N − p) with ν = 3, and f jointly t_ν with scale matrix
    // s²·diag(1/3, 1/2): d = f_0 − f_1 ∼ t_ν(loc, s·√(1/3 + 1/2)), one χ² shared by the arms.
    let rss = [0.2, 0.5, -0.1]
        .iter()
        .map(|y: &f64| (y - 0.2).powi(2))
        .sum::<f64>()
        + [0.4, 0.9]
            .iter()
            .map(|y: &f64| (y - 0.65).powi(2))
            .sum::<f64>();
    let nu = 3.0;
    let s = (rss / nu).sqrt();
    let t = StudentsT::new(loc, s * scale, nu).unwrap();
    let closed = 1.0 - t.cdf(0.0);
    // The t's tails are heavy: integrate far (its mass beyond is ≈ 1e-7 at ν = 3).
    let numeric = integral(|u| t.pdf(u), loc.abs() + 400.0 * s * scale);
    assert!((closed - numeric).abs() < 1e-6, "{closed} vs {numeric}");
    let share = share_of_arm_0(&arms(2, false), &h, n);
    let sd = (closed * (1.0 - closed) / n as f64).sqrt();
    assert!(
        (share - closed).abs() < 4.5 * sd,
        "share {share}, P = {closed}, sd {sd}"
    );
    // Had the sampler drawn the arms' t's independently (no shared χ²), P would differ:
    // the test can tell (the independent-t share is a different number).
    assert!((closed - Normal::new(0.0, 1.0).unwrap().cdf(loc / (s * scale))).abs() > 4.5 * sd);
}

#[test]
fn the_exact_learner_labels_the_most_informative_batch() {
    // A covariance over three inputs, the first two correlated: the largest predictive
    // variance first, then the largest given that label.
    let k = 3;
    let cov = |a: usize, b: usize| [[4.0, 1.0, 0.0], [1.0, 1.5, 0.0], [0.0, 0.0, 2.0]][a][b];
    let noise = [1.0, 1.0, 1.0];
    assert_eq!(greedy_logdet(k, cov, &noise, 1), vec![0]);
    // After labelling 0 (variance 4 + noise 1): var_0 = 4 − 16/5 = 0.8, var_1 = 1.5 − 1/5 =
    // 1.3, var_2 = 2 → 2 next; then 1 (1.3 > 0.8).
    assert_eq!(greedy_logdet(k, cov, &noise, 3), vec![0, 2, 1]);
    // A repeated input is allowed: var 4 → 0.8 after one label, still above the other's 0.1.
    let cov = |a: usize, b: usize| [[4.0, 0.0], [0.0, 0.1]][a][b];
    assert_eq!(greedy_logdet(2, cov, &[1.0, 1.0], 2), vec![0, 0]);

    // On arms with σ known, the exact learner's picks do not depend on y.
    let actions = arms(3, true);
    let a = ExactLearner
        .choose(
            &actions,
            &history(&[(0, 1.0), (1, 2.0), (2, 0.0), (2, 5.0)]),
            2,
            &mut Rng::new(1),
        )
        .unwrap();
    let b = ExactLearner
        .choose(
            &actions,
            &history(&[(0, -3.0), (1, 0.5), (2, 9.0), (2, 1.0)]),
            2,
            &mut Rng::new(1),
        )
        .unwrap();
    assert_eq!(a, b);
    // Arms 0 and 1 have one label each, arm 2 two: the first pick is 0 (the first of equal
    // variances), the second 1 (arm 0's variance halved by the first pick's label).
    assert_eq!(a, vec![0, 1]);
    let post = ExactPosterior::fit(
        &actions,
        &history(&[(0, 1.0), (1, 2.0), (2, 0.0), (2, 5.0)]),
        "test",
    )
    .unwrap();
    assert!((post.variance()[2] - 0.5).abs() < 1e-12);
}

fn e1() -> (ExperimentSpec, uqbench_anchor::Problem) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/e1.toml");
    let spec = ExperimentSpec::load_profile(&path, Some("quick")).unwrap();
    let setting = spec.settings().into_iter().next().unwrap();
    let problem = spec.resolve(&setting).unwrap();
    (spec, problem)
}

#[test]
fn the_exact_thompson_sampler_beats_random_and_a_policy_does_not_depend_on_the_others() {
    let (spec, problem) = e1();
    let decision = DecisionSpec {
        kind: DecisionKind::Bandit,
        repetitions: 20,
        actions: Some(40),
        steps: 25,
        batch: 1,
        initial: None,
        methods: Vec::new(),
        update: Update::Retrain,
        update_epochs: 300,
        initial_epochs: None,
    };
    decision.validate(&problem).unwrap();
    let label = problem.setting.label();
    let path = |repetition| SeedPath {
        base: spec.seed,
        experiment: &spec.name,
        setting: &label,
        repetition,
        member: 0,
        purpose: "",
    };
    let reps = 20;
    let mut diff = Vec::new();
    for r in 0..reps {
        let env = Environment::from_problem(&problem, decision.actions, 0).unwrap();
        let mut policies = baselines(DecisionKind::Bandit, &env);
        let out = run_repetition(&decision, &problem, &path(r), &mut policies).unwrap();
        let regret = |name: &str| out.iter().find(|p| p.policy == name).unwrap().curve[24];
        assert_eq!(regret("Oracle"), 0.0);
        diff.push(regret("Random") - regret("BLR"));
        if r == 0 {
            // Random alone gives Random's numbers.
            let mut alone: Vec<Box<dyn Policy>> = vec![Box::new(Uniform)];
            let again = run_repetition(&decision, &problem, &path(r), &mut alone).unwrap();
            assert_eq!(again[0].curve, out[2].curve);
        }
    }
    // The paired difference over repetitions: its mean more than 3 standard errors above 0
    // (a one-sided z at 3: a sampler no better than Random passes with probability ~0.001).
    let (mean, se, _) = crate::decision::results::mean_se(&diff);
    assert!(mean > 3.0 * se, "Random − BLR regret {mean} ± {se}");
}

#[test]
fn active_learning_scores_after_every_step_and_the_exact_learner_beats_random() {
    // [002]'s quartic (experiments/active.toml): σ's scale estimated, 91 inputs in the pool.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/active.toml");
    let spec = ExperimentSpec::load_profile(&path, Some("quick")).unwrap();
    let problem = spec.resolve(&spec.settings()[0]).unwrap();
    let decision = spec.decision.clone().unwrap();
    assert_eq!((decision.steps, decision.batch), (10, 2));
    decision.validate(&problem).unwrap();
    let label = problem.setting.label();
    let mut diff = Vec::new();
    for r in 0..100 {
        let path = SeedPath {
            base: spec.seed,
            experiment: &spec.name,
            setting: &label,
            repetition: r,
            member: 0,
            purpose: "",
        };
        let env = Environment::from_problem(&problem, decision.actions, 0).unwrap();
        let mut policies = baselines(DecisionKind::Active, &env);
        let out = run_repetition(&decision, &problem, &path, &mut policies).unwrap();
        assert!(out
            .iter()
            .all(|p| p.curve.len() == 10 && p.extra.is_finite()));
        let auc = |name: &str| {
            let c = &out.iter().find(|p| p.policy == name).unwrap().curve;
            c.iter().sum::<f64>() / c.len() as f64
        };
        diff.push(auc("Random") - auc("BLR"));
    }
    // As for the bandit: the paired difference's mean more than 3 standard errors above 0
    // (measured at 400 repetitions: 0.10 ± 0.009).
    let (mean, se, _) = crate::decision::results::mean_se(&diff);
    assert!(mean > 3.0 * se, "Random − BLR al_auc {mean} ± {se}");
    // The score is the exact posterior's RMSE against f.
    let env = Environment::from_problem(&problem, None, 3).unwrap();
    let schedule = Schedule { steps: 1, batch: 1 };
    let (h, learning) = active::run(
        &env,
        schedule,
        &[0, 5, 10, 15, 20, 25, 30, 35],
        &mut Uniform,
        9,
    )
    .unwrap();
    let post = ExactPosterior::fit(&env.actions, &h, "test").unwrap();
    assert_eq!(learning.rmse[0], active::score(&post, &env.truth).0);
}

#[test]
fn a_decision_section_that_cannot_run_is_refused_before_anything_runs() {
    let (_, problem) = e1();
    let text = "kind = \"bandit\"\nrepetitions = 2\nsteps = 10\ninitial = 1\n";
    let decision: DecisionSpec = toml::from_str(text).unwrap();
    let e = decision.validate(&problem).unwrap_err().to_string();
    assert!(
        e.contains("[decision] initial = 1") && e.contains("valid: at least"),
        "{e}"
    );
    let bad = toml::from_str::<DecisionSpec>("kind = \"casino\"\nrepetitions = 2\nsteps = 1\n")
        .unwrap_err();
    assert!(bad.to_string().contains("bandit"), "{bad}");
    let e = DecisionSpec {
        kind: DecisionKind::Bandit,
        repetitions: 20,
        actions: Some(10_000),
        steps: 1,
        batch: 1,
        initial: None,
        methods: Vec::new(),
        update: Update::Retrain,
        update_epochs: 300,
        initial_epochs: None,
    }
    .validate(&problem)
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("actions = 10000") && e.contains("valid: 1 to"),
        "{e}"
    );
}

#[test]
fn a_ratio_aggregates_as_the_ratio_of_the_means_with_its_delta_method_error() {
    use crate::decision::results::{aggregate, ratio_of_means, rows};
    use crate::decision::PolicyResult;
    // Regrets (policy, exact) on three repetitions: (2, 0), (4, 2), (6, 4): the per-repetition
    // ratio is +inf on the first, the ratio of the means 4/2 = 2.
    let reps = [(2.0, 0.0), (4.0, 2.0), (6.0, 4.0)];
    let all: Vec<_> = (reps.iter().enumerate())
        .flat_map(|(r, &(a, b))| {
            let res = [("BLR", b), ("Greedy", a)].map(|(p, v)| PolicyResult {
                policy: p.into(),
                curve: vec![v],
                extra: 0.0,
            });
            rows(DecisionKind::Bandit, "", r as u64, &res)
        })
        .collect();
    let first = all
        .iter()
        .find(|r| r.policy == "Greedy" && r.metric == "regret_ratio");
    assert_eq!(first.unwrap().value, f64::INFINITY);
    let agg = aggregate(&all);
    let (.., (ratio, se, n)) = agg
        .iter()
        .find(|(_, p, m, _)| p == "Greedy" && *m == "regret_ratio")
        .unwrap();
    assert_eq!((*ratio, *n), (2.0, 3));
    // By hand: ā = 4, b̄ = 2, r = 2; the means' variances Var ā = Var b̄ = Cov = 4/3 (sample
    // variance 4, over n = 3); Var(ā/b̄) = (4/3 − 2·2·4/3 + 4·4/3)/4 = 1/3.
    assert!((se - (1.0f64 / 3.0).sqrt()).abs() < 1e-12, "{se}");
    assert_eq!(ratio_of_means(&[0.0, 0.0], &[0.0, 0.0]).0, 1.0);
}
