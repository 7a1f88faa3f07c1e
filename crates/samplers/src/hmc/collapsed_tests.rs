//! Tests of the collapsed potential (`collapsed.rs`).

use super::*;
use uqbench_engine::cpu::simd;

/// A 2-input, 3-unit problem with targets from a fixed network plus noise (43 points: the
/// rows' padding to whole blocks is exercised).
fn problem() -> (Vec<f32>, Vec<f32>, usize) {
    let n = 43;
    let mut rng = Rng::new(7);
    // Feature-major [d, n].
    let x: Vec<f32> = (0..2 * n)
        .map(|_| rng.uniform_in(-2.0, 2.0) as f32)
        .collect();
    let y = (0..n)
        .map(|i| {
            let (a, b) = (f64::from(x[i]), f64::from(x[n + i]));
            (3.0 * a.max(0.1 * a) - 2.0 * (b - 0.5).abs() + 0.3 * rng.normal()) as f32
        })
        .collect();
    (x, y, n)
}

/// Central differences in f64 of U at the state `z`, at a point with kinks away from the
/// data's points: the analytic gradient agrees to 1e-3 relative (f32 state, h = 1e-3).
fn assert_gradient(z: &[f32]) {
    let (x, y, _) = problem();
    let mut col = Collapsed::new(2, 3, &x, &y, 0.01, 10.0, Level::Baseline);
    assert_eq!(z.len(), col.dim());
    let mut grad = vec![0.0f32; col.dim()];
    let inv_s2 = 1.0 / 0.09;
    col.potential(z, inv_s2, &mut grad);
    let mut scratch = vec![0.0f32; col.dim()];
    for i in 0..z.len() {
        let step = 1e-3f32;
        let (mut up, mut down) = (z.to_vec(), z.to_vec());
        up[i] += step;
        down[i] -= step;
        let fd = (col.potential(&up, inv_s2, &mut scratch)
            - col.potential(&down, inv_s2, &mut scratch))
            / (f64::from(up[i]) - f64::from(down[i]));
        let g = f64::from(grad[i]);
        assert!(
            (g - fd).abs() <= 1e-3 * fd.abs().max(1.0),
            "coordinate {i}: analytic {g}, central difference {fd}"
        );
    }
}

#[test]
fn the_gradient_is_the_potentials_derivative() {
    assert_gradient(&[0.8, -1.1, 0.4, 0.3, 0.9, -0.7, 0.25, -0.35, 0.6]);
}

#[test]
fn every_vector_unit_gives_the_same_bits() {
    // The products over the points run on AVX-512, AVX2 or plain lanes (`lanes64.rs`), in
    // register blocks of each unit's own size; all compute every lane's products and sums in
    // one order, so U, ∇U, the output layer's draws and a unit move's value are identical
    // (where the CPU lacks a level, `Unit::at` falls back and the comparison is with the
    // baseline itself). Run inside the dispatched copy, as the chains do.
    struct Eval(Level);
    impl simd::Op for Eval {
        type Output = (u64, Vec<u32>, Vec<u64>, u64);
        #[inline(always)]
        fn call(self, _lanes: simd::Lanes) -> Self::Output {
            let (x, y, _) = problem();
            let mut col = Collapsed::new(2, 3, &x, &y, 0.01, 10.0, self.0);
            let z: Vec<f32> = (0..col.dim()).map(|i| 0.3 * i as f32 - 1.1).collect();
            let mut grad = vec![0.0f32; col.dim()];
            let u = col.potential(&z, 1.0 / 0.09, &mut grad);
            let mut out = vec![0.0; 4];
            col.draw_output(&z, 1.0 / 0.09, &mut Rng::new(5), &mut out);
            let mut unit = col.unit_neg_log_lik(1, &[0.2, -0.4, 0.1], 1.0 / 0.09);
            col.restore_unit();
            // And through the Schur complement, after a kept proposal.
            col.begin_units(&z, 1.0 / 0.09);
            col.unit_neg_log_lik(0, &[-0.3, 0.5, 0.2], 1.0 / 0.09);
            col.keep_unit();
            unit += col.unit_neg_log_lik(2, &[0.7, 0.1, -0.6], 1.0 / 0.09);
            (
                u.to_bits(),
                grad.iter().map(|g| g.to_bits()).collect(),
                out.iter().map(|o| o.to_bits()).collect(),
                unit.to_bits(),
            )
        }
    }
    let base = simd::dispatch_at(Level::Baseline, Eval(Level::Baseline));
    for level in simd::levels_to_compare() {
        assert_eq!(simd::dispatch_at(level, Eval(level)), base, "{level:?}");
    }
}

#[test]
fn the_potential_is_the_marginal_likelihood() {
    // U − ‖θ_h‖²/(2σ_p²) against −log N(y | 0, σ²I + σ_p²ΦΦᵀ) computed directly (dense
    // N × N Cholesky), up to the θ_h-free constant ½(N log 2πσ² + P log σ_p²) − … : the
    // difference between two hidden layers is the same both ways.
    let (x, y, n) = problem();
    let (sp2, s2) = (100.0f64, 0.09f64);
    let mut col = Collapsed::new(2, 3, &x, &y, 0.01, sp2.sqrt(), Level::Baseline);
    let direct = |col: &mut Collapsed, h: &[f32]| {
        let p = 4;
        assert!(col.factor(h, 1.0 / s2));
        let mut c = nalgebra::DMatrix::<f64>::zeros(n, n);
        for i in 0..n {
            for j in 0..n {
                let dot: f64 = (0..p)
                    .map(|k| col.rows[k * col.np + i] * col.rows[k * col.np + j])
                    .sum();
                c[(i, j)] = sp2 * dot + if i == j { s2 } else { 0.0 };
            }
        }
        let yv = nalgebra::DVector::from_iterator(n, y.iter().map(|&v| f64::from(v)));
        let chol = c.cholesky().expect("positive definite");
        let quad = yv.dot(&chol.solve(&yv));
        let log_det: f64 = chol.l().diagonal().iter().map(|v| 2.0 * v.ln()).sum();
        0.5 * quad + 0.5 * log_det
    };
    let prior = |h: &[f32]| h.iter().map(|&t| f64::from(t).powi(2)).sum::<f64>() / (2.0 * sp2);
    let h1: Vec<f32> = vec![0.8, -1.1, 0.4, 0.3, 0.9, -0.7, 0.25, -0.35, 0.6];
    let h2: Vec<f32> = vec![-0.5, 0.7, 1.2, 1.3, -0.2, 0.4, -0.6, 0.1, 0.0];
    let mut g = vec![0.0f32; 9];
    let u1 = col.potential(&h1, 1.0 / s2, &mut g) - prior(&h1);
    let u2 = col.potential(&h2, 1.0 / s2, &mut g) - prior(&h2);
    let (d1, d2) = (direct(&mut col, &h1), direct(&mut col, &h2));
    assert!(
        ((u1 - u2) - (d1 - d2)).abs() < 1e-8 * d1.abs().max(1.0),
        "U difference {} against the direct {}",
        u1 - u2,
        d1 - d2
    );
}

#[test]
fn the_output_layers_draws_have_the_conditional_moments() {
    // 4 000 draws of (a, c) | θ_h: their mean within 4 standard errors of m per
    // coordinate (sd of a mean of 4 000: √(A⁻¹_jj/4000)), their variance within 15% of A⁻¹'s
    // diagonal (the sd of a sample variance of 4 000 normals is 2.2%: 15% is 6.7 of them).
    let (x, y, _) = problem();
    let mut col = Collapsed::new(2, 3, &x, &y, 0.01, 10.0, Level::Baseline);
    let h: Vec<f32> = vec![0.8, -1.1, 0.4, 0.3, 0.9, -0.7, 0.25, -0.35, 0.6];
    let inv_s2 = 1.0 / 0.09;
    let mut g = vec![0.0f32; 9];
    col.potential(&h, inv_s2, &mut g);
    let (m, a_inv) = (col.m.clone(), col.a_inv.clone());
    let mut rng = Rng::new(3);
    let (draws, p) = (4000, 4);
    let mut out = vec![0.0; p];
    let mut sum = vec![0.0; p];
    let mut sq = vec![0.0; p];
    for _ in 0..draws {
        col.draw_output(&h, inv_s2, &mut rng, &mut out)
            .expect("factors");
        for j in 0..p {
            sum[j] += out[j];
            sq[j] += (out[j] - m[j]).powi(2);
        }
    }
    for j in 0..p {
        let (mean, var) = (sum[j] / draws as f64, sq[j] / draws as f64);
        let v = a_inv[j * col.ps + j];
        assert!(
            (mean - m[j]).abs() < 4.0 * (v / draws as f64).sqrt(),
            "{j}: {mean} vs {}",
            m[j]
        );
        assert!((var / v - 1.0).abs() < 0.15, "{j}: variance {var} vs {v}");
    }
}

#[test]
fn a_units_update_is_the_whole_evaluation() {
    // The unit moves' evaluation (row j of Φᵀ and of the Gram matrix recomputed, the value
    // through A's Schur complement in unit j) against a whole evaluation of the state with
    // unit j replaced, for every unit: equal to 1e-12 relative (the Gram row is summed in
    // another order, the value computed by another route: both round at ~1e-15 here).
    // Restoring the unit gives back the state's own value; keeping it makes the proposal the
    // state, and the next proposals (through the inverse updated by blocks) again match whole
    // evaluations; the potential at a new σ² reuses the Gram matrix with the same result as a
    // fresh scratch.
    let (x, y, _) = problem();
    let z = [0.8f32, -1.1, 0.4, 0.3, 0.9, -0.7, 0.25, -0.35, 0.6];
    let inv_s2 = 1.0 / 0.09;
    let mut col = Collapsed::new(2, 3, &x, &y, 0.01, 10.0, Level::Baseline);
    let mut fresh = Collapsed::new(2, 3, &x, &y, 0.01, 10.0, Level::Baseline);
    let here = col.begin_units(&z, inv_s2);
    for j in 0..3 {
        let unit = [-0.6f32 + 0.3 * j as f32, 1.2, 0.45];
        let mut moved = z;
        for (a, &u) in unit.iter().enumerate() {
            moved[a * 3 + j] = u;
        }
        let want = fresh.neg_log_lik(&moved, inv_s2);
        let got = col.unit_neg_log_lik(j, &unit, inv_s2);
        assert!(
            !col.exact,
            "unit {j} was refactored, not scored by its Schur complement"
        );
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "unit {j}: {got} vs {want}"
        );
        col.restore_unit();
        let back = col.neg_log_lik(&z, inv_s2);
        assert!(
            (back - here).abs() <= 1e-12 * here.abs(),
            "restored {j}: {back} vs {here}"
        );
    }
    // Keeping a unit makes the proposal the state.
    let unit = [0.2f32, -0.4, 0.1];
    let kept = col.unit_neg_log_lik(1, &unit, inv_s2);
    col.keep_unit();
    let mut moved = z;
    for (a, &u) in unit.iter().enumerate() {
        moved[a * 3 + 1] = u;
    }
    assert!((fresh.neg_log_lik(&moved, inv_s2) - kept).abs() <= 1e-12 * kept.abs());
    // Two more kept proposals through the updated inverse, each against a whole evaluation.
    for (j, unit) in [(2, [-0.9f32, 0.3, 0.7]), (1, [0.5f32, 0.8, -0.2])] {
        let got = col.unit_neg_log_lik(j, &unit, inv_s2);
        assert!(!col.exact, "unit {j} was refactored");
        col.keep_unit();
        for (a, &u) in unit.iter().enumerate() {
            moved[a * 3 + j] = u;
        }
        let want = fresh.neg_log_lik(&moved, inv_s2);
        assert!(
            (got - want).abs() <= 1e-12 * want.abs(),
            "kept unit {j}: {got} vs {want}"
        );
    }
    assert!(
        (col.neg_log_lik(&moved, inv_s2) - fresh.neg_log_lik(&moved, inv_s2)).abs()
            <= 1e-12 * kept.abs()
    );
    let mut g1 = vec![0.0f32; 9];
    let mut g2 = vec![0.0f32; 9];
    let a = col.potential(&moved, 2.5, &mut g1);
    let b =
        Collapsed::new(2, 3, &x, &y, 0.01, 10.0, Level::Baseline).potential(&moved, 2.5, &mut g2);
    assert!((a - b).abs() <= 1e-12 * b.abs(), "{a} vs {b}");
    for (p, q) in g1.iter().zip(&g2) {
        assert!((p - q).abs() <= 1e-6 * (1.0 + q.abs()), "{p} vs {q}");
    }
}
