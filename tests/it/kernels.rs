//! Every CPU kernel against a plain reference implementation on random, never all-zero inputs.

use lazybatch::device::cpu::hwc;
use lazybatch::device::cpu::kernels::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn rnd(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    assert!(
        a.iter().any(|v| *v != 0.0),
        "{what}: all-zero output proves nothing"
    );
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

fn naive_mm(
    m: usize,
    n: usize,
    k: usize,
    a: impl Fn(usize, usize) -> f32,
    b: impl Fn(usize, usize) -> f32,
) -> Vec<f32> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|t| a(i, t) as f64 * b(t, j) as f64).sum::<f64>() as f32;
        }
    }
    c
}

#[test]
fn gemm_matches_the_naive_product_with_any_strides() {
    let mut rng = StdRng::seed_from_u64(1);
    for &(m, n, k) in &[
        (1, 7, 5),
        (3, 1, 9),
        (17, 33, 65),
        (64, 130, 300),
        (300, 64, 147),
    ] {
        let a = rnd(&mut rng, m * k);
        let b = rnd(&mut rng, k * n);
        let mut c = vec![0.0; m * n];
        matmul(m, n, k, &a, &b, &mut c);
        close(
            &c,
            &naive_mm(m, n, k, |i, t| a[i * k + t], |t, j| b[t * n + j]),
            1e-4,
            "matmul",
        );
        // B read transposed from an [n × k] table, C written column-major
        let bt = rnd(&mut rng, n * k);
        let mut ct = vec![0.0; m * n];
        gemm_strided(
            (m, n, k),
            (&a, (k, 1)),
            (&bt, (1, k)),
            (&mut ct, (1, m)),
            false,
        );
        let want = naive_mm(m, n, k, |i, t| a[i * k + t], |t, j| bt[j * k + t]);
        let got: Vec<f32> = (0..m * n).map(|x| ct[(x % n) * m + x / n]).collect();
        close(&got, &want, 1e-4, "strided");
    }
}

#[test]
fn gemm_rows_are_independent_of_the_batch() {
    // a row computed alone (a GEMV), among 6 rows (the streaming path) and among 20 (the packed
    // path, several blocks of k): the same bits, for weights packed from k x n and from a tied
    // n x k table, and close to the naive product
    let mut rng = StdRng::seed_from_u64(2);
    for &(n, k) in &[(512, 2048), (4096, 3072), (64, 7)] {
        let b = rnd(&mut rng, k * n);
        let a = rnd(&mut rng, 20 * k);
        let mut bt = vec![0.0; n * k];
        for p in 0..k {
            for j in 0..n {
                bt[j * k + p] = b[p * n + j];
            }
        }
        for (what, w) in [
            ("k x n", Panels::pack(&b, k, n)),
            ("tied n x k", Panels::pack_transposed(&bt, n, k)),
        ] {
            for m in [6, 20] {
                let mut cm = vec![0.0; m * n];
                gemm_rows(m, &a[..m * k], &w, &mut cm);
                for r in [0, 3, m - 1] {
                    let mut c1 = vec![0.0; n];
                    gemm_rows(1, &a[r * k..(r + 1) * k], &w, &mut c1);
                    assert!(
                        c1.iter()
                            .zip(&cm[r * n..(r + 1) * n])
                            .all(|(x, y)| x.to_bits() == y.to_bits()),
                        "row {r} of {m}, n={n} k={k}, weights {what}"
                    );
                }
                if n * k < 1 << 20 {
                    let want = naive_mm(m, n, k, |i, t| a[i * k + t], |t, j| b[t * n + j]);
                    close(&cm, &want, 1e-4, what);
                }
            }
        }
    }
}

/// A square window of size `k`, stride `s`, padding `p` over an `h × w` image.
fn window((h, w): (usize, usize), k: usize, s: usize, p: usize) -> Window {
    Window {
        kernel: (k, k),
        stride: s,
        pad: p,
        out: ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1),
    }
}

/// A direct convolution of `co` output channels in `g` groups over a square window.
fn naive_conv(
    x: &[f32],
    (c, h, w): (usize, usize, usize),
    wt: &[f32],
    (co, g): (usize, usize),
    win: Window,
) -> Vec<f32> {
    let (k, s, p, (ho, wo)) = (win.kernel.0, win.stride, win.pad, win.out);
    let (cg, cog) = (c / g, co / g);
    let mut y = vec![0.0; co * ho * wo];
    for o in 0..co {
        let gi = o / cog;
        for oy in 0..ho {
            for ox in 0..wo {
                let mut acc = 0.0f64;
                for ci in 0..cg {
                    for ky in 0..k {
                        for kx in 0..k {
                            let iy = (oy * s + ky) as isize - p as isize;
                            let ix = (ox * s + kx) as isize - p as isize;
                            if iy < 0 || ix < 0 || iy as usize >= h || ix as usize >= w {
                                continue;
                            }
                            let xv = x[(gi * cg + ci) * h * w + iy as usize * w + ix as usize];
                            // weight layout [group][K = ci·k·k][cout_g]
                            let kk = (ci * k + ky) * k + kx;
                            acc += xv as f64
                                * wt[gi * cg * k * k * cog + kk * cog + (o - gi * cog)] as f64;
                        }
                    }
                }
                y[o * ho * wo + oy * wo + ox] = acc as f32;
            }
        }
    }
    y
}

/// `[C, H, W]` ↔ channels-last, for the image kernels' inputs and outputs.
fn hwc_of(x: &[f32], chw: (usize, usize, usize)) -> Vec<f32> {
    let mut y = vec![0.0; x.len()];
    hwc::to_hwc(x, chw, &mut y);
    y
}

fn chw_of(x: &[f32], chw: (usize, usize, usize)) -> Vec<f32> {
    let mut y = vec![0.0; x.len()];
    hwc::to_chw(x, chw, &mut y);
    y
}

#[test]
fn channels_last_conv_matches_a_direct_convolution() {
    // what the CPU device runs: weights reordered with the scale folded in, one GEMM per group
    // over the unfolding (or over the image itself for a 1×1 window at stride 1), then shift
    // and ReLU in one pass
    let mut rng = StdRng::seed_from_u64(3);
    for &(c, h, w, co, k, s, p, g) in &[
        (3, 9, 11, 8, 3, 2, 1, 1),
        (8, 7, 7, 4, 1, 1, 0, 1),
        (6, 8, 8, 6, 3, 1, 1, 2),
        (4, 5, 5, 4, 5, 1, 2, 1),
        (3, 16, 15, 4, 7, 2, 3, 1),
        (4, 6, 7, 4, 1, 2, 0, 1),
        (6, 5, 4, 9, 1, 1, 0, 3),
    ] {
        let x = rnd(&mut rng, c * h * w);
        let (cg, cog) = (c / g, co / g);
        let kk = cg * k * k;
        let wt = rnd(&mut rng, g * kk * cog);
        let scale: Vec<f32> = (0..co).map(|_| rng.random_range(0.5f32..1.5)).collect();
        let shift = rnd(&mut rng, co);
        let win = window((h, w), k, s, p);
        let pp = win.out.0 * win.out.1;
        let xh = hwc_of(&x, (c, h, w));
        let wr = hwc::conv_weights(&wt, (g, cg, cog), (k, k), &scale);
        let mut cols = vec![0.0; pp * kk];
        let mut y = vec![0.0; co * pp];
        for gi in 0..g {
            let (a, lda) = if (k, s, p) == (1, 1, 0) {
                (&xh[gi * cg..], c)
            } else {
                // in two ranges of pixels, as a convolution's blocks unfold them
                let half = pp / 2;
                hwc::im2col(&xh, (h, w, c), (gi * cg, cg), win, 0..half, &mut cols);
                let rest = &mut cols[half * kk..];
                hwc::im2col(&xh, (h, w, c), (gi * cg, cg), win, half..pp, rest);
                (&cols[..], kk)
            };
            gemm_strided(
                (pp, cog, kk),
                (a, (lda, 1)),
                (&wr[gi * kk * cog..], (cog, 1)),
                (&mut y[gi * cog..], (co, 1)),
                false,
            );
        }
        bias_act(ActK::Relu, &mut y, co, &shift);
        let want: Vec<f32> = naive_conv(&x, (c, h, w), &wt, (co, g), win)
            .iter()
            .enumerate()
            .map(|(i, v)| (v * scale[i / pp] + shift[i / pp]).max(0.0))
            .collect();
        close(&chw_of(&y, (co, win.out.0, win.out.1)), &want, 1e-4, "conv");
    }
}

/// Window geometries that exercise every edge of the row-wise kernels: padding wider than the
/// kernel's reach, strides that skip the last column, kernels as wide as the image (global).
fn geometries() -> Vec<(usize, usize, usize, usize, usize)> {
    let mut g = Vec::new();
    for (h, w) in [(9, 8), (7, 6), (1, 5), (4, 1), (7, 7)] {
        for k in [1, 2, 3, 5, 7] {
            for s in [1, 2, 3] {
                for p in [0, 1, 2, 3] {
                    if p < k && h + 2 * p >= k && w + 2 * p >= k {
                        g.push((h, w, k, s, p));
                    }
                }
            }
        }
    }
    g
}

#[test]
fn depthwise_matches_a_grouped_convolution() {
    let mut rng = StdRng::seed_from_u64(4);
    let c = 19; // more than one vector of channels, and a remainder
    for (h, w, k, s, p) in geometries() {
        let x = rnd(&mut rng, c * h * w);
        let wt = rnd(&mut rng, c * k * k);
        let shift = rnd(&mut rng, c);
        let win = window((h, w), k, s, p);
        let (ho, wo) = win.out;
        let mut y = vec![f32::NAN; c * ho * wo];
        let wd = hwc::depthwise_weights(&wt, c, k * k, &[]);
        let xh = hwc_of(&x, (c, h, w));
        hwc::depthwise(&xh, (h, w, c), &wd, win, (&shift, ActK::None), &mut y);
        let want: Vec<f32> = naive_conv(&x, (c, h, w), &wt, (c, c), win)
            .iter()
            .enumerate()
            .map(|(i, v)| v + shift[i / (ho * wo)])
            .collect();
        close(
            &chw_of(&y, (c, ho, wo)),
            &want,
            1e-5,
            &format!("depthwise {h}x{w} k{k} s{s} p{p}"),
        );
    }
}

/// With whole vectors of channels (the AVX-512 blocks of four pixels, in runs of blocks at few
/// channels, and single pixels in registers at the edges below 512 channels), each output is bit for bit the FMA chain of its taps in (ky, kx) order from 0,
/// plus the shift, through ReLU6: what a pixel computed alone gives, at every window width and
/// stride (3 wide at strides 1 and 2 read each input once; others tap by tap).
#[test]
fn depthwise_blocks_are_the_bits_of_the_tap_by_tap_chain() {
    let mut rng = StdRng::seed_from_u64(6);
    for &(h, w, c, k, s, p) in &[
        (9, 28, 160, 3, 1, 1),
        (8, 29, 48, 3, 2, 1),
        (6, 17, 32, 5, 1, 2),
        (7, 12, 16, 3, 1, 0),
        // runs of four blocks a call (32 channels), then a run of one, then single pixels
        (5, 40, 32, 3, 1, 1),
        // runs of two blocks (64 channels) at stride 2
        (6, 23, 64, 3, 2, 1),
        // the edges through memory (512 channels and more)
        (4, 9, 512, 3, 1, 1),
    ] {
        let x = rnd(&mut rng, h * w * c);
        let wd = rnd(&mut rng, k * k * c);
        let shift = rnd(&mut rng, c);
        let win = window((h, w), k, s, p);
        let (ho, wo) = win.out;
        let mut y = vec![f32::NAN; ho * wo * c];
        hwc::depthwise(&x, (h, w, c), &wd, win, (&shift, ActK::Relu6), &mut y);
        for oy in 0..ho {
            for ox in 0..wo {
                for ch in 0..c {
                    let mut acc = 0.0f32;
                    for ky in 0..k {
                        for kx in 0..k {
                            let (iy, ix) =
                                ((oy * s + ky).wrapping_sub(p), (ox * s + kx).wrapping_sub(p));
                            if iy < h && ix < w {
                                acc = x[(iy * w + ix) * c + ch]
                                    .mul_add(wd[(ky * k + kx) * c + ch], acc);
                            }
                        }
                    }
                    let want = (acc + shift[ch]).clamp(0.0, 6.0);
                    let got = y[(oy * wo + ox) * c + ch];
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{h}x{w}x{c} k{k} s{s}: ({oy}, {ox}, {ch})"
                    );
                }
            }
        }
    }
}

#[test]
fn pooling_matches_the_definition() {
    let mut rng = StdRng::seed_from_u64(5);
    let c = 19;
    for (h, w, k, s, p) in geometries() {
        let x = rnd(&mut rng, c * h * w);
        let (ho, wo) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
        for max in [true, false] {
            let mut y = vec![f32::NAN; c * ho * wo];
            let xh = hwc_of(&x, (c, h, w));
            hwc::pool(&xh, (h, w, c), window((h, w), k, s, p), max, &mut y);
            let y = chw_of(&y, (c, ho, wo));
            let mut want = vec![0.0; c * ho * wo];
            for ch in 0..c {
                for oy in 0..ho {
                    for ox in 0..wo {
                        let mut vals = Vec::new();
                        for ky in 0..k {
                            for kx in 0..k {
                                let (iy, ix) = (
                                    (oy * s + ky) as isize - p as isize,
                                    (ox * s + kx) as isize - p as isize,
                                );
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                                    vals.push(x[ch * h * w + iy as usize * w + ix as usize]);
                                }
                            }
                        }
                        want[ch * ho * wo + oy * wo + ox] = if vals.is_empty() {
                            if max {
                                f32::NEG_INFINITY
                            } else {
                                0.0
                            }
                        } else if max {
                            vals.iter().copied().fold(f32::MIN, f32::max)
                        } else {
                            vals.iter().sum::<f32>() / vals.len() as f32
                        };
                    }
                }
            }
            let what = if max { "max pool" } else { "avg pool" };
            close(&y, &want, 1e-6, &format!("{what} {h}x{w} k{k} s{s} p{p}"));
        }
    }
}

#[test]
fn global_average_is_the_mean_of_each_channel() {
    let mut rng = StdRng::seed_from_u64(7);
    let (c, h, w) = (21, 5, 3);
    let x = rnd(&mut rng, c * h * w);
    let mut y = vec![f32::NAN; c];
    hwc::global_avg(&hwc_of(&x, (c, h, w)), (h, w, c), &mut y);
    let want: Vec<f32> = x
        .chunks(h * w)
        .map(|plane| (plane.iter().map(|v| *v as f64).sum::<f64>() / (h * w) as f64) as f32)
        .collect();
    close(&y, &want, 1e-6, "global average");
}

#[test]
fn norms_softmax_activations_match_f64_references() {
    let mut rng = StdRng::seed_from_u64(6);
    let x = rnd(&mut rng, 37);
    let g = rnd(&mut rng, 37);
    let b = rnd(&mut rng, 37);
    let mut y = x.clone();
    layernorm(&mut y, &g, &b, 1e-5);
    let mean = x.iter().map(|v| *v as f64).sum::<f64>() / 37.0;
    let var = x.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / 37.0;
    let want: Vec<f32> = (0..37)
        .map(|i| ((x[i] as f64 - mean) / (var + 1e-5).sqrt() * g[i] as f64 + b[i] as f64) as f32)
        .collect();
    close(&y, &want, 1e-5, "layernorm");
    let mut sm = x.clone();
    softmax(&mut sm);
    let z: f64 = x.iter().map(|v| (*v as f64).exp()).sum();
    let want: Vec<f32> = x.iter().map(|v| ((*v as f64).exp() / z) as f32).collect();
    close(&sm, &want, 1e-5, "softmax");
    for (a, f) in [
        (ActK::Relu, (|v: f64| v.max(0.0)) as fn(f64) -> f64),
        (ActK::Relu6, |v: f64| v.clamp(0.0, 6.0)),
        (ActK::Tanh, f64::tanh),
        (ActK::Sigmoid, |v: f64| 1.0 / (1.0 + (-v).exp())),
        (ActK::Gelu, |v: f64| {
            0.5 * v * (1.0 + (0.7978845608 * (v + 0.044715 * v * v * v)).tanh())
        }),
        // exact GELU, x·Φ(x), from the standard normal CDF by its series (|x| ≤ 4 here)
        (ActK::GeluErf, |v: f64| {
            let x = v / std::f64::consts::SQRT_2;
            let (mut term, mut sum, mut n) = (x, 0.0f64, 0.0f64);
            while n < 200.0 && term.abs() > 1e-20 {
                sum += term / (2.0 * n + 1.0);
                n += 1.0;
                term *= -x * x / n;
            }
            0.5 * v * (1.0 + sum * 2.0 / std::f64::consts::PI.sqrt())
        }),
    ] {
        let mut y: Vec<f32> = x.iter().map(|v| v * 4.0).collect();
        act(a, &mut y);
        let want: Vec<f32> = x.iter().map(|v| f(*v as f64 * 4.0) as f32).collect();
        close(&y, &want, 1e-5, &format!("{a:?}"));
    }
}

#[test]
fn lstm_cell_follows_the_equations() {
    let mut rng = StdRng::seed_from_u64(7);
    let h = 9;
    let gates = rnd(&mut rng, 4 * h);
    let c0 = rnd(&mut rng, h);
    let mut c = c0.clone();
    let mut out = vec![0.0; h];
    lstm_cell(&gates, &mut c, &mut out);
    let s = |v: f32| 1.0 / (1.0 + (-(v as f64)).exp());
    for j in 0..h {
        let cj = s(gates[h + j]) * c0[j] as f64 + s(gates[j]) * (gates[2 * h + j] as f64).tanh();
        assert!((c[j] as f64 - cj).abs() < 1e-6);
        assert!((out[j] as f64 - s(gates[3 * h + j]) * cj.tanh()).abs() < 1e-6);
    }
}

#[test]
fn attention_matches_softmax_weighted_values() {
    let mut rng = StdRng::seed_from_u64(8);
    // a head wider than one 16-lane block plus a tail, rows strided as in a [K | V] cache
    let (d, nk) = (21, 11);
    let q = rnd(&mut rng, d);
    let keys = rnd(&mut rng, nk * d);
    let vals = rnd(&mut rng, nk * d);
    let mut kv = vec![0.0; nk * 2 * d];
    for j in 0..nk {
        kv[j * 2 * d..j * 2 * d + d].copy_from_slice(&keys[j * d..(j + 1) * d]);
        kv[j * 2 * d + d..(j + 1) * 2 * d].copy_from_slice(&vals[j * d..(j + 1) * d]);
    }
    let at = |first| Strided {
        buf: &kv,
        first,
        stride: 2 * d,
    };
    let mut scores = vec![0.0; nk];
    let mut out = vec![0.0; d];
    attend_dot(&q, (at(0), at(d), nk), 0.5, &mut scores, &mut out);
    let e: Vec<f64> = (0..nk)
        .map(|j| {
            (0.5 * (0..d)
                .map(|t| q[t] as f64 * keys[j * d + t] as f64)
                .sum::<f64>())
            .exp()
        })
        .collect();
    let z: f64 = e.iter().sum();
    let want: Vec<f32> = (0..d)
        .map(|t| {
            ((0..nk)
                .map(|j| e[j] / z * vals[j * d + t] as f64)
                .sum::<f64>()) as f32
        })
        .collect();
    close(&out, &want, 1e-5, "attention");
    assert_eq!(sinusoid(0, 0, 16), 0.0);
    assert_eq!(sinusoid(0, 1, 16), 1.0);
    assert!((sinusoid(3, 0, 16) - 3f32.sin()).abs() < 1e-6);
}

#[test]
fn argmax_is_the_first_largest_element() {
    let mut rng = StdRng::seed_from_u64(9);
    for n in [1, 5, 16, 33, 1000] {
        let mut x = rnd(&mut rng, n);
        let first = |x: &[f32]| (0..x.len()).fold(0, |b, j| if x[j] > x[b] { j } else { b });
        assert_eq!(argmax(&x), first(&x), "{n} values");
        // a tie with a later copy of the maximum keeps the first
        let m = first(&x);
        x.push(x[m]);
        assert_eq!(argmax(&x), m, "{n} values and a tie");
    }
    assert_eq!(
        argmax(&[f32::NAN, 3.0, 1.0]),
        0,
        "a NaN first is kept, as by a scan"
    );
    assert_eq!(argmax(&[1.0, f32::NAN, 3.0]), 2);
}
