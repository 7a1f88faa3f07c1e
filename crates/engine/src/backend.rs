//! Backend selection at run time: `flex` (default, the fastest CPU backend measured here),
//! `ndarray` (deprecated by burn, kept selectable) and `wgpu` (GPU, or lavapipe in CI).

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use burn::tensor::wgpu::WgpuBackend;
use burn::tensor::Device;

use uqbench_core::MethodError;

/// The backends this build has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BackendKind {
    /// burn's flex: pure-Rust CPU backend.
    #[default]
    Flex,
    /// burn's ndarray: CPU backend (deprecated upstream).
    Ndarray,
    /// burn's wgpu with the Vulkan API pinned.
    Wgpu,
    /// burn's CUDA backend (cargo feature `cuda`).
    #[cfg(feature = "cuda")]
    Cuda,
}

impl BackendKind {
    /// Every backend compiled into this build.
    pub const ALL: &'static [BackendKind] = &[
        BackendKind::Flex,
        BackendKind::Ndarray,
        BackendKind::Wgpu,
        #[cfg(feature = "cuda")]
        BackendKind::Cuda,
    ];

    /// Whether the backend runs on a GPU (one worker thread, chunks from the memory plan).
    pub fn is_gpu(self) -> bool {
        !matches!(self, BackendKind::Flex | BackendKind::Ndarray)
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Flex => "flex",
            BackendKind::Ndarray => "ndarray",
            BackendKind::Wgpu => "wgpu",
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => "cuda",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = MethodError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "flex" => Ok(BackendKind::Flex),
            "ndarray" => Ok(BackendKind::Ndarray),
            "wgpu" => Ok(BackendKind::Wgpu),
            #[cfg(feature = "cuda")]
            "cuda" => Ok(BackendKind::Cuda),
            #[cfg(not(feature = "cuda"))]
            "cuda" => Err(MethodError::BackendUnavailable {
                backend: "cuda".into(),
                reason: "this build has no CUDA backend".into(),
                hint: "build with `cargo build --release -p uqbench --features cuda`, or use \
                       --backend wgpu (any GPU with a Vulkan driver) or flex"
                    .into(),
            }),
            _ => Err(MethodError::UnknownBackend(s.to_string())),
        }
    }
}

/// The wgpu device, initialised at most once per process (burn allows one `init` per
/// selector), or the reason it could not be.
fn wgpu_device() -> &'static Result<Device, String> {
    static WGPU: OnceLock<Result<Device, String>> = OnceLock::new();
    WGPU.get_or_init(|| {
        // Pinning Vulkan matters: with automatic API selection and no Vulkan driver, wgpu
        // falls back to OpenGL, where training later panics (no f32 atomics).
        Device::wgpu_options()
            .graphics_api(WgpuBackend::Vulkan)
            .init()
            .map_err(|e| e.to_string())
    })
}

/// The wgpu adapter a device runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WgpuAdapter {
    /// The adapter's name, as the driver reports it.
    pub name: String,
    /// A software rasterizer on the CPU (lavapipe/llvmpipe, SwiftShader, WARP) rather than a
    /// GPU: no physical device behind it, or a known software driver's name.
    pub software: bool,
}

impl fmt::Display for WgpuAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` ({})",
            self.name,
            if self.software {
                "software rasterizer on the CPU"
            } else {
                "GPU"
            }
        )
    }
}

/// Whether a name is a known software Vulkan/D3D driver's.
fn software_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "llvmpipe",
        "lavapipe",
        "swiftshader",
        "softpipe",
        "microsoft basic render",
    ]
    .iter()
    .any(|s| n.contains(s))
}

/// Whether a wgpu (Vulkan) adapter is present: which, or why not.
pub fn wgpu_status() -> Result<WgpuAdapter, String> {
    match wgpu_device() {
        Ok(device) => Ok(match device.identity() {
            Some(id) => WgpuAdapter {
                software: id.physical.is_none() || software_name(&id.name),
                name: id.name.to_string(),
            },
            None => WgpuAdapter {
                name: "unnamed adapter".to_string(),
                software: false,
            },
        }),
        Err(e) => Err(e.clone()),
    }
}

/// Opens the (non-autodiff) device of a backend. On wgpu, a software adapter (lavapipe,
/// llvmpipe, SwiftShader: hundreds of times slower than a GPU and far slower than `flex`) is an
/// error unless `allow_software` (the tests and CI use lavapipe on purpose).
pub fn open_device(kind: BackendKind, allow_software: bool) -> Result<Device, MethodError> {
    match kind {
        BackendKind::Flex => Ok(Device::flex()),
        #[allow(deprecated)]
        BackendKind::Ndarray => Ok(Device::ndarray()),
        BackendKind::Wgpu => {
            let device =
                wgpu_device()
                    .clone()
                    .map_err(|reason| {
                        MethodError::BackendUnavailable {
                    backend: "wgpu".into(),
                    reason: format!("no Vulkan adapter could be opened ({reason})"),
                    hint:
                        "Install a Vulkan driver (Debian/Ubuntu without a GPU: `apt-get install -y \
                   mesa-vulkan-drivers` for the lavapipe software driver), or run on the CPU \
                   with `--backend flex`"
                            .into(),
                }
                    })?;
            let adapter = wgpu_status().map_err(|reason| MethodError::BackendUnavailable {
                backend: "wgpu".into(),
                reason,
                hint: "run on the CPU with `--backend flex`".into(),
            })?;
            if adapter.software && !allow_software {
                return Err(MethodError::BackendUnavailable {
                    backend: "wgpu".into(),
                    reason: format!(
                        "wgpu's Vulkan adapter is {adapter}, not a GPU (is the GPU's Vulkan \
                         driver installed, e.g. NVIDIA's in a container?)"
                    ),
                    hint: "Run on the CPU with `--backend flex` (much faster than a software \
                           adapter), or pass `--allow-software-gpu` (or set \
                           UQBENCH_ALLOW_SOFTWARE_GPU=1) to use it anyway, as the tests do"
                        .into(),
                });
            }
            Ok(device)
        }
        // Device 0. burn opens it lazily; without the NVIDIA driver the first operation fails.
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => Ok(Device::cuda(0)),
    }
}
