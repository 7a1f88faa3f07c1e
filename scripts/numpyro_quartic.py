"""NumPyro's NUTS on the posterior uqbench's HMC samples for [002]'s quartic (issue 39 §4).

The same posterior as `experiments/quartic_gap.toml`'s `HMC`: a 1-W-1 network with leaky ReLU
(slope 0.01) on the raw inputs and targets, N(0, 10²) on every weight and bias, σ² ~
InvGamma(1, 1) sampled, y ~ N(f(x), σ²). NUTS with NumPyro's default adaptation (diagonal
mass matrix, target acceptance 0.8), 4 chains of 500 warm-up iterations and 500 draws (the
`cpu` profile's), vectorised over the chains. Prints one JSON line: the seconds of the second
run (the first compiles), and at the worst of the test inputs the bulk and tail ESS of f (ArviZ)
and their rates per second, R̂, divergences.

    uqbench export experiments/quartic_gap.toml --reps 1 --setting width=20 --out data
    python scripts/numpyro_quartic.py data/width=20/rep-000 --width 20

Needs `pip install numpyro arviz` (JAX's CPU wheel).
"""

import argparse
import json
import time

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS


def model(x, x_test, width, y=None):
    w1 = numpyro.sample("w1", dist.Normal(0.0, 10.0).expand([1, width]).to_event(2))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 10.0).expand([width]).to_event(1))
    w2 = numpyro.sample("w2", dist.Normal(0.0, 10.0).expand([width, 1]).to_event(2))
    b2 = numpyro.sample("b2", dist.Normal(0.0, 10.0).expand([1]).to_event(1))
    s2 = numpyro.sample("s2", dist.InverseGamma(1.0, 1.0))

    def f(inputs):
        h = jax.nn.leaky_relu(inputs @ w1 + b1, negative_slope=0.01)
        return (h @ w2 + b2)[:, 0]

    numpyro.deterministic("f_test", f(x_test))
    numpyro.sample("y", dist.Normal(f(x), jnp.sqrt(s2)), obs=y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("prefix", help="an exported repetition: PREFIX.train.csv, PREFIX.test.csv")
    parser.add_argument("--width", type=int, default=20)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train = np.loadtxt(args.prefix + ".train.csv", delimiter=",", skiprows=1, ndmin=2)
    test = np.loadtxt(args.prefix + ".test.csv", delimiter=",", skiprows=1, ndmin=2)
    x, y = jnp.asarray(train[:, :1]), jnp.asarray(train[:, 1])
    x_test = jnp.asarray(test[:, :1])
    mcmc = MCMC(
        NUTS(model),
        num_warmup=args.warmup,
        num_samples=args.draws,
        num_chains=args.chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    runs = []
    for attempt in range(2):
        start = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(args.seed + attempt), x, x_test, args.width, y=y)
        f = np.asarray(mcmc.get_samples(group_by_chain=True)["f_test"])
        runs.append(time.perf_counter() - start)
    # f: chains × draws × test inputs; ArviZ's diagnostics per input, the worst one.
    data = az.convert_to_dataset({"f": f})
    bulk = az.ess(data, method="bulk")["f"].values
    tail = az.ess(data, method="tail")["f"].values
    rhat = az.rhat(data)["f"].values
    divergences = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
    seconds = runs[1]
    print(
        json.dumps(
            {
                "sampler": f"numpyro {numpyro.__version__} NUTS",
                "width": args.width,
                "chains": args.chains,
                "warmup": args.warmup,
                "draws": args.draws,
                "seconds": seconds,
                "seconds_first_run": runs[0],
                "ess_bulk_min": float(bulk.min()),
                "ess_tail_min": float(tail.min()),
                "ess_bulk_per_s": float(bulk.min()) / seconds,
                "ess_tail_per_s": float(tail.min()) / seconds,
                "rhat_max": float(rhat.max()),
                "divergences": divergences,
            }
        )
    )


if __name__ == "__main__":
    main()
