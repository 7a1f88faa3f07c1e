//! Interval levels and their stored bounds, and the readers of numbers that JSON writes as
//! `null` (NaN, ±∞): what the stored repetition types and the empirical intervals share.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// The level of spec §2's coverage (deviation < 1.96·uncertainty for a normal family), which
/// an empirical family always stores.
pub const COVERAGE_LEVEL: f64 = 0.95;

/// A level's name in metric names and files: `0.95`.
pub fn level_name(level: f64) -> String {
    format!("{level}")
}

/// Reads a list of numbers in which `null` stands for a non-finite value (serde_json writes
/// NaN and ±∞ as `null`): a diverged repetition's predictions read back as NaN.
pub(crate) fn nullable_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v: Vec<Option<f64>> = Vec::deserialize(d)?;
    Ok(v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect())
}

pub(crate) fn nullable_opt_vec<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<f64>>, D::Error> {
    let v: Option<Vec<Option<f64>>> = Option::deserialize(d)?;
    Ok(v.map(|v| v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect()))
}

pub(crate) fn nullable_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let v: BTreeMap<String, Option<f64>> = BTreeMap::deserialize(d)?;
    Ok(v.into_iter()
        .map(|(k, x)| (k, x.unwrap_or(f64::NAN)))
        .collect())
}

/// `levels` and 0.95 (spec §2's coverage), without repeats.
pub fn with_coverage_level(levels: &[f64]) -> Vec<f64> {
    let mut levels = levels.to_vec();
    if !levels.contains(&COVERAGE_LEVEL) {
        levels.push(COVERAGE_LEVEL);
    }
    levels
}

/// Central intervals of an empirical family at one level: of f (CI) and of a new y (PI).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelBounds {
    /// Lower ends of the CI per test input.
    #[serde(deserialize_with = "nullable_vec")]
    pub ci_lower: Vec<f64>,
    /// Upper ends of the CI.
    #[serde(deserialize_with = "nullable_vec")]
    pub ci_upper: Vec<f64>,
    /// Lower ends of the PI.
    #[serde(deserialize_with = "nullable_vec")]
    pub pi_lower: Vec<f64>,
    /// Upper ends of the PI.
    #[serde(deserialize_with = "nullable_vec")]
    pub pi_upper: Vec<f64>,
}

/// A calibrated prediction interval of y at one level (conformal, recalibration).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PiBounds {
    /// Lower ends per test input.
    #[serde(deserialize_with = "nullable_vec")]
    pub lower: Vec<f64>,
    /// Upper ends per test input.
    #[serde(deserialize_with = "nullable_vec")]
    pub upper: Vec<f64>,
}
