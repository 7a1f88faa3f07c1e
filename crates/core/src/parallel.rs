//! Host work spread over the machine's cores, in a fixed order: [`par_map`].

use std::thread;

/// `(0..n).map(f).collect()`, computed on up to `available_parallelism` scoped threads, each
/// taking a contiguous block of indices. The result is in index order and identical to the
/// sequential map (every `f(i)` is computed exactly once, independently), so it changes no
/// number; it only spreads per-point or per-repetition host work (interval quantiles, MCMC
/// diagnostics) over the cores.
pub fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(n);
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let block = n.div_ceil(threads);
    let f = &f;
    thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .step_by(block)
            .map(|start| {
                s.spawn(move || (start..(start + block).min(n)).map(f).collect::<Vec<T>>())
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a worker of par_map panicked"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_map_is_the_sequential_map() {
        for n in [0, 1, 2, 3, 17, 1000] {
            let want: Vec<u64> = (0..n as u64).map(|i| i * i + 7).collect();
            assert_eq!(par_map(n, |i| (i * i + 7) as u64), want, "n = {n}");
        }
    }
}
