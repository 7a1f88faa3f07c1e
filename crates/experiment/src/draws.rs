//! A repetition's joint predictive on disk (spec §10; issue 37): what the joint metrics read
//! from a method's output, written beside its repetition file as `rep-NNN.draws`, so that a
//! run's joint predictions can be re-scored (`uqbench draws` → `uqbench score`) or read in
//! Python (`uqbench.read_draws`) after the run.
//!
//! What is stored follows the method's joint ([`JointKind::of`]):
//! - **draws** (ensemble members, MC passes, posterior draws; a classification method's
//!   logits): `samples` `[S, M]` (one row per draw, one column per test input), with the noise
//!   sd of each draw where the method draws one (`noise_samples` `[1, S]`, HMC's σ) or of each
//!   draw and input (`sample_noise` `[S, M]`, a mean–variance member's σ_m(x));
//! - **gaussian** (the anchor, the GP, linearised Laplace): `mean` `[1, M]` and the factor of
//!   the covariance of f (a t's scale matrix, with `dof` in the header), stored transposed as
//!   `factor_t` `[rank, M]` so that its columns are test inputs like every other block's;
//! - a method's own noise sd of y, where it has one (`noise_std` `[1, M]`);
//! - nothing (no file) for a method whose joint is its marginals: its repetition file holds
//!   them.
//!
//! **Format** (`run.draws`): `i8` (the default) stores every `[·, M]` block of draws or of a
//! factor in 8 bits per value, quantised per test input (column): with lo and hi the column's
//! smallest and largest value, the centre c = (lo + hi)/2 and the step h = max(hi − c, c − lo)
//! / 127 are stored as f32 (h rounded up) and a value v as q = round((v − c)/h) ∈ −127..=127,
//! decoded as c + q·h: **every value within h/2 = (hi − lo)/508 of the original** (up to f32
//! rounding of c). Per-input noise sds (`sample_noise`) are quantised the same way on the log
//! scale (a relative error within e^{h/2} − 1). A non-finite value is stored as q = −128 and
//! read as NaN. `f32` stores every value in f32; `none` writes no file. `mean` and `noise_std`
//! are always f64, `noise_samples` f32. At 1 000 test inputs, the 8-bit format costs S·1 000 + 8
//! 000 bytes per block, about a quarter of f32's.
//!
//! **Layout**, little-endian: the 8 bytes `UQBDRAW1`; a u32, the length of the header; the
//! header, JSON: `{"points": M, "kind": "draws" | "gaussian", "values": "f" | "logit",
//! "dof": ν | null, "blocks": [{"name", "rows", "cols", "encoding": "f64" | "f32" | "i8" |
//! "i8log"}, …]}`; then each block in order: f64 or f32 values row-major, or for `i8`/`i8log`
//! the cols centres (f32), the cols steps (f32) and the rows·cols codes (i8) row-major.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use uqbench_anchor::Setting;
use uqbench_core::{Family, Prediction};

use crate::bail;
use crate::error::{Context, Result};
use crate::store::{rep_stem, setting_dir};
use crate::summary::joint::JointKind;

/// The first bytes of a draws file (its format's version is the last).
pub const MAGIC: &[u8; 8] = b"UQBDRAW1";

/// The extension of a draws file beside `rep-NNN.json`.
pub const EXTENSION: &str = "draws";

/// `run.draws`: how a repetition's joint predictive is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrawFormat {
    /// 8 bits per value of draws and factors, quantised per test input (the default).
    #[default]
    I8,
    /// f32 per value.
    F32,
    /// Not stored.
    None,
}

impl DrawFormat {
    /// Whether it is the default, 8 bits.
    pub fn is_default(&self) -> bool {
        *self == DrawFormat::I8
    }

    /// Parses `i8`, `f32` or `none` (`--draws`).
    pub fn parse(text: &str) -> Result<DrawFormat> {
        Ok(match text {
            "i8" => DrawFormat::I8,
            "f32" => DrawFormat::F32,
            "none" => DrawFormat::None,
            other => bail!("--draws {other}: valid: i8 (8 bits per value), f32, none"),
        })
    }
}

/// How one block's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// f64 values.
    F64,
    /// f32 values.
    F32,
    /// 8-bit codes per column (centre and step per column).
    I8,
    /// 8-bit codes of the logarithm per column (positive values).
    I8log,
}

/// One block's shape and encoding, as the header lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockInfo {
    /// `samples`, `noise_samples`, `sample_noise`, `mean`, `factor_t`, `noise_std`.
    pub name: String,
    /// Its rows.
    pub rows: usize,
    /// Its columns.
    pub cols: usize,
    /// How its values are written.
    pub encoding: Encoding,
}

/// A draws file's header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// The test inputs M.
    pub points: usize,
    /// What the joint is made of.
    pub kind: JointKind,
    /// `f`: values of f; `logit`: a classification method's logits.
    pub values: String,
    /// Degrees of freedom of a t joint (`kind = "gaussian"` with a Student-t family).
    pub dof: Option<f64>,
    /// The blocks, in the order they follow the header.
    pub blocks: Vec<BlockInfo>,
}

/// One block read back: its values `[rows, cols]` row-major, and for an 8-bit block the
/// largest error of each column's values (half its step; on the log scale for `i8log`).
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Its shape and encoding.
    pub info: BlockInfo,
    /// The values, row-major.
    pub values: Vec<f64>,
    /// Per column, half the quantisation step (8-bit blocks only).
    pub half_step: Option<Vec<f64>>,
}

/// A draws file read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Draws {
    /// Its header.
    pub header: Header,
    /// Its blocks, in the header's order.
    pub blocks: Vec<Block>,
}

impl Draws {
    /// The block named `name`, if the file has it.
    pub fn block(&self, name: &str) -> Option<&Block> {
        self.blocks.iter().find(|b| b.info.name == name)
    }

    /// Reads and checks a draws file.
    pub fn read(path: &Path) -> Result<Draws> {
        let bytes = std::fs::read(path).with_context(|| {
            format!(
                "cannot read {} (a run writes draws files unless run.draws = \"none\")",
                path.display()
            )
        })?;
        decode(&bytes).with_context(|| format!("{} is not a draws file", path.display()))
    }
}

/// The path of repetition `rep`'s draws file, beside its repetition file.
pub fn draws_path(dir: &Path, setting: &Setting, method: &str, rep: u64) -> PathBuf {
    dir.join("reps")
        .join(setting_dir(&setting.label()))
        .join(method)
        .join(format!("{}.{EXTENSION}", rep_stem(rep)))
}

/// A block to write: `get(row, col)` for `rows × cols` values.
struct Source<'a> {
    name: &'static str,
    rows: usize,
    cols: usize,
    encoding: Encoding,
    get: Box<dyn Fn(usize, usize) -> f64 + 'a>,
}

/// The file of a method's output `out` in `format`: `None` with `DrawFormat::None`, for a
/// diverged repetition and for a joint of marginals only. `logits`: a classification method
/// (its samples are logits).
pub fn encode(out: &Prediction, format: DrawFormat, logits: bool) -> Option<Vec<u8>> {
    if format == DrawFormat::None || out.diverged {
        return None;
    }
    let kind = JointKind::of(out);
    let points = out.mean.len();
    let wide = |log: bool| match (format, log) {
        (DrawFormat::I8, false) => Encoding::I8,
        (DrawFormat::I8, true) => Encoding::I8log,
        _ => Encoding::F32,
    };
    let mut sources: Vec<Source<'_>> = Vec::new();
    let mut dof = None;
    match kind {
        JointKind::Marginals => return None,
        JointKind::Draws => {
            let rows = out.samples.as_ref().expect("kind Draws has samples");
            sources.push(Source {
                name: "samples",
                rows: rows.len(),
                cols: points,
                encoding: wide(false),
                get: Box::new(move |r, c| rows[r][c]),
            });
            if let Some(per_draw) = &out.extra.noise_samples {
                sources.push(Source {
                    name: "noise_samples",
                    rows: 1,
                    cols: per_draw.len(),
                    encoding: Encoding::F32,
                    get: Box::new(move |_, c| per_draw[c]),
                });
            }
            if let Some(noise) = &out.extra.sample_noise {
                sources.push(Source {
                    name: "sample_noise",
                    rows: noise.len(),
                    cols: points,
                    encoding: wide(true),
                    get: Box::new(move |r, c| noise[r][c]),
                });
            }
        }
        JointKind::Gaussian => {
            let j = out.extra.joint.as_ref().expect("kind Gaussian has a joint");
            if let Family::StudentT { dof: nu } = out.family {
                dof = Some(nu);
            }
            let mean = &out.mean;
            sources.push(Source {
                name: "mean",
                rows: 1,
                cols: points,
                encoding: Encoding::F64,
                get: Box::new(move |_, c| mean[c]),
            });
            let (f, rank) = (&j.factor, j.rank);
            sources.push(Source {
                name: "factor_t",
                rows: rank,
                cols: points,
                encoding: wide(false),
                get: Box::new(move |r, c| f[c * rank + r]),
            });
        }
    }
    if let Some(noise) = &out.noise_std {
        sources.push(Source {
            name: "noise_std",
            rows: 1,
            cols: points,
            encoding: Encoding::F64,
            get: Box::new(move |_, c| noise[c]),
        });
    }
    let header = Header {
        points,
        kind,
        values: if logits { "logit" } else { "f" }.into(),
        dof,
        blocks: sources
            .iter()
            .map(|s| BlockInfo {
                name: s.name.into(),
                rows: s.rows,
                cols: s.cols,
                encoding: s.encoding,
            })
            .collect(),
    };
    let text = serde_json::to_vec(&header).expect("a header serialises");
    let mut bytes = Vec::with_capacity(
        16 + text.len() + sources.iter().map(|s| s.rows * s.cols).sum::<usize>(),
    );
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&text);
    for s in &sources {
        write_block(&mut bytes, s);
    }
    Some(bytes)
}

fn write_block(bytes: &mut Vec<u8>, s: &Source<'_>) {
    let cells = || (0..s.rows).flat_map(move |r| (0..s.cols).map(move |c| (s.get)(r, c)));
    match s.encoding {
        Encoding::F64 => cells().for_each(|v| bytes.extend_from_slice(&v.to_le_bytes())),
        Encoding::F32 => cells().for_each(|v| bytes.extend_from_slice(&(v as f32).to_le_bytes())),
        Encoding::I8 | Encoding::I8log => {
            let log = s.encoding == Encoding::I8log;
            let value = |r: usize, c: usize| {
                let v = (s.get)(r, c);
                if log {
                    if v > 0.0 {
                        v.ln()
                    } else {
                        f64::NAN
                    }
                } else {
                    v
                }
            };
            let scales: Vec<(f32, f32)> = (0..s.cols)
                .map(|c| quantiser((0..s.rows).map(|r| value(r, c))))
                .collect();
            for &(centre, _) in &scales {
                bytes.extend_from_slice(&centre.to_le_bytes());
            }
            for &(_, step) in &scales {
                bytes.extend_from_slice(&step.to_le_bytes());
            }
            for r in 0..s.rows {
                for (c, &(centre, step)) in scales.iter().enumerate() {
                    bytes.push(code(value(r, c), centre, step) as u8);
                }
            }
        }
    }
}

/// A column's centre and step (see the module's doc): the step is rounded up in f32 so that
/// every finite value's code lies within ±127 of the f32 centre.
fn quantiser(column: impl Iterator<Item = f64>) -> (f32, f32) {
    let (lo, hi) = column
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return (0.0, 0.0);
    }
    let centre = (0.5 * (lo + hi)) as f32;
    let reach = (hi - centre as f64).max(centre as f64 - lo);
    let mut step = (reach / 127.0) as f32;
    while (step as f64) * 127.0 < reach {
        step = f32::from_bits(step.to_bits() + 1);
    }
    (centre, step)
}

/// A value's code: −128 for a non-finite value.
fn code(v: f64, centre: f32, step: f32) -> i8 {
    if !v.is_finite() {
        return i8::MIN;
    }
    if step == 0.0 {
        return 0;
    }
    ((v - centre as f64) / step as f64)
        .round()
        .clamp(-127.0, 127.0) as i8
}

/// Reads a draws file's bytes.
pub fn decode(bytes: &[u8]) -> Result<Draws> {
    let mut at = Reader { bytes, at: 0 };
    if at.take(8)? != MAGIC {
        bail!(
            "it does not start with {:?} (a draws file of format 1)",
            std::str::from_utf8(MAGIC).unwrap_or_default()
        );
    }
    let len = u32::from_le_bytes(at.take(4)?.try_into().expect("4 bytes")) as usize;
    let header: Header =
        serde_json::from_slice(at.take(len)?).context("its header is not a draws header")?;
    let mut blocks = Vec::with_capacity(header.blocks.len());
    for info in &header.blocks {
        let per_input = !matches!(info.name.as_str(), "noise_samples");
        if per_input && info.cols != header.points {
            bail!(
                "block {} has {} columns; valid: one per test input ({})",
                info.name,
                info.cols,
                header.points
            );
        }
        let Some(n) = info.rows.checked_mul(info.cols) else {
            bail!(
                "block {} has {} × {} values",
                info.name,
                info.rows,
                info.cols
            );
        };
        let (values, half_step) = match info.encoding {
            Encoding::F64 => (
                at.take(8 * n)?
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect(),
                None,
            ),
            Encoding::F32 => (at.f32s(n)?.into_iter().map(f64::from).collect(), None),
            Encoding::I8 | Encoding::I8log => {
                let centres = at.f32s(info.cols)?;
                let steps = at.f32s(info.cols)?;
                let codes = at.take(n)?;
                let values = codes
                    .iter()
                    .enumerate()
                    .map(|(k, &q)| {
                        let c = k % info.cols;
                        let q = q as i8;
                        if q == i8::MIN {
                            return f64::NAN;
                        }
                        let v = centres[c] as f64 + q as f64 * steps[c] as f64;
                        if info.encoding == Encoding::I8log {
                            v.exp()
                        } else {
                            v
                        }
                    })
                    .collect();
                let half = steps.iter().map(|&s| 0.5 * s as f64).collect();
                (values, Some(half))
            }
        };
        blocks.push(Block {
            info: info.clone(),
            values,
            half_step,
        });
    }
    if at.at != bytes.len() {
        bail!(
            "{} bytes follow its last block (the header lists {} blocks)",
            bytes.len() - at.at,
            header.blocks.len()
        );
    }
    Ok(Draws { header, blocks })
}

/// A cursor over a file's bytes whose reads past the end are errors.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            bail!(
                "it ends at byte {} where {n} more bytes were expected (a truncated file)",
                self.bytes.len()
            );
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn f32s(&mut self, n: usize) -> Result<Vec<f32>> {
        Ok(self
            .take(4 * n)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect())
    }
}

#[cfg(test)]
#[path = "draws_tests.rs"]
mod tests;
