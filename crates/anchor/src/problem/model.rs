//! What a resolved problem's truth is ([`Model`]) and the kind of problem it is
//! ([`ProblemKind`]), which its spec declaration shares.

use crate::features::FeatureMap;
use crate::tcc::Tcc;

/// The kind of a problem: one idea for the problem a spec declares (`[problem]`,
/// `[surrogate]`, `[classification]`) and the problem it resolves to (its [`Model`]). It
/// decides whether the exact posterior exists and which track the results take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// f linear in known features: the anchor exists.
    Linear,
    /// A simulation from a real data set: no anchor.
    Surrogate,
    /// [002]'s two-class problem: labels, the exact P(y = 1 | x), no anchor.
    Classification,
}

impl ProblemKind {
    /// Whether the exact posterior (the anchor) exists.
    pub fn has_anchor(self) -> bool {
        self == ProblemKind::Linear
    }
}

/// What the true f is.
#[derive(Debug, Clone, PartialEq)]
pub enum Model {
    /// f = G(x)ᵀγ: linear in known features, so the anchor exists.
    Linear {
        /// G.
        features: FeatureMap,
        /// γ.
        gamma: Vec<f64>,
    },
    /// f and σ² are random forests fitted to a real data set ([004] §5.5): no anchor.
    Surrogate(SurrogateInfo),
    /// [002]'s two-class problem: the targets are labels 0/1 and the truth is the exact
    /// P(y = 1 | x) ([`crate::tcc`]); no anchor.
    Classification(Tcc),
}

/// What a surrogate problem was built from.
#[derive(Debug, Clone, PartialEq)]
pub struct SurrogateInfo {
    /// The data file.
    pub data: String,
    /// The target column.
    pub target: String,
    /// The covariates, in input order.
    pub covariates: Vec<String>,
    /// Rows in the data.
    pub rows: usize,
    /// The target's mean and sd in the data's units ((0, 1) when not standardised): results
    /// are in units of the sd.
    pub target_scale: (f64, f64),
    /// Out-of-bag R² of the forest that is f.
    pub oob_r2: f64,
}
