//! The method kinds a spec may name (`kind = "…"` in a `[methods.NAME]` table, or the table's
//! name), each with the room it lives in and one line on what it is: the catalogue the
//! registry (`uqbench-methods`, which builds them on burn) implements, kept here without burn
//! so that the Python package can list it too. The registry's tests check that both name the
//! same kinds. Settings and references: docs/methods.md.

use serde::Serialize;

/// One method kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KindInfo {
    /// The name a spec uses.
    pub name: &'static str,
    /// Where it lives: `exact` (a closed-form reference), `network` (trained on the engine),
    /// `sampler` (MCMC or variational inference over a network's weights) or `post-hoc` (it
    /// wraps the method of another table, its `base`).
    pub room: &'static str,
    /// What it is, in one line.
    pub summary: &'static str,
}

const fn kind(name: &'static str, room: &'static str, summary: &'static str) -> KindInfo {
    KindInfo {
        name,
        room,
        summary,
    }
}

/// Every method kind, by room.
pub const METHOD_KINDS: &[KindInfo] = &[
    kind("BLR", "exact", "the anchor: Bayesian linear regression on the problem's features, flat prior (exact)"),
    kind("BLRGaussian", "exact", "Bayesian linear regression under a Gaussian prior N(0, prior_sd²)"),
    kind("GP", "exact", "exact Gaussian-process regression in f64, hyper-parameters by marginal likelihood"),
    kind("Ens", "network", "deep ensemble; heteroscedastic = true gives the mean–variance ensemble (β-NLL with beta_nll)"),
    kind("EnsAdvA", "network", "deep ensemble with adversarial training (fast gradient sign)"),
    kind("EnsBS", "network", "ensemble on bootstrap mini-batches ([000]'s bootstrap)"),
    kind("EnsBSClassic", "network", "classic bootstrap ensemble: one resample per member (jackknife+ with jackknife_plus)"),
    kind("NaiveBootstrap", "network", "[004]'s naive bootstrap: one resample per member, t intervals"),
    kind("BD", "network", "MC dropout (Bernoulli dropout kept on at prediction)"),
    kind("CD", "network", "concrete dropout: the dropout rate learned"),
    kind("VD", "network", "variational (Gaussian) dropout with learned log α"),
    kind("Det", "network", "one network, no sampling ([003]'s deterministic baseline)"),
    kind("EnsMCD", "network", "an ensemble of MC-dropout networks"),
    kind("EnsPrior", "network", "ensemble+ with randomized prior functions (Osband et al. 2018)"),
    kind("Epinet", "network", "a base network with an epinet: one index z ~ N(0, I) gives one function (Osband et al. 2023)"),
    kind("BatchEnsemble", "network", "M members sharing one weight matrix per layer, rank-1 fast weights each (Wen et al. 2020)"),
    kind("DER", "network", "deep evidential regression: a Normal–Inverse-Gamma head (Amini et al. 2020)"),
    kind("SWAG", "network", "SWA-Gaussian: a low-rank plus diagonal Gaussian over the weights (Maddox et al. 2019)"),
    kind("MultiSWAG", "network", "an ensemble of SWAG members"),
    kind("Laplace", "network", "Laplace approximation around a trained network, linearised predictive (laplace-torch's conventions)"),
    kind("QuantileRegression", "network", "a network with the pinball loss at each interval's quantiles"),
    kind("CQR", "network", "conformalised quantile regression: a quantile network, its band widened on held-out points (Romano et al. 2019)"),
    kind("MFVI", "sampler", "a Bayesian network by mean-field variational inference (Bayes by backprop)"),
    kind("HMC", "sampler", "a Bayesian network sampled by Hamiltonian Monte Carlo, σ² Gibbs-sampled"),
    kind("SGLD", "sampler", "stochastic-gradient Langevin dynamics, the engine's replicas as chains"),
    kind("SGHMC", "sampler", "stochastic-gradient Hamiltonian Monte Carlo"),
    kind("CyclicalSGMCMC", "sampler", "cyclical SG-MCMC (Zhang et al. 2020)"),
    kind("pSGLD", "sampler", "preconditioned SGLD (Li et al. 2016): RMSprop's diagonal preconditioner"),
    kind("Conformal", "post-hoc", "split conformal prediction around another table's method"),
    kind("Recalibrated", "post-hoc", "std scaling, isotonic recalibration or temperature scaling on held-out points"),
];
