//! Where a job runs and how its replicas are cut into chunks: the memory plan.

use std::sync::Arc;

use burn::tensor::Device;
use uqbench_core::Compute;

use super::settings::{Batching, TrainSettings};
use crate::backend::BackendKind;
use crate::cpu::kernels::KernelPath;
use crate::mlp::MlpShape;
use uqbench_core::MethodError;

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
    /// The largest single tensor the device can bind, in bytes ([`WGPU_MAX_BINDING`] on
    /// wgpu; unbounded on the CPU). No chunk makes a tensor larger.
    pub max_tensor_bytes: usize,
    /// Whether a CPU backend runs the host loops (`crate::cpu`) where a method has them,
    /// rather than batched tensors.
    pub host_loops: bool,
    /// The instruction set the host loops run at: the CPU's best, or a cap below it.
    pub simd: crate::cpu::simd::Level,
}

/// The largest storage buffer wgpu binds (its `max_storage_buffer_binding_size` ceiling on
/// Vulkan desktop GPUs, 2 GiB): a tensor above it cannot be used by a kernel.
pub const WGPU_MAX_BINDING: usize = 2 << 30;

/// The fraction of a GPU's memory the chunk budget takes when the device memory is given
/// (`with_device_memory`): the rest is left to burn's allocator pools, the prediction passes'
/// buffers and fragmentation.
pub const DEVICE_MEMORY_FRACTION: f64 = 0.5;

/// Working-set target of one chunk on a CPU backend, in bytes. A chunk's parameters, Adam
/// moments and activations are touched several times per step; keeping them within about one
/// core's L2 cache (1 MiB on the development machine) made training 1.8× faster than chunks
/// of 32 replicas (`uqbench bench train --chunk C` sweeps; see docs/performance.md's benchmark
/// section).
pub const CPU_CHUNK_BYTES: usize = 3 << 19;

impl Resources {
    /// Defaults for a backend: all cores on the CPU, 2 GiB per chunk.
    pub fn new(backend: BackendKind, device: Device) -> Resources {
        let threads = if backend.is_gpu() {
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
            max_tensor_bytes: if backend == BackendKind::Wgpu {
                WGPU_MAX_BINDING
            } else {
                usize::MAX
            },
            host_loops: true,
            simd: crate::cpu::simd::best(),
        }
    }

    /// Whether the host loops run for a network of `shape`: on a CPU backend, with the loops
    /// on, and for the samplers' feature-major loops (HMC, MFVI) only where every layer is
    /// small enough for them ([`MlpShape::host_sized`]).
    pub fn sampler_host_loops(&self, shape: &MlpShape) -> bool {
        !self.backend.is_gpu() && self.host_loops && shape.host_sized()
    }

    /// The resources a method on burn runs with, read from the burn-free [`Compute`]: its
    /// backend, its device (an error when none was opened) and its limits.
    pub fn of(compute: &Compute) -> Result<Resources, MethodError> {
        let backend: BackendKind = compute.backend.parse()?;
        let device = compute
            .device
            .as_ref()
            .and_then(|d| d.downcast_ref::<Device>())
            .cloned()
            .ok_or_else(|| {
                MethodError::invalid(
                    "compute device",
                    format!("none for backend {}", compute.backend),
                    "a burn device opened by `open_device` (a method on burn needs one)",
                )
            })?;
        Ok(Resources {
            threads: compute.threads.max(1),
            memory_budget: compute.memory_budget,
            chunk: compute.chunk,
            host_loops: compute.host_loops,
            simd: crate::cpu::simd::Level::capped(compute.simd),
            ..Resources::new(backend, device)
        })
    }

    /// The burn-free view of these resources, carrying the device for the methods on burn.
    pub fn compute(&self) -> Compute {
        Compute {
            backend: self.backend.name().to_string(),
            gpu: self.backend.is_gpu(),
            threads: self.threads,
            memory_budget: self.memory_budget,
            chunk: self.chunk,
            device: Some(Arc::new(self.device.clone())),
            host_loops: self.host_loops,
            simd: self.simd.cap(),
        }
    }

    /// The chunk budget for a device with `bytes` of memory: [`DEVICE_MEMORY_FRACTION`] of it.
    pub fn with_device_memory(mut self, bytes: usize) -> Resources {
        self.memory_budget = (bytes as f64 * DEVICE_MEMORY_FRACTION) as usize;
        self
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

/// The widest layer input: the largest hidden width, or the input width.
fn widest_layer_input(shape: &MlpShape) -> usize {
    shape
        .hidden
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(shape.d_in)
}

/// Training points one step sees: all N, or the mini-batch size.
fn points_per_step(settings: &TrainSettings, n_train: usize) -> usize {
    match &settings.batching {
        Batching::Full | Batching::Resample { size: None } => n_train,
        Batching::Shuffled { size }
        | Batching::WithReplacement { size, .. }
        | Batching::Resample { size: Some(size) } => *size,
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
    let widest = widest_layer_input(shape);
    let points = points_per_step(settings, n_train);
    let step = if settings.adversarial.is_some() { 2 } else { 1 };
    let activations = points * (widths * 2 + widest * 2) * step;
    let test = n_test * widest * 2 + n_test * shape.d_out * settings.mc_passes;
    4 * (params + activations.max(test) + points * (shape.d_in + 1))
}

/// Bytes per replica of the largest single tensor of a step or of prediction: an activation
/// or δ (`[R, points, widest]`, the test forward pass's `[R, M, widest]`), a weight matrix
/// (`[R, in, out]`), a batch of inputs, or one prediction pass's outputs.
pub fn largest_tensor_per_replica(
    shape: &MlpShape,
    settings: &TrainSettings,
    n_train: usize,
    n_test: usize,
) -> usize {
    let widest = widest_layer_input(shape).max(shape.d_out);
    let points = points_per_step(settings, n_train);
    let weights = shape
        .layers()
        .iter()
        .map(|&(i, o)| i * o)
        .max()
        .unwrap_or(1);
    4 * (points * widest)
        .max(n_test * widest)
        .max(weights)
        .max(n_train * shape.d_in)
}

/// Replicas per chunk for this job and these resources: within the memory budget
/// (`per_replica` bytes each), no tensor above the device's binding cap (`largest` bytes per
/// replica), and on the CPU sized to the cache by what a training step touches
/// (`step_per_replica` bytes each: the prediction at the test inputs runs once per chunk, and
/// counting its activations had shrunk E1's chunks, 1 000 test inputs, to one replica, four
/// times the per-operation overhead of `bench train`'s).
pub fn chunk_size(
    job_replicas: usize,
    per_replica: usize,
    step_per_replica: usize,
    largest: usize,
    res: &Resources,
) -> Result<usize, MethodError> {
    let cap = res.max_tensor_bytes / largest.max(1);
    if cap == 0 {
        return Err(MethodError::invalid(
            "largest tensor of one replica",
            format!("{} MiB", largest >> 20),
            format!(
                "at most the device's binding limit, {} MiB: fewer training points per step \
                 (batch_size) or a narrower network",
                res.max_tensor_bytes >> 20
            ),
        ));
    }
    let fit = res.memory_budget / per_replica.max(1);
    if fit == 0 {
        return Err(MethodError::invalid(
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
        None if res.backend.is_gpu() => usize::MAX,
        // Cache-sized, but never so large that a thread would sit idle.
        None => (CPU_CHUNK_BYTES / step_per_replica.max(1))
            .min(job_replicas.div_ceil(res.threads.max(1))),
    };
    Ok(chunk.min(fit).min(cap).min(job_replicas).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// E2 at d = 4: N = 100·9³ = 72 900 training points, 1000 test points, the paper's
    /// 4-128-64-32-1 network, full batch.
    fn e2_d4() -> (MlpShape, TrainSettings, usize, usize) {
        let n = 100 * 9usize.pow(3);
        (MlpShape::paper(4), TrainSettings::paper(600, n), n, 1000)
    }

    #[test]
    fn a_gpu_chunk_keeps_every_tensor_under_the_binding_cap() {
        // A simulated 80 GiB wgpu device: the budget is half of it, and the binding cap of
        // 2 GiB limits the chunk: an activation [R, 72 900, 128] in f32 is 37.3 MB per
        // replica, so ⌊2³¹ / 37 324 800⌋ = 57 replicas, not the 10 of the 2 GiB default.
        let (shape, settings, n, m) = e2_d4();
        let res = Resources::new(BackendKind::Wgpu, Device::flex()).with_device_memory(80 << 30);
        let per = bytes_per_replica(&shape, &settings, n, m);
        let largest = largest_tensor_per_replica(&shape, &settings, n, m);
        assert_eq!(largest, 72_900 * 128 * 4);
        let chunk = chunk_size(6000, per, per, largest, &res).unwrap();
        assert_eq!(chunk, (2usize << 30) / (72_900 * 128 * 4));
        assert!(chunk >= 40, "{chunk}");
        assert!(chunk * largest <= WGPU_MAX_BINDING);
        assert!(chunk * per <= res.memory_budget);
        // The same job with the default 2 GiB budget: memory, not the cap, limits it.
        let small = Resources::new(BackendKind::Wgpu, Device::flex());
        assert!(chunk_size(6000, per, per, largest, &small).unwrap() < chunk);
    }

    #[test]
    fn a_replica_above_the_binding_cap_is_a_clear_error() {
        let (shape, settings, n, m) = e2_d4();
        let mut res = Resources::new(BackendKind::Wgpu, Device::flex());
        res.max_tensor_bytes = 1 << 20;
        let largest = largest_tensor_per_replica(&shape, &settings, n, m);
        let e = chunk_size(10, 1, 1, largest, &res).unwrap_err().to_string();
        assert!(
            e.contains("binding limit") && e.contains("batch_size"),
            "{e}"
        );
    }
}
