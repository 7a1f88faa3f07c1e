//! [000]'s figure 7: heat maps over a 2-D test grid (and the classification track's maps).

use std::path::PathBuf;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use uqbench_experiment::summary::names;

use super::{heading, pe, point_values, render, Ctx, Figure, FONT};

/// Heat maps over a 2-D grid: rows are methods, one column per field (regression: log10
/// deviation, log10 uncertainty, coverage; classification: P(y = 1 | x), interval width,
/// coverage). A column's colour range is fixed or shared by all rows.
pub(super) struct HeatMaps {
    pub(super) title: String,
    /// Grid coordinates (x1 values, x2 values).
    pub(super) axes: (Vec<f64>, Vec<f64>),
    /// Column names and fixed ranges (`None`: the range of the values in every row).
    pub(super) columns: Vec<(String, Option<(f64, f64)>)>,
    /// Method → one field per column, each indexed [i1 * n2 + i2].
    pub(super) rows: Vec<(String, Vec<Vec<f64>>)>,
}

impl Figure for HeatMaps {
    fn size(&self) -> (u32, u32) {
        (
            350 * self.columns.len() as u32,
            300 * self.rows.len() as u32 + 40,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 20)).map_err(pe)?;
        let (x1, x2) = &self.axes;
        let step = |v: &[f64]| if v.len() > 1 { v[1] - v[0] } else { 1.0 };
        let (h1, h2) = (step(x1) / 2.0, step(x2) / 2.0);
        let ncol = self.columns.len();
        let ranges: Vec<(f64, f64)> = self
            .columns
            .iter()
            .enumerate()
            .map(|(c, (_, fixed))| {
                fixed.unwrap_or_else(|| {
                    self.rows
                        .iter()
                        .flat_map(|(_, fields)| fields[c].iter())
                        .filter(|v| v.is_finite())
                        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                            (lo.min(*v), hi.max(*v))
                        })
                })
            })
            .collect();
        let areas = root.split_evenly((self.rows.len(), ncol));
        for (r, (method, fields)) in self.rows.iter().enumerate() {
            for c in 0..ncol {
                if fields[c].iter().all(|v| v.is_nan()) {
                    continue;
                }
                let (lo, hi) = ranges[c];
                let hi = if hi > lo { hi } else { lo + 1.0 };
                let mut chart = ChartBuilder::on(&areas[r * ncol + c])
                    .caption(
                        format!("{method}: {} [{lo:.2}, {hi:.2}]", self.columns[c].0),
                        (FONT, 13),
                    )
                    .margin(6)
                    .x_label_area_size(25)
                    .y_label_area_size(35)
                    .build_cartesian_2d(
                        (x1[0] - h1)..(x1[x1.len() - 1] + h1),
                        (x2[0] - h2)..(x2[x2.len() - 1] + h2),
                    )
                    .map_err(pe)?;
                chart
                    .configure_mesh()
                    .disable_mesh()
                    .label_style((FONT, 10))
                    .draw()
                    .map_err(pe)?;
                chart
                    .draw_series(x1.iter().enumerate().flat_map(|(i, &a)| {
                        x2.iter().enumerate().map(move |(j, &b)| {
                            let v = fields[c][i * x2.len() + j];
                            let colour = if v.is_finite() {
                                ViridisRGB.get_color_normalized(v.clamp(lo, hi), lo, hi)
                            } else {
                                RGBColor(200, 200, 200)
                            };
                            Rectangle::new([(a - h1, b - h2), (a + h1, b + h2)], colour.filled())
                        })
                    }))
                    .map_err(pe)?;
            }
        }
        Ok(())
    }
}

/// The heat maps of a setting whose test design is a full 2-D grid.
pub(super) fn draw(c: &Ctx<'_>) -> Result<Vec<(String, PathBuf)>> {
    let (input, s, sf, out, label, design) = (c.input, c.s, c.sf, c.out, &c.label, &c.design);
    let test = &s.test;
    let mut written = Vec::new();
    let mut push = |fig: &dyn Fn() -> Result<(String, PathBuf)>| -> Result<()> {
        written.push(fig()?);
        Ok(())
    };
    // Heat maps over a full 2-D grid.
    if sf.d == 2 && test.coord.is_none() {
        let mut a: Vec<f64> = design.iter().map(|&i| test.x[i][0]).collect();
        let mut b: Vec<f64> = design.iter().map(|&i| test.x[i][1]).collect();
        a.sort_by(f64::total_cmp);
        a.dedup();
        b.sort_by(f64::total_cmp);
        b.dedup();
        if a.len() * b.len() == design.len() && a.len() > 1 && b.len() > 1 {
            let index = |x: &[f64]| -> usize {
                let i = a.partition_point(|v| *v < x[0]);
                let j = b.partition_point(|v| *v < x[1]);
                i * b.len() + j
            };
            let mut rows = Vec::new();
            for m in input.methods {
                let mut fields = vec![vec![f64::NAN; design.len()]; 3];
                for (c, metric) in [names::DEVIATION, names::UNCERTAINTY, names::COVERAGE]
                    .iter()
                    .enumerate()
                {
                    let (v, _) = point_values(s, m, metric).unwrap_or_default();
                    for &i in design.iter() {
                        let val = v.get(i).copied().unwrap_or(f64::NAN);
                        fields[c][index(&test.x[i])] = if c < 2 { val.log10() } else { val };
                    }
                }
                rows.push((m.clone(), fields));
            }
            let fig = HeatMaps {
                title: format!(
                    "{}: heat maps over the test grid ({} repetitions)",
                    heading(input.experiment, &sf.setting.label()),
                    input.repetitions
                ),
                axes: (a, b),
                columns: vec![
                    ("log10 deviation".into(), None),
                    ("log10 uncertainty".into(), None),
                    (names::COVERAGE.into(), Some((0.0, 1.0))),
                ],
                rows,
            };
            push(&|| {
                Ok((
                    fig.title.clone(),
                    render(&fig, out, &format!("heatmaps_{label}"))?,
                ))
            })?;
        }
    }
    Ok(written)
}
