//! Temperature scaling (Guo et al. 2017) for the classification track: one T > 0 that divides
//! every logit, fitted on held-out labels by minimising the negative log-likelihood of
//! P̂(y = 1 | x) = mean_s sigmoid(f_s(x)/T), the mean over the method's draws (members,
//! passes), which is how the track turns a method's logits into a probability.

use uqbench_core::{Likelihood, MethodError, Prediction};

use crate::split::HeldOut;
use crate::Calibrator;

/// Temperature scaling of a classifier's logits: T fitted on the held-out labels, then every
/// logit of the test prediction divided by it.
pub struct Temperature;

impl Calibrator for Temperature {
    fn describe(&self) -> &'static str {
        "temperature scaling"
    }

    fn likelihood(&self) -> Likelihood {
        Likelihood::Bernoulli
    }

    fn calibrate(
        &self,
        held: &HeldOut<'_>,
        out: &mut Prediction,
        cal: &Prediction,
    ) -> Result<(), MethodError> {
        let draws = cal.samples.as_ref().ok_or_else(|| {
            MethodError::invalid(
                format!("[methods.{}] base", held.table),
                "a method without its draws",
                "a classification method (it returns its members' or passes' logits)",
            )
        })?;
        let t = fit(draws, &held.labels());
        apply(out, t);
        out.scalars
            .insert("calibration_points".into(), held.indices().len() as f64);
        Ok(())
    }
}

fn sigmoid(v: f64) -> f64 {
    if v >= 0.0 {
        1.0 / (1.0 + (-v).exp())
    } else {
        let e = v.exp();
        e / (1.0 + e)
    }
}

/// Mean NLL of the labels at temperature t; `draws` holds one row of logits per draw.
fn nll(draws: &[Vec<f64>], labels: &[f64], t: f64) -> f64 {
    let n = labels.len();
    let s = draws.len() as f64;
    (0..n)
        .map(|i| {
            let p = draws.iter().map(|row| sigmoid(row[i] / t)).sum::<f64>() / s;
            let p = p.clamp(1e-12, 1.0 - 1e-12);
            -(labels[i] * p.ln() + (1.0 - labels[i]) * (1.0 - p).ln())
        })
        .sum::<f64>()
        / n as f64
}

/// The temperature that minimises the held-out NLL: golden-section search in log T over
/// [e⁻⁵, e⁵] after a grid of 41 points brackets the minimum.
pub fn fit(draws: &[Vec<f64>], labels: &[f64]) -> f64 {
    let f = |u: f64| nll(draws, labels, u.exp());
    let grid: Vec<f64> = (0..41).map(|i| -5.0 + 10.0 * i as f64 / 40.0).collect();
    let best = (0..grid.len())
        .min_by(|&a, &b| f(grid[a]).total_cmp(&f(grid[b])))
        .expect("a non-empty grid");
    let (mut a, mut b) = (grid[best.saturating_sub(1)], grid[(best + 1).min(40)]);
    let g = (5f64.sqrt() - 1.0) / 2.0;
    for _ in 0..60 {
        let (c, d) = (b - g * (b - a), a + g * (b - a));
        if f(c) < f(d) {
            b = d;
        } else {
            a = c;
        }
    }
    ((a + b) / 2.0).exp()
}

/// Divides every logit of `p` (mean, std, draws) by `t`.
pub fn apply(p: &mut Prediction, t: f64) {
    for v in p.mean.iter_mut().chain(p.std.iter_mut()) {
        *v /= t;
    }
    for row in p.samples.iter_mut().flatten() {
        for v in row.iter_mut() {
            *v /= t;
        }
    }
    p.scalars.insert("temperature".into(), t);
}

#[cfg(test)]
mod tests {
    use super::*;
    use uqbench_core::Rng;

    #[test]
    fn recovers_the_temperature_of_overconfident_logits() {
        // Labels drawn with P = sigmoid(g), logits reported as 3g: the fitted T is 3 up to the
        // sampling error of 20 000 labels (the NLL's curvature gives an SE of about 0.05 here;
        // checked at 0.25).
        let mut rng = Rng::new(5);
        let n = 20_000;
        let g: Vec<f64> = (0..n).map(|_| rng.uniform_in(-3.0, 3.0)).collect();
        let labels: Vec<f64> = g
            .iter()
            .map(|&v| f64::from(u8::from(rng.uniform() < sigmoid(v))))
            .collect();
        let draws = vec![g.iter().map(|v| 3.0 * v).collect::<Vec<f64>>()];
        let t = fit(&draws, &labels);
        assert!((t - 3.0).abs() < 0.25, "{t}");
    }
}
