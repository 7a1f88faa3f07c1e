//! A method's predictions for repetitions of one setting, turned into their track's stored
//! form: the same path for every method (the anchor included), in a run and in scoring. With
//! `run.noise`, the validation inputs are predicted after the test inputs and split off, and
//! a method without a noise model gets the run's noise estimate.

use std::sync::Mutex;

use uqbench_anchor::{Anchor, Posterior, Problem, SeedPath, Setting, TaskData, ANCHOR};
use uqbench_core::{Compute, Method, Prediction, SeedBase, Task};

use crate::bail;
use crate::draws::{self, DrawFormat};
use crate::error::{Context, Result};
use crate::spec::{ExperimentSpec, NoiseSource};
use crate::summary::joint::{Exact, JointInput};
use crate::summary::{self, names, AnchorRef, RepContext};
use crate::track::{Stored, Track};

/// One repetition's prediction in stored form, with its joint predictive's file
/// ([`draws::encode`]) where the run stores one.
#[derive(Debug, Clone)]
pub struct Predicted {
    /// The repetition file's content.
    pub stored: Stored,
    /// The draws file's bytes (`None`: `run.draws = "none"`, a diverged repetition, or a
    /// joint of marginals only).
    pub draws: Option<Vec<u8>>,
}

/// Runs `method` on repetitions `reps` of one setting of `spec` (its problem resolved) and
/// returns their stored forms and draws files: the same path for every method, the anchor
/// included, in a run and in `score`. `progress` receives the fraction done.
pub fn predict(
    spec: &ExperimentSpec,
    setting: &Setting,
    problem: &Problem,
    method: &dyn Method,
    reps: &[u64],
    compute: &Compute,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Vec<Predicted>> {
    if !problem.is_random_design() {
        return predict_block(spec, setting, problem, method, reps, compute, progress);
    }
    // With `design = "random"` every repetition has its own inputs, so each is its own task
    // (its members still train as one program). Seeds are per repetition, so a repetition's
    // numbers do not depend on the block it ran in.
    let n = reps.len() as f64;
    let mut out = Vec::with_capacity(reps.len());
    for (i, &r) in reps.iter().enumerate() {
        let own = problem.at_repetition(r)?;
        out.extend(predict_block(
            spec,
            setting,
            &own,
            method,
            &[r],
            compute,
            &|f| progress((i as f64 + f) / n),
        )?);
    }
    Ok(out)
}

/// The data of a block of repetitions as a method gets it, with the run's settings that shape
/// it: shared by [`predict_block`] and [`check_method`], so that a check sees the task a run
/// would train on.
struct Block<'s> {
    levels: &'s [f64],
    source: NoiseSource,
    epochs: usize,
    /// With the validation-set noise estimate, the validation inputs are predicted after the
    /// test inputs and split off from the predictions.
    with_validation: bool,
    data: TaskData,
}

impl<'s> Block<'s> {
    fn new(
        spec: &'s ExperimentSpec,
        setting: &Setting,
        problem: &Problem,
        reps: &[u64],
    ) -> Result<Block<'s>> {
        // A spec without [run] (scored, not run) has no levels, the known noise, and no
        // training.
        let (levels, source, epochs) = match &spec.run {
            Some(run) => (&run.levels[..], run.noise, spec.epochs(setting)?),
            None => (&[][..], NoiseSource::Known, 1),
        };
        let classification = Track::of(problem) == Track::Classification;
        let with_validation = source == NoiseSource::Validation && !classification;
        if with_validation && problem.validation.is_none() {
            bail!(
                "run.noise = \"validation\": {} has no validation set",
                problem.display_name()
            );
        }
        Ok(Block {
            levels,
            source,
            epochs,
            with_validation,
            data: problem.task_data(reps, with_validation),
        })
    }

    fn task(&self, spec: &ExperimentSpec, setting: &Setting) -> Task<'_> {
        self.data.task(
            self.epochs,
            SeedBase {
                base: spec.seed,
                experiment: spec.name.clone(),
                setting: setting.label(),
            },
        )
    }
}

/// Checks `method`'s configuration against `setting`'s problem before anything trains: the
/// method's own checks on the task it would get (repetition 0's: the data's shape, the noise,
/// the epochs), and for a method whose intervals of y are quantile bands, that they include
/// every level the summaries score (the run's levels and 0.95). What fails here would fail
/// `predict` with the same message, after the methods before it had trained.
pub fn check_method(
    spec: &ExperimentSpec,
    setting: &Setting,
    problem: &Problem,
    method: &dyn Method,
) -> Result<()> {
    let block = Block::new(spec, setting, problem, &[0])?;
    let task = block.task(spec, setting);
    let context = || format!("method {} at {}", method.name(), problem.display_name());
    let levels = block.levels;
    let scored = summary::with_coverage_level(levels);
    method.check(&task, &scored).with_context(context)?;
    if let Some(bands) = method.band_levels() {
        if let Some(level) = scored
            .iter()
            .find(|&&l| !bands.iter().any(|b| (b - l).abs() < 1e-9))
        {
            bail!(
                "{}: levels = {bands:?} has no band at level {level}, which the run scores (its \
                 levels {levels:?} and 0.95); valid: leave `levels` out (the run's are taken), \
                 or list every one of {scored:?}",
                method.name()
            );
        }
    }
    Ok(())
}

/// [`predict`] for repetitions that share their inputs.
fn predict_block(
    spec: &ExperimentSpec,
    setting: &Setting,
    problem: &Problem,
    method: &dyn Method,
    reps: &[u64],
    compute: &Compute,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Vec<Predicted>> {
    let track = Track::of(problem);
    let classification = track == Track::Classification;
    let block = Block::new(spec, setting, problem, reps)?;
    let (levels, source, with_validation) = (block.levels, block.source, block.with_validation);
    let data = &block.data;
    let task = block.task(spec, setting);
    let total = (reps.len() * method.replicas_per_repetition()) as f64;
    let context = || format!("method {} at {}", method.name(), problem.display_name());
    // Classification needs every member's or pass's logits; the joint metrics and the draws
    // files every method's draws.
    let keep_samples =
        classification || spec.joint_settings().is_some() || draw_format(spec) != DrawFormat::None;
    let mut outputs = method
        .run(&task, compute, keep_samples, &|done| {
            progress(done as f64 / total)
        })
        .with_context(context)?;
    let m_test = data.m_test;
    let parameters = method.parameters(&task);
    for (k, o) in outputs.iter_mut().enumerate() {
        if let (Some(p), false) = (parameters, o.diverged) {
            o.scalars.insert(names::PARAMETERS.into(), p as f64);
        }
        let valid = with_validation.then(|| split_off(o, m_test));
        if classification || o.noise_std.is_some() || o.noise_known || o.diverged {
            continue;
        }
        let estimate = match (source, valid, &o.train_mean) {
            (NoiseSource::Validation, Some((mean, std)), _) => Some((
                "validation_noise_sd",
                uqbench_metrics::regression::validation_noise_sd(
                    &data.validation_y[k],
                    &mean,
                    &std,
                ),
            )),
            (NoiseSource::Residual, _, Some(fit)) => Some((
                "residual_noise_sd",
                (fit.iter()
                    .zip(&data.y[k])
                    .map(|(f, y)| (y - f).powi(2))
                    .sum::<f64>()
                    / fit.len() as f64)
                    .sqrt(),
            )),
            _ => None,
        };
        if let Some((name, sd)) = estimate {
            o.noise_std = Some(vec![sd; m_test]);
            o.scalars.insert(name.to_string(), sd);
        }
    }
    // The exact posterior of every repetition, for the distances to it (W2, KL: every method
    // but the anchor itself) and the joint metrics (every method) of a regression problem
    // with an anchor.
    let anchor = (!classification && problem.linear().is_some())
        .then(|| Anchor::fit(problem).ok())
        .flatten();
    let posteriors: Vec<_> = data
        .y
        .iter()
        .map(|y| anchor.as_ref().and_then(|a| a.posterior(y).ok()))
        .collect();
    store(
        spec,
        setting,
        problem,
        method,
        track,
        reps,
        outputs,
        &data.y,
        &posteriors,
        levels,
    )
}

/// Each repetition's output in its track's stored form, with the distances to the exact
/// posterior (not for the anchor itself) and the joint metrics.
#[allow(clippy::too_many_arguments)]
fn store(
    spec: &ExperimentSpec,
    setting: &Setting,
    problem: &Problem,
    method: &dyn Method,
    track: Track,
    reps: &[u64],
    outputs: Vec<Prediction>,
    ys: &[Vec<f64>],
    posteriors: &[Option<Posterior>],
    levels: &[f64],
) -> Result<Vec<Predicted>> {
    let context = || format!("method {} at {}", method.name(), problem.display_name());
    let is_anchor = method.name() == ANCHOR;
    let joint = spec.joint_settings();
    let format = draw_format(spec);
    let regions = summary::regions(&summary::TestInfo::of(problem));
    let label = setting.label();
    // The repetitions in parallel (each is independent, and its intervals, CRPS and joint
    // metrics are most of a run's host work after training); the order is kept.
    let outputs: Vec<Mutex<Option<Prediction>>> =
        outputs.into_iter().map(|o| Mutex::new(Some(o))).collect();
    let stored = uqbench_core::par_map(reps.len(), |k| {
        let (r, y, post) = (reps[k], &ys[k], &posteriors[k]);
        let o = (outputs[k].lock().ok().and_then(|mut o| o.take()))
            .expect("each repetition's output is taken once");
        let joint_input = joint.as_ref().map(|settings| JointInput {
            settings,
            seed: SeedPath {
                base: spec.seed,
                experiment: &spec.name,
                setting: &label,
                repetition: r,
                member: 0,
                purpose: summary::joint::JOINT_DRAWS,
            },
            regions: &regions,
            exact: post.as_ref().map(Exact::of),
        });
        let ctx = RepContext {
            anchor: post.as_ref().filter(|_| !is_anchor).map(|p| AnchorRef {
                mean: &p.mean,
                std: &p.std,
                dof: p.dof,
            }),
            joint: joint_input.as_ref(),
            levels,
            truth: &problem.test.truth,
            test_sigma: &problem.test.sigma,
            train_y: y,
            train_sigma: &problem.train_sigma,
        };
        let draws = draws::encode(&o, format, track == Track::Classification);
        Ok(Predicted {
            stored: track.store(r, o, &ctx).with_context(context)?,
            draws,
        })
    });
    stored.into_iter().collect()
}

/// How the run stores draws (a spec without `[run]`, scored, stores none).
fn draw_format(spec: &ExperimentSpec) -> DrawFormat {
    spec.run.as_ref().map_or(DrawFormat::None, |r| r.draws)
}

/// Splits the predictions at the inputs after the first `m` (the validation inputs) off a
/// method's output: their mean and uncertainty.
fn split_off(o: &mut Prediction, m: usize) -> (Vec<f64>, Vec<f64>) {
    let tail = o.split_tail(m);
    (tail.mean, tail.std)
}

/// The fresh test labels of every repetition of a classification problem (see
/// [`summary::test_labels`]).
pub fn label_source<'a>(
    spec: &'a ExperimentSpec,
    problem: &'a Problem,
) -> impl Fn(u64) -> Vec<bool> + 'a {
    move |rep| {
        let label = problem.setting.label();
        summary::test_labels(
            &SeedPath {
                base: spec.seed,
                experiment: &spec.name,
                setting: &label,
                repetition: rep,
                member: 0,
                purpose: summary::TEST_LABELS,
            },
            &problem.test.truth,
        )
    }
}
