"""Oracle-tuned kernel ridge regression on E1's data: how well can any smoother do?

Usage: python3 experiments/fidelity/krr_baseline.py [UQBENCH_BINARY]   (needs numpy)

For f_main = 1 and 2 it reads 10 repetitions of experiments/fidelity/e1_decay_epochs.toml
through `uqbench anchor --json`, fits Gaussian kernel ridge regression for a grid of
bandwidths and ridges, and prints the best in-distribution mean |prediction − truth|
(tuned on the truth itself, so an optimistic bound for a nonparametric learner), next to a
flat line (the training mean) and the anchor (BLR).
"""
import json
import subprocess
import sys

import numpy as np

BIN = sys.argv[1] if len(sys.argv) > 1 else "uqbench"
SPEC = "experiments/fidelity/e1_decay_epochs.toml"


def rep(f_main, r):
    out = subprocess.run(
        [BIN, "anchor", SPEC, "--setting", f"f_main={f_main}", "--setting", "wd=1",
         "--setting", "ep=1", "--rep", str(r), "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def in_dist_dev(pred, a):
    t = np.array(a["test_x"])[:, 0]
    inside = (t >= -4) & (t <= 4)
    return np.mean(np.abs(pred - np.array(a["truth"]))[inside])


for f_main in (1, 2):
    reps = [rep(f_main, r) for r in range(10)]
    best = None
    for h in [0.05, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0]:
        for ridge in [1e-3, 1e-2, 1e-1, 1, 3, 10]:
            devs = []
            for a in reps:
                x = np.array(a["train_x"])[:, 0]
                y = np.array(a["train_y"])
                t = np.array(a["test_x"])[:, 0]
                k = np.exp(-(x[:, None] - x[None, :]) ** 2 / (2 * h * h))
                ks = np.exp(-(t[:, None] - x[None, :]) ** 2 / (2 * h * h))
                c = np.linalg.solve(k + ridge * np.eye(len(x)), y - y.mean())
                devs.append(in_dist_dev(y.mean() + ks @ c, a))
            if best is None or np.mean(devs) < best[0]:
                best = (np.mean(devs), h, ridge)
    flat = np.mean([in_dist_dev(np.array(a["train_y"]).mean(), a) for a in reps])
    blr = np.mean([in_dist_dev(np.array(a["mean"]), a) for a in reps])
    print(f"f_main={f_main}: oracle-tuned KRR {best[0]:.3f} (bandwidth {best[1]}, ridge "
          f"{best[2]}), flat line {flat:.3f}, BLR {blr:.3f}")
