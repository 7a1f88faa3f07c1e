//! Several tasks trained as one job (`trainer::train_tasks`, the decision track's
//! repetitions at one step): every task's replicas compute in the joint job what they compute
//! in their task's own.

use uqbench_anchor::Rng;
use uqbench_core::{Likelihood, NoiseInfo, SeedBase, Task};
use uqbench_engine::trainer::{
    self, collect, Batching, Job, Resources, TrainOutput, TrainSettings, WarmWeights,
};
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
            let joint = trainer::train_tasks(&tasks, None, None, "M", 2, &s, true, &settings, &res)
                .unwrap();
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
                trainer::train_tasks(&tasks, Some(&from), None, "M", 2, &s, true, &settings, &res)
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

/// Targets of the caller's own per replica (ensemble+'s shifted targets): each task's
/// replicas in the joint job train as a job of that task alone with those targets (each
/// replica its own), to the bit, fresh and warm, on the host loops and the tensor program;
/// a wrong count of targets is refused.
#[test]
fn tasks_with_targets_of_their_own_train_as_each_tasks_own_job() {
    let all = [data(1, &[0]), data(2, &[1, 2])];
    let tasks: Vec<Task<'_>> = all.iter().map(task).collect();
    let s = shape();
    let settings = TrainSettings::paper(15, 30);
    // Replica r of a task: its repetition's targets shifted by 0.3·sin(r + x).
    let own: Vec<Vec<Vec<f32>>> = (tasks.iter())
        .map(|t| {
            let reps = t.replicas("M", 2).targets;
            (reps.iter().enumerate())
                .map(|(r, &k)| {
                    (t.y_train[k].iter().zip(t.x_train))
                        .map(|(y, x)| (y + 0.3 * (r as f64 + x).sin()) as f32)
                        .collect()
                })
                .collect()
        })
        .collect();
    for host_loops in [true, false] {
        let mut res = Resources::new(
            BackendKind::Flex,
            open_device(BackendKind::Flex, true).unwrap(),
        );
        res.host_loops = host_loops;
        let start = WarmWeights {
            weights: xavier_init(&s, &tasks[1].replicas("Other", 2).init),
            moments: Some(vec![(0.5, 2.0)]),
        };
        let from = [None, Some(&start)];
        let fresh =
            trainer::train_tasks(&tasks, None, Some(&own), "M", 2, &s, true, &settings, &res)
                .unwrap();
        let warm = (trainer::train_tasks(
            &tasks,
            Some(&from),
            Some(&own),
            "M",
            2,
            &s,
            true,
            &settings,
            &res,
        ))
        .unwrap();
        for (k, t) in tasks.iter().enumerate() {
            let alone = |warm: Option<&WarmWeights>| {
                let moments = WarmWeights::moments_for(warm, true, t);
                let (x_train, x_test) = t.inputs_f32_by(moments.as_deref());
                let replicas = t.replicas("M", 2);
                let identity: Vec<usize> = (0..own[k].len()).collect();
                let job = Job {
                    shape: &s,
                    x_train: &x_train,
                    targets: &own[k],
                    replica_targets: &identity,
                    init_seeds: &replicas.init,
                    stream_seeds: &replicas.stream,
                    replica_ids: &replicas.ids,
                    x_test: &x_test,
                    init: None,
                    inputs: None,
                };
                trainer::train_from(&job, &settings, &res, warm.map(|w| &w.weights)).unwrap()
            };
            let at = format!("task {k}, host loops {host_loops}");
            let (out, _) = alone(None);
            assert_eq!(outputs(&fresh[k].0), outputs(&out), "{at}");
            let (out, weights) = alone(from[k]);
            assert_eq!(outputs(&warm[k].0), outputs(&out), "{at}");
            assert_eq!(
                warm[k].1.as_ref().map(|w| &w.weights),
                Some(&weights),
                "{at}"
            );
        }
    }
    let short = [own[0].clone(), own[1][..1].to_vec()];
    let e = trainer::train_tasks(&tasks, None, Some(&short), "M", 2, &s, true, &settings, &{
        Resources::new(
            BackendKind::Flex,
            open_device(BackendKind::Flex, true).unwrap(),
        )
    })
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("targets per replica") && e.contains("(4)"),
        "{e}"
    );
}

/// A collector that records which replica of the job each state is and the epochs it saw.
#[derive(Debug)]
struct Which;

#[derive(Debug)]
struct Seen {
    replica: usize,
    epochs: Vec<usize>,
}

impl collect::Collector for Which {
    fn wants(&self, event: collect::Want) -> bool {
        matches!(event, collect::Want::Epoch(e) if e % 5 == 4)
    }

    fn start(&self, replica: usize) -> Box<dyn collect::Collected> {
        Box::new(Seen {
            replica,
            epochs: Vec::new(),
        })
    }
}

impl collect::Collected for Seen {
    fn observe(&mut self, event: &collect::Event<'_>) {
        if let collect::Event::Epoch { epoch, .. } = event {
            self.epochs.push(*epoch);
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A collector's states in a joint job (SG-MCMC's draws, each task's at its own test
/// inputs): each starts with its replica's index in the job, so that task k's states, split
/// back, are replicas of its span, in order, with every wanted epoch; in chunks of 3
/// replicas (the tasks have 2, 4 and 2: chunks start inside a task), on the host loops and
/// the tensor program.
#[test]
fn a_collector_s_states_know_their_replica_in_a_joint_job() {
    let all = [data(1, &[0]), data(2, &[1, 2]), data(3, &[5])];
    let tasks: Vec<Task<'_>> = all.iter().map(task).collect();
    let s = shape();
    let settings = TrainSettings {
        collectors: vec![std::sync::Arc::new(Which)],
        ..TrainSettings::paper(15, 30)
    };
    for host_loops in [true, false] {
        let mut res = Resources::new(
            BackendKind::Flex,
            open_device(BackendKind::Flex, true).unwrap(),
        );
        res.host_loops = host_loops;
        res.chunk = Some(3);
        let joint =
            (trainer::train_tasks(&tasks, None, None, "M", 2, &s, true, &settings, &res)).unwrap();
        let mut first = 0;
        for (k, (out, _)) in joint.iter().enumerate() {
            let seen: Vec<&Seen> = out.collected(0);
            let replicas: Vec<usize> = seen.iter().map(|s| s.replica).collect();
            let span: Vec<usize> = (first..first + 2 * tasks[k].repetitions.len()).collect();
            assert_eq!(replicas, span, "task {k}, host loops {host_loops}");
            assert!(seen.iter().all(|s| s.epochs == [4, 9, 14]), "{seen:?}");
            first += span.len();
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
        trainer::train_tasks(&tasks, None, None, "M", 2, &s, true, &settings, &res)
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
