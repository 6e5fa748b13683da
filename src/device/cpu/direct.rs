//! Direct convolution of images with few channels (a network's stem, reading the RGB image):
//! no unfolding, the window's values broadcast straight from the image into register tiles of
//! output pixels × output channels.
//!
//! Unfolded, such a layer is a GEMM with a short reduction (27 values for MobileNet's 3×3 stem,
//! 147 for ResNet's 7×7) and a tall, thin output: the row GEMM spends its time writing output
//! and starting micro-kernels, and the unfolding itself writes 9 or 49 copies of every pixel
//! (MobileNet's stem ran at 64 GFLOP/s against 190–200 for its later layers). Here a tile of
//! up to 12 pixels of one output row, all output channels (16 to 64: one to four vectors), is
//! accumulated over the window's taps in registers, shifted and activated there (ReLU, ReLU6),
//! and stored once — around the caches when the layer's output is too large for them
//! ([`Finish::stream`]).
//!
//! Each output is the same chain of fused multiply-adds as the unfolded GEMM's — over the taps
//! in (ky, kx, channel) order from zero, a tap outside the image multiplying a zero — so the
//! results are the same bits as the path it replaces (a test checks it), and a pixel's result
//! never depends on its tile.

#[cfg(target_arch = "x86_64")]
use super::activation::act_zmm;
use super::activation::{shift_act, ActK};
use super::kernels::Window;
use super::panels::{Panels, NR};
use super::par::vectorized_fn;
use super::rowgemm::Finish;

/// Input channels at most for a convolution to run directly: beyond a few, the unfolded GEMM's
/// reduction is long enough for the row GEMM.
const MAX_CHANNELS: usize = 4;

/// Output channels at most (four AVX-512 vectors: a tile of 6 pixels then fills 24 registers).
const MAX_OUT: usize = 64;

/// Weights (values) at most: every tile reads them all, so they must stay in L1 (16 KiB, half
/// of it). ResNet's 7×7 stem (9,408) ran 12% slower directly than unfolded (one thread, 224 ×
/// 224: 3.1 against 2.7 ms), its weights re-read from L2 by every tile; 3×3 stems (1,728 at
/// most) 1.6× faster (VGG-16's first layer 1.9 against 3.0 ms, MobileNet's 0.24 against 0.38).
const MAX_WEIGHTS: usize = 4096;

/// Whether an ungrouped convolution of `c` input and `co` output channels, `taps` window
/// positions, runs directly.
pub(super) fn applies(groups: usize, (c, co): (usize, usize), taps: usize) -> bool {
    groups == 1
        && c <= MAX_CHANNELS
        && co.is_multiple_of(16)
        && (16..=MAX_OUT).contains(&co)
        && taps * c * co <= MAX_WEIGHTS
}

/// The convolution's geometry: input `(h, w, c)` channels-last, the window, and the weights as
/// the row GEMM holds them (`K = kh·kw·c` rows in (ky, kx, channel) order, `co` columns).
/// `fin`: the shift and activation applied as the outputs are stored, when it is one the
/// registers apply ([`Finish::in_registers`]; else not applied).
#[derive(Clone, Copy)]
pub(super) struct Direct<'a> {
    pub(super) input: (usize, usize, usize),
    pub(super) win: Window,
    pub(super) panels: &'a Panels,
    pub(super) fin: Finish<'a>,
}

impl Direct<'_> {
    /// Output pixels `pixels` (row-major over the output image) into `out` (`[pixels][co]`),
    /// finished ([`Direct::fin`]) when that returns true.
    pub(super) fn block(&self, x: &[f32], pixels: std::ops::Range<usize>, out: &mut [f32]) -> bool {
        block_impl(self, x, pixels, out);
        if self.fin.stream {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: SSE is part of x86-64; the streamed lines reach memory before the block
            // is seen as done
            unsafe {
                std::arch::x86_64::_mm_sfence()
            };
        }
        self.fin.in_registers()
    }

    /// The finish an output pixel's values take (`act(v + shift)`), when the block applies it.
    #[inline(always)]
    fn finish_pixel(&self, out: &mut [f32]) {
        if !self.fin.in_registers() {
            return;
        }
        shift_act(self.fin.act, out, self.fin.shift);
    }

    /// Output columns whose every tap lies inside the image along x, and whether output row
    /// `oy`'s taps all lie inside along y.
    fn interior(&self, oy: usize) -> (std::ops::Range<usize>, bool) {
        let ((h, w, _), win) = (self.input, self.win);
        let kh = win.kernel.0;
        (win.inner_columns(w), win.taps_inside(oy, kh, h) == (0..kh))
    }

    /// One output pixel, any window position, channels in `co`-wide rows of `out`: the chain
    /// of every tap, a tap outside the image multiplying a zero (inline: it vectorises as its
    /// caller is compiled).
    #[inline(always)]
    fn pixel(&self, x: &[f32], (oy, ox): (usize, usize), out: &mut [f32]) {
        let ((h, w, c), win) = (self.input, self.win);
        let (kh, kw) = win.kernel;
        let co = self.panels.n;
        out[..co].fill(0.0);
        for ky in 0..kh {
            let iy = win.tap(oy, ky, h);
            for kx in 0..kw {
                let ix = win.tap(ox, kx, w);
                for ci in 0..c {
                    let v = match (iy, ix) {
                        (Some(iy), Some(ix)) => x[(iy * w + ix) * c + ci],
                        _ => 0.0,
                    };
                    let t = (ky * kw + kx) * c + ci;
                    for (q, o) in out[..co].chunks_mut(NR).enumerate() {
                        let f = &self.panels.from(t, q * NR)[..o.len()];
                        o.iter_mut()
                            .zip(f)
                            .for_each(|(o, f)| *o = v.mul_add(*f, *o));
                    }
                }
            }
        }
    }
}

vectorized_fn! {
    fn block_impl(d: &Direct, x: &[f32], pixels: std::ops::Range<usize>, out: &mut [f32]) {
        let co = d.panels.n;
        let wo = d.win.out.1.max(1);
        let mut px = pixels.start;
        while px < pixels.end {
            let (oy, ox) = (px / wo, px % wo);
            let o = &mut out[(px - pixels.start) * co..];
            let (cols, rows) = d.interior(oy);
            // interior pixels of this row from `ox`, at most to the block's end
            let run = match rows && cols.contains(&ox) {
                true => (cols.end - ox).min(pixels.end - px),
                false => 0,
            };
            if run > 0 && tile(d, x, (oy, ox), run, o) {
                px += run;
            } else {
                d.pixel(x, (oy, ox), o);
                d.finish_pixel(&mut o[..co]);
                px += 1;
            }
        }
    }
}

/// `n` neighbouring output pixels of row `oy` from column `ox`, every tap inside the image, in
/// AVX-512 register tiles; false, with nothing done, without AVX-512.
#[inline(always)]
fn tile(d: &Direct, x: &[f32], (oy, ox): (usize, usize), n: usize, out: &mut [f32]) -> bool {
    #[cfg(target_arch = "x86_64")]
    if super::par::avx512() {
        let ((h, w, c), win) = (d.input, d.win);
        let ((kh, kw), s) = (win.kernel, win.stride);
        let (iy0, ix0) = (oy * s - win.pad, ox * s - win.pad);
        let co = d.panels.n;
        assert!(
            iy0 + kh <= h
                && ix0 + (n - 1) * s + kw <= w
                && x.len() >= h * w * c
                && out.len() >= n * co
                && d.panels.data.len() >= co.div_ceil(NR) * kh * kw * c * NR,
            "direct convolution: a tile out of bounds"
        );
        let g = Geometry {
            row: w * c,
            step: s * c,
            taps: (kh, kw * c),
            k: kh * kw * c,
        };
        let x = x[(iy0 * w + ix0) * c..].as_ptr();
        let (wt, o) = (d.panels.data.as_ptr(), out.as_mut_ptr());
        let fin = match d.fin.in_registers() {
            true => d.fin,
            false => Finish::NONE,
        };
        assert!(
            fin.shift.is_empty() || fin.shift.len() >= co,
            "direct convolution: a shift shorter than the output channels"
        );
        // pixels a tile: as many as 24 accumulators hold (12 at most)
        let most = 24 / (co / 16).max(1);
        let mut done = 0;
        while done < n {
            let m = (n - done).min(most.min(12));
            // SAFETY: AVX-512F is present; the pixels `done..done + m` and every tap of their
            // windows lie inside the image, the panels hold `k` rows of every column panel,
            // and `out` holds `n · co` values (all checked above).
            unsafe {
                let (x, o) = (x.add(done * g.step), o.add(done * co));
                match co / 16 {
                    1 => tile_avx512::<1, 12>(x, wt, g, (m, o), fin),
                    2 => tile_avx512::<2, 12>(x, wt, g, (m, o), fin),
                    3 => tile_avx512::<3, 8>(x, wt, g, (m, o), fin),
                    _ => tile_avx512::<4, 6>(x, wt, g, (m, o), fin),
                }
            }
            done += m;
        }
        return true;
    }
    let _ = (d, x, oy, ox, n, out);
    false
}

/// A tile's strides, in values: between input rows, between neighbouring pixels' windows; the
/// window's rows and the values in each (`kw · c`, contiguous in a channels-last image); and
/// the taps in all (`kh · kw · c`, the panels' rows).
#[derive(Clone, Copy)]
struct Geometry {
    row: usize,
    step: usize,
    taps: (usize, usize),
    k: usize,
}

/// `m ≤ P` pixels (`P` at most used) × `V` vectors of output channels: `x` the first pixel's
/// window corner, the next pixels `step` values on; `wt` the panels (`[co / NR][k][NR]`); `o`
/// `m` rows of `16·V` outputs, finished by `fin` (a shift, ReLU or ReLU6, or nothing).
///
/// # Safety
/// AVX-512F present; every tap of the `m` pixels readable from `x`; the panels hold `k` rows
/// of `ceil(16·V / NR)` panels; `o` holds `m · 16·V` values; the shift, unless empty, `16·V`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const V: usize, const P: usize>(
    x: *const f32,
    wt: *const f32,
    g: Geometry,
    (m, o): (usize, *mut f32),
    fin: Finish,
) {
    use std::arch::x86_64::*;
    // pixels past `m` read pixel 0's window (their results are dropped): every loop over the
    // tile has a constant length, so that the accumulators stay in registers
    let at: [usize; P] = std::array::from_fn(|p| if p < m { p * g.step } else { 0 });
    // column vector v's weights: panel v / 2, its half v % 2, one row a tap
    let wv: [*const f32; V] = std::array::from_fn(|v| wt.add((v / 2) * g.k * NR + (v % 2) * 16));
    let mut acc = [[_mm512_setzero_ps(); V]; P];
    let (kh, run) = g.taps;
    for ky in 0..kh {
        let r = x.add(ky * g.row);
        for j in 0..run {
            let t = ky * run + j;
            let f: [__m512; V] = std::array::from_fn(|v| _mm512_loadu_ps(wv[v].add(t * NR)));
            for (p, acc_p) in acc.iter_mut().enumerate() {
                let xv = _mm512_set1_ps(*r.add(at[p] + j));
                for (a, f) in acc_p.iter_mut().zip(&f) {
                    *a = _mm512_fmadd_ps(xv, *f, *a);
                }
            }
        }
    }
    if !fin.shift.is_empty() {
        let s: [__m512; V] =
            std::array::from_fn(|v| _mm512_loadu_ps(fin.shift.as_ptr().add(16 * v)));
        for acc_p in acc.iter_mut() {
            for (a, s) in acc_p.iter_mut().zip(&s) {
                *a = _mm512_add_ps(*a, *s);
            }
        }
    }
    if matches!(fin.act, ActK::Relu | ActK::Relu6) {
        acc.iter_mut()
            .flatten()
            .for_each(|a| *a = act_zmm(fin.act, *a));
    }
    // whole aligned lines around the caches, when streaming
    let stream = fin.stream && (o as usize).is_multiple_of(64);
    for (p, acc_p) in acc.iter().enumerate() {
        if p < m {
            for (v, a) in acc_p.iter().enumerate() {
                let at = o.add(p * 16 * V + v * 16);
                match stream {
                    true => _mm512_stream_ps(at, *a),
                    false => _mm512_storeu_ps(at, *a),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
