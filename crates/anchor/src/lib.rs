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
//! This crate never depends on burn: it is the reference the deep methods are judged by.

pub mod design;
pub mod error;
pub mod expr;
pub mod features;
pub mod posterior;
pub mod problem;
pub mod seed;

pub use design::{Bound, Design, DesignSpec, Inputs, MixtureComponent, Region};
pub use error::AnchorError;
pub use expr::{Expr, Num};
pub use features::{FeatureMap, FeatureSpec, Term};
pub use posterior::{central_quantile, Anchor, Posterior, RANK_TOLERANCE};
pub use problem::{Draw, GammaSpec, Noise, Problem, ProblemSpec, ReportPoint, Setting, TestSet};
pub use seed::{Rng, SeedPath};
