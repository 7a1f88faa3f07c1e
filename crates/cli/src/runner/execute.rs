//! Executing a plan: which work units still need to run (a shard of them, merged into larger
//! jobs on a GPU), and running them one after another with their progress reported through a
//! callback, so that the command only renders it.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::Result;
use uqbench_core::{Compute, Method};
use uqbench_experiment::draws::draws_path;
use uqbench_experiment::predict::predict;
use uqbench_experiment::store::{rep_path, write_atomic};

use super::{unit_done, Plan, Resolved, Unit};
use uqbench_methods as registry;

/// What happens while units run, for a progress display.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// A unit starts. `done_before`: repetitions of its (setting, method) finished earlier (by
    /// a run this one resumes).
    Started {
        /// The unit.
        unit: &'a Unit,
        /// Its setting's label.
        label: &'a str,
        /// Repetitions of the (setting, method) already on disk.
        done_before: u64,
    },
    /// Repetitions of the unit finished so far (0 ..= its length).
    Progress {
        /// The unit.
        unit: &'a Unit,
        /// Repetitions finished.
        finished: u64,
    },
    /// The unit's files are written.
    Finished {
        /// The unit.
        unit: &'a Unit,
        /// Its setting's label.
        label: &'a str,
        /// Wall time of the unit.
        seconds: f64,
    },
}

/// The units still to run: shard `(i, n)` of the plan's units (all without one; the shards
/// balance the expected cost, see [`super::shards`]), those whose files are not all in `dir`,
/// and on a GPU consecutive small units merged (see [`merge_for_gpu`]).
pub fn schedule(
    plan: &Plan,
    dir: &Path,
    shard: Option<(usize, usize)>,
    gpu: bool,
) -> Result<Vec<Unit>> {
    let mine: Vec<Unit> = match shard {
        Some((i, n)) => super::shards::balanced(plan, n)?.swap_remove(i),
        None => plan.units.clone(),
    };
    let todo: Vec<&Unit> = mine.iter().filter(|u| !unit_done(dir, plan, u)).collect();
    if !gpu {
        return Ok(todo.into_iter().cloned().collect());
    }
    // On a GPU, small jobs (the dropout methods: one replica per repetition) are merged so that
    // a chunk can hold as many replicas as memory allows.
    let per_rep = |method: &str| -> usize {
        let setting = &plan.settings[0];
        registry::build_for(&plan.spec, method, setting)
            .ok()
            .map_or(1, |m| m.replicas_per_repetition())
    };
    Ok(merge_for_gpu(&todo, &per_rep, GPU_MIN_REPLICAS))
}

/// Runs `units` of `plan` into `dir` on `compute`, one after another, reporting through
/// `on_event`.
pub fn execute(
    plan: &Plan,
    dir: &Path,
    units: &[Unit],
    compute: &Compute,
    on_event: &(dyn Fn(Event<'_>) + Sync),
) -> Result<()> {
    let k = plan.repetitions();
    let mut resolved: Vec<Option<Resolved>> = (0..plan.settings.len()).map(|_| None).collect();
    for unit in units {
        let setting = &plan.settings[unit.setting];
        if resolved[unit.setting].is_none() {
            resolved[unit.setting] = Some(Resolved::new(&plan.spec, setting)?);
        }
        let label = setting.label();
        let done_before = (0..k)
            .filter(|&r| rep_path(dir, setting, &unit.method, r).is_file())
            .count() as u64;
        on_event(Event::Started {
            unit,
            label: &label,
            done_before,
        });
        let len = unit.reps.end - unit.reps.start;
        let started = Instant::now();
        let last = Mutex::new(0u64);
        run_unit(
            dir,
            plan,
            unit,
            resolved[unit.setting].as_ref().expect("resolved above"),
            compute,
            &|f| {
                let step = (f * len as f64).floor() as u64;
                let mut last = last.lock().expect("progress lock");
                if step > *last {
                    *last = step;
                    on_event(Event::Progress {
                        unit,
                        finished: step,
                    });
                }
            },
        )?;
        on_event(Event::Finished {
            unit,
            label: &label,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    Ok(())
}

/// Replicas a GPU job should reach before units stop being merged (see [`merge_for_gpu`]).
pub const GPU_MIN_REPLICAS: usize = 256;

/// On a GPU, one work unit of a method with few replicas per repetition (a dropout method:
/// one) is too small a job to fill the device: consecutive units of the same setting and
/// method with contiguous repetitions are merged until a job has at least `min_replicas`
/// replicas. Seeds are per repetition, so merging changes no number; `--resume` then keeps
/// finished merged units. `replicas_per_rep(method)` gives a method's replicas per repetition.
pub fn merge_for_gpu(
    units: &[&Unit],
    replicas_per_rep: &dyn Fn(&str) -> usize,
    min_replicas: usize,
) -> Vec<Unit> {
    let mut out: Vec<Unit> = Vec::new();
    for unit in units {
        let per = replicas_per_rep(&unit.method).max(1);
        match out.last_mut() {
            Some(last)
                if last.setting == unit.setting
                    && last.method == unit.method
                    && last.reps.end == unit.reps.start
                    && ((last.reps.end - last.reps.start) as usize).saturating_mul(per)
                        < min_replicas =>
            {
                last.reps.end = unit.reps.end;
            }
            _ => out.push((*unit).clone()),
        }
    }
    out
}

/// Runs one unit and writes its files. `progress` receives the fraction of the unit done.
pub fn run_unit(
    dir: &Path,
    plan: &Plan,
    unit: &Unit,
    resolved: &Resolved,
    compute: &Compute,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<()> {
    let setting = &plan.settings[unit.setting];
    let method: Box<dyn Method> = registry::build_for(&plan.spec, &unit.method, setting)?;
    let reps: Vec<u64> = unit.reps.clone().collect();
    let started = Instant::now();
    let stored = predict(
        &plan.spec,
        setting,
        &resolved.problem,
        method.as_ref(),
        &reps,
        compute,
        progress,
    )?;
    for (&r, rep) in reps.iter().zip(stored) {
        // The draws first: a repetition is finished when its repetition file exists.
        if let Some(bytes) = &rep.draws {
            write_atomic(&draws_path(dir, setting, &unit.method, r), bytes)?;
        }
        write_atomic(
            &rep_path(dir, setting, &unit.method, r),
            rep.stored.to_json()?.as_bytes(),
        )?;
    }
    super::timings::record(
        dir,
        setting,
        &unit.method,
        &unit.reps,
        &super::timings::UnitTime {
            repetitions: reps.len() as u64,
            seconds: started.elapsed().as_secs_f64(),
            backend: compute.backend.clone(),
            threads: compute.threads,
        },
    )?;
    progress(1.0);
    Ok(())
}
