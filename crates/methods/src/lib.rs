//! The method registry: every name a spec may use, mapped to its constructor, for the
//! binary, the tests and anyone who builds methods from spec tables. Adding a method is one
//! file or folder in its room (`crates/models/src/` for a trained network,
//! `crates/samplers/src/` for a sampler), its `pub mod` line, one line in [`KINDS`] and its
//! catalogue line (ARCHITECTURE.md's extension table).
//!
//! The rooms: trained networks on the engine (`uqbench-models`), samplers
//! (`uqbench-samplers`), exact references (the anchor in `uqbench-anchor`, the GP in
//! `uqbench-gp`), and wrappers that take another method (`base`): the post-hoc calibrations
//! and `inputs = "features"` (`uqbench-posthoc`).

use uqbench_anchor::{Blr, GaussianBlr, Setting, ANCHOR};
use uqbench_core::Method;
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::summary::with_coverage_level;
use uqbench_gp::Gp;
use uqbench_models::{
    BootstrapScheme, DropoutKind, DropoutMethod, EnsMcd, EnsPrior, Ensemble, EnsembleConfig,
    EnsembleKind, Epinet, Laplace, QuantileNet, SgKind, SgMcmc, Swag,
};
use uqbench_posthoc::{
    Calibrated, ConformalConfig, FeatureInputs, RecalibratedConfig, DEFAULT_CALIBRATION_FRACTION,
};
use uqbench_samplers::{Hmc, Mfvi};

/// Why a method could not be built from its table.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A method table is malformed: the table, and what is wrong and what would be valid.
    #[error("[methods.{table}]{message}")]
    Table {
        /// The table's name.
        table: String,
        /// What is wrong (with a leading separator).
        message: String,
    },
    /// The method refused its settings.
    #[error(transparent)]
    Method(#[from] uqbench_core::MethodError),
    /// The spec could not give the table (an expression that does not evaluate).
    #[error(transparent)]
    Spec(#[from] uqbench_experiment::ExperimentError),
    /// The base of a post-hoc method could not be built.
    #[error("[methods.{table}] base = \"{base}\": {source}")]
    Base {
        /// The post-hoc table.
        table: String,
        /// Its base.
        base: String,
        /// Why.
        source: Box<RegistryError>,
    },
}

/// The registry's results.
pub type Result<T> = std::result::Result<T, RegistryError>;

/// A [`RegistryError::Table`] for `table` with `message` (after ": " or " ").
fn table_error(table: &str, message: impl std::fmt::Display) -> RegistryError {
    let message = message.to_string();
    RegistryError::Table {
        table: table.to_string(),
        message: if message.starts_with(' ') || message.starts_with(':') {
            message
        } else {
            format!(": {message}")
        },
    }
}

/// `bail!` for the registry's table errors.
macro_rules! bail {
    ($table:expr, $($arg:tt)*) => {
        return Err(table_error($table, format!($($arg)*)))
    };
}

type Builder = fn(name: &str, settings: toml::Value) -> Result<Box<dyn Method>>;

fn config<T: serde::de::DeserializeOwned>(name: &str, settings: toml::Value) -> Result<T> {
    settings.try_into().map_err(|e| table_error(name, e))
}

/// A method's settings as a table (empty when it has none).
fn table_of(s: toml::Value) -> toml::Table {
    match s {
        toml::Value::Table(t) => t,
        _ => toml::Table::new(),
    }
}

fn ensemble(name: &str, s: toml::Value, kind: EnsembleKind) -> Result<Box<dyn Method>> {
    Ok(Box::new(Ensemble::new(name, kind, config(name, s)?)?))
}

fn classic_bootstrap(name: &str, s: toml::Value) -> Result<Box<dyn Method>> {
    let mut c: EnsembleConfig = config(name, s)?;
    c.bootstrap = BootstrapScheme::Classic;
    Ok(Box::new(Ensemble::new(name, EnsembleKind::Bootstrap, c)?))
}

fn naive_bootstrap(name: &str, s: toml::Value) -> Result<Box<dyn Method>> {
    let mut c: EnsembleConfig = config(name, s)?;
    (c.bootstrap, c.student_t) = (BootstrapScheme::Classic, true);
    Ok(Box::new(Ensemble::new(name, EnsembleKind::Bootstrap, c)?))
}

/// [003]'s deterministic baseline: one network, no sampling (an ensemble of one member, so it
/// trains exactly like an Ens member). Its interval of P(y = 1 | x) has width 0.
fn deterministic(name: &str, s: toml::Value) -> Result<Box<dyn Method>> {
    let mut table = table_of(s);
    match table.get("members") {
        None => {
            table.insert("members".into(), toml::Value::Integer(1));
        }
        Some(toml::Value::Integer(1)) => {}
        Some(other) => {
            bail!(
                name,
                " members = {other}: the deterministic net has exactly 1 member"
            )
        }
    }
    ensemble(name, toml::Value::Table(table), EnsembleKind::Plain)
}

/// MultiSWAG (Wilson & Izmailov 2020): SWAG members of an ensemble, 10 unless set.
fn multi_swag(name: &str, s: toml::Value) -> Result<Box<dyn Method>> {
    let mut table = table_of(s);
    table.entry("members").or_insert(toml::Value::Integer(10));
    Ok(Box::new(Swag::new(
        name,
        config(name, toml::Value::Table(table))?,
    )?))
}

/// CQR (Romano et al. 2019): a quantile network trained on all but `calibration_fraction`
/// (0.25) of the training points, its bands conformalised on the rest.
fn cqr(name: &str, s: toml::Value) -> Result<Box<dyn Method>> {
    let mut table = table_of(s);
    let fraction = match table.remove("calibration_fraction") {
        None => DEFAULT_CALIBRATION_FRACTION,
        Some(v) => v
            .as_float()
            .or(v.as_integer().map(|i| i as f64))
            .ok_or_else(|| {
                table_error(
                    name,
                    format!(" calibration_fraction = {v}: a number in (0, 1)"),
                )
            })?,
    };
    let base = QuantileNet::new(name, config(name, toml::Value::Table(table))?)?;
    Ok(Box::new(Calibrated::cqr(name, Box::new(base), fraction)?))
}

/// The anchor: exact, it takes no settings.
fn anchor(name: &str, s: toml::Value) -> Result<Box<dyn Method>> {
    if s.as_table().is_some_and(|t| !t.is_empty()) {
        bail!(name, ": the anchor ({ANCHOR}) takes no settings");
    }
    Ok(Box::new(Blr))
}

/// Bayesian linear regression under a Gaussian prior: `prior_sd` (1, as HMC's and SG-MCMC's)
/// and nothing else.
fn gaussian_blr(name: &str, s: toml::Value) -> Result<Box<dyn Method>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Table {
        #[serde(default = "one")]
        prior_sd: f64,
    }
    fn one() -> f64 {
        1.0
    }
    let t: Table = config(name, s)?;
    Ok(Box::new(GaussianBlr::new(name, t.prior_sd)?))
}

fn dropout(name: &str, s: toml::Value, kind: DropoutKind) -> Result<Box<dyn Method>> {
    Ok(Box::new(DropoutMethod::new(name, kind, config(name, s)?)?))
}

/// (kind, constructor). A spec's `[methods.NAME]` table selects a kind with `kind = "…"`,
/// or by its NAME.
#[rustfmt::skip]
pub const KINDS: &[(&str, Builder)] = &[
    (ANCHOR, anchor),
    ("BLRGaussian", gaussian_blr),
    ("Ens", |n, s| ensemble(n, s, EnsembleKind::Plain)),
    ("EnsAdvA", |n, s| ensemble(n, s, EnsembleKind::Adversarial)),
    ("EnsBS", |n, s| ensemble(n, s, EnsembleKind::Bootstrap)),
    ("EnsBSClassic", classic_bootstrap),
    ("NaiveBootstrap", naive_bootstrap),
    ("BD", |n, s| dropout(n, s, DropoutKind::Bernoulli)),
    ("CD", |n, s| dropout(n, s, DropoutKind::Concrete)),
    ("VD", |n, s| dropout(n, s, DropoutKind::Variational)),
    ("Det", deterministic),
    ("EnsMCD", |n, s| Ok(Box::new(EnsMcd::new(n, config(n, s)?)?))),
    ("EnsPrior", |n, s| Ok(Box::new(EnsPrior::new(n, config(n, s)?)?))),
    ("Epinet", |n, s| Ok(Box::new(Epinet::new(n, config(n, s)?)?))),
    ("BatchEnsemble", |n, s| Ok(Box::new(uqbench_models::batch_ensemble::BatchEnsemble::new(n, config(n, s)?)?))),
    ("GP", |n, s| Ok(Box::new(Gp::new(n, config(n, s)?)?))),
    ("MFVI", |n, s| Ok(Box::new(Mfvi::new(n, config(n, s)?)?))),
    ("HMC", |n, s| Ok(Box::new(Hmc::new(n, config(n, s)?)?))),
    ("Laplace", |n, s| Ok(Box::new(Laplace::new(n, config(n, s)?)?))),
    ("SGLD", |n, s| Ok(Box::new(SgMcmc::new(n, SgKind::Sgld, config(n, s)?)?))),
    ("SGHMC", |n, s| Ok(Box::new(SgMcmc::new(n, SgKind::Sghmc, config(n, s)?)?))),
    ("CyclicalSGMCMC", |n, s| Ok(Box::new(SgMcmc::new(n, SgKind::Cyclical, config(n, s)?)?))),
    ("pSGLD", |n, s| Ok(Box::new(SgMcmc::new(n, SgKind::Psgld, config(n, s)?)?))),
    ("DER", |n, s| Ok(Box::new(uqbench_models::der::Der::new(n, config(n, s)?)?))),
    ("SWAG", |n, s| Ok(Box::new(Swag::new(n, config(n, s)?)?))),
    ("MultiSWAG", multi_swag),
    ("QuantileRegression", |n, s| Ok(Box::new(QuantileNet::new(n, config(n, s)?)?))),
    ("CQR", cqr),
];

/// The kinds whose intervals of y are quantile bands: their `levels` default to the run's
/// (and 0.95, the coverage level every summary scores).
pub const BANDS: &[&str] = &["QuantileRegression", "CQR"];

/// The post-hoc kinds: they wrap the method of another table of the spec (`base`).
pub const POSTHOC: &[&str] = &["Conformal", "Recalibrated"];

/// Builds method `name` of `spec` at `setting`: its table with the setting's values, and for
/// a post-hoc kind its `base` table's method (which `run.methods` need not list).
pub fn build_for(spec: &ExperimentSpec, name: &str, setting: &Setting) -> Result<Box<dyn Method>> {
    build_nested(spec, name, setting, &mut Vec::new())
}

fn build_nested(
    spec: &ExperimentSpec,
    name: &str,
    setting: &Setting,
    chain: &mut Vec<String>,
) -> Result<Box<dyn Method>> {
    let table = spec.method_table(name, setting)?;
    let kind = table
        .as_ref()
        .and_then(|t| t.get("kind"))
        .and_then(|k| k.as_str())
        .unwrap_or(name)
        .to_string();
    if !POSTHOC.contains(&kind.as_str()) {
        let mut table = table.unwrap_or_default();
        if BANDS.contains(&kind.as_str()) && !table.contains_key("levels") {
            // Its intervals of y are its bands: by default at the levels the run scores.
            if let Some(run) = &spec.run {
                let levels = with_coverage_level(&run.levels);
                table.insert(
                    "levels".into(),
                    toml::Value::Array(levels.into_iter().map(toml::Value::Float).collect()),
                );
            }
        }
        let features = match table.remove("inputs") {
            None => false,
            Some(toml::Value::String(s)) if s == "x" => false,
            Some(toml::Value::String(s)) if s == "features" => true,
            Some(other) => bail!(
                name,
                " inputs = {other}: valid are \"x\" (the default) and \"features\" (the \
                 problem's features G(x))"
            ),
        };
        let method = build(name, Some(&table))?;
        return Ok(if features {
            Box::new(FeatureInputs::new(method))
        } else {
            method
        });
    }
    if chain.iter().any(|c| c == name) {
        bail!(
            name,
            " base: the bases form a circle ({} → {name})",
            chain.join(" → ")
        );
    }
    let mut table = table.unwrap_or_default();
    table.remove("kind");
    let base = match table.get("base") {
        Some(toml::Value::String(b)) => b.clone(),
        Some(other) => bail!(name, " base = {other}: the name of a method table"),
        None => bail!(
            name,
            " base: missing; {kind} needs the method it calibrates, e.g. base = \"Ens\" (a \
             [methods.Ens] table or a built-in kind)"
        ),
    };
    chain.push(name.to_string());
    let inner = build_nested(spec, &base, setting, chain).map_err(|e| RegistryError::Base {
        table: name.to_string(),
        base: base.clone(),
        source: Box::new(e),
    })?;
    chain.pop();
    let value = toml::Value::Table(table);
    Ok(match kind.as_str() {
        "Conformal" => Box::new(Calibrated::conformal(
            name,
            inner,
            &config::<ConformalConfig>(name, value)?,
        )?),
        _ => Box::new(Calibrated::recalibrated(
            name,
            inner,
            &config::<RecalibratedConfig>(name, value)?,
        )?),
    })
}

/// Builds method `name` from its settings table (possibly empty); a post-hoc kind needs
/// [`build_for`].
pub fn build(name: &str, table: Option<&toml::Table>) -> Result<Box<dyn Method>> {
    let mut table = table.cloned().unwrap_or_default();
    let kind = match table.remove("kind") {
        Some(toml::Value::String(k)) => k,
        Some(other) => bail!(
            name,
            " kind = {other}: a method kind is a string, one of {}",
            kinds()
        ),
        None => name.to_string(),
    };
    if POSTHOC.contains(&kind.as_str()) {
        bail!(
            name,
            " kind = \"{kind}\" wraps another method table: build it with its spec"
        );
    }
    let Some((_, builder)) = KINDS.iter().find(|(k, _)| *k == kind) else {
        return Err(RegistryError::Table {
            table: name.to_string(),
            message: format!(
                ": unknown method `{kind}`{}; valid methods: {}",
                if kind == name {
                    String::new()
                } else {
                    format!(" (kind of `{name}`)")
                },
                kinds()
            ),
        });
    };
    builder(name, toml::Value::Table(table))
}

/// Every name a spec may give a method's `kind` (or use as a table's name), in registry order.
pub fn kind_names() -> Vec<&'static str> {
    KINDS
        .iter()
        .map(|(k, _)| *k)
        .chain(POSTHOC.iter().copied())
        .collect()
}

fn kinds() -> String {
    KINDS
        .iter()
        .map(|(k, _)| *k)
        .chain(POSTHOC.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_from_defaults_and_refuses_an_unknown_key() {
        // The registry is the list a spec, the tests and `bench train --method` draw on: each
        // kind builds from an empty table, and a misspelt key is an error naming the table.
        for (kind, _) in KINDS {
            let method = build(kind, None).unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert_eq!(method.name(), *kind);
            if *kind == ANCHOR {
                continue;
            }
            let mut table = toml::Table::new();
            table.insert("no_such_setting".into(), toml::Value::Integer(1));
            let err = build(kind, Some(&table))
                .err()
                .unwrap_or_else(|| panic!("{kind}"));
            let text = err.to_string();
            assert!(
                text.contains(&format!("[methods.{kind}]")) && text.contains("no_such_setting"),
                "{kind}: {text}"
            );
        }
        assert_eq!(kind_names().len(), KINDS.len() + POSTHOC.len());
    }

    #[test]
    fn the_burn_free_catalogue_names_exactly_the_registrys_kinds() {
        // `uqbench methods` and Python's `uqbench.method_kinds()` read the catalogue; a kind
        // added here and not there (or the reverse) fails.
        let mut registry: Vec<&str> = KINDS
            .iter()
            .map(|(k, _)| *k)
            .chain(POSTHOC.iter().copied())
            .collect();
        let mut catalogue: Vec<&str> = uqbench_experiment::kinds::METHOD_KINDS
            .iter()
            .map(|k| k.name)
            .collect();
        registry.sort_unstable();
        catalogue.sort_unstable();
        assert_eq!(registry, catalogue);
        for k in uqbench_experiment::kinds::METHOD_KINDS {
            let posthoc = POSTHOC.contains(&k.name);
            assert_eq!(k.room == "post-hoc", posthoc, "{}", k.name);
            assert!(["exact", "network", "sampler", "post-hoc"].contains(&k.room));
        }
    }
}
