//! The decision track's figures (`uqbench decide`): per setting, each policy's mean curve
//! over repetitions with a ± 2 standard-error band: cumulative regret against steps (log
//! scale: Random's regret is two orders above the others'; the Oracle's, 0, is the axis'
//! reference and not drawn), or the RMSE of the mean against labels.

use std::path::{Path, PathBuf};

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use uqbench_experiment::decision::results::Curve;
use uqbench_experiment::decision::DecisionKind;

use super::{colour, grid_shape, heading, legend_row, pe, render, Figure, FONT};

struct Curves<'a> {
    title: String,
    kind: DecisionKind,
    /// Labels per step (active learning: the labels after each step).
    initial: usize,
    batch: usize,
    settings: Vec<(String, Vec<&'a Curve>)>,
    policies: Vec<String>,
}

impl Curves<'_> {
    fn drawn(&self, c: &Curve) -> bool {
        !(self.kind == DecisionKind::Bandit && c.mean.iter().all(|v| *v == 0.0))
    }

    /// The abscissa of step t (from 0): the step, or the labels after it.
    fn x(&self, t: usize) -> f64 {
        match self.kind {
            DecisionKind::Bandit => (t + 1) as f64,
            DecisionKind::Active => (self.initial + (t + 1) * self.batch) as f64,
        }
    }
}

impl Figure for Curves<'_> {
    fn size(&self) -> (u32, u32) {
        let (rows, cols) = grid_shape(self.settings.len());
        ((cols as u32 * 420).max(720), rows as u32 * 340 + 60)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 18)).map_err(pe)?;
        let (body, foot) = root.split_vertically(root.dim_in_pixel().1 - 30);
        let refs: Vec<&str> = self.policies.iter().map(String::as_str).collect();
        legend_row(&foot, &refs)?;
        let cells = body.split_evenly(grid_shape(self.settings.len()));
        for (cell, (label, curves)) in cells.iter().zip(&self.settings) {
            let drawn: Vec<&&Curve> = curves.iter().filter(|c| self.drawn(c)).collect();
            let steps = drawn.first().map_or(0, |c| c.mean.len());
            let values = || {
                drawn
                    .iter()
                    .flat_map(|c| c.mean.iter().copied())
                    .filter(|v| v.is_finite() && *v > 0.0)
            };
            let (lo, hi) = values().fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
            if steps == 0 || !(lo <= hi) {
                continue;
            }
            let (y_desc, x_desc) = match self.kind {
                DecisionKind::Bandit => ("cumulative regret", "step"),
                DecisionKind::Active => ("RMSE of the mean against f", "labels"),
            };
            let xr = self.x(0)..self.x(steps - 1).max(self.x(0) + 1.0);
            let mut chart = ChartBuilder::on(cell)
                .caption(label.as_str(), (FONT, 14))
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(55)
                .build_cartesian_2d(xr, ((lo / 2.0)..(hi * 2.0)).log_scale())
                .map_err(pe)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .label_style((FONT, 10))
                .draw()
                .map_err(pe)?;
            for c in drawn {
                let i = self
                    .policies
                    .iter()
                    .position(|p| *p == c.policy)
                    .unwrap_or(0);
                let colour = colour(i);
                let point = |t: usize, k: f64| {
                    let se = if c.se[t].is_finite() { c.se[t] } else { 0.0 };
                    (self.x(t), (c.mean[t] + k * se).max(lo / 2.0))
                };
                let band: Vec<(f64, f64)> = (0..steps)
                    .map(|t| point(t, 2.0))
                    .chain((0..steps).rev().map(|t| point(t, -2.0)))
                    .collect();
                chart
                    .draw_series(std::iter::once(Polygon::new(
                        band,
                        colour.mix(0.2).filled(),
                    )))
                    .map_err(pe)?;
                chart
                    .draw_series(LineSeries::new(
                        (0..steps).map(|t| point(t, 0.0)),
                        colour.stroke_width(2),
                    ))
                    .map_err(pe)?;
            }
        }
        Ok(())
    }
}

/// Draws `decisions.svg` (and `.png`) into `dir`: one panel per setting.
pub fn draw(
    dir: &Path,
    name: &str,
    kind: DecisionKind,
    (initial, batch): (usize, usize),
    curves: &[Curve],
) -> Result<PathBuf> {
    let mut settings: Vec<(String, Vec<&Curve>)> = Vec::new();
    let mut policies: Vec<String> = Vec::new();
    for c in curves {
        match settings.iter_mut().find(|(s, _)| *s == c.setting) {
            Some((_, list)) => list.push(c),
            None => settings.push((c.setting.clone(), vec![c])),
        }
        if !policies.contains(&c.policy) {
            policies.push(c.policy.clone());
        }
    }
    let settings = settings
        .into_iter()
        .map(|(s, list)| (heading(name, &s), list))
        .collect();
    let what = match kind {
        DecisionKind::Bandit => "cumulative regret",
        DecisionKind::Active => "RMSE against labels",
    };
    let fig = Curves {
        title: format!("{name}: {what}, mean ± 2 standard errors over repetitions"),
        kind,
        initial,
        batch,
        settings,
        policies,
    };
    render(&fig, dir, "decisions")
}
