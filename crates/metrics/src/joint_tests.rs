use super::*;

/// Standard normals from a fixed xorshift stream (Box–Muller): the tests' own draws.
fn normals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let (u, v) = (next(), next());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        })
        .collect()
}

fn gaussian(mean: &[f64], factor: &[f64], rank: usize, noise_var: &[f64]) -> Joint {
    Joint::Gaussian {
        mean: mean.to_vec(),
        factor: factor.to_vec(),
        rank,
        noise_var: noise_var.to_vec(),
    }
}

#[test]
fn one_dimensional_gaussian_kl_is_the_textbook_formula() {
    // KL(N(0, 2) ‖ N(1, 3)) = ½[2/3 + 1/3 − 1 + ln(3/2)].
    let p = gaussian(&[0.0], &[1.0], 1, &[1.0]);
    let q = gaussian(&[1.0], &[], 0, &[3.0]);
    let want = 0.5 * (2.0 / 3.0 + 1.0 / 3.0 - 1.0 + (1.5f64).ln());
    assert!((kl_gaussian(&p, &q).unwrap() - want).abs() < 1e-14);
    assert_eq!(kl(&p, &p, &[], &[]).unwrap().value, 0.0);
}

#[test]
fn correlated_against_independent_loses_the_mutual_information() {
    // P: y₁ = y₂ = f + noise with f ~ N(0, 1), noise var 1: corr ½. Q: the product of P's
    // marginals. KL(P ‖ Q) is the mutual information −½ ln(1 − ρ²) = −½ ln(3/4).
    let p = gaussian(&[0.0, 0.0], &[1.0, 1.0], 1, &[1.0, 1.0]);
    let q = gaussian(&[0.0, 0.0], &[], 0, &[2.0, 2.0]);
    let want = -0.5 * (0.75f64).ln();
    assert!((kl_gaussian(&p, &q).unwrap() - want).abs() < 1e-14);
    // The same by Monte Carlo against Q written as independent marginals: within 4.5
    // standard errors (|N(0,1)| > 4.5 has probability 7e-6).
    let q_marg = Joint::Independent(vec![
        Marginal {
            mean: 0.0,
            scale: 2f64.sqrt(),
            dof: None
        };
        2
    ]);
    let e = kl(&p, &q_marg, &normals(2 * 40_000, 7), &[]).unwrap();
    assert!(e.stderr > 0.0 && e.stderr < 0.01, "{e:?}");
    assert!(
        (e.value - want).abs() < 4.5 * e.stderr,
        "{e:?} against {want}"
    );
}

#[test]
fn a_one_component_mixture_is_its_gaussian() {
    let y = [0.3, -1.2, 2.0];
    let mix = Joint::Mixture {
        draws: vec![0.1, 0.2, 0.3],
        sd: vec![0.5, 1.0, 2.0],
        tau: 3,
    };
    let g = gaussian(&[0.1, 0.2, 0.3], &[], 0, &[0.25, 1.0, 4.0]);
    let ind = Joint::Independent(
        [(0.1, 0.5), (0.2, 1.0), (0.3, 2.0)]
            .map(|(mean, scale)| Marginal {
                mean,
                scale,
                dof: None,
            })
            .to_vec(),
    );
    let (a, b, c) = (
        ln_pdf(&mix, &y).unwrap(),
        ln_pdf(&g, &y).unwrap(),
        ln_pdf(&ind, &y).unwrap(),
    );
    assert!(
        (a - b).abs() < 1e-12 && (b - c).abs() < 1e-12,
        "{a} {b} {c}"
    );
    // Two equal components: the same density.
    let twice = Joint::Mixture {
        draws: [0.1, 0.2, 0.3, 0.1, 0.2, 0.3].to_vec(),
        sd: [0.5, 1.0, 2.0, 0.5, 1.0, 2.0].to_vec(),
        tau: 3,
    };
    assert!((ln_pdf(&twice, &y).unwrap() - a).abs() < 1e-12);
}

#[test]
fn a_one_dimensional_t_is_the_marginal_t() {
    let t = Joint::StudentT {
        mean: vec![1.0],
        factor: vec![0.6],
        rank: 1,
        noise_var: vec![0.64],
        dof: 5.0,
    };
    let m = Marginal {
        mean: 1.0,
        scale: 1.0,
        dof: Some(5.0),
    };
    for y in [-3.0, 0.0, 1.0, 2.5] {
        assert!((ln_pdf(&t, &[y]).unwrap() - ln_marginal(y, &m)).abs() < 1e-12);
    }
}

#[test]
fn a_t_reference_is_sampled_with_its_chi_square() {
    // KL(t_ν ‖ N(0, ν/(ν−2))) in one dimension, against the same computed by quadrature.
    let nu = 6.0;
    let p = Joint::StudentT {
        mean: vec![0.0],
        factor: vec![],
        rank: 0,
        noise_var: vec![1.0],
        dof: nu,
    };
    let var = nu / (nu - 2.0);
    let q = Joint::Independent(vec![Marginal {
        mean: 0.0,
        scale: var.sqrt(),
        dof: None,
    }]);
    let pm = Marginal {
        mean: 0.0,
        scale: 1.0,
        dof: Some(nu),
    };
    let qm = Marginal {
        mean: 0.0,
        scale: var.sqrt(),
        dof: None,
    };
    let h = 1e-3;
    let quad: f64 = (-60_000..=60_000)
        .map(|k| {
            let y = k as f64 * h;
            let lp = ln_marginal(y, &pm);
            lp.exp() * (lp - ln_marginal(y, &qm)) * h
        })
        .sum();
    let s = 60_000;
    // χ²_ν = Σ of ν squared standard normals.
    let z = normals(s * (1 + nu as usize), 11);
    let chi2: Vec<f64> = z[s..]
        .chunks_exact(nu as usize)
        .map(|c| c.iter().map(|v| v * v).sum())
        .collect();
    let e = kl(&p, &q, &z[..s], &chi2).unwrap();
    assert!(
        (e.value - quad).abs() < 4.5 * e.stderr,
        "{e:?} against {quad}"
    );
}

#[test]
fn bernoulli_enumeration_is_the_sum_for_a_product_and_monte_carlo_agrees() {
    let p = [0.2, 0.7, 0.5];
    let q = [0.3, 0.6, 0.4];
    let kl1 = |a: f64, b: f64| a * (a / b).ln() + (1.0 - a) * ((1.0 - a) / (1.0 - b)).ln();
    let sum: f64 = p.iter().zip(&q).map(|(&a, &b)| kl1(a, b)).sum();
    let exact = kl_bernoulli(&p, &q, &[]).unwrap();
    assert!((exact.value - sum).abs() < 1e-12 && exact.stderr == 0.0);
    // A mixture at τ = 13 (beyond enumeration): MC, checked against the enumeration of the
    // same 13 labels computed here directly.
    let p13: Vec<f64> = (0..13).map(|i| 0.1 + 0.06 * i as f64).collect();
    let q13: Vec<f64> = (0..26).map(|i| 0.05 + 0.035 * i as f64).collect();
    let mut direct = 0.0;
    for labels in 0u32..(1 << 13) {
        let bits = |i: usize| labels >> i & 1 == 1;
        let lp = ln_bernoulli(&p13, bits);
        let lq = log_mean_exp(&[
            ln_bernoulli(&q13[..13], bits),
            ln_bernoulli(&q13[13..], bits),
        ]);
        direct += lp.exp() * (lp - lq);
    }
    let u: Vec<f64> = normals(13 * 20_000, 3)
        .iter()
        .map(|z| 0.5 * (1.0 + statrs::function::erf::erf(z / 2f64.sqrt())))
        .collect();
    let e = kl_bernoulli(&p13, &q13, &u).unwrap();
    assert!(
        e.stderr > 0.0 && (e.value - direct).abs() < 4.5 * e.stderr,
        "{e:?} against {direct}"
    );
}

#[test]
fn bad_joints_are_clear_errors() {
    let p = gaussian(&[0.0, 0.0], &[1.0, 1.0], 1, &[0.0, 0.0]);
    let q = gaussian(&[0.0, 0.0], &[], 0, &[1.0, 1.0]);
    let e = kl_gaussian(&p, &q).unwrap_err().to_string();
    assert!(e.contains("positive definite"), "{e}");
    let short = gaussian(&[0.0], &[], 0, &[1.0]);
    assert!(kl(&q, &short, &[0.0], &[])
        .unwrap_err()
        .to_string()
        .contains("τ"));
    let mix = Joint::Mixture {
        draws: vec![0.0, 1.0],
        sd: vec![1.0, -1.0],
        tau: 2,
    };
    assert!(kl(&q, &mix, &[0.0, 0.0], &[])
        .unwrap_err()
        .to_string()
        .contains("-1"));
    assert!(kl_bernoulli(&[1.5], &[0.5], &[])
        .unwrap_err()
        .to_string()
        .contains("1.5"));
}
