//! Problems from other sources than a linear model: [004]'s surrogate of a real data set and
//! [002]'s two-class problem, resolved into the same [`Problem`] for one setting.

use super::*;

impl Problem {
    /// [004] §5.5's simulation from a real data set (see [`crate::surrogate`]): random
    /// forests fitted to the data are f and σ²(x), the data's rows are split once into
    /// training, validation and test inputs, and [`Problem::draw`] draws new targets at them.
    /// The forests' and the split's seeds derive from (seed, name) like every other draw.
    pub fn from_surrogate(
        name: &str,
        seed: u64,
        spec: &SurrogateSpec,
        setting: &Setting,
    ) -> Result<Problem, AnchorError> {
        let label = setting.label();
        let path = |what: &'static str| SeedPath {
            base: seed,
            experiment: name,
            setting: &label,
            repetition: 0,
            member: 0,
            purpose: what,
        };
        let table = Table::read_csv(std::path::Path::new(&spec.data))?;
        let fitted = surrogate::fit(
            spec,
            &table,
            (
                path(purpose::FOREST_MEAN).seed(),
                path(purpose::FOREST_VARIANCE).seed(),
            ),
        )?;
        let (train_rows, validation_rows, test_rows) =
            surrogate::split(&spec.split, fitted.rows(), &mut path(purpose::SPLIT).rng())?;
        let d = fitted.d();
        let take = |rows: &[usize]| {
            let inputs = Inputs::new(
                d,
                rows.iter()
                    .flat_map(|&i| fitted.x[i * d..(i + 1) * d].iter().copied())
                    .collect(),
            );
            let truth: Vec<f64> = rows.iter().map(|&i| fitted.f[i]).collect();
            let sigma: Vec<f64> = rows.iter().map(|&i| fitted.sigma[i]).collect();
            (inputs, truth, sigma)
        };
        let (train_inputs, train_truth, train_sigma) = take(&train_rows);
        // The training rows' bounding box is the "in" region: a test row outside it in some
        // covariate is an extrapolation ("out").
        let train = Design::bounding_box(train_inputs);
        let (test_inputs, truth, sigma) = take(&test_rows);
        let test = TestSet {
            region: test_inputs.rows().map(|x| train.region_of(x)).collect(),
            label: vec![None; test_inputs.len()],
            coord: None,
            inputs: test_inputs,
            truth,
            sigma,
        };
        let validation = (!validation_rows.is_empty()).then(|| {
            let (inputs, truth, sigma) = take(&validation_rows);
            (inputs, sigma, truth)
        });
        Ok(Problem {
            name: name.to_string(),
            seed,
            setting: setting.clone(),
            d,
            model: Model::Surrogate(SurrogateInfo {
                data: spec.data.clone(),
                target: spec.target.clone(),
                covariates: fitted.covariates.clone(),
                rows: fitted.rows(),
                target_scale: fitted.target_scale,
                oob_r2: fitted.oob_r2,
            }),
            noise: Noise::Surrogate,
            sigma_known: false,
            train,
            train_sigma,
            train_truth,
            test,
            validation,
            random: None,
        })
    }

    /// [002]'s two-class problem ([`crate::tcc`]): training inputs drawn once per setting
    /// from the generative model, test inputs from `spec.test`; the truth is the exact
    /// P(y = 1 | x), and [`Problem::draw`] draws each repetition's labels from it. The
    /// training inputs' bounding box is the `in` region.
    pub fn from_classification(
        name: &str,
        seed: u64,
        spec: &ClassificationSpec,
        setting: &Setting,
    ) -> Result<Problem, AnchorError> {
        let label = setting.label();
        let vars = setting.values.clone();
        let rng_for = |what: &str| setting_rng(seed, name, &label, what);
        let tcc = Tcc::resolve(spec, &vars)?;
        let n = int_field(&spec.n_train, &vars, "classification.n_train", 2.0)?;
        let train = tcc.training_design(n, &mut rng_for(purpose::TRAIN_DESIGN));
        let test_design = spec.test.resolve(
            2,
            &vars,
            "classification.test",
            &mut rng_for(purpose::TEST_DESIGN),
        )?;
        let mut problem = Problem {
            name: name.to_string(),
            seed,
            setting: setting.clone(),
            d: 2,
            model: Model::Classification(tcc),
            noise: Noise::Bernoulli,
            sigma_known: false,
            train,
            train_sigma: Vec::new(),
            train_truth: Vec::new(),
            test: TestSet {
                inputs: Inputs::new(2, Vec::new()),
                coord: None,
                region: Vec::new(),
                label: Vec::new(),
                truth: Vec::new(),
                sigma: Vec::new(),
            },
            validation: None,
            random: None,
        };
        problem.train_truth = problem.truth_at(&problem.train.inputs)?;
        problem.train_sigma = problem.sigma_at(&problem.train.inputs, "training")?;
        problem.test = problem.test_set(test_design, &[])?;
        Ok(problem)
    }
}
