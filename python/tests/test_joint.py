"""Joint predictions (spec §10) recomputed independently with numpy: the Gaussian closed form
under Osband et al.'s dyadic sampling (its law enumerated exactly), a mixture by Monte Carlo,
the τ = 1 identity, and the anchor's own joint scored through `uqbench.score`."""

import itertools

import numpy as np
import pytest

import uqbench
from uqbench import metrics

# Two independent estimates agree within 4.5 combined standard errors (|N(0,1)| > 4.5: 7e-6).
Z = 4.5


def kl_gauss(m0, s0, m1, s1):
    """KL(N(m0, S0) ‖ N(m1, S1)) in closed form, by numpy."""
    k = len(m0)
    s1i = np.linalg.inv(s1)
    d = m1 - m0
    return 0.5 * (
        np.trace(s1i @ s0) + d @ s1i @ d - k + np.linalg.slogdet(s1)[1] - np.linalg.slogdet(s0)[1]
    )


def setup(m=3):
    rng = np.random.default_rng(5)
    a = rng.normal(size=(m, 2))
    exact_cov = a @ a.T
    exact_mean = rng.normal(size=m)
    b = rng.normal(size=(m, m)) * 0.3
    cov = b @ b.T + 0.1 * np.eye(m)
    mean = exact_mean + 0.3
    sigma = np.full(m, 0.5)
    return exact_mean, exact_cov, mean, cov, sigma


def test_the_gaussian_closed_form_under_dyadic_sampling():
    exact_mean, exact_cov, mean, cov, sigma = setup()
    m, tau = 3, 4
    out = metrics.joint(
        sigma, mean=mean, cov=cov, exact_mean=exact_mean, exact_cov=exact_cov,
        tau=[1, tau], batches=4000, seed=1,
    )
    assert out["joint_kind"] == "gaussian"
    # τ = 1: every input once, the mean of the marginal KLs of y.
    want1 = np.mean([
        kl_gauss(exact_mean[[i]], exact_cov[[i]][:, [i]] + sigma[i] ** 2,
                 mean[[i]], cov[[i]][:, [i]] + sigma[i] ** 2)
        for i in range(m)
    ])
    assert out["joint_kl_1"] == pytest.approx(want1, rel=1e-10)
    # τ = 4, κ = 2: anchors u, v uniform with replacement, each input u or v with
    # probability ½; the expectation over that law, enumerated.
    want = 0.0
    for u, v in itertools.product(range(m), repeat=2):
        for pattern in itertools.product([u, v], repeat=tau):
            x = list(pattern)
            s0 = exact_cov[np.ix_(x, x)] + np.diag(sigma[x] ** 2)
            s1 = cov[np.ix_(x, x)] + np.diag(sigma[x] ** 2)
            want += kl_gauss(exact_mean[x], s0, mean[x], s1) / (m * m * 2**tau)
    got, se = out[f"joint_kl_{tau}"], out[f"joint_kl_{tau}_se"]
    assert se > 0
    assert abs(got - want) < Z * se, (got, want, se)


def test_a_mixture_by_monte_carlo_matches_numpy():
    exact_mean, exact_cov, _, _, sigma = setup(1)
    rng = np.random.default_rng(9)
    draws = rng.normal(exact_mean[0] + 0.2, 0.8, size=(1, 50))
    # One input: every batch is τ copies of it, so both sides see the same X.
    tau = 3
    out = metrics.joint(
        sigma, samples=draws, exact_mean=exact_mean, exact_cov=exact_cov, tau=[tau],
        batches=20000, seed=2,
    )
    assert out["joint_kind"] == "draws"
    s0 = np.full((tau, tau), exact_cov[0, 0]) + sigma[0] ** 2 * np.eye(tau)
    l0 = np.linalg.cholesky(s0)
    y = exact_mean[0] + rng.normal(size=(20000, tau)) @ l0.T
    ln_p = (
        -0.5 * np.einsum("ij,ij->i", y - exact_mean[0], np.linalg.solve(s0, (y - exact_mean[0]).T).T)
        - 0.5 * np.linalg.slogdet(2 * np.pi * s0)[1]
    )
    comp = (
        -0.5 * ((y[:, None, :] - draws[0][None, :, None]) / sigma[0]) ** 2
        - np.log(sigma[0] * np.sqrt(2 * np.pi))
    ).sum(axis=2)
    top = comp.max(axis=1, keepdims=True)
    ln_q = (top + np.log(np.exp(comp - top).mean(axis=1, keepdims=True)))[:, 0]
    v = ln_p - ln_q
    mine, mine_se = v.mean(), v.std(ddof=1) / np.sqrt(len(v))
    got, se = out[f"joint_kl_{tau}"], out[f"joint_kl_{tau}_se"]
    assert abs(got - mine) < Z * np.hypot(se, mine_se), (got, mine, se, mine_se)


def test_the_environment_kl_of_the_truth_is_zero_and_bad_input_names_itself():
    sigma = np.array([0.5, 1.0])
    truth = np.array([1.0, -1.0])
    out = metrics.joint(sigma, mean=truth, std=np.zeros(2), truth=truth, tau=[1, 10])
    assert out["env_kl_1"] == pytest.approx(0.0, abs=1e-12)
    assert out["env_kl_10"] == pytest.approx(0.0, abs=1e-12)
    assert "joint_kl_1" not in out
    with pytest.raises(ValueError, match="sigma"):
        metrics.joint([0.5, -1.0], mean=truth, std=np.zeros(2), truth=truth)
    with pytest.raises(ValueError, match="cov"):
        metrics.joint(sigma, mean=truth, cov=[[1.0, 2.0], [0.0, 1.0]], truth=truth)


def test_the_anchors_own_joint_scores_zero(root):
    problem = uqbench.Problem(root / "experiments/e1.toml", setting={"f_main": 2}, profile="quick")
    preds = []
    for k in range(3):
        a = problem.anchor(k)
        assert a.cov.shape == (len(a.mean), len(a.mean))
        np.testing.assert_allclose(np.sqrt(np.diag(a.cov)), a.std, rtol=1e-12)
        preds.append({"mean": a.mean, "cov": a.cov})
    agg = uqbench.score(problem, preds, method="exact").aggregate
    rows = agg[(agg.method == "exact") & (agg.metric.str.startswith("joint_kl_"))]
    assert set(rows.metric) >= {"joint_kl_1", "joint_kl_10"}
    # The covariance went through an eigendecomposition and back: zero up to rounding.
    assert rows.value.abs().max() < 1e-6, rows
    blr = agg[(agg.method == "BLR") & (agg.metric == "joint_kl_10")]
    assert (blr.value == 0).all()


def test_the_classification_enumeration_matches_numpy():
    # 2^τ label vectors enumerated by numpy, under dyadic sampling's law enumerated too.
    truth = np.array([0.2, 0.7, 0.55])
    probs = np.array([[0.3, 0.1, 0.25], [0.6, 0.8, 0.9], [0.5, 0.4, 0.7]])  # M × S draws
    m, tau = 3, 4
    out = metrics.joint_classification(probs, truth, tau=[1, tau], batches=4000, seed=3)

    def kl(x):
        total = 0.0
        for labels in itertools.product([0, 1], repeat=len(x)):
            lab = np.array(labels)
            p = np.prod(np.where(lab == 1, truth[x], 1 - truth[x]))
            q = np.mean(np.prod(np.where(lab[:, None] == 1, probs[x], 1 - probs[x]), axis=0))
            total += p * np.log(p / q)
        return total

    assert out["env_kl_1"] == pytest.approx(np.mean([kl([i]) for i in range(m)]), rel=1e-10)
    want = 0.0
    for u, v in itertools.product(range(m), repeat=2):
        for pattern in itertools.product([u, v], repeat=tau):
            want += kl(list(pattern)) / (m * m * 2**tau)
    got, se = out[f"env_kl_{tau}"], out[f"env_kl_{tau}_se"]
    assert se > 0 and abs(got - want) < Z * se, (got, want, se)
