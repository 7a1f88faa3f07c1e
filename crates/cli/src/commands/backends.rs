//! `uqbench backends`: what this build can run on.

use anyhow::Result;
use uqbench_engine::{wgpu_status, BackendKind};

/// Runs `uqbench backends`.
pub fn run() -> Result<()> {
    outln!("backends in this build (choose with --backend NAME):");
    for &kind in BackendKind::ALL {
        let status = match kind {
            BackendKind::Flex => "available: pure-Rust CPU backend (default)".to_string(),
            BackendKind::Ndarray => {
                "available: CPU backend (deprecated by burn, kept selectable)".to_string()
            }
            BackendKind::Wgpu => match wgpu_status() {
                Ok(adapter) if adapter.software => format!(
                    "Vulkan adapter {adapter}: refused unless --allow-software-gpu \
                     (use --backend flex instead)"
                ),
                Ok(adapter) => format!("available: Vulkan adapter {adapter}"),
                Err(reason) => format!(
                    "no Vulkan adapter ({reason}); install a Vulkan driver (no GPU: \
                     `apt-get install -y mesa-vulkan-drivers`) or use --backend flex"
                ),
            },
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => "compiled in: burn's CUDA backend on device 0 (needs the NVIDIA \
                                  driver; f32 matmuls may run on TF32 tensor cores)"
                .to_string(),
        };
        outln!("  {:<8} {status}", kind.name());
    }
    #[cfg(not(feature = "cuda"))]
    outln!("  cuda     not in this build (cargo build --release -p uqbench --features cuda)");
    Ok(())
}
