//! `uqbench export`: a problem's data for other tools (PyTorch, JAX, R).

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::json;

use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::{rep_stem, setting_dir, write_atomic};

/// Arguments of `uqbench export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Experiment spec (TOML).
    pub spec: PathBuf,
    /// Number of repetitions to export (0..K).
    #[arg(long)]
    pub reps: u64,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Only this setting (KEY=VALUE, repeatable); all settings of the sweep by default.
    #[arg(long = "setting", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
}

/// The inputs (and targets) as CSV with a header `x1,…,xd[,y]`, through the `csv` crate.
fn csv(x: &uqbench_anchor::Inputs, y: Option<&[f64]>) -> Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = (1..=x.d()).map(|j| format!("x{j}")).collect();
    if y.is_some() {
        header.push("y".into());
    }
    w.write_record(&header)?;
    for (i, row) in x.rows().enumerate() {
        let mut cells: Vec<String> = row.iter().map(|v| format!("{v}")).collect();
        if let Some(y) = y {
            cells.push(format!("{}", y[i]));
        }
        w.write_record(&cells)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// Runs `uqbench export`.
pub fn run(args: &ExportArgs) -> Result<()> {
    if args.reps == 0 {
        bail!("--reps 0: export at least one repetition");
    }
    let spec = ExperimentSpec::load(&args.spec)?;
    let settings = if args.settings.is_empty() {
        spec.settings()
    } else {
        vec![spec.parse_setting(&args.settings)?]
    };
    let mut listed = Vec::new();
    for setting in &settings {
        let problem = spec.resolve(setting)?;
        let dir = args.out.join(setting_dir(&setting.label()));
        for r in 0..args.reps {
            // A random design's repetitions have their own inputs.
            let problem = problem.at_repetition(r)?;
            let test_csv = csv(&problem.test.inputs, None)?;
            let draw = problem.draw(r);
            let stem = rep_stem(r);
            write_atomic(
                &dir.join(format!("{stem}.train.csv")),
                csv(&problem.train.inputs, Some(&draw.train_y))?.as_bytes(),
            )?;
            write_atomic(&dir.join(format!("{stem}.test.csv")), test_csv.as_bytes())?;
            let j = json!({
                "train_x": problem.train.inputs.to_rows(),
                "train_y": draw.train_y,
                "test_x": problem.test.inputs.to_rows(),
            });
            write_atomic(&dir.join(format!("{stem}.json")), j.to_string().as_bytes())?;
        }
        listed.push(json!({
            "setting": setting.label(),
            "dir": setting_dir(&setting.label()),
            "d": problem.d(),
            "n_train": problem.train.inputs.len(),
            "n_test": problem.test.inputs.len(),
        }));
    }
    let manifest = json!({
        "experiment": spec.name,
        "repetitions": args.reps,
        "settings": listed,
        "predictions": "write <dir>/rep-NNN.csv with columns mean,std (one row per test input, in \
                        test order), or rep-NNN.json with {\"mean\": [..], \"std\": [..]} or \
                        {\"samples\": [[..] per test input]}; then run uqbench score",
    });
    write_atomic(
        &args.out.join("manifest.json"),
        serde_json::to_string_pretty(&manifest)?.as_bytes(),
    )?;
    eprintln!(
        "exported {} setting(s) × {} repetition(s) of `{}` to {}",
        settings.len(),
        args.reps,
        spec.name,
        args.out.display()
    );
    Ok(())
}
