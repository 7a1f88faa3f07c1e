//! [000]'s figures 3 and 6: metrics against each swept variable, at the report points and per
//! region, with error bars over repetitions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use uqbench_experiment::summary::names;

use super::{
    colour, finite_or_zero, legend_row, pe, point_values, render, Curve, Figure, FigureInput, FONT,
};

/// Metrics against a swept variable: a grid of panels (rows × metric columns), one line per
/// method with error bars.
struct AgainstVariable {
    title: String,
    variable: String,
    /// Row names (report points or regions).
    rows: Vec<String>,
    /// Column metrics, and whether each is a coverage (drawn on [0, 1] with the nominal level).
    columns: Vec<(String, Option<f64>)>,
    /// Method → per row → per column curve.
    series: Vec<(String, Vec<Vec<Curve>>)>,
}

impl Figure for AgainstVariable {
    fn size(&self) -> (u32, u32) {
        (
            400 * self.columns.len() as u32,
            320 * self.rows.len() as u32 + 70,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 20)).map_err(pe)?;
        let (body, legend) = root.split_vertically(root.dim_in_pixel().1 as i32 - 30);
        let ncol = self.columns.len();
        let areas = body.split_evenly((self.rows.len(), ncol));
        for (row, label) in self.rows.iter().enumerate() {
            for (col, (metric, nominal)) in self.columns.iter().enumerate() {
                let all = self
                    .series
                    .iter()
                    .flat_map(|(_, per)| per[row][col].iter())
                    .filter(|(x, v, _)| x.is_finite() && v.is_finite());
                let (xmin, xmax, ymin, ymax) = all.fold(
                    (
                        f64::INFINITY,
                        f64::NEG_INFINITY,
                        f64::INFINITY,
                        f64::NEG_INFINITY,
                    ),
                    |(a, b, c, d), &(x, v, s)| (a.min(x), b.max(x), c.min(v - s), d.max(v + s)),
                );
                if !xmin.is_finite() {
                    continue;
                }
                let (ymin, ymax) = if nominal.is_some() {
                    (0.0, 1.02)
                } else {
                    (ymin.min(0.0), ymax * 1.05 + 1e-12)
                };
                let xpad = ((xmax - xmin) * 0.05).max(0.1);
                let mut chart = ChartBuilder::on(&areas[row * ncol + col])
                    .caption(format!("{metric} at {label}"), (FONT, 14))
                    .margin(8)
                    .x_label_area_size(30)
                    .y_label_area_size(50)
                    .build_cartesian_2d((xmin - xpad)..(xmax + xpad), ymin..ymax)
                    .map_err(pe)?;
                chart
                    .configure_mesh()
                    .x_desc(&self.variable)
                    .label_style((FONT, 11))
                    .draw()
                    .map_err(pe)?;
                if let Some(level) = nominal {
                    chart
                        .draw_series(DashedLineSeries::new(
                            [(xmin - xpad, *level), (xmax + xpad, *level)],
                            4,
                            4,
                            BLACK.stroke_width(1),
                        ))
                        .map_err(pe)?;
                }
                for (i, (_, per)) in self.series.iter().enumerate() {
                    let c = colour(i);
                    let pts: Vec<(f64, f64, f64)> = per[row][col]
                        .iter()
                        .copied()
                        .filter(|(_, v, _)| v.is_finite())
                        .collect();
                    chart
                        .draw_series(LineSeries::new(
                            pts.iter().map(|&(x, v, _)| (x, v)),
                            c.stroke_width(2),
                        ))
                        .map_err(pe)?;
                    chart
                        .draw_series(pts.iter().map(|&(x, v, s)| {
                            ErrorBar::new_vertical(x, v - s, v, v + s, c.filled(), 6)
                        }))
                        .map_err(pe)?;
                }
            }
        }
        legend_row(
            &legend,
            &self
                .series
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
        )
    }
}

/// The figures of metrics against each swept variable (with two or more values), one per
/// combination of the other variables: at the report points (deviation, uncertainty,
/// coverage; `complexity…`) when the problem has them, and per region (deviation,
/// uncertainty, coverage, CICF at the first level and its interval width; `aggregates…`).
/// With a single sweep variable the stems are `complexity` and `aggregates`; otherwise
/// `complexity_VAR_at_OTHER=VALUE,…`.
fn against_variables(input: &FigureInput<'_>) -> Vec<(String, AgainstVariable)> {
    let mut figs = Vec::new();
    let labels: Vec<String> = input
        .summary
        .settings
        .first()
        .map(|s| s.test.label.iter().flatten().cloned().collect())
        .unwrap_or_default();
    let level = input.summary.levels.first().copied();
    for (var, values) in input.sweep {
        if values.len() < 2 {
            continue;
        }
        // Settings grouped by the values of the other variables.
        let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, sf) in input.settings.iter().enumerate() {
            let others: Vec<String> = sf
                .setting
                .values
                .iter()
                .filter(|(k, _)| k != var)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            groups.entry(others.join(",")).or_default().push(i);
        }
        for (others, members) in groups {
            let suffix = if input.sweep.len() == 1 {
                String::new()
            } else {
                format!("_{var}_at_{others}")
            };
            let at = if others.is_empty() {
                String::new()
            } else {
                format!(" at {others}")
            };
            let group = Group {
                var,
                members: &members,
                suffix,
                at,
            };
            if !labels.is_empty() {
                figs.push(complexity(input, &group, &labels));
            }
            figs.push(aggregates(input, &group, level));
        }
    }
    figs
}

/// Settings that differ only in the swept variable `var`: the figure's x axis.
struct Group<'a> {
    var: &'a String,
    /// Indices of the settings.
    members: &'a [usize],
    /// The file name's suffix and the title's "at …" for the other variables' values.
    suffix: String,
    at: String,
}

impl Group<'_> {
    fn x_of(&self, input: &FigureInput<'_>, i: usize) -> f64 {
        input.settings[i].setting.get(self.var).unwrap_or(f64::NAN)
    }
}

/// Deviation, uncertainty and coverage at every report point against the variable.
fn complexity(
    input: &FigureInput<'_>,
    g: &Group<'_>,
    labels: &[String],
) -> (String, AgainstVariable) {
    let metrics = [names::DEVIATION, names::UNCERTAINTY, names::COVERAGE];
    let series = input
        .methods
        .iter()
        .map(|m| {
            let per_label = labels
                .iter()
                .map(|label| {
                    metrics
                        .iter()
                        .map(|metric| {
                            g.members
                                .iter()
                                .filter_map(|&i| {
                                    let s = &input.summary.settings[i];
                                    let p = s
                                        .test
                                        .label
                                        .iter()
                                        .position(|l| l.as_deref() == Some(label))?;
                                    let (v, e) = point_values(s, m, metric)?;
                                    Some((g.x_of(input, i), v[p], finite_or_zero(e[p])))
                                })
                                .collect()
                        })
                        .collect()
                })
                .collect();
            (m.clone(), per_label)
        })
        .collect();
    (
        format!("complexity{}", g.suffix),
        AgainstVariable {
            title: format!(
                "{}: deviation, uncertainty and coverage against {}{}",
                input.experiment, g.var, g.at
            ),
            variable: g.var.clone(),
            rows: labels.to_vec(),
            columns: metrics
                .iter()
                .map(|m| (m.to_string(), (*m == names::COVERAGE).then_some(0.95)))
                .collect(),
            series,
        },
    )
}

/// The region aggregates (regression: deviation, uncertainty, coverage, CICP, width;
/// classification: coverage of P, width, ECE, |P̂ − P|) against the variable.
fn aggregates(
    input: &FigureInput<'_>,
    g: &Group<'_>,
    level: Option<f64>,
) -> (String, AgainstVariable) {
    let regions: Vec<String> = [names::ALL, names::IN, names::GAP, names::OUT]
        .iter()
        .filter(|r| {
            input
                .summary
                .settings
                .iter()
                .any(|s| s.methods.values().any(|m| m.aggregate.contains_key(**r)))
        })
        .map(|r| r.to_string())
        .collect();
    let mut columns = input.track.against_metrics(level);
    // The distance to the exact posterior, where the track and the run have it.
    if let Some(distance) = input.track.distance_metric() {
        let has = input
            .summary
            .settings
            .iter()
            .any(|s| s.methods.values().any(|m| m.points.contains_key(distance)));
        if has {
            columns.push((distance.into(), None));
        }
    }
    // The joint KL at the run's largest τ (spec §10), where the run has it.
    let prefix = input.track.joint_metric();
    if let Some(tau) = super::joint::taus(input.summary, prefix).last() {
        columns.push((format!("{prefix}_{tau}"), None));
    }
    let series = input
        .methods
        .iter()
        .map(|m| {
            let per_region = regions
                .iter()
                .map(|region| {
                    columns
                        .iter()
                        .map(|(metric, _)| {
                            g.members
                                .iter()
                                .filter_map(|&i| {
                                    let a = input.summary.settings[i]
                                        .methods
                                        .get(m)?
                                        .aggregate
                                        .get(region)?
                                        .get(metric)?;
                                    // Every region aggregate's stderr is over repetitions
                                    // (each repetition's mean over the region's inputs),
                                    // coverage and CICP included: all get error bars.
                                    Some((g.x_of(input, i), a.value, finite_or_zero(a.stderr)))
                                })
                                .collect()
                        })
                        .collect()
                })
                .collect();
            (m.clone(), per_region)
        })
        .collect();
    (
        format!("aggregates{}", g.suffix),
        AgainstVariable {
            title: format!(
                "{}: means over test inputs per region against {}{}",
                input.experiment, g.var, g.at
            ),
            variable: g.var.clone(),
            rows: regions,
            columns,
            series,
        },
    )
}

/// Draws the figures against every swept variable into `out`.
pub(super) fn draw(input: &FigureInput<'_>, out: &Path) -> Result<Vec<(String, PathBuf)>> {
    against_variables(input)
        .into_iter()
        .map(|(stem, fig)| Ok((fig.title.clone(), render(&fig, out, &stem)?)))
        .collect()
}
