//! [000]'s figures 1, 2, 4, 5: prediction and 95% interval of one repetition per method along
//! a 1-D or diagonal test design, with the truth and (in 1-D) the training points.

use std::path::PathBuf;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::{grid_shape, heading, pe, render, Band, Ctx, Figure, FONT};

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

/// The bands of a setting with a 1-D or diagonal test design.
pub(super) fn draw(c: &Ctx<'_>) -> Result<Vec<(String, PathBuf)>> {
    let (input, s, sf, out, label, design) = (c.input, c.s, c.sf, c.out, &c.label, &c.design);
    let test = &s.test;
    let mut written = Vec::new();
    let mut push = |fig: &dyn Fn() -> Result<(String, PathBuf)>| -> Result<()> {
        written.push(fig()?);
        Ok(())
    };
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
                render(&fig, out, &format!("bands_{label}"))?,
            ))
        })?;
    }
    Ok(written)
}
