//! `uqbench backends` and the wgpu paths.

use crate::util::*;

#[test]
fn backends_lists_every_backend() {
    let o = uqbench(&["backends"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for name in ["flex", "ndarray", "wgpu"] {
        assert!(out.contains(name), "{out}");
    }
}

#[test]
fn a_wgpu_run_merges_small_jobs_and_completes() {
    // E1 quick with BD on wgpu (lavapipe in CI, allowed on purpose): the dropout method's
    // blocks of 5 repetitions (5 replicas each) are merged into one job per setting, and the
    // run writes every output; the anchor still covers.
    if skip_wgpu() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let o = uqbench(&[
        "run",
        "experiments/e1.toml",
        "--profile",
        "quick",
        "--methods",
        "BD",
        "--backend",
        "wgpu",
        "--allow-software-gpu",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("f_main=1 BD repetitions 0..20"), "{err}");
    assert!(dir.join("summary.csv").is_file());
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["backend"], "wgpu");
}

#[test]
fn a_software_gpu_is_refused_unless_allowed() {
    // On the test machines (CI: no GPU) wgpu's adapter is lavapipe (llvmpipe), a software
    // rasterizer: `backends` names it as such, and a wgpu run on it is a clear error without
    // --allow-software-gpu that leaves no run directory behind.
    if skip_wgpu() {
        return;
    }
    let o = uqbench(&["backends"]);
    let out = String::from_utf8_lossy(&o.stdout);
    if !out.contains("software rasterizer") {
        // A machine with a real GPU: nothing to refuse; the adapter is named as a GPU.
        assert!(out.contains("(GPU)"), "{out}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let o = Command::new(env!("CARGO_BIN_EXE_uqbench"))
        .args([
            "run",
            "experiments/e1.toml",
            "--profile",
            "quick",
            "--backend",
            "wgpu",
            "--out",
            dir.to_str().unwrap(),
        ])
        .current_dir(root())
        .env_remove("UQBENCH_ALLOW_SOFTWARE_GPU")
        .output()
        .unwrap();
    assert_clean_error(
        &o,
        &[
            "software rasterizer",
            "--allow-software-gpu",
            "--backend flex",
        ],
    );
    assert!(!dir.exists(), "a refused run must not create its directory");
}
