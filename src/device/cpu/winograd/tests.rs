//! Winograd's tests: the same convolution as a direct one, to rounding, on images of every
//! parity, in blocks as the CPU device cuts them.

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A direct 3×3 convolution (pad 1, stride 1) of an `[H][W][C]` image in f64, weights
/// `[9·C][Cout]` in (ky, kx, channel) order.
fn direct(x: &[f32], (h, w, c): (usize, usize, usize), wt: &[f32], co: usize) -> Vec<f64> {
    let mut y = vec![0.0; h * w * co];
    for oy in 0..h {
        for ox in 0..w {
            for ky in 0..3 {
                for kx in 0..3 {
                    let (iy, ix) = ((oy + ky).wrapping_sub(1), (ox + kx).wrapping_sub(1));
                    if iy >= h || ix >= w {
                        continue;
                    }
                    for ci in 0..c {
                        let xv = f64::from(x[(iy * w + ix) * c + ci]);
                        let row = &wt[((ky * 3 + kx) * c + ci) * co..][..co];
                        for (o, wv) in row.iter().enumerate() {
                            y[(oy * w + ox) * co + o] += xv * f64::from(*wv);
                        }
                    }
                }
            }
        }
    }
    y
}

fn random(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Both tile sizes, every block size the device may pick (one row of tiles, several, the whole
/// image), on images with sides of every remainder, one pixel wide to 15: each output within
/// 1e-5 (F(2×2)) or 3e-5 (F(4×4)) of the output's scale of the direct convolution, and no pixel
/// left unwritten.
#[test]
fn winograd_matches_a_direct_convolution_in_any_blocks() {
    for (m, tol) in [(2, 1e-5), (4, 3e-5)] {
        matches_direct(m, tol);
    }
}

fn matches_direct(m: usize, tol: f64) {
    let mut rng = StdRng::seed_from_u64(11);
    for &(h, w, c, co) in &[
        (1, 1, 16, 16),
        (2, 3, 16, 32),
        (5, 4, 32, 16),
        (7, 7, 16, 48),
        (8, 9, 48, 32),
        (15, 14, 16, 16),
    ] {
        let x = random(&mut rng, h * w * c);
        let wt = random(&mut rng, 9 * c * co);
        let want = direct(&x, (h, w, c), &wt, co);
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let wg = Winograd::with_tile(&wt, (c, co), m);
        let mut scratch = vec![f32::NAN; wg.scratch_len((h, w))];
        for rows in [1, 2, h.div_ceil(m)] {
            let pb = (rows * m * w).min(h * w);
            let mut y = vec![f32::NAN; h * w * co];
            for (b, out) in y.chunks_mut(pb * co).enumerate() {
                let start = b * pb;
                wg.block(&x, (h, w), start..start + out.len() / co, out, &mut scratch);
            }
            for (i, (got, want)) in y.iter().zip(&want).enumerate() {
                let err = (f64::from(*got) - want).abs() / scale;
                assert!(
                    err <= tol,
                    "F({m}×{m}) {h}×{w}, {c} → {co}, blocks of {rows} tile rows: value {i} is \
                     {got}, want {want} (error {err:e} of the scale)"
                );
            }
        }
    }
}

/// The blocks the device cuts start on rows of tiles, and fit the scratch it reserves; images
/// of 28 pixels a side and more with 256 channels or more take F(4×4), others F(2×2).
#[test]
fn blocks_are_whole_rows_of_tiles_within_the_scratch() {
    for &(h, w, c, co) in &[
        (56, 56, 64, 64),
        (14, 14, 256, 256),
        (224, 224, 64, 64),
        (7, 9, 512, 512),
        (30, 29, 16, 32),
        (28, 30, 256, 32),
    ] {
        let wg = Winograd::new(&vec![0.0; 9 * c * co], (c, co), (h, w));
        let m = wg.m;
        let f4 = h.min(w) >= 28 && c >= 256;
        assert_eq!(m, if f4 { 4 } else { 2 }, "{h}×{w}×{c}");
        for threads in 1..=3 {
            let pb = wg.block_pixels((h, w), threads);
            assert!(pb.is_multiple_of(m * w), "{h}×{w}: {pb} pixels");
            let tiles = pb.min(h * w).div_ceil(m * w) * w.div_ceil(m);
            let need = wg.points() * tiles * (c + co) + c;
            assert!(
                need <= wg.scratch_len((h, w)),
                "{h}×{w} on {threads} threads"
            );
        }
    }
}
