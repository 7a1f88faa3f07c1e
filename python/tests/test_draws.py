"""A run's stored draws read by the numpy reader (`uqbench.read_draws`, `Run.draws`), checked
against the Rust reader (`uqbench draws`), against the run's own repetition files, and scored
again through `uqbench.score` to the run's joint metrics."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import uqbench


@pytest.fixture(scope="module")
def runs(cli, tmp_path_factory):
    out = {}
    for fmt in ("i8", "f32"):
        d = tmp_path_factory.mktemp(f"draws-{fmt}")
        cli("run", "experiments/e1.toml", "--profile", "quick", "--methods", "Ens",
            "--draws", fmt, "--quiet", "--out", str(d / "run"))
        out[fmt] = d
    return out


@pytest.mark.parametrize("fmt", ["i8", "f32"])
def test_the_numpy_reader_equals_the_rust_reader(cli, runs, fmt):
    d = runs[fmt]
    run = uqbench.read_run(d / "run")
    for method in ("Ens", "BLR"):
        cli("draws", str(d / "run"), "--method", method, "--setting", "f_main=2",
            "--out", str(d / method))
        for k in (0, 19):
            mine = run.draws("f_main=2", method, k)
            with open(d / method / "f_main=2" / f"rep-{k:03d}.json") as f:
                theirs = json.load(f)
            assert sorted(mine) == sorted(theirs)
            for key, value in theirs.items():
                if key == "cov":
                    # F·Fᵀ summed in another order: equal to rounding.
                    np.testing.assert_allclose(mine[key], value, rtol=1e-12, atol=1e-15)
                else:
                    # The same decoding, centre + code × step in float64: bit for bit.
                    assert np.array_equal(mine[key], np.asarray(value)), (method, key)


def test_the_reader_loads_without_the_compiled_package(runs):
    # scripts/reference_agreement.py loads `_draws.py` alone (numpy and ArviZ, no build of
    # the package): it must import there and read what the package reads.
    path = runs["f32"] / "run" / "reps" / "f_main=1" / "Ens" / "rep-000.draws"
    here = os.path.join(os.path.dirname(__file__), "..", "uqbench")
    code = (f"import sys; sys.path.insert(0, {here!r}); from _draws import read_draws; "
            f"print(read_draws({str(path)!r})['samples'].sum())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout) == uqbench.read_draws(path)["samples"].sum()


def test_eight_bit_draws_keep_each_inputs_mean_within_half_a_step(runs):
    run = uqbench.read_run(runs["i8"] / "run")
    for k, rep in enumerate(run.predictions("f_main=1", "Ens")):
        d = uqbench.read_draws(runs["i8"] / "run" / "reps" / "f_main=1" / "Ens" / f"rep-{k:03d}.draws")
        assert d["kind"] == "draws" and d["values"] == "f" and d["samples"].shape == (6, d["points"])
        half = d["half_step"]["samples"]
        # Each draw is within half a step of the member's prediction, so their mean is too
        # (the repetition file's mean is the members' mean in float64).
        err = np.abs(d["samples"].mean(axis=0) - rep["mean"])
        assert np.all(err <= half * (1 + 1e-6) + 1e-12), err.max()
        # A step is a 254th of the input's range of draws (the codes ±127 are its ends).
        rng = d["samples"].max(axis=0) - d["samples"].min(axis=0)
        np.testing.assert_allclose(2 * half, rng / 254, rtol=1e-5, atol=1e-12)


def test_f32_draws_score_again_to_the_runs_joint_metrics(runs):
    path = runs["f32"] / "run"
    run = uqbench.read_run(path)
    problem = uqbench.Problem(path / "spec.resolved.toml", {"f_main": 1})
    preds = [run.draws("f_main=1", "Ens", k) for k in range(20)]
    scored = uqbench.score(problem, preds, method="stored").repetitions
    native = run.by_repetition
    checked = 0
    for metric in ("joint_kl_1", "joint_kl_10", "env_kl_10"):
        a = scored[(scored.method == "stored") & (scored.metric == metric)]
        b = native[(native.method == "Ens") & (native.metric == metric) & (native.setting == "f_main=1")]
        m = a.merge(b, on=["region", "repetition"])
        assert len(m) == 20 * 3, metric
        # The same batches and y (the spec's seed): f32 draws move a log density of τ ≤ 10
        # inputs by far less than 1e-5 nats.
        np.testing.assert_allclose(m.value_x, m.value_y, rtol=1e-5, atol=1e-5)
        checked += len(m)
    assert checked == 180


def test_a_missing_draws_file_is_a_clear_error(runs, tmp_path):
    run = uqbench.read_run(runs["i8"] / "run")
    with pytest.raises(ValueError, match="no draws file"):
        run.draws("f_main=1", "Ens", 20)
    bad = tmp_path / "bad.draws"
    bad.write_bytes(b"not a draws file")
    with pytest.raises(ValueError, match="UQBDRAW1"):
        uqbench.read_draws(bad)
