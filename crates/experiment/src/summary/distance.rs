//! Per test input, the distance from a method's predictive distribution of f to the exact
//! posterior's in the same repetition: W2 for every family, KL(method ‖ anchor) for the
//! normal and Student-t families (not for samples: see `uqbench_metrics::distance`).

use uqbench_core::{Family, Prediction};
use uqbench_metrics::distance::{kl, w2, w2_samples, LocScale, Shape};

/// The anchor's posterior of f in one repetition: its mean, sd (scale) and degrees of freedom
/// at every test input.
#[derive(Debug, Clone, Copy)]
pub struct AnchorRef<'a> {
    /// Posterior mean per test input.
    pub mean: &'a [f64],
    /// Posterior sd (a t's scale) per test input.
    pub std: &'a [f64],
    /// Student-t degrees of freedom when σ's scale is estimated.
    pub dof: Option<f64>,
}

/// W2 per test input, and KL per test input where the family has a density. `columns` are the
/// draws per test input of an empirical family.
pub fn to_anchor(
    out: &Prediction,
    columns: Option<&[Vec<f64>]>,
    anchor: &AnchorRef<'_>,
) -> (Vec<f64>, Option<Vec<f64>>) {
    let shape_b = Shape::new(anchor.dof);
    let b = |i: usize| LocScale {
        mean: anchor.mean[i],
        scale: anchor.std[i],
        dof: anchor.dof,
    };
    let m = anchor.mean.len();
    match (out.family, columns) {
        // A t per input (DER) has no closed-form W2 to the anchor's marginal: its draws'.
        (Family::Empirical | Family::StudentTPerInput, Some(columns)) => {
            let w = uqbench_core::par_map(m, |i| {
                let mut sorted = columns[i].clone();
                sorted.sort_by(f64::total_cmp);
                w2_samples(&sorted, b(i), &shape_b)
            });
            (w, None)
        }
        (Family::Empirical | Family::StudentTPerInput, None) => (vec![f64::NAN; m], None),
        (family, _) => {
            let dof = match family {
                Family::StudentT { dof } => Some(dof),
                _ => None,
            };
            let shape_a = Shape::new(dof);
            let a = |i: usize| LocScale {
                mean: out.mean[i],
                scale: out.std[i],
                dof,
            };
            let pairs = uqbench_core::par_map(m, |i| {
                (
                    w2(a(i), &shape_a, b(i), &shape_b),
                    kl(a(i), &shape_a, b(i), &shape_b),
                )
            });
            let (w, k): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
            // A method without any uncertainty of f (std 0 everywhere: quantile regression,
            // which states intervals of y only) has no density of f: no KL. A method with one
            // that is certain (std 0) at some input where the anchor is not has KL = +∞ there
            // (a point mass is not absolutely continuous with respect to the anchor): a
            // result, kept as +∞ in the files (issue 59 §4), not left out.
            let point = out.std.iter().all(|s| *s <= 0.0);
            (w, (!point).then_some(k))
        }
    }
}
