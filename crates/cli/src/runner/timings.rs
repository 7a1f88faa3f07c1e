//! Wall time per method and setting. Every work unit writes how long its method ran (training
//! and prediction together, `Method::run` through storing) to
//! `timings/<setting>/<method>/reps-A-B.json`; `finish` gathers them into `timings.csv`, with
//! each method's parameter count from the summary.
//!
//! Timings live beside the results, not in them: repetition files, `summary.json`,
//! `summary.csv`, `aggregate.csv` and `report.md` stay bit-reproducible (the same seed gives the same
//! bytes), which a wall time would break. A unit's time covers all its repetitions at once
//! (they train as one batch), so the time per repetition is the unit's divided by its
//! repetitions, and it depends on the block size, the backend and the threads, which the file
//! records.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};
use uqbench_anchor::Setting;
use uqbench_experiment::store::{setting_dir, write_atomic};
use uqbench_experiment::summary::{names, Summary};

/// One unit's time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnitTime {
    /// Repetitions the unit ran.
    pub repetitions: u64,
    /// Wall seconds of the unit.
    pub seconds: f64,
    /// Backend.
    pub backend: String,
    /// Worker threads.
    pub threads: usize,
}

fn unit_path(dir: &Path, setting: &Setting, method: &str, reps: &std::ops::Range<u64>) -> PathBuf {
    dir.join("timings")
        .join(setting_dir(&setting.label()))
        .join(method)
        .join(format!("reps-{:03}-{:03}.json", reps.start, reps.end))
}

/// Records one unit's time.
pub fn record(
    dir: &Path,
    setting: &Setting,
    method: &str,
    reps: &std::ops::Range<u64>,
    time: &UnitTime,
) -> Result<()> {
    write_atomic(
        &unit_path(dir, setting, method, reps),
        serde_json::to_string_pretty(time)?.as_bytes(),
    )?;
    Ok(())
}

/// Copies the unit timings of run directory `from` into `to` (a merge), keeping any that `to`
/// has already.
pub fn copy_all(from: &Path, to: &Path) -> Result<()> {
    fn walk(src: &Path, dst: &Path) -> Result<()> {
        let Ok(entries) = std::fs::read_dir(src) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let (s, d) = (e.path(), dst.join(e.file_name()));
            if s.is_dir() {
                walk(&s, &d)?;
            } else if !d.exists() {
                write_atomic(&d, &std::fs::read(&s)?)?;
            }
        }
        Ok(())
    }
    walk(&from.join("timings"), &to.join("timings"))
}

/// Per (setting, method): repetitions timed and their total seconds.
fn gather(dir: &Path) -> BTreeMap<(String, String), (u64, f64)> {
    let mut out = BTreeMap::new();
    let Ok(settings) = std::fs::read_dir(dir.join("timings")) else {
        return out;
    };
    for s in settings.flatten() {
        let Ok(methods) = std::fs::read_dir(s.path()) else {
            continue;
        };
        for m in methods.flatten() {
            let Ok(units) = std::fs::read_dir(m.path()) else {
                continue;
            };
            for u in units.flatten() {
                let Ok(text) = std::fs::read_to_string(u.path()) else {
                    continue;
                };
                let Ok(t) = serde_json::from_str::<UnitTime>(&text) else {
                    continue;
                };
                let key = (
                    s.file_name().to_string_lossy().into_owned(),
                    m.file_name().to_string_lossy().into_owned(),
                );
                let e = out.entry(key).or_insert((0, 0.0));
                e.0 += t.repetitions;
                e.1 += t.seconds;
            }
        }
    }
    out
}

/// Writes `timings.csv` (its header only when nothing was timed: a run merged from
/// directories without timings).
pub fn write(dir: &Path, summary: &Summary) -> Result<()> {
    let times = gather(dir);
    let mut csv = String::from(
        "setting,method,repetitions_timed,seconds,seconds_per_repetition,parameters\n",
    );
    for ((setting, method), (reps, seconds)) in &times {
        let params = summary
            .settings
            .iter()
            .find(|s| setting_dir(&s.setting) == *setting)
            .and_then(|s| s.methods.get(method))
            .and_then(|m| m.aggregate.get(names::ALL))
            .and_then(|a| a.get(names::PARAMETERS))
            .map(|p| p.value);
        let per = seconds / (*reps).max(1) as f64;
        let p = params.map_or(String::new(), |p| format!("{p}"));
        writeln!(csv, "{setting},{method},{reps},{seconds},{per},{p}")?;
    }
    write_atomic(&dir.join("timings.csv"), csv.as_bytes())?;
    Ok(())
}
