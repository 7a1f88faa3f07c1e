//! The summary's files: summary.json, the long-format summary.csv (per test input) and
//! aggregate.csv (per region).

use crate::bail;
use crate::error::Result;
use serde_json::Value;

use crate::json::{INF, NEG_INF};

use super::by_rep::REPETITIONS_COLUMNS;
use super::names;
use super::types::Summary;

/// A number as Python's `repr` (and so pandas' `to_csv`) writes it: the shortest text that
/// reads back to the same f64, `0.0` for integral values, scientific below 1e-4 and from 1e16
/// with a signed exponent of at least two digits (`1e-07`, `1e+16`); `inf` and `-inf` for ±∞
/// (a result: an infinite KL or NLL, issue 59 §4), empty for NaN (no value). A DataFrame read
/// from these files and written back gives the same text.
pub(crate) fn num(v: f64) -> String {
    if v.is_nan() {
        return String::new();
    }
    if v.is_infinite() {
        let text = if v > 0.0 { INF } else { NEG_INF };
        return text.to_string();
    }
    // Rust's Debug form is the shortest round-trip text with the same thresholds as Python's
    // repr; only the exponent is spelled differently (`1e-7`, `1e16`).
    let s = format!("{v:?}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let e: i32 = exp
                .parse()
                .expect("Debug of f64 writes an integer exponent");
            format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
        }
        None => s,
    }
}

/// The per-repetition file of a run directory ([`Summary::repetitions_csv`]).
pub const REPETITIONS_CSV: &str = "repetitions.csv";

/// A CSV document written record by record with the `csv` crate (RFC 4180 quoting: fields
/// with a comma, quote or line break are quoted).
struct Csv(csv::Writer<Vec<u8>>);

impl Csv {
    fn new(header: &[String]) -> Csv {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.write_record(header).expect("writing to memory");
        Csv(w)
    }

    fn row(&mut self, fields: &[String]) {
        self.0.write_record(fields).expect("writing to memory");
    }

    fn text(self) -> String {
        String::from_utf8(self.0.into_inner().expect("writing to memory")).expect("UTF-8 fields")
    }
}

impl Summary {
    /// The long-format per-point CSV: one row per setting × method × test input × metric, and
    /// per setting × method a row `diverged` (point empty, region `all`) with the number of
    /// repetitions left out because training diverged.
    pub fn points_csv(&self) -> String {
        let d = self
            .settings
            .iter()
            .flat_map(|s| s.test.x.first().map(Vec::len))
            .max()
            .unwrap_or(1);
        let mut header: Vec<String> = ["setting", "method", "point"].map(String::from).to_vec();
        header.extend((1..=d).map(|j| format!("x{j}")));
        header.extend(
            [
                "coord", "region", "label", "metric", "value", "stderr", "lower", "upper",
            ]
            .map(String::from),
        );
        let mut out = Csv::new(&header);
        for s in &self.settings {
            for (method, ms) in &s.methods {
                // setting, method, point, x1…xd, coord, region, label, metric, value, stderr,
                // lower, upper.
                let mut row = vec![s.setting.clone(), method.clone()];
                row.extend(std::iter::repeat_n(String::new(), d + 2));
                row.extend([names::ALL, "", names::DIVERGED].map(String::from));
                row.push(num(ms.diverged.len() as f64));
                row.extend(std::iter::repeat_n(String::new(), 3));
                out.row(&row);
                for (metric, pm) in &ms.points {
                    for i in 0..pm.value.len() {
                        let mut row = vec![s.setting.clone(), method.clone(), i.to_string()];
                        row.extend(
                            (0..d).map(|j| s.test.x[i].get(j).map(|v| num(*v)).unwrap_or_default()),
                        );
                        let bound = |b: &Option<Vec<f64>>| {
                            b.as_ref().map(|b| num(b[i])).unwrap_or_default()
                        };
                        row.extend([
                            s.test
                                .coord
                                .as_ref()
                                .map(|(_, v)| num(v[i]))
                                .unwrap_or_default(),
                            s.test.region[i].as_str().to_string(),
                            s.test.label[i].clone().unwrap_or_default(),
                            metric.clone(),
                            num(pm.value[i]),
                            num(pm.stderr[i]),
                            bound(&pm.lower),
                            bound(&pm.upper),
                        ]);
                        out.row(&row);
                    }
                }
            }
        }
        out.text()
    }

    /// The aggregate CSV: one row per setting × method × region × metric, with `diverged`
    /// (repetitions left out) per setting × method. `stderr` is over repetitions; `points_sd`
    /// is the descriptive spread across the region's test inputs, where the metric has one;
    /// `infinite` how many of the repetitions in a mean over repetitions were ±∞ (then the
    /// value is `inf`, `-inf` or empty and the standard error empty).
    pub fn aggregate_csv(&self) -> String {
        let header = [
            "setting",
            "method",
            "region",
            "metric",
            "value",
            "stderr",
            "points_sd",
            "infinite",
        ]
        .map(String::from);
        let mut out = Csv::new(&header);
        for s in &self.settings {
            for (method, ms) in &s.methods {
                for (region, metrics) in &ms.aggregate {
                    for (metric, v) in metrics {
                        out.row(&[
                            s.setting.clone(),
                            method.clone(),
                            region.clone(),
                            metric.clone(),
                            num(v.value),
                            num(v.stderr),
                            v.points_sd.map(num).unwrap_or_default(),
                            v.infinite.map(|n| num(n as f64)).unwrap_or_default(),
                        ]);
                    }
                }
                out.row(&[
                    s.setting.clone(),
                    method.clone(),
                    names::ALL.to_string(),
                    names::DIVERGED.to_string(),
                    num(ms.diverged.len() as f64),
                    String::new(),
                    String::new(),
                    String::new(),
                ]);
            }
        }
        out.text()
    }

    /// The per-repetition CSV: one row per setting × method × region × metric × repetition,
    /// each repetition's value of every region aggregate that is a mean over repetitions
    /// (columns `setting, method, region, metric, repetition, value`; empty where the
    /// repetition has none). Repetition r of every method saw the same data: this is what
    /// paired comparisons (`uqbench compare`) read.
    pub fn repetitions_csv(&self) -> String {
        let mut out = Csv::new(&REPETITIONS_COLUMNS.map(String::from));
        for (setting, method, region, metric, r, v) in self.repetition_entries() {
            out.row(&[
                setting.to_string(),
                method.to_string(),
                region.to_string(),
                metric.to_string(),
                r.to_string(),
                num(v),
            ]);
        }
        out.text()
    }

    /// The summary as JSON: ±∞ as `"inf"`/`"-inf"`, NaN (no value) as `null`
    /// ([`crate::json`]).
    pub fn to_json(&self) -> Value {
        crate::json::to_value(self).expect("a summary serialises (string keys only)")
    }

    /// Writes summary.json, summary.csv (per test input), aggregate.csv (per region) and
    /// repetitions.csv (per region and repetition) into `dir`, each atomically.
    pub fn write(&self, dir: &std::path::Path) -> Result<()> {
        for level in &self.levels {
            if !(*level > 0.0 && *level < 1.0) {
                bail!("level {level}: interval levels lie strictly between 0 and 1");
            }
        }
        crate::store::write_atomic(
            &dir.join("summary.json"),
            serde_json::to_string(&self.to_json())?.as_bytes(),
        )?;
        crate::store::write_atomic(&dir.join("summary.csv"), self.points_csv().as_bytes())?;
        crate::store::write_atomic(&dir.join("aggregate.csv"), self.aggregate_csv().as_bytes())?;
        crate::store::write_atomic(
            &dir.join(REPETITIONS_CSV),
            self.repetitions_csv().as_bytes(),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::num;

    #[test]
    fn numbers_are_written_as_python_repr_writes_them() {
        // Each right-hand side is Python 3's repr of the same float.
        for (v, py) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (-6.0, "-6.0"),
            (123.0, "123.0"),
            (0.1, "0.1"),
            (2.0 / 3.0, "0.6666666666666666"),
            (0.0001, "0.0001"),
            (0.000099, "9.9e-05"),
            (1e-7, "1e-07"),
            (-2.5e-10, "-2.5e-10"),
            (1.2345e-300, "1.2345e-300"),
            (9999999999999998.0, "9999999999999998.0"),
            (1e16, "1e+16"),
            (1.5e22, "1.5e+22"),
        ] {
            assert_eq!(num(v), py, "{v}");
        }
        // Python's repr of ±∞ (what pandas' read_csv reads and to_csv writes back); NaN is "no
        // value", an empty field.
        assert_eq!(num(f64::NAN), "");
        assert_eq!(num(f64::INFINITY), "inf");
        assert_eq!(num(f64::NEG_INFINITY), "-inf");
    }
}
