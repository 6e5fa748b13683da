//! Channels-last image kernels. On the CPU device every rank-3 tensor `[C, H, W]` is stored
//! `[H][W][C]` (a pixel's channels contiguous): a 1×1 convolution is then a plain row-major
//! GEMM over the image with no unfolding, the unfolding of a larger window copies whole runs of
//! channels, and the per-channel work (a folded batch norm's shift, the activation, depthwise
//! filters, pooling) runs along contiguous channels, 16 at a time. The graph, the weights as
//! generated and every captured output keep the `[C, H, W]` order: [`to_hwc`] and [`to_chw`]
//! convert at the edges (the model input, `Flatten`, capture). The depthwise convolution's
//! kernels live in [`depthwise`].
//!
//! Output rows are shared between threads ([`super::par::split_rows`]); each element is
//! computed by one thread in a fixed order, so results do not depend on the thread count.

use super::kernels::Window;
use super::par::{split_rows, vectorized_fn};

mod depthwise;
pub use depthwise::depthwise;
pub(super) use depthwise::{depthwise_rows_at, prefetch_l2, rows_after};

/// `[C, H, W]` → `[H][W][C]`.
pub fn to_hwc(src: &[f32], (c, h, w): (usize, usize, usize), dst: &mut [f32]) {
    let p = h * w;
    for (px, row) in dst[..p * c].chunks_exact_mut(c).enumerate() {
        for (ch, v) in row.iter_mut().enumerate() {
            *v = src[ch * p + px];
        }
    }
}

/// `[H][W][C]` → `[C, H, W]`.
pub fn to_chw(src: &[f32], (c, h, w): (usize, usize, usize), dst: &mut [f32]) {
    let p = h * w;
    for (px, row) in src[..p * c].chunks_exact(c).enumerate() {
        for (ch, v) in row.iter().enumerate() {
            dst[ch * p + px] = *v;
        }
    }
}

/// Unfolds channels `c0..c0 + cg` of an `[H][W][C]` image for output pixels `pixels` into
/// `cols`: row `r` is pixel `pixels.start + r`'s window, `K = kh·kw·cg` values in (ky, kx,
/// channel) order, zeros where the window leaves the image. Taps that read the image copy a run
/// of channels (a whole window row at once when the image's channels are all taken). One
/// thread: a caller that wants both cores unfolds halves of the pixels.
pub fn im2col(
    x: &[f32],
    (h, w, c): (usize, usize, usize),
    (c0, cg): (usize, usize),
    win: Window,
    pixels: std::ops::Range<usize>,
    cols: &mut [f32],
) {
    let (kh, kw) = win.kernel;
    let wo = win.out.1.max(1);
    let k = kh * kw * cg;
    let rows = cols[..pixels.len() * k].chunks_exact_mut(k);
    for (px, patch) in pixels.zip(rows) {
        let (oy, ox) = (px / wo, px % wo);
        for ky in 0..kh {
            let dst = &mut patch[ky * kw * cg..(ky + 1) * kw * cg];
            let Some(iy) = win.tap(oy, ky, h) else {
                dst.fill(0.0);
                continue;
            };
            let base = iy * w;
            let first = win.tap(ox, 0, w);
            let last = win.tap(ox, kw - 1, w);
            if let (Some(ix), Some(_), true) = (first, last, cg == c) {
                // the whole window row is inside the image and contiguous
                dst.copy_from_slice(&x[(base + ix) * c..(base + ix + kw) * c]);
                continue;
            }
            for (kx, d) in dst.chunks_exact_mut(cg).enumerate() {
                match win.tap(ox, kx, w) {
                    Some(ix) => d.copy_from_slice(&x[(base + ix) * c + c0..][..cg]),
                    None => d.fill(0.0),
                }
            }
        }
    }
}

/// Max or average pooling of an `[H][W][C]` image over a square window (`kernel.0`); average
/// pooling divides by the taps inside the image (padding does not count).
pub fn pool(x: &[f32], (h, w, c): (usize, usize, usize), win: Window, max: bool, y: &mut [f32]) {
    let (k, (ho, wo)) = (win.kernel.0, win.out);
    split_rows(
        &mut y[..ho * wo * c],
        wo * c,
        ho * wo * c * k * k,
        |oy0, rows| pool_rows((x, (h, w, c)), win, max, (oy0, rows)),
    );
}

vectorized_fn! {
    fn pool_rows(
        image: (&[f32], (usize, usize, usize)),
        win: Window,
        max: bool,
        out: (usize, &mut [f32]),
    ) {
        let ((x, (h, w, c)), (oy0, rows)) = (image, out);
        let (k, wo) = (win.kernel.0, win.out.1);
        for (r, row) in rows.chunks_exact_mut(wo * c).enumerate() {
            let oy = oy0 + r;
            for (ox, o) in row.chunks_exact_mut(c).enumerate() {
                o.fill(if max { f32::NEG_INFINITY } else { 0.0 });
                let mut taps = 0usize;
                for ky in 0..k {
                    let Some(iy) = win.tap(oy, ky, h) else {
                        continue;
                    };
                    for kx in 0..k {
                        let Some(ix) = win.tap(ox, kx, w) else {
                            continue;
                        };
                        taps += 1;
                        let xi = &x[(iy * w + ix) * c..][..c];
                        if max {
                            o.iter_mut().zip(xi).for_each(|(o, x)| *o = o.max(*x));
                        } else {
                            o.iter_mut().zip(xi).for_each(|(o, x)| *o += x);
                        }
                    }
                }
                if !max {
                    let d = taps.max(1) as f32;
                    o.iter_mut().for_each(|v| *v /= d);
                }
            }
        }
    }
}

vectorized_fn! {
    /// Global average pooling: `y[c]` is the mean of channel `c` over the image's pixels, summed
    /// pixel by pixel in order.
    pub fn global_avg(x: &[f32], hwc: (usize, usize, usize), y: &mut [f32]) {
        let (h, w, c) = hwc;
        let y = &mut y[..c];
        y.fill(0.0);
        for px in x[..h * w * c].chunks_exact(c) {
            y.iter_mut().zip(px).for_each(|(o, v)| *o += v);
        }
        let d = (h * w).max(1) as f32;
        y.iter_mut().for_each(|v| *v /= d);
    }
}

/// A convolution's weights as generated (`[group][K = (ci, ky, kx)][Cout/g]`) reordered for the
/// channels-last unfolding (`K = (ky, kx, ci)`), with a folded batch norm's per-channel `scale`
/// (empty: none) multiplied in.
pub fn conv_weights(
    w: &[f32],
    (g, cg, cog): (usize, usize, usize),
    (kh, kw): (usize, usize),
    scale: &[f32],
) -> Vec<f32> {
    let taps = kh * kw;
    let kk = cg * taps;
    let mut out = vec![0.0; w.len()];
    for gi in 0..g {
        for ci in 0..cg {
            for t in 0..taps {
                let src = &w[(gi * kk + ci * taps + t) * cog..][..cog];
                let dst = &mut out[(gi * kk + t * cg + ci) * cog..][..cog];
                for (n, (d, s)) in dst.iter_mut().zip(src).enumerate() {
                    *d = s * scale.get(gi * cog + n).copied().unwrap_or(1.0);
                }
            }
        }
    }
    out
}

/// A depthwise convolution's weights as generated (`[C][kh·kw]`) as `[kh·kw][C]`, with the
/// per-channel `scale` (empty: none) multiplied in.
pub fn depthwise_weights(w: &[f32], c: usize, taps: usize, scale: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0; c * taps];
    for ch in 0..c {
        let s = scale.get(ch).copied().unwrap_or(1.0);
        for t in 0..taps {
            out[t * c + ch] = w[ch * taps + t] * s;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_invert_each_other() {
        let (c, h, w) = (3, 4, 5);
        let x: Vec<f32> = (0..c * h * w).map(|i| i as f32).collect();
        let mut hwc = vec![0.0; x.len()];
        to_hwc(&x, (c, h, w), &mut hwc);
        // pixel (1, 2), channel 2 of CHW is at (1·5 + 2)·3 + 2 in HWC
        assert_eq!(hwc[(5 + 2) * 3 + 2], x[2 * 20 + 5 + 2]);
        let mut back = vec![0.0; x.len()];
        to_chw(&hwc, (c, h, w), &mut back);
        assert_eq!(back, x);
    }

    #[test]
    fn weights_reorder_moves_each_tap_and_folds_the_scale() {
        // g = 1, cg = 2, cog = 3, 2×1 window: K as generated (ci, t), reordered (t, ci)
        let w: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let out = conv_weights(&w, (1, 2, 3), (2, 1), &[1.0, 2.0, 3.0]);
        // (ci 1, t 0) is generated row 2 and lands in row 1
        assert_eq!(&out[3..6], &[6.0, 14.0, 24.0]);
        let d = depthwise_weights(&[1.0, 2.0, 3.0, 4.0], 2, 2, &[]);
        assert_eq!(d, vec![1.0, 3.0, 2.0, 4.0]);
    }
}
