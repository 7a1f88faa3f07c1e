//! `design = "random"` (issue 40 §1): every repetition draws its own inputs.
//!
//! With a fixed design (the default) a problem draws its training, validation and test inputs
//! once per setting and every repetition redraws only the targets, so every coverage measured
//! over repetitions is coverage *given those inputs*. Split conformal's guarantee is marginal
//! over x and y: it holds on average over the inputs, not for each set of them. Under
//! `design = "random"` repetition r draws its inputs from the seeds of (experiment, setting,
//! r, purpose), so averages over repetitions are marginal over the inputs too.
//!
//! How each design kind is drawn per repetition:
//! - `uniform`, `mixture`: as written (a gap problem keeps its gap);
//! - `grid`: the same number of points uniform in the grid's box (a grid's fixed points are
//!   not exchangeable with randomly drawn training or calibration points);
//! - `diagonal`: the same number of positions λ uniform on [0, 1];
//! - `points`: refused, because explicit points cannot be drawn. Report points
//!   (`problem.report`) stay where they are in every repetition.
//!
//! Test points with a coordinate (1-D designs, diagonals) are sorted along it, so test input i
//! of every repetition is its i-th smallest: the summary's per-point metrics pool the i-th
//! order statistics of the repetitions, quantile bins along x (`TestInfo::for_repetitions`).
//! Training and validation points keep their drawn order (a calibration split takes points
//! by position).

use std::borrow::Cow;

use super::*;

/// Whether a problem's inputs are drawn once per setting or once per repetition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DesignMode {
    /// Drawn once per setting: results are conditional on the inputs.
    #[default]
    Fixed,
    /// Drawn per repetition: results are marginal over the inputs.
    Random,
}

/// The designs a problem draws its inputs from, kept by a random-design problem so that each
/// repetition can draw its own.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomInputs {
    /// Training design.
    pub train: DesignSpec,
    /// Test design.
    pub test: DesignSpec,
    /// Validation design.
    pub validation: Option<DesignSpec>,
    /// Report points, fixed in every repetition.
    pub report: Vec<ReportPoint>,
    /// The setting's sweep variables.
    pub vars: Vec<(String, f64)>,
    /// The repetition whose inputs the problem holds.
    pub held: u64,
}

impl Problem {
    /// Whether every repetition draws its own inputs (`design = "random"`).
    pub fn is_random_design(&self) -> bool {
        self.random.is_some()
    }

    /// The problem as repetition `repetition` sees it: itself for a fixed design (and for the
    /// repetition whose inputs it holds), otherwise a copy with that repetition's inputs.
    pub fn at_repetition(&self, repetition: u64) -> Result<Cow<'_, Problem>, AnchorError> {
        match &self.random {
            Some(inputs) if repetition != inputs.held => {
                let mut p = self.clone();
                p.place_inputs(inputs, repetition, DesignMode::Random)?;
                if let Some(r) = p.random.as_mut() {
                    r.held = repetition;
                }
                Ok(Cow::Owned(p))
            }
            _ => Ok(Cow::Borrowed(self)),
        }
    }

    /// Draws (or lays out) the training, test and validation inputs of `repetition` and
    /// tabulates f and σ there. A fixed design calls this once, with repetition 0, whose seeds
    /// are the per-setting ones.
    pub(super) fn place_inputs(
        &mut self,
        inputs: &RandomInputs,
        repetition: u64,
        mode: DesignMode,
    ) -> Result<(), AnchorError> {
        let (name, label, seed, d) = (self.name.clone(), self.setting.label(), self.seed, self.d);
        let draw = |spec: &DesignSpec, field: &str, what: &str, sort: bool| {
            let mut rng = repetition_rng(seed, &name, &label, repetition, what);
            match mode {
                DesignMode::Fixed => spec.resolve(d, &inputs.vars, field, &mut rng),
                DesignMode::Random => drawn(spec, d, &inputs.vars, field, &mut rng, sort),
            }
        };
        let train = draw(&inputs.train, "problem.train", purpose::TRAIN_DESIGN, false)?;
        let test = draw(&inputs.test, "problem.test", purpose::TEST_DESIGN, true)?;
        let validation = inputs
            .validation
            .as_ref()
            .map(|v| draw(v, "problem.validation", purpose::VALIDATION_DESIGN, false))
            .transpose()?;
        self.train = train;
        self.train_sigma = self.sigma_at(&self.train.inputs, "training")?;
        self.train_truth = self.truth_at(&self.train.inputs)?;
        self.test = self.test_set(test, &inputs.report)?;
        self.validation = match validation {
            Some(v) => {
                let sigma = self.sigma_at(&v.inputs, "validation")?;
                let truth = self.truth_at(&v.inputs)?;
                Some((v.inputs, sigma, truth))
            }
            None => None,
        };
        Ok(())
    }
}

/// One repetition's draw of `spec` (see the module's notes); with `sort`, points with a
/// coordinate are sorted along it.
fn drawn(
    spec: &DesignSpec,
    d: usize,
    vars: &[(String, f64)],
    field: &str,
    rng: &mut Rng,
    sort: bool,
) -> Result<Design, AnchorError> {
    let mut design = spec.resolve(d, vars, field, rng)?;
    match spec {
        DesignSpec::Points { .. } => {
            return Err(AnchorError::invalid(
                field,
                "explicit points",
                "with design = \"random\", a design that can be drawn per repetition: uniform, \
                 mixture, grid (drawn uniform in its box) or diagonal (λ uniform)",
            ));
        }
        DesignSpec::Grid { .. } => {
            let (low, high) = design.support[0].clone();
            let n = design.inputs.len();
            let mut data = Vec::with_capacity(n * d);
            for _ in 0..n {
                for j in 0..d {
                    data.push(rng.uniform_in(low[j], high[j]));
                }
            }
            design.inputs = Inputs::new(d, data);
            design.coord = None;
        }
        DesignSpec::Diagonal { .. } => {
            let (from, to) = design.diagonal.expect("a diagonal design has its ends");
            let lambdas: Vec<f64> = (0..design.inputs.len()).map(|_| rng.uniform()).collect();
            let data = lambdas
                .iter()
                .flat_map(|&l| std::iter::repeat_n((1.0 - l) * from + l * to, d))
                .collect();
            design.inputs = Inputs::new(d, data);
            design.coord = Some(("lambda".to_string(), lambdas));
        }
        DesignSpec::Uniform { .. } | DesignSpec::Mixture { .. } => {}
    }
    if !sort {
        return Ok(design);
    }
    if design.coord.is_none() && d == 1 {
        design.coord = Some(("x".to_string(), design.inputs.as_slice().to_vec()));
    }
    if let Some((name, c)) = design.coord.take() {
        let mut order: Vec<usize> = (0..c.len()).collect();
        order.sort_by(|&a, &b| c[a].total_cmp(&c[b]));
        design.inputs = design.inputs.permuted(&order);
        design.coord = Some((name, order.iter().map(|&i| c[i]).collect()));
    }
    Ok(design)
}
