//! The batched training core: exactness of batching and chunking, agreement across
//! backends, divergence reporting, and that training learns.

use std::sync::Arc;

use uqbench_anchor::Rng;
use uqbench_engine::trainer::{self, Batching, Job, Resources, TrainOutput, TrainSettings};
use uqbench_engine::{
    open_device, xavier_init, BackendKind, Bernoulli, Concrete, HostWeights, MlpShape,
    StochasticLayer, Variational,
};

use crate::util::skip_wgpu;

struct Data {
    x: Vec<f32>,
    targets: Vec<Vec<f32>>,
    x_test: Vec<f32>,
}

/// Two repetitions of y = sin(x) + noise on 40 points of [−4, 4].
fn data() -> Data {
    let mut rng = Rng::new(5);
    let x: Vec<f32> = (0..40).map(|_| rng.uniform_in(-4.0, 4.0) as f32).collect();
    let targets = (0..2)
        .map(|_| {
            x.iter()
                .map(|&v| (f64::from(v).sin() + 0.2 * rng.normal()) as f32)
                .collect()
        })
        .collect();
    let x_test = (0..25).map(|i| -5.0 + 10.0 * i as f32 / 24.0).collect();
    Data { x, targets, x_test }
}

/// The 1-16-8-1 network of this binary's tests.
pub fn shape() -> MlpShape {
    MlpShape {
        d_in: 1,
        hidden: vec![16, 8],
        d_out: 1,
        negative_slope: 0.01,
    }
}

/// Trains `replicas` (indices into the 6 replicas: 2 repetitions × 3 members).
fn run(
    backend: BackendKind,
    replicas: &[usize],
    settings: &TrainSettings,
    chunk: Option<usize>,
    threads: usize,
) -> TrainOutput {
    run_on(trainer::train, backend, replicas, settings, chunk, threads)
}

type Route = fn(
    &Job<'_>,
    &TrainSettings,
    &Resources,
    &(dyn Fn(usize) + Sync),
) -> Result<TrainOutput, uqbench_core::MethodError>;

/// [`run`] on a given training route.
fn run_on(
    route: Route,
    backend: BackendKind,
    replicas: &[usize],
    settings: &TrainSettings,
    chunk: Option<usize>,
    threads: usize,
) -> TrainOutput {
    let d = data();
    let s = shape();
    let replica_targets: Vec<usize> = replicas.iter().map(|r| r / 3).collect();
    let init: Vec<u64> = replicas.iter().map(|&r| 1000 + r as u64).collect();
    let batch: Vec<u64> = replicas.iter().map(|&r| 2000 + r as u64).collect();
    let ids: Vec<u64> = replicas.iter().map(|&r| r as u64).collect();
    let job = Job {
        shape: &s,
        x_train: &d.x,
        targets: &d.targets,
        replica_targets: &replica_targets,
        init_seeds: &init,
        stream_seeds: &batch,
        replica_ids: &ids,
        x_test: &d.x_test,
        init: None,
        inputs: None,
    };
    // CI's wgpu adapter is lavapipe, a software rasterizer: allowed here on purpose.
    let mut res = Resources::new(backend, open_device(backend, true).unwrap());
    res.chunk = chunk;
    res.threads = threads;
    route(&job, settings, &res, &|_| {}).unwrap()
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / (1.0 + x.abs()))
        .fold(0.0, f32::max)
}

const ALL: [usize; 6] = [0, 1, 2, 3, 4, 5];

fn variants() -> Vec<TrainSettings> {
    let base = TrainSettings::paper(60, 40);
    vec![
        base.clone(),
        TrainSettings {
            batching: Batching::WithReplacement {
                size: 20,
                per_epoch: 2,
            },
            ..base.clone()
        },
        TrainSettings {
            batching: Batching::Shuffled { size: 16 },
            ..base.clone()
        },
        TrainSettings {
            batching: Batching::Resample { size: None },
            ..base.clone()
        },
        TrainSettings {
            batching: Batching::Resample { size: Some(16) },
            ..base.clone()
        },
        TrainSettings {
            adversarial: Some(vec![0.08]),
            ..base
        },
    ]
}

#[test]
fn a_replica_trained_alone_equals_the_same_replica_in_a_batch() {
    // CPU backends compute every replica with the same per-replica operations whatever the
    // batch, so the results agree to the last bit; the assertion allows f32 rounding (1e-6).
    for backend in [BackendKind::Flex, BackendKind::Ndarray] {
        for settings in variants() {
            let batch = run(backend, &ALL, &settings, Some(6), 1);
            let m = 25;
            for r in [0usize, 4] {
                let alone = run(backend, &[r], &settings, Some(1), 1);
                let d = max_rel_diff(&alone.test_out, &batch.test_out[r * m..(r + 1) * m]);
                assert!(
                    d <= 1e-6,
                    "{backend} {:?}: replica {r} differs by {d}",
                    settings.batching
                );
                assert!(
                    (alone.final_objective[0] - batch.final_objective[r]).abs()
                        <= 1e-6 * batch.final_objective[r]
                );
            }
        }
    }
}

#[test]
fn chunking_and_threads_do_not_change_results() {
    for settings in variants() {
        let one = run(BackendKind::Flex, &ALL, &settings, Some(6), 1);
        for (chunk, threads) in [(1, 2), (4, 2), (2, 1)] {
            let other = run(BackendKind::Flex, &ALL, &settings, Some(chunk), threads);
            assert_eq!(
                one.test_out, other.test_out,
                "chunk {chunk}, threads {threads}, {:?}",
                settings.batching
            );
            assert_eq!(one.final_objective, other.final_objective);
        }
    }
}

#[test]
fn backends_agree_over_short_runs() {
    // f32 training is chaotic over long runs (burn-notes: backends drift apart after about 50
    // epochs at lr 1e-2), so compare 20 epochs, to 1e-4 relative as the benchmark promises.
    let settings = TrainSettings::paper(20, 40);
    let flex = run(BackendKind::Flex, &ALL, &settings, None, 1);
    let mut others = vec![BackendKind::Ndarray];
    if !skip_wgpu() {
        others.push(BackendKind::Wgpu);
    }
    for backend in others {
        let o = run(backend, &ALL, &settings, None, 1);
        for (a, b) in flex.final_objective.iter().zip(&o.final_objective) {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs(),
                "{backend}: final loss {b} vs flex {a}"
            );
        }
        let d = max_rel_diff(&flex.test_out, &o.test_out);
        assert!(d < 1e-3, "{backend}: predictions differ by {d}");
    }
}

#[test]
fn training_learns_the_function() {
    // 400 epochs on y = sin(x) + N(0, 0.2²), 40 points: a constant fit leaves
    // ½·(Var sin + 0.04) ≈ 0.27 of objective; training must at least halve that, and the
    // predictions inside the training range must follow sin(x) (RMSE below 0.25, where a
    // constant would give 0.7).
    let out = run(
        BackendKind::Flex,
        &ALL,
        &TrainSettings::paper(400, 40),
        None,
        2,
    );
    let x_test = data().x_test;
    for (r, l) in out.final_objective.iter().enumerate() {
        assert!(*l < 0.135, "replica {r}: final loss {l}");
        let inside: Vec<(f32, f32)> = x_test
            .iter()
            .zip(&out.test_out[r * 25..(r + 1) * 25])
            .filter(|(x, _)| x.abs() <= 3.5)
            .map(|(x, p)| (*x, *p))
            .collect();
        let k = inside.len() as f32;
        let rmse = (inside
            .iter()
            .map(|(x, p)| (p - x.sin()).powi(2))
            .sum::<f32>()
            / k)
            .sqrt();
        let constant = (inside.iter().map(|(x, _)| x.sin().powi(2)).sum::<f32>() / k).sqrt();
        assert!(
            rmse < 0.5 * constant,
            "replica {r}: RMSE {rmse} against sin, constant fit {constant}"
        );
    }
    assert!(out.diverged.iter().all(|d| !d));
}

#[test]
fn divergence_is_reported_per_replica_and_does_not_leak() {
    let d = data();
    let s = shape();
    // Repetition 1's targets overflow f32 in the loss: its replicas diverge.
    let targets = vec![d.targets[0].clone(), vec![3e38f32; 40]];
    let replica_targets = [0usize, 0, 1, 1];
    let seeds = [1u64, 2, 3, 4];
    let ids = [0u64, 1, 2, 3];
    let job = Job {
        shape: &s,
        x_train: &d.x,
        targets: &targets,
        replica_targets: &replica_targets,
        init_seeds: &seeds,
        stream_seeds: &seeds,
        replica_ids: &ids,
        x_test: &d.x_test,
        init: None,
        inputs: None,
    };
    let res = Resources::new(
        BackendKind::Flex,
        open_device(BackendKind::Flex, true).unwrap(),
    );
    let settings = TrainSettings::paper(30, 40);
    let out = trainer::train(&job, &settings, &res, &|_| {}).unwrap();
    assert_eq!(out.diverged, vec![false, false, true, true]);
    // The healthy replicas equal a run without the diverging ones.
    let healthy = Job {
        targets: &targets[..1],
        replica_targets: &replica_targets[..2],
        init_seeds: &seeds[..2],
        stream_seeds: &seeds[..2],
        replica_ids: &ids[..2],
        ..job.clone()
    };
    let alone = trainer::train(&healthy, &settings, &res, &|_| {}).unwrap();
    assert_eq!(&out.test_out[..50], &alone.test_out[..]);
}

#[test]
fn bad_settings_are_clear_errors() {
    let d = data();
    let s = shape();
    let rt = [0usize];
    let seeds = [1u64];
    let job = Job {
        shape: &s,
        x_train: &d.x,
        targets: &d.targets,
        replica_targets: &rt,
        init_seeds: &seeds,
        stream_seeds: &seeds,
        replica_ids: &[0],
        x_test: &d.x_test,
        init: None,
        inputs: None,
    };
    let mut res = Resources::new(
        BackendKind::Flex,
        open_device(BackendKind::Flex, true).unwrap(),
    );
    let err = |settings: &TrainSettings, res: &Resources| {
        trainer::train(&job, settings, res, &|_| {})
            .unwrap_err()
            .to_string()
    };
    let e = err(&TrainSettings::paper(0, 40), &res);
    assert!(e.contains("epochs = 0"), "{e}");
    let e = err(
        &TrainSettings {
            batching: Batching::Shuffled { size: 41 },
            ..TrainSettings::paper(5, 40)
        },
        &res,
    );
    assert!(e.contains("batch size = 41") && e.contains("40"), "{e}");
    let e = err(
        &TrainSettings {
            lr: -1.0,
            ..TrainSettings::paper(5, 40)
        },
        &res,
    );
    assert!(e.contains("lr = -1"), "{e}");
    res.memory_budget = 1000;
    let e = err(&TrainSettings::paper(5, 40), &res);
    assert!(e.contains("memory budget"), "{e}");
    let bad_targets = vec![vec![0.0f32; 39]];
    let job2 = Job {
        targets: &bad_targets,
        ..job.clone()
    };
    let res = Resources::new(
        BackendKind::Flex,
        open_device(BackendKind::Flex, true).unwrap(),
    );
    let e = trainer::train(&job2, &TrainSettings::paper(5, 40), &res, &|_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("targets[0]") && e.contains("N = 40"), "{e}");
}

#[test]
fn no_host_transfers_grow_with_the_epochs() {
    // Every batching scheme, the adversarial pass and each dropout layer: noise and batches
    // come from the device's counter-based streams, so the uploads and reads of a job are the
    // same for 3 and for 12 epochs (and the steps are 4× as many).
    let mut all = variants();
    for dropout in layers() {
        all.push(TrainSettings {
            dropout: Some(dropout),
            mc_passes: 4,
            batching: Batching::Shuffled { size: 16 },
            ..TrainSettings::paper(60, 40)
        });
    }
    for settings in all {
        let at = |epochs: usize| {
            let s = TrainSettings {
                epochs,
                ..settings.clone()
            };
            run(BackendKind::Flex, &ALL, &s, Some(3), 1).transfers
        };
        let (short, long) = (at(3), at(12));
        assert_eq!(long.steps, 4 * short.steps, "{settings:?}");
        assert_eq!(
            (short.uploads, short.reads),
            (long.uploads, long.reads),
            "{settings:?}"
        );
    }
}

/// The built-in stochastic layers, with settings that move their rates.
fn layers() -> [Arc<dyn StochasticLayer>; 3] {
    [
        Arc::new(Bernoulli { p: 0.2 }),
        Arc::new(Concrete {
            init_p: 0.1,
            temperature: 0.1,
            weight_reg: 1e-6,
            dropout_reg: 0.05,
        }),
        Arc::new(Variational {
            init_alpha: 0.1,
            kl_weight: 0.02,
        }),
    ]
}

#[test]
fn the_autodiff_route_computes_what_the_engine_computes() {
    // The same job, seeds and device noise streams through the hand-written engine and
    // through burn autodiff on `McdNet`, for every built-in stochastic layer: the routes
    // differ only in the order of floating-point sums in the gradients (f32, relative
    // rounding about 1e-7 per step), which 15 Adam steps at lr 1e-2 do not amplify beyond
    // 1e-3 of the outputs' scale. A wrong gradient, a wrong noise draw or a missing
    // regulariser term moves them by far more (a step moves a weight by about lr = 1e-2).
    for layer in layers() {
        let settings = TrainSettings {
            dropout: Some(layer.clone()),
            mc_passes: 3,
            ..TrainSettings::paper(15, 40)
        };
        let engine = run(BackendKind::Flex, &ALL, &settings, None, 1);
        let auto = run_on(
            uqbench_engine::autodiff::train,
            BackendKind::Flex,
            &ALL,
            &settings,
            None,
            1,
        );
        let close = |what: &str, a: &[f32], b: &[f32], tol: f32| {
            assert_eq!(a.len(), b.len(), "{layer:?} {what}");
            let scale = b.iter().map(|v| v.abs()).fold(0.0f32, f32::max).max(1.0);
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= tol * scale, "{layer:?} {what}: {x} vs {y}");
            }
        };
        close("test passes", &engine.test_out, &auto.test_out, 1e-3);
        close("training fit", &engine.train_pred, &auto.train_pred, 1e-3);
        let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        close(
            "final objective",
            &f(&engine.final_objective),
            &f(&auto.final_objective),
            1e-3,
        );
        assert_eq!(engine.rates.is_some(), auto.rates.is_some(), "{layer:?}");
        // The autodiff route on the trainer: chunks of one replica on two threads are one
        // chunk, bit for bit.
        let chunked = run_on(
            uqbench_engine::autodiff::train,
            BackendKind::Flex,
            &ALL,
            &settings,
            Some(1),
            2,
        );
        assert_eq!(chunked.test_out, auto.test_out, "{layer:?}: chunks");
        if let (Some(a), Some(b)) = (&engine.rates, &auto.rates) {
            close("rates", &f(a), &f(b), 1e-3);
        }
    }
}

/// A warm start (`Job::init`, `trainer::train_task_from`): given initial weights replace the
/// seeds' on both executions, bit for bit, and a replica whose given weights are not finite
/// starts from its own seed's.
#[test]
fn given_initial_weights_replace_the_seeds_on_both_executions() {
    let d = data();
    let s = shape();
    let rt = [0usize, 1];
    let (stream, ids) = ([2000u64, 2001], [0u64, 1]);
    let settings = TrainSettings::paper(30, 40);
    for host_loops in [true, false] {
        let mut res = Resources::new(
            BackendKind::Flex,
            open_device(BackendKind::Flex, true).unwrap(),
        );
        res.host_loops = host_loops;
        let train = |init_seeds: &[u64], init: Option<&HostWeights>| {
            let job = Job {
                shape: &s,
                x_train: &d.x,
                targets: &d.targets,
                replica_targets: &rt,
                init_seeds,
                stream_seeds: &stream,
                replica_ids: &ids,
                x_test: &d.x_test,
                init,
                inputs: None,
            };
            trainer::train(&job, &settings, &res, &|_| {})
        };
        let from_seeds = train(&[7, 8], None).unwrap();
        let given = xavier_init(&s, &[7, 8]);
        let from_given = train(&[1, 2], Some(&given)).unwrap();
        assert_eq!(
            from_seeds.test_out, from_given.test_out,
            "host loops {host_loops}"
        );
        assert_ne!(train(&[1, 2], None).unwrap().test_out, from_seeds.test_out);
        // Non-finite weights are refused by the job; repaired, replica 1 (NaN) starts from its
        // seed (8) and replica 0 from the given weights.
        let mut broken = xavier_init(&s, &[7, 99]);
        broken.layers[1].0[s.hidden[0] * s.hidden[1] + 3] = f32::NAN;
        let e = train(&[1, 2], Some(&broken)).unwrap_err().to_string();
        assert!(
            e.contains("initial weights") && e.contains("non-finite"),
            "{e}"
        );
        let e = train(&[1, 2], Some(&xavier_init(&s, &[7])))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("initial weights") && e.contains("2 replicas"),
            "{e}"
        );
        let repaired = broken.finite_or_fresh(&s, &[1, 8]);
        assert_eq!(repaired, xavier_init(&s, &[7, 8]));
    }
}

/// The weights `train_task_from` returns are the trained networks' (read back through the
/// collectors' layout and rebuilt), and a start from the seeds' own weights and the task's
/// own standardisation is the fresh start.
#[test]
fn a_warm_start_from_the_fresh_weights_is_the_fresh_start() {
    use uqbench_core::{Likelihood, NoiseInfo, SeedBase, Task};
    let d = data();
    let x: Vec<f64> = d.x.iter().map(|&v| f64::from(v)).collect();
    let x_test: Vec<f64> = d.x_test.iter().map(|&v| f64::from(v)).collect();
    let y: Vec<Vec<f64>> = (d.targets.iter())
        .map(|t| t.iter().map(|&v| f64::from(v)).collect())
        .collect();
    let task = Task {
        d: 1,
        x_train: &x,
        y_train: &y,
        repetitions: &[3, 4],
        x_test: &x_test,
        epochs: 20,
        known_sigma: None,
        seeds: SeedBase {
            base: 1,
            experiment: "warm".into(),
            setting: "s".into(),
        },
        features: None,
        noise: NoiseInfo::default(),
        likelihood: Likelihood::Gaussian,
    };
    let s = shape();
    let settings = TrainSettings::paper(20, 40);
    let res = Resources::new(
        BackendKind::Flex,
        open_device(BackendKind::Flex, true).unwrap(),
    );
    let (fresh, after) =
        trainer::train_task_from(&task, "M", 2, &s, true, &settings, &res, None).unwrap();
    assert_eq!(after.moments, Some(task.input_moments()));
    assert_eq!(after.weights.replicas, 4);
    let alone = trainer::train_task(&task, "M", 2, &s, true, &settings, &res, &|_| {}).unwrap();
    assert_eq!(fresh.test_out, alone.test_out);
    // The returned weights are the trained ones: the network they make, evaluated here on
    // the standardised test inputs, predicts what the training predicted (f32 rounding of a
    // different summation order: 1e-4 relative).
    let (_, xt) = task.inputs_f32(true);
    let layers = s.layers();
    for r in 0..4 {
        let w = after.weights.select(r..r + 1);
        for (i, &x0) in xt.iter().enumerate() {
            let mut h = vec![x0];
            for (l, &(fan_in, fan_out)) in layers.iter().enumerate() {
                let (wl, bl) = &w.layers[l];
                h = (0..fan_out)
                    .map(|o| {
                        let z =
                            bl[o] + (0..fan_in).map(|k| h[k] * wl[k * fan_out + o]).sum::<f32>();
                        if l + 1 < layers.len() && z < 0.0 {
                            0.01 * z
                        } else {
                            z
                        }
                    })
                    .collect();
            }
            let got = fresh.test_out[r * xt.len() + i];
            assert!(
                (h[0] - got).abs() <= 1e-4 * (1.0 + got.abs()),
                "{r} {i}: {} {got}",
                h[0]
            );
        }
    }
    let seeds = task.replicas("M", 2).init;
    let start = trainer::WarmWeights {
        weights: xavier_init(&s, &seeds),
        moments: Some(task.input_moments()),
    };
    let (warm, _) =
        trainer::train_task_from(&task, "M", 2, &s, true, &settings, &res, Some(&start)).unwrap();
    assert_eq!(warm.test_out, fresh.test_out);
    // The warm start's standardisation, not the task's, scales the inputs.
    let shifted = trainer::WarmWeights {
        moments: Some(vec![(1.0, 2.0)]),
        ..start
    };
    let (other, kept) =
        trainer::train_task_from(&task, "M", 2, &s, true, &settings, &res, Some(&shifted)).unwrap();
    assert_ne!(other.test_out, fresh.test_out);
    assert_eq!(kept.moments, Some(vec![(1.0, 2.0)]));
}
