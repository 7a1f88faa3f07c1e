//! Paired comparisons as Markdown: the rankings with their ties and the detectable
//! difference (for `report.md` and `uqbench compare`), and the full pair table.

use std::fmt::Write as _;

use uqbench_experiment::compare::{Comparison, Direction, PairRecord};
use uqbench_metrics::paired::{ALPHA, POWER};

/// A number to 3 significant digits (`–` when not finite).
fn sig(v: f64) -> String {
    if v.is_infinite() {
        // A result (an infinite KL or NLL), not a missing value.
        return if v > 0.0 { "+∞" } else { "−∞" }.to_string();
    }
    if v.is_nan() {
        return "–".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    if v.abs() >= 1e-3 && v.abs() < 1e5 {
        format!("{v:.digits$}")
    } else {
        format!("{v:.2e}")
    }
}

/// Per setting, the ranking (best first) with each method's mean ± standard error, its ranks
/// (from 1 + the methods separated from it and better to n − those separated and worse) and
/// the methods the data do not separate from it; then the median minimum detectable
/// difference over the pairs.
pub fn rankings_md(c: &Comparison, md: &mut String) {
    let Some(dir) = c.direction else {
        let _ = writeln!(
            md,
            "`{}` has no better direction (a coverage has a target, an uncertainty or a width \
             no order): no ranking; the pairs below.\n",
            c.metric
        );
        return;
    };
    let better = match dir {
        Direction::Lower => "lower",
        Direction::Higher => "higher",
    };
    for r in &c.rankings {
        let title = if r.setting.is_empty() {
            "(no sweep)"
        } else {
            &r.setting
        };
        let _ = writeln!(
            md,
            "#### `{}` ({better} is better), region `{}`, {title}\n",
            c.metric, c.region
        );
        let _ = writeln!(md, "| rank | method | mean ± se | K | not separated from |");
        let _ = writeln!(md, "|---|---|---|---|---|");
        for e in &r.entries {
            let ties = if e.ties.is_empty() {
                "—".to_string()
            } else {
                e.ties.join(", ")
            };
            let rank = if e.rank == e.rank_worst {
                e.rank.to_string()
            } else {
                format!("{}–{}", e.rank, e.rank_worst)
            };
            let _ = writeln!(
                md,
                "| {rank} | {} | {} ± {} | {} | {ties} |",
                e.method,
                sig(e.mean),
                sig(e.stderr),
                with_infinite(e.k, e.infinite)
            );
        }
        let mut mdd_unadjusted: Vec<f64> = c
            .pairs
            .iter()
            .filter(|p| p.setting == r.setting && p.mdd_unadjusted.is_finite())
            .map(|p| p.mdd_unadjusted)
            .collect();
        mdd_unadjusted.sort_by(f64::total_cmp);
        if let Some(mid) = mdd_unadjusted.get(mdd_unadjusted.len() / 2) {
            let _ = writeln!(
                md,
                "\nSeparated: paired t-test over repetitions (the sign test for a pair with a ±∞ \
                 repetition), Holm-adjusted over the setting's \
                 pairs, at {:.0}%. The median minimum detectable difference over the pairs \
                 (unadjusted test, {:.0}% power): {}; a true difference that large is detected \
                 by the unadjusted test 80% of the time, and less often after Holm.\n",
                ALPHA * 100.0,
                POWER * 100.0,
                sig(*mid)
            );
        }
    }
}

/// A count of repetitions, with how many of them were ±∞ (`10 (2 ∞)`).
fn with_infinite(k: usize, infinite: usize) -> String {
    if infinite > 0 {
        format!("{k} ({infinite} ∞)")
    } else {
        k.to_string()
    }
}

/// The table of every ordered pair (what `--json` prints as records).
pub fn pairs_md(pairs: &[PairRecord], md: &mut String) {
    let _ = writeln!(
        md,
        "| setting | A | B | mean A − B | se | 95% t interval | p | p (Holm) | P(A < B) | MDD | K |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
    for p in pairs {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | [{}, {}] | {} | {} | {} | {} | {} |",
            p.setting,
            p.method_a,
            p.method_b,
            sig(p.diff),
            sig(p.stderr),
            sig(p.t_low),
            sig(p.t_high),
            sig(p.p_value),
            sig(p.p_holm),
            if p.boot_share_a_lower.is_nan() {
                "–".to_string()
            } else {
                format!("{:.3}", p.boot_share_a_lower)
            },
            sig(p.mdd_unadjusted),
            with_infinite(p.k, p.infinite)
        );
    }
}
