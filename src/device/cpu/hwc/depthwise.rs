//! The depthwise convolution (one 3×3 — or any — filter per channel) over channels-last
//! images: rows of output shared between the threads, each row's pixels in blocks of four
//! (runs of blocks at few channels) whose accumulators stay in AVX-512 registers, single
//! pixels at the edges, the next input rows prefetched into L2 while a row computes. Every
//! output is the FMA chain of its taps in (ky, kx) order from 0, plus the shift, then the
//! activation, whichever path computes it, so the rows a caller asks for
//! ([`depthwise_rows_at`]: a 1×1 convolution computing a deferred depthwise one) are the bits of
//! the whole image's.

use super::super::kernels::{act, ActK, Window};
use super::super::par::{split_rows, vectorized_fn};

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
/// ([`crate::device::cpu::separable`]) computes ahead of each block of its pixels; the same bits
/// as the whole image's rows.
pub(in crate::device::cpu) fn depthwise_rows_at(
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
/// Output values a call computes at most (blocks of [`DW_PIXELS`] one after another along the
/// row, one block at least): at 32 channels a call's checks and set-up were a large part of a
/// block's work (112 × 112 × 32 alone: 24% less time in runs of 4 blocks), while longer runs
/// at 64 channels and more took 3–7% more (the next rows' prefetches asked for in bursts).
const DW_RUN_VALUES: usize = 512;

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
        let run_most = (DW_RUN_VALUES / (DW_PIXELS * c).max(1)).max(1);
        for (r, row) in rows.chunks_exact_mut(wo * c).enumerate() {
            let oy = oy0 + r;
            // the window's rows inside the image (all but at the top and bottom edges; the
            // columns are all inside for the blocks)
            let ky = win.taps_inside(oy, kh, h);
            // the input rows that the next output row reads and this one does not: a pixel's
            // share of their lines requested before each call (a block of four pixels or a run
            // of them asks for one or a run's worth of shares, so about a quarter of the lines
            // in the interior — as measured when each block was a call; asking for all of them
            // made the shapes in cache 3–7% slower — the hardware prefetcher following the rest)
            let ahead = next_rows(image, &win, oy);
            let lines = ahead.len().div_ceil(16);
            let per_pixel = lines.div_ceil(wo.max(1));
            let mut ox = 0;
            while ox < wo {
                // a run of blocks inside ([`DW_RUN_VALUES`]), or one pixel
                let blocks = match ox >= inner.start {
                    true => (inner.end.saturating_sub(ox) / DW_PIXELS).min(run_most),
                    false => 0,
                };
                let end = ox + (blocks * DW_PIXELS).max(1);
                prefetch_l2(ahead, ox * per_pixel..((ox + blocks.max(1)) * per_pixel).min(lines));
                let (at, o) = ((oy, ox), &mut row[ox * c..]);
                let taps = (ky.clone(), 0..kw);
                let run = (at, blocks);
                let epi = epilogue;
                if blocks > 0 && depthwise_block::<DW_PIXELS>(image, wt, win, taps, epi, run, o) {
                    ox = end;
                    continue;
                }
                // one pixel over the taps inside the image (the left and right edges, and the
                // columns after the last block), in registers when its taps' channels lie
                // less than 2 KiB apart ([`DW_PIXEL_MAX_C`])
                let taps = (ky.clone(), win.taps_inside(ox, kw, w));
                let one = (at, 1);
                let in_registers = c < DW_PIXEL_MAX_C;
                if in_registers && depthwise_block::<1>(image, wt, win, taps, epilogue, one, o) {
                    ox += 1;
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

/// The input rows that the `rows.len()` output rows after `rows` read and `rows` do not (the
/// next block's, for a caller computing blocks of rows: [`depthwise_rows_at`]).
pub(in crate::device::cpu) fn rows_after<'a>(
    (x, (h, w, c)): (&'a [f32], (usize, usize, usize)),
    win: &Window,
    rows: std::ops::Range<usize>,
) -> &'a [f32] {
    let (kh, s, pad) = (win.kernel.0, win.stride, win.pad);
    let end_of = |b: usize| ((b.max(1) - 1) * s + kh).saturating_sub(pad).min(h);
    let next = rows.end + rows.len();
    let (start, end) = (end_of(rows.end), end_of(next));
    &x[start.min(end) * w * c..end * w * c]
}

/// Asks for cache lines `lines` (of 16 values) of `x` to be fetched into L2.
#[inline(always)]
pub(in crate::device::cpu) fn prefetch_l2(x: &[f32], lines: std::ops::Range<usize>) {
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

/// `n` blocks of `P` neighbouring output pixels from `(oy, ox)` over the taps `taps` (rows,
/// columns of the window) — every tap of the window that lies inside the image, for each of
/// the pixels — channels
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
    ((oy, ox), n): ((usize, usize), usize),
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
        && n > 0
        && (P > 1 || n == 1)
        && (ox + n * P - 1) * s + kx.end <= w + pad
        && x.len() >= h * w * c
        && wt.len() >= kh * kw * c
        && o.len() >= n * P * c
        && c % DW_LANES == 0
        && (epilogue.0.is_empty() || epilogue.0.len() >= c);
    #[cfg(target_arch = "x86_64")]
    if in_bounds && super::super::par::avx512() {
        let whole_rows = kx == (0..kw);
        let g = DwGeometry {
            image: (w, c),
            kernel: (kh, kw),
            s,
            corner: ((oy * s).wrapping_sub(pad), (ox * s).wrapping_sub(pad)),
            taps: (ky, kx),
        };
        // SAFETY: AVX-512F is present; every tap of `g.taps` of the n·P pixels (one pixel when
        // P = 1) lies inside the h × w image of c channels (whole vectors) that `x` holds, the
        // weights hold kh·kw·c values, `o` n·P·c and the shift (if any) c (checked just above).
        let shift = epilogue.0;
        unsafe {
            match (kw, s, whole_rows) {
                _ if P == 1 => depthwise_pixel_avx512(x, wt, g, shift, o),
                (3, 1, true) => depthwise_block_avx512::<3, 1, P>(x, wt, (g, n), shift, o),
                (3, 2, true) => depthwise_block_avx512::<3, 2, P>(x, wt, (g, n), shift, o),
                _ => depthwise_block_avx512::<0, 0, P>(x, wt, (g, n), shift, o),
            }
        }
        // the activation over the blocks at once (per vector, inside the kernel, its dispatch
        // cost more than the kernel's loads: 5–10% of the layer)
        act(epilogue.1, &mut o[..n * P * c]);
        return true;
    }
    let _ = (in_bounds, x, h, w, epilogue, oy, ox, n, o, ky, kx);
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

/// [`depthwise_block`]'s kernel, `n` blocks of `P` pixels one after another: for a window `KW`
/// (= `kw`, every column of it read) wide at stride `S` (= `s`), each input vector of a row is
/// loaded once for the `P` pixels' taps that read it; `KW = 0`: any window and columns, read
/// tap by tap. The shift is added; the caller applies the activation.
///
/// # Safety
/// AVX-512F present; pixels `(corner.0 + ky, corner.1 + p·s + kx)` inside the image for every
/// tap of `taps` and `p < n·P` (wrapping corners allowed); `wt` holds `kh·kw·c` values, `o`
/// `n·P·c`, the shift (if any) `c`; `c` a multiple of 16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn depthwise_block_avx512<const KW: usize, const S: usize, const P: usize>(
    x: &[f32],
    wt: &[f32],
    (g, n): (DwGeometry, usize),
    shift: &[f32],
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    let ((w, c), kw, s) = (g.image, g.kernel.1, g.s);
    let iy0 = g.corner.0;
    let (xp, wp) = (x.as_ptr(), wt.as_ptr());
    for b in 0..n {
        let ix0 = g.corner.1.wrapping_add(b * P * s);
        let op = o.as_mut_ptr().add(b * P * c);
        for cb in (0..c).step_by(DW_LANES) {
            let mut acc = [_mm512_setzero_ps(); P];
            for ky in g.taps.0.clone() {
                // the pixel under tap (ky, kx) of output p:
                // index ((iy0 + ky)·w + ix0 + p·s + kx)·c
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
                _mm512_storeu_ps(op.add(p * c + cb), v);
            }
        }
    }
}

/// [`depthwise_block`]'s kernel for one pixel: the channels [`DW_PIXEL_VECTORS`] vectors at a
/// time, their chains side by side in registers (one vector's chain alone would wait on each
/// FMA; in memory, each FMA would wait on the store of the one before).
///
/// # Safety
/// As [`depthwise_block_avx512`], with `P = 1`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn depthwise_pixel_avx512(
    x: &[f32],
    wt: &[f32],
    g: DwGeometry,
    shift: &[f32],
    o: &mut [f32],
) {
    let c = g.image.1;
    let mut cb = 0;
    while cb < c {
        match (c - cb) / DW_LANES {
            4.. => depthwise_vectors::<4>(x, wt, &g, shift, (cb, o)),
            3 => depthwise_vectors::<3>(x, wt, &g, shift, (cb, o)),
            2 => depthwise_vectors::<2>(x, wt, &g, shift, (cb, o)),
            _ => depthwise_vectors::<1>(x, wt, &g, shift, (cb, o)),
        }
        cb += DW_PIXEL_VECTORS.min((c - cb) / DW_LANES) * DW_LANES;
    }
}

/// Channel vectors a one-pixel depthwise kernel keeps in registers at once.
const DW_PIXEL_VECTORS: usize = 4;

/// Channels from which a pixel at the edge goes through memory instead: its 9 taps' inputs
/// and weights, read a few vectors of each at a time, then lie a multiple of 2 KiB apart and
/// share L1 sets, where the loop through memory streams each tap's run of channels. Alone,
/// single-threaded (`cargo bench --bench cpu -- depthwise`, 2 interleaved runs): in registers,
/// 112 × 112 × 64 at stride 2 and 28 × 28 × 256 took 5–12% less time, 14 × 14 × 512 the same,
/// 7 × 7 × 1024 18% more.
const DW_PIXEL_MAX_C: usize = 512;

/// `V` vectors of channels from `cb` of one pixel ([`depthwise_pixel_avx512`]).
///
/// # Safety
/// As [`depthwise_pixel_avx512`]; `cb + 16·V ≤ c`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn depthwise_vectors<const V: usize>(
    x: &[f32],
    wt: &[f32],
    g: &DwGeometry,
    shift: &[f32],
    (cb, o): (usize, &mut [f32]),
) {
    use std::arch::x86_64::*;
    let ((w, c), kw) = (g.image, g.kernel.1);
    let (iy0, ix0) = g.corner;
    let (xp, wp) = (x.as_ptr(), wt.as_ptr());
    let mut acc = [_mm512_setzero_ps(); V];
    for ky in g.taps.0.clone() {
        for kx in g.taps.1.clone() {
            let px = (iy0.wrapping_add(ky) * w)
                .wrapping_add(ix0)
                .wrapping_add(kx);
            let (xi, f) = (xp.add(px * c + cb), wp.add((ky * kw + kx) * c + cb));
            for (v, acc) in acc.iter_mut().enumerate() {
                let (xv, fv) = (
                    _mm512_loadu_ps(xi.add(16 * v)),
                    _mm512_loadu_ps(f.add(16 * v)),
                );
                *acc = _mm512_fmadd_ps(xv, fv, *acc);
            }
        }
    }
    for (v, acc) in acc.iter().enumerate() {
        let mut r = *acc;
        if !shift.is_empty() {
            r = _mm512_add_ps(r, _mm512_loadu_ps(shift.as_ptr().add(cb + 16 * v)));
        }
        _mm512_storeu_ps(o.as_mut_ptr().add(cb + 16 * v), r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The next block's new input rows: at stride 1 (pad 1), output rows 4..8 read input rows
    /// 3..9 and rows 8..12 read 7..13, so 9..13 are new; at stride 2, rows 2..4 read 3..8 and
    /// 4..6 read 7..12: 8..12; past the image, nothing.
    #[test]
    fn the_rows_after_a_block_are_those_the_next_block_reads_first() {
        let (h, w, c) = (16, 3, 2);
        let x: Vec<f32> = (0..h * w * c).map(|i| i as f32).collect();
        let first_row = |s: &[f32]| s.first().map(|v| *v as usize / (w * c));
        for (stride, rows, want) in [
            (1, 4..8, Some((9, 4))),
            (2, 2..4, Some((8, 4))),
            (1, 12..16, None),
        ] {
            let out = (h + 2 - 3) / stride + 1;
            let win = Window {
                kernel: (3, 3),
                stride,
                pad: 1,
                out: (out, out),
            };
            let got = rows_after((&x, (h, w, c)), &win, rows.clone());
            let got = first_row(got).map(|r| (r, got.len() / (w * c)));
            assert_eq!(got, want, "stride {stride}, rows {rows:?}");
        }
    }
}
