//! The batched training engine of uqbench: R replicas of a network (repetitions × members)
//! trained as one program, with two executions of the same replica network and the same
//! method code above them: batched tensors on a burn backend (a GPU's), and loops per
//! replica on the host (a CPU's, `trainer::host`). Everything an engine method builds on lives
//! here: the backends and their devices, the counter-based random streams, the network and
//! its heads, the stochastic layers, training by-products as collectors, and all of the CPU's
//! performance code (`cpu`). No file IO, no methods: the methods are in `uqbench-models`
//! (trained networks) and `uqbench-samplers` (HMC, MFVI).

pub mod autodiff;
pub mod backend;
pub mod config;
pub mod cpu;
pub mod device_rng;
pub mod layers;
pub mod mlp;
pub mod optim;
pub mod stack;
pub mod stochastic;
pub mod trainer;

pub use backend::{open_device, wgpu_status, BackendKind, WgpuAdapter};
pub use config::{MethodConfig, NetConfig, OptimConfig};
pub use mlp::{xavier_init, HostWeights, MlpShape};
pub use stack::{Stack, StackGrads};
pub use stochastic::{Bernoulli, Concrete, StochasticLayer, Variational};
pub use trainer::{train, Batching, Job, Resources, TrainOutput, TrainSettings};
