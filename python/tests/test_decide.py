"""The decision track from Python: a user's agent scored beside the exact Thompson sampler,
with the same numbers as `uqbench decide`."""

import csv

import numpy as np
import pytest

import uqbench


def test_the_exact_sampler_s_regret_is_the_cli_s(root, tmp_path, cli):
    problem = uqbench.Problem(root / "experiments/bandit.toml", setting={"f_main": 1}, profile="quick")
    out = tmp_path / "run"
    cli("decide", "experiments/bandit.toml", "--profile", "quick", "--out", str(out), "--quiet")
    with open(out / "decisions.csv", encoding="utf-8") as f:
        cli = {
            (r["policy"], int(r["repetition"])): float(r["value"])
            for r in csv.DictReader(f)
            if r["setting"] == "f_main=1" and r["metric"] == "regret"
        }
    result = uqbench.decide(problem, repetitions=3)
    py = result.rows.query("metric == 'regret'")
    for _, r in py.iterrows():
        assert r["value"] == cli[(r["policy"], r["repetition"])]
    assert set(py["policy"]) == {"BLR", "Greedy", "Random", "Oracle"}


def test_a_user_s_agent_runs_beside_the_baselines_on_the_same_data(root):
    problem = uqbench.Problem(root / "experiments/bandit.toml", setting={"f_main": 1}, profile="quick")
    seen = []

    def greedy(history, actions):
        # Greedy on the least-squares fit of the features: the built-in Greedy's choice.
        seen.append(len(history["actions"]))
        g = actions["features"][history["actions"]]
        coef, *_ = np.linalg.lstsq(g, history["rewards"], rcond=None)
        return int(np.argmax(actions["features"] @ coef))

    result = uqbench.decide(problem, greedy, name="mine", repetitions=2)
    regret = result.rows.query("metric == 'regret'").set_index(["policy", "repetition"])["value"]
    # The least-squares mean is the flat-prior posterior mean: the same actions, the same
    # rewards, the same regret (up to the two solvers' rounding in a near-tie).
    for k in range(2):
        assert regret[("mine", k)] == pytest.approx(regret[("Greedy", k)], abs=1e-9)
    assert seen[0] == 8 and seen[1] == 9  # the shared 2p initial pulls, then one per step
    curves = result.curves.query("policy == 'mine' and repetition == 0")
    assert len(curves) == 12 and curves["value"].is_monotonic_increasing


def test_an_agent_s_mistakes_are_named(root):
    problem = uqbench.Problem(root / "experiments/bandit.toml", profile="quick")
    with pytest.raises(uqbench.InvalidInputError, match="agent mine chose 1000; valid: an action index 0 to 99"):
        uqbench.decide(problem, lambda h, a: 1000, name="mine", repetitions=1)

    def boom(history, actions):
        raise KeyError("my bug")

    with pytest.raises(KeyError, match="my bug"):
        uqbench.decide(problem, boom, repetitions=1)
    with pytest.raises(uqbench.InvalidInputError, match="the baselines"):
        uqbench.decide(problem, lambda h, a: 0, name="BLR", repetitions=1)
    with pytest.raises(uqbench.InvalidInputError, match="no \\[decision\\] section"):
        uqbench.decide(uqbench.Problem(root / "experiments/e1.toml"), repetitions=1)
