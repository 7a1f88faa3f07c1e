//! Interval levels and their stored bounds, and the readers of numbers that JSON writes as
//! `null` (NaN) and `"inf"`/`"-inf"` (±∞): what the stored repetition types and the empirical intervals share.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// The level of spec §2's coverage (deviation < 1.96·uncertainty for a normal family), which
/// an empirical family always stores.
pub const COVERAGE_LEVEL: f64 = 0.95;

/// A level's name in metric names and files: `0.95`.
pub fn level_name(level: f64) -> String {
    format!("{level}")
}

/// One number of a stored JSON file: a number, `null` (NaN: no value, or a diverged
/// repetition's prediction) or `"inf"`/`"-inf"` (±∞, which serde_json alone would write as
/// `null`: see [`crate::json`]).
struct Num(f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Num;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number, null, \"inf\" or \"-inf\"")
            }
            fn visit_f64<E>(self, v: f64) -> Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_unit<E>(self) -> Result<Num, E> {
                Ok(Num(f64::NAN))
            }
            fn visit_none<E>(self) -> Result<Num, E> {
                Ok(Num(f64::NAN))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Num, D::Error> {
                Num::deserialize(d)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Num, E> {
                crate::json::text_number(v)
                    .map(Num)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads a list of numbers in which `null` stands for NaN and `"inf"`/`"-inf"` for ±∞.
pub(crate) fn nullable_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
    let v: Vec<Num> = Vec::deserialize(d)?;
    Ok(v.into_iter().map(|x| x.0).collect())
}

pub(crate) fn nullable_opt_vec<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<f64>>, D::Error> {
    let v: Option<Vec<Num>> = Option::deserialize(d)?;
    Ok(v.map(|v| v.into_iter().map(|x| x.0).collect()))
}

pub(crate) fn nullable_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, f64>, D::Error> {
    let v: BTreeMap<String, Num> = BTreeMap::deserialize(d)?;
    Ok(v.into_iter().map(|(k, x)| (k, x.0)).collect())
}

/// Reads region → name → number (the joint metrics of a stored repetition) as
/// [`nullable_map`] does.
pub(crate) fn nullable_nested_map<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, BTreeMap<String, f64>>, D::Error> {
    let v: BTreeMap<String, BTreeMap<String, Num>> = BTreeMap::deserialize(d)?;
    Ok(v.into_iter()
        .map(|(k, m)| (k, m.into_iter().map(|(n, x)| (n, x.0)).collect()))
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
