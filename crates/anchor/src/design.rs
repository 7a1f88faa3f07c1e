//! Input designs: where the training, validation and test inputs lie.

use serde::{Deserialize, Serialize};

use crate::error::AnchorError;
use crate::expr::Num;
use crate::seed::Rng;

/// A set of points in R^d, stored row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    d: usize,
    data: Vec<f64>,
}

impl Inputs {
    /// Points from a row-major buffer of `n·d` values.
    pub fn new(d: usize, data: Vec<f64>) -> Inputs {
        assert!(
            d > 0 && data.len().is_multiple_of(d),
            "Inputs::new: {} values for d = {d}",
            data.len()
        );
        Inputs { d, data }
    }

    /// Points from rows; every row must have length d.
    pub fn from_rows(d: usize, rows: &[Vec<f64>]) -> Result<Inputs, AnchorError> {
        let mut data = Vec::with_capacity(rows.len() * d);
        for (i, r) in rows.iter().enumerate() {
            if r.len() != d {
                return Err(AnchorError::Shape {
                    what: format!("point {i}"),
                    expected: d,
                    got: r.len(),
                });
            }
            data.extend_from_slice(r);
        }
        Ok(Inputs { d, data })
    }

    /// Input dimension.
    pub fn d(&self) -> usize {
        self.d
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.data.len() / self.d
    }

    /// Whether there are no points.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Point i.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.d..(i + 1) * self.d]
    }

    /// All points.
    pub fn rows(&self) -> impl Iterator<Item = &[f64]> {
        self.data.chunks_exact(self.d)
    }

    /// The row-major buffer.
    pub fn as_slice(&self) -> &[f64] {
        &self.data
    }

    /// Rows as nested vectors (for JSON output).
    pub fn to_rows(&self) -> Vec<Vec<f64>> {
        self.rows().map(<[f64]>::to_vec).collect()
    }

    /// A copy with the rows in the order `perm` gives.
    pub fn permuted(&self, perm: &[usize]) -> Inputs {
        let mut data = Vec::with_capacity(self.data.len());
        for &i in perm {
            data.extend_from_slice(self.row(i));
        }
        Inputs { d: self.d, data }
    }

    /// Per-dimension (min, max).
    pub fn bounds(&self) -> Vec<(f64, f64)> {
        (0..self.d)
            .map(|j| {
                self.rows()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
                        (lo.min(r[j]), hi.max(r[j]))
                    })
            })
            .collect()
    }
}

/// A bound that is either one number for every dimension or one per dimension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a number (the same for every dimension) or a list with one number per dimension"
)]
pub enum Bound {
    /// The same value in every dimension.
    All(Num),
    /// One value per dimension.
    PerDim(Vec<Num>),
}

impl Bound {
    fn resolve(
        &self,
        d: usize,
        vars: &[(String, f64)],
        field: &str,
    ) -> Result<Vec<f64>, AnchorError> {
        let values = match self {
            Bound::All(n) => vec![n.eval(vars)?; d],
            Bound::PerDim(list) => {
                if list.len() != d {
                    return Err(AnchorError::invalid(
                        field,
                        format!("{} entries", list.len()),
                        format!("one number, or one per input dimension (d = {d})"),
                    ));
                }
                list.iter()
                    .map(|n| n.eval(vars))
                    .collect::<Result<_, _>>()?
            }
        };
        if let Some(v) = values.iter().find(|v| !v.is_finite()) {
            return Err(AnchorError::invalid(field, v, "a finite number"));
        }
        Ok(values)
    }
}

/// One box of a mixture design.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureComponent {
    /// Lower corner.
    pub low: Bound,
    /// Upper corner.
    pub high: Bound,
    /// Relative weight (default 1).
    #[serde(default)]
    pub weight: Option<Num>,
}

/// How a set of inputs is laid out (`train`, `test`, `validation` in a problem spec).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DesignSpec {
    /// `n` points uniform in the box [low, high] (drawn once per setting from the seed).
    Uniform {
        /// Number of points.
        n: Num,
        /// Lower corner.
        low: Bound,
        /// Upper corner.
        high: Bound,
    },
    /// A regular grid with `n` equidistant values per dimension on [low, high] (ends
    /// included): `n^d` points, the first dimension varying slowest. In 1-D, a linspace.
    Grid {
        /// Points per dimension.
        n: Num,
        /// Lower corner.
        low: Bound,
        /// Upper corner.
        high: Bound,
    },
    /// `n` points on the diagonal x_λ = (1−λ)·(from,…,from) + λ·(to,…,to), λ equidistant in
    /// [0, 1] ([000] E2's test design).
    Diagonal {
        /// Number of points.
        n: Num,
        /// Start value of every coordinate.
        from: Num,
        /// End value of every coordinate.
        to: Num,
    },
    /// `n` points from a mixture of uniform boxes, each chosen with probability proportional
    /// to its weight. Two disjoint boxes give a bimodal design with a gap.
    Mixture {
        /// Number of points.
        n: Num,
        /// The boxes.
        components: Vec<MixtureComponent>,
    },
    /// Explicit points, one list per point.
    Points {
        /// The points.
        points: Vec<Vec<f64>>,
    },
}

impl DesignSpec {
    /// Whether `self` and `other` draw their points from the same distribution (uniform in
    /// the same box, or the same mixture), whatever their number of points. Grids, diagonals
    /// and explicit points are laid out, not drawn: never.
    pub fn same_distribution(&self, other: &DesignSpec) -> bool {
        match (self, other) {
            (
                DesignSpec::Uniform { low, high, .. },
                DesignSpec::Uniform {
                    low: l2, high: h2, ..
                },
            ) => low == l2 && high == h2,
            (
                DesignSpec::Mixture { components, .. },
                DesignSpec::Mixture { components: c2, .. },
            ) => components == c2,
            _ => false,
        }
    }
}

/// Which part of the input space a test point lies in, relative to the training design.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Region {
    /// Inside the region the training inputs are drawn from.
    In,
    /// Inside the training inputs' bounding box but outside every region they are drawn from
    /// (a held-out block or the gap of a bimodal design).
    Gap,
    /// Outside the training inputs' bounding box (extrapolation).
    Out,
}

impl Region {
    /// `in`, `gap` or `out`.
    pub fn as_str(self) -> &'static str {
        match self {
            Region::In => "in",
            Region::Gap => "gap",
            Region::Out => "out",
        }
    }
}

/// A resolved design: the points, and (for 1-D-parametrised designs) their coordinate along
/// the design, used as the abscissa of band plots.
#[derive(Debug, Clone, PartialEq)]
pub struct Design {
    /// The points.
    pub inputs: Inputs,
    /// Position along the design: x for 1-D grids, λ for diagonals; `None` otherwise.
    pub coord: Option<(String, Vec<f64>)>,
    /// The boxes the points are drawn from (for region labels), when known.
    pub support: Vec<(Vec<f64>, Vec<f64>)>,
    /// For diagonals: the start and end points, to map λ to x.
    pub diagonal: Option<(f64, f64)>,
}

fn count(n: &Num, vars: &[(String, f64)], field: &str) -> Result<usize, AnchorError> {
    let v = n.eval(vars)?;
    if v.fract() != 0.0 || !(1.0..=1e8).contains(&v) {
        return Err(AnchorError::invalid(
            field,
            v,
            "a positive whole number of points (at most 1e8)",
        ));
    }
    Ok(v as usize)
}

fn check_box(low: &[f64], high: &[f64], field: &str) -> Result<(), AnchorError> {
    for (j, (l, h)) in low.iter().zip(high).enumerate() {
        if l >= h {
            return Err(AnchorError::invalid(
                format!("{field}.low/high"),
                format!("[{l}, {h}] in dimension {j}"),
                "a non-empty range: low < high",
            ));
        }
    }
    Ok(())
}

impl DesignSpec {
    /// Resolves the design in dimension `d`; random designs draw from `rng`.
    pub fn resolve(
        &self,
        d: usize,
        vars: &[(String, f64)],
        field: &str,
        rng: &mut Rng,
    ) -> Result<Design, AnchorError> {
        match self {
            DesignSpec::Uniform { n, low, high } => {
                let n = count(n, vars, &format!("{field}.n"))?;
                let low = low.resolve(d, vars, &format!("{field}.low"))?;
                let high = high.resolve(d, vars, &format!("{field}.high"))?;
                check_box(&low, &high, field)?;
                let mut data = Vec::with_capacity(n * d);
                for _ in 0..n {
                    for j in 0..d {
                        data.push(rng.uniform_in(low[j], high[j]));
                    }
                }
                Ok(Design {
                    inputs: Inputs::new(d, data),
                    coord: None,
                    support: vec![(low, high)],
                    diagonal: None,
                })
            }
            DesignSpec::Grid { n, low, high } => grid(n, low, high, d, vars, field),
            DesignSpec::Diagonal { n, from, to } => diagonal(n, from, to, d, vars, field),
            DesignSpec::Mixture { n, components } => mixture(n, components, d, vars, field, rng),
            DesignSpec::Points { points } => from_points(points, d, field),
        }
    }

    /// Whether this design draws random points (and so needs a seed).
    pub fn is_random(&self) -> bool {
        matches!(
            self,
            DesignSpec::Uniform { .. } | DesignSpec::Mixture { .. }
        )
    }
}

impl Design {
    /// A design of scattered points whose region is their bounding box: a test point outside
    /// it in some dimension is `out` (extrapolation), never `gap`.
    pub fn bounding_box(inputs: Inputs) -> Design {
        let (low, high) = inputs.bounds().into_iter().unzip();
        Design {
            support: vec![(low, high)],
            inputs,
            coord: None,
            diagonal: None,
        }
    }

    /// Region of `x` relative to this (training) design's support boxes.
    pub fn region_of(&self, x: &[f64]) -> Region {
        let inside = |(low, high): &(Vec<f64>, Vec<f64>)| {
            x.iter()
                .zip(low.iter().zip(high))
                .all(|(v, (l, h))| *v >= *l && *v <= *h)
        };
        if self.support.iter().any(inside) {
            return Region::In;
        }
        let d = x.len();
        let lo: Vec<f64> = (0..d)
            .map(|j| {
                self.support
                    .iter()
                    .map(|b| b.0[j])
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        let hi: Vec<f64> = (0..d)
            .map(|j| {
                self.support
                    .iter()
                    .map(|b| b.1[j])
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect();
        if inside(&(lo, hi)) {
            Region::Gap
        } else {
            Region::Out
        }
    }
}

/// A regular grid of `n` values per dimension on [low, high] (see [`DesignSpec::Grid`]).
fn grid(
    n: &Num,
    low: &Bound,
    high: &Bound,
    d: usize,
    vars: &[(String, f64)],
    field: &str,
) -> Result<Design, AnchorError> {
    let n = count(n, vars, &format!("{field}.n"))?;
    let low = low.resolve(d, vars, &format!("{field}.low"))?;
    let high = high.resolve(d, vars, &format!("{field}.high"))?;
    check_box(&low, &high, field)?;
    let total = n
        .checked_pow(d as u32)
        .filter(|&t| t <= 100_000_000)
        .ok_or_else(|| {
            AnchorError::invalid(
                format!("{field}.n"),
                n,
                format!("a grid of at most 1e8 points (n^d with d = {d})"),
            )
        })?;
    let axis = |j: usize, i: usize| {
        if n == 1 {
            low[j]
        } else {
            low[j] + (high[j] - low[j]) * i as f64 / (n - 1) as f64
        }
    };
    let mut data = Vec::with_capacity(total * d);
    for flat in 0..total {
        let mut rest = flat;
        let mut idx = vec![0usize; d];
        for j in (0..d).rev() {
            idx[j] = rest % n;
            rest /= n;
        }
        for (j, &i) in idx.iter().enumerate() {
            data.push(axis(j, i));
        }
    }
    let coord = (d == 1).then(|| ("x".to_string(), data.clone()));
    Ok(Design {
        inputs: Inputs::new(d, data),
        coord,
        support: vec![(low, high)],
        diagonal: None,
    })
}

/// `n` points on the diagonal from (from,…,from) to (to,…,to) (see [`DesignSpec::Diagonal`]).
fn diagonal(
    n: &Num,
    from: &Num,
    to: &Num,
    d: usize,
    vars: &[(String, f64)],
    field: &str,
) -> Result<Design, AnchorError> {
    let n = count(n, vars, &format!("{field}.n"))?;
    let from = from.eval(vars)?;
    let to = to.eval(vars)?;
    if !(from.is_finite() && to.is_finite()) || from == to {
        return Err(AnchorError::invalid(
            format!("{field}.from/to"),
            format!("{from} → {to}"),
            "two different finite numbers",
        ));
    }
    let lambdas: Vec<f64> = (0..n)
        .map(|i| {
            if n == 1 {
                0.0
            } else {
                i as f64 / (n - 1) as f64
            }
        })
        .collect();
    let data = lambdas
        .iter()
        .flat_map(|&l| std::iter::repeat_n((1.0 - l) * from + l * to, d))
        .collect();
    let (lo, hi) = (from.min(to), from.max(to));
    Ok(Design {
        inputs: Inputs::new(d, data),
        coord: Some(("lambda".to_string(), lambdas)),
        support: vec![(vec![lo; d], vec![hi; d])],
        diagonal: Some((from, to)),
    })
}

/// `n` points from a mixture of uniform boxes (see [`DesignSpec::Mixture`]).
fn mixture(
    n: &Num,
    components: &[MixtureComponent],
    d: usize,
    vars: &[(String, f64)],
    field: &str,
    rng: &mut Rng,
) -> Result<Design, AnchorError> {
    let n = count(n, vars, &format!("{field}.n"))?;
    if components.is_empty() {
        return Err(AnchorError::invalid(
            format!("{field}.components"),
            "[]",
            "at least one component box",
        ));
    }
    let mut boxes = Vec::new();
    let mut weights = Vec::new();
    for (i, c) in components.iter().enumerate() {
        let f = format!("{field}.components[{i}]");
        let low = c.low.resolve(d, vars, &format!("{f}.low"))?;
        let high = c.high.resolve(d, vars, &format!("{f}.high"))?;
        check_box(&low, &high, &f)?;
        let w = match &c.weight {
            Some(w) => w.eval(vars)?,
            None => 1.0,
        };
        if !(w.is_finite() && w > 0.0) {
            return Err(AnchorError::invalid(
                format!("{f}.weight"),
                w,
                "a positive number",
            ));
        }
        boxes.push((low, high));
        weights.push(w);
    }
    let total: f64 = weights.iter().sum();
    let mut data = Vec::with_capacity(n * d);
    for _ in 0..n {
        let u = rng.uniform() * total;
        let mut acc = 0.0;
        let mut k = boxes.len() - 1;
        for (i, w) in weights.iter().enumerate() {
            acc += w;
            if u < acc {
                k = i;
                break;
            }
        }
        let (low, high) = &boxes[k];
        for j in 0..d {
            data.push(rng.uniform_in(low[j], high[j]));
        }
    }
    Ok(Design {
        inputs: Inputs::new(d, data),
        coord: None,
        support: boxes,
        diagonal: None,
    })
}

/// Explicit points (see [`DesignSpec::Points`]).
fn from_points(points: &[Vec<f64>], d: usize, field: &str) -> Result<Design, AnchorError> {
    if points.is_empty() {
        return Err(AnchorError::invalid(
            format!("{field}.points"),
            "[]",
            "at least one point",
        ));
    }
    let inputs = Inputs::from_rows(d, points).map_err(|_| {
        AnchorError::invalid(
            format!("{field}.points"),
            format!(
                "{:?}",
                points.iter().find(|p| p.len() != d).unwrap_or(&vec![])
            ),
            format!("points with d = {d} coordinates each"),
        )
    })?;
    if let Some(v) = inputs.as_slice().iter().find(|v| !v.is_finite()) {
        return Err(AnchorError::invalid(
            format!("{field}.points"),
            v,
            "finite coordinates",
        ));
    }
    let coord = (d == 1).then(|| ("x".to_string(), inputs.as_slice().to_vec()));
    let b = inputs.bounds();
    Ok(Design {
        inputs,
        coord,
        support: vec![(
            b.iter().map(|x| x.0).collect(),
            b.iter().map(|x| x.1).collect(),
        )],
        diagonal: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_order_and_coord() {
        let spec = DesignSpec::Grid {
            n: 3.0.into(),
            low: Bound::All((-1.0).into()),
            high: Bound::All(1.0.into()),
        };
        let g = spec.resolve(2, &[], "test", &mut Rng::new(0)).unwrap();
        assert_eq!(g.inputs.len(), 9);
        assert_eq!(g.inputs.row(1), &[-1.0, 0.0]); // first dimension varies slowest
        assert_eq!(g.inputs.row(3), &[0.0, -1.0]);
        assert!(g.coord.is_none());
        let g1 = spec.resolve(1, &[], "test", &mut Rng::new(0)).unwrap();
        assert_eq!(g1.coord.unwrap().1, vec![-1.0, 0.0, 1.0]);
    }

    #[test]
    fn diagonal_and_regions() {
        let spec = DesignSpec::Diagonal {
            n: 11.0.into(),
            from: (-5.0).into(),
            to: 5.0.into(),
        };
        let g = spec.resolve(3, &[], "test", &mut Rng::new(0)).unwrap();
        assert_eq!(g.inputs.row(10), &[5.0, 5.0, 5.0]);
        assert_eq!(g.inputs.row(5), &[0.0, 0.0, 0.0]);
        let train = DesignSpec::Mixture {
            n: 100.0.into(),
            components: vec![
                MixtureComponent {
                    low: Bound::All((-0.5).into()),
                    high: Bound::All((-0.2).into()),
                    weight: None,
                },
                MixtureComponent {
                    low: Bound::All(0.2.into()),
                    high: Bound::All(0.5.into()),
                    weight: None,
                },
            ],
        }
        .resolve(1, &[], "train", &mut Rng::new(1))
        .unwrap();
        assert!(train
            .inputs
            .rows()
            .all(|r| r[0].abs() >= 0.2 && r[0].abs() <= 0.5));
        assert_eq!(train.region_of(&[0.3]), Region::In);
        assert_eq!(train.region_of(&[0.0]), Region::Gap);
        assert_eq!(train.region_of(&[0.7]), Region::Out);
    }

    #[test]
    fn empty_range_is_an_error() {
        let spec = DesignSpec::Uniform {
            n: 10.0.into(),
            low: Bound::All(4.0.into()),
            high: Bound::All(4.0.into()),
        };
        let err = spec
            .resolve(1, &[], "problem.train", &mut Rng::new(0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("problem.train") && err.contains("low < high"),
            "{err}"
        );
        let spec = DesignSpec::Uniform {
            n: 0.5.into(),
            low: Bound::All(0.0.into()),
            high: Bound::All(1.0.into()),
        };
        let err = spec
            .resolve(1, &[], "problem.train", &mut Rng::new(0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("problem.train.n = 0.5"), "{err}");
    }
}
