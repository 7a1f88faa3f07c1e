//! The summary's files: summary.json, the long-format summary.csv (per test input) and
//! aggregate.csv (per region).

use crate::bail;
use crate::error::Result;
use serde_json::{json, Value};

use super::names;
use super::types::Summary;

fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

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
                row.push(ms.diverged.len().to_string());
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
    /// is the descriptive spread across the region's test inputs, where the metric has one.
    pub fn aggregate_csv(&self) -> String {
        let header = [
            "setting",
            "method",
            "region",
            "metric",
            "value",
            "stderr",
            "points_sd",
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
                        ]);
                    }
                }
                out.row(&[
                    s.setting.clone(),
                    method.clone(),
                    names::ALL.to_string(),
                    names::DIVERGED.to_string(),
                    ms.diverged.len().to_string(),
                    String::new(),
                    String::new(),
                ]);
            }
        }
        out.text()
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
