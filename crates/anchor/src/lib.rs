//! Benchmark problems that are nonlinear in x but linear in their parameters,
//! y ~ N(G(x)ᵀγ, σ(x)²), and their exact Bayesian-linear-regression posterior (the *anchor*).
//!
//! - [`ProblemSpec`] is a problem as declared in an experiment's TOML file: feature families
//!   ([`FeatureSpec`]), γ, σ (constant or a function of x) and the designs of training,
//!   validation and test inputs. Numbers may be expressions in the sweep variables
//!   ([`Num`]).
//! - [`Problem::resolve`] fixes one setting of the sweep; [`Problem::draw`] generates one
//!   repetition's targets from a seed derived from (experiment, setting, repetition).
//! - [`Anchor::fit`] factorises the design once; [`Anchor::posterior`] gives the exact
//!   posterior mean and standard deviation of f(x*) for one repetition's targets.
//!
//! - [`SurrogateSpec`] and [`Problem::from_surrogate`] build [004]'s simulation from a real
//!   data set (random forests as f and σ²(x), the real inputs kept); it has no anchor.
//! - [`ClassificationSpec`] and [`Problem::from_classification`] build [002]'s two-class
//!   problem ([`tcc`]) whose truth is the exact P(y = 1 | x); it has no anchor either.
//!
//! This crate never depends on burn: it is the reference the deep methods are judged by.

pub mod blr;
pub mod design;
pub mod error;
pub mod expr;
pub mod features;
pub mod posterior;
pub mod problem;
pub mod surrogate;
pub mod task_data;
pub mod tcc;

pub use blr::{Blr, GaussianBlr, ANCHOR};
pub use design::{Bound, Design, DesignSpec, Inputs, MixtureComponent, Region};
pub use error::AnchorError;
pub use expr::{Expr, Num};
pub use features::{FeatureMap, FeatureSpec, Term};
pub use posterior::{Anchor, Posterior, RANK_TOLERANCE};
pub use problem::{
    DesignMode, Draw, GammaSpec, Model, Noise, Problem, ProblemKind, ProblemSpec, RandomInputs,
    ReportPoint, Setting, SurrogateInfo, TestSet,
};
pub use seed::{Rng, SeedPath};
pub use surrogate::SurrogateSpec;
pub use task_data::TaskData;
pub use tcc::{logistic, ClassSpec, ClassificationSpec, Tcc};
pub use uqbench_core::central_quantile;
/// The seed derivation and the portable generator (from `uqbench-core`).
pub use uqbench_core::seed;
