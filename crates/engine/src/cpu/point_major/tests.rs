//! `blocked`'s tests: products, transposes and the network at every level.

use super::product::{transpose, Layout, Product};
use super::*;
use crate::cpu::simd::{dispatch_at, Level, Op};

/// Products of every shape class, as bits.
struct Products<'a> {
    cases: &'a [(usize, usize, usize, bool, bool)],
    data: &'a [f32],
}

impl Op for Products<'_> {
    type Output = Vec<Vec<u32>>;

    #[inline(always)]
    fn call(self, lanes: Lanes) -> Vec<Vec<u32>> {
        (self.cases.iter())
            .map(|&(m, n, k, rows, bias)| {
                let mut c = vec![f32::NAN; m * n];
                Product {
                    m,
                    n,
                    k,
                    a: &self.data[..m * k],
                    layout: if rows {
                        Layout::Rows(k)
                    } else {
                        Layout::Cols(m)
                    },
                    b: &self.data[500..500 + k * n],
                    bias: bias.then_some(&self.data[1000..1000 + n]),
                }
                .run(lanes, &mut c);
                c.into_iter().map(f32::to_bits).collect()
            })
            .collect()
    }
}

#[test]
fn products_add_in_the_documented_order_at_both_levels() {
    // Every C_ij must be init + A_i0·B_0j + A_i1·B_1j + … in f32, in that order, each term
    // a fused multiply-add (one rounding): the scalar loop below, bit for bit, at the
    // baseline and in AVX2 and AVX-512 registers. Shapes cover full tiles (5 rows, 16 or
    // 32 columns), every row remainder (1–4), the one-vector columns and the scalar
    // columns, both layouts of A, with and without a bias.
    let data: Vec<f32> = (0..1200)
        .map(|i| ((i as f32) * 0.731).sin() * 3.0 + ((i as f32) * 0.017).cos())
        .collect();
    let mut cases = Vec::new();
    for (m, n, k) in [
        (10, 32, 9),
        (7, 37, 4),
        (6, 61, 3),
        (1, 16, 30),
        (12, 13, 1),
        (3, 5, 11),
        (4, 8, 7),
        (6, 1, 17),
    ] {
        for rows in [true, false] {
            for bias in [false, true] {
                cases.push((m, n, k, rows, bias));
            }
        }
    }
    let want: Vec<Vec<u32>> = (cases.iter())
        .map(|&(m, n, k, rows, bias)| {
            let a = |i: usize, kk: usize| {
                if rows {
                    data[i * k + kk]
                } else {
                    data[kk * m + i]
                }
            };
            let mut c = Vec::new();
            for i in 0..m {
                for j in 0..n {
                    let mut acc = if bias { data[1000 + j] } else { 0.0f32 };
                    for kk in 0..k {
                        acc = a(i, kk).mul_add(data[500 + kk * n + j], acc);
                    }
                    c.push(acc.to_bits());
                }
            }
            c
        })
        .collect();
    for level in std::iter::once(Level::Baseline).chain(crate::cpu::simd::levels_to_compare()) {
        let got = dispatch_at(
            level,
            Products {
                cases: &cases,
                data: &data,
            },
        );
        for (case, (g, w)) in cases.iter().zip(got.iter().zip(&want)) {
            assert_eq!(g, w, "{case:?} at {level:?}");
        }
    }
}

/// Transposes of every edge case.
struct Transposes<'a>(&'a [(usize, usize)], &'a [f32]);

impl Op for Transposes<'_> {
    type Output = Vec<Vec<f32>>;

    #[inline(always)]
    fn call(self, lanes: Lanes) -> Vec<Vec<f32>> {
        (self.0.iter())
            .map(|&(rows, cols)| {
                let mut wt = vec![f32::NAN; rows * cols];
                transpose(lanes, &self.1[..rows * cols], rows, cols, &mut wt);
                wt
            })
            .collect()
    }
}

#[test]
fn transposes_move_every_value() {
    // Whole 8 × 8 blocks, edges in either direction or both, and matrices smaller than
    // a block: every value at its transposed place (NaN marks a place never written).
    let w: Vec<f32> = (0..2048).map(|i| i as f32).collect();
    let cases = [
        (8, 8),
        (16, 24),
        (19, 13),
        (3, 5),
        (9, 1),
        (1, 17),
        (32, 64),
    ];
    for level in std::iter::once(Level::Baseline).chain(crate::cpu::simd::levels_to_compare()) {
        let got = dispatch_at(level, Transposes(&cases, &w));
        for (&(rows, cols), wt) in cases.iter().zip(&got) {
            for i in 0..rows {
                for j in 0..cols {
                    assert_eq!(
                        wt[j * rows + i],
                        w[i * cols + j],
                        "{rows}×{cols} ({i}, {j})"
                    );
                }
            }
        }
    }
}

/// A forward pass, a backward pass and the input gradient, as bits.
struct Pass<'a> {
    theta: &'a [f32],
    xt: &'a [f32],
    delta: &'a [f32],
}

impl Op for Pass<'_> {
    type Output = Vec<u32>;

    #[inline(always)]
    fn call(self, lanes: Lanes) -> Vec<u32> {
        let n = self.delta.len();
        let mut net = PointMajorNet::new(vec![(2, 19), (19, 40), (40, 1)], 0.01, n, Part::Whole);
        net.set_lanes(lanes);
        let mut f = vec![0.0f32; n];
        let mut grad = vec![0.0f32; self.theta.len()];
        let mut gx = vec![0.0f32; 2 * n];
        net.forward(self.theta, self.xt, &mut f);
        net.backward(self.theta, self.xt, self.delta, &mut grad);
        net.input_gradient(self.theta, &mut gx);
        (f.iter().chain(&grad).chain(&gx))
            .map(|v| v.to_bits())
            .collect()
    }
}

#[test]
fn the_net_gives_the_same_bits_at_both_levels_and_its_gradient_is_right() {
    // The baseline, AVX2 and AVX-512 copies agree bit for bit (on a CPU without AVX-512
    // its level runs AVX2); and the gradient of
    // Σ_p δ_p·f(x_p) matches central differences of that sum.
    let n = 23;
    let dim = 2 * 19 + 19 * 40 + 40 + 19 + 40 + 1;
    let theta: Vec<f32> = (0..dim).map(|i| ((i as f32) * 0.377).sin() * 0.4).collect();
    let xt: Vec<f32> = (0..2 * n).map(|i| ((i as f32) * 1.91).cos()).collect();
    let delta: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.61).sin()).collect();
    let run = |level| {
        dispatch_at(
            level,
            Pass {
                theta: &theta,
                xt: &xt,
                delta: &delta,
            },
        )
    };
    let base = run(Level::Baseline);
    for level in crate::cpu::simd::levels_to_compare() {
        assert_eq!(base, run(level), "{level:?}");
    }
    let grad: Vec<f32> = base[n..n + dim]
        .iter()
        .map(|&b| f32::from_bits(b))
        .collect();
    // Σ_p δ_p·f(x_p) (accumulated in f64) and the signs of every hidden pre-activation.
    let objective = |th: &[f32]| {
        let mut net = PointMajorNet::new(vec![(2, 19), (19, 40), (40, 1)], 0.01, n, Part::Whole);
        let mut f = vec![0.0f32; n];
        net.forward(th, &xt, &mut f);
        let value = (f.iter().zip(&delta))
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum::<f64>();
        let signs: Vec<bool> = net.pre[..2].iter().flatten().map(|&z| z > 0.0).collect();
        (value, signs)
    };
    let (_, signs) = objective(&theta);
    let mut checked = 0;
    for i in (0..dim).step_by(7) {
        // With the activation pattern fixed, f is affine in any one parameter, so a
        // central difference is exact but for f32 rounding: the values (|Σ| ≲ 10, f32
        // relative 6e-8 per operation over ≲ 100 operations) err by ≲ 1e-4 and the
        // difference quotient by ≲ 1e-2; a parameter whose step crosses a kink is skipped.
        let h = 0.05f32;
        let (mut up, mut down) = (theta.clone(), theta.clone());
        up[i] += h;
        down[i] -= h;
        let ((fu, su), (fl, sl)) = (objective(&up), objective(&down));
        if su != signs || sl != signs {
            continue;
        }
        checked += 1;
        let fd = (fu - fl) / (2.0 * f64::from(h));
        let g = f64::from(grad[i]);
        assert!(
            (fd - g).abs() <= 1e-2 * (1.0 + g.abs()),
            "parameter {i}: {g} vs {fd}"
        );
    }
    // Most steps keep the pattern; a test that skipped them all would test nothing.
    assert!(checked >= dim / 14, "only {checked} parameters checked");
}
