//! The samplers crate's integration tests, one binary: HMC (its many-chain reference in
//! `ensemble.rs`) and MFVI.

mod ensemble;
mod hmc;
mod mfvi;
