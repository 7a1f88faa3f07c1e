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

use uqbench_anchor::Setting;

mod against;
mod bands;
mod classification;
mod coverage;
mod decisions;
mod distance;
mod heatmaps;
mod joint;

pub(crate) use decisions::draw as draw_decisions;
pub(crate) use joint::taus as joint_taus;

use uqbench_experiment::store::setting_dir;
use uqbench_experiment::summary::{names, SettingSummary, Summary};

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
        .filter_map(|k| k.strip_prefix(names::CICF)?.strip_prefix('_')?.parse().ok())
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
    /// The problem's track, which names the figures that apply (classification: maps of
    /// P(y = 1 | x), reliability diagrams and referral curves instead of the regression
    /// figures).
    pub track: uqbench_experiment::Track,
    /// The summary.
    pub summary: &'a Summary,
    /// Per setting (in summary order).
    pub settings: Vec<SettingFigures>,
}

/// What a figure of one setting is drawn from.
pub(super) struct Ctx<'a> {
    input: &'a FigureInput<'a>,
    s: &'a SettingSummary,
    sf: &'a SettingFigures,
    /// `dir/figures`.
    out: &'a Path,
    /// The setting's directory name (`f_main=2`, `default`), the figures' file suffix.
    label: String,
    /// The test inputs of the design (not the labelled report points).
    design: Vec<usize>,
}

/// A figure of one setting: drawn into the figures directory when it applies (title, SVG path
/// per file; none when it does not).
type SettingFigure = fn(&Ctx<'_>) -> Result<Vec<(String, PathBuf)>>;

/// The figures of every setting, in report order. A new figure is a file with its drawing
/// function, one entry here, and its name in the tracks it applies to
/// (`uqbench_experiment::Track::setting_figures`).
const SETTING_FIGURES: &[(&str, SettingFigure)] = &[
    ("bands", bands::draw),
    ("heatmaps", heatmaps::draw),
    ("coverage_along", coverage::along),
    ("coverage_histograms", coverage::histograms),
    ("distance_along", distance::along),
    ("joint", joint::against_tau),
    ("classification", classification::draw_setting),
];

/// Draws every figure that applies to the run into `dir/figures` and returns them in report
/// order: each setting's, then those against the swept variables.
pub fn draw_all(dir: &Path, input: &FigureInput<'_>) -> Result<Vec<Written>> {
    let out = dir.join("figures");
    let mut written = Vec::new();
    for (s, sf) in input.summary.settings.iter().zip(&input.settings) {
        let ctx = Ctx {
            input,
            s,
            sf,
            out: &out,
            label: setting_dir(&sf.setting.label()),
            design: (0..s.test.label.len())
                .filter(|&i| s.test.label[i].is_none())
                .collect(),
        };
        let names = input.track.setting_figures();
        for (_, draw) in SETTING_FIGURES.iter().filter(|(n, _)| names.contains(n)) {
            written.extend(draw(&ctx)?);
        }
    }
    written.extend(against::draw(input, &out)?);
    Ok(written
        .into_iter()
        .map(|(title, svg)| Written {
            svg: svg.strip_prefix(dir).map(Path::to_path_buf).unwrap_or(svg),
            title,
        })
        .collect())
}

pub(super) fn finite_or_zero(v: f64) -> f64 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::SETTING_FIGURES;
    use uqbench_experiment::Track;

    #[test]
    fn every_figure_a_track_names_exists_and_every_figure_has_a_track() {
        // A misspelt name in `Track::setting_figures` would silently drop a figure, and a
        // figure no track names would never be drawn.
        let tracks = [Track::Regression, Track::Classification];
        for track in tracks {
            for name in track.setting_figures() {
                assert!(
                    SETTING_FIGURES.iter().any(|(n, _)| n == name),
                    "{track:?} names {name}, which is not a figure"
                );
            }
        }
        for (name, _) in SETTING_FIGURES {
            assert!(
                tracks.iter().any(|t| t.setting_figures().contains(name)),
                "no track draws {name}"
            );
        }
    }
}
