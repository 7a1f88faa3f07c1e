"""NumPyro's NUTS on the posterior uqbench's HMC samples for [002]'s quartic (issue 39).

The same posterior as `experiments/quartic_gap.toml`'s `HMC`: a 1-W-1 network with leaky ReLU
(slope 0.01) on the raw inputs and targets, N(0, 10²) on every weight and bias, σ² ~
InvGamma(1, 1) sampled, y ~ N(f(x), σ²). NUTS with NumPyro's default adaptation (diagonal
mass matrix, target acceptance 0.8), 4 chains of 500 warm-up iterations and 500 draws (the
`cpu` profile's), vectorised over the chains. Prints one JSON line: the seconds of the second
run (the first compiles), and at the worst of the test inputs the bulk and tail ESS of f (ArviZ)
and their rates per second, R̂, divergences, NUTS's mean steps per draw, the adapted steps,
and each chain's mean potential energy and mean f at the worst input (chains in different
modes of f show there).

`--model` picks a parameterisation of the same posterior, for the diagnosis in
docs/quartic-002.md:
- `raw`: every weight sampled (the default; NumPyro's run of what uqbench samples);
- `polar`: each hidden unit's input weights (w, b) = r·u with u = z/‖z‖ (z ~ N(0, I) auxiliary)
  and the output weight a = w₂·r, sampling log r: the rescaling symmetry (w, b, w₂) → (cw, cb,
  w₂/c) becomes one coordinate. The Jacobian of (r, u, a) → (w, b, w₂) is 1 in two input
  dimensions; the prior becomes exp(−r²/(2s²) − a²/(2s²r²)), times r for log r.
- `collapsed`: the output layer integrated out (uqbench's `marginalise_output`): the
  hidden layer and σ² sampled under the marginal likelihood N(y | 0, σ²I + s²ΦΦᵀ) in its
  weight-space form; the output layer drawn exactly afterwards for f.
`--dense` adapts a dense mass matrix instead of the diagonal.

    uqbench export experiments/quartic_gap.toml --reps 1 --setting width=20 --out data
    python scripts/numpyro_quartic.py data/width=20/rep-000 --width 20 [--model collapsed]

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

S2 = 100.0  # the prior variance of every weight


def lrelu(z):
    return jnp.where(z > 0, z, 0.01 * z)


def features(v, w1, b1):
    return jnp.concatenate([lrelu(v[:, None] * w1 + b1), jnp.ones((v.shape[0], 1))], axis=1)


def raw(x, x_test, width, y=None):
    w1 = numpyro.sample("w1", dist.Normal(0.0, 10.0).expand([width]).to_event(1))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 10.0).expand([width]).to_event(1))
    w2 = numpyro.sample("w2", dist.Normal(0.0, 10.0).expand([width]).to_event(1))
    b2 = numpyro.sample("b2", dist.Normal(0.0, 10.0))
    s2 = numpyro.sample("s2", dist.InverseGamma(1.0, 1.0))
    numpyro.deterministic("f_test", lrelu(x_test[:, None] * w1 + b1) @ w2 + b2)
    numpyro.sample("y", dist.Normal(lrelu(x[:, None] * w1 + b1) @ w2 + b2, jnp.sqrt(s2)), obs=y)


def polar(x, x_test, width, y=None):
    z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([width, 2]).to_event(2))
    rho = numpyro.sample("rho", dist.ImproperUniform(dist.constraints.real, (), (width,)))
    a = numpyro.sample("a", dist.ImproperUniform(dist.constraints.real, (), (width,)))
    r = jnp.exp(rho)
    numpyro.factor("prior_ra", jnp.sum(-(r**2) / (2 * S2) - a**2 / (2 * S2 * r**2) + rho))
    b2 = numpyro.sample("b2", dist.Normal(0.0, 10.0))
    s2 = numpyro.sample("s2", dist.InverseGamma(1.0, 1.0))
    u = z / jnp.linalg.norm(z, axis=1, keepdims=True)
    f = lambda v: lrelu(v[:, None] * u[:, 0] + u[:, 1]) @ a + b2  # noqa: E731
    numpyro.deterministic("f_test", f(x_test))
    numpyro.sample("y", dist.Normal(f(x), jnp.sqrt(s2)), obs=y)


def collapsed(x, x_test, width, y=None):
    w1 = numpyro.sample("w1", dist.Normal(0.0, 10.0).expand([width]).to_event(1))
    b1 = numpyro.sample("b1", dist.Normal(0.0, 10.0).expand([width]).to_event(1))
    s2 = numpyro.sample("s2", dist.InverseGamma(1.0, 1.0))
    phi = features(x, w1, b1)
    a = phi.T @ phi / s2 + jnp.eye(width + 1) / S2
    chol = jnp.linalg.cholesky(a)
    c = jax.scipy.linalg.solve_triangular(chol, phi.T @ y / s2, lower=True)
    log_lik = (
        -0.5 * (y @ y / s2 - c @ c)
        - jnp.sum(jnp.log(jnp.diag(chol)))
        - 0.5 * (width + 1) * jnp.log(S2)
        - 0.5 * x.shape[0] * jnp.log(s2)
    )
    numpyro.factor("marginal_likelihood", log_lik)


def collapsed_f(samples, x, y, x_test, width, seed):
    """f at the test inputs from each draw, with the output layer drawn from its exact
    conditional N(m, A⁻¹)."""
    rng = np.random.default_rng(seed)
    chains, draws = samples["s2"].shape
    f = np.zeros((chains, draws, x_test.shape[0]))
    for c in range(chains):
        for t in range(draws):
            w1, b1 = np.asarray(samples["w1"][c, t]), np.asarray(samples["b1"][c, t])
            s2 = float(samples["s2"][c, t])
            phi = np.asarray(features(x, w1, b1))
            a = phi.T @ phi / s2 + np.eye(width + 1) / S2
            mean = np.linalg.solve(a, phi.T @ np.asarray(y) / s2)
            chol = np.linalg.cholesky(a)
            out = mean + np.linalg.solve(chol.T, rng.standard_normal(width + 1))
            f[c, t] = np.asarray(features(x_test, w1, b1)) @ out
    return f


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("prefix", help="an exported repetition: PREFIX.train.csv, PREFIX.test.csv")
    parser.add_argument("--width", type=int, default=20)
    parser.add_argument("--model", choices=["raw", "polar", "collapsed"], default="raw")
    parser.add_argument("--dense", action="store_true")
    parser.add_argument("--max-depth", type=int, default=10)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--once", action="store_true", help="one run (no second, timed run after compiling)"
    )
    parser.add_argument(
        "--save",
        help="write per test input the mean and sd of f with their Monte Carlo standard errors "
        "(ArviZ's mcse, mean and sd) as JSON to this path: the two-sampler agreement of "
        "docs/quartic-002.md",
    )
    args = parser.parse_args()
    if args.model == "collapsed":
        # The Gram matrix's Cholesky factor needs f64 (as uqbench's `collapsed.rs`).
        jax.config.update("jax_enable_x64", True)
    train = np.loadtxt(args.prefix + ".train.csv", delimiter=",", skiprows=1, ndmin=2)
    test = np.loadtxt(args.prefix + ".test.csv", delimiter=",", skiprows=1, ndmin=2)
    x, y = jnp.asarray(train[:, 0]), jnp.asarray(train[:, 1])
    x_test = jnp.asarray(test[:, 0])
    model = {"raw": raw, "polar": polar, "collapsed": collapsed}[args.model]
    mcmc = MCMC(
        NUTS(model, dense_mass=args.dense, max_tree_depth=args.max_depth),
        num_warmup=args.warmup,
        num_samples=args.draws,
        num_chains=args.chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    fields = ("diverging", "num_steps", "potential_energy", "adapt_state.step_size")
    runs = []
    for attempt in range(1 if args.once else 2):
        start = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(args.seed + attempt), x, x_test, args.width, y=y,
                 extra_fields=fields)
        samples = mcmc.get_samples(group_by_chain=True)
        if args.model == "collapsed":
            f = collapsed_f(samples, x, y, x_test, args.width, args.seed + attempt)
        else:
            f = np.asarray(samples["f_test"])
        runs.append(time.perf_counter() - start)
    # f: chains × draws × test inputs; ArviZ's diagnostics per input, the worst one.
    data = az.convert_to_dataset({"f": f})
    bulk = az.ess(data, method="bulk")["f"].values
    tail = az.ess(data, method="tail")["f"].values
    rhat = az.rhat(data)["f"].values
    extra = mcmc.get_extra_fields(group_by_chain=True)
    worst = int(np.argmax(rhat))
    seconds = runs[-1]
    if args.save:
        mcse_mean = az.mcse(data, method="mean")["f"].values
        mcse_sd = az.mcse(data, method="sd")["f"].values
        flat = f.reshape(-1, f.shape[2])
        with open(args.save, "w") as out:
            json.dump(
                {
                    "mean": flat.mean(0).tolist(),
                    "sd": flat.std(0, ddof=1).tolist(),
                    "mcse_mean": mcse_mean.tolist(),
                    "mcse_sd": mcse_sd.tolist(),
                    "rhat": rhat.tolist(),
                },
                out,
            )
    print(
        json.dumps(
            {
                "sampler": f"numpyro {numpyro.__version__} NUTS",
                "model": args.model,
                "dense": args.dense,
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
                "divergences": int(np.asarray(extra["diverging"]).sum()),
                "steps_per_draw": float(np.asarray(extra["num_steps"]).mean()),
                "step_sizes": [float(v) for v in np.asarray(extra["adapt_state.step_size"])[:, -1]],
                "chain_potential": [
                    round(float(v), 1) for v in np.asarray(extra["potential_energy"]).mean(1)
                ],
                "chain_mean_f_worst": [round(float(v), 2) for v in f[:, :, worst].mean(1)],
            }
        )
    )


if __name__ == "__main__":
    main()
