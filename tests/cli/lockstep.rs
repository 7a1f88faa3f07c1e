//! The method agents of every repetition stepped together (`decision::lockstep`, what
//! `uqbench decide` runs): each repetition's result is the one the agent gets on that
//! repetition alone, for the ensembles, ensemble+, SGLD, the epinet and BatchEnsemble (one
//! engine job per step), retrained and warm-started, bandit and active learning.

use uqbench_core::Compute;
use uqbench_engine::{open_device, BackendKind, Resources};
use uqbench_experiment::decision::agent::MethodAgent;
use uqbench_experiment::decision::bandit::Policy;
use uqbench_experiment::decision::{lockstep, run_spec_repetition, PolicyResult, Update};
use uqbench_experiment::spec::ExperimentSpec;

use crate::util::root;

fn compute(backend: BackendKind, threads: Option<usize>) -> Compute {
    let mut res = Resources::new(backend, open_device(backend, true).unwrap());
    if let Some(t) = threads {
        res.threads = t;
    }
    res.compute()
}

/// `{method}`'s results on every repetition of `file`'s quick profile (3 repetitions, 3 steps
/// of 2 actions, `update`), stepped together and one repetition at a time: equal to the bit
/// (NaN where an agent diverged compares as its debug form).
fn same_alone_and_together(file: &str, methods: &[&str], update: Update, backend: BackendKind) {
    let path = root().join(file);
    let spec = ExperimentSpec::load_profile(&path, Some("quick")).unwrap();
    let setting = spec.settings().into_iter().next().unwrap();
    let problem = spec.resolve(&setting).unwrap();
    let mut decision = spec.decision.clone().unwrap();
    decision.repetitions = 3;
    decision.steps = 3;
    decision.batch = 2;
    decision.update = update;
    decision.update_epochs = 20;
    if update == Update::Warm {
        decision.initial_epochs = Some(40);
    }
    let experiment = (spec.seed, spec.name.as_str());
    let (all, one) = (compute(backend, None), compute(backend, Some(1)));
    let label = problem.setting.label();
    for name in methods {
        let method = uqbench_methods::build_for(&spec, name, &setting).unwrap();
        let together =
            lockstep::run_agents(&decision, &problem, experiment, method.as_ref(), &all).unwrap();
        assert_eq!(together.len(), 3);
        for (r, got) in together.iter().enumerate() {
            let agent = MethodAgent::of(
                method.as_ref(),
                &one,
                &decision,
                experiment,
                &label,
                r as u64,
            );
            let own: Vec<Box<dyn Policy + '_>> = vec![Box::new(agent)];
            let alone: Vec<PolicyResult> =
                run_spec_repetition(experiment, &decision, &problem, r as u64, own).unwrap();
            let want = alone.last().unwrap();
            assert_eq!(want.policy, *name);
            assert_eq!(
                format!("{got:?}"),
                format!("{want:?}"),
                "{file} {name} {update:?} repetition {r}"
            );
            assert!(got.curve.iter().all(|v| v.is_finite()), "{name} {got:?}");
        }
    }
}

#[test]
fn agents_stepped_together_give_each_repetition_s_own_results() {
    // Ens, EnsPrior (each member on its own shifted targets), SGLD (each task's draws at its
    // own test inputs), Epinet and BatchEnsemble (networks of their own, each replica on its
    // task's inputs) train as one job per step.
    let flex = BackendKind::Flex;
    same_alone_and_together(
        "experiments/bandit.toml",
        &["Ens", "EnsPrior", "SGLD", "Epinet", "BatchEnsemble"],
        Update::Retrain,
        flex,
    );
    same_alone_and_together(
        "experiments/bandit.toml",
        &["Ens", "EnsPrior"],
        Update::Warm,
        flex,
    );
    // SGLD learns σ on active.toml (each chain's Gibbs step in the joint job).
    same_alone_and_together(
        "experiments/active.toml",
        &["Ens", "SGLD"],
        Update::Retrain,
        flex,
    );
}

#[test]
fn agents_stepped_together_on_wgpu_give_each_repetition_s_own_results() {
    // The tensor program on lavapipe: the three repetitions' replicas in one program per step
    // against one program per repetition.
    if crate::util::skip_wgpu() {
        return;
    }
    same_alone_and_together(
        "experiments/bandit.toml",
        &["Ens"],
        Update::Warm,
        BackendKind::Wgpu,
    );
    // The epinet's and BatchEnsemble's own tensor programs, each replica's inputs uploaded
    // `[R, n, d]`.
    same_alone_and_together(
        "experiments/bandit.toml",
        &["Epinet", "BatchEnsemble"],
        Update::Retrain,
        BackendKind::Wgpu,
    );
}
