//! scripts/gpu-check.sh: the bundle it packs holds what a GPU machine without the Rust
//! toolchain needs, and the check runs from the unpacked bundle alone (here on lavapipe,
//! small: the full check is for a real GPU).

use crate::util::*;

#[test]
fn the_gpu_check_bundle_unpacks_and_runs_on_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle.tar.gz");
    let o = Command::new("bash")
        .args([
            "scripts/gpu-check.sh",
            "--pack",
            env!("CARGO_BIN_EXE_uqbench"),
        ])
        .env("GPU_CHECK_PACK", &bundle)
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // The device machines take 64 MiB; the binary is stripped (148 MB → 114 MB) and gzipped.
    let size = std::fs::metadata(&bundle).unwrap().len();
    assert!(size <= 64 << 20, "the bundle is {size} bytes, above 64 MiB");
    let unpacked = tmp.path().join("far");
    std::fs::create_dir_all(&unpacked).unwrap();
    let o = Command::new("tar")
        .args([
            "-xzf",
            bundle.to_str().unwrap(),
            "-C",
            unpacked.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let dir = unpacked.join("uqbench-gpu-check");
    for file in ["uqbench", "gpu-check.sh", "experiments/e2.toml"] {
        assert!(dir.join(file).is_file(), "the bundle lacks {file}");
    }
    // Run from the bundle, outside the repository, with a PATH that has no cargo.
    let o = Command::new("bash")
        .args(["gpu-check.sh", "./uqbench"])
        .current_dir(&dir)
        .env("PATH", "/usr/bin:/bin")
        .env("GPU_CHECK_REPLICAS", "8")
        .env("GPU_CHECK_EPOCHS", "3")
        .env("GPU_CHECK_METHODS", "BD")
        .env("GPU_CHECK_OUT", tmp.path().join("out"))
        .env("UQBENCH_ALLOW_SOFTWARE_GPU", "1")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    for needle in [
        "backends in this build",
        "| backend | W1 replica-epochs/s (8 × 3) |",
        "| wgpu | ",
        "| flex | ",
        "largest |z| between wgpu and flex over ",
    ] {
        assert!(
            out.contains(needle),
            "gpu-check's output lacks {needle:?}:\n{out}"
        );
    }
    // Both runs scored the same aggregates (BLR and BD at d = 1 and 2).
    let compared: usize = out
        .split("over ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert!(compared > 100, "{out}");
}
