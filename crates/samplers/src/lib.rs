//! The samplers of uqbench: Hamiltonian Monte Carlo ([002]'s gold standard) and mean-field
//! variational inference, their chains or replicas run on the engine's schedule
//! (`uqbench-engine`) as tensors on a GPU and as host loops per chain on the CPU.

pub mod hmc;
pub mod mfvi;

// The engine's modules under the paths the sampler files use (`crate::engine::…`).
use uqbench_engine::{config, cpu, engine, layers, mlp, optim};

pub use hmc::{Algorithm, Hmc, HmcConfig, HmcSettings, Metric, Trajectory};
pub use mfvi::{Mfvi, MfviConfig, MfviSettings};
