//! One module per subcommand.

pub mod anchor;
pub mod backends;
pub mod bench;
pub mod bench_hmc;
pub mod check;
pub mod export;
pub mod merge;
pub mod metrics;
pub mod report;
pub mod run;
pub mod score;
pub mod slurm;
pub mod status;
