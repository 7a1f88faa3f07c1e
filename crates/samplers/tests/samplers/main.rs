//! The samplers crate's integration tests, one binary: HMC and MFVI.

mod hmc;
mod mfvi;
