"""Reference values for crates/metrics/src/mcmc.rs, computed by ArviZ.

The chains are the ones the Rust test builds: AR(1) chains whose innovations come from a
64-bit linear congruential generator (the same integer and floating-point operations, so the
inputs are bit-identical). Run it with ArviZ installed (`pip install arviz`) and paste the
printed rows into the test `agrees_with_arviz`:

    python scripts/arviz_reference.py
"""

import math

import arviz as az
import numpy as np
import scipy

MASK = (1 << 64) - 1


def chains(c, n, phi, shift):
    state = 12345
    out = []
    for k in range(c):
        v = 0.0
        row = []
        for _ in range(n):
            state = (state * 6364136223846793005 + 1442695040888963407) & MASK
            u = ((state >> 11) + 0.5) / float(1 << 53)
            e = (u - 0.5) * math.sqrt(12.0)
            v = phi * v + e
            row.append(v + (shift if k == 0 else 0.0))
        out.append(row)
    return np.array(out)


CASES = [
    (4, 1000, 0.0, 0.0),
    (4, 1000, 0.9, 0.0),
    (4, 101, 0.5, 0.8),
    (2, 9, 0.3, 0.0),
    (3, 400, 0.99, 2.0),
]

if __name__ == "__main__":
    print(f"# ArviZ {az.__version__}, numpy {np.__version__}, scipy {scipy.__version__}")
    for c, n, phi, shift in CASES:
        x = chains(c, n, phi, shift)
        vals = [
            float(az.rhat(x, method="rank")),
            float(az.rhat(x, method="z_scale")),
            float(az.rhat(x, method="folded")),
            float(az.ess(x, method="bulk")),
            float(az.ess(x, method="tail")),
            float(az.mcse(x, method="mean")),
        ]
        print(f"({c}, {n}, {phi!r}, {shift!r}, [{', '.join(repr(v) for v in vals)}]),")
