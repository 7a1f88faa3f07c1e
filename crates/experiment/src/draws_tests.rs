use super::*;
use uqbench_core::{Extra, FactorJoint};

/// Draws of a known shape: S rows, M columns, column c spread over a range of its own.
fn draws(s: usize, m: usize) -> Vec<Vec<f64>> {
    (0..s)
        .map(|r| {
            (0..m)
                .map(|c| {
                    (c as f64 - 1.5) * 3.0 + (r as f64 * 0.37 + c as f64).sin() * (1.0 + c as f64)
                })
                .collect()
        })
        .collect()
}

fn prediction(samples: Vec<Vec<f64>>) -> Prediction {
    let m = samples[0].len();
    Prediction {
        mean: vec![0.0; m],
        std: vec![1.0; m],
        family: Family::Empirical,
        samples: Some(samples),
        ..Default::default()
    }
}

#[test]
fn f32_draws_come_back_to_f32_precision() {
    let rows = draws(7, 4);
    let bytes = encode(&prediction(rows.clone()), DrawFormat::F32, false).unwrap();
    let back = decode(&bytes).unwrap();
    assert_eq!(back.header.kind, JointKind::Draws);
    let b = back.block("samples").unwrap();
    assert_eq!((b.info.rows, b.info.cols), (7, 4));
    for (k, v) in b.values.iter().enumerate() {
        let want = rows[k / 4][k % 4];
        // f32 keeps 24 significant bits: a relative error of at most 2^-24.
        assert!(
            (v - want).abs() <= want.abs() * 2f64.powi(-24),
            "{v} vs {want}"
        );
    }
}

#[test]
fn eight_bit_draws_are_within_half_a_step_of_a_254th_of_their_range() {
    let rows = draws(60, 5);
    let bytes = encode(&prediction(rows.clone()), DrawFormat::I8, false).unwrap();
    let back = decode(&bytes).unwrap();
    let b = back.block("samples").unwrap();
    let half = b.half_step.as_ref().unwrap();
    for c in 0..5 {
        let col: Vec<f64> = rows.iter().map(|r| r[c]).collect();
        let range = col.iter().cloned().fold(f64::MIN, f64::max)
            - col.iter().cloned().fold(f64::MAX, f64::min);
        // The step is (hi − lo)/254 up to the f32 rounding of the centre and the step.
        assert!(
            half[c] <= range / 508.0 * (1.0 + 1e-5) + 1e-6,
            "{} vs {}",
            half[c],
            range / 508.0
        );
        for (r, want) in col.iter().enumerate() {
            let got = b.values[r * 5 + c];
            assert!(
                (got - want).abs() <= half[c] * (1.0 + 1e-6),
                "{got} vs {want}"
            );
        }
    }
    // A column's extremes use the codes ±127: the range is spent, not wasted.
    let codes = &bytes[bytes.len() - 60 * 5..];
    assert!(codes.iter().any(|&q| q as i8 == 127) && codes.iter().any(|&q| q as i8 == -127));
    // 8 bits per value: the codes and a centre and step per input, a quarter of f32's values.
    let f32_bytes = encode(&prediction(rows), DrawFormat::F32, false).unwrap();
    assert!(bytes.len() < f32_bytes.len() / 2);
}

#[test]
fn non_finite_values_and_constant_columns_survive() {
    let mut rows = draws(4, 3);
    rows[2][1] = f64::NAN;
    for r in &mut rows {
        r[2] = 2.5;
    }
    let back = decode(&encode(&prediction(rows.clone()), DrawFormat::I8, false).unwrap()).unwrap();
    let b = back.block("samples").unwrap();
    assert!(b.values[2 * 3 + 1].is_nan());
    assert!((0..4).all(|r| b.values[r * 3 + 2] == 2.5));
    assert!((b.values[0] - rows[0][0]).abs() <= b.half_step.as_ref().unwrap()[0]);
}

#[test]
fn per_draw_and_per_input_noise_sds_are_stored_with_the_draws() {
    let rows = draws(6, 3);
    let mut out = prediction(rows);
    out.extra.noise_samples = Some(vec![0.5, 0.6, 0.7, 0.8, 0.9, 1.0]);
    out.extra.sample_noise = Some(
        (0..6)
            .map(|r| {
                (0..3)
                    .map(|c| 0.1 * (1.0 + r as f64) * (1.0 + c as f64))
                    .collect()
            })
            .collect(),
    );
    out.noise_std = Some(vec![0.3, 0.4, 0.5]);
    let back = decode(&encode(&out, DrawFormat::I8, false).unwrap()).unwrap();
    let per_draw = back.block("noise_samples").unwrap();
    assert_eq!(per_draw.info.encoding, Encoding::F32);
    assert!((per_draw.values[5] - 1.0).abs() < 1e-7);
    let noise = back.block("sample_noise").unwrap();
    assert_eq!(noise.info.encoding, Encoding::I8log);
    let want = out.extra.sample_noise.as_ref().unwrap();
    for (k, v) in noise.values.iter().enumerate() {
        let w = want[k / 3][k % 3];
        // On the log scale within half a step: a relative error within e^(h/2) − 1.
        let h = noise.half_step.as_ref().unwrap()[k % 3];
        assert!((v / w).ln().abs() <= h * (1.0 + 1e-6), "{v} vs {w}");
    }
    assert_eq!(back.block("noise_std").unwrap().values, vec![0.3, 0.4, 0.5]);
}

#[test]
fn a_gaussian_joint_stores_its_mean_and_its_factor_transposed() {
    // F [M = 3, rank = 2], row-major.
    let factor = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let out = Prediction {
        mean: vec![0.1, 0.2, 0.3],
        std: vec![1.0; 3],
        family: Family::StudentT { dof: 7.0 },
        extra: Extra::joint(Some(FactorJoint { factor, rank: 2 })),
        ..Default::default()
    };
    let back = decode(&encode(&out, DrawFormat::F32, false).unwrap()).unwrap();
    assert_eq!(back.header.kind, JointKind::Gaussian);
    assert_eq!(back.header.dof, Some(7.0));
    assert_eq!(back.block("mean").unwrap().values, vec![0.1, 0.2, 0.3]);
    let f = back.block("factor_t").unwrap();
    assert_eq!((f.info.rows, f.info.cols), (2, 3));
    assert_eq!(f.values, vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
}

#[test]
fn marginals_diverged_and_none_write_nothing() {
    let marginal = Prediction::normal(vec![0.0; 3], vec![1.0; 3], None);
    assert!(encode(&marginal, DrawFormat::I8, false).is_none());
    let mut diverged = prediction(draws(3, 2));
    diverged.diverged = true;
    assert!(encode(&diverged, DrawFormat::I8, false).is_none());
    assert!(encode(&prediction(draws(3, 2)), DrawFormat::None, false).is_none());
}

#[test]
fn a_damaged_file_is_an_error_that_says_what_is_wrong() {
    let bytes = encode(&prediction(draws(5, 4)), DrawFormat::I8, true).unwrap();
    let msg = |b: &[u8]| decode(b).unwrap_err().to_string();
    assert!(
        msg(&bytes[..bytes.len() - 3]).contains("truncated"),
        "{}",
        msg(&bytes[..bytes.len() - 3])
    );
    let mut wrong = bytes.clone();
    wrong[0] = b'X';
    assert!(msg(&wrong).contains("UQBDRAW1"));
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(msg(&longer).contains("1 bytes follow"));
    assert_eq!(decode(&bytes).unwrap().header.values, "logit");
    assert!(DrawFormat::parse("f16")
        .unwrap_err()
        .to_string()
        .contains("valid: i8"));
}
