//! The batching schemes' index draws: which training points each replica's step uses. Every
//! draw comes from the replica's own stream, so a replica's batches do not depend on its
//! chunk. The order of draws on a stream is part of the results: [`super::chunk`] draws a
//! with-replacement batch right before its step (after the previous step's dropout noise),
//! and a shuffled epoch's permutation before the epoch's first step.

use uqbench_anchor::Rng;

/// Per replica, `size` indices below `n` drawn with replacement.
pub(crate) fn with_replacement(rngs: &mut [Rng], n: usize, size: usize) -> Vec<Vec<usize>> {
    rngs.iter_mut()
        .map(|g| (0..size).map(|_| g.below(n as u64) as usize).collect())
        .collect()
}

/// Per replica, a uniformly random permutation of 0..n (Fisher–Yates from the top).
pub(crate) fn permutations(rngs: &mut [Rng], n: usize) -> Vec<Vec<usize>> {
    rngs.iter_mut()
        .map(|g| {
            let mut p: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                p.swap(i, g.below(i as u64 + 1) as usize);
            }
            p
        })
        .collect()
}
