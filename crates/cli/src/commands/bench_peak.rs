//! `uqbench bench peak`: this machine's own f32 peaks (`uqbench_engine::cpu::peak`), which
//! `bench train` also measures and reports its rate against (issue 61): a training rate read
//! as a fraction of what this CPU does, not of another machine's figure.

use anyhow::Result;
use clap::Args;
use serde_json::json;
use uqbench_engine::cpu::peak::{measure, Peak, PRODUCT};

/// Arguments of `uqbench bench peak`.
#[derive(Debug, Args)]
pub struct PeakBench {
    /// Worker threads (default: all cores, as `bench train`).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON line instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    host: super::HostArgs,
}

/// `, 61% of this machine's large product (206.0 GFLOP/s), 40% of its FMA-bound peak (…)`:
/// what `bench train` appends to its rate.
pub fn fractions(gflops: f64, p: &Peak) -> String {
    let mut out = format!(
        ", {:.0}% of this machine's large product ({:.1} GFLOP/s)",
        100.0 * gflops / p.product_gflops,
        p.product_gflops
    );
    if let Some(fma) = p.fma_gflops {
        out.push_str(&format!(
            ", {:.0}% of its FMA-bound peak ({fma:.1})",
            100.0 * gflops / fma
        ));
    }
    out
}

/// Runs `uqbench bench peak`.
pub fn run(args: &PeakBench) -> Result<()> {
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let level = uqbench_engine::cpu::simd::Level::capped(args.host.simd);
    let p = measure(level, threads);
    let (m, n, k) = PRODUCT;
    if args.json {
        outln!(
            "{}",
            json!({
                "level": format!("{level:?}").to_lowercase(),
                "threads": threads,
                "product": [m, n, k],
                "product_gflops": p.product_gflops,
                "fma_peak_gflops": p.fma_gflops,
            })
        );
    } else {
        outln!(
            "{} ({threads} threads): large product [{m} × {k}]·[{k} × {n}] through the host \
             trainer's register tiles {:.1} GFLOP/s; FMA-bound peak {}",
            format!("{level:?}").to_lowercase(),
            p.product_gflops,
            p.fma_gflops
                .map_or("— (none at the baseline)".to_string(), |f| format!(
                    "{f:.1} GFLOP/s (the product at {:.0}% of it)",
                    100.0 * p.product_gflops / f
                ))
        );
    }
    Ok(())
}
