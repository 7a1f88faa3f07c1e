//! Summarising a complete run directory, and its figures and report.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use uqbench_experiment::predict::label_source;
use uqbench_experiment::store::{read_json, rep_path, RunMeta};
use uqbench_experiment::summary::{RepResult, Summary, TestInfo};
use uqbench_experiment::Track;

use super::{Plan, Resolved};
use crate::figures::{FigureInput, SettingFigures};

/// Reads every repetition of a complete run directory and summarises it. Missing files are an
/// error naming the first one (a sharded run must be merged first). With `partial`, a
/// (method, setting) whose repetitions are not all there is left out instead, and named in
/// the third value ("`Ens` at f_main=2: 5 of 20 repetitions").
pub fn summarize_dir(
    dir: &Path,
    plan: &Plan,
    partial: bool,
) -> Result<(Summary, Vec<Resolved>, Vec<String>)> {
    let run = plan.spec.run_spec()?;
    let mut settings = Vec::new();
    let mut resolved_all = Vec::new();
    let mut missing = Vec::new();
    for setting in &plan.settings {
        let resolved = Resolved::new(&plan.spec, setting)?;
        let track = Track::of(&resolved.problem);
        let mut methods = BTreeMap::new();
        for m in &plan.methods {
            if partial {
                let done = (0..run.repetitions)
                    .filter(|&r| rep_path(dir, setting, m, r).is_file())
                    .count();
                if done < run.repetitions as usize {
                    let at = setting.label();
                    missing.push(format!(
                        "`{m}`{}: {done} of {} repetitions",
                        if at.is_empty() {
                            String::new()
                        } else {
                            format!(" at {at}")
                        },
                        run.repetitions
                    ));
                    continue;
                }
            }
            let reps = (0..run.repetitions)
                .map(|r| track.read(&rep_path(dir, setting, m, r)))
                .collect::<uqbench_experiment::Result<Vec<_>>>()?;
            methods.insert(m.clone(), reps);
        }
        {
            let labels = label_source(&plan.spec, &resolved.problem);
            let reps: Vec<u64> = (0..run.repetitions).collect();
            settings.push(track.summarize_setting(
                &setting.label(),
                TestInfo::for_repetitions(&resolved.problem, &reps)?,
                methods,
                &run.levels,
                &labels,
            )?);
        }
        resolved_all.push(resolved);
    }
    Ok((
        Summary {
            experiment: plan.spec.name.clone(),
            levels: run.levels.clone(),
            settings,
        },
        resolved_all,
        missing,
    ))
}

/// The figures' data of every setting: the band repetition of every method, read from the run
/// directory, with the training points of a 1-D problem.
fn figure_settings(dir: &Path, plan: &Plan, resolved: &[Resolved]) -> Result<Vec<SettingFigures>> {
    let run = plan.spec.run_spec()?;
    let band_rep = run.band_repetition;
    plan.settings
        .iter()
        .zip(resolved)
        .map(|(setting, res)| {
            // The band repetition's own inputs (a random design draws them per repetition).
            let problem = res.problem.at_repetition(band_rep)?;
            let problem = problem.as_ref();
            let test = &problem.test;
            let mut bands = Vec::new();
            if let Some((_, coord)) = &test.coord {
                let mut order: Vec<usize> = (0..test.label.len())
                    .filter(|&i| test.label[i].is_none())
                    .collect();
                order.sort_by(|&a, &b| coord[a].total_cmp(&coord[b]));
                for m in &plan.methods {
                    let rep: RepResult = read_json(&rep_path(dir, setting, m, band_rep))?;
                    if rep.diverged {
                        // Nothing to draw: the repetition is left out of every metric too.
                        continue;
                    }
                    let (lo, hi) = rep.coverage_interval()?;
                    bands.push((
                        m.clone(),
                        order
                            .iter()
                            .map(|&i| (coord[i], rep.mean[i], lo[i], hi[i]))
                            .collect(),
                    ));
                }
            }
            let train = match &test.coord {
                Some((name, _)) if problem.d() == 1 && name == "x" => {
                    let y = problem.draw(band_rep).train_y;
                    problem
                        .train
                        .inputs
                        .rows()
                        .zip(y)
                        .map(|(x, y)| (x[0], y))
                        .collect()
                }
                _ => Vec::new(),
            };
            Ok(SettingFigures {
                setting: setting.clone(),
                d: problem.d(),
                train,
                bands,
            })
        })
        .collect()
}

/// Summaries, figures and report of a complete run directory.
pub fn finish(dir: &Path, plan: &Plan, meta: &RunMeta) -> Result<()> {
    finish_with(dir, plan, meta, false)
}

/// [`finish`] of a run that stopped before the end (`uqbench report` of an incomplete run):
/// the (method, setting) pairs whose repetitions are all there are summarised and reported,
/// the figures show the methods finished at every setting, and the report opens with a
/// banner naming what is missing.
pub fn finish_partial(dir: &Path, plan: &Plan, meta: &RunMeta) -> Result<()> {
    finish_with(dir, plan, meta, true)
}

fn finish_with(dir: &Path, plan: &Plan, meta: &RunMeta, partial: bool) -> Result<()> {
    let (summary, resolved, missing) = summarize_dir(dir, plan, partial)?;
    summary.write(dir)?;
    let run = plan.spec.run_spec()?;
    // The figures draw the methods finished at every setting.
    let mut drawn = plan.clone();
    drawn
        .methods
        .retain(|m| summary.settings.iter().all(|s| s.methods.contains_key(m)));
    let plan_all = plan;
    let plan = &drawn;
    let input = FigureInput {
        experiment: &plan.spec.name,
        sweep: &plan.spec.sweep,
        methods: &plan.methods,
        repetitions: run.repetitions,
        band_repetition: run.band_repetition,
        track: plan.spec.problem.track(),
        summary: &summary,
        settings: figure_settings(dir, plan, &resolved)?,
    };
    let figures = crate::figures::draw_all(dir, &input)?;
    let header = crate::report::Header {
        name: &plan.spec.name,
        description: &plan.spec.description,
        profile: meta.profile.as_deref(),
        backend: &meta.backend,
        repetitions: run.repetitions,
        settings: plan.settings.iter().map(|s| s.label()).collect(),
        methods: &plan_all.methods,
        noise: run.noise,
        track: plan.spec.problem.track(),
        missing: &missing,
    };
    crate::report::write(dir, &header, &summary, &figures)?;
    // Wall times go to timings.csv only: report.md and the summaries stay bit-reproducible.
    super::timings::write(dir, &summary)?;
    eprintln!(
        "wrote summary.json, summary.csv, aggregate.csv, timings.csv, {} figures and report.md to {}",
        figures.len(),
        dir.display()
    );
    Ok(())
}
