//! `uqbench merge`: combine the directories of a sharded run into one run.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::status::ranges;
use crate::runner::{self, Plan};
use uqbench_experiment::draws::{draws_path, EXTENSION};
use uqbench_experiment::spec::ExperimentSpec;
use uqbench_experiment::store::rep_path;
use uqbench_experiment::store::{prepare_dir, write_atomic, RunMeta, SPEC_FILE};

/// Arguments of `uqbench merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' run directories.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// The merged run directory.
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `uqbench merge`.
pub fn run(args: &MergeArgs) -> Result<()> {
    let read_spec = |d: &Path| {
        std::fs::read_to_string(d.join(SPEC_FILE))
            .with_context(|| format!("{} is not a run directory (no {SPEC_FILE})", d.display()))
    };
    let text = read_spec(&args.dirs[0])?;
    for d in &args.dirs[1..] {
        if read_spec(d)? != text {
            bail!(
                "{} ran a different spec than {}: only shards of one run can be merged",
                d.display(),
                args.dirs[0].display()
            );
        }
    }
    let spec = ExperimentSpec::from_toml_str(&text, None)?;
    let plan = Plan::new(spec, None)?;
    let metas: Vec<RunMeta> = args.dirs.iter().map(|d| RunMeta::read(d)).collect();
    check_provenance(&args.dirs, &metas)?;
    // Every repetition file of the plan must come from exactly one directory.
    let mut sources = Vec::new();
    let mut missing: Vec<(usize, u64)> = Vec::new();
    let mut duplicated: Vec<(PathBuf, Vec<&Path>)> = Vec::new();
    for (ui, unit) in plan.units.iter().enumerate() {
        let setting = &plan.settings[unit.setting];
        for r in unit.reps.clone() {
            let holders: Vec<&Path> = args
                .dirs
                .iter()
                .filter(|d| rep_path(d, setting, &unit.method, r).is_file())
                .map(PathBuf::as_path)
                .collect();
            match holders.as_slice() {
                [] => missing.push((ui, r)),
                [one] => {
                    // The draws file first (where the run wrote one), then the repetition's.
                    let draws = draws_path(one, setting, &unit.method, r);
                    if draws.is_file() {
                        sources.push((draws, draws_path(&args.out, setting, &unit.method, r)));
                    }
                    sources.push((
                        rep_path(one, setting, &unit.method, r),
                        rep_path(&args.out, setting, &unit.method, r),
                    ))
                }
                _ => duplicated.push((rep_path(Path::new(""), setting, &unit.method, r), holders)),
            }
        }
    }
    if !duplicated.is_empty() || !missing.is_empty() {
        bail!(
            "{}",
            completeness_report(&plan, &metas, &missing, &duplicated)
        );
    }
    prepare_dir(&args.out, &text, true)?;
    let meta = metas[0].clone();
    let mut copied = 0usize;
    let mut draws = 0usize;
    for (source, target) in sources {
        let is_draws = source.extension().is_some_and(|e| e == EXTENSION);
        let bytes = std::fs::read(&source)?;
        if target.is_file() {
            if std::fs::read(&target)? != bytes {
                bail!(
                    "{} and {} disagree: the output directory holds another computation",
                    source.display(),
                    target.display()
                );
            }
        } else {
            write_atomic(&target, &bytes)?;
            if is_draws {
                draws += 1;
            } else {
                copied += 1;
            }
        }
    }
    for d in &args.dirs {
        runner::timings::copy_all(d, &args.out)?;
    }
    let merged = RunMeta {
        shard: None,
        reps: None,
        merged_from: args.dirs.clone(),
        ..meta
    };
    merged.write(&args.out)?;
    eprintln!(
        "merged {copied} repetition files ({draws} with draws files) from {} shards into {}",
        args.dirs.len(),
        args.out.display()
    );
    runner::finish(&args.out, &plan, &merged)
}

/// What a merge lacks or holds twice, grouped per setting and method, with what to rerun.
pub fn completeness_report(
    plan: &Plan,
    metas: &[RunMeta],
    missing: &[(usize, u64)],
    duplicated: &[(PathBuf, Vec<&Path>)],
) -> String {
    let mut lines = Vec::new();
    if !missing.is_empty() {
        let mut groups: std::collections::BTreeMap<(usize, &str), Vec<u64>> = Default::default();
        for &(ui, r) in missing {
            let u = &plan.units[ui];
            groups
                .entry((u.setting, u.method.as_str()))
                .or_default()
                .push(r);
        }
        lines.push(format!(
            "{} repetition files are missing (none of the directories holds them):",
            missing.len()
        ));
        for ((setting, method), reps) in &groups {
            let label = plan.settings[*setting].label();
            lines.push(format!(
                "  setting {} method {method}: repetitions {}",
                if label.is_empty() { "-" } else { &label },
                ranges(reps)
            ));
        }
        // The shards to rerun, when the parts are shards of one split.
        let ns: Vec<usize> = metas
            .iter()
            .filter_map(|m| m.shard.as_deref()?.split_once('/')?.1.parse().ok())
            .collect();
        let split = (ns.len() == metas.len() && ns.windows(2).all(|w| w[0] == w[1]))
            .then(|| crate::runner::shards::balanced(plan, ns[0]).ok())
            .flatten();
        if let Some(shards) = split {
            let n = shards.len();
            let mut rerun: Vec<usize> = missing
                .iter()
                .filter_map(|&(ui, r)| {
                    let u = &plan.units[ui];
                    crate::runner::shards::shard_of(&shards, u.setting, &u.method, r)
                })
                .collect();
            rerun.sort_unstable();
            rerun.dedup();
            lines.push(format!(
                "rerun (with --resume in its directory) {}",
                rerun
                    .iter()
                    .map(|i| format!("--shard {i}/{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        } else {
            let mut reps: Vec<u64> = missing.iter().map(|&(_, r)| r).collect();
            reps.sort_unstable();
            reps.dedup();
            lines.push(format!(
                "run the missing repetitions with --reps (e.g. --reps {}) and merge again",
                ranges(&reps).split(", ").next().unwrap_or_default()
            ));
        }
    }
    if !duplicated.is_empty() {
        lines.push(format!(
            "{} repetition files are held by more than one directory (the parts overlap):",
            duplicated.len()
        ));
        for (path, dirs) in duplicated.iter().take(20) {
            lines.push(format!(
                "  {} in {}",
                path.display(),
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            ));
        }
        if duplicated.len() > 20 {
            lines.push(format!("  … and {} more", duplicated.len() - 20));
        }
        lines.push("merge parts with disjoint repetitions only".into());
    }
    lines.join("\n")
}

/// Parts made by different builds, backends or settings of the host loops are not one
/// computation: merge refuses them, naming the first field that differs.
fn check_provenance(dirs: &[PathBuf], metas: &[RunMeta]) -> Result<()> {
    let first = metas[0].provenance();
    for (d, m) in dirs.iter().zip(metas).skip(1) {
        for ((field, a), (_, b)) in first.iter().zip(m.provenance()) {
            // A checksum is compared where both parts recorded one.
            let unrecorded = *field == "binary_sha256" && (a.is_empty() || b.is_empty());
            if *a != b && !unrecorded {
                bail!(
                    "{} and {} come from different runs: their run.json differ in {field} \
                     ({a:?} against {b:?}); merge only parts of one build and backend (rerun \
                     the odd part with the binary the others used: `uqbench slurm` pins it in \
                     slurm/bin/)",
                    dirs[0].display(),
                    d.display()
                );
            }
        }
    }
    Ok(())
}
