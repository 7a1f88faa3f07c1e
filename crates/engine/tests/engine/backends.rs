//! Every backend of the build computes, and computes the same thing.
//!
//! The wgpu test needs a Vulkan adapter (lavapipe in CI). It fails without one, because a
//! skipped GPU test proves nothing; set UQBENCH_SKIP_WGPU=1 to leave it out deliberately on a
//! machine without Vulkan.

use burn::tensor::{Tensor, TensorData};
use uqbench_engine::{open_device, BackendKind};

/// A batched matmul, the core operation of batched training, with a leaky ReLU.
fn compute(kind: BackendKind) -> Vec<f32> {
    // CI's adapter is lavapipe, a software rasterizer: allowed here on purpose.
    let device = open_device(kind, true).unwrap_or_else(|e| panic!("{e}"));
    let a: Vec<f32> = (0..2 * 3 * 4).map(|i| (i as f32 * 0.37).sin()).collect();
    let b: Vec<f32> = (0..2 * 4 * 5).map(|i| (i as f32 * 0.11).cos()).collect();
    let a = Tensor::<3>::from_data(TensorData::new(a, [2, 3, 4]), &device);
    let b = Tensor::<3>::from_data(TensorData::new(b, [2, 4, 5]), &device);
    let c = burn::tensor::activation::leaky_relu(a.matmul(b), 0.01);
    c.into_data().try_to_vec::<f32>().unwrap()
}

fn reference() -> Vec<f32> {
    // The same computation on the host in f64.
    let a: Vec<f64> = (0..24)
        .map(|i| (f64::from(i as f32 * 0.37f32)).sin())
        .collect();
    let b: Vec<f64> = (0..40)
        .map(|i| (f64::from(i as f32 * 0.11f32)).cos())
        .collect();
    let mut out = Vec::new();
    for r in 0..2 {
        for i in 0..3 {
            for j in 0..5 {
                let s: f64 = (0..4)
                    .map(|k| a[r * 12 + i * 4 + k] * b[r * 20 + k * 5 + j])
                    .sum();
                out.push((if s > 0.0 { s } else { 0.01 * s }) as f32);
            }
        }
    }
    out
}

fn assert_close(kind: BackendKind) {
    let got = compute(kind);
    let want = reference();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{kind}: {g} vs {w}");
    }
}

#[test]
fn flex_computes() {
    assert_close(BackendKind::Flex);
}

#[test]
fn ndarray_computes() {
    assert_close(BackendKind::Ndarray);
}

#[test]
fn wgpu_computes_on_a_vulkan_adapter() {
    if crate::util::skip_wgpu() {
        eprintln!("UQBENCH_SKIP_WGPU=1: wgpu left out on purpose");
        return;
    }
    assert_close(BackendKind::Wgpu);
}

#[test]
fn unknown_backend_names_the_valid_ones() {
    let err = "cuda".parse::<BackendKind>().unwrap_err().to_string();
    assert!(
        err.contains("cuda") && err.contains("flex") && err.contains("wgpu"),
        "{err}"
    );
    assert_eq!("WGPU".parse::<BackendKind>().unwrap(), BackendKind::Wgpu);
}
