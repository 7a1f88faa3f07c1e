//! Splitting a plan into `n` shards of balanced work (`--shard I/N`, `uqbench slurm`): every
//! work unit gets an expected cost, units far larger than a shard's share are cut into blocks
//! of repetitions, and the blocks go, largest first, to the least-loaded shard (LPT). The split
//! depends only on the plan, so every task of a job array, `merge` and `status` compute the
//! same one.

use anyhow::Result;

use super::{Plan, Unit};
use uqbench_methods as registry;

/// The expected cost of one repetition of each (setting, method): the method's own estimate
/// ([`uqbench_core::Method::cost`]: replicas × epochs × training points for the networks).
fn cost_per_repetition(plan: &Plan) -> Result<Vec<Vec<f64>>> {
    let mut out = Vec::with_capacity(plan.settings.len());
    for setting in &plan.settings {
        let n_train = plan.spec.resolve(setting)?.train.inputs.len();
        let epochs = plan.spec.epochs(setting)?;
        let mut per_method = Vec::with_capacity(plan.methods.len());
        for m in &plan.methods {
            let method = registry::build_for(&plan.spec, m, setting)?;
            per_method.push(method.cost(n_train, epochs));
        }
        out.push(per_method);
    }
    Ok(out)
}

/// The plan's units split into `n` shards of balanced expected cost, each shard's units in
/// plan order.
pub fn balanced(plan: &Plan, n: usize) -> Result<Vec<Vec<Unit>>> {
    let n = n.max(1);
    let costs = cost_per_repetition(plan)?;
    let method_index = |m: &str| plan.methods.iter().position(|x| x == m).unwrap_or(0);
    let unit_cost =
        |u: &Unit| costs[u.setting][method_index(&u.method)] * (u.reps.end - u.reps.start) as f64;
    let total: f64 = plan.units.iter().map(unit_cost).sum();
    // Blocks of at most half a shard's share, so that the greedy assignment can balance them.
    let cap = total / n as f64 / 2.0;
    let mut blocks: Vec<(usize, Unit, f64)> = Vec::new();
    for u in &plan.units {
        let reps = u.reps.end - u.reps.start;
        let cost = unit_cost(u);
        let pieces = if cap > 0.0 && cost > cap {
            ((cost / cap).ceil() as u64).min(reps)
        } else {
            1
        };
        let mut start = u.reps.start;
        for p in 0..pieces {
            let end = u.reps.start + reps * (p + 1) / pieces;
            let block = Unit {
                setting: u.setting,
                method: u.method.clone(),
                reps: start..end,
            };
            let c = unit_cost(&block);
            blocks.push((blocks.len(), block, c));
            start = end;
        }
    }
    // Longest processing time first: largest block to the least-loaded shard (ties: the
    // earlier block, the lower shard), so the split is deterministic.
    let mut order: Vec<usize> = (0..blocks.len()).collect();
    order.sort_by(|&a, &b| blocks[b].2.total_cmp(&blocks[a].2).then(a.cmp(&b)));
    let mut load = vec![0.0f64; n];
    let mut owner = vec![0usize; blocks.len()];
    for i in order {
        let shard = (0..n)
            .min_by(|&a, &b| load[a].total_cmp(&load[b]).then(a.cmp(&b)))
            .expect("n ≥ 1");
        load[shard] += blocks[i].2;
        owner[i] = shard;
    }
    let mut shards = vec![Vec::new(); n];
    for (i, (_, block, _)) in blocks.into_iter().enumerate() {
        shards[owner[i]].push(block);
    }
    Ok(shards)
}

/// The shard (of `n`) that runs repetition `rep` of (`setting`, `method`).
pub fn shard_of(shards: &[Vec<Unit>], setting: usize, method: &str, rep: u64) -> Option<usize> {
    shards.iter().position(|units| {
        units
            .iter()
            .any(|u| u.setting == setting && u.method == method && u.reps.contains(&rep))
    })
}

/// Each shard's expected cost (for reporting the balance of a split).
pub fn loads(plan: &Plan, shards: &[Vec<Unit>]) -> Result<Vec<f64>> {
    let costs = cost_per_repetition(plan)?;
    let method_index = |m: &str| plan.methods.iter().position(|x| x == m).unwrap_or(0);
    Ok(shards
        .iter()
        .map(|units| {
            units
                .iter()
                .map(|u| {
                    costs[u.setting][method_index(&u.method)] * (u.reps.end - u.reps.start) as f64
                })
                .sum()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;
    use uqbench_experiment::spec::ExperimentSpec;

    fn plan(name: &str) -> Plan {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../experiments")
            .join(format!("{name}.toml"));
        let spec = ExperimentSpec::load_profile(&path, Some("quick")).unwrap();
        Plan::new(spec, None).unwrap()
    }

    /// Every (setting, method, repetition) of the plan in exactly one shard, each shard's
    /// units in plan order, and the largest shard's cost within the LPT bound: a block goes to
    /// the least-loaded shard, whose load is then at most the mean, and no block (cut to at
    /// most half the mean where a unit has repetitions enough) adds more than half the mean.
    fn check(plan: &Plan, n: usize) {
        let split = balanced(plan, n).unwrap();
        assert_eq!(split.len(), n);
        let mut seen: BTreeMap<(usize, String, u64), usize> = BTreeMap::new();
        for (i, units) in split.iter().enumerate() {
            for u in units {
                for r in u.reps.clone() {
                    assert!(
                        seen.insert((u.setting, u.method.clone(), r), i).is_none(),
                        "{} rep {r} twice",
                        u.method
                    );
                }
            }
        }
        let expected: u64 = plan.units.iter().map(|u| u.reps.end - u.reps.start).sum();
        assert_eq!(seen.len() as u64, expected, "n = {n}");
        let loads = loads(plan, &split).unwrap();
        let mean = loads.iter().sum::<f64>() / n as f64;
        let max = loads.iter().cloned().fold(0.0, f64::max);
        assert!(max <= 1.5 * mean + 1e-9, "n = {n}: loads {loads:?}");
        for i in 0..n {
            for u in &split[i] {
                assert_eq!(
                    shard_of(&split, u.setting, &u.method, u.reps.start),
                    Some(i)
                );
            }
        }
        // The split is a function of the plan alone (every array task computes it).
        assert_eq!(balanced(plan, n).unwrap(), split);
    }

    #[test]
    fn shards_hold_every_repetition_once_with_balanced_cost() {
        // E1: equal repetitions, costs from 1 (BD) to 120 replicas (Ens); the quartic: HMC's
        // chains and the GP next to the networks.
        for name in ["e1", "quartic_gap"] {
            let p = plan(name);
            for n in [1, 2, 3, 5, 8] {
                check(&p, n);
            }
        }
    }

    #[test]
    fn costly_methods_are_cut_into_blocks_not_given_whole_to_one_shard() {
        // With more tasks than settings, a round-robin of whole settings leaves tasks idle;
        // the cost split keeps the largest within 1.5× the mean (checked above) and cuts the
        // costliest unit across shards.
        let p = plan("e1");
        let split = balanced(&p, 8).unwrap();
        let costliest = cost_per_repetition(&p).unwrap();
        let (s, m) = (0..p.settings.len())
            .flat_map(|s| (0..p.methods.len()).map(move |m| (s, m)))
            .max_by(|a, b| costliest[a.0][a.1].total_cmp(&costliest[b.0][b.1]))
            .unwrap();
        let holders = split
            .iter()
            .filter(|units| {
                units
                    .iter()
                    .any(|u| u.setting == s && u.method == p.methods[m])
            })
            .count();
        assert!(
            holders > 1,
            "{} at setting {s} in {holders} shard",
            p.methods[m]
        );
    }
}
