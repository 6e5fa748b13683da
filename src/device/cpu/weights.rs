//! Deterministic weights and inputs for the CPU and CUDA devices. A model that brings its own
//! weights (an imported ONNX model) is served with them ([`of`]); otherwise every tensor is
//! drawn from a seeded generator, uniform with variance `gain / fan_in` (gain 2
//! when a ReLU follows), which keeps activations finite through every zoo network.

use crate::graph::op::{Act, AttnMode, Op, PosEnc};
use crate::graph::{Model, Node};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub(crate) use crate::graph::weights::Weights;

fn rng_for(seed: u64, a: u64, b: u64) -> StdRng {
    StdRng::seed_from_u64(
        seed ^ a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
    )
}

fn uniform(rng: &mut StdRng, n: usize, a: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-a..a)).collect()
}

fn gain(act: Act) -> f32 {
    if matches!(act, Act::Relu | Act::Relu6) {
        2.0
    } else {
        1.0
    }
}

/// Node `n`'s weights: the model's own (an imported model's), else generated from `seed`.
pub(crate) fn of(model: &Model, n: &Node, seed: u64) -> Weights {
    match model.imported.of(n) {
        Some(w) => w.clone(),
        None => generate(model, n, seed),
    }
}

/// Generates node `n`'s weights.
pub(crate) fn generate(_model: &Model, n: &Node, seed: u64) -> Weights {
    let mut rng = rng_for(seed, n.id.0 as u64 + 1, 0x57);
    let in_feat: usize = n
        .in_shapes
        .iter()
        .map(|s| s.feat.iter().product::<usize>())
        .sum();
    let mut w = Weights::default();
    match &n.op {
        Op::Conv2d {
            out_channels,
            kernel: (kh, kw),
            groups,
            bias,
            bn,
            act,
            ..
        } => {
            let (c, _, _) = n.in_chw();
            let k = c / groups * kh * kw;
            let a = (3.0 * gain(*act) / k as f32).sqrt();
            w.w = uniform(&mut rng, k * out_channels, a);
            if *bn || *bias {
                w.shift = uniform(&mut rng, *out_channels, 0.05);
            }
            if *bn {
                w.scale = (0..*out_channels)
                    .map(|_| rng.random_range(0.8..1.2))
                    .collect();
            }
        }
        Op::Linear {
            out_features,
            bias,
            act,
            tied,
        } => {
            if tied.is_none() {
                let a = (3.0 * gain(*act) / in_feat as f32).sqrt();
                w.w = uniform(&mut rng, in_feat * out_features, a);
            }
            if *bias {
                w.bias = uniform(&mut rng, *out_features, 0.05);
            }
        }
        Op::Lstm { hidden, .. } => {
            let k = in_feat + hidden;
            let a = (1.0 / *hidden as f32).sqrt();
            w.w = uniform(&mut rng, k * 4 * hidden, a);
            w.bias = uniform(&mut rng, 4 * hidden, 0.05);
        }
        Op::Embedding {
            vocab,
            dim,
            positional,
            positions,
            token_types,
            tied,
            ..
        } => {
            // unit-scale rows (a trained table's rows have norms of order 1)
            let a = (3.0 / *dim as f32).sqrt();
            if tied.is_none() {
                w.w = uniform(&mut rng, vocab * dim, a);
            }
            if *positional == PosEnc::Learned {
                w.extra = uniform(&mut rng, positions * dim, a);
            }
            if *token_types > 0 {
                w.bias = uniform(&mut rng, *dim, a);
            }
        }
        Op::LayerNorm { .. } => {
            let d = n.out.feat[0];
            w.scale = (0..d).map(|_| rng.random_range(0.9..1.1)).collect();
            w.shift = uniform(&mut rng, d, 0.05);
        }
        Op::BatchNorm => {
            let c = n.out.feat[0];
            w.scale = (0..c).map(|_| rng.random_range(0.8..1.2)).collect();
            w.shift = uniform(&mut rng, c, 0.05);
        }
        Op::Attention {
            mode: AttnMode::Additive,
            ..
        } => {
            let d = n.in_shapes[1].feat[0];
            let v = uniform(&mut rng, d, (3.0 / d as f32).sqrt());
            let g: f32 = rng.random_range(0.5..1.5);
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
            w.w = v.iter().map(|x| g * x / norm).collect();
            w.bias = uniform(&mut rng, d, 0.05);
        }
        _ => {}
    }
    w
}

/// Fills a request's model input: token ids (integers below 2^24) or values in [-1, 1).
pub(crate) fn fill_input(out: &mut [f32], seed: u64, input: u64, node: u64, tokens: bool) {
    let mut rng = rng_for(seed, input.wrapping_add(0x1234_5678), node + 7);
    for v in out {
        *v = if tokens {
            rng.random_range(2u32..(1 << 24)) as f32
        } else {
            rng.random_range(-1.0f32..1.0)
        };
    }
}
