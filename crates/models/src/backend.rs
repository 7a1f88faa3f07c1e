//! Backend selection at run time: `flex` (default, the fastest CPU backend measured here),
//! `ndarray` (deprecated by burn, kept selectable) and `wgpu` (GPU, or lavapipe in CI).

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use burn::tensor::wgpu::WgpuBackend;
use burn::tensor::Device;

use crate::error::ModelError;

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
}

impl BackendKind {
    /// Every backend compiled into this build.
    pub const ALL: [BackendKind; 3] = [BackendKind::Flex, BackendKind::Ndarray, BackendKind::Wgpu];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Flex => "flex",
            BackendKind::Ndarray => "ndarray",
            BackendKind::Wgpu => "wgpu",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "flex" => Ok(BackendKind::Flex),
            "ndarray" => Ok(BackendKind::Ndarray),
            "wgpu" => Ok(BackendKind::Wgpu),
            _ => Err(ModelError::UnknownBackend(s.to_string())),
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

/// Whether a wgpu (Vulkan) adapter is present: its name, or why not.
pub fn wgpu_status() -> Result<String, String> {
    match wgpu_device() {
        Ok(device) => Ok(device
            .identity()
            .map(|id| id.name.to_string())
            .unwrap_or_else(|| "unnamed adapter".to_string())),
        Err(e) => Err(e.clone()),
    }
}

/// Opens the (non-autodiff) device of a backend.
pub fn open_device(kind: BackendKind) -> Result<Device, ModelError> {
    match kind {
        BackendKind::Flex => Ok(Device::flex()),
        #[allow(deprecated)]
        BackendKind::Ndarray => Ok(Device::ndarray()),
        BackendKind::Wgpu => {
            wgpu_device()
                .clone()
                .map_err(|reason| ModelError::BackendUnavailable {
                    backend: "wgpu".into(),
                    reason: format!("no Vulkan adapter could be opened ({reason})"),
                    hint:
                        "Install a Vulkan driver (Debian/Ubuntu without a GPU: `apt-get install -y \
                   mesa-vulkan-drivers` for the lavapipe software driver), or run on the CPU \
                   with `--backend flex`"
                            .into(),
                })
        }
    }
}
