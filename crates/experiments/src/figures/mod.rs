//! The figures of a run, as SVG and PNG: bands per method ([000] figures 1, 2, 4, 5),
//! metrics against each swept variable at the reported inputs (figures 3, 6) and per region,
//! heat maps over a 2-D test grid (figure 7), and a histogram of pointwise coverage per
//! method. This module only renders the data it is given ([`FigureInput`]); the runner
//! gathers them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;

use uqbench_anchor::Setting;

mod classification;

use uqbench_eval::store::setting_dir;
use uqbench_eval::summary::{SettingSummary, Summary};

/// One figure written to disk.
#[derive(Debug, Clone)]
pub struct Written {
    /// What it shows.
    pub title: String,
    /// Path of the SVG, relative to the run directory (the PNG sits beside it).
    pub svg: PathBuf,
}

fn pe<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing failed: {e:?}")
}

const FONT: &str = "sans-serif";

/// Registers the bundled DejaVu Sans for PNG text (SVG text names the family only), so no
/// system font library is needed.
fn fonts() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../../../../assets/fonts/DejaVuSans.ttf");
        plotters::style::register_font(FONT, FontStyle::Normal, bytes)
            .unwrap_or_else(|_| panic!("the bundled font parses"));
    });
}

const PALETTE: [RGBColor; 10] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A figure that can draw itself on any plotters backend.
trait Figure {
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>;
}

/// Draws `fig` to `<stem>.svg` and `<stem>.png`, each written under a temporary name and
/// renamed, so a killed run never leaves a half-drawn figure.
fn render(fig: &impl Figure, dir: &Path, stem: &str) -> Result<PathBuf> {
    fonts();
    std::fs::create_dir_all(dir)?;
    let tmp = |ext: &str| dir.join(format!(".tmp-{}-{stem}.{ext}", std::process::id()));
    let (svg, png) = (tmp("svg"), tmp("png"));
    {
        let root = SVGBackend::new(&svg, fig.size()).into_drawing_area();
        root.fill(&WHITE).map_err(pe)?;
        fig.draw(&root)?;
        root.present().map_err(pe)?;
    }
    std::fs::rename(&svg, dir.join(format!("{stem}.svg")))?;
    {
        let root = BitMapBackend::new(&png, fig.size()).into_drawing_area();
        root.fill(&WHITE).map_err(pe)?;
        fig.draw(&root)?;
        root.present().map_err(pe)?;
    }
    std::fs::rename(&png, dir.join(format!("{stem}.png")))?;
    Ok(dir.join(format!("{stem}.svg")))
}

fn grid_shape(n: usize) -> (usize, usize) {
    let cols = n.clamp(1, 4);
    (n.div_ceil(cols), cols)
}

/// (abscissa, value, error) triples of one curve.
type Curve = Vec<(f64, f64, f64)>;

/// One method's band along the test design: (coordinate, prediction, lower, upper), sorted by
/// the coordinate.
pub type Band = Vec<(f64, f64, f64, f64)>;

/// Prediction with its 95% interval for one repetition per method, with the truth and (in
/// 1-D) the training points.
struct Bands {
    title: String,
    coord_name: String,
    /// (coord, truth) sorted by coord.
    truth: Vec<(f64, f64)>,
    /// Training points (x, y), when the test design runs along x.
    train: Vec<(f64, f64)>,
    /// Method → its band.
    methods: Vec<(String, Band)>,
}

impl Figure for Bands {
    fn size(&self) -> (u32, u32) {
        let (rows, cols) = grid_shape(self.methods.len());
        (380 * cols as u32, 300 * rows as u32 + 40)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let root = root.titled(&self.title, (FONT, 20)).map_err(pe)?;
        let (rows, cols) = grid_shape(self.methods.len());
        let xmin = self.truth.first().map_or(0.0, |p| p.0);
        let xmax = self.truth.last().map_or(1.0, |p| p.0);
        let ys = self
            .truth
            .iter()
            .map(|p| p.1)
            .chain(self.train.iter().map(|p| p.1));
        let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
            (a.min(y), b.max(y))
        });
        let pad = 0.5 * (hi - lo).max(1e-6);
        let (ymin, ymax) = (lo - pad, hi + pad);
        let clamp = |y: f64| {
            if y.is_finite() {
                y.clamp(ymin, ymax)
            } else {
                ymin
            }
        };
        for (area, (name, points)) in root.split_evenly((rows, cols)).iter().zip(&self.methods) {
            let mut chart = ChartBuilder::on(area)
                .caption(name, (FONT, 16))
                .margin(8)
                .x_label_area_size(30)
                .y_label_area_size(45)
                .build_cartesian_2d(xmin..xmax, ymin..ymax)
                .map_err(pe)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc(&self.coord_name)
                .label_style((FONT, 11))
                .draw()
                .map_err(pe)?;
            let mut band: Vec<(f64, f64)> =
                points.iter().map(|&(x, _, _, u)| (x, clamp(u))).collect();
            band.extend(points.iter().rev().map(|&(x, _, l, _)| (x, clamp(l))));
            chart
                .draw_series(std::iter::once(Polygon::new(band, BLUE.mix(0.25).filled())))
                .map_err(pe)?;
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|&(x, m, _, _)| (x, clamp(m))),
                    BLUE.stroke_width(2),
                ))
                .map_err(pe)?;
            chart
                .draw_series(DashedLineSeries::new(
                    self.truth.iter().map(|&(x, t)| (x, t)),
                    6,
                    4,
                    RED.stroke_width(2),
                ))
                .map_err(pe)?;
            chart
                .draw_series(
                    self.train
                        .iter()
                        .map(|&(x, y)| Circle::new((x, clamp(y)), 2, BLACK.filled())),
                )
                .map_err(pe)?;
        }
        Ok(())
    }
}

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

fn legend_row<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, names: &[&str]) -> Result<()> {
    let step = (area.dim_in_pixel().0 as i32 / names.len().max(1) as i32).max(60);
    for (i, name) in names.iter().enumerate() {
        let x = 20 + step * i as i32;
        area.draw(&Rectangle::new([(x, 10), (x + 20, 20)], colour(i).filled()))
            .map_err(pe)?;
        area.draw(&Text::new(name.to_string(), (x + 26, 8), (FONT, 14)))
            .map_err(pe)?;
    }
    Ok(())
}

/// Heat maps over a 2-D grid: rows are methods, one column per field (regression: log10
/// deviation, log10 uncertainty, coverage; classification: P(y = 1 | x), interval width,
/// coverage). A column's colour range is fixed or shared by all rows.
struct HeatMaps {
    title: String,
    /// Grid coordinates (x1 values, x2 values).
    axes: (Vec<f64>, Vec<f64>),
    /// Column names and fixed ranges (`None`: the range of the values in every row).
    columns: Vec<(String, Option<(f64, f64)>)>,
    /// Method → one field per column, each indexed [i1 * n2 + i2].
    rows: Vec<(String, Vec<Vec<f64>>)>,
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
                .x_desc("coverage")
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

/// `e1 f_main=2`, or just `e3` without a sweep.
fn heading(name: &str, label: &str) -> String {
    if label.is_empty() {
        name.to_string()
    } else {
        format!("{name} {label}")
    }
}

/// The interval levels with pointwise CICF in the summary, ascending.
fn coverage_levels(s: &SettingSummary, methods: &[String]) -> Vec<f64> {
    let mut levels: Vec<f64> = methods
        .iter()
        .filter_map(|m| s.methods.get(m))
        .flat_map(|m| m.points.keys())
        .filter_map(|k| k.strip_prefix("cicf_")?.parse::<f64>().ok())
        .collect();
    levels.sort_by(f64::total_cmp);
    levels.dedup();
    levels
}

fn point_values(s: &SettingSummary, method: &str, metric: &str) -> Option<(Vec<f64>, Vec<f64>)> {
    let p = s.methods.get(method)?.points.get(metric)?;
    Some((p.value.clone(), p.stderr.clone()))
}

/// What the figures of one setting need beyond its summary.
#[derive(Debug, Clone)]
pub struct SettingFigures {
    /// The setting.
    pub setting: Setting,
    /// Input dimension.
    pub d: usize,
    /// Training points (x, y) of the band repetition, for a 1-D problem.
    pub train: Vec<(f64, f64)>,
    /// Per method (in plan order), its band of the band repetition along the test design
    /// (prediction and 95% interval), for a 1-D or diagonal test design.
    pub bands: Vec<(String, Band)>,
}

/// Everything the figures of a run are drawn from.
#[derive(Debug, Clone)]
pub struct FigureInput<'a> {
    /// Experiment name.
    pub experiment: &'a str,
    /// Sweep variables and their values.
    pub sweep: &'a BTreeMap<String, Vec<f64>>,
    /// Method names in plan order (the anchor first).
    pub methods: &'a [String],
    /// Repetitions per setting.
    pub repetitions: u64,
    /// The repetition the bands show.
    pub band_repetition: u64,
    /// A classification problem: maps of P(y = 1 | x), reliability diagrams and referral
    /// curves instead of the regression figures.
    pub track: uqbench_eval::Track,
    /// The summary.
    pub summary: &'a Summary,
    /// Per setting (in summary order).
    pub settings: Vec<SettingFigures>,
}

/// Draws every figure that applies to the run into `dir/figures` and returns them in report
/// order.
pub fn draw_all(dir: &Path, input: &FigureInput<'_>) -> Result<Vec<Written>> {
    let out = dir.join("figures");
    let mut written = Vec::new();
    let mut push = |fig: &dyn Fn() -> Result<(String, PathBuf)>| -> Result<()> {
        let (title, svg) = fig()?;
        written.push(Written { title, svg });
        Ok(())
    };
    for (s, sf) in input.summary.settings.iter().zip(&input.settings) {
        if input.track == uqbench_eval::Track::Classification {
            let drawn = classification::draw(
                s,
                &sf.setting.label(),
                input.experiment,
                input.methods,
                input.summary.levels.first().copied(),
                &out,
            )?;
            for (title, svg) in drawn {
                push(&|| Ok((title.clone(), svg.clone())))?;
            }
            continue;
        }
        let label = setting_dir(&sf.setting.label());
        let test = &s.test;
        let design: Vec<usize> = (0..test.label.len())
            .filter(|&i| test.label[i].is_none())
            .collect();
        // Bands along a 1-D or diagonal test design.
        if let Some((coord_name, coord)) = &test.coord {
            let mut order = design.clone();
            order.sort_by(|&a, &b| coord[a].total_cmp(&coord[b]));
            let fig = Bands {
                title: format!(
                    "{}: prediction and 95% interval, repetition {}",
                    heading(input.experiment, &sf.setting.label()),
                    input.band_repetition
                ),
                coord_name: coord_name.clone(),
                truth: order.iter().map(|&i| (coord[i], test.truth[i])).collect(),
                train: sf.train.clone(),
                methods: sf.bands.clone(),
            };
            push(&|| {
                Ok((
                    fig.title.clone(),
                    render(&fig, &out, &format!("bands_{label}"))?,
                ))
            })?;
        }
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
                    for (c, metric) in ["deviation", "uncertainty", "coverage"].iter().enumerate() {
                        let (v, _) = point_values(s, m, metric).unwrap_or_default();
                        for &i in &design {
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
                        ("coverage".into(), Some((0.0, 1.0))),
                    ],
                    rows,
                };
                push(&|| {
                    Ok((
                        fig.title.clone(),
                        render(&fig, &out, &format!("heatmaps_{label}"))?,
                    ))
                })?;
            }
        }
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
            let along = |v: &[f64]| -> Vec<(f64, f64)> {
                order.iter().map(|&i| (coord[i], v[i])).collect()
            };
            let methods: Vec<_> = input
                .methods
                .iter()
                .filter_map(|m| {
                    let lines: Option<Vec<_>> = levels
                        .iter()
                        .map(|l| {
                            let (ci, _) = point_values(s, m, &format!("cicf_{l}"))?;
                            let (pi, _) = point_values(s, m, &format!("picf_{l}"))?;
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
                        render(&fig, &out, &format!("coverage_along_{label}"))?,
                    ))
                })?;
            }
        }
        // Histograms of coverage at the run's first interval level (`run.levels`, 0.95 by
        // default): over the test inputs of the pointwise CICF and PICF, and over the
        // repetitions of their marginal CICP and PICP ([004] §3: near nominal on average while
        // the pointwise coverage varies).
        let Some(&level) = input.summary.levels.first() else {
            continue;
        };
        let name = uqbench_eval::summary::level_name(level);
        for (metric, what, stem, per_rep) in [
            (
                format!("cicf_{name}"),
                "pointwise coverage of f (CICF)",
                "coverage_hist",
                false,
            ),
            (
                format!("picf_{name}"),
                "pointwise coverage of y (PICF)",
                "picf_hist",
                false,
            ),
            (
                format!("cicp_{name}"),
                "marginal coverage of f (CICP)",
                "marginal_cicp_hist",
                true,
            ),
            (
                format!("picp_{name}"),
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
                    render(&fig, &out, &format!("{stem}_{label}"))?,
                ))
            })?;
        }
    }
    for fig in against_variables(input) {
        push(&|| Ok((fig.1.title.clone(), render(&fig.1, &out, &fig.0)?)))?;
    }
    Ok(written
        .into_iter()
        .map(|w| Written {
            svg: w
                .svg
                .strip_prefix(dir)
                .map(Path::to_path_buf)
                .unwrap_or(w.svg),
            ..w
        })
        .collect())
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
            let x_of = |i: usize| input.settings[i].setting.get(var).unwrap_or(f64::NAN);
            // Per report point.
            if !labels.is_empty() {
                let metrics = ["deviation", "uncertainty", "coverage"];
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
                                        members
                                            .iter()
                                            .filter_map(|&i| {
                                                let s = &input.summary.settings[i];
                                                let p =
                                                    s.test.label.iter().position(|l| {
                                                        l.as_deref() == Some(label)
                                                    })?;
                                                let (v, e) = point_values(s, m, metric)?;
                                                Some((x_of(i), v[p], finite_or_zero(e[p])))
                                            })
                                            .collect()
                                    })
                                    .collect()
                            })
                            .collect();
                        (m.clone(), per_label)
                    })
                    .collect();
                figs.push((
                    format!("complexity{suffix}"),
                    AgainstVariable {
                        title: format!(
                            "{}: deviation, uncertainty and coverage against {var}{at}",
                            input.experiment
                        ),
                        variable: var.clone(),
                        rows: labels.clone(),
                        columns: metrics
                            .iter()
                            .map(|m| (m.to_string(), (*m == "coverage").then_some(0.95)))
                            .collect(),
                        series,
                    },
                ));
            }
            // Per region.
            let regions: Vec<String> = ["all", "in", "gap", "out"]
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
            let mut columns: Vec<(String, Option<f64>)> =
                if input.track == uqbench_eval::Track::Classification {
                    Vec::new()
                } else {
                    vec![
                        ("deviation".into(), None),
                        ("uncertainty".into(), None),
                        ("coverage".into(), Some(0.95)),
                    ]
                };
            if input.track == uqbench_eval::Track::Classification {
                // [002] Fig. 7–9: coverage of P(y = 1 | x) by the interval, its width, ECE;
                // and the mean |P̂ − P|.
                if let Some(l) = level {
                    let name = uqbench_eval::summary::level_name(l);
                    columns.push((format!("coverage_{name}"), Some(l)));
                    columns.push((format!("width_{name}"), None));
                }
                columns.push(("ece".into(), None));
                columns.push(("abs_error".into(), None));
            } else if let Some(l) = level {
                let name = uqbench_eval::summary::level_name(l);
                columns.push((format!("cicp_{name}"), Some(l)));
                columns.push((format!("width_{name}"), None));
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
                                    members
                                        .iter()
                                        .filter_map(|&i| {
                                            let a = input.summary.settings[i]
                                                .methods
                                                .get(m)?
                                                .aggregate
                                                .get(region)?
                                                .get(metric)?;
                                            // The coverage-type aggregates are means over test
                                            // inputs: error bars of a proportion over the
                                            // repetitions of one input do not apply, so
                                            // none are drawn for them.
                                            let err = if metric.starts_with("cicp")
                                                || metric.starts_with("coverage")
                                            {
                                                0.0
                                            } else {
                                                finite_or_zero(a.stderr)
                                            };
                                            Some((x_of(i), a.value, err))
                                        })
                                        .collect()
                                })
                                .collect()
                        })
                        .collect();
                    (m.clone(), per_region)
                })
                .collect();
            figs.push((
                format!("aggregates{suffix}"),
                AgainstVariable {
                    title: format!(
                        "{}: means over test inputs per region against {var}{at}",
                        input.experiment
                    ),
                    variable: var.clone(),
                    rows: regions,
                    columns,
                    series,
                },
            ));
        }
    }
    figs
}

fn finite_or_zero(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}
