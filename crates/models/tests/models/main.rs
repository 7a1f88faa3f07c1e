//! The models crate's integration tests, one binary (burn and wgpu are linked once): the
//! backends, the engine, the dropout methods, the ensembles, HMC and MFVI.

mod backends;
mod dropout;
mod engine;
mod ensembles;
mod hmc;
mod mfvi;
mod util;
