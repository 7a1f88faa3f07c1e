//! One module per subcommand.

pub mod anchor;
pub mod backends;
pub mod bench;
pub mod bench_hmc;
pub mod bench_method;
pub mod bench_null;
pub mod bench_peak;
pub mod check;
pub mod compare;
pub mod decide;
pub mod draws;
pub mod export;
pub mod merge;
pub mod methods;
pub mod metrics;
pub mod report;
pub mod run;
pub mod score;
pub mod slurm;
pub mod slurm_queue;
pub mod status;

use clap::{Args, ValueEnum};
use uqbench_engine::Resources;

/// Whether a CPU backend trains and samples in loops per replica on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HostLoops {
    /// Loops per replica on the host (the default on a CPU backend, faster).
    On,
    /// Batched tensors, what a GPU runs.
    Off,
}

/// How a CPU backend runs the methods that have host loops: settings of a run, recorded in
/// `run.json` (they are not globals: every method reads them from its `Compute`).
#[derive(Debug, Clone, Args)]
pub struct HostArgs {
    /// On a CPU backend, train and sample in loops per replica on the host (`on`, the
    /// default, faster) or as batched tensors (`off`, what a GPU runs). Results are equal in
    /// distribution, not bit for bit.
    #[arg(long, env = "UQBENCH_HOST_LOOPS", value_enum, default_value_t = HostLoops::On)]
    pub host_loops: HostLoops,
    /// The widest instruction set the host loops use: `best` (the CPU's), `avx2` or
    /// `baseline`. Every level gives the same bits; a cap is for comparing speeds.
    #[arg(long, env = "UQBENCH_SIMD", default_value = "best")]
    pub simd: uqbench_core::SimdCap,
}

impl HostArgs {
    /// Sets the resources' host settings.
    pub fn apply(&self, res: &mut Resources) {
        res.host_loops = self.host_loops == HostLoops::On;
        res.simd = uqbench_engine::cpu::simd::Level::capped(self.simd);
    }
}
