//! The direct convolution's tests: the bits of the unfolded GEMM it replaces, on the stems of
//! the zoo's CNNs and on every tile width, in blocks as the CPU device cuts them.

use super::*;
use crate::device::cpu::kernels::{self, ActK};
use crate::device::cpu::{hwc, rowgemm};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// A `kk × kk` window at stride `s` and padding `pad` over an `h × w` image.
fn square_window((h, w): (usize, usize), kk: usize, s: usize, pad: usize) -> Window {
    Window {
        kernel: (kk, kk),
        stride: s,
        pad,
        out: ((h + 2 * pad - kk) / s + 1, (w + 2 * pad - kk) / s + 1),
    }
}

/// The unfolded path: every output pixel's window by `im2col`, then the row GEMM.
fn unfolded(x: &[f32], input: (usize, usize, usize), win: Window, pk: &Panels) -> Vec<f32> {
    let (p, k, co) = (win.out.0 * win.out.1, pk.k, pk.n);
    let mut cols = vec![0.0; p * k];
    hwc::im2col(x, input, (0, input.2), win, 0..p, &mut cols);
    let mut y = vec![0.0; p * co];
    rowgemm::gemm_panels((p, &cols, k), pk, (&mut y, co));
    y
}

/// MobileNet's and ResNet's stems (3×3 at stride 2, 7×7 at stride 2), VGG's first layer (3×3
/// at stride 1), and one, three and four vectors of output channels from one or four input
/// channels, on odd and even image sides: every output the same bits as the unfolded GEMM's,
/// whether the image runs as one block or in blocks that start and end mid-row.
#[test]
fn a_direct_convolution_gives_the_bits_of_the_unfolded_gemm() {
    let mut rng = StdRng::seed_from_u64(7);
    // (h, w, c), kernel, stride, pad, output channels
    let cases = [
        ((33, 30, 3), 3, 2, 1, 32),
        ((37, 40, 3), 7, 2, 3, 64),
        ((20, 19, 3), 3, 1, 1, 64),
        ((17, 26, 1), 3, 1, 1, 16),
        ((15, 15, 4), 5, 2, 2, 48),
        ((9, 31, 2), 3, 3, 0, 32),
    ];
    for ((h, w, c), kk, s, pad, co) in cases {
        let win = square_window((h, w), kk, s, pad);
        let out = win.out;
        let x = random(&mut rng, h * w * c);
        let pk = Panels::pack(&random(&mut rng, kk * kk * c * co), kk * kk * c, co);
        let want = unfolded(&x, (h, w, c), win, &pk);
        let d = Direct {
            input: (h, w, c),
            win,
            panels: &pk,
            fin: Finish::NONE,
        };
        let p = out.0 * out.1;
        for block in [p, 7, 29] {
            let mut got = vec![f32::NAN; p * co];
            for start in (0..p).step_by(block) {
                let end = (start + block).min(p);
                d.block(&x, start..end, &mut got[start * co..end * co]);
            }
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    e.to_bits(),
                    "{h}x{w}x{c}, {kk}x{kk}/{s}, {co} out, blocks of {block}: pixel {}, \
                     channel {}: {g} vs {e}",
                    i / co,
                    i % co
                );
            }
        }
    }
}

/// Finished in registers (shift, then ReLU or ReLU6) and stored around the caches or not, a
/// block gives the bits of the plain block followed by `kernels::bias_act`; an activation the
/// registers do not apply is left to the caller (the block says so).
#[test]
fn a_direct_convolution_finishes_its_outputs_as_the_bias_and_activation_pass_does() {
    use crate::device::cpu::aligned::Aligned;
    let mut rng = StdRng::seed_from_u64(8);
    // one, two and four vectors of output channels
    for co in [16, 32, 64] {
        let ((h, w, c), kk, s, pad) = ((21, 18, 3), 3, 2, 1);
        let win = square_window((h, w), kk, s, pad);
        let out = win.out;
        // large values, so that ReLU6 clips some
        let x: Vec<f32> = random(&mut rng, h * w * c)
            .iter()
            .map(|v| 8.0 * v)
            .collect();
        let pk = Panels::pack(&random(&mut rng, kk * kk * c * co), kk * kk * c, co);
        let shift = random(&mut rng, co);
        let p = out.0 * out.1;
        let plain = Direct {
            input: (h, w, c),
            win,
            panels: &pk,
            fin: Finish::NONE,
        };
        let mut raw = vec![0.0; p * co];
        plain.block(&x, 0..p, &mut raw);
        for act in [ActK::None, ActK::Relu, ActK::Relu6, ActK::Tanh] {
            let in_registers = act != ActK::Tanh;
            let mut want = raw.clone();
            if in_registers {
                kernels::bias_act(act, &mut want, co, &shift);
            }
            for (stream, block) in [(false, p), (true, p), (true, 7), (false, 29)] {
                let fin = Finish {
                    shift: &shift,
                    act,
                    stream,
                };
                let d = Direct { fin, ..plain };
                let mut got = Aligned::zeroed(p * co);
                for start in (0..p).step_by(block) {
                    let end = (start + block).min(p);
                    let finished = d.block(&x, start..end, &mut got[start * co..end * co]);
                    assert_eq!(finished, in_registers, "{act:?}");
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                let what = format!("{co} out, {act:?}, stream {stream}, blocks of {block}");
                assert_eq!(bits(&got), bits(&want), "{what}");
            }
        }
    }
}

#[test]
fn only_few_channels_in_and_whole_vectors_out_run_directly() {
    assert!(applies(1, (3, 32), 9) && applies(1, (3, 64), 9) && applies(1, (1, 16), 9));
    assert!(
        !applies(1, (16, 32), 9),
        "many input channels: the unfolded GEMM"
    );
    assert!(!applies(1, (3, 24), 9), "not a whole number of vectors");
    assert!(!applies(1, (3, 128), 9), "more outputs than the tile holds");
    assert!(!applies(3, (3, 48), 9), "grouped");
    assert!(
        !applies(1, (3, 64), 49),
        "weights beyond L1 (ResNet's 7×7 stem)"
    );
}
