"""Two samplers' predictive of f on the same data set, compared within their Monte Carlo
errors (docs/quartic-002.md, "Independent agreement").

Each source gives, per test input, the mean and sd of f and their Monte Carlo standard errors
(ArviZ's `mcse`, methods "mean" and "sd"):

- `run:DIR:SETTING:METHOD:REP:CHAINS`: a uqbench run's repetition, its draws read from
  `DIR/reps/SETTING/METHOD/rep-REP.draws` (stored in 8 bits per value: within half a
  quantisation step, about 0.2% of an input's range, of the sampler's) and split into CHAINS
  chains (chain-major, as HMC stores them);
- `json:PATH`: `scripts/numpyro_quartic.py --save PATH`'s output.

Prints one JSON line: for the mean and for the sd, the share of inputs with |z| ≤ 3, where
z = (a − b)/√(mcse_a² + mcse_b²), the largest |z|, and the median of each source's MCSE. The
agreement holds when both shares are at least 0.99.

    python scripts/reference_agreement.py run:runs/ref:width=10:HMC:0:64 json:nuts.json
"""

import json
import os
import sys

import arviz as az
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "uqbench"))
from _draws import read_draws  # noqa: E402  (numpy only: no compiled extension needed)


def source(spec):
    kind, rest = spec.split(":", 1)
    if kind == "json":
        with open(rest) as f:
            d = json.load(f)
        return {k: np.asarray(d[k]) for k in ("mean", "sd", "mcse_mean", "mcse_sd")}
    run, setting, method, rep, chains = rest.split(":")
    draws = read_draws(os.path.join(run, "reps", setting, method, f"rep-{int(rep):03d}.draws"))
    s = draws["samples"]
    f = s.reshape(int(chains), s.shape[0] // int(chains), s.shape[1])
    data = az.convert_to_dataset({"f": f})
    return {
        "mean": s.mean(0),
        "sd": s.std(0, ddof=1),
        "mcse_mean": az.mcse(data, method="mean")["f"].values,
        "mcse_sd": az.mcse(data, method="sd")["f"].values,
    }


def main():
    a, b = source(sys.argv[1]), source(sys.argv[2])
    out = {}
    for what in ("mean", "sd"):
        z = (a[what] - b[what]) / np.sqrt(a["mcse_" + what] ** 2 + b["mcse_" + what] ** 2)
        out[what] = {
            "share_within_3": float(np.mean(np.abs(z) <= 3)),
            "max_abs_z": float(np.max(np.abs(z))),
            "mcse_median": [float(np.median(a["mcse_" + what])), float(np.median(b["mcse_" + what]))],
        }
    out["agree"] = all(out[w]["share_within_3"] >= 0.99 for w in ("mean", "sd"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
