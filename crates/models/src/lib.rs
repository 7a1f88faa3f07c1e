//! The trained-network methods of uqbench, one file each, all on the engine
//! (`uqbench-engine`): deep ensembles (plain, adversarial, bootstrap, mean–variance), the
//! dropout family (MC, concrete, variational), the ensemble of MC dropout, SWAG and
//! MultiSWAG, the Laplace approximation, quantile networks (CQR's base) and the
//! jackknife+-after-bootstrap. No file IO: methods take data as host arrays and return
//! per-point predictions as host arrays.

pub mod dropout_method;
pub mod ens_mcd;
pub mod ensemble;
pub mod host_net;
pub mod jackknife;
pub mod laplace;
pub mod quantile;
pub mod swag;

// The engine's modules under the paths the method files use (`crate::engine::…`).
use uqbench_engine::{config, engine, stochastic};

pub use dropout_method::{DropoutConfig, DropoutKind, DropoutMethod, DropoutSettings};
pub use ens_mcd::{EnsMcd, EnsMcdConfig, EnsMcdSettings};
pub use ensemble::{BootstrapScheme, Ensemble, EnsembleConfig, EnsembleKind, EnsembleSettings};
pub use laplace::{Laplace, LaplaceConfig, LaplaceSettings};
pub use quantile::{QuantileConfig, QuantileNet, QuantileSettings};
pub use swag::{Swag, SwagConfig, SwagSettings};
pub use uqbench_core::{
    combine_members, Compute, Family, IntervalSetting, Likelihood, Member, Method, MethodError,
    Prediction, Replicas, SeedBase, Task,
};
