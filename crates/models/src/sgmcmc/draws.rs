//! SG-MCMC's draws: a collector that evaluates each chain's network at its task's test inputs
//! at every draw epoch (several tasks' chains in one job, each at its own inputs).

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;

use crate::host_net::TrainedNet;
use uqbench_engine::trainer::collect::{Collected, Collector, Event, Want};

/// The collector of a chain's draws: at each draw epoch, the network evaluated at the test
/// inputs (in f64, on the training thread), so that a chain keeps M values per draw, not its
/// parameters.
#[derive(Debug)]
pub(super) struct Draws {
    pub(super) epochs: BTreeSet<usize>,
    /// The test inputs as the network sees them `[M, d]`.
    pub(super) x_test: Arc<nalgebra::DMatrix<f64>>,
    /// Widths: input, hidden…, 1.
    pub(super) dims: Vec<usize>,
    pub(super) slope: f64,
}

/// One chain's draws of f at the test inputs, in order.
#[derive(Debug)]
pub(super) struct ChainDraws {
    of: Arc<Draws>,
    pub(super) rows: Vec<Vec<f64>>,
    /// With σ learned, the chain's σ at each draw.
    pub(super) sigmas: Vec<f64>,
}

/// The [`Collector`] of [`Draws`]: per task of the job, its replicas (from the first, in
/// order) and its [`Draws`] (an `Arc`, which each of its chains' states shares); the tasks'
/// draw epochs are the same.
#[derive(Debug)]
pub(super) struct DrawCollector(pub(super) Vec<(std::ops::Range<usize>, Arc<Draws>)>);

impl Collector for DrawCollector {
    fn wants(&self, event: Want) -> bool {
        matches!(event, Want::Epoch(e) if self.0[0].1.epochs.contains(&e))
    }

    fn start(&self, replica: usize) -> Box<dyn Collected> {
        let (_, of) = (self.0.iter())
            .find(|(span, _)| span.contains(&replica))
            .expect("every replica of the job is in one task's span");
        Box::new(ChainDraws {
            of: of.clone(),
            rows: Vec::new(),
            sigmas: Vec::new(),
        })
    }
}

impl Collected for ChainDraws {
    fn observe(&mut self, event: &Event<'_>) {
        if let Event::Epoch {
            params, noise_sd, ..
        } = event
        {
            let net = TrainedNet::from_flat(params, &self.of.dims, self.of.slope);
            self.rows.push(net.forward_batch(&self.of.x_test));
            self.sigmas.extend(noise_sd);
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
