//! burn modules and training for the deep uncertainty-quantification methods that uqbench
//! benchmarks. No file IO: methods take data as host arrays and return per-point predictions
//! as host arrays.

pub mod autodiff;
pub mod backend;
pub mod config;
pub mod cpu;
pub mod device_rng;
pub mod dropout_method;
pub mod engine;
pub mod ens_mcd;
pub mod ensemble;
pub mod hmc;
pub mod host_net;
pub mod jackknife;
pub mod laplace;
pub mod layers;
pub mod mfvi;
pub mod mlp;
pub mod optim;
pub mod quantile;
pub mod stochastic;
pub mod swag;

pub use backend::{open_device, wgpu_status, BackendKind, WgpuAdapter};
pub use config::{MethodConfig, NetConfig, OptimConfig};
pub use dropout_method::{DropoutConfig, DropoutKind, DropoutMethod, DropoutSettings};
pub use engine::{train, Batching, Job, Resources, TrainOutput, TrainSettings};
pub use ens_mcd::{EnsMcd, EnsMcdConfig, EnsMcdSettings};
pub use ensemble::{BootstrapScheme, Ensemble, EnsembleConfig, EnsembleKind, EnsembleSettings};
pub use hmc::{Hmc, HmcConfig, HmcSettings};
pub use laplace::{Laplace, LaplaceConfig, LaplaceSettings};
pub use mfvi::{Mfvi, MfviConfig, MfviSettings};
pub use mlp::{xavier_init, HostWeights, MlpShape};
pub use quantile::{QuantileConfig, QuantileNet, QuantileSettings};
pub use stochastic::{Bernoulli, Concrete, StochasticLayer, Variational};
pub use swag::{Swag, SwagConfig, SwagSettings};
pub use uqbench_core::{
    combine_members, Compute, Family, IntervalSetting, Likelihood, Member, Method, MethodError,
    Prediction, Replicas, SeedBase, Task,
};
