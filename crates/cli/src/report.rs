//! The run's `report.md`: what was run, the figures, and a table of the aggregates.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use uqbench_experiment::compare;
use uqbench_experiment::spec::NoiseSource;
use uqbench_experiment::store::write_atomic;
use uqbench_experiment::summary::{catalogue::column, names};
use uqbench_experiment::{AggregateTables, Track};

use crate::figures::Written;
use uqbench_experiment::summary::{Scalar, SettingSummary, Summary, UNDERFIT_FACTOR};

fn cell(s: Option<&Scalar>) -> String {
    match s {
        // An infinite value is a result (an infinite KL, NLL or R̂): say so, and how many
        // repetitions made it.
        Some(v) if v.value.is_infinite() || v.infinite.unwrap_or(0) > 0 => {
            let value = match v.value {
                x if x == f64::INFINITY => "+∞".to_string(),
                x if x == f64::NEG_INFINITY => "−∞".to_string(),
                x if x.is_finite() => format!("{x:.3}"),
                _ => "–".to_string(),
            };
            match v.infinite {
                Some(n) if n > 0 => format!("{value} ({n} infinite)"),
                _ => value,
            }
        }
        Some(v) if v.value.is_finite() && v.stderr.is_finite() => {
            format!("{:.3} ± {:.3}", v.value, v.stderr)
        }
        Some(v) if v.value.is_finite() => format!("{:.3}", v.value),
        _ => "–".to_string(),
    }
}

/// What the report says about the run before its results.
#[derive(Debug, Clone)]
pub struct Header<'a> {
    /// The experiment's name.
    pub name: &'a str,
    /// Its one-line description.
    pub description: &'a str,
    /// The profile it ran with.
    pub profile: Option<&'a str>,
    /// The backend.
    pub backend: &'a str,
    /// Repetitions per setting.
    pub repetitions: u64,
    /// The settings' labels.
    pub settings: Vec<String>,
    /// The methods, in plan order.
    pub methods: &'a [String],
    /// The noise source of methods without a noise model.
    pub noise: NoiseSource,
    /// The problem's track.
    pub track: Track,
    /// An incomplete run's unfinished (method, setting) pairs, left out of the report.
    pub missing: &'a [String],
}

/// Writes `report.md` into `dir`.
pub fn write(
    dir: &Path,
    header: &Header<'_>,
    summary: &Summary,
    figures: &[Written],
) -> Result<()> {
    let mut md = String::new();
    let _ = writeln!(md, "# uqbench run: {}\n", header.name);
    if !header.missing.is_empty() {
        let _ = writeln!(
            md,
            "> **Incomplete run.** This report covers only the (method, setting) pairs whose \
             repetitions all finished. Not finished, and left out of every table and figure: \
             {}. Continue the run with `uqbench run … --resume` (or merge its shards), then \
             `uqbench report` again.\n",
            header.missing.join("; ")
        );
    }
    if !header.description.is_empty() {
        let _ = writeln!(md, "{}\n", header.description);
    }
    let _ = writeln!(
        md,
        "Profile `{}`, backend `{}`, {} repetitions per setting, settings: {}, methods: {}. \
         The full spec is in `spec.resolved.toml`; per-point metrics in `summary.csv`, \
         per-region aggregates in `aggregate.csv`, everything in `summary.json`; wall time \
         and parameters per method in `timings.csv`.\n",
        header.profile.unwrap_or("none"),
        header.backend,
        header.repetitions,
        header
            .settings
            .iter()
            .map(|s| if s.is_empty() {
                "(no sweep)".to_string()
            } else {
                s.clone()
            })
            .collect::<Vec<_>>()
            .join(", "),
        header.methods.join(", ")
    );
    let plan = header.track.report();
    if plan.states_noise {
        let _ = writeln!(
            md,
            "The noise sd of a new y (prediction intervals, PICF) for methods without a noise \
             model of their own: {} (`run.noise = \"{}\"`).\n",
            header.noise.describe(),
            match header.noise {
                NoiseSource::Known => "known",
                NoiseSource::Validation => "validation",
                NoiseSource::Residual => "residual",
            }
        );
    }
    let random = summary
        .settings
        .iter()
        .any(|s| s.test.design.as_deref() == Some(uqbench_experiment::summary::RANDOM));
    let as_train = summary
        .settings
        .iter()
        .all(|s| s.test.test_as_train != Some(false));
    let _ = writeln!(
        md,
        "{}\n",
        if random && as_train {
            "Inputs: random (`design = \"random\"`). Every repetition drew its own training and \
             test inputs, the test inputs from the training design, so a mean over repetitions \
             is marginal over x and y. Per-point metrics pool each test slot over repetitions \
             (quantile bins along x, at the slot's mean position), and [004]'s per-point Brier \
             scores are left out."
        } else if random {
            "Inputs: random (`design = \"random\"`). Every repetition drew its own training and \
             test inputs, the test inputs from a test design other than the training design, \
             so a mean over repetitions averages over the training inputs, y and the test \
             design's inputs: it is not the risk marginal over the training distribution of x. \
             Per-point metrics pool each test slot over repetitions (quantile bins along x, at \
             the slot's mean position), and [004]'s per-point Brier scores are left out."
        } else {
            "Inputs: fixed. Each setting drew its inputs once and the repetitions redraw only the \
             targets, so every mean over repetitions is conditional on those inputs, and its ± \
             covers the noise draws only (`design = \"random\"` measures the marginal)."
        }
    );
    let _ = writeln!(md, "## Figures\n");
    for f in figures {
        let png = f.svg.with_extension("png");
        let _ = writeln!(
            md,
            "### {}\n\n![{}]({}) ([SVG]({}))\n",
            f.title,
            f.title,
            png.display(),
            f.svg.display()
        );
    }
    match plan.aggregates {
        AggregateTables::Regression => regression_tables(&mut md, header.methods, summary),
        AggregateTables::Classification => {
            classification_table(&mut md, header.methods, summary);
        }
    }
    joint_tables(&mut md, header.methods, summary);
    rankings(&mut md, summary, &plan.ranked);
    Ok(write_atomic(&dir.join("report.md"), md.as_bytes())?)
}

/// The aggregates of a regression run: what they are, then one table per setting.
fn regression_tables(md: &mut String, methods: &[String], summary: &Summary) {
    let _ = writeln!(md, "## Aggregates\n");
    let _ = writeln!(
        md,
        "Each repetition's mean over a region's test inputs, averaged over the repetitions (± \
         the standard error over the repetitions, which are independent; the inputs of one \
         repetition are not): the fraction of inputs covered by the method's 95% interval \
         (mean ± 1.96·uncertainty for a normal predictive distribution, a t or empirical \
         interval otherwise), the mean deviation |prediction − truth| and the mean \
         uncertainty; the median over test inputs of \
         the uncertainty relative to the anchor's (BLR). `in`/`out`/`gap`: test inputs inside, outside or in a hole of the \
         training region. Deviation / BLR: the mean in-distribution deviation over the anchor's \
         (flagged ⚠ above {UNDERFIT_FACTOR}: the nets do not fit the data). Fit ratio: the mean \
         over repetitions of mean_i (ŷ(x_i) − y_i)²/σ(x_i)² at the training inputs, about \
         1 − p_eff/N for a good fit (the anchor: 1 − p/N) and ≫ 1 for an underfit. W2 to BLR: \
         the mean over test inputs of the 2-Wasserstein distance from the method's predictive \
         distribution of f to the anchor's in the same repetition. Diverged \
         repetitions are counted and left out of every metric.\n"
    );
    for s in &summary.settings {
        regression_table(md, methods, s);
    }
}

/// Which differences between methods are real: per setting, the ranking by each of
/// `metrics` the run has (region `all`), with the ties the data do not separate.
fn rankings(md: &mut String, summary: &Summary, metrics: &[&str]) {
    let rows = compare::rows_of(summary);
    let mut any = false;
    for metric in metrics {
        let opts = compare::Options::default().with_metric(metric);
        // A run without this metric (no anchor: no W2) or with one repetition has nothing to
        // rank.
        let Ok(c) = compare::compare(&rows, &opts) else {
            continue;
        };
        if c.pairs.iter().all(|p| p.k < 2) {
            continue;
        }
        if !any {
            let _ = writeln!(
                md,
                "## Which differences are real\n\nRepetition r of every method saw the same \
                 data, so methods are compared by their differences per repetition (paired t \
                 and bootstrap over repetitions, Holm over each setting's pairs). A method's ranks \
                 run from 1 + the number of methods separated from it and better to n − the \
                 number separated from it and worse; methods the data do not separate share \
                 ranks. Every pair, with its interval, P(A < B) and minimum \
                 detectable difference: `uqbench compare <this directory> --metric M`; each \
                 repetition's value: `repetitions.csv`.\n"
            );
            any = true;
        }
        crate::ranking::rankings_md(&c, md);
    }
}

/// The joint predictions (spec §10) of every setting: per method, what its joint is made of
/// and the KL at each τ from the exact posterior predictive and from the data-generating
/// distribution (all test inputs; per region in `aggregate.csv`).
fn joint_tables(md: &mut String, methods: &[String], summary: &Summary) {
    let mut columns: Vec<String> = Vec::new();
    for prefix in [names::JOINT_KL, names::ENV_KL] {
        for tau in crate::figures::joint_taus(summary, prefix) {
            columns.push(format!("{prefix}_{tau}"));
        }
    }
    if columns.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "## Joint predictions
"
    );
    let _ = writeln!(
        md,
        "KL at τ test inputs drawn by dyadic sampling (κ anchors; Osband et al. 2022), in nats \
         for the τ points together, the mean over repetitions ± its standard error: \
         `joint_kl_T` from the exact posterior predictive of y to the method's (0 for the \
         anchor), `env_kl_T` from the data-generating N(f(x), σ²(x)) (classification: the \
         labels' Bernoullis). τ = 1 is the mean marginal KL over the test inputs; a method that \
         knows which inputs share their uncertainty keeps joint_kl_T / T near joint_kl_1. A \
         method's joint: `gaussian` (closed form), `draws` (its members, passes or posterior \
         draws, each with its noise sd), `marginals` (it has none: the product of its \
         marginals).\n"
    );
    for s in &summary.settings {
        let title = if s.setting.is_empty() {
            "(no sweep)"
        } else {
            s.setting.as_str()
        };
        let _ = writeln!(md, "### {title}\n");
        let _ = writeln!(md, "| method | joint | {} |", columns.join(" | "));
        let _ = writeln!(md, "|{}", "---|".repeat(2 + columns.len()));
        for (name, m) in methods
            .iter()
            .filter_map(|n| s.methods.get(n).map(|m| (n, m)))
        {
            let all = m.aggregate.get(names::ALL);
            let kind = m.joint_kind.map_or("–".to_string(), |k| {
                let kind = serde_json::to_value(k)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                // A calibration wrapper's joint is its base's (RepResult::joint_of_base).
                if m.joint_of_base {
                    format!("{kind} of its base")
                } else {
                    kind
                }
            });
            let cells: Vec<String> = columns
                .iter()
                .map(|c| cell(all.and_then(|a| a.get(c))))
                .collect();
            let _ = writeln!(md, "| {name} | {kind} | {} |", cells.join(" | "));
        }
        let _ = writeln!(md);
    }
}

/// One setting's aggregates of a regression run: coverage per region, deviation and
/// uncertainty with their ratios to the anchor's, fit ratio, CICF Brier, learned rate, and
/// each method's flags.
fn regression_table(md: &mut String, methods: &[String], s: &SettingSummary) {
    let title = if s.setting.is_empty() {
        "(no sweep)".to_string()
    } else {
        s.setting.clone()
    };
    let _ = writeln!(md, "### {title}\n");
    let regions: Vec<&str> = [names::ALL, names::IN, names::GAP, names::OUT]
        .into_iter()
        .filter(|r| s.methods.values().any(|m| m.aggregate.contains_key(*r)))
        .collect();
    let _ = write!(md, "| method | reps | diverged |");
    for r in &regions {
        let _ = write!(md, " {} ({r}) |", column(names::COVERAGE));
    }
    for metric in [
        names::DEVIATION,
        names::DEVIATION_RATIO,
        names::UNCERTAINTY,
        names::UNCERTAINTY_RATIO,
        names::FIT_RATIO,
    ] {
        let _ = write!(md, " {} |", column(metric));
    }
    let _ = writeln!(
        md,
        " {} 0.95 | {} | learned rate |",
        column(names::CICF_BRIER),
        column(names::W2_ANCHOR)
    );
    let _ = writeln!(md, "|{}", "---|".repeat(11 + regions.len()));
    let mut flags = Vec::new();
    let mut notes = Vec::new();
    for (name, m) in methods
        .iter()
        .filter_map(|n| s.methods.get(n).map(|m| (n, m)))
    {
        let all = m.aggregate.get(names::ALL);
        let get = |k: &str| all.and_then(|a| a.get(k));
        let ratio = [names::IN, names::ALL].iter().find_map(|r| {
            m.aggregate
                .get(*r)
                .and_then(|a| a.get(names::DEVIATION_RATIO))
        });
        let rate = get(names::LEARNED_P)
            .map(|v| format!("p = {}", cell(Some(v))))
            .or_else(|| get(names::LEARNED_ALPHA).map(|v| format!("α = {}", cell(Some(v)))));
        let mark = if m.flags.is_empty() { "" } else { " ⚠" };
        let _ = write!(
            md,
            "| {name}{mark} | {} | {} |",
            m.repetitions,
            m.diverged.len()
        );
        for r in &regions {
            let _ = write!(
                md,
                " {} |",
                cell(m.aggregate.get(*r).and_then(|a| a.get(names::COVERAGE)))
            );
        }
        let _ = writeln!(
            md,
            " {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(get(names::DEVIATION)),
            cell(ratio),
            cell(get(names::UNCERTAINTY)),
            cell(get(names::UNCERTAINTY_RATIO)),
            cell(get(names::FIT_RATIO)),
            cell(get(&names::at(names::CICF_BRIER, 0.95))),
            cell(get(names::W2_ANCHOR)),
            rate.unwrap_or_else(|| "–".to_string())
        );
        if let Some(p) = get(names::CALIBRATION_POINTS) {
            notes.push(format!(
                "- **{name}** held out {} of each repetition's training points for calibration \
                 (its base trained on the rest).",
                p.value
            ));
        }
        for f in &m.flags {
            flags.push(format!("- ⚠ **{name}**: {f}"));
        }
    }
    let _ = writeln!(md);
    if !notes.is_empty() {
        let _ = writeln!(md, "{}\n", notes.join("\n"));
    }
    if !flags.is_empty() {
        let _ = writeln!(md, "{}\n", flags.join("\n"));
    }
}

/// The aggregates of a classification run ([002] §4.2, [003]).
fn classification_table(md: &mut String, methods: &[String], summary: &Summary) {
    let level = summary.levels.first().copied().unwrap_or(0.9);
    let name = uqbench_experiment::summary::level_name(level);
    let _ = writeln!(md, "## Aggregates\n");
    let _ = writeln!(
        md,
        "Against the exact P(y = 1 | x): the coverage of P by each method's central {name} \
         interval of its draws (members, passes) and that interval's width, both averaged over \
         test inputs (`in`: inside the training inputs' bounding box); the mean |P̂ − P|. On \
         fresh test labels drawn from P per repetition (± standard error over repetitions): \
         ECE ({} equal-width bins of the top-label confidence), Brier (multi-class form: twice \
         (p − y)²), NLL, accuracy and ROC AUC; the mean mutual information; and [003]'s \
         referral at 50% retained (the most certain half by predictive entropy) against random \
         referral. Diverged repetitions are counted and left out of every metric.\n",
        uqbench_experiment::summary::ECE_BINS
    );
    for s in &summary.settings {
        let title = if s.setting.is_empty() {
            "(no sweep)".to_string()
        } else {
            s.setting.clone()
        };
        let _ = writeln!(md, "### {title}\n");
        let _ = write!(md, "| method | reps | diverged |");
        for r in [names::ALL, names::IN, names::OUT] {
            let _ = write!(md, " {} ({r}) |", column(names::COVERAGE_AT));
        }
        let _ = write!(md, " {} (all) |", column(names::WIDTH));
        for metric in [
            names::ABS_ERROR,
            names::ECE,
            names::BRIER,
            names::NLL,
            names::ACCURACY,
            names::AUC,
            names::MUTUAL_INFORMATION,
        ] {
            let _ = write!(md, " {} |", column(metric));
        }
        let _ = writeln!(
            md,
            " {} 0.5 | {} 0.5 |",
            column(names::REFERRAL_ACCURACY),
            column(names::RANDOM_ACCURACY)
        );
        let _ = writeln!(md, "|{}", "---|".repeat(16));
        let mut flags = Vec::new();
        for (method, m) in methods
            .iter()
            .filter_map(|n| s.methods.get(n).map(|m| (n, m)))
        {
            let at = |r: &str, k: &str| m.aggregate.get(r).and_then(|a| a.get(k));
            let cov = |r: &str| cell(at(r, &names::at(names::COVERAGE_AT, level)));
            let mark = if m.flags.is_empty() { "" } else { " ⚠" };
            flags.extend(m.flags.iter().map(|f| format!("- ⚠ **{method}**: {f}")));
            let _ = writeln!(
                md,
                "| {method}{mark} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                m.repetitions,
                m.diverged.len(),
                cov(names::ALL),
                cov(names::IN),
                cov(names::OUT),
                cell(at(names::ALL, &names::at(names::WIDTH, level))),
                cell(at(names::ALL, names::ABS_ERROR)),
                cell(at(names::ALL, names::ECE)),
                cell(at(names::ALL, names::BRIER)),
                cell(at(names::ALL, names::NLL)),
                cell(at(names::ALL, names::ACCURACY)),
                cell(at(names::ALL, names::AUC)),
                cell(at(names::ALL, names::MUTUAL_INFORMATION)),
                cell(at(names::ALL, &names::at(names::REFERRAL_ACCURACY, 0.5))),
                cell(at(names::ALL, &names::at(names::RANDOM_ACCURACY, 0.5))),
            );
        }
        let _ = writeln!(md);
        if !flags.is_empty() {
            let _ = writeln!(md, "{}\n", flags.join("\n"));
        }
    }
}
