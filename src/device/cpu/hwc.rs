//! Channels-last image kernels. On the CPU device every rank-3 tensor `[C, H, W]` is stored
//! `[H][W][C]` (a pixel's channels contiguous): a 1×1 convolution is then a plain row-major
//! GEMM over the image with no unfolding, the unfolding of a larger window copies whole runs of
//! channels, and the per-channel work (a folded batch norm's shift, the activation, depthwise
//! filters, pooling) runs along contiguous channels, 16 at a time. The graph, the weights as
//! generated and every captured output keep the `[C, H, W]` order: [`to_hwc`] and [`to_chw`]
//! convert at the edges (the model input, `Flatten`, capture).
//!
//! Output rows are shared between threads ([`super::par::split_rows`]); each element is
//! computed by one thread in a fixed order, so results do not depend on the thread count.

use super::kernels::{act, ActK, Window};
use super::par::{split_rows, vectorized_fn};

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

/// Depthwise convolution (one filter per channel) of an `[H][W][C]` image, with the shift and
/// activation fused: `wt` is `[kh·kw][C]` (tap-major), each output the FMA chain of its taps in
/// (ky, kx) order from 0.
pub fn depthwise(
    x: &[f32],
    (h, w, c): (usize, usize, usize),
    wt: &[f32],
    win: Window,
    epilogue: (&[f32], ActK),
    y: &mut [f32],
) {
    let ((kh, kw), (ho, wo)) = (win.kernel, win.out);
    let work = ho * wo * c * kh * kw;
    split_rows(&mut y[..ho * wo * c], wo * c, work, |oy0, rows| {
        depthwise_rows((x, (h, w, c)), wt, win, epilogue, (oy0, rows))
    });
}

/// Output rows `rows` of [`depthwise`] into `y` (their values from its start), on this thread:
/// what a 1×1 convolution that computes a deferred depthwise convolution
/// ([`super::separable`]) computes ahead of each block of its pixels; the same bits as the
/// whole image's rows.
pub(super) fn depthwise_rows_at(
    image: (&[f32], (usize, usize, usize)),
    wt: &[f32],
    win: Window,
    epilogue: (&[f32], ActK),
    rows: std::ops::Range<usize>,
    y: &mut [f32],
) {
    let len = rows.len() * win.out.1 * image.1 .2;
    depthwise_rows(image, wt, win, epilogue, (rows.start, &mut y[..len]))
}

/// Channels of a depthwise block (one AVX-512 vector) and output pixels computed together
/// (their accumulators stay in registers; each weight vector is loaded once for all of them,
/// and each input vector of a 3-wide window once for all the taps that read it).
const DW_LANES: usize = 16;
const DW_PIXELS: usize = 4;

vectorized_fn! {
    fn depthwise_rows(
        image: (&[f32], (usize, usize, usize)),
        wt: &[f32],
        win: Window,
        epilogue: (&[f32], ActK),
        out: (usize, &mut [f32]),
    ) {
        let ((_, (h, w, c)), (oy0, rows)) = (image, out);
        let (kh, kw) = win.kernel;
        let wo = win.out.1;
        // output columns whose every tap lies inside the image along x
        let inner = win.inner_columns(w);
        for (r, row) in rows.chunks_exact_mut(wo * c).enumerate() {
            let oy = oy0 + r;
            // the window's rows inside the image (all but at the top and bottom edges; the
            // columns are all inside for the blocks)
            let ky = win.taps_inside(oy, kh, h);
            // the input rows that the next output row reads and this one does not, a share of
            // their lines requested before each pixel
            let ahead = next_rows(image, &win, oy);
            let lines = ahead.len().div_ceil(16);
            let per_pixel = lines.div_ceil(wo.max(1));
            let mut ox = 0;
            while ox < wo {
                prefetch_l2(ahead, ox * per_pixel..((ox + 1) * per_pixel).min(lines));
                let (at, o) = ((oy, ox), &mut row[ox * c..]);
                let block = ox >= inner.start && ox + DW_PIXELS <= inner.end;
                let taps = (ky.clone(), 0..kw);
                if block && depthwise_block::<DW_PIXELS>(image, wt, win, taps, epilogue, at, o) {
                    ox += DW_PIXELS;
                } else {
                    // one pixel at a time at the left and right edges (one vector's chain per
                    // pixel in registers would wait on each FMA; this loop runs the channels'
                    // chains side by side)
                    depthwise_pixel(image, wt, win, epilogue, at, &mut row[ox * c..][..c]);
                    ox += 1;
                }
            }
        }
    }
}

/// The input rows that output row `oy + 1`'s windows read and row `oy`'s do not (empty past
/// the image): on their way from memory into L2 while row `oy` computes. At batch 16 the
/// depthwise layers' inputs (up to 51 MB) come from memory, and three rows read at once, a
/// vector of each pixel at a time, are not a pattern the hardware prefetchers follow far
/// enough ahead. MobileNet-v1's depthwise layers at batch 16 took less time with this in 7
/// of 8 interleaved profiled passes (in the calmest, 17.9–18.6 ms instead of 19.7–20.4); the
/// whole pass moved by less than this machine's noise.
fn next_rows<'a>(
    (x, (h, w, c)): (&'a [f32], (usize, usize, usize)),
    win: &Window,
    oy: usize,
) -> &'a [f32] {
    let (kh, s, pad) = (win.kernel.0, win.stride, win.pad);
    let end = ((oy + 1) * s + kh).saturating_sub(pad).min(h);
    let start = (oy * s + kh).saturating_sub(pad).min(end);
    &x[start * w * c..end * w * c]
}

/// Asks for cache lines `lines` (of 16 values) of `x` to be fetched into L2.
#[inline(always)]
fn prefetch_l2(x: &[f32], lines: std::ops::Range<usize>) {
    #[cfg(target_arch = "x86_64")]
    for l in lines {
        // SAFETY: a prefetch never faults, and the address lies inside `x` (`l · 16` is within
        // its length for every line the caller asks for)
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
            _mm_prefetch::<_MM_HINT_T1>(x.as_ptr().wrapping_add(l * 16) as *const i8)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, lines);
}

/// One output pixel, any window position: taps outside the image are skipped.
#[inline(always)]
fn depthwise_pixel(
    (x, (h, w, c)): (&[f32], (usize, usize, usize)),
    wt: &[f32],
    win: Window,
    (shift, a): (&[f32], ActK),
    (oy, ox): (usize, usize),
    o: &mut [f32],
) {
    let (kh, kw) = win.kernel;
    o.fill(0.0);
    for ky in 0..kh {
        let Some(iy) = win.tap(oy, ky, h) else {
            continue;
        };
        for kx in 0..kw {
            let Some(ix) = win.tap(ox, kx, w) else {
                continue;
            };
            let xi = &x[(iy * w + ix) * c..][..c];
            let f = &wt[(ky * kw + kx) * c..][..c];
            for ((o, x), f) in o.iter_mut().zip(xi).zip(f) {
                *o = x.mul_add(*f, *o);
            }
        }
    }
    if !shift.is_empty() {
        o.iter_mut().zip(shift).for_each(|(v, s)| *v += s);
    }
    act(a, o);
}

/// `P` neighbouring output pixels over the taps `taps` (rows, columns of the window) — every
/// tap of the window that lies inside the image, for each of the `P` pixels — channels
/// [`DW_LANES`] at a time with the accumulators in AVX-512 registers: the same fused
/// multiply-adds in the same order as [`depthwise_pixel`], so the same bits. False, with
/// nothing done, without AVX-512 or when the block does not fit (the caller goes pixel by
/// pixel).
#[inline(always)]
fn depthwise_block<const P: usize>(
    image: (&[f32], (usize, usize, usize)),
    wt: &[f32],
    win: Window,
    (ky, kx): (std::ops::Range<usize>, std::ops::Range<usize>),
    epilogue: (&[f32], ActK),
    (oy, ox): (usize, usize),
    o: &mut [f32],
) -> bool {
    let (x, (h, w, c)) = image;
    let (kh, kw) = win.kernel;
    let (s, pad) = (win.stride, win.pad);
    // the block's taps, checked once: rows oy·s − pad + ky, columns (ox + p)·s − pad + kx
    let in_bounds = !ky.is_empty()
        && !kx.is_empty()
        && ky.end <= kh
        && kx.end <= kw
        && oy * s + ky.start >= pad
        && oy * s + ky.end <= h + pad
        && ox * s + kx.start >= pad
        && (ox + P - 1) * s + kx.end <= w + pad
        && wt.len() >= kh * kw * c
        && o.len() >= P * c
        && c % DW_LANES == 0
        && (epilogue.0.is_empty() || epilogue.0.len() >= c);
    #[cfg(target_arch = "x86_64")]
    if in_bounds && super::par::avx512() {
        let whole_rows = kx == (0..kw);
        let g = DwGeometry {
            image: (w, c),
            kernel: (kh, kw),
            s,
            corner: ((oy * s).wrapping_sub(pad), (ox * s).wrapping_sub(pad)),
            taps: (ky, kx),
        };
        // SAFETY: AVX-512F is present; every tap of `g.taps` of the P pixels lies inside the
        // h × w image of c channels (whole vectors), the weights hold kh·kw·c values, `o`
        // P·c and the shift (if any) c (checked just above).
        unsafe {
            match (kw, s, whole_rows) {
                (3, 1, true) => depthwise_block_avx512::<3, 1, P>(x, wt, g, epilogue, o),
                (3, 2, true) => depthwise_block_avx512::<3, 2, P>(x, wt, g, epilogue, o),
                _ => depthwise_block_avx512::<0, 0, P>(x, wt, g, epilogue, o),
            }
        }
        return true;
    }
    let _ = (in_bounds, x, h, w, epilogue, oy, ox, o, ky, kx);
    false
}

/// Where a depthwise block reads: the image's width and channels, the window and stride, the
/// first pixel's window corner (row, column; the tap (0, 0), which may lie outside the image
/// when it is not among the taps) and the taps read.
#[cfg(target_arch = "x86_64")]
struct DwGeometry {
    image: (usize, usize),
    kernel: (usize, usize),
    s: usize,
    corner: (usize, usize),
    taps: (std::ops::Range<usize>, std::ops::Range<usize>),
}

/// [`depthwise_block`]'s kernel: for a window `KW` (= `kw`, every column of it read) wide at
/// stride `S` (= `s`), each input vector of a row is loaded once for the `P` pixels' taps that
/// read it; `KW = 0`: any window and columns, read tap by tap.
///
/// # Safety
/// AVX-512F present; pixels `(corner.0 + ky, corner.1 + p·s + kx)` inside the image for every
/// tap of `taps` and `p < P` (wrapping corners allowed); `wt` holds `kh·kw·c` values, `o`
/// `P·c`, the shift (if any) `c`; `c` a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn depthwise_block_avx512<const KW: usize, const S: usize, const P: usize>(
    x: &[f32],
    wt: &[f32],
    g: DwGeometry,
    (shift, a): (&[f32], ActK),
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    let ((w, c), kw, s) = (g.image, g.kernel.1, g.s);
    let (iy0, ix0) = g.corner;
    let (xp, wp, op) = (x.as_ptr(), wt.as_ptr(), o.as_mut_ptr());
    for cb in (0..c).step_by(DW_LANES) {
        let mut acc = [_mm512_setzero_ps(); P];
        for ky in g.taps.0.clone() {
            // the pixel under tap (ky, kx) of output p: index ((iy0 + ky)·w + ix0 + p·s + kx)·c
            let at = |j: usize| {
                let px = (iy0.wrapping_add(ky) * w).wrapping_add(ix0).wrapping_add(j);
                xp.add(px * c + cb)
            };
            let f = |kx: usize| _mm512_loadu_ps(wp.add((ky * kw + kx) * c + cb));
            if KW > 0 {
                // the row's input vectors under the P pixels' windows, each loaded once
                let xs: [__m512; 16] = std::array::from_fn(|j| match j < (P - 1) * S + KW {
                    true => _mm512_loadu_ps(at(j)),
                    false => _mm512_setzero_ps(),
                });
                for kx in 0..KW {
                    let fk = f(kx);
                    for (p, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(xs[p * S + kx], fk, *acc);
                    }
                }
            } else {
                for kx in g.taps.1.clone() {
                    let fk = f(kx);
                    for (p, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(_mm512_loadu_ps(at(p * s + kx)), fk, *acc);
                    }
                }
            }
        }
        for (p, acc) in acc.iter().enumerate() {
            let mut v = *acc;
            if !shift.is_empty() {
                v = _mm512_add_ps(v, _mm512_loadu_ps(shift.as_ptr().add(cb)));
            }
            let dst = op.add(p * c + cb);
            _mm512_storeu_ps(dst, v);
            act(a, std::slice::from_raw_parts_mut(dst, DW_LANES));
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

    #[test]
    fn the_register_blocked_depthwise_gives_the_bits_of_the_pixel_by_pixel_one() {
        // interiors take the blocked path (AVX-512 where present), borders and channel counts
        // that are not a multiple of 16 the pixel path: every output must have the same bits
        for (h, c, stride, pad, k) in [
            (13, 32, 1, 1, 3),
            (17, 48, 2, 1, 3),
            (9, 24, 1, 1, 3),
            (11, 16, 1, 2, 5),
        ] {
            let out = (h + 2 * pad - k) / stride + 1;
            let win = Window {
                kernel: (k, k),
                stride,
                pad,
                out: (out, out),
            };
            let x: Vec<f32> = (0..h * h * c)
                .map(|i| ((i * 7919) % 1000) as f32 / 997.0 - 0.5)
                .collect();
            let wt: Vec<f32> = (0..k * k * c)
                .map(|i| ((i * 104_729) % 1000) as f32 / 991.0 - 0.5)
                .collect();
            let shift: Vec<f32> = (0..c).map(|i| i as f32 * 0.01).collect();
            let mut fast = vec![0.0; out * out * c];
            depthwise(&x, (h, h, c), &wt, win, (&shift, ActK::Relu6), &mut fast);
            let mut slow = vec![0.0; out * out * c];
            for oy in 0..out {
                for ox in 0..out {
                    let o = &mut slow[(oy * out + ox) * c..][..c];
                    depthwise_pixel(
                        (&x, (h, h, c)),
                        &wt,
                        win,
                        (&shift, ActK::Relu6),
                        (oy, ox),
                        o,
                    );
                }
            }
            let same = fast
                .iter()
                .zip(&slow)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "h {h}, c {c}, stride {stride}: the paths differ");
        }
    }
}
