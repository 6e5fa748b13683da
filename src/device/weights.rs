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

/// Node `n`'s weights: the model's own (an imported model's), else generated from `seed`; a
/// node that shares another's parameters (`shares`) gets that node's.
pub(crate) fn of(model: &Model, n: &Node, seed: u64) -> Weights {
    let owner = n.shares.map_or(n, |o| model.node(o));
    match model.imported.of(owner) {
        Some(w) => w.clone(),
        None => generate(model, owner, seed),
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
        // no parameters of their own (a tied linear reads its embedding table; dot-product
        // and multi-head attention read only their inputs)
        Op::Input { .. }
        | Op::Pool { .. }
        | Op::Flatten
        | Op::Add { .. }
        | Op::Concat
        | Op::Activation { .. }
        | Op::Softmax
        | Op::Attention { .. }
        | Op::Argmax
        | Op::Take { .. } => {}
    }
    w
}

/// Fills a request's model input: token ids (integers in [2, 2^24)) or values in [-1, 1), the
/// `i`-th from a hash of (seed, input, node, i) (MurmurHash3's 32-bit finaliser, twice, keyed):
/// the same values on every device, in any order, without a generator's state to step through,
/// in 32-bit arithmetic that vectorises (a 224×224 image took 0.36 ms through `StdRng`).
pub(crate) fn fill_input(out: &mut [f32], seed: u64, input: u64, node: u64, tokens: bool) {
    fill_hashed(out, input_keys(seed, input, node), tokens, None);
}

/// [`fill_input`] for an image `[C, H, W]` stored channels-last: the values `fill_input` gives
/// in `[C, H, W]` order, written straight to their `[H][W][C]` places.
pub(crate) fn fill_input_hwc(
    out: &mut [f32],
    seed: u64,
    input: u64,
    node: u64,
    chw: (usize, usize, usize),
) {
    fill_hashed(out, input_keys(seed, input, node), false, Some(chw));
}

/// The two 32-bit keys of request `input`'s generated values at node `node` under `seed` (the
/// CUDA device's `fill_hashed` kernel takes them as they are).
pub(crate) fn input_keys(seed: u64, input: u64, node: u64) -> (u32, u32) {
    let key = seed
        ^ input
            .wrapping_add(0x1234_5678)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (node + 7).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (key as u32, (key >> 32) as u32)
}

#[inline(always)]
fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85EB_CA6B);
    h ^= h >> 13;
    h = h.wrapping_mul(0xC2B2_AE35);
    h ^ (h >> 16)
}

fn fill_hashed(
    out: &mut [f32],
    keys: (u32, u32),
    tokens: bool,
    hwc: Option<(usize, usize, usize)>,
) {
    let Some((c, h, w)) = hwc else {
        return hashed_run(out, keys, tokens, 0);
    };
    // channels-last: element `px·c + ch` holds the value of `[C, H, W]` index `ch·p + px`;
    // written in order, a run of `per` pixels at a time, from the indices of the first run
    // shifted by the run's first pixel (vectorised: a channel at a time, then spread out, took
    // 0.9 ms for a batch of 16 ImageNet images); the image's rows shared between the cores
    // (each value depends on its index alone)
    let p = h * w;
    let per = (RUN / c.max(1)).max(1);
    let mut first = [0u32; RUN];
    let wide = c > RUN;
    for (t, at) in first.iter_mut().enumerate().take(per * c) {
        *at = ((t % c) * p + t / c) as u32;
    }
    super::cpu::par::split_rows(&mut out[..p * c], w * c, p * c, |y0, rows| {
        let px0 = y0 * w;
        for (k, run) in rows.chunks_mut(per * c).enumerate() {
            let start = px0 + k * per;
            if wide {
                // more channels than a run holds: one pixel's channels, `p` apart
                for (ch, v) in run.iter_mut().enumerate() {
                    hashed_run(std::slice::from_mut(v), keys, false, ch * p + start);
                }
            } else {
                hashed_at(run, keys, &first[..run.len()], start as u32);
            }
        }
    });
}

/// Values a run of [`fill_input_hwc`] writes at once.
const RUN: usize = 256;

/// The `i`-th value of the hashed sequence keyed by `keys`: a token id or a value in [-1, 1).
#[inline(always)]
fn hashed(i: u32, (k1, k2): (u32, u32), tokens: bool) -> f32 {
    let z = fmix32(fmix32(i.wrapping_mul(0x9E37_79B9) ^ k1) ^ k2);
    if tokens {
        (2 + (z >> 8) % ((1 << 24) - 2)) as f32
    } else {
        // 24 random bits: a multiple of 2^-23 in [-1, 1), exact in f32
        (z >> 8) as f32 * (1.0 / (1u32 << 23) as f32) - 1.0
    }
}

super::cpu::par::vectorized_fn! {
    /// Values `at[t] + shift` of the hashed sequence (not token ids) into `out[t]`.
    fn hashed_at(out: &mut [f32], keys: (u32, u32), at: &[u32], shift: u32) {
        for (v, &i) in out.iter_mut().zip(at) {
            *v = hashed(i.wrapping_add(shift), keys, false);
        }
    }
}

super::cpu::par::vectorized_fn! {
    /// Values `first..first + out.len()` of the hashed sequence.
    fn hashed_run(out: &mut [f32], keys: (u32, u32), tokens: bool, first: usize) {
        for (i, v) in out.iter_mut().enumerate() {
            *v = hashed((first + i) as u32, keys, tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_filled_channels_last_holds_the_values_of_its_channels_first_fill() {
        // runs of several pixels (the last one short), one pixel's channels a run, and more
        // channels than a run holds
        for (c, h, w) in [(3, 17, 19), (256, 2, 3), (300, 3, 2), (5, 40, 41)] {
            let mut chw = vec![0.0; c * h * w];
            fill_input(&mut chw, 5, 42, 0, false);
            let mut want = vec![0.0; c * h * w];
            crate::device::cpu::hwc::to_hwc(&chw, (c, h, w), &mut want);
            let mut got = vec![0.0; c * h * w];
            fill_input_hwc(&mut got, 5, 42, 0, (c, h, w));
            assert_eq!(got, want, "{c} x {h} x {w}");
        }
        let mut chw = vec![0.0; 3 * 17 * 19];
        fill_input(&mut chw, 5, 42, 0, false);
        // values in [-1, 1), not all alike; token ids in [2, 2^24)
        assert!(chw.iter().all(|v| (-1.0..1.0).contains(v)));
        assert!(chw.windows(2).any(|p| p[0] != p[1]));
        let mut ids = vec![0.0; 1000];
        fill_input(&mut ids, 5, 42, 0, true);
        assert!(ids
            .iter()
            .all(|&v| (2.0..16_777_216.0).contains(&v) && v.fract() == 0.0));
    }
}
