//! 3×3 convolutions at stride 1 by Winograd's minimal filtering F(2×2, 3×3) (Lavin and Gray,
//! "Fast Algorithms for Convolutional Neural Networks", CVPR 2016): each 2×2 tile of output
//! pixels comes from a 4×4 tile of input, transformed (`Bᵀ d B`, additions only), multiplied
//! point by point with the filter transformed once at prepare time (`G g Gᵀ`, [`Winograd`]),
//! and transformed back (`Aᵀ m A`). Over a block of tiles the point-by-point products are 16
//! GEMMs, one per point of the 4×4 transform (tiles × input channels by input × output
//! channels): 16 multiply-adds per tile and channel pair where the direct convolution takes 36,
//! so 2.25× fewer, for transforms whose cost grows with the channels only, not their product.
//!
//! The arithmetic differs from the direct convolution's (the filter's transform rounds, and
//! each output sums 16 products of transformed values instead of 9 of raw ones): results agree
//! to rounding, not bit for bit, with the unfolded GEMM. They do not depend on the batch, the
//! block or the threads: every tile is transformed alone, and the row GEMM gives each row the
//! same bits whatever the number of rows ([`super::rowgemm`]). Images are channels-last, so
//! each transform runs along 16 contiguous channels at a time.

use super::panels::Panels;
use super::par::vectorized_fn;
use super::rowgemm;
use std::ops::Range;

/// Points of the transform: a 4 × 4 input tile.
const POINTS: usize = 16;
/// Channels a transform handles at once (one AVX-512 vector).
const LANES: usize = 16;
/// Transformed values (input and products) a block of tiles aims to hold: 256 Ki values, 1 MiB,
/// an L2's worth on the machines we measure on, so that the 16 GEMMs read the transformed
/// input, and the inverse transform their products, from cache.
const BLOCK_VALUES: usize = 256 * 1024;
/// Bounds on the tiles of a block: enough rows for the GEMMs to reuse each transformed weight
/// (read from L3 or memory) over many tiles; few enough to stay in L2.
const BLOCK_TILES: (usize, usize) = (32, 256);

/// Whether a convolution runs by Winograd on the CPU device: a 3×3 window at stride 1 with one
/// pixel of padding (the output the input's size), ungrouped, with input and output channels in
/// whole vectors of 16 (every such layer of the zoo; an RGB stem's 3 channels would make
/// 16 GEMMs of depth 3).
pub(super) fn applies(
    (kernel, stride, pad, groups): ((usize, usize), usize, usize, usize),
    (c, co): (usize, usize),
) -> bool {
    kernel == (3, 3)
        && stride == 1
        && pad == 1
        && groups == 1
        && c.is_multiple_of(LANES)
        && co.is_multiple_of(LANES)
        && c > 0
        && co > 0
}

/// A convolution's filters transformed, `U = G g Gᵀ` for every input and output channel pair:
/// one `C × Cout` matrix per point of the 4 × 4 transform, packed for the row GEMM.
#[derive(Clone, Debug)]
pub(super) struct Winograd {
    u: Vec<Panels>,
    c: usize,
    co: usize,
}

impl Winograd {
    /// Transforms the weights `w` (`[9·C][Cout]`, rows in (ky, kx, channel) order, as the
    /// unfolding reads them): in f64, each value rounded once.
    pub(super) fn new(w: &[f32], c: usize, co: usize) -> Winograd {
        const G: [[f64; 3]; 4] = [
            [1.0, 0.0, 0.0],
            [0.5, 0.5, 0.5],
            [0.5, -0.5, 0.5],
            [0.0, 0.0, 1.0],
        ];
        let mut u = vec![vec![0.0f32; c * co]; POINTS];
        for ci in 0..c {
            for o in 0..co {
                let g = |i: usize, j: usize| f64::from(w[((i * 3 + j) * c + ci) * co + o]);
                for (a, ga) in G.iter().enumerate() {
                    for (b, gb) in G.iter().enumerate() {
                        let mut s = 0.0;
                        for (i, gai) in ga.iter().enumerate() {
                            for (j, gbj) in gb.iter().enumerate() {
                                s += gai * g(i, j) * gbj;
                            }
                        }
                        u[a * 4 + b][ci * co + o] = s as f32;
                    }
                }
            }
        }
        let u = u.iter().map(|m| Panels::pack(m, c, co)).collect();
        Winograd { u, c, co }
    }

    /// Output pixels per block of an `h × w` image: whole rows of tiles (two rows of pixels
    /// each), about [`BLOCK_VALUES`] of transformed values, in a number of blocks that the
    /// `threads` share evenly ([`super::par::split_rows`] hands each a contiguous run).
    pub(super) fn block_pixels(&self, (h, w): (usize, usize), threads: usize) -> usize {
        let (th, target) = (h.div_ceil(2), self.block_tile_rows(w));
        let per_thread = th.div_ceil(threads.max(1));
        let rows = per_thread.div_ceil(per_thread.div_ceil(target).max(1));
        rows.max(1) * 2 * w
    }

    /// Rows of tiles a block holds at most, on an image `w` pixels wide.
    fn block_tile_rows(&self, w: usize) -> usize {
        let tiles =
            (BLOCK_VALUES / (POINTS * (self.c + self.co))).clamp(BLOCK_TILES.0, BLOCK_TILES.1);
        tiles.div_ceil(w.div_ceil(2)).max(1)
    }

    /// Scratch a thread needs for the largest block of an `h × w` image: the transformed tiles,
    /// their products, one row of zeros (the padding).
    pub(super) fn scratch_len(&self, (h, w): (usize, usize)) -> usize {
        let rows = self.block_tile_rows(w).min(h.div_ceil(2));
        POINTS * rows * w.div_ceil(2) * (self.c + self.co) + self.c
    }

    /// Output pixels `pixels` (whole rows of tiles: it starts on an even row of the image, and
    /// ends on one or at the image's end) of the `[H][W][C]` image `x` into `out`
    /// (`[pixels][Cout]`), before any shift or activation.
    pub(super) fn block(
        &self,
        x: &[f32],
        (h, w): (usize, usize),
        pixels: Range<usize>,
        out: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (c, co) = (self.c, self.co);
        let tw = w.div_ceil(2);
        let tile_rows = pixels.start / (2 * w)..pixels.end.div_ceil(2 * w);
        let tiles = tile_rows.len() * tw;
        assert!(
            pixels.start.is_multiple_of(2 * w) && scratch.len() >= POINTS * tiles * (c + co) + c,
            "winograd: a block of {pixels:?} on a {h}×{w} image, scratch {}",
            scratch.len()
        );
        let (v, rest) = scratch.split_at_mut(POINTS * tiles * c);
        let (m, rest) = rest.split_at_mut(POINTS * tiles * co);
        let zero = &mut rest[..c];
        zero.fill(0.0);
        let image = Image { x, h, w, c };
        input_tiles(&image, tile_rows.clone(), zero, v);
        for (k, u) in self.u.iter().enumerate() {
            let a = &v[k * tiles * c..(k + 1) * tiles * c];
            let prod = &mut m[k * tiles * co..(k + 1) * tiles * co];
            rowgemm::gemm_panels((tiles, a, c), u, (prod, co));
        }
        let first_row = tile_rows.start * 2;
        output_tiles(m, (tiles, co), (h, w), (first_row, tile_rows), out);
    }
}

/// An `[H][W][C]` image.
struct Image<'a> {
    x: &'a [f32],
    h: usize,
    w: usize,
    c: usize,
}

impl Image<'_> {
    /// Pixel `(y, x)`'s channels, counted from one pixel above and left of the image (the
    /// padding), or `zero` outside it.
    #[inline(always)]
    fn pixel<'s>(&'s self, (y, x): (usize, usize), zero: &'s [f32]) -> &'s [f32] {
        match (y.checked_sub(1), x.checked_sub(1)) {
            (Some(y), Some(x)) if y < self.h && x < self.w => {
                &self.x[(y * self.w + x) * self.c..][..self.c]
            }
            _ => zero,
        }
    }
}

vectorized_fn! {
    /// `V = Bᵀ d B` for every tile of rows `tile_rows` and every channel, into `v`
    /// (`[16][tiles][C]`): tile `(ty, tx)` reads input rows `2ty − 1 ..= 2ty + 2` and columns
    /// `2tx − 1 ..= 2tx + 2`, zeros outside the image.
    fn input_tiles(image: &Image, tile_rows: Range<usize>, zero: &[f32], v: &mut [f32]) {
        let (c, tw) = (image.c, image.w.div_ceil(2));
        let tiles = tile_rows.len() * tw;
        for (ty, t0) in tile_rows.zip((0..).step_by(tw)) {
            for tx in 0..tw {
                let src: [&[f32]; POINTS] =
                    std::array::from_fn(|k| image.pixel((2 * ty + k / 4, 2 * tx + k % 4), zero));
                for c0 in (0..c).step_by(LANES) {
                    let mut d = [[0.0f32; LANES]; POINTS];
                    for (dk, s) in d.iter_mut().zip(&src) {
                        dk.copy_from_slice(&s[c0..c0 + LANES]);
                    }
                    let out = transform_in(&d);
                    for (k, o) in out.iter().enumerate() {
                        let at = (k * tiles + t0 + tx) * c + c0;
                        v[at..at + LANES].copy_from_slice(o);
                    }
                }
            }
        }
    }
}

/// `Bᵀ d B` of one 4 × 4 tile (points row-major), 16 channels at a time.
#[inline(always)]
fn transform_in(d: &[[f32; LANES]; POINTS]) -> [[f32; LANES]; POINTS] {
    let mut v = [[0.0f32; LANES]; POINTS];
    for l in 0..LANES {
        let at = |i: usize, j: usize| d[i * 4 + j][l];
        // `Bᵀ` down each column, then along each row
        let cols: [[f32; 4]; 4] =
            std::array::from_fn(|j| bt([at(0, j), at(1, j), at(2, j), at(3, j)]));
        for i in 0..4 {
            let row = bt([cols[0][i], cols[1][i], cols[2][i], cols[3][i]]);
            for (b, x) in row.into_iter().enumerate() {
                v[i * 4 + b][l] = x;
            }
        }
    }
    v
}

/// `Bᵀ x` for `Bᵀ = [[1, 0, −1, 0], [0, 1, 1, 0], [0, −1, 1, 0], [0, 1, 0, −1]]`.
#[inline(always)]
fn bt([x0, x1, x2, x3]: [f32; 4]) -> [f32; 4] {
    [x0 - x2, x1 + x2, x2 - x1, x1 - x3]
}

vectorized_fn! {
    /// `Y = Aᵀ m A` of every tile's products `m` (`[16][tiles][Cout]`) into the output pixels
    /// of rows `first_row..` (`[pixels][Cout]`), the tiles' parts past the image's edge dropped.
    fn output_tiles(
        m: &[f32],
        shape: (usize, usize),
        image: (usize, usize),
        rows: (usize, Range<usize>),
        out: &mut [f32],
    ) {
        let ((tiles, co), (h, w), (first_row, tile_rows)) = (shape, image, rows);
        let tw = w.div_ceil(2);
        for (ty, t0) in tile_rows.zip((0..).step_by(tw)) {
            for tx in 0..tw {
                for c0 in (0..co).step_by(LANES) {
                    let mut p = [[0.0f32; LANES]; POINTS];
                    for (k, pk) in p.iter_mut().enumerate() {
                        let at = (k * tiles + t0 + tx) * co + c0;
                        pk.copy_from_slice(&m[at..at + LANES]);
                    }
                    let y = transform_out(&p);
                    for (q, yq) in y.iter().enumerate() {
                        let (oy, ox) = (2 * ty + q / 2, 2 * tx + q % 2);
                        if oy < h && ox < w {
                            let at = ((oy - first_row) * w + ox) * co + c0;
                            out[at..at + LANES].copy_from_slice(yq);
                        }
                    }
                }
            }
        }
    }
}

/// `Aᵀ m A` of one tile's 4 × 4 products: its 2 × 2 outputs (row-major).
#[inline(always)]
fn transform_out(m: &[[f32; LANES]; POINTS]) -> [[f32; LANES]; 4] {
    let mut y = [[0.0f32; LANES]; 4];
    for l in 0..LANES {
        let at = |i: usize, j: usize| m[i * 4 + j][l];
        // `Aᵀ` down each column, then along each row
        let cols: [[f32; 2]; 4] =
            std::array::from_fn(|j| at_([at(0, j), at(1, j), at(2, j), at(3, j)]));
        for r in 0..2 {
            let row = at_([cols[0][r], cols[1][r], cols[2][r], cols[3][r]]);
            y[r * 2][l] = row[0];
            y[r * 2 + 1][l] = row[1];
        }
    }
    y
}

/// `Aᵀ x` for `Aᵀ = [[1, 1, 1, 0], [0, 1, −1, −1]]`.
#[inline(always)]
fn at_([x0, x1, x2, x3]: [f32; 4]) -> [f32; 2] {
    [x0 + x1 + x2, x1 - x2 - x3]
}

#[cfg(test)]
mod tests;
