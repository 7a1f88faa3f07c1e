//! The classification track's figures: maps of the exact P(y = 1 | x) and of each method's
//! estimate, interval width and coverage ([002] Fig. 6, 19–28), reliability diagrams ([002]
//! Fig. 29–33) and [003]'s referral curves with their random baselines.

use std::path::{Path, PathBuf};

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::heatmaps::HeatMaps;
use super::{colour, heading, legend_row, pe, point_values, render, Ctx, Figure, FONT};
use uqbench_experiment::store::setting_dir;
use uqbench_experiment::summary::names;
use uqbench_experiment::summary::{level_name, referral_fractions, SettingSummary, ECE_BINS};

/// One line of a panel: legend index (its colour), dashed or solid, points.
type Line = (usize, bool, Vec<(f64, f64)>);

/// One panel of line plots on fixed axes.
struct Panel {
    caption: String,
    x_desc: String,
    y_desc: String,
    x: (f64, f64),
    y: (f64, f64),
    /// Draw the diagonal y = x (a reliability diagram's perfect calibration).
    diagonal: bool,
    lines: Vec<Line>,
}

/// A grid of line panels with a legend of the colours.
struct Panels {
    title: String,
    legend: Vec<String>,
    panels: Vec<Panel>,
}

impl Figure for Panels {
    fn size(&self) -> (u32, u32) {
        let (rows, cols) = super::grid_shape(self.panels.len());
        (380 * cols as u32, 320 * rows as u32 + 70)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 20)).map_err(pe)?;
        let (body, legend) = root.split_vertically(root.dim_in_pixel().1 as i32 - 30);
        let (rows, cols) = super::grid_shape(self.panels.len());
        for (area, p) in body.split_evenly((rows, cols)).iter().zip(&self.panels) {
            let mut chart = ChartBuilder::on(area)
                .caption(&p.caption, (FONT, 14))
                .margin(8)
                .x_label_area_size(30)
                .y_label_area_size(45)
                .build_cartesian_2d(p.x.0..p.x.1, p.y.0..p.y.1)
                .map_err(pe)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc(p.x_desc.as_str())
                .y_desc(p.y_desc.as_str())
                .label_style((FONT, 10))
                .draw()
                .map_err(pe)?;
            if p.diagonal {
                chart
                    .draw_series(DashedLineSeries::new(
                        [(p.x.0, p.x.0), (p.x.1, p.x.1)],
                        4,
                        4,
                        BLACK.stroke_width(1),
                    ))
                    .map_err(pe)?;
            }
            for (c, dashed, pts) in &p.lines {
                let pts: Vec<(f64, f64)> = pts
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect();
                let style = colour(*c).stroke_width(2);
                if *dashed {
                    chart
                        .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
                        .map_err(pe)?;
                } else {
                    chart
                        .draw_series(LineSeries::new(pts.clone(), style))
                        .map_err(pe)?;
                    chart
                        .draw_series(
                            pts.iter()
                                .map(|&(x, y)| Circle::new((x, y), 3, colour(*c).filled())),
                        )
                        .map_err(pe)?;
                }
            }
        }
        let names: Vec<&str> = self.legend.iter().map(String::as_str).collect();
        legend_row(&legend, &names)
    }
}

/// The classification figures of one setting: maps over a full 2-D test grid, reliability
/// diagrams and referral curves. Returns each written figure (title, SVG path).
pub(super) fn draw(
    s: &SettingSummary,
    setting_label: &str,
    experiment: &str,
    methods: &[String],
    level: Option<f64>,
    out: &Path,
) -> Result<Vec<(String, PathBuf)>> {
    let mut written = Vec::new();
    let mut push = |title: String, svg: PathBuf| written.push((title, svg));
    let label = setting_dir(setting_label);
    let head = heading(experiment, setting_label);
    let methods: Vec<&String> = methods
        .iter()
        .filter(|m| s.methods.contains_key(*m))
        .collect();
    if let Some(fig) = probability_maps(s, &methods, level, &head) {
        push(
            fig.title.clone(),
            render(&fig, out, &format!("probability_maps_{label}"))?,
        );
    }
    if let Some(fig) = reliability(s, &methods, &head) {
        push(
            fig.title.clone(),
            render(&fig, out, &format!("reliability_{label}"))?,
        );
    }
    if let Some(fig) = referral(s, &methods, &head) {
        push(
            fig.title.clone(),
            render(&fig, out, &format!("referral_{label}"))?,
        );
    }
    Ok(written)
}

/// The maps over a 2-D grid of test inputs: the exact P(y = 1 | x), and per method its mean
/// estimate, interval width and coverage of P (`None` unless the test inputs are a grid).
fn probability_maps(
    s: &SettingSummary,
    methods: &[&String],
    level: Option<f64>,
    head: &str,
) -> Option<HeatMaps> {
    let test = &s.test;
    // Maps over the grid.
    let mut a: Vec<f64> = test.x.iter().map(|x| x[0]).collect();
    let mut b: Vec<f64> = test.x.iter().map(|x| x[1]).collect();
    a.sort_by(f64::total_cmp);
    a.dedup();
    b.sort_by(f64::total_cmp);
    b.dedup();
    let m = test.x.len();
    if !(test.x.first().map(Vec::len) == Some(2) && a.len() * b.len() == m && a.len() > 1) {
        return None;
    }
    {
        let index = |x: &[f64]| {
            a.partition_point(|v| *v < x[0]) * b.len() + b.partition_point(|v| *v < x[1])
        };
        let on_grid = |v: &[f64]| {
            let mut f = vec![f64::NAN; m];
            for (i, x) in test.x.iter().enumerate() {
                f[index(x)] = v.get(i).copied().unwrap_or(f64::NAN);
            }
            f
        };
        let name = level.map(level_name);
        let field = |method: &str, metric: Option<String>| {
            metric
                .and_then(|metric| point_values(s, method, &metric))
                .map_or(vec![f64::NAN; m], |(v, _)| on_grid(&v))
        };
        let mut rows = vec![(
            "exact".to_string(),
            vec![on_grid(&test.truth), vec![f64::NAN; m], vec![f64::NAN; m]],
        )];
        for method in methods {
            rows.push((
                (*method).clone(),
                vec![
                    field(method, Some(names::PROB.into())),
                    field(
                        method,
                        name.as_ref().map(|n| format!("{}_{n}", names::WIDTH)),
                    ),
                    field(
                        method,
                        name.as_ref().map(|n| format!("{}_{n}", names::COVERAGE_AT)),
                    ),
                ],
            ));
        }
        let pct = level.map_or(String::new(), |l| {
            format!("{}% ", (l * 1000.0).round() / 10.0)
        });
        let fig = HeatMaps {
            title: format!(
                "{head}: exact P(y = 1 | x) and each method's mean estimate, {pct}interval width \
                 and coverage of P"
            ),
            axes: (a, b),
            columns: vec![
                ("P(y = 1 | x)".into(), Some((0.0, 1.0))),
                (format!("{pct}width"), None),
                ("coverage of P".into(), Some((0.0, 1.0))),
            ],
            rows,
        };
        Some(fig)
    }
}

/// Per method, accuracy against mean confidence in each non-empty bin of the top-label
/// confidence, over every repetition's test points.
fn reliability(s: &SettingSummary, methods: &[&String], head: &str) -> Option<Panels> {
    // Reliability diagrams: per method, accuracy against mean confidence in each non-empty
    // bin of the top-label confidence, over every repetition's test points.
    let panels: Vec<Panel> = methods
        .iter()
        .enumerate()
        .map(|(i, method)| {
            let all = s.methods[*method].aggregate.get(names::ALL);
            let get = |k: String| all.and_then(|a| a.get(&k)).map(|v| v.value);
            let pts: Vec<(f64, f64)> = (0..ECE_BINS)
                .filter_map(|b| {
                    Some((
                        get(format!("{}_{b}", names::RELIABILITY_CONFIDENCE))?,
                        get(format!("{}_{b}", names::RELIABILITY_ACCURACY))?,
                    ))
                })
                .collect();
            let ece = get(names::ECE.into()).unwrap_or(f64::NAN);
            Panel {
                caption: format!("{method}: ECE {ece:.3}"),
                x_desc: "confidence".into(),
                y_desc: names::ACCURACY.into(),
                x: (0.5, 1.0),
                y: (0.0, 1.02),
                diagonal: true,
                lines: vec![(i, false, pts)],
            }
        })
        .collect();
    (!panels.is_empty()).then(|| Panels {
        title: format!("{head}: reliability diagrams (top-label confidence, fresh test labels)"),
        legend: methods.iter().map(|m| (*m).clone()).collect(),
        panels,
    })
}

/// [003]'s referral curves: accuracy and AUC on the retained most certain fraction.
fn referral(s: &SettingSummary, methods: &[&String], head: &str) -> Option<Panels> {
    // Referral curves ([003]): accuracy and AUC on the retained most certain fraction, each
    // method solid and its random-referral baseline (expected value) dashed.
    let fractions = referral_fractions();
    let curve = |method: &str, metric: &str| -> Vec<(f64, f64)> {
        let all = s.methods[method].aggregate.get(names::ALL);
        fractions
            .iter()
            .filter_map(|&q| {
                let v = all?.get(&format!("{metric}_{}", level_name(q)))?.value;
                Some((q, v))
            })
            .collect()
    };
    let mut panels = Vec::new();
    let curves = [
        (
            names::ACCURACY,
            names::REFERRAL_ACCURACY,
            names::RANDOM_ACCURACY,
        ),
        ("ROC AUC", names::REFERRAL_AUC, names::RANDOM_AUC),
    ];
    for (name, referral, random) in curves {
        let mut lines = Vec::new();
        let mut lo = 1.0f64;
        for (i, method) in methods.iter().enumerate() {
            for (dashed, metric) in [(false, referral), (true, random)] {
                let pts = curve(method, metric);
                lo = pts
                    .iter()
                    .map(|p| p.1)
                    .filter(|v| v.is_finite())
                    .fold(lo, f64::min);
                lines.push((i, dashed, pts));
            }
        }
        panels.push(Panel {
            caption: format!("{name} on the retained points (dashed: random referral)"),
            x_desc: "retained fraction".into(),
            y_desc: name.into(),
            x: (0.5, 1.0),
            y: (((lo * 20.0).floor() / 20.0 - 0.05).clamp(0.0, 0.95), 1.01),
            diagonal: false,
            lines,
        });
    }
    (!methods.is_empty()).then(|| Panels {
        title: format!("{head}: referral curves, ranked by predictive entropy"),
        legend: methods.iter().map(|m| (*m).clone()).collect(),
        panels,
    })
}

/// The classification track's figures of a setting.
pub(super) fn draw_setting(c: &Ctx<'_>) -> Result<Vec<(String, PathBuf)>> {
    draw(
        c.s,
        &c.sf.setting.label(),
        c.input.experiment,
        c.input.methods,
        c.input.summary.levels.first().copied(),
        c.out,
    )
}
