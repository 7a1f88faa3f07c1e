#!/usr/bin/env bash
# The machines table's figures (docs/performance.md, "Current figures, per machine") in one
# sitting: W1 through uqbench and JAX alternated, two runs each; W1 at the AVX2 level once;
# `bench peak`; numpy's 4096² f32 product three times; then W2 through uqbench and JAX
# alternated. Needs `pip install "jax[cpu]" numpy` and a release build; run it on a quiet
# machine (a build on the other core halves the figures).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${UQBENCH_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/uqbench}"
peers="${UQBENCH_PEERS:-../shared/bench/peers.py}"
fields='import json, sys; d = json.load(sys.stdin); print({k: d.get(k) for k in
    ["replica_epochs_per_s", "gflops", "trainer", "product_gflops", "fma_peak_gflops",
     "peak_fraction", "fma_fraction"]})'
lscpu | grep -E "Model name|CPU family|Model:|Flags" | cut -c1-120
for i in 1 2; do
    echo "== W1 uqbench, run $i"
    "$bin" bench train --replicas 1200 --epochs 100 --json | python3 -c "$fields"
    echo "== W1 JAX, run $i"
    python3 "$peers" --which jax_vmap --members 1200 --epochs 100 | tail -1
done
echo "== W1 uqbench, AVX2 forced"
UQBENCH_SIMD=avx2 "$bin" bench train --replicas 1200 --epochs 100 --json | python3 -c "$fields"
echo "== bench peak"
"$bin" bench peak | tail -1
echo "== numpy's 4096² f32 product"
python3 -c '
import time
import numpy as np
a = np.random.rand(4096, 4096).astype(np.float32)
b = np.random.rand(4096, 4096).astype(np.float32)
a @ b
for _ in range(3):
    t = time.perf_counter(); a @ b; s = time.perf_counter() - t
    print(round(2 * 4096**3 / s / 1e9, 1), "GFLOP/s")'
for i in 1 2; do
    echo "== W2 uqbench, run $i"
    "$bin" bench hmc --chains 400 --width 20 --leapfrog 10 --iters 200 | tail -1
    echo "== W2 JAX, run $i"
    python3 "$peers" --which hmc_jax --chains 400 --width 20 --leapfrog 10 --iters 200 | tail -1
done
