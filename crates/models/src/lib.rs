//! burn modules and training for the deep uncertainty-quantification methods that uqbench
//! benchmarks. No file IO: methods take data as host arrays and return per-point predictions
//! as host arrays.

pub mod backend;
pub mod error;

pub use backend::{open_device, wgpu_status, BackendKind};
pub use error::ModelError;
