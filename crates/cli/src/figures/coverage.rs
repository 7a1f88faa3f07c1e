//! [004]'s pointwise coverage: CICF and PICF along a 1-D test design for every level, and
//! histograms of pointwise (over test inputs) and marginal (over repetitions) coverage.

use std::path::PathBuf;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use uqbench_experiment::summary::names;

use super::{
    colour, coverage_levels, finite_or_zero, grid_shape, heading, legend_row, pe, point_values,
    render, Ctx, Figure, FONT,
};

/// Points (coord, value) of a line, sorted by coord.
type Curve2 = Vec<(f64, f64)>;

/// [004]'s pointwise coverage along a 1-D test design: per method (a row), CICF (left) and
/// PICF (right) against the coordinate, one line per interval level, each level's nominal
/// value dashed in the same colour.
struct CoverageAlong {
    title: String,
    coord_name: String,
    /// The interval levels, in line order.
    levels: Vec<f64>,
    /// Method → per level, (CICF, PICF) as (coord, value) sorted by coord.
    methods: Vec<(String, Vec<(Curve2, Curve2)>)>,
}

impl Figure for CoverageAlong {
    fn size(&self) -> (u32, u32) {
        (2 * 420, 240 * self.methods.len() as u32 + 70)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 20)).map_err(pe)?;
        let (body, foot) = root.split_vertically(root.dim_in_pixel().1 - 30);
        let names: Vec<String> = self.levels.iter().map(|l| format!("level {l}")).collect();
        let refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        legend_row(&foot, &refs)?;
        let xmin = self
            .methods
            .iter()
            .flat_map(|(_, ls)| ls.iter().flat_map(|(c, _)| c.first().map(|p| p.0)))
            .fold(f64::INFINITY, f64::min);
        let xmax = self
            .methods
            .iter()
            .flat_map(|(_, ls)| ls.iter().flat_map(|(c, _)| c.last().map(|p| p.0)))
            .fold(f64::NEG_INFINITY, f64::max);
        let (xmin, xmax) = if xmin < xmax {
            (xmin, xmax)
        } else {
            (0.0, 1.0)
        };
        let cells = body.split_evenly((self.methods.len(), 2));
        for (row, (name, levels)) in self.methods.iter().enumerate() {
            for (col, which) in ["CICF", "PICF"].iter().enumerate() {
                let mut chart = ChartBuilder::on(&cells[row * 2 + col])
                    .caption(format!("{name}: {which}"), (FONT, 14))
                    .margin(8)
                    .x_label_area_size(28)
                    .y_label_area_size(40)
                    .build_cartesian_2d(xmin..xmax, 0.0..1.02)
                    .map_err(pe)?;
                chart
                    .configure_mesh()
                    .disable_mesh()
                    .x_desc(self.coord_name.as_str())
                    .label_style((FONT, 10))
                    .draw()
                    .map_err(pe)?;
                for (i, (level, (ci, pi))) in self.levels.iter().zip(levels).enumerate() {
                    let c = colour(i);
                    let line = if col == 0 { ci } else { pi };
                    chart
                        .draw_series(LineSeries::new(
                            line.iter().map(|&(x, v)| (x, finite_or_zero(v))),
                            c.stroke_width(1),
                        ))
                        .map_err(pe)?;
                    chart
                        .draw_series(DashedLineSeries::new(
                            [(xmin, *level), (xmax, *level)],
                            5,
                            4,
                            c.stroke_width(1),
                        ))
                        .map_err(pe)?;
                }
            }
        }
        Ok(())
    }
}

/// Histograms over test inputs of a pointwise coverage per method, with the nominal level
/// marked.
struct CoverageHistogram {
    title: String,
    /// The nominal level.
    nominal: f64,
    /// What one value is: a test input, or a repetition.
    per: &'static str,
    methods: Vec<(String, Vec<f64>)>,
}

impl Figure for CoverageHistogram {
    fn size(&self) -> (u32, u32) {
        let (rows, cols) = grid_shape(self.methods.len());
        (340 * cols as u32, 260 * rows as u32 + 40)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 20)).map_err(pe)?;
        let (rows, cols) = grid_shape(self.methods.len());
        const BINS: usize = 20;
        // The x range: [0, 1], or for values all near the top (marginal coverages) from a
        // multiple of 0.05 below the smallest value or the nominal level, so the bins resolve
        // them.
        let smallest = self
            .methods
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(self.nominal, f64::min);
        let lo = ((smallest * 20.0).floor() / 20.0 - 0.05).clamp(0.0, 0.9);
        let bin = (1.0 - lo) / BINS as f64;
        for (area, (name, values)) in root.split_evenly((rows, cols)).iter().zip(&self.methods) {
            let mut counts = [0usize; BINS];
            for v in values.iter().filter(|v| v.is_finite()) {
                counts[(((v - lo) / bin).floor().max(0.0) as usize).min(BINS - 1)] += 1;
            }
            let total = values.len().max(1) as f64;
            let top = counts
                .iter()
                .map(|&c| c as f64 / total)
                .fold(0.0, f64::max)
                .max(0.05)
                * 1.1;
            let mut chart = ChartBuilder::on(area)
                .caption(name, (FONT, 15))
                .margin(8)
                .x_label_area_size(30)
                .y_label_area_size(45)
                .build_cartesian_2d(lo..1.0, 0.0..top)
                .map_err(pe)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc(names::COVERAGE)
                .y_desc(format!("fraction of {}", self.per))
                .label_style((FONT, 10))
                .draw()
                .map_err(pe)?;
            chart
                .draw_series(counts.iter().enumerate().map(|(b, &c)| {
                    let x0 = lo + b as f64 * bin;
                    Rectangle::new(
                        [(x0, 0.0), (x0 + bin, c as f64 / total)],
                        BLUE.mix(0.6).filled(),
                    )
                }))
                .map_err(pe)?;
            chart
                .draw_series(DashedLineSeries::new(
                    [(self.nominal, 0.0), (self.nominal, top)],
                    4,
                    4,
                    RED.stroke_width(2),
                ))
                .map_err(pe)?;
        }
        Ok(())
    }
}

/// CICF and PICF along the coordinate of a 1-D test design.
pub(super) fn along(c: &Ctx<'_>) -> Result<Vec<(String, PathBuf)>> {
    let (input, s, sf, out, label, design) = (c.input, c.s, c.sf, c.out, &c.label, &c.design);
    let test = &s.test;
    let mut written = Vec::new();
    let mut push = |fig: &dyn Fn() -> Result<(String, PathBuf)>| -> Result<()> {
        written.push(fig()?);
        Ok(())
    };
    // CICF and PICF along a 1-D test design, for every level ([004]).
    // The coordinate: the design's own, or x itself for any 1-D design.
    let along_x = match (&test.coord, sf.d) {
        (Some((name, coord)), 1) => Some((name.clone(), coord.clone())),
        (None, 1) => Some(("x".to_string(), test.x.iter().map(|x| x[0]).collect())),
        _ => None,
    };
    if let Some((coord_name, coord)) = &along_x {
        let mut order = design.clone();
        order.sort_by(|&a, &b| coord[a].total_cmp(&coord[b]));
        let levels = coverage_levels(s, input.methods);
        let along =
            |v: &[f64]| -> Vec<(f64, f64)> { order.iter().map(|&i| (coord[i], v[i])).collect() };
        let methods: Vec<_> = input
            .methods
            .iter()
            .filter_map(|m| {
                let lines: Option<Vec<_>> = levels
                    .iter()
                    .map(|l| {
                        let (ci, _) = point_values(s, m, &format!("{}_{l}", names::CICF))?;
                        let (pi, _) = point_values(s, m, &format!("{}_{l}", names::PICF))?;
                        Some((along(&ci), along(&pi)))
                    })
                    .collect();
                Some((m.clone(), lines?))
            })
            .collect();
        if !levels.is_empty() && !methods.is_empty() {
            let fig = CoverageAlong {
                title: format!(
                    "{}: pointwise coverage of f (CICF) and y (PICF) along {coord_name}",
                    heading(input.experiment, &sf.setting.label())
                ),
                coord_name: coord_name.clone(),
                levels,
                methods,
            };
            push(&|| {
                Ok((
                    fig.title.clone(),
                    render(&fig, out, &format!("coverage_along_{label}"))?,
                ))
            })?;
        }
    }
    Ok(written)
}

/// Histograms of coverage at the run's first interval level.
pub(super) fn histograms(c: &Ctx<'_>) -> Result<Vec<(String, PathBuf)>> {
    let (input, s, sf, out, label, design) = (c.input, c.s, c.sf, c.out, &c.label, &c.design);
    let mut written = Vec::new();
    let mut push = |fig: &dyn Fn() -> Result<(String, PathBuf)>| -> Result<()> {
        written.push(fig()?);
        Ok(())
    };
    // Histograms of coverage at the run's first interval level (`run.levels`, 0.95 by
    // default): over the test inputs of the pointwise CICF and PICF, and over the
    // repetitions of their marginal CICP and PICP ([004] §3: near nominal on average while
    // the pointwise coverage varies).
    let Some(&level) = input.summary.levels.first() else {
        return Ok(written);
    };
    let name = uqbench_experiment::summary::level_name(level);
    for (metric, what, stem, per_rep) in [
        (
            format!("{}_{name}", names::CICF),
            "pointwise coverage of f (CICF)",
            "coverage_hist",
            false,
        ),
        (
            format!("{}_{name}", names::PICF),
            "pointwise coverage of y (PICF)",
            "picf_hist",
            false,
        ),
        (
            format!("{}_{name}", names::CICP),
            "marginal coverage of f (CICP)",
            "marginal_cicp_hist",
            true,
        ),
        (
            format!("{}_{name}", names::PICP),
            "marginal coverage of y (PICP)",
            "marginal_picp_hist",
            true,
        ),
    ] {
        let metric = metric.as_str();
        let methods: Vec<(String, Vec<f64>)> = input
            .methods
            .iter()
            .filter_map(|m| {
                let values = if per_rep {
                    s.methods.get(m)?.per_repetition.get(metric)?.clone()
                } else {
                    let (v, _) = point_values(s, m, metric)?;
                    design.iter().map(|&i| v[i]).collect()
                };
                Some((m.clone(), values))
            })
            .collect();
        if methods.is_empty() {
            continue;
        }
        let fig = CoverageHistogram {
            title: format!(
                "{}: {what} by the {}% interval{}",
                heading(input.experiment, &sf.setting.label()),
                (level * 1000.0).round() / 10.0,
                if per_rep { ", per repetition" } else { "" }
            ),
            nominal: level,
            per: if per_rep {
                "repetitions"
            } else {
                "test inputs"
            },
            methods,
        };
        push(&|| {
            Ok((
                fig.title.clone(),
                render(&fig, out, &format!("{stem}_{label}"))?,
            ))
        })?;
    }
    Ok(written)
}
