//! 3×3 convolutions at stride 1 by Winograd's minimal filtering F(m×m, 3×3) (Lavin and Gray,
//! "Fast Algorithms for Convolutional Neural Networks", CVPR 2016): each m × m tile of output
//! pixels comes from an α × α tile of input (α = m + 2), transformed (`Bᵀ d B`), multiplied
//! point by point with the filter transformed once at prepare time (`G g Gᵀ`, [`Winograd`]),
//! and transformed back (`Aᵀ m A`). Over a block of tiles the point-by-point products are α²
//! GEMMs, one per point of the transform (tiles × input channels by input × output channels):
//! α²/m² multiply-adds per output pixel and channel pair where the direct convolution takes 9,
//! for transforms whose cost grows with the channels only, not their product. F(4×4, 3×3)
//! (36 points: 2.25 multiply-adds, 4× fewer) runs on large images of many channels
//! ([`F4_MIN_SIDE`], [`F4_MIN_CHANNELS`]); the others take F(2×2, 3×3) (16 points: 4, 2.25×
//! fewer): small images have few tiles to share each transformed weight (4× the filter's size,
//! read from memory at batch 1), and few channels make short GEMMs beside the transforms.
//!
//! The arithmetic differs from the direct convolution's (the filter's transform rounds, and
//! each output sums α² products of transformed values instead of 9 of raw ones): results agree
//! to rounding, not bit for bit, with the unfolded GEMM. They do not depend on the batch, the
//! block or the threads: every tile is transformed alone, and the row GEMM gives each row the
//! same bits whatever the number of rows ([`super::rowgemm`]). Images are channels-last, so
//! each transform runs along 16 contiguous channels at a time.

use super::panels::Panels;
use super::par::vectorized_fn;
use super::rowgemm;
use std::ops::Range;

/// Channels a transform handles at once (one AVX-512 vector).
const LANES: usize = 16;
/// Transformed values (input and products) a block of tiles aims to hold: 256 Ki values, 1 MiB,
/// an L2's worth on the machines we measure on, so that the GEMMs read the transformed input,
/// and the inverse transform their products, from cache.
const BLOCK_VALUES: usize = 256 * 1024;
/// Bounds on the tiles of a block: enough rows for the GEMMs to reuse each transformed weight
/// (read from L3 or memory) over many tiles; few enough to stay in L2.
const BLOCK_TILES: (usize, usize) = (32, 256);
/// F(4×4, 3×3) runs on images whose sides both have at least this many pixels, of at least
/// [`F4_MIN_CHANNELS`] input channels (VGG-16's 56 × 56 and 28 × 28 stages of 256 and 512
/// channels); other images take F(2×2, 3×3). Measured per layer on VGG-16 at batch 1
/// (`whole-nodes vgg16 1`, 2-core EPYC VM), F(4×4) against F(2×2): 28 × 28 × 512, 12.3 → 7.1 ms;
/// 56 × 56 × 256, 8.8 → 7.5 ms; but 56 × 56 × 128, 4.5 → 4.4; 112 × 112 × 128, 9.7 → 10.4;
/// 224 × 224 × 64, 12.4 → 15.4 ms (few channels: the GEMMs are short and the transforms
/// weigh more). At 14 × 14 and batch 1, F(4×4)'s 16 tiles would read 9.4 MB of transformed
/// weights for 38 M multiply-adds (memory-bound), F(2×2)'s 49 tiles 4.2 MB for 51 M.
const F4_MIN_SIDE: usize = 28;
const F4_MIN_CHANNELS: usize = 256;
/// Tiles an F(4×4) block holds at least: its transformed weights (36 matrices, 9.4 MB at 256
/// channels) are read again for each block, so blocks of fewer tiles than F(2×2)'s made the
/// 56 × 56 × 256 layers 18% slower than F(2×2) instead of 15% faster.
const F4_BLOCK_TILES: usize = 128;

/// Whether a convolution runs by Winograd on the CPU device: a 3×3 window at stride 1 with one
/// pixel of padding (the output the input's size), ungrouped, with input and output channels in
/// whole vectors of 16 (every such layer of the zoo; an RGB stem's 3 channels would make
/// GEMMs of depth 3).
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
/// one `C × Cout` matrix per point of the α × α transform, packed for the row GEMM.
#[derive(Clone, Debug)]
pub(super) struct Winograd {
    u: Vec<Panels>,
    c: usize,
    co: usize,
    /// Output pixels a tile's side (`m`: 2 or 4).
    m: usize,
}

/// `G` of F(2×2, 3×3) (4 × 3) and F(4×4, 3×3) (6 × 3), as Lavin and Gray give them.
const G2: [[f64; 3]; 4] = [
    [1.0, 0.0, 0.0],
    [0.5, 0.5, 0.5],
    [0.5, -0.5, 0.5],
    [0.0, 0.0, 1.0],
];
const G4: [[f64; 3]; 6] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

impl Winograd {
    /// Transforms the weights `w` (`[9·C][Cout]`, rows in (ky, kx, channel) order, as the
    /// unfolding reads them) of a convolution of `ho × wo` output pixels: in f64, each value
    /// rounded once.
    pub(super) fn new(w: &[f32], (c, co): (usize, usize), (ho, wo): (usize, usize)) -> Winograd {
        let m = match ho.min(wo) >= F4_MIN_SIDE && c >= F4_MIN_CHANNELS {
            true => 4,
            false => 2,
        };
        Self::with_tile(w, (c, co), m)
    }

    /// [`Self::new`] with tiles of `m × m` output pixels (4: F(4×4, 3×3); else F(2×2, 3×3)).
    fn with_tile(w: &[f32], (c, co): (usize, usize), m: usize) -> Winograd {
        let m = if m == 4 { 4 } else { 2 };
        let g: &[[f64; 3]] = if m == 4 { &G4 } else { &G2 };
        let alpha = g.len();
        let mut u = vec![vec![0.0f32; c * co]; alpha * alpha];
        for ci in 0..c {
            for o in 0..co {
                let f = |i: usize, j: usize| f64::from(w[((i * 3 + j) * c + ci) * co + o]);
                // `G g` (α × 3, α ≤ 6), then `(G g) Gᵀ`
                let mut gf = [[0.0f64; 3]; 6];
                for (row, ga) in gf.iter_mut().zip(g) {
                    *row = std::array::from_fn(|j| (0..3).map(|i| ga[i] * f(i, j)).sum());
                }
                for (a, row) in gf[..alpha].iter().enumerate() {
                    for (b, gb) in g.iter().enumerate() {
                        let s: f64 = row.iter().zip(gb).map(|(x, y)| x * y).sum();
                        u[a * alpha + b][ci * co + o] = s as f32;
                    }
                }
            }
        }
        let u = u.iter().map(|x| Panels::pack(x, c, co)).collect();
        Winograd { u, c, co, m }
    }

    /// Points of the transform (α²).
    fn points(&self) -> usize {
        self.u.len()
    }

    /// Output pixels per block of an `h × w` image: whole rows of tiles (`m` rows of pixels
    /// each), about [`BLOCK_VALUES`] of transformed values, in a number of blocks that the
    /// `threads` share evenly ([`super::par::split_rows`] hands each a contiguous run).
    pub(super) fn block_pixels(&self, (h, w): (usize, usize), threads: usize) -> usize {
        let (th, target) = (h.div_ceil(self.m), self.block_tile_rows(w));
        let per_thread = th.div_ceil(threads.max(1));
        let rows = per_thread.div_ceil(per_thread.div_ceil(target).max(1));
        rows.max(1) * self.m * w
    }

    /// Rows of tiles a block holds at most, on an image `w` pixels wide.
    fn block_tile_rows(&self, w: usize) -> usize {
        let per_tile = self.points() * (self.c + self.co);
        let least = if self.m == 4 {
            F4_BLOCK_TILES
        } else {
            BLOCK_TILES.0
        };
        let tiles = (BLOCK_VALUES / per_tile).clamp(least, BLOCK_TILES.1);
        tiles.div_ceil(w.div_ceil(self.m)).max(1)
    }

    /// Scratch a thread needs for the largest block of an `h × w` image: the transformed tiles,
    /// their products, one row of zeros (the padding).
    pub(super) fn scratch_len(&self, (h, w): (usize, usize)) -> usize {
        let rows = self.block_tile_rows(w).min(h.div_ceil(self.m));
        self.points() * rows * w.div_ceil(self.m) * (self.c + self.co) + self.c
    }

    /// Output pixels `pixels` (whole rows of tiles: it starts on a row of the image that is a
    /// multiple of `m`, and ends on one or at the image's end) of the `[H][W][C]` image `x` into
    /// `out` (`[pixels][Cout]`), before any shift or activation.
    pub(super) fn block(
        &self,
        x: &[f32],
        (h, w): (usize, usize),
        pixels: Range<usize>,
        out: &mut [f32],
        scratch: &mut [f32],
    ) {
        let (c, co, m, points) = (self.c, self.co, self.m, self.points());
        let tile_rows = pixels.start / (m * w)..pixels.end.div_ceil(m * w);
        let tiles = tile_rows.len() * w.div_ceil(m);
        assert!(
            pixels.start.is_multiple_of(m * w) && scratch.len() >= points * tiles * (c + co) + c,
            "winograd: a block of {pixels:?} on a {h}×{w} image, scratch {}",
            scratch.len()
        );
        let (v, rest) = scratch.split_at_mut(points * tiles * c);
        let (prods, rest) = rest.split_at_mut(points * tiles * co);
        let zero = &mut rest[..c];
        zero.fill(0.0);
        let image = Image { x, h, w, c };
        match m {
            4 => input_tiles_f4(&image, tile_rows.clone(), zero, v),
            _ => input_tiles_f2(&image, tile_rows.clone(), zero, v),
        }
        for (k, u) in self.u.iter().enumerate() {
            let a = &v[k * tiles * c..(k + 1) * tiles * c];
            let prod = &mut prods[k * tiles * co..(k + 1) * tiles * co];
            rowgemm::gemm_panels((tiles, a, c), u, (prod, co));
        }
        let rows = (tile_rows.start * m, tile_rows);
        match m {
            4 => output_tiles_f4(prods, (tiles, co), (h, w), rows, out),
            _ => output_tiles_f2(prods, (tiles, co), (h, w), rows, out),
        }
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
    /// [`input_tiles`] for F(2×2, 3×3).
    fn input_tiles_f2(image: &Image, tile_rows: Range<usize>, zero: &[f32], v: &mut [f32]) {
        input_tiles::<F2, 4, 2, 16>(image, tile_rows, zero, v)
    }
}

vectorized_fn! {
    /// [`input_tiles`] for F(4×4, 3×3).
    fn input_tiles_f4(image: &Image, tile_rows: Range<usize>, zero: &[f32], v: &mut [f32]) {
        input_tiles::<F4, 6, 4, 36>(image, tile_rows, zero, v)
    }
}

/// `V = Bᵀ d B` of transform `T` for every tile of rows `tile_rows` and every channel, into
/// `v` (`[P][tiles][C]`, `P = A²` points): tile `(ty, tx)` reads input rows from `M·ty − 1`
/// and columns from `M·tx − 1` (`A` of each), zeros outside the image.
#[inline(always)]
fn input_tiles<T: Transform<A, M>, const A: usize, const M: usize, const P: usize>(
    image: &Image,
    tile_rows: Range<usize>,
    zero: &[f32],
    v: &mut [f32],
) {
    let (m, bt) = (M, T::bt);
    let (c, tw) = (image.c, image.w.div_ceil(m));
    let tiles = tile_rows.len() * tw;
    for (ty, t0) in tile_rows.zip((0..).step_by(tw)) {
        for tx in 0..tw {
            let src: [&[f32]; P] =
                std::array::from_fn(|k| image.pixel((m * ty + k / A, m * tx + k % A), zero));
            for c0 in (0..c).step_by(LANES) {
                let mut d = [[0.0f32; LANES]; P];
                for (dk, s) in d.iter_mut().zip(&src) {
                    dk.copy_from_slice(&s[c0..c0 + LANES]);
                }
                let mut out = [[0.0f32; LANES]; P];
                for l in 0..LANES {
                    // `Bᵀ` down each column, then along each row
                    let cols: [[f32; A]; A] =
                        std::array::from_fn(|j| bt(std::array::from_fn(|i| d[i * A + j][l])));
                    for i in 0..A {
                        let row = bt(std::array::from_fn(|j| cols[j][i]));
                        for (b, x) in row.into_iter().enumerate() {
                            out[i * A + b][l] = x;
                        }
                    }
                }
                for (k, o) in out.iter().enumerate() {
                    let at = (k * tiles + t0 + tx) * c + c0;
                    v[at..at + LANES].copy_from_slice(o);
                }
            }
        }
    }
}

vectorized_fn! {
    /// [`output_tiles`] for F(2×2, 3×3).
    fn output_tiles_f2(
        prods: &[f32],
        shape: (usize, usize),
        image: (usize, usize),
        rows: (usize, Range<usize>),
        out: &mut [f32],
    ) {
        output_tiles::<F2, 4, 2, 16>(prods, shape, image, rows, out)
    }
}

vectorized_fn! {
    /// [`output_tiles`] for F(4×4, 3×3).
    fn output_tiles_f4(
        prods: &[f32],
        shape: (usize, usize),
        image: (usize, usize),
        rows: (usize, Range<usize>),
        out: &mut [f32],
    ) {
        output_tiles::<F4, 6, 4, 36>(prods, shape, image, rows, out)
    }
}

/// `Y = Aᵀ p A` of transform `T` of every tile's products `prods` (`[P][tiles][Cout]`) into
/// the output pixels of rows `first_row..` (`[pixels][Cout]`), the tiles' parts past the
/// image's edge dropped.
#[inline(always)]
fn output_tiles<T: Transform<A, M>, const A: usize, const M: usize, const P: usize>(
    prods: &[f32],
    (tiles, co): (usize, usize),
    (h, w): (usize, usize),
    (first_row, tile_rows): (usize, Range<usize>),
    out: &mut [f32],
) {
    let (tw, at) = (w.div_ceil(M), T::at);
    for (ty, t0) in tile_rows.zip((0..).step_by(tw)) {
        for tx in 0..tw {
            for c0 in (0..co).step_by(LANES) {
                let mut p = [[0.0f32; LANES]; P];
                for (k, pk) in p.iter_mut().enumerate() {
                    let i = (k * tiles + t0 + tx) * co + c0;
                    pk.copy_from_slice(&prods[i..i + LANES]);
                }
                let mut y = [[[0.0f32; LANES]; M]; M];
                for l in 0..LANES {
                    // `Aᵀ` down each column, then along each row
                    let cols: [[f32; M]; A] =
                        std::array::from_fn(|j| at(std::array::from_fn(|i| p[i * A + j][l])));
                    for (r, yr) in y.iter_mut().enumerate() {
                        let row = at(std::array::from_fn(|j| cols[j][r]));
                        for (q, x) in row.into_iter().enumerate() {
                            yr[q][l] = x;
                        }
                    }
                }
                for (r, yr) in y.iter().enumerate() {
                    for (q, yq) in yr.iter().enumerate() {
                        let (oy, ox) = (M * ty + r, M * tx + q);
                        if oy < h && ox < w {
                            let i = ((oy - first_row) * w + ox) * co + c0;
                            out[i..i + LANES].copy_from_slice(yq);
                        }
                    }
                }
            }
        }
    }
}

/// One of Winograd's transforms for a 3-tap filter: `A` points a side giving `M` outputs.
trait Transform<const A: usize, const M: usize> {
    /// `Bᵀ x` of one column or row of an input tile.
    fn bt(x: [f32; A]) -> [f32; A];
    /// `Aᵀ x` of one column or row of a tile's products.
    fn at(x: [f32; A]) -> [f32; M];
}

/// F(2×2, 3×3).
struct F2;
/// F(4×4, 3×3).
struct F4;

impl Transform<4, 2> for F2 {
    /// `Bᵀ = [[1, 0, −1, 0], [0, 1, 1, 0], [0, −1, 1, 0], [0, 1, 0, −1]]`.
    #[inline(always)]
    fn bt([x0, x1, x2, x3]: [f32; 4]) -> [f32; 4] {
        [x0 - x2, x1 + x2, x2 - x1, x1 - x3]
    }

    /// `Aᵀ = [[1, 1, 1, 0], [0, 1, −1, −1]]`.
    #[inline(always)]
    fn at([x0, x1, x2, x3]: [f32; 4]) -> [f32; 2] {
        [x0 + x1 + x2, x1 - x2 - x3]
    }
}

impl Transform<6, 4> for F4 {
    /// `Bᵀ = [[4, 0, −5, 0, 1, 0], [0, −4, −4, 1, 1, 0], [0, 4, −4, −1, 1, 0],
    /// [0, −2, −1, 2, 1, 0], [0, 2, −1, −2, 1, 0], [0, 4, 0, −5, 0, 1]]`.
    #[inline(always)]
    fn bt([x0, x1, x2, x3, x4, x5]: [f32; 6]) -> [f32; 6] {
        [
            4.0 * x0 - 5.0 * x2 + x4,
            x3 + x4 - 4.0 * (x1 + x2),
            4.0 * (x1 - x2) + x4 - x3,
            2.0 * (x3 - x1) + x4 - x2,
            2.0 * (x1 - x3) + x4 - x2,
            4.0 * x1 - 5.0 * x3 + x5,
        ]
    }

    /// `Aᵀ = [[1, 1, 1, 1, 1, 0], [0, 1, −1, 2, −2, 0], [0, 1, 1, 4, 4, 0],
    /// [0, 1, −1, 8, −8, 1]]`.
    #[inline(always)]
    fn at([x0, x1, x2, x3, x4, x5]: [f32; 6]) -> [f32; 4] {
        let (s12, d12, s34, d34) = (x1 + x2, x1 - x2, x3 + x4, x3 - x4);
        [
            x0 + s12 + s34,
            d12 + 2.0 * d34,
            s12 + 4.0 * s34,
            d12 + 8.0 * d34 + x5,
        ]
    }
}

#[cfg(test)]
mod tests;
