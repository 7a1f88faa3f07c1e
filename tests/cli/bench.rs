//! `uqbench bench`.

use crate::util::*;

fn bench_json(backend: &str) -> serde_json::Value {
    // CI's wgpu adapter is lavapipe, a software rasterizer: allowed here on purpose.
    let o = uqbench(&[
        "bench",
        "train",
        "--replicas",
        "16",
        "--epochs",
        "20",
        "--n",
        "50",
        "--backend",
        backend,
        "--json",
        "--allow-software-gpu",
    ]);
    assert!(o.status.success(), "{backend}: {}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.lines().count(), 1, "one JSON line: {text}");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn bench_prints_one_json_line_and_backends_agree() {
    let flex = bench_json("flex");
    for key in [
        "backend",
        "replicas",
        "epochs",
        "n",
        "seconds",
        "replica_epochs_per_s",
        "gflops",
        "final_objective",
    ] {
        assert!(!flex[key].is_null(), "{key} missing: {flex}");
    }
    assert_eq!(flex["replicas"], 16);
    // The host trainer's rate against this machine's own peaks (issue 61): the fraction is
    // the rate over the large product, so both are there and agree.
    let (gflops, product) = (
        flex["gflops"].as_f64().unwrap(),
        flex["product_gflops"].as_f64().unwrap(),
    );
    let fraction = flex["peak_fraction"].as_f64().unwrap();
    assert!(
        product > 0.0 && (fraction - gflops / product).abs() < 1e-12,
        "{flex}"
    );
    let reference = flex["final_objective"].as_f64().unwrap();
    let mut others = vec!["ndarray"];
    if !skip_wgpu() {
        others.push("wgpu");
    }
    for backend in others {
        let v = bench_json(backend);
        let loss = v["final_objective"].as_f64().unwrap();
        // The benchmark's promise: same seed, 20 epochs, same final loss within 1e-4 relative.
        assert!(
            (loss - reference).abs() <= 1e-4 * reference,
            "{backend}: {loss} vs flex {reference}"
        );
    }
}

#[test]
fn uploads_and_reads_do_not_grow_with_the_epochs() {
    // Full-batch training keeps the data, weights and moments on the device: per chunk, the
    // weights and biases (8), x, y and the test inputs (3) go up once, and the objective,
    // the predictions and the training fit (3) come back once, whatever the number of
    // epochs. On flex's tensor route (the CPU's default is the host trainer, which has no
    // device: checked to move nothing at the end) and, unless deliberately skipped, on wgpu
    // (lavapipe).
    let mut backends = vec!["flex"];
    if !skip_wgpu() {
        backends.push("wgpu");
    }
    for backend in backends {
        let run = |epochs: &str| -> serde_json::Value {
            let o = uqbench_env(
                &[
                    "bench",
                    "train",
                    "--replicas",
                    "8",
                    "--epochs",
                    epochs,
                    "--backend",
                    backend,
                    "--chunk",
                    "4",
                    "--json",
                    "--allow-software-gpu",
                ],
                &[("UQBENCH_HOST_LOOPS", "off")],
            );
            assert!(o.status.success(), "{backend}: {}", stderr(&o));
            serde_json::from_slice(&o.stdout).unwrap()
        };
        let (short, long) = (run("2"), run("6"));
        assert_eq!(short["chunks"], 2, "{backend}: {short}");
        assert_eq!(long["steps"], 2 * 6, "{backend}: {long}");
        if backend == "wgpu" {
            // Operations are counted in burn's fusion server (engine/ops.rs). Every
            // optimiser step issues the same operations, so the count is affine in the
            // steps: (long − short) / (12 − 4) steps is the per-step count, exactly. For
            // this network (4 layers, 8 parameter tensors) it is 174: forward and
            // backward about 8 per layer, Adam with decay 14 per parameter tensor, the
            // objective and its divergence check a few more. The bound 200 leaves room
            // for burn's own bookkeeping to change, and catches any per-step work that
            // grows (a host round trip adds operations; a loop over replicas multiplies
            // them).
            let count = |v: &serde_json::Value, key: &str| v[key].as_u64().unwrap();
            let per_step = (count(&long, "operations") - count(&short, "operations")) as f64 / 8.0;
            assert_eq!(per_step.fract(), 0.0, "{short} {long}");
            assert!(per_step > 0.0 && per_step <= 200.0, "{per_step} per step");
            let blocks = (count(&long, "blocks") - count(&short, "blocks")) as f64 / 8.0;
            assert!(
                blocks > 0.0 && blocks <= per_step,
                "{blocks} blocks per step"
            );
            let again = run("10");
            assert_eq!(
                count(&again, "operations") - count(&long, "operations"),
                count(&long, "operations") - count(&short, "operations"),
                "four more epochs add the same operations again"
            );
        } else {
            // No fusion server on the CPU: nothing is counted, and nothing is made up.
            assert!(short["operations"].is_null(), "{short}");
        }
        for key in ["uploads", "reads"] {
            assert_eq!(
                short[key], long[key],
                "{backend}: {key} grew with the epochs"
            );
        }
        assert_eq!(short["uploads"], 2 * (8 + 3), "{backend}: {short}");
        assert_eq!(short["reads"], 2 * 3, "{backend}: {short}");
    }
    // The CPU's host trainer (engine/host.rs) trains on the host: nothing goes up or comes back.
    let o = uqbench(&[
        "bench",
        "train",
        "--replicas",
        "8",
        "--epochs",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let host: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (host["uploads"].as_u64(), host["reads"].as_u64()),
        (Some(0), Some(0)),
        "{host}"
    );
}

#[test]
fn the_autodiff_route_benchmarks_too() {
    // McdNet (MC dropout) through burn autodiff on the same trainer: its own figure, and it trains (the
    // mean final objective ends below the ½·variance of the targets, about 0.25 for
    // y = sin(x) + noise on [−4, 4], after 100 epochs).
    let o = uqbench(&[
        "bench",
        "train",
        "--replicas",
        "8",
        "--epochs",
        "100",
        "--route",
        "autodiff",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["route"], "autodiff");
    assert!(v["replica_epochs_per_s"].as_f64().unwrap() > 0.0);
    let objective = v["final_objective"].as_f64().unwrap();
    assert!(objective.is_finite() && objective < 0.2, "{v}");
    assert_eq!(v["diverged"], 0);
}

#[test]
fn wgpu_without_an_adapter_is_a_clear_error() {
    let o = Command::new(env!("CARGO_BIN_EXE_uqbench"))
        .args([
            "bench",
            "train",
            "--replicas",
            "2",
            "--epochs",
            "1",
            "--backend",
            "wgpu",
        ])
        .env("VK_ICD_FILENAMES", "/nonexistent.json")
        .env("VK_DRIVER_FILES", "/nonexistent.json")
        .output()
        .unwrap();
    assert_clean_error(&o, &["wgpu", "no Vulkan adapter", "--backend flex"]);
}

#[test]
fn bench_hmc_reports_gradient_evaluations_per_second() {
    // A small run of the peer's workload: 8 chains × 20 iterations × 5 leapfrog steps of the
    // 1-10-1 network. At ε = 1e-3 the energy error of a trajectory is O(ε²)·L, so nearly
    // every proposal is accepted (the peer's acceptance is 1.00 at 400 × 200 × 10).
    let o = uqbench(&[
        "bench",
        "hmc",
        "--chains",
        "8",
        "--width",
        "10",
        "--leapfrog",
        "5",
        "--iters",
        "20",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rate = v["grad_evals_per_s"].as_f64().unwrap();
    let seconds = v["seconds"].as_f64().unwrap();
    // grad_evals_per_s is C·I·L over the seconds, by definition.
    assert!(
        (rate * seconds / (8.0 * 20.0 * 5.0) - 1.0).abs() < 1e-9,
        "{v}"
    );
    assert!(v["accept_rate"].as_f64().unwrap() > 0.9, "{v}");
    assert_eq!(v["diverged"], false, "{v}");
    // ESS per second at the worst test input: its ESS over the same seconds.
    for kind in ["bulk", "tail"] {
        let ess = v[format!("ess_{kind}_min")].as_f64().unwrap();
        let per_s = v[format!("ess_{kind}_per_s")].as_f64().unwrap();
        assert!(
            ess > 0.0 && (per_s * seconds / ess - 1.0).abs() < 1e-9,
            "{v}"
        );
    }
    // With a warm-up the step adapts and the warm-up's gradients count in the rate.
    let o = uqbench(&[
        "bench",
        "hmc",
        "--chains",
        "4",
        "--width",
        "5",
        "--leapfrog",
        "5",
        "--iters",
        "20",
        "--warmup",
        "30",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let w: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let evals = w["grad_evals_per_s"].as_f64().unwrap() * w["seconds"].as_f64().unwrap();
    assert!((evals / (4.0 * 50.0 * 5.0) - 1.0).abs() < 1e-9, "{w}");
    assert_eq!(w["warmup"], 30, "{w}");
    // At the worst test input, every chain's mean and sd of f, and their spread's ratio.
    let means: Vec<f64> = serde_json::from_value(w["chain_means"].clone()).unwrap();
    let sds: Vec<f64> = serde_json::from_value(w["chain_sds"].clone()).unwrap();
    assert_eq!((means.len(), sds.len()), (4, 4), "{w}");
    let grand = means.iter().sum::<f64>() / 4.0;
    let between = (means.iter().map(|m| (m - grand).powi(2)).sum::<f64>() / 4.0).sqrt();
    let ratio = w["between_over_within_sd"].as_f64().unwrap();
    assert!(
        (ratio - between / (sds.iter().sum::<f64>() / 4.0)).abs() < 1e-9,
        "{w}"
    );
    let x = w["worst_input"].as_f64().unwrap();
    assert!((-2.0..=2.5).contains(&x), "{w}");
    // On a GPU backend the chains run as tensors (`hmc/chain.rs`): lavapipe in CI, tiny.
    if !skip_wgpu() {
        let o = uqbench(&[
            "bench",
            "hmc",
            "--backend",
            "wgpu",
            "--allow-software-gpu",
            "--chains",
            "4",
            "--width",
            "5",
            "--leapfrog",
            "2",
            "--iters",
            "10",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["backend"], "wgpu", "{v}");
        assert!(v["accept_rate"].as_f64().unwrap() > 0.9, "{v}");
        assert_eq!(v["diverged"], false, "{v}");
    }
}

/// `bench train --method` runs every method of the registry's network and sampler rooms at
/// its defaults (HMC apart: `bench hmc` measures it) at small sizes, and reports the
/// replica-epochs it ran: the README's measuring command must not refuse a registered method
/// (SG-MCMC's default draws follow the epochs: 40 epochs give SGLD and SGHMC 20 draws and the
/// cyclical sampler's 4 cycles 8).
#[test]
fn bench_train_runs_every_engine_method_at_its_defaults() {
    let o = uqbench(&["methods"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let mut room = String::new();
    let mut kinds = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_suffix(':').filter(|l| !l.starts_with(' ')) {
            room = name.to_string();
        } else if let Some(kind) = line
            .strip_prefix("  ")
            .and_then(|l| l.split_whitespace().next())
        {
            if (room == "network" || room == "sampler") && kind != "HMC" {
                kinds.push(kind.to_string());
            }
        }
    }
    for kind in [
        "Ens",
        "BD",
        "SWAG",
        "Epinet",
        "MFVI",
        "SGLD",
        "SGHMC",
        "CyclicalSGMCMC",
        "pSGLD",
    ] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} not listed: {text}");
    }
    for kind in &kinds {
        let o = uqbench(&[
            "bench",
            "train",
            "--method",
            kind,
            "--replicas",
            "2",
            "--epochs",
            "40",
            "--n",
            "24",
            "--json",
        ]);
        assert!(o.status.success(), "{kind}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let (replicas, epochs) = (
            v["replicas"].as_f64().unwrap(),
            v["epochs"].as_f64().unwrap(),
        );
        let rate = v["replica_epochs_per_s"].as_f64().unwrap();
        let seconds = v["seconds"].as_f64().unwrap();
        assert!(replicas >= 2.0 && epochs == 40.0, "{kind}: {v}");
        assert!(
            (rate * seconds / (replicas * epochs) - 1.0).abs() < 1e-9,
            "{kind}: replica-epochs/s is replicas × epochs over the seconds: {v}"
        );
        // SGHMC's default step (1e-4) diverges here (N/σ² = 24/0.01: its drift is not scaled
        // by it): the open defect of issue 59, point 1, whose fix makes this hold for SGHMC too.
        if kind != "SGHMC" {
            assert_eq!(v["diverged_repetitions"], 0, "{kind}: {v}");
        }
    }
}

#[test]
fn bench_peak_measures_the_product_and_the_fma_bound() {
    let o = uqbench(&["bench", "peak", "--threads", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let product = v["product_gflops"].as_f64().unwrap();
    assert!(product > 0.0, "{v}");
    // Capped at the baseline: a product rate, and no FMA-bound peak (no vector FMA there).
    let o = uqbench(&[
        "bench",
        "peak",
        "--threads",
        "1",
        "--json",
        "--simd",
        "baseline",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["level"], "baseline");
    assert!(v["fma_peak_gflops"].is_null() && v["product_gflops"].as_f64().unwrap() > 0.0);
}
