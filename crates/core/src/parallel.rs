//! Host work spread over the machine's cores, in a fixed order: [`par_map`].

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

thread_local! {
    /// Whether this thread is computing an item of a [`par_map`].
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// `(0..n).map(f).collect()`, computed on up to `available_parallelism` threads (the calling
/// one and scoped ones), each taking the next index not yet taken, so that items of unequal
/// cost (a repetition that sampled longer, the test inputs of a wide gap) keep every core busy
/// to the end. The result is in index order and identical to the sequential map (every `f(i)`
/// is computed exactly once, independently), so it changes no number; it only spreads
/// per-point or per-repetition host work (interval quantiles, MCMC diagnostics, a
/// repetition's scores) over the cores. A `par_map` inside an item of another runs
/// sequentially on that item's thread: the outer one already holds every core, and more
/// threads than cores would only take turns.
pub fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let threads = match INSIDE.get() {
        true => 1,
        false => thread::available_parallelism()
            .map_or(1, |t| t.get())
            .min(n),
    };
    if threads <= 1 {
        return (0..n).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let _inside = Inside::enter();
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break done;
            }
            done.push((i, f(i)));
        }
    };
    let mut parts: Vec<(usize, T)> = thread::scope(|s| {
        let handles: Vec<_> = (1..threads).map(|_| s.spawn(&work)).collect();
        let mut parts = work();
        for h in handles {
            parts.extend(h.join().expect("a worker of par_map panicked"));
        }
        parts
    });
    parts.sort_unstable_by_key(|p| p.0);
    parts.into_iter().map(|p| p.1).collect()
}

/// Marks the current thread as inside a [`par_map`] item until dropped, restoring what it
/// was (the calling thread takes items too, and may itself be inside another's item).
struct Inside(bool);

impl Inside {
    fn enter() -> Inside {
        Inside(INSIDE.replace(true))
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.set(self.0);
    }
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

    #[test]
    fn items_of_unequal_cost_and_nested_maps_keep_the_order() {
        // Item i sleeps longer the smaller i is, so the threads finish out of order; each item
        // maps again inside (sequentially, on its thread).
        let got = par_map(9, |i| {
            thread::sleep(std::time::Duration::from_millis((9 - i as u64) * 2));
            par_map(i + 1, |j| i * 10 + j)
        });
        let want: Vec<Vec<usize>> = (0..9)
            .map(|i| (0..=i).map(|j| i * 10 + j).collect())
            .collect();
        assert_eq!(got, want);
        assert!(
            !INSIDE.get(),
            "the calling thread is outside again after the map"
        );
    }
}
