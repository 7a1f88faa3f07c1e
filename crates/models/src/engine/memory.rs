//! Where a job runs and how its replicas are cut into chunks: the memory plan.

use burn::tensor::Device;

use super::settings::{Batching, TrainSettings};
use crate::backend::BackendKind;
use crate::error::ModelError;
use crate::kernels::KernelPath;
use crate::mlp::MlpShape;

/// Where and how to run.
#[derive(Debug, Clone)]
pub struct Resources {
    /// The backend.
    pub backend: BackendKind,
    /// Its (non-autodiff) device.
    pub device: Device,
    /// Worker threads for chunks (CPU backends; a GPU device uses one).
    pub threads: usize,
    /// Upper bound on the memory a chunk's tensors may take, in bytes.
    pub memory_budget: usize,
    /// Replicas per chunk; `None` chooses from the memory budget (and, on the CPU, from
    /// [`CPU_CHUNK_BYTES`], to keep a chunk's working set in cache).
    pub chunk: Option<usize>,
}

/// Working-set target of one chunk on a CPU backend, in bytes. A chunk's parameters, Adam
/// moments and activations are touched several times per step; keeping them within about one
/// core's L2 cache (1 MiB on the development machine) made training 1.8× faster than chunks
/// of 32 replicas (`uqbench bench train --chunk C` sweeps; see the README's benchmark
/// section).
pub const CPU_CHUNK_BYTES: usize = 3 << 19;

impl Resources {
    /// Defaults for a backend: all cores on the CPU, 2 GiB per chunk.
    pub fn new(backend: BackendKind, device: Device) -> Resources {
        let threads = if backend == BackendKind::Wgpu {
            1
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        };
        Resources {
            backend,
            device,
            threads,
            memory_budget: 2 << 30,
            chunk: None,
        }
    }

    /// The element-wise kernels for this backend: fused loops on flex, tensor ops elsewhere.
    pub fn kernel_path(&self) -> KernelPath {
        if self.backend == BackendKind::Flex {
            KernelPath::Flex
        } else {
            KernelPath::Tensor
        }
    }
}

/// Bytes a chunk needs per replica: parameters with gradients and Adam moments, and the
/// activations of a step's forward and backward pass (and of the test forward pass).
pub fn bytes_per_replica(
    shape: &MlpShape,
    settings: &TrainSettings,
    n_train: usize,
    n_test: usize,
) -> usize {
    let params = shape.params_per_replica() * 5;
    let widths: usize = shape.hidden.iter().sum::<usize>() + shape.d_in + shape.d_out;
    let widest = shape
        .hidden
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(shape.d_in);
    let points = match &settings.batching {
        Batching::Full | Batching::Resample => n_train,
        Batching::Shuffled { size } | Batching::WithReplacement { size, .. } => *size,
    };
    let step = if settings.adversarial.is_some() { 2 } else { 1 };
    let activations = points * (widths * 2 + widest * 2) * step;
    let test = n_test * widest * 2 + n_test * shape.d_out * settings.mc_passes;
    4 * (params + activations.max(test) + points * (shape.d_in + 1))
}

/// Replicas per chunk for this job and these resources.
pub fn chunk_size(
    job_replicas: usize,
    per_replica: usize,
    res: &Resources,
) -> Result<usize, ModelError> {
    let fit = res.memory_budget / per_replica.max(1);
    if fit == 0 {
        return Err(ModelError::invalid(
            "memory budget",
            format!("{} MiB", res.memory_budget >> 20),
            format!(
                "at least {} MiB: one replica of this job needs that much",
                per_replica.div_ceil(1 << 20)
            ),
        ));
    }
    let chunk = match res.chunk {
        Some(c) => c,
        None if res.backend == BackendKind::Wgpu => usize::MAX,
        // Cache-sized, but never so large that a thread would sit idle.
        None => {
            (CPU_CHUNK_BYTES / per_replica.max(1)).min(job_replicas.div_ceil(res.threads.max(1)))
        }
    };
    Ok(chunk.min(fit).min(job_replicas).max(1))
}
