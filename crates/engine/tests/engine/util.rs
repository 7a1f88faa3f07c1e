//! What the tests of this crate share.

/// Whether the wgpu tests are left out on purpose (`UQBENCH_SKIP_WGPU=1`, for a machine
/// without Vulkan; CI never sets it, so there a missing adapter fails the tests).
pub fn skip_wgpu() -> bool {
    std::env::var("UQBENCH_SKIP_WGPU").is_ok_and(|v| v == "1")
}
