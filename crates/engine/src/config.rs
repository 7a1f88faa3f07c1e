//! The settings every network method shares: the network ([`NetConfig`]) and the optimiser
//! ([`OptimConfig`]). A method's config holds both plus its own keys; in a spec all of them
//! sit flat in one `[methods.NAME]` table. [`split_flat`] splits such a table by the known
//! key sets and deserialises each part with `deny_unknown_fields`, so a misspelt key is still
//! an error naming the key.

use std::ops::{Deref, DerefMut};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::mlp::MlpShape;
use crate::optim::AdamConfig;
use crate::trainer::{Batching, TrainSettings};
use uqbench_core::MethodError;

/// A method's settings: the shared network and optimiser parts and the method's own keys
/// (`Own`, reachable directly through `Deref`). Read from one flat table.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct MethodConfig<Own> {
    /// The network.
    #[serde(flatten)]
    pub net: NetConfig,
    /// The optimiser.
    #[serde(flatten)]
    pub optim: OptimConfig,
    /// The method's own settings.
    #[serde(flatten)]
    pub own: Own,
}

impl<Own> Deref for MethodConfig<Own> {
    type Target = Own;
    fn deref(&self) -> &Own {
        &self.own
    }
}

impl<Own> DerefMut for MethodConfig<Own> {
    fn deref_mut(&mut self) -> &mut Own {
        &mut self.own
    }
}

impl<'de, Own: DeserializeOwned> Deserialize<'de> for MethodConfig<Own> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let table = toml::Table::deserialize(d)?;
        let (net, optim, own) = split_flat(table).map_err(serde::de::Error::custom)?;
        Ok(MethodConfig { net, optim, own })
    }
}

/// The network of a method: [000]'s 128-64-32 leaky-ReLU MLP by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetConfig {
    /// Hidden widths (spec §3: 128, 64, 32); dropout acts on the last hidden layer's output.
    pub hidden: Vec<usize>,
    /// Leaky-ReLU slope (0.01).
    pub negative_slope: f64,
    /// Standardise every input dimension by the training inputs' mean and sd before training
    /// (and the test inputs by the same map).
    pub standardize: bool,
}

impl NetConfig {
    /// The keys of this part of a flat method table.
    pub const KEYS: &'static [&'static str] = &["hidden", "negative_slope", "standardize"];

    /// The network for `d_in` inputs and `d_out` outputs.
    pub fn shape(&self, d_in: usize, d_out: usize) -> MlpShape {
        MlpShape {
            d_in,
            hidden: self.hidden.clone(),
            d_out,
            negative_slope: self.negative_slope,
        }
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            hidden: vec![128, 64, 32],
            negative_slope: 0.01,
            standardize: false,
        }
    }
}

/// The optimiser of a method: spec §3's Adam(1e-2, 0.9, 0.999, ε = 1e-8), L2 λ = 1/N on the
/// weights, full batch, by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    /// Adam learning rate (1e-2).
    pub lr: f64,
    /// Adam β₁ (0.9).
    pub beta1: f64,
    /// Adam β₂ (0.999).
    pub beta2: f64,
    /// Adam ε (1e-8, PyTorch's; burn's default is 1e-5).
    pub eps: f64,
    /// L2 factor λ on the weights; 1/N when not set (spec §3).
    pub weight_decay: Option<f64>,
    /// Mini-batch size; full batch when not set (spec §3).
    pub batch_size: Option<usize>,
}

impl OptimConfig {
    /// The keys of this part of a flat method table.
    pub const KEYS: &'static [&'static str] =
        &["lr", "beta1", "beta2", "eps", "weight_decay", "batch_size"];

    /// Adam's settings.
    pub fn adam(&self) -> AdamConfig {
        AdamConfig {
            lr: self.lr,
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
        }
    }

    /// λ for N training points.
    pub fn lambda(&self, n_train: usize) -> f64 {
        self.weight_decay.unwrap_or(1.0 / n_train as f64)
    }

    /// Training settings for N points: Adam with these values, λ, mini-batches of
    /// `batch_size` (shuffled every epoch) or the full batch; no adversarial pass, no
    /// stochastic layer, a mean-only head and one prediction pass (methods override these).
    pub fn settings(&self, epochs: usize, n_train: usize) -> TrainSettings {
        TrainSettings {
            epochs,
            lr: self.lr,
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.lambda(n_train),
            batching: match self.batch_size {
                Some(size) if size < n_train => Batching::Shuffled { size },
                _ => Batching::Full,
            },
            adversarial: None,
            dropout: None,
            heteroscedastic: false,
            likelihood: uqbench_core::Likelihood::Gaussian,
            mc_passes: 1,
            lr_switch: None,
            own_head: None,
            update: None,
            collectors: Vec::new(),
        }
    }
}

impl Default for OptimConfig {
    fn default() -> Self {
        OptimConfig {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: None,
            batch_size: None,
        }
    }
}

/// Splits a flat method table into its network part, its optimiser part and the method's own
/// keys, each deserialised on its own (so unknown keys are errors).
pub fn split_flat<Own: DeserializeOwned>(
    table: toml::Table,
) -> Result<(NetConfig, OptimConfig, Own), MethodError> {
    let mut net = toml::Table::new();
    let mut optim = toml::Table::new();
    let mut own = toml::Table::new();
    for (k, v) in table {
        if NetConfig::KEYS.contains(&k.as_str()) {
            net.insert(k, v);
        } else if OptimConfig::KEYS.contains(&k.as_str()) {
            optim.insert(k, v);
        } else {
            own.insert(k, v);
        }
    }
    fn parse<T: DeserializeOwned>(what: &str, t: toml::Table) -> Result<T, MethodError> {
        t.try_into().map_err(|e: toml::de::Error| {
            MethodError::invalid(what, e.message().trim().to_string(), "valid settings")
        })
    }
    Ok((
        parse("network settings", net)?,
        parse("optimiser settings", optim)?,
        own.try_into().map_err(|e: toml::de::Error| {
            MethodError::invalid(
                "method settings",
                e.message().trim().to_string(),
                format!(
                    "the method's own keys, or the shared ones: {}",
                    [NetConfig::KEYS, OptimConfig::KEYS].concat().join(", ")
                ),
            )
        })?,
    ))
}
