//! The training objective and its hand-written gradient for host weights and fixed noise,
//! checked against finite differences (test only).

use std::sync::Arc;

use burn::tensor::Tensor;

use super::head::{BernoulliLogit, GaussianNll, HalfMse, Head};
use super::memory::Resources;
use super::network::{download, upload, Network, State};
use crate::mlp::{HostWeights, MlpShape};
use crate::stochastic::StochasticLayer;

/// What [`objective_and_gradient`] evaluates: the training objective of a step with fixed
/// noise.
#[derive(Debug, Clone)]
struct Probe<'a> {
    /// The dropout layer, if any.
    dropout: Option<&'a Arc<dyn StochasticLayer>>,
    /// The head.
    head: &'a Arc<dyn Head>,
    /// λ.
    weight_decay: f64,
    /// The stochastic layer's learnable scalar per replica (θ or log α), its only slot.
    param: Option<&'a [f32]>,
    /// The noise of the pass, as [`StochasticLayer::draw`] lays it out.
    noise: Option<&'a [f32]>,
}

/// The training objective of every replica and its gradients with respect to the weights
/// (with λ·W added, as Adam's step adds it), biases and the dropout layer's scalar, for host
/// weights, inputs `x` (`[N, d]`), per-replica targets `y` (`[R, N]`) and fixed noise: exactly
/// what a training step differentiates.
fn objective_and_gradient(
    res: &Resources,
    shape: &MlpShape,
    weights: &HostWeights,
    x: &[f32],
    y: &[f32],
    probe: &Probe<'_>,
) -> (Vec<f64>, HostWeights, Option<Vec<f32>>) {
    let r = weights.replicas;
    let d = shape.d_in;
    let n = x.len() / d;
    let dev = &res.device;
    let k = *shape.hidden.last().unwrap_or(&d);
    let mut s = State::new(weights, &shape.layers(), &[], false, dev);
    s.params = (probe.param.iter())
        .map(|p| upload(p.to_vec(), [r, 1, 1], dev))
        .collect();
    let net = Network {
        path: res.kernel_path(),
        slope: shape.negative_slope,
        dropout: probe.dropout.cloned(),
        head: probe.head.as_ref(),
    };
    let noise = (probe.noise.zip(probe.dropout))
        .map(|(v, layer)| upload(v.to_vec(), [r, n, layer.noise_width(k, shape.d_out)], dev));
    let yt: Tensor<3> = upload(y.to_vec(), [r, n, 1], dev);
    let (out, cache) = net.forward(&s, upload(x.to_vec(), [1, n, d], dev), noise);
    let delta = net.head.delta(out.clone(), &yt);
    let objective = net.objective(&s, out, &yt, probe.weight_decay);
    let (g, _) = net.backward(&s, &cache, delta, false);
    let grads =
        g.w.into_iter()
            .zip(g.b)
            .zip(&s.w)
            .map(|((gw, gb), w)| {
                (
                    download(gw + w.clone().mul_scalar(probe.weight_decay)),
                    download(gb),
                )
            })
            .collect();
    (
        download(objective).into_iter().map(f64::from).collect(),
        HostWeights {
            replicas: r,
            layers: grads,
        },
        g.params.into_iter().next().map(download),
    )
}

#[cfg(test)]
mod tests {
    use uqbench_anchor::Rng;

    use crate::device_rng::DeviceRng;
    use crate::stochastic::{Bernoulli, Concrete, Variational};

    use super::*;
    use crate::backend::{open_device, BackendKind};

    #[test]
    fn backward_passes_match_finite_differences() {
        // Central differences of the f32 objective with step h = 1e-3: rounding contributes about
        // 1e-7/h = 1e-4 absolute, truncation O(h²); kinks of the leaky ReLU are avoided by the
        // tiny random network (no pre-activation lies within h of 0 here). Checked for the plain
        // network, each dropout layer (with fixed noise, including the learnable rate and the
        // regulariser), the heteroscedastic head and the Bernoulli (logit) head on 0/1 labels.
        let base = MlpShape {
            d_in: 2,
            hidden: vec![4, 3],
            d_out: 1,
            negative_slope: 0.1,
        };
        let mut rng = Rng::new(3);
        let x: Vec<f32> = (0..10).map(|_| rng.uniform_in(-2.0, 2.0) as f32).collect();
        let y: Vec<f32> = (0..10).map(|_| rng.normal() as f32).collect(); // 2 replicas × 5 points
        let concrete: Arc<dyn StochasticLayer> = Arc::new(Concrete {
            init_p: 0.2,
            temperature: 0.1,
            weight_reg: 0.05,
            dropout_reg: 0.4,
        });
        let variational: Arc<dyn StochasticLayer> = Arc::new(Variational {
            init_alpha: 0.3,
            kl_weight: 0.2,
        });
        let bernoulli: Arc<dyn StochasticLayer> = Arc::new(Bernoulli { p: 0.3 });
        let labels: Vec<f32> = y.iter().map(|&v| if v > 0.0 { 1.0 } else { 0.0 }).collect();
        type Layer = Arc<dyn StochasticLayer>;
        let (mse, nll, logit): (Arc<dyn Head>, Arc<dyn Head>, Arc<dyn Head>) = (
            Arc::new(HalfMse),
            Arc::new(GaussianNll),
            Arc::new(BernoulliLogit),
        );
        // (The heads of methods, β-NLL, evidential and pinball, are held to their own
        // gradients by `head::check` in their methods' tests: the network's backward is
        // the same for every head, given δ at the outputs.)
        let cases: Vec<(&str, Option<&Layer>, &Arc<dyn Head>)> = vec![
            ("plain", None, &mse),
            ("bernoulli", Some(&bernoulli), &mse),
            ("concrete", Some(&concrete), &mse),
            ("variational", Some(&variational), &mse),
            ("heteroscedastic concrete", Some(&concrete), &nll),
            ("logit head", None, &logit),
            ("logit head, concrete", Some(&concrete), &logit),
        ];
        for (name, dropout, head) in cases {
            let y = if name.starts_with("logit") {
                &labels
            } else {
                &y
            };
            let shape = MlpShape {
                d_out: head.outputs(),
                ..base.clone()
            };
            let mut weights = crate::mlp::xavier_init(&shape, &[7, 8]);
            for (_, b) in &mut weights.layers {
                for v in b.iter_mut() {
                    *v = rng.uniform_in(-0.5, 0.5) as f32;
                }
            }
            let device = open_device(BackendKind::Flex, true).unwrap();
            let streams = DeviceRng::new(&[11, 12], &[0, 1], 1, &device);
            let noise: Option<Vec<f32>> = dropout.map(|d| {
                d.draw(&streams, 0, 5, d.noise_width(3, shape.d_out))
                    .into_data()
                    .try_into_vec_as::<f32>()
                    .unwrap()
            });
            let param: Option<Vec<f32>> = match dropout.and_then(|d| d.rate_name()) {
                Some("learned_p") => Some(vec![-1.2, -0.7]),
                Some(_) => Some(vec![-1.0, -0.3]),
                None => None,
            };
            for backend in [BackendKind::Flex, BackendKind::Ndarray] {
                let res = Resources::new(backend, open_device(backend, true).unwrap());
                let noise = noise.as_deref();
                fn make<'a>(
                    dropout: Option<&'a Arc<dyn StochasticLayer>>,
                    head: &'a Arc<dyn Head>,
                    param: Option<&'a [f32]>,
                    noise: Option<&'a [f32]>,
                ) -> Probe<'a> {
                    Probe {
                        dropout,
                        head,
                        weight_decay: 0.3,
                        param,
                        noise,
                    }
                }
                let (_, grad, gparam) = objective_and_gradient(
                    &res,
                    &shape,
                    &weights,
                    &x,
                    y,
                    &make(dropout, head, param.as_deref(), noise),
                );
                let h = 1e-3f32;
                let check = |fd: f64, g: f64, what: String| {
                    assert!(
                        (fd - g).abs() < 2e-3 + 1e-2 * g.abs(),
                        "{name} on {backend}, {what}: analytic {g}, numeric {fd}"
                    );
                };
                for l in 0..weights.layers.len() {
                    for which in 0..2 {
                        let len = if which == 0 {
                            weights.layers[l].0.len()
                        } else {
                            weights.layers[l].1.len()
                        };
                        for k in 0..len {
                            let mut plus = weights.clone();
                            let mut minus = weights.clone();
                            let (p, m) = if which == 0 {
                                (&mut plus.layers[l].0[k], &mut minus.layers[l].0[k])
                            } else {
                                (&mut plus.layers[l].1[k], &mut minus.layers[l].1[k])
                            };
                            *p += h;
                            *m -= h;
                            let (fp, _, _) = objective_and_gradient(
                                &res,
                                &shape,
                                &plus,
                                &x,
                                y,
                                &make(dropout, head, param.as_deref(), noise),
                            );
                            let (fm, _, _) = objective_and_gradient(
                                &res,
                                &shape,
                                &minus,
                                &x,
                                y,
                                &make(dropout, head, param.as_deref(), noise),
                            );
                            let r = k / (len / 2); // parameter k belongs to replica k / (len / 2)
                            let fd = (fp[r] - fm[r]) / (2.0 * f64::from(h));
                            let g = f64::from(if which == 0 {
                                grad.layers[l].0[k]
                            } else {
                                grad.layers[l].1[k]
                            });
                            check(
                                fd,
                                g,
                                format!(
                                    "layer {l} {} {k}",
                                    if which == 0 { "weight" } else { "bias" }
                                ),
                            );
                        }
                    }
                }
                assert_eq!(
                    param.is_some(),
                    gparam.is_some(),
                    "{name}: a learnable rate has a gradient"
                );
                if let (Some(param), Some(gparam)) = (&param, &gparam) {
                    for r in 0..2 {
                        let mut plus = param.clone();
                        let mut minus = param.clone();
                        plus[r] += h;
                        minus[r] -= h;
                        let (fp, _, _) = objective_and_gradient(
                            &res,
                            &shape,
                            &weights,
                            &x,
                            y,
                            &make(dropout, head, Some(&plus), noise),
                        );
                        let (fm, _, _) = objective_and_gradient(
                            &res,
                            &shape,
                            &weights,
                            &x,
                            y,
                            &make(dropout, head, Some(&minus), noise),
                        );
                        check(
                            (fp[r] - fm[r]) / (2.0 * f64::from(h)),
                            f64::from(gparam[r]),
                            format!("rate parameter of replica {r}"),
                        );
                    }
                }
            }
        }
    }
}
