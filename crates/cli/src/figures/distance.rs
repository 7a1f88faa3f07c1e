//! The distance from each method's predictive distribution of f to the exact posterior along
//! a 1-D test design: W2 (left) and KL(method ‖ anchor) (right, where the family has a
//! density), the mean over repetitions per test input with ± 1 standard error, log scale.

use std::path::PathBuf;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use uqbench_experiment::summary::names;

use super::{colour, heading, legend_row, pe, point_values, render, Ctx, Figure, FONT};

/// (coord, value, stderr) sorted by coord.
type Line = Vec<(f64, f64, f64)>;

/// A panel's title and, per method with the metric, (colour index, name, line).
type Panel = (&'static str, Vec<(usize, String, Line)>);

struct DistanceAlong {
    title: String,
    coord_name: String,
    /// Per panel (W2, KL): per method, its line (methods without the metric are left out).
    panels: Vec<Panel>,
    methods: Vec<String>,
}

impl Figure for DistanceAlong {
    fn size(&self) -> (u32, u32) {
        (2 * 460, 420)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 18)).map_err(pe)?;
        let (body, foot) = root.split_vertically(root.dim_in_pixel().1 - 30);
        let refs: Vec<&str> = self.methods.iter().map(String::as_str).collect();
        legend_row(&foot, &refs)?;
        let cells = body.split_evenly((1, 2));
        for (cell, (what, lines)) in cells.iter().zip(&self.panels) {
            let pts = || {
                lines
                    .iter()
                    .flat_map(|(_, _, l)| l.iter())
                    .filter(|p| p.1.is_finite() && p.1 > 0.0)
            };
            let (xmin, xmax) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
                (a.min(p.0), b.max(p.0))
            });
            let (ymin, ymax) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
                (a.min(p.1), b.max(p.1))
            });
            if !(xmin < xmax && ymin <= ymax) {
                continue;
            }
            let (ylo, yhi) = (ymin.max(1e-12) / 2.0, ymax * 2.0);
            let mut chart = ChartBuilder::on(cell)
                .caption(*what, (FONT, 14))
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(55)
                .build_cartesian_2d(xmin..xmax, (ylo..yhi).log_scale())
                .map_err(pe)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc(self.coord_name.as_str())
                .y_label_formatter(&|v| format!("{v:.0e}"))
                .label_style((FONT, 10))
                .draw()
                .map_err(pe)?;
            for (i, _, line) in lines {
                let c = colour(*i);
                let ok = line.iter().filter(|p| p.1.is_finite() && p.1 > 0.0);
                chart
                    .draw_series(LineSeries::new(
                        ok.clone().map(|p| (p.0, p.1)),
                        c.stroke_width(2),
                    ))
                    .map_err(pe)?;
                chart
                    .draw_series(ok.filter(|p| p.2.is_finite() && p.2 > 0.0).map(|p| {
                        PathElement::new(
                            [(p.0, (p.1 - p.2).max(ylo)), (p.0, p.1 + p.2)],
                            c.mix(0.4).stroke_width(1),
                        )
                    }))
                    .map_err(pe)?;
            }
        }
        Ok(())
    }
}

/// W2 and KL to the anchor along the coordinate of a 1-D test design.
pub(super) fn along(c: &Ctx<'_>) -> Result<Vec<(String, PathBuf)>> {
    let (input, s, sf) = (c.input, c.s, c.sf);
    if sf.d != 1 {
        return Ok(Vec::new());
    }
    let (coord_name, coord) = match &s.test.coord {
        Some((name, coord)) => (name.clone(), coord.clone()),
        None => ("x".to_string(), s.test.x.iter().map(|x| x[0]).collect()),
    };
    let mut order = c.design.clone();
    order.sort_by(|&a, &b| coord[a].total_cmp(&coord[b]));
    let methods: Vec<String> = input.methods.to_vec();
    let panels: Vec<Panel> = [
        ("W2 to the anchor", names::W2_ANCHOR),
        ("KL(method ‖ anchor)", names::KL_ANCHOR),
    ]
    .into_iter()
    .map(|(what, metric)| {
        let lines = methods
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let (v, e) = point_values(s, m, metric)?;
                let line = order.iter().map(|&j| (coord[j], v[j], e[j])).collect();
                Some((i, m.clone(), line))
            })
            .collect();
        (what, lines)
    })
    .collect();
    if panels.iter().all(|(_, l)| l.is_empty()) {
        return Ok(Vec::new());
    }
    let fig = DistanceAlong {
        title: format!(
            "{}: distance to the exact posterior along {coord_name}",
            heading(input.experiment, &sf.setting.label())
        ),
        coord_name,
        panels,
        methods,
    };
    Ok(vec![(
        fig.title.clone(),
        render(&fig, c.out, &format!("distance_along_{}", c.label))?,
    )])
}
