//! The dropout methods: stochastic prediction, learned rates, out-of-distribution
//! uncertainty, exactness of batching, the heteroscedastic head and bad settings.

use uqbench_anchor::{Problem, ProblemSpec, Region, Setting};
use uqbench_core::{Likelihood, Method, Prediction, SeedBase, Task};
use uqbench_engine::trainer::Resources;
use uqbench_engine::{open_device, BackendKind};
use uqbench_models::{DropoutConfig, DropoutKind, DropoutMethod, DropoutSettings};

fn problem(file: &str, setting: &[(&str, f64)]) -> Problem {
    let text = std::fs::read_to_string(format!(
        "{}/../../experiments/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let spec: ProblemSpec = table["problem"].clone().try_into().unwrap();
    let setting = Setting {
        values: setting.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    };
    Problem::resolve(file, 7, &spec, &setting).unwrap()
}

fn run(
    p: &Problem,
    kind: DropoutKind,
    config: DropoutConfig,
    reps: &[u64],
    samples: bool,
) -> Vec<Prediction> {
    let y: Vec<Vec<f64>> = reps.iter().map(|&r| p.draw(r).train_y).collect();
    let task = Task {
        d: p.d(),
        x_train: p.train.inputs.as_slice(),
        y_train: &y,
        repetitions: reps,
        x_test: p.test.inputs.as_slice(),
        epochs: 300,
        known_sigma: None,
        seeds: SeedBase {
            base: 7,
            experiment: p.name.clone(),
            setting: p.setting.label(),
        },
        features: None,
        noise: Default::default(),
        likelihood: Likelihood::Gaussian,
    };
    let method = DropoutMethod::new("D", kind, config).unwrap();
    let res = Resources::new(
        BackendKind::Flex,
        open_device(BackendKind::Flex, true).unwrap(),
    );
    method.run(&task, &res.compute(), samples, &|_| {}).unwrap()
}

fn quick() -> DropoutConfig {
    DropoutConfig {
        own: DropoutSettings {
            passes: 50,
            ..DropoutSettings::default()
        },
        ..DropoutConfig::default()
    }
}

fn mean_over(o: &[f64], p: &Problem, region: Region) -> f64 {
    let idx: Vec<usize> = (0..o.len())
        .filter(|&i| p.test.region[i] == region)
        .collect();
    idx.iter().map(|&i| o[i]).sum::<f64>() / idx.len() as f64
}

#[test]
fn masks_are_redrawn_on_every_prediction_pass() {
    let p = problem("e1.toml", &[("f_main", 1.0)]);
    for kind in [
        DropoutKind::Bernoulli,
        DropoutKind::Concrete,
        DropoutKind::Variational,
    ] {
        let out = run(&p, kind, quick(), &[0], true);
        let s = out[0].samples.as_ref().unwrap();
        assert_eq!(s.len(), 50);
        // Consecutive passes differ at (nearly) every test input; identical passes would mean
        // the noise was drawn once (or not at all).
        for pass in 1..s.len() {
            let same = s[pass]
                .iter()
                .zip(&s[pass - 1])
                .filter(|(a, b)| a == b)
                .count();
            assert!(
                same < s[pass].len() / 10,
                "{kind:?}: passes {} and {pass} agree at {same} inputs",
                pass - 1
            );
        }
        assert!(out[0].std.iter().all(|v| *v > 0.0), "{kind:?}");
    }
}

#[test]
fn learned_rates_move_and_stay_in_range() {
    // E1's data are noisy (σ equal to the signal's scale), where the regularisers pull the
    // rates away from their initial values.
    let p = problem("e1.toml", &[("f_main", 1.0)]);
    let cd = run(&p, DropoutKind::Concrete, quick(), &[0, 1], false);
    for o in &cd {
        let rate = o.scalars["learned_p"];
        assert!(rate > 0.0 && rate < 1.0, "p = {rate}");
        assert!(
            (rate - 0.1).abs() > 0.01,
            "p = {rate} did not move from 0.1"
        );
    }
    let vd = run(&p, DropoutKind::Variational, quick(), &[0, 1], false);
    for o in &vd {
        let alpha = o.scalars["learned_alpha"];
        assert!(alpha.is_finite() && alpha > 0.0, "α = {alpha}");
        assert!(
            (alpha / (1.0 / 9.0)).ln().abs() > 0.1,
            "α = {alpha} did not move from 1/9"
        );
    }
    // BD reports no learned rate.
    let bd = run(&p, DropoutKind::Bernoulli, quick(), &[0], false);
    assert!(!bd[0].scalars.contains_key("learned_p"));
}

#[test]
fn uncertainty_grows_away_from_the_training_data_on_e1() {
    let p = problem("e1.toml", &[("f_main", 1.0)]);
    for kind in [
        DropoutKind::Bernoulli,
        DropoutKind::Concrete,
        DropoutKind::Variational,
    ] {
        let o = &run(&p, kind, quick(), &[0], false)[0];
        let (inside, outside) = (
            mean_over(&o.std, &p, Region::In),
            mean_over(&o.std, &p, Region::Out),
        );
        assert!(
            outside > inside,
            "{kind:?}: std out {outside} vs in {inside}"
        );
    }
}

#[test]
fn a_repetition_alone_equals_the_same_repetition_in_a_batch() {
    let p = problem("e1.toml", &[("f_main", 2.0)]);
    for kind in [
        DropoutKind::Bernoulli,
        DropoutKind::Concrete,
        DropoutKind::Variational,
    ] {
        let batch = run(
            &p,
            kind,
            {
                let mut c: DropoutConfig = quick();
                c.passes = 10;
                c
            },
            &[0, 1, 2],
            true,
        );
        let alone = run(
            &p,
            kind,
            {
                let mut c: DropoutConfig = quick();
                c.passes = 10;
                c
            },
            &[1],
            true,
        );
        let (a, b) = (
            alone[0].samples.as_ref().unwrap(),
            batch[1].samples.as_ref().unwrap(),
        );
        for (ra, rb) in a.iter().zip(b) {
            for (x, y) in ra.iter().zip(rb) {
                assert!(
                    (x - y).abs() <= 1e-6 * (1.0 + x.abs()),
                    "{kind:?}: {x} vs {y}"
                );
            }
        }
        assert_eq!(alone[0].scalars, batch[1].scalars);
    }
}

#[test]
fn heteroscedastic_head_estimates_the_noise() {
    // cubic_hetero: σ(x) = 0.1 + x² on x ∈ [−0.5, 0.5], so σ ≈ 0.1 near 0 and ≈ 0.3 at the
    // ends; the estimated noise sd must follow (ends above the centre by a clear margin).
    let p = problem("cubic_hetero.toml", &[]);
    let cfg = {
        let mut c: DropoutConfig = quick();
        c.heteroscedastic = true;
        c
    };
    let o = &run(&p, DropoutKind::Concrete, cfg, &[0], false)[0];
    let noise = o
        .noise_std
        .as_ref()
        .expect("a heteroscedastic head reports the noise sd");
    let x: Vec<f64> = p.test.inputs.rows().map(|r| r[0]).collect();
    let avg = |f: &dyn Fn(f64) -> bool| {
        let idx: Vec<usize> = (0..x.len()).filter(|&i| f(x[i])).collect();
        idx.iter().map(|&i| noise[i]).sum::<f64>() / idx.len() as f64
    };
    let (centre, ends) = (avg(&|v| v.abs() < 0.1), avg(&|v| v.abs() > 0.4));
    assert!(
        ends > 1.5 * centre,
        "noise sd at the ends {ends}, at the centre {centre}"
    );
    assert!(
        centre > 0.05 && centre < 0.2,
        "noise sd at the centre {centre}, true ≈ 0.10"
    );
}

#[test]
fn bad_settings_are_clear_errors() {
    for (kind, cfg, needle) in [
        (
            DropoutKind::Bernoulli,
            {
                let mut c: DropoutConfig = quick();
                c.p = 0.0;
                c
            },
            "dropout p = 0",
        ),
        (
            DropoutKind::Bernoulli,
            {
                let mut c: DropoutConfig = quick();
                c.p = 1.5;
                c
            },
            "dropout p = 1.5",
        ),
        (
            DropoutKind::Bernoulli,
            {
                let mut c: DropoutConfig = quick();
                c.passes = 0;
                c
            },
            "BD.passes = 0",
        ),
        (
            DropoutKind::Concrete,
            {
                let mut c: DropoutConfig = quick();
                c.init_p = 1.0;
                c
            },
            "concrete init_p = 1",
        ),
        (
            DropoutKind::Variational,
            {
                let mut c: DropoutConfig = quick();
                c.init_alpha = -1.0;
                c
            },
            "init_alpha = -1",
        ),
    ] {
        let e = DropoutMethod::new("BD", kind, cfg).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }
    let err = toml::from_str::<DropoutConfig>("passes = 10\nrate = 0.2")
        .unwrap_err()
        .to_string();
    assert!(err.contains("rate"), "{err}");
}
