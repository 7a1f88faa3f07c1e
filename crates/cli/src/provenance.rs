//! Provenance for `run.json`: this build (version, git commit, compiler, burn) and the machine
//! (CPU model or GPU adapter, threads). The build facts come from `build.rs`.

use uqbench_experiment::store::RunMeta;

/// The CPU's model name (from /proc/cpuinfo) and its logical cores, or "unknown".
pub fn cpu_model() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{name} ({cores} logical cores)")
}

/// The CUDA device a `--backend cuda` run uses (burn's `Device::cuda(0)`: the first device
/// CUDA sees), by name from `nvidia-smi`, or a sentence saying it could not be named. burn's
/// CUDA client does not expose the device's name, so the driver's tool is asked: the device
/// is the first entry of `CUDA_VISIBLE_DEVICES` where that is set (an index or a UUID, both
/// of which `nvidia-smi -i` takes), else index 0.
pub fn cuda_device() -> String {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let id = cuda_device_id(visible.as_deref());
    let out = std::process::Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,uuid,driver_version",
            "--format=csv,noheader",
            "-i",
            &id,
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => describe_cuda(&String::from_utf8_lossy(&o.stdout), &id),
        _ => format!("CUDA device {id} (not named: nvidia-smi is not available)"),
    }
}

/// Which device `nvidia-smi -i` should describe for a `CUDA_VISIBLE_DEVICES` value.
fn cuda_device_id(visible: Option<&str>) -> String {
    visible
        .and_then(|v| v.split(',').map(str::trim).find(|s| !s.is_empty()))
        .unwrap_or("0")
        .to_string()
}

/// `nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader` output as the
/// run's device: "NAME (UUID, driver VERSION, CUDA device ID)".
fn describe_cuda(csv: &str, id: &str) -> String {
    let Some(line) = csv.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return format!("CUDA device {id} (nvidia-smi named none)");
    };
    let fields: Vec<&str> = line.split(',').map(str::trim).collect();
    match fields.as_slice() {
        [name, uuid, driver] => format!("{name} ({uuid}, driver {driver}, CUDA device {id})"),
        _ => format!("{line} (CUDA device {id})"),
    }
}

/// The provenance of this build and machine, for a run on `backend` (its name) on `device`
/// (see [`cpu_model`]) with `threads` workers.
pub fn run_meta(profile: Option<String>, backend: &str, device: String, threads: usize) -> RunMeta {
    RunMeta {
        profile,
        backend: backend.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: env!("UQBENCH_GIT_COMMIT").to_string(),
        rustc: env!("UQBENCH_RUSTC").to_string(),
        burn: env!("UQBENCH_BURN").to_string(),
        device,
        threads,
        ..RunMeta::default()
    }
}

/// This process's peak resident memory so far in MiB (`VmHWM` of /proc/self/status), or
/// `None` where the system does not report it.
pub fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The SHA-256 of a file, in hex (the pinned binary of `uqbench slurm`, a shard's binary in
/// its run.json).
pub fn sha256_file(path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_devices_are_named_from_nvidia_smi() {
        assert_eq!(cuda_device_id(None), "0");
        assert_eq!(cuda_device_id(Some("2,3")), "2");
        assert_eq!(cuda_device_id(Some(" GPU-8f2a ,1")), "GPU-8f2a");
        assert_eq!(cuda_device_id(Some("")), "0");
        let smi = "NVIDIA H100 80GB HBM3, GPU-1c2e8a44-aaaa-bbbb-cccc-0123456789ab, 550.54.15\n";
        assert_eq!(
            describe_cuda(smi, "0"),
            "NVIDIA H100 80GB HBM3 (GPU-1c2e8a44-aaaa-bbbb-cccc-0123456789ab, driver 550.54.15, \
             CUDA device 0)"
        );
        assert_eq!(
            describe_cuda("\n", "1"),
            "CUDA device 1 (nvidia-smi named none)"
        );
        // On this machine (no NVIDIA driver) the name says why it is missing; with a driver,
        // the GPU's name. Either way, never the wgpu adapter's.
        let here = cuda_device();
        assert!(here.contains("CUDA device"), "{here}");
    }
}
