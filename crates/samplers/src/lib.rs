//! The samplers of uqbench: Hamiltonian Monte Carlo ([002]'s gold standard) and mean-field
//! variational inference, their chains or replicas run on the engine's schedule
//! (`uqbench-engine`) as tensors on a GPU and as host loops per chain on the CPU.

pub mod hmc;
pub mod mfvi;

pub use hmc::{Algorithm, Hmc, HmcConfig, HmcSettings, Metric, Trajectory};
pub use mfvi::{Mfvi, MfviConfig, MfviSettings};
