//! Counting the tensor operations a run issues, where burn receives them.
//!
//! On the GPU backends burn records every tensor operation in its fusion server before
//! anything runs, and runs them in blocks: one fused kernel, or one operation on its own.
//! A [`burn_fusion::observer::FusionObserver`] is told of both, on the server's thread. That
//! is the count this module takes:
//! - **operations**: registered, tensor drops excluded (a drop frees memory and launches no
//!   work);
//! - **blocks**: blocks run, an upper bound on the kernel launches the operations became.
//!
//! The CPU backends (flex, ndarray) run each operation eagerly and have no such server, so
//! there is nothing to observe. The engine issues the same operations on every backend (the
//! program does not branch on it), so the wgpu count describes a CPU run too; `bench train
//! --json` reports `null` on the CPU rather than a number nobody measured.
//!
//! The observer is process-wide: it counts every operation any thread records while it is
//! installed, so count a region that runs alone (the benchmark does).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use burn::tensor::Device;
use burn_fusion::observer::{BlockOperations, FusionObservation, FusionObserver};
use burn_ir::OperationIr;
use serde::{Deserialize, Serialize};

use crate::backend::BackendKind;
use uqbench_core::MethodError;

/// Operations and blocks observed in a region of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct OpCounts {
    /// Tensor operations registered (drops excluded).
    pub operations: u64,
    /// Blocks run: fused kernels plus operations run unfused.
    pub blocks: u64,
}

#[derive(Default)]
struct Counter {
    operations: AtomicU64,
    blocks: AtomicU64,
}

impl FusionObserver for Counter {
    fn registered(&self, operation: &OperationIr) {
        if !matches!(operation, OperationIr::Drop(_)) {
            self.operations.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn block_starts(&self, _block: BlockOperations<'_>) {
        self.blocks.fetch_add(1, Ordering::Relaxed);
    }

    fn block_ran(&self) {}
}

/// Whether `backend` records operations in burn's fusion server (the GPU backends).
pub fn observable(backend: BackendKind) -> bool {
    backend.is_gpu()
}

/// Runs `work` and returns its result with the operations it issued on `device`, or `None`
/// on a backend without a fusion server (see the module docs). The device is synchronised
/// before and after, so that the observer sees exactly the region's operations.
pub fn count<T>(
    backend: BackendKind,
    device: &Device,
    work: impl FnOnce() -> Result<T, MethodError>,
) -> Result<(T, Option<OpCounts>), MethodError> {
    if !observable(backend) {
        return Ok((work()?, None));
    }
    let sync = |when: &str| {
        device.sync().map_err(|e| MethodError::BackendUnavailable {
            backend: backend.name().to_string(),
            reason: format!("synchronising the device {when} counting its operations: {e:?}"),
            hint: "run without counting (the CPU backends never count)".to_string(),
        })
    };
    sync("before")?;
    let counter = Arc::new(Counter::default());
    let observation = FusionObservation::new(counter.clone());
    let out = work();
    let synced = sync("after");
    drop(observation);
    let out = out?;
    synced?;
    Ok((
        out,
        Some(OpCounts {
            operations: counter.operations.load(Ordering::Relaxed),
            blocks: counter.blocks.load(Ordering::Relaxed),
        }),
    ))
}
