//! Several tasks trained as one job (`trainer::train_tasks`, the decision track's
//! repetitions at one step): every task's replicas compute in the joint job what they compute
//! in their task's own.

use uqbench_anchor::Rng;
use uqbench_core::{Likelihood, NoiseInfo, SeedBase, Task};
use uqbench_engine::trainer::{self, Batching, Resources, TrainOutput, TrainSettings, WarmWeights};
use uqbench_engine::{open_device, xavier_init, BackendKind};

use crate::engine::shape;

/// One task's data: its own inputs (drawn from `seed`) and one target per repetition.
struct Data {
    x: Vec<f64>,
    y: Vec<Vec<f64>>,
    x_test: Vec<f64>,
    repetitions: Vec<u64>,
}

fn data(seed: u64, repetitions: &[u64]) -> Data {
    let mut rng = Rng::new(seed);
    let x: Vec<f64> = (0..30).map(|_| rng.uniform_in(-4.0, 4.0)).collect();
    let y = (repetitions.iter())
        .map(|_| x.iter().map(|&v| v.sin() + 0.2 * rng.normal()).collect())
        .collect();
    let x_test = (0..12).map(|_| rng.uniform_in(-5.0, 5.0)).collect();
    Data {
        x,
        y,
        x_test,
        repetitions: repetitions.to_vec(),
    }
}

fn task(d: &Data) -> Task<'_> {
    Task {
        d: 1,
        x_train: &d.x,
        y_train: &d.y,
        repetitions: &d.repetitions,
        x_test: &d.x_test,
        epochs: 15,
        known_sigma: None,
        seeds: SeedBase {
            base: 9,
            experiment: "tasks".into(),
            setting: "s".into(),
        },
        features: None,
        noise: NoiseInfo::default(),
        likelihood: Likelihood::Gaussian,
    }
}

/// What a comparison reads: the test and training predictions, the final objectives and
/// the divergence flags.
fn outputs(o: &TrainOutput) -> (&[f32], &[f32], &[f64], &[bool]) {
    (&o.test_out, &o.train_pred, &o.final_objective, &o.diverged)
}

/// Three tasks of distinct inputs and repetitions (one of two repetitions), fresh and
/// warm-started (one task starting afresh among warm ones), full-batch and shuffled
/// mini-batches (the gather of each replica's own rows), on the host loops and the tensor
/// program: the joint job's outputs and weights are each task's own, to the bit.
#[test]
fn tasks_trained_as_one_job_are_each_tasks_own_training() {
    let all = [data(1, &[0]), data(2, &[1, 2]), data(3, &[5])];
    let tasks: Vec<Task<'_>> = all.iter().map(task).collect();
    let s = shape();
    for batching in [Batching::Full, Batching::Shuffled { size: 8 }] {
        let settings = TrainSettings {
            batching: batching.clone(),
            ..TrainSettings::paper(15, 30)
        };
        for host_loops in [true, false] {
            let mut res = Resources::new(
                BackendKind::Flex,
                open_device(BackendKind::Flex, true).unwrap(),
            );
            res.host_loops = host_loops;
            let at = format!("{batching:?}, host loops {host_loops}");
            let joint =
                trainer::train_tasks(&tasks, None, "M", 2, &s, true, &settings, &res).unwrap();
            assert_eq!(joint.len(), 3);
            for (t, (out, weights)) in tasks.iter().zip(&joint) {
                let alone =
                    trainer::train_task(t, "M", 2, &s, true, &settings, &res, &|_| {}).unwrap();
                assert_eq!(outputs(out), outputs(&alone), "{at}");
                assert!(weights.is_none());
            }
            // Warm: tasks 0 and 2 from weights of their own (another seed's Xavier weights
            // and a shifted standardisation), task 1 afresh.
            let starts: Vec<WarmWeights> = [0usize, 2]
                .iter()
                .map(|&k| WarmWeights {
                    weights: xavier_init(&s, &tasks[k].replicas("Other", 2).init),
                    moments: Some(vec![(0.5, 1.5 + k as f64)]),
                })
                .collect();
            let from = [Some(&starts[0]), None, Some(&starts[1])];
            let joint =
                trainer::train_tasks(&tasks, Some(&from), "M", 2, &s, true, &settings, &res)
                    .unwrap();
            for ((t, (out, weights)), start) in tasks.iter().zip(&joint).zip(from) {
                let (alone, after) =
                    trainer::train_task_from(t, "M", 2, &s, true, &settings, &res, start).unwrap();
                assert_eq!(outputs(out), outputs(&alone), "{at}");
                assert_eq!(weights.as_ref(), Some(&after), "{at}");
            }
        }
    }
}

/// Tasks a joint job cannot hold are refused with the reason: other numbers of points, and
/// the same repetition twice (its replicas' identifiers, which key their streams, would
/// repeat).
#[test]
fn tasks_that_cannot_share_a_job_are_refused() {
    let res = Resources::new(
        BackendKind::Flex,
        open_device(BackendKind::Flex, true).unwrap(),
    );
    let s = shape();
    let settings = TrainSettings::paper(2, 30);
    let (a, b) = (data(1, &[0]), data(2, &[0]));
    let mut short = data(3, &[1]);
    short.x.truncate(20);
    short.y[0].truncate(20);
    let run = |ds: [&Data; 2]| {
        let tasks: Vec<Task<'_>> = ds.iter().map(|d| task(d)).collect();
        trainer::train_tasks(&tasks, None, "M", 2, &s, true, &settings, &res)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = run([&a, &short]);
    assert!(e.contains("task 1") && e.contains("N = 20"), "{e}");
    let e = run([&a, &b]);
    assert!(
        e.contains("replica identifier") && e.contains("distinct"),
        "{e}"
    );
}
