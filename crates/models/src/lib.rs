//! The trained-network methods of uqbench, one file each, all on the engine
//! (`uqbench-engine`): deep ensembles (plain, adversarial, bootstrap, mean–variance), the
//! dropout family (MC, concrete, variational), the ensemble of MC dropout, ensemble+ with
//! randomized prior functions, the epinet, BatchEnsemble, SWAG and
//! MultiSWAG, SG-MCMC (the engine's replicas as chains), deep evidential regression, the Laplace approximation, quantile networks (CQR's base) and the
//! jackknife+-after-bootstrap. No file IO: methods take data as host arrays and return
//! per-point predictions as host arrays.

pub mod batch_ensemble;
pub mod batched;
pub mod der;
pub mod dropout_method;
pub mod ens_mcd;
pub mod ens_prior;
pub mod ensemble;
pub mod epinet;
pub mod host_net;
pub mod jackknife;
pub mod laplace;
pub mod own_net;
pub mod quantile;
pub mod sgmcmc;
pub mod swag;

pub use dropout_method::{DropoutConfig, DropoutKind, DropoutMethod, DropoutSettings};
pub use ens_mcd::{EnsMcd, EnsMcdConfig, EnsMcdSettings};
pub use ens_prior::{EnsPrior, EnsPriorConfig, EnsPriorSettings, TargetNoise};
pub use ensemble::{BootstrapScheme, Ensemble, EnsembleConfig, EnsembleKind, EnsembleSettings};
pub use epinet::{Epinet, EpinetConfig, EpinetSettings};
pub use laplace::{Laplace, LaplaceConfig, LaplaceSettings};
pub use quantile::{QuantileConfig, QuantileNet, QuantileSettings};
pub use sgmcmc::{CyclicalDynamics, PrecondAdapt, SgKind, SgMcmc, SgMcmcConfig, SgMcmcSettings};
pub use swag::{Swag, SwagConfig, SwagSettings};
