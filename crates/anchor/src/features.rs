//! Feature maps G: R^d → R^p, built from a small library of declarable terms.
//!
//! A spec lists feature *families* ([`FeatureSpec`]); each expands, for a given setting, into
//! one or more [`Term`]s. The feature map is the concatenation of all terms, in order.

use std::f64::consts::TAU;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::error::AnchorError;
use crate::expr::Num;

/// One family of features as written in a spec (`[[problem.features]]`, tagged by `kind`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FeatureSpec {
    /// The constant 1 (an intercept).
    Const,
    /// One monomial ∏_j x_j^{powers[j]}; `powers` has one entry per input dimension.
    Monomial {
        /// Exponent of each input dimension (non-negative integers).
        powers: Vec<Num>,
    },
    /// Every monomial in the d inputs of total degree `min_degree..=degree`, graded
    /// lexicographic order (1, x1, x2, x1², x1·x2, x2², …).
    Polynomial {
        /// Highest total degree.
        degree: Num,
        /// Lowest total degree (default 0, which includes the constant).
        #[serde(default)]
        min_degree: Option<Num>,
    },
    /// For each input dimension j (all, or those listed in `dims`, 0-based), x_j^k for every k
    /// in `powers`. Styblinski–Tang is `powers = [1, 2, 4]`.
    Powers {
        /// Exponents (positive integers).
        powers: Vec<Num>,
        /// Dimensions to use (0-based); all when omitted.
        #[serde(default)]
        dims: Option<Vec<usize>>,
    },
    /// The Styblinski–Tang basis of [000] E2: (x_j, x_j², x_j⁴) for every dimension j.
    StyblinskiTang,
    /// sin(2π·freq·x_dim + phase).
    Sin {
        /// Input dimension (0-based, default 0).
        #[serde(default)]
        dim: usize,
        /// Frequency (cycles per unit of x).
        freq: Num,
        /// Phase in radians (default 0).
        #[serde(default)]
        phase: Option<Num>,
    },
    /// cos(2π·freq·x_dim + phase).
    Cos {
        /// Input dimension (0-based, default 0).
        #[serde(default)]
        dim: usize,
        /// Frequency (cycles per unit of x).
        freq: Num,
        /// Phase in radians (default 0).
        #[serde(default)]
        phase: Option<Num>,
    },
    /// `count` sinusoids sin(2π f_j x_dim + ρ_j) with f_j equally spaced over `freq = [lo, hi]`
    /// and ρ_j equally spaced over `phase = [lo, hi]` (both ends included). [000] E1 is
    /// `count = 4, freq = ["0.9*f_main", "1.1*f_main"], phase = [0, "2*pi"]`.
    Sinusoids {
        /// Number of sinusoids.
        count: Num,
        /// Input dimension (0-based, default 0).
        #[serde(default)]
        dim: usize,
        /// First and last frequency.
        freq: [Num; 2],
        /// First and last phase (radians).
        phase: [Num; 2],
    },
    /// The product of `factors`, each of which must expand to exactly one term.
    Product {
        /// The factors.
        factors: Vec<FeatureSpec>,
    },
}

/// One resolved feature: a function R^d → R.
#[derive(Debug, Clone, PartialEq)]
pub enum Term {
    /// The constant 1.
    Const,
    /// ∏_j x_j^{powers[j]}.
    Monomial(Vec<u32>),
    /// sin(2π·freq·x_dim + phase).
    Sin {
        /// Input dimension.
        dim: usize,
        /// Frequency.
        freq: f64,
        /// Phase.
        phase: f64,
    },
    /// cos(2π·freq·x_dim + phase).
    Cos {
        /// Input dimension.
        dim: usize,
        /// Frequency.
        freq: f64,
        /// Phase.
        phase: f64,
    },
    /// Product of terms.
    Product(Vec<Term>),
}

impl Term {
    /// The term's value at `x` (length d).
    pub fn eval(&self, x: &[f64]) -> f64 {
        match self {
            Term::Const => 1.0,
            Term::Monomial(powers) => powers
                .iter()
                .zip(x)
                .map(|(&k, &xi)| if k == 0 { 1.0 } else { xi.powi(k as i32) })
                .product(),
            Term::Sin { dim, freq, phase } => (TAU * freq * x[*dim] + phase).sin(),
            Term::Cos { dim, freq, phase } => (TAU * freq * x[*dim] + phase).cos(),
            Term::Product(factors) => factors.iter().map(|t| t.eval(x)).product(),
        }
    }

    /// A readable name, e.g. `x1^2*x2` or `sin(2pi*1.9*x1+3.1416)` (dimensions 1-based).
    pub fn name(&self) -> String {
        match self {
            Term::Const => "1".to_string(),
            Term::Monomial(powers) => {
                let mut s = String::new();
                for (j, &k) in powers.iter().enumerate() {
                    if k == 0 {
                        continue;
                    }
                    if !s.is_empty() {
                        s.push('*');
                    }
                    let _ = write!(s, "x{}", j + 1);
                    if k > 1 {
                        let _ = write!(s, "^{k}");
                    }
                }
                if s.is_empty() {
                    "1".to_string()
                } else {
                    s
                }
            }
            Term::Sin { dim, freq, phase } => {
                format!("sin(2pi*{freq:.6}*x{}+{phase:.6})", dim + 1)
            }
            Term::Cos { dim, freq, phase } => {
                format!("cos(2pi*{freq:.6}*x{}+{phase:.6})", dim + 1)
            }
            Term::Product(f) => f.iter().map(Term::name).collect::<Vec<_>>().join("*"),
        }
    }

    fn max_dim(&self) -> Option<usize> {
        match self {
            Term::Const => None,
            Term::Monomial(p) => p.iter().rposition(|&k| k > 0),
            Term::Sin { dim, .. } | Term::Cos { dim, .. } => Some(*dim),
            Term::Product(f) => f.iter().filter_map(Term::max_dim).max(),
        }
    }
}

/// The resolved feature map: G(x) = (t_1(x), …, t_p(x)).
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureMap {
    d: usize,
    terms: Vec<Term>,
}

impl FeatureMap {
    /// A feature map from explicit terms; errors if a term reads a dimension ≥ d.
    pub fn new(d: usize, terms: Vec<Term>) -> Result<FeatureMap, AnchorError> {
        if terms.is_empty() {
            return Err(AnchorError::invalid(
                "problem.features",
                "[]",
                "at least one feature",
            ));
        }
        for t in &terms {
            if let Some(dim) = t.max_dim() {
                if dim >= d {
                    return Err(AnchorError::invalid(
                        "problem.features",
                        t.name(),
                        format!("features may only use dimensions 0..{d} (d = {d}, 0-based)"),
                    ));
                }
            }
        }
        Ok(FeatureMap { d, terms })
    }

    /// Expands spec families for a problem with input dimension `d` and setting variables
    /// `vars`.
    pub fn from_specs(
        specs: &[FeatureSpec],
        d: usize,
        vars: &[(String, f64)],
    ) -> Result<FeatureMap, AnchorError> {
        let mut terms = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            expand(spec, d, vars, &format!("problem.features[{i}]"), &mut terms)?;
        }
        FeatureMap::new(d, terms)
    }

    /// Input dimension d.
    pub fn d(&self) -> usize {
        self.d
    }

    /// Number of features p.
    pub fn p(&self) -> usize {
        self.terms.len()
    }

    /// The terms.
    pub fn terms(&self) -> &[Term] {
        &self.terms
    }

    /// G(x) written into `out` (length p).
    pub fn eval_into(&self, x: &[f64], out: &mut [f64]) {
        for (o, t) in out.iter_mut().zip(&self.terms) {
            *o = t.eval(x);
        }
    }

    /// G(x)ᵀγ.
    pub fn dot(&self, x: &[f64], gamma: &[f64]) -> f64 {
        self.terms
            .iter()
            .zip(gamma)
            .map(|(t, g)| t.eval(x) * g)
            .sum()
    }
}

fn int_of(num: &Num, vars: &[(String, f64)], field: &str, min: i64) -> Result<u32, AnchorError> {
    let v = num.eval(vars)?;
    if v.fract() != 0.0 || v < min as f64 || v > 1e6 {
        return Err(AnchorError::invalid(
            field,
            v,
            format!("an integer ≥ {min}"),
        ));
    }
    Ok(v as u32)
}

fn finite(num: &Num, vars: &[(String, f64)], field: &str) -> Result<f64, AnchorError> {
    let v = num.eval(vars)?;
    if !v.is_finite() {
        return Err(AnchorError::invalid(field, v, "a finite number"));
    }
    Ok(v)
}

fn linspace(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    match n {
        0 => vec![],
        1 => vec![lo],
        _ => (0..n)
            .map(|i| lo + (hi - lo) * i as f64 / (n - 1) as f64)
            .collect(),
    }
}

fn expand(
    spec: &FeatureSpec,
    d: usize,
    vars: &[(String, f64)],
    field: &str,
    out: &mut Vec<Term>,
) -> Result<(), AnchorError> {
    let check_dim = |dim: usize| {
        if dim >= d {
            Err(AnchorError::invalid(
                format!("{field}.dim"),
                dim,
                format!("a dimension in 0..{d} (0-based; the problem has d = {d})"),
            ))
        } else {
            Ok(())
        }
    };
    match spec {
        FeatureSpec::Const => out.push(Term::Const),
        FeatureSpec::Monomial { powers } => {
            if powers.len() != d {
                return Err(AnchorError::invalid(
                    format!("{field}.powers"),
                    format!("{} entries", powers.len()),
                    format!("one exponent per input dimension (d = {d})"),
                ));
            }
            let p = powers
                .iter()
                .enumerate()
                .map(|(j, k)| int_of(k, vars, &format!("{field}.powers[{j}]"), 0))
                .collect::<Result<Vec<_>, _>>()?;
            out.push(Term::Monomial(p));
        }
        FeatureSpec::Polynomial { degree, min_degree } => {
            polynomial(degree, min_degree.as_ref(), d, vars, field, out)?
        }
        FeatureSpec::Powers { powers, dims } => {
            let dims: Vec<usize> = match dims {
                Some(list) => list.clone(),
                None => (0..d).collect(),
            };
            for &j in &dims {
                check_dim(j)?;
            }
            axis_powers(powers, &dims, d, vars, field, out)?
        }
        FeatureSpec::StyblinskiTang => {
            for j in 0..d {
                for k in [1, 2, 4] {
                    let mut p = vec![0u32; d];
                    p[j] = k;
                    out.push(Term::Monomial(p));
                }
            }
        }
        FeatureSpec::Sin { dim, freq, phase } | FeatureSpec::Cos { dim, freq, phase } => {
            check_dim(*dim)?;
            let freq = finite(freq, vars, &format!("{field}.freq"))?;
            let phase = match phase {
                Some(p) => finite(p, vars, &format!("{field}.phase"))?,
                None => 0.0,
            };
            out.push(if matches!(spec, FeatureSpec::Sin { .. }) {
                Term::Sin {
                    dim: *dim,
                    freq,
                    phase,
                }
            } else {
                Term::Cos {
                    dim: *dim,
                    freq,
                    phase,
                }
            });
        }
        FeatureSpec::Sinusoids {
            count,
            dim,
            freq,
            phase,
        } => {
            check_dim(*dim)?;
            let n = int_of(count, vars, &format!("{field}.count"), 1)? as usize;
            let f0 = finite(&freq[0], vars, &format!("{field}.freq[0]"))?;
            let f1 = finite(&freq[1], vars, &format!("{field}.freq[1]"))?;
            let p0 = finite(&phase[0], vars, &format!("{field}.phase[0]"))?;
            let p1 = finite(&phase[1], vars, &format!("{field}.phase[1]"))?;
            for (f, p) in linspace(f0, f1, n).into_iter().zip(linspace(p0, p1, n)) {
                out.push(Term::Sin {
                    dim: *dim,
                    freq: f,
                    phase: p,
                });
            }
        }
        FeatureSpec::Product { factors } => product(factors, d, vars, field, out)?,
    }
    Ok(())
}

/// `polynomial`: every monomial of total degree min_degree..=degree.
fn polynomial(
    degree: &Num,
    min_degree: Option<&Num>,
    d: usize,
    vars: &[(String, f64)],
    field: &str,
    out: &mut Vec<Term>,
) -> Result<(), AnchorError> {
    let deg = int_of(degree, vars, &format!("{field}.degree"), 0)?;
    let min = match min_degree {
        Some(m) => int_of(m, vars, &format!("{field}.min_degree"), 0)?,
        None => 0,
    };
    if min > deg {
        return Err(AnchorError::invalid(
            format!("{field}.min_degree"),
            min,
            format!("at most degree = {deg}"),
        ));
    }
    for total in min..=deg {
        let mut powers = vec![0u32; d];
        graded(&mut powers, 0, total, out);
    }
    Ok(())
}

/// `powers`: x_j^k for every k of `powers` and every dimension j of `dims` (checked).
fn axis_powers(
    powers: &[Num],
    dims: &[usize],
    d: usize,
    vars: &[(String, f64)],
    field: &str,
    out: &mut Vec<Term>,
) -> Result<(), AnchorError> {
    let ks = powers
        .iter()
        .enumerate()
        .map(|(i, k)| int_of(k, vars, &format!("{field}.powers[{i}]"), 1))
        .collect::<Result<Vec<_>, _>>()?;
    if ks.is_empty() {
        return Err(AnchorError::invalid(
            format!("{field}.powers"),
            "[]",
            "at least one exponent",
        ));
    }
    for &j in dims {
        for &k in &ks {
            let mut p = vec![0u32; d];
            p[j] = k;
            out.push(Term::Monomial(p));
        }
    }
    Ok(())
}

/// `product`: the product of factors that expand to one term each.
fn product(
    factors: &[FeatureSpec],
    d: usize,
    vars: &[(String, f64)],
    field: &str,
    out: &mut Vec<Term>,
) -> Result<(), AnchorError> {
    if factors.is_empty() {
        return Err(AnchorError::invalid(
            format!("{field}.factors"),
            "[]",
            "at least one factor",
        ));
    }
    let mut terms = Vec::new();
    for (i, f) in factors.iter().enumerate() {
        let mut one = Vec::new();
        let sub = format!("{field}.factors[{i}]");
        expand(f, d, vars, &sub, &mut one)?;
        if one.len() != 1 {
            return Err(AnchorError::invalid(
                sub,
                format!("{} terms", one.len()),
                "a factor that expands to exactly one term",
            ));
        }
        terms.extend(one);
    }
    out.push(Term::Product(terms));
    Ok(())
}

/// Pushes every monomial of total degree `remaining` over dimensions `j..` (d ≥ 1), in
/// graded lexicographic order (higher powers of earlier dimensions first).
fn graded(powers: &mut Vec<u32>, j: usize, remaining: u32, out: &mut Vec<Term>) {
    if j + 1 == powers.len() {
        powers[j] = remaining;
        out.push(Term::Monomial(powers.clone()));
        return;
    }
    for k in (0..=remaining).rev() {
        powers[j] = k;
        graded(powers, j + 1, remaining - k, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(map: &FeatureMap) -> Vec<String> {
        map.terms().iter().map(Term::name).collect()
    }

    #[test]
    fn polynomial_degree_two_in_two_dims() {
        let map = FeatureMap::from_specs(
            &[FeatureSpec::Polynomial {
                degree: 2.0.into(),
                min_degree: None,
            }],
            2,
            &[],
        )
        .unwrap();
        assert_eq!(names(&map), ["1", "x1", "x2", "x1^2", "x1*x2", "x2^2"]);
        let mut g = vec![0.0; 6];
        map.eval_into(&[2.0, 3.0], &mut g);
        assert_eq!(g, [1.0, 2.0, 3.0, 4.0, 6.0, 9.0]);
    }

    #[test]
    fn styblinski_tang_and_sinusoids() {
        let st = FeatureMap::from_specs(&[FeatureSpec::StyblinskiTang], 2, &[]).unwrap();
        assert_eq!(names(&st), ["x1", "x1^2", "x1^4", "x2", "x2^2", "x2^4"]);
        let vars = vec![("f_main".to_string(), 2.0)];
        let sin = FeatureMap::from_specs(
            &[FeatureSpec::Sinusoids {
                count: 4.0.into(),
                dim: 0,
                freq: [
                    Num::Expr("0.9*f_main".into()),
                    Num::Expr("1.1*f_main".into()),
                ],
                phase: [0.0.into(), Num::Expr("2*pi".into())],
            }],
            1,
            &vars,
        )
        .unwrap();
        let Term::Sin { freq, phase, .. } = &sin.terms()[1] else {
            panic!()
        };
        assert!((freq - (1.8 + 0.4 / 3.0)).abs() < 1e-12);
        assert!((phase - std::f64::consts::TAU / 3.0).abs() < 1e-12);
        // sin(2π f x + ρ) at x = 0.25 for the last term (f = 2.2, ρ = 2π).
        let mut g = vec![0.0; 4];
        sin.eval_into(&[0.25], &mut g);
        assert!((g[3] - (std::f64::consts::TAU * 2.2 * 0.25).sin()).abs() < 1e-12);
    }

    #[test]
    fn product_and_errors() {
        let spec = FeatureSpec::Product {
            factors: vec![
                FeatureSpec::Monomial {
                    powers: vec![1.0.into(), 0.0.into()],
                },
                FeatureSpec::Cos {
                    dim: 1,
                    freq: 1.0.into(),
                    phase: None,
                },
            ],
        };
        let map = FeatureMap::from_specs(&[spec], 2, &[]).unwrap();
        assert!(
            (map.dot(&[2.0, 0.5], &[3.0]) - 3.0 * 2.0 * (std::f64::consts::PI).cos()).abs() < 1e-12
        );

        let err = FeatureMap::from_specs(
            &[FeatureSpec::Sin {
                dim: 1,
                freq: 1.0.into(),
                phase: None,
            }],
            1,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("dim") && err.contains("d = 1"), "{err}");
        let err = FeatureMap::from_specs(
            &[FeatureSpec::Product {
                factors: vec![FeatureSpec::StyblinskiTang],
            }],
            1,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("3 terms"), "{err}");
        let err = FeatureMap::from_specs(&[], 1, &[]).unwrap_err().to_string();
        assert!(err.contains("at least one feature"), "{err}");
    }
}
