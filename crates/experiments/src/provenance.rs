//! Provenance for `run.json`: this build (version, git commit, compiler, burn) and the machine
//! (CPU model or GPU adapter, threads). The build facts come from `build.rs`.

use uqbench_eval::store::RunMeta;

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
