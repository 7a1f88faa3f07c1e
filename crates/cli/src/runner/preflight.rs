//! Every configuration error before the first training: each method of a plan checked
//! against each setting's problem (`uqbench check`, and the start of `uqbench run`).

use anyhow::{Context, Result};

use super::Plan;
use uqbench_experiment::predict::check_method;
use uqbench_methods as registry;

/// Builds every method of `plan` at every setting and checks it against the setting's problem
/// ([`check_method`]): the noise sd a method takes as known, draws against epochs, quantile
/// bands against the run's levels, wrappers' held-out points, …. Returns the number of
/// (method, setting) pairs checked. No method trains; the problems are resolved (their
/// anchors are not fitted).
pub fn check_methods(plan: &Plan) -> Result<usize> {
    let mut checked = 0;
    for setting in &plan.settings {
        let problem = plan.spec.resolve(setting)?;
        for name in &plan.methods {
            let method = registry::build_for(&plan.spec, name, setting)?;
            check_method(&plan.spec, setting, &problem, method.as_ref()).with_context(|| {
                if setting.values.is_empty() {
                    format!("run.methods: `{name}`")
                } else {
                    format!("run.methods: `{name}` at setting {}", setting.label())
                }
            })?;
            checked += 1;
        }
    }
    Ok(checked)
}
