//! Simulations from a real data set ([004] §5.5): a random forest fitted to the data is the
//! true f, a second forest fitted to the squared out-of-bag residuals is the true σ²(x), the
//! real inputs are kept and every repetition draws new targets y ~ N(f(x), σ²(x)).
//!
//! There is no anchor for such a problem (f is not linear in known features); its summaries
//! use the known f and σ(x): CICF against f, PICF exactly from N(f, σ²).
//!
//! Choices, where [004] is silent or its words leave room:
//! - **Forests**: smartcore's `RandomForestRegressor`, 100 trees of depth ≤ 15 ([004]'s
//!   numbers), every feature a split candidate at every node (`max_features` = d, which is
//!   scikit-learn's default for regression, the library [004] used; smartcore's own default
//!   is ⌊√d⌋), bootstrap resamples of size N, seeds derived from the experiment's seed.
//! - **σ² from out-of-bag residuals**: [004] fits the second forest on "the residuals"; a
//!   depth-15 forest nearly interpolates its own training data, so in-sample residuals would
//!   make σ² several times too small. Each row's residual is taken against the trees that did
//!   not see it (out-of-bag), an honest estimate of the noise at that row.
//! - **Units**: with `standardize = true` (default) the covariates and the target are
//!   standardised by the data set's mean and sd before the forests are fitted. Trees are
//!   invariant to a per-feature affine map, so f and σ are those of the raw data in standard
//!   units (multiply widths by the target's sd, reported by `uqbench check`, for the data's
//!   units). The nets then see inputs and targets of order one, as the protocol of
//!   Hernández-Lobato & Adams (2015) that [004] builds on normalises them.
//! - **Split**: one permutation of the rows, drawn once from the seed, fixes the training,
//!   validation and test rows for every repetition ([004]: 366 / 40 / 100 for the 506 Boston
//!   rows). Pointwise coverage needs the same test inputs in every simulation.

use std::path::Path;

use serde::{Deserialize, Serialize};
use smartcore::ensemble::random_forest_regressor::{
    RandomForestRegressor, RandomForestRegressorParameters,
};
use smartcore::linalg::basic::matrix::DenseMatrix;

use crate::error::AnchorError;
use crate::seed::Rng;

/// `[surrogate]` in a spec: the data set, the forests and the split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SurrogateSpec {
    /// CSV file with a header row of column names and numeric values (relative paths are
    /// resolved from the current directory: run uqbench from the repository root).
    pub data: String,
    /// The target column.
    pub target: String,
    /// Columns left out of the covariates.
    #[serde(default)]
    pub drop: Vec<String>,
    /// Rows per part; their sum may not exceed the data's rows.
    pub split: SplitSpec,
    /// The two forests.
    #[serde(default)]
    pub forest: ForestSpec,
    /// Standardise covariates and target by the data's mean and sd (default true).
    #[serde(default = "yes")]
    pub standardize: bool,
}

fn yes() -> bool {
    true
}

/// Rows of the training, validation and test parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitSpec {
    /// Training rows.
    pub train: usize,
    /// Validation rows (0 for none).
    #[serde(default)]
    pub validation: usize,
    /// Test rows.
    pub test: usize,
}

/// Random-forest settings (both forests use them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForestSpec {
    /// Trees per forest.
    #[serde(default = "default_trees")]
    pub trees: usize,
    /// Maximum depth of a tree.
    #[serde(default = "default_depth")]
    pub max_depth: u16,
    /// Split candidates per node; `None` means every covariate (scikit-learn's regression
    /// default).
    #[serde(default)]
    pub max_features: Option<usize>,
    /// Minimum rows in a leaf.
    #[serde(default = "default_leaf")]
    pub min_samples_leaf: usize,
}

fn default_trees() -> usize {
    100
}
fn default_depth() -> u16 {
    15
}
fn default_leaf() -> usize {
    1
}

impl Default for ForestSpec {
    fn default() -> Self {
        ForestSpec {
            trees: default_trees(),
            max_depth: default_depth(),
            max_features: None,
            min_samples_leaf: default_leaf(),
        }
    }
}

/// A numeric table read from a CSV file.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Column names, from the header row.
    pub columns: Vec<String>,
    /// Rows, each with one value per column.
    pub rows: Vec<Vec<f64>>,
}

impl Table {
    /// Reads `path`: a header row, then one row of numbers per line (comma separated, blank
    /// lines ignored). A missing or non-numeric value is an error naming the file, line and
    /// column.
    pub fn read_csv(path: &Path) -> Result<Table, AnchorError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            AnchorError::invalid(
                "surrogate.data",
                path.display(),
                format!(
                    "a readable CSV file ({e}; relative paths are resolved from the current \
                     directory {})",
                    std::env::current_dir()
                        .map(|d| d.display().to_string())
                        .unwrap_or_default()
                ),
            )
        })?;
        Self::parse_csv(&text, &path.display().to_string())
    }

    /// Parses CSV text (RFC 4180 through the `csv` crate: quoted fields may hold commas);
    /// `file` names it in errors, with the line of the record.
    pub fn parse_csv(text: &str, file: &str) -> Result<Table, AnchorError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let bad = |line: u64, e: csv::Error| {
            AnchorError::invalid(
                format!("{file}, line {line}"),
                e.to_string(),
                "well-formed CSV (a header row, then one record per line)",
            )
        };
        let mut records = reader.records().filter(|r| {
            // Blank lines carry no data (the csv crate skips them already; a lone comma-free
            // blank field is the same).
            r.as_ref()
                .map_or(true, |r| !(r.len() == 1 && r[0].is_empty()))
        });
        let Some(header) = records.next() else {
            return Err(AnchorError::invalid(
                "surrogate.data",
                file,
                "a CSV file with a header row and at least one data row (the file is empty)",
            ));
        };
        let header = header.map_err(|e| bad(1, e))?;
        let columns: Vec<String> = header.iter().map(str::to_string).collect();
        let mut rows = Vec::new();
        for record in records {
            let record = record.map_err(|e| bad(e.position().map_or(0, |p| p.line()), e))?;
            let line = record.position().map_or(0, |p| p.line());
            if record.len() != columns.len() {
                return Err(AnchorError::invalid(
                    format!("{file}, line {line}"),
                    format!("{} fields", record.len()),
                    format!("{} fields, one per header column", columns.len()),
                ));
            }
            let mut row = Vec::with_capacity(record.len());
            for (field, column) in record.iter().zip(&columns) {
                let v: f64 = field
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite())
                    .ok_or_else(|| {
                        AnchorError::invalid(
                            format!("{file}, line {line}, column {column}"),
                            if field.is_empty() {
                                "an empty field".to_string()
                            } else {
                                format!("`{field}`")
                            },
                            "a finite number (missing values are not allowed: remove or impute \
                         the row)",
                        )
                    })?;
                row.push(v);
            }
            rows.push(row);
        }
        if rows.is_empty() {
            return Err(AnchorError::invalid(
                "surrogate.data",
                file,
                "a CSV file with at least one data row after the header",
            ));
        }
        Ok(Table { columns, rows })
    }

    fn column(&self, name: &str, field: &str) -> Result<usize, AnchorError> {
        self.columns.iter().position(|c| c == name).ok_or_else(|| {
            AnchorError::invalid(
                field,
                format!("`{name}`"),
                format!("a column of the data: {}", self.columns.join(", ")),
            )
        })
    }
}

/// The data set with its fitted truth, before the split.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// Covariate names, in column order.
    pub covariates: Vec<String>,
    /// Covariates `[rows, d]` row-major (standardised when asked).
    pub x: Vec<f64>,
    /// The observed target (standardised when asked).
    pub y: Vec<f64>,
    /// f at every row: the first forest's prediction.
    pub f: Vec<f64>,
    /// σ(x) at every row: the square root of the second forest's prediction.
    pub sigma: Vec<f64>,
    /// The target's mean and sd in the data's units (the standardisation; (0, 1) without).
    pub target_scale: (f64, f64),
    /// Out-of-bag R² of the first forest: how much of the target's variance f explains.
    pub oob_r2: f64,
}

impl Fitted {
    /// Number of covariates.
    pub fn d(&self) -> usize {
        self.covariates.len()
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.y.len()
    }
}

fn moments(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = values.clone().count() as f64;
    let mean = values.clone().sum::<f64>() / n;
    let var = values.map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// Fits the surrogate truth of `spec` to `table`; `seeds` gives the two forests' seeds.
pub fn fit(spec: &SurrogateSpec, table: &Table, seeds: (u64, u64)) -> Result<Fitted, AnchorError> {
    let (t, keep) = covariates(spec, table)?;
    let rows = table.rows.len();
    let forest = spec.forest;
    let (d, m) = (keep.len(), forest_features(&forest, keep.len())?);
    let (columns, y, target_scale) = scaled(spec, table, t, &keep)?;
    let x: Vec<f64> = (0..rows)
        .flat_map(|i| columns.iter().map(move |c| c[i]))
        .collect();
    let matrix = DenseMatrix::new(rows, d, x.clone(), false);
    let params = |seed: u64, keep_samples: bool| RandomForestRegressorParameters {
        max_depth: Some(forest.max_depth),
        min_samples_leaf: forest.min_samples_leaf,
        min_samples_split: 2,
        n_trees: forest.trees,
        m: Some(m),
        keep_samples,
        seed,
    };
    let failed = |what: &str, e: smartcore::error::Failed| {
        AnchorError::invalid(
            "surrogate.forest",
            format!("{what}: {e}"),
            "a forest the data can fit",
        )
    };
    let mean_forest = RandomForestRegressor::fit(&matrix, &y, params(seeds.0, true))
        .map_err(|e| failed("fitting f", e))?;
    let f: Vec<f64> = mean_forest
        .predict(&matrix)
        .map_err(|e| failed("predicting f", e))?;
    let oob: Vec<f64> = mean_forest
        .predict_oob(&matrix)
        .map_err(|e| failed("out-of-bag predictions", e))?;
    // A row that every tree saw has no out-of-bag prediction (smartcore returns 0/0); with
    // B trees that happens with probability (1 − (1 − 1/N)^N)^B ≈ 0.632^B.
    if let Some(i) = oob.iter().position(|v| !v.is_finite()) {
        return Err(AnchorError::invalid(
            "surrogate.forest.trees",
            forest.trees,
            format!(
                "enough trees that every row is out of bag for some tree (row {} never is)",
                i + 1
            ),
        ));
    }
    let r2: Vec<f64> = y.iter().zip(&oob).map(|(y, o)| (y - o).powi(2)).collect();
    let var_forest = RandomForestRegressor::fit(&matrix, &r2, params(seeds.1, false))
        .map_err(|e| failed("fitting σ²", e))?;
    let var: Vec<f64> = var_forest
        .predict(&matrix)
        .map_err(|e| failed("predicting σ²", e))?;
    let mut sigma = Vec::with_capacity(rows);
    for (i, v) in var.iter().enumerate() {
        // The forest averages squared residuals, so σ² ≥ 0; it is 0 only where every leaf
        // reached holds exact fits, which a noisy target makes (almost surely) impossible.
        if !(v.is_finite() && *v > 0.0) {
            return Err(AnchorError::invalid(
                format!("surrogate σ²(x) at row {}", i + 1),
                v,
                "a positive variance (the data fit exactly there: add noise or fewer, shallower \
                 trees)",
            ));
        }
        sigma.push(v.sqrt());
    }
    let (_, y_sd) = moments(y.iter().copied());
    let oob_mse = r2.iter().sum::<f64>() / rows as f64;
    Ok(Fitted {
        covariates: keep.iter().map(|&j| table.columns[j].clone()).collect(),
        x,
        y,
        f,
        sigma,
        target_scale,
        oob_r2: 1.0 - oob_mse / (y_sd * y_sd),
    })
}

/// The target's column and the covariates' columns (every other column not dropped).
fn covariates(spec: &SurrogateSpec, table: &Table) -> Result<(usize, Vec<usize>), AnchorError> {
    let t = table.column(&spec.target, "surrogate.target")?;
    for (i, name) in spec.drop.iter().enumerate() {
        let j = table.column(name, &format!("surrogate.drop[{i}]"))?;
        if j == t {
            return Err(AnchorError::invalid(
                format!("surrogate.drop[{i}]"),
                format!("`{name}`"),
                "a covariate column (this is the target)",
            ));
        }
    }
    let keep: Vec<usize> = (0..table.columns.len())
        .filter(|&j| j != t && !spec.drop.contains(&table.columns[j]))
        .collect();
    if keep.is_empty() {
        return Err(AnchorError::invalid(
            "surrogate.drop",
            format!("{:?}", spec.drop),
            "a list that leaves at least one covariate",
        ));
    }
    Ok((t, keep))
}

/// Checks the forest's settings; returns the split candidates per node m for `d` covariates.
fn forest_features(forest: &ForestSpec, d: usize) -> Result<usize, AnchorError> {
    if forest.trees == 0 || forest.max_depth == 0 || forest.min_samples_leaf == 0 {
        return Err(AnchorError::invalid(
            "surrogate.forest",
            format!(
                "trees = {}, max_depth = {}, min_samples_leaf = {}",
                forest.trees, forest.max_depth, forest.min_samples_leaf
            ),
            "positive whole numbers",
        ));
    }
    let m = forest.max_features.unwrap_or(d);
    if m == 0 || m > d {
        return Err(AnchorError::invalid(
            "surrogate.forest.max_features",
            m,
            format!("between 1 and the number of covariates, {d}"),
        ));
    }
    Ok(m)
}

/// The covariates (one column each) and the target, standardised when the spec asks, with
/// the target's (mean, sd) (`(0, 1)` when not standardised).
#[allow(clippy::type_complexity)]
fn scaled(
    spec: &SurrogateSpec,
    table: &Table,
    t: usize,
    keep: &[usize],
) -> Result<(Vec<Vec<f64>>, Vec<f64>, (f64, f64)), AnchorError> {
    let mut columns: Vec<Vec<f64>> = keep
        .iter()
        .map(|&j| table.rows.iter().map(|r| r[j]).collect())
        .collect();
    let mut y: Vec<f64> = table.rows.iter().map(|r| r[t]).collect();
    let mut target_scale = (0.0, 1.0);
    if spec.standardize {
        for (col, &j) in columns.iter_mut().zip(keep) {
            let (mean, sd) = moments(col.iter().copied());
            if sd.is_nan() || sd <= 0.0 {
                return Err(AnchorError::invalid(
                    format!("surrogate.data column {}", table.columns[j]),
                    "a constant column",
                    "a covariate that varies (leave it out with `drop`)",
                ));
            }
            col.iter_mut().for_each(|v| *v = (*v - mean) / sd);
        }
        let (mean, sd) = moments(y.iter().copied());
        if sd.is_nan() || sd <= 0.0 {
            return Err(AnchorError::invalid(
                "surrogate.target",
                format!("`{}` (constant)", spec.target),
                "a target that varies",
            ));
        }
        y.iter_mut().for_each(|v| *v = (*v - mean) / sd);
        target_scale = (mean, sd);
    }
    Ok((columns, y, target_scale))
}

/// Row indices of the training, validation and test parts.
pub type Parts = (Vec<usize>, Vec<usize>, Vec<usize>);

/// The split of `rows` rows into (train, validation, test) row indices: one permutation
/// drawn from `rng`, cut in that order.
pub fn split(spec: &SplitSpec, rows: usize, rng: &mut Rng) -> Result<Parts, AnchorError> {
    let total = spec.train + spec.validation + spec.test;
    if spec.train < 2 || spec.test == 0 || total > rows {
        return Err(AnchorError::invalid(
            "surrogate.split",
            format!(
                "train = {}, validation = {}, test = {}",
                spec.train, spec.validation, spec.test
            ),
            format!(
                "at least 2 training rows and 1 test row, together with the validation rows \
                 at most the data's {rows} rows"
            ),
        ));
    }
    let mut order: Vec<usize> = (0..rows).collect();
    for i in (1..rows).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let validation_end = spec.train + spec.validation;
    Ok((
        order[..spec.train].to_vec(),
        order[spec.train..validation_end].to_vec(),
        order[validation_end..total].to_vec(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(data: &str) -> SurrogateSpec {
        toml::from_str(&format!(
            "data = \"{data}\"\ntarget = \"y\"\nsplit = {{ train = 30, validation = 5, test = 10 }}\n\
             forest = {{ trees = 20, max_depth = 6 }}"
        ))
        .unwrap()
    }

    fn synthetic(rows: usize) -> Table {
        let mut rng = Rng::new(7);
        Table {
            columns: vec!["a".into(), "b".into(), "y".into()],
            rows: (0..rows)
                .map(|_| {
                    let a = rng.uniform_in(-1.0, 1.0);
                    let b = rng.uniform_in(0.0, 10.0);
                    vec![a, b, 3.0 * a + 0.2 * b + 0.3 * rng.normal()]
                })
                .collect(),
        }
    }

    #[test]
    fn the_forests_are_deterministic_for_a_seed_and_their_variance_positive() {
        let table = synthetic(60);
        let s = spec("unused.csv");
        let a = fit(&s, &table, (1, 2)).unwrap();
        let b = fit(&s, &table, (1, 2)).unwrap();
        assert_eq!(a, b, "same seeds, same surrogate");
        let c = fit(&s, &table, (3, 2)).unwrap();
        assert_ne!(a.f, c.f, "another seed, another forest");
        assert!(a.sigma.iter().all(|s| s.is_finite() && *s > 0.0));
        // f explains most of a target whose noise is 0.3 against a signal of sd ≈ 1.9.
        assert!(a.oob_r2 > 0.5, "oob R² {}", a.oob_r2);
        assert_eq!(a.d(), 2);
        assert_eq!(a.rows(), 60);
    }

    #[test]
    fn the_split_is_a_partition_fixed_by_the_seed() {
        let s = SplitSpec {
            train: 30,
            validation: 5,
            test: 10,
        };
        let (tr, va, te) = split(&s, 50, &mut Rng::new(3)).unwrap();
        assert_eq!((tr.len(), va.len(), te.len()), (30, 5, 10));
        let mut all: Vec<usize> = tr.iter().chain(&va).chain(&te).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 45, "no row in two parts");
        assert_eq!(
            (tr.clone(), va.clone(), te.clone()),
            split(&s, 50, &mut Rng::new(3)).unwrap()
        );
        let err = split(&s, 40, &mut Rng::new(3)).unwrap_err().to_string();
        assert!(
            err.contains("surrogate.split") && err.contains("40 rows"),
            "{err}"
        );
    }

    #[test]
    fn bad_data_names_file_line_and_column() {
        let err = Table::parse_csv("a,b,y\n1,2,3\n4,,6\n", "d.csv")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("d.csv, line 3, column b") && err.contains("empty field"),
            "{err}"
        );
        let err = Table::parse_csv("a,b,y\n1,NA,3\n", "d.csv")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 2, column b") && err.contains("`NA`"),
            "{err}"
        );
        // A quoted header field may hold a comma (the hand-written splitter cut it in two).
        let t = Table::parse_csv("\"x, in m\",y\n1,2\n\n3,4\n", "q.csv").unwrap();
        assert_eq!(t.columns, vec!["x, in m".to_string(), "y".to_string()]);
        assert_eq!(t.rows, vec![vec![1.0, 2.0], vec![3.0, 4.0]]);
        let err = Table::parse_csv("a,b,y\n1,2\n", "d.csv")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("2 fields"), "{err}");
        let err = Table::read_csv(Path::new("/no/such/file.csv"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/no/such/file.csv"), "{err}");
        let table = synthetic(20);
        let mut s = spec("x.csv");
        s.target = "z".into();
        let err = fit(&s, &table, (1, 2)).unwrap_err().to_string();
        assert!(
            err.contains("surrogate.target") && err.contains("a, b, y"),
            "{err}"
        );
    }
}
