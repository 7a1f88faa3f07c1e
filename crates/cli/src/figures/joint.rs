//! Joint predictions (spec §10): each method's KL at τ test inputs against τ, from the exact
//! posterior predictive (left; regression with an anchor) and from the data-generating
//! distribution (right), the mean over repetitions with ± 1 standard error, log–log. A method
//! whose KL is 0 (the anchor against itself) has no point on a log axis and is left out.

use std::path::PathBuf;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use uqbench_experiment::summary::{names, Summary};

use super::{colour, heading, legend_row, pe, render, Ctx, Figure, FONT};

/// (τ, value, stderr) per method with the metric: (colour index, line).
type Panel = (String, Vec<(usize, Vec<(f64, f64, f64)>)>);

struct AgainstTau {
    title: String,
    panels: Vec<Panel>,
    methods: Vec<String>,
}

/// The τ of the run's `PREFIX_T` aggregates, ascending.
pub(crate) fn taus(summary: &Summary, prefix: &str) -> Vec<usize> {
    let mut t: Vec<usize> = summary
        .settings
        .iter()
        .flat_map(|s| s.methods.values())
        .filter_map(|m| m.aggregate.get(names::ALL))
        .flat_map(|a| a.keys())
        .filter_map(|k| k.strip_prefix(prefix)?.strip_prefix('_')?.parse().ok())
        .collect();
    t.sort_unstable();
    t.dedup();
    t
}

impl Figure for AgainstTau {
    fn size(&self) -> (u32, u32) {
        (self.panels.len() as u32 * 460, 420)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 18)).map_err(pe)?;
        let (body, foot) = root.split_vertically(root.dim_in_pixel().1 - 30);
        let refs: Vec<&str> = self.methods.iter().map(String::as_str).collect();
        legend_row(&foot, &refs)?;
        let cells = body.split_evenly((1, self.panels.len()));
        for (cell, (what, lines)) in cells.iter().zip(&self.panels) {
            let pts = || {
                lines
                    .iter()
                    .flat_map(|(_, l)| l.iter())
                    .filter(|p| p.1 > 0.0)
            };
            let (xmin, xmax) = pts().fold((f64::INFINITY, 0.0f64), |(a, b), p| {
                (a.min(p.0), b.max(p.0))
            });
            let (ymin, ymax) = pts().fold((f64::INFINITY, 0.0f64), |(a, b), p| {
                (a.min(p.1), b.max(p.1))
            });
            if !(xmin <= xmax && ymin <= ymax) {
                continue;
            }
            let (ylo, yhi) = (ymin / 2.0, ymax * 2.0);
            let mut chart = ChartBuilder::on(cell)
                .caption(what.as_str(), (FONT, 14))
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(55)
                .build_cartesian_2d((xmin / 1.5..xmax * 1.5).log_scale(), (ylo..yhi).log_scale())
                .map_err(pe)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc("τ (test inputs per batch)")
                .x_labels(4)
                .x_label_formatter(&|v| format!("{v:.0}"))
                .y_label_formatter(&|v| format!("{v:.0e}"))
                .label_style((FONT, 10))
                .draw()
                .map_err(pe)?;
            for (i, line) in lines {
                let c = colour(*i);
                let ok = line.iter().filter(|p| p.1 > 0.0);
                chart
                    .draw_series(LineSeries::new(
                        ok.clone().map(|p| (p.0, p.1)),
                        c.stroke_width(2),
                    ))
                    .map_err(pe)?;
                chart
                    .draw_series(ok.clone().map(|p| Circle::new((p.0, p.1), 3, c.filled())))
                    .map_err(pe)?;
                chart
                    .draw_series(ok.filter(|p| p.2.is_finite() && p.2 > 0.0).map(|p| {
                        PathElement::new(
                            [(p.0, (p.1 - p.2).max(ylo)), (p.0, p.1 + p.2)],
                            c.mix(0.5),
                        )
                    }))
                    .map_err(pe)?;
            }
        }
        Ok(())
    }
}

/// The joint KL against τ of one setting, where the run computed it at two τ or more.
pub(super) fn against_tau(c: &Ctx<'_>) -> Result<Vec<(String, PathBuf)>> {
    let (input, s) = (c.input, c.s);
    let methods: Vec<String> = input.methods.to_vec();
    let panels: Vec<Panel> = [
        ("KL from the exact posterior predictive", names::JOINT_KL),
        ("KL from the data-generating distribution", names::ENV_KL),
    ]
    .into_iter()
    .filter_map(|(what, prefix)| {
        let t = taus(input.summary, prefix);
        let lines: Vec<(usize, Vec<(f64, f64, f64)>)> = methods
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let all = s.methods.get(m)?.aggregate.get(names::ALL)?;
                let line: Vec<(f64, f64, f64)> = t
                    .iter()
                    .filter_map(|tau| {
                        let a = all.get(&format!("{prefix}_{tau}"))?;
                        Some((*tau as f64, a.value, a.stderr))
                    })
                    .collect();
                (line.iter().any(|p| p.1 > 0.0)).then_some((i, line))
            })
            .collect();
        (t.len() > 1 && !lines.is_empty()).then(|| (what.to_string(), lines))
    })
    .collect();
    if panels.is_empty() {
        return Ok(Vec::new());
    }
    let fig = AgainstTau {
        title: format!(
            "{}: joint predictions, KL at τ inputs (nats, all τ together)",
            heading(input.experiment, &c.sf.setting.label())
        ),
        panels,
        methods,
    };
    Ok(vec![(
        fig.title.clone(),
        render(&fig, c.out, &format!("joint_{}", c.label))?,
    )])
}
