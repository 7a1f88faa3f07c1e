//! The test inputs of each region: `all`, `in`, `gap`, `out`, the same in every repetition
//! (a fixed design) or each repetition's own (a random design).

use uqbench_anchor::Region;

use super::by_rep::Points;
use super::names;
use super::types::{RepResult, TestInfo};
use crate::error::Result;

/// Each region's points: the nominal ones of the test slots (per-point metrics, the
/// uncertainty ratio, the Brier scores) and, with a random design, each repetition's own (in
/// the order of the repetitions summarised).
pub(super) type RegionPoints = Vec<(&'static str, Vec<usize>, Option<Vec<Vec<usize>>>)>;

/// The region's points for its per-repetition aggregates.
pub(super) fn points_of<'a>(nominal: &'a [usize], per: &'a Option<Vec<Vec<usize>>>) -> Points<'a> {
    match per {
        Some(per) => Points::PerRep(per),
        None => Points::Shared(nominal),
    }
}

/// [`RegionPoints`] of repetitions `ok`: every region that occurs in some repetition.
pub(super) fn region_points(test: &TestInfo, ok: &[&RepResult]) -> Result<RegionPoints> {
    let nominal = regions(test);
    if !test.is_random() {
        return Ok(nominal.into_iter().map(|(n, i)| (n, i, None)).collect());
    }
    let own: Vec<&[Region]> = ok
        .iter()
        .map(|r| test.region_of(r.repetition))
        .collect::<Result<_>>()?;
    let mut out = Vec::new();
    for (name, region) in [
        (names::ALL, None),
        (Region::In.as_str(), Some(Region::In)),
        (Region::Gap.as_str(), Some(Region::Gap)),
        (Region::Out.as_str(), Some(Region::Out)),
    ] {
        let per: Vec<Vec<usize>> = own
            .iter()
            .map(|reg| {
                (0..reg.len())
                    .filter(|&i| region.is_none_or(|g| reg[i] == g))
                    .collect()
            })
            .collect();
        if per.iter().all(Vec::is_empty) {
            continue;
        }
        let nom = nominal
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, i)| i.clone())
            .unwrap_or_default();
        out.push((name, nom, Some(per)));
    }
    Ok(out)
}

/// Index sets per region: `all`, then each region that occurs.
pub fn regions(test: &TestInfo) -> Vec<(&'static str, Vec<usize>)> {
    let mut out = vec![(names::ALL, (0..test.truth.len()).collect::<Vec<_>>())];
    for r in [Region::In, Region::Gap, Region::Out] {
        let idx: Vec<usize> = (0..test.truth.len())
            .filter(|&i| test.region[i] == r)
            .collect();
        if !idx.is_empty() {
            out.push((r.as_str(), idx));
        }
    }
    out
}
