//! The summary's files: summary.json, the long-format summary.csv (per test input) and
//! aggregate.csv (per region).

use std::fmt::Write as _;

use crate::bail;
use crate::error::Result;
use serde_json::{json, Value};

use super::types::Summary;

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
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
        let mut out = String::from("setting,method,point");
        for j in 1..=d {
            let _ = write!(out, ",x{j}");
        }
        out.push_str(",coord,region,label,metric,value,stderr,lower,upper\n");
        for s in &self.settings {
            for (method, ms) in &s.methods {
                // setting, method, point, x1…xd, coord, region, label, metric, value, stderr,
                // lower, upper.
                let mut row = vec![csv_field(&s.setting), csv_field(method)];
                row.extend(std::iter::repeat_n(String::new(), d + 2));
                row.extend(["all", "", "diverged"].map(String::from));
                row.push(ms.diverged.len().to_string());
                row.extend(std::iter::repeat_n(String::new(), 3));
                let _ = writeln!(out, "{}", row.join(","));
                for (metric, pm) in &ms.points {
                    for i in 0..pm.value.len() {
                        let _ = write!(out, "{},{},{i}", csv_field(&s.setting), csv_field(method));
                        for j in 0..d {
                            out.push(',');
                            if let Some(v) = s.test.x[i].get(j) {
                                out.push_str(&num(*v));
                            }
                        }
                        let coord = s
                            .test
                            .coord
                            .as_ref()
                            .map(|(_, v)| num(v[i]))
                            .unwrap_or_default();
                        let label = s.test.label[i]
                            .as_deref()
                            .map(csv_field)
                            .unwrap_or_default();
                        let bound = |b: &Option<Vec<f64>>| {
                            b.as_ref().map(|b| num(b[i])).unwrap_or_default()
                        };
                        let _ = writeln!(
                            out,
                            ",{coord},{},{label},{metric},{},{},{},{}",
                            s.test.region[i].as_str(),
                            num(pm.value[i]),
                            num(pm.stderr[i]),
                            bound(&pm.lower),
                            bound(&pm.upper),
                        );
                    }
                }
            }
        }
        out
    }

    /// The aggregate CSV: one row per setting × method × region × metric, with `diverged`
    /// (repetitions left out) per setting × method. `stderr` is over repetitions; `points_sd`
    /// is the descriptive spread across the region's test inputs, where the metric has one.
    pub fn aggregate_csv(&self) -> String {
        let mut out = String::from("setting,method,region,metric,value,stderr,points_sd\n");
        for s in &self.settings {
            for (method, ms) in &s.methods {
                for (region, metrics) in &ms.aggregate {
                    for (metric, v) in metrics {
                        let _ = writeln!(
                            out,
                            "{},{},{region},{metric},{},{},{}",
                            csv_field(&s.setting),
                            csv_field(method),
                            num(v.value),
                            num(v.stderr),
                            v.points_sd.map(num).unwrap_or_default()
                        );
                    }
                }
                let _ = writeln!(
                    out,
                    "{},{},all,diverged,{},,",
                    csv_field(&s.setting),
                    csv_field(method),
                    ms.diverged.len()
                );
            }
        }
        out
    }

    /// The summary as JSON (non-finite numbers become null).
    pub fn to_json(&self) -> Value {
        json!(self)
    }

    /// Writes summary.json, summary.csv (per test input) and aggregate.csv (per region) into
    /// `dir`, each atomically.
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
        Ok(())
    }
}
