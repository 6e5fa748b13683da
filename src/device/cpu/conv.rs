//! Convolutions over channels-last images ([`super::hwc`]); a request's result
//! never depends on the batch it runs in. An ungrouped convolution is a GEMM over the image's
//! pixels (the batch norm's scale folded into the weights at prepare time), run in blocks of
//! pixels fixed by the image's geometry ([`block_pixels`]); each thread takes a run of whole
//! blocks and, a block at a time, unfolds the block's windows (none for a 1×1 window at stride
//! 1: the image is read in place) and multiplies (the row GEMM, on weights packed at prepare
//! time), which applies the shift and the activation as it stores each tile
//! ([`rowgemm::Finish`]) and whose epilogue — when the convolution completes a residual
//! connection ([`Residual`]) — adds and activates the sum over each block of the output as the
//! GEMM finishes it ([`Epilogue`]). The row GEMM's and the direct convolution's outputs larger
//! than the caches keep for the next node are stored around them ([`STREAM_BYTES`]; not with a
//! residual sum, nor by Winograd's or the grouped paths). A 3×3 convolution at stride 1 runs
//! its blocks by Winograd's algorithm instead ([`Winograd`]). Small images (ResNet's last
//! stage) run as one block, its columns shared between the cores, and a sub-batch's small
//! images in consecutive slots as one GEMM ([`Conv::images`]). Grouped convolutions unfold the
//! whole image per group (the `gemm` crate multiplies large ones); a depthwise convolution is
//! one fused pass, or — read only by a 1×1 convolution — computed by that convolution a block
//! of rows at a time just before its GEMM ([`separable`], [`Conv::pair`]).

use super::aligned::Aligned;
use super::direct::{self, Direct};
use super::kernels::{self, ActK, Window};
use super::panels::Panels;
use super::residual::Residual;
use super::separable;
use super::team;
use super::winograd::Winograd;
use super::{act_k, activation, hwc, par, rowgemm, window, CpuDevice, NO_MEMBER, SMALL_IMAGE};
use crate::device::weights::Weights;
use crate::device::Member;
use crate::graph::op::Op;
use crate::graph::Model;
use std::sync::{Mutex, MutexGuard};

mod order;
pub(super) use order::runs_reversed;
use order::Serpentine;

/// Unfolded values a block of pixels takes at least (256 KiB: the block stays in L2 between
/// its unfolding and its GEMM, where unfolding a whole image first sent megabytes through
/// memory).
const BLOCK_VALUES: usize = 64 * 1024;

/// Unfolded values that small images (fewer than [`SMALL_IMAGE`] output pixels) of a
/// sub-batch take at most when unfolded together for one GEMM (4 MiB): at 7 × 7 pixels a GEMM
/// per image reads every weight for 49 rows.
const GROUP_VALUES: usize = 1 << 20;

/// Small images unfolded together for one GEMM, for `p` output pixels of windows of `k`
/// values: [`GROUP_VALUES`] worth, at least one, at most `max_batch`.
fn images_at_once(p: usize, k: usize, max_batch: usize) -> usize {
    (GROUP_VALUES / (p * k).max(1)).clamp(1, max_batch.max(1))
}

/// Bytes of output a convolution writes for its sub-batch from which its GEMM stores them
/// around the caches (a quarter of this machine's 32 MiB L3: the next node's reads of this
/// output, its own input and the weights would otherwise share it): at batch 16,
/// MobileNet-v1's first three 1×1 layers (25–51 MB) ran 15–30% faster so and the layers
/// reading their outputs no slower; from 8 MiB instead of 16 the next two (12.8 MB) too
/// (28 × 28 pairs 10.1 → 9.0–9.2 and 5.9–6.4 → 5.4–5.7 ms, 3 of 3 interleaved pairs; the pass
/// faster in 7 of 9), from 4 MiB no more.
const STREAM_BYTES: usize = 8 << 20;

/// Whether a convolution of `images` images of `per_image` output values stores its output
/// around the caches ([`STREAM_BYTES`]; never when it completes a residual sum, `sum`, whose
/// epilogue reads the output back).
fn streams(sum: bool, images: usize, per_image: usize) -> bool {
    !sum && images * per_image * std::mem::size_of::<f32>() >= STREAM_BYTES
}

/// Weights (values) beyond which they no longer stay in L2 from one block to the next (1 MiB).
const WEIGHTS_IN_L2: usize = 256 * 1024;

/// The pixels of each block of a large image (the last may be shorter), for windows of `k`
/// values and `n` output channels: [`BLOCK_VALUES`] worth of windows (a multiple of 8 pixels
/// in [16, 512]) — but, when the weights (`k × n`) do not stay in L2 ([`WEIGHTS_IN_L2`]), no
/// fewer pixels than output channels, since each block then reads them from memory again and
/// they must not outweigh the block's own `pixels × k` (VGG-16's 56 × 56 layers ran 25% slower
/// in blocks of 24 pixels) — and no more than half the image, so that two cores share it. A 1×1
/// window at stride 1 (read in place, nothing to keep in cache but the output) runs in halves.
/// The blocks depend on the image's geometry alone, never on the batch or the threads (the row
/// GEMM's bits do not depend on its number of rows, but Winograd's tiles and the unfolding
/// follow the blocks; a separable pair's blocks may follow the thread count: its rows' bits
/// depend on neither).
pub(super) fn block_pixels(p: usize, (k, n): (usize, usize), pointwise: bool) -> usize {
    let half = p.div_ceil(2).max(1);
    if pointwise {
        return half;
    }
    let fits = (BLOCK_VALUES / k.max(1)).clamp(16, 512) / 8 * 8;
    let pixels = match k * n > WEIGHTS_IN_L2 {
        true => fits.max(n.next_multiple_of(8)),
        false => fits,
    };
    pixels.min(half)
}

/// The unfolding scratch one thread needs for a convolution of `p` output pixels, `groups`
/// groups, `k` values a window and `n` output channels: a block of pixels, a few whole small
/// images of a sub-batch of up to `max_batch`, a whole grouped image, or nothing (`in_place`:
/// 1×1 windows at stride 1, read in place, or a convolution run [`direct`]ly).
pub(super) fn scratch_len(
    p: usize,
    groups: usize,
    (k, n): (usize, usize),
    in_place: bool,
    max_batch: usize,
) -> usize {
    match (groups, in_place) {
        (1, true) => 0,
        (1, false) if p >= SMALL_IMAGE => block_pixels(p, (k, n), false) * k,
        (1, false) => images_at_once(p, k, max_batch) * p * k,
        _ => p * k,
    }
}

/// This thread's unfolding scratch (one per thread of the team: [`team::index`]).
fn scratch(cols: &[Mutex<Aligned>]) -> MutexGuard<'_, Aligned> {
    let t = team::index() % cols.len().max(1);
    cols[t].lock().unwrap_or_else(|e| e.into_inner())
}

/// One convolution node's geometry and weights, shared by its images.
struct Conv<'a> {
    /// Input `(h, w, c)`, channels-last.
    input: (usize, usize, usize),
    /// Output pixels and channels.
    out: (usize, usize),
    /// Groups, and input/output channels per group.
    groups: (usize, usize, usize),
    win: Window,
    act: ActK,
    w: &'a Weights,
    /// The weights packed (every ungrouped convolution not run by Winograd's algorithm).
    panels: &'a Panels,
    /// The weights transformed for Winograd's algorithm, when it applies.
    wino: Option<&'a Winograd>,
    /// A few input channels: computed directly, without unfolding ([`direct`]).
    direct: bool,
    /// The activation of the residual sum this convolution completes, if it does one.
    residual: ActK,
    /// A 1×1 convolution's deferred depthwise convolution, computed first a block at a time
    /// ([`separable`]): the image it is given is the depthwise convolution's input.
    pre: Option<separable::Pre<'a>>,
    /// The output, larger than the caches keep until the next node reads it, is stored around
    /// them ([`rowgemm::Finish::stream`]; never with a residual sum, which reads it back).
    stream: bool,
}

/// What a convolution's GEMM does to each finished block of its output, while it is in cache:
/// the shift and the activation, and the residual sum when the convolution completes one.
struct Epilogue<'a> {
    act: ActK,
    /// Per output channel (empty: none).
    shift: &'a [f32],
    /// The residual sum, when the convolution completes one.
    sum: Option<SumEpi<'a>>,
    /// Output channels (the row length).
    co: usize,
}

/// The residual sum's activation, its other input and its output (both `[pixels][co]`, the
/// block's rows); no output: the sum replaces the convolution's own output, in place.
type SumEpi<'a> = (ActK, &'a [f32], Option<par::Shared<'a, f32>>);

par::vectorized_fn! {
    /// [`Epilogue`] over one finished block of the row GEMM's output (one dispatch a block,
    /// not one a row).
    fn epilogue(d: &mut rowgemm::Done, e: &Epilogue) {
        for r in d.rows.clone() {
            let cols = d.cols.clone();
            finish_row(d.row(r), r, cols, e);
        }
    }
}

par::vectorized_fn! {
    /// [`Epilogue`] over the first `rows` rows of `out` (a block finished by Winograd's
    /// algorithm or a direct convolution).
    fn finish_rows(out: &mut [f32], rows: usize, e: &Epilogue) {
        for (r, row) in out.chunks_exact_mut(e.co.max(1)).take(rows).enumerate() {
            finish_row(row, r, 0..e.co, e);
        }
    }
}

/// [`Epilogue`] over columns `cols` of row `r` of a block of output: `out ← act(out + shift)`,
/// then `y ← act'(out + skip)` (the same operations, in the same order, as the passes over the
/// whole output that it replaces); inlined into its callers' vectorised bodies.
#[inline(always)]
fn finish_row(row: &mut [f32], r: usize, cols: std::ops::Range<usize>, e: &Epilogue) {
    activation::shift_act(e.act, row, e.shift.get(cols.clone()).unwrap_or(&[]));
    if let Some((ak, skip, y)) = &e.sum {
        let at = r * e.co + cols.start;
        let skip = &skip[at..at + cols.len()];
        match y {
            Some(y) => {
                // SAFETY: each row's columns are finished once, so the ranges of the
                // sum they write are disjoint
                let y = unsafe { y.range(at, cols.len()) };
                y.iter_mut()
                    .zip(row.iter())
                    .zip(skip)
                    .for_each(|((y, a), b)| *y = a + b);
                kernels::act(*ak, y);
            }
            None => {
                row.iter_mut().zip(skip).for_each(|(a, b)| *a += b);
                kernels::act(*ak, row);
            }
        }
    }
}

/// The residual connection an image completes: the other input of the add, and the add's
/// output (both `[P][Cout]`), or none when the convolution's output is the add's (the sum
/// computed in place: [`CpuDevice::conv`] says when).
type Sum<'a> = Option<(&'a [f32], Option<&'a mut [f32]>)>;

/// Where a convolution of some images writes, given its own output `out` and, when it completes
/// a residual sum, the sum's other input and output for the same images: its own output (and
/// the sum beside it), or — `into_sum` — the sum's output alone, computed in place.
fn targets<'a>(
    out: &'a mut [f32],
    sum: Option<(&'a [f32], &'a mut [f32])>,
    into_sum: bool,
) -> (&'a mut [f32], Sum<'a>) {
    match sum {
        Some((skip, y)) if into_sum => (y, Some((skip, None))),
        Some((skip, y)) => (out, Some((skip, Some(y)))),
        None => (out, None),
    }
}

/// Rows `at..at + len` of a residual sum's operands.
fn rows_of<'a>(sum: &'a mut Sum<'_>, at: usize, len: usize) -> Sum<'a> {
    sum.as_mut().map(|(skip, y)| {
        let y = y.as_mut().map(|y| &mut y[at..at + len]);
        (&skip[at..at + len], y)
    })
}

impl Conv<'_> {
    /// Values in one window of one group.
    fn window(&self) -> usize {
        self.groups.1 * self.win.kernel.0 * self.win.kernel.1
    }

    /// A 1×1 window at stride 1 without padding: the image is its own unfolding.
    fn pointwise(&self) -> bool {
        (self.win.kernel, self.win.stride, self.win.pad) == ((1, 1), 1, 0)
    }

    /// Convolves one image `x` into `out` (`[P][Cout]`), unfolding into `cols`; with `sum`, also
    /// the residual add that follows it.
    fn image(&self, x: &[f32], out: &mut [f32], cols: &[Mutex<Aligned>], mut sum: Sum) {
        let ((h, w, c), (p, co), (g, cg, cog)) = (self.input, self.out, self.groups);
        if g > 1 {
            if cg == 1 && cog == 1 && g == c {
                let epilogue = (&self.w.shift[..], self.act);
                hwc::depthwise(x, (h, w, c), &self.w.w, self.win, epilogue, out);
            } else {
                self.grouped(x, out, &mut scratch(cols));
            }
            return self.add(out, sum);
        }
        if p < SMALL_IMAGE {
            // one block, its columns over the cores
            return self.block(x, 0..p, out, cols, sum);
        }
        // the image in blocks, each thread a run of whole blocks
        let pb = match (self.wino, &self.pre) {
            (Some(wg), _) => wg.block_pixels(self.win.out, team::team().threads()),
            (None, Some(_)) => separable::block_rows((h, w, c), team::team().threads()) * w,
            (None, None) => block_pixels(p, (self.window(), co), self.pointwise()),
        };
        let blocks = |b0: usize, rows: &mut [f32], mut sum: Sum| {
            for (b, block) in rows.chunks_mut(pb * co).enumerate() {
                let (start, np) = ((b0 + b) * pb, block.len() / co);
                let sum = rows_of(&mut sum, b * pb * co, np * co);
                self.block(x, start..start + np, block, cols, sum);
            }
        };
        let work = p * co * self.window();
        match sum.take() {
            None => par::split_rows(out, pb * co, work, |b0, rows| blocks(b0, rows, None)),
            Some((skip, None)) => par::split_rows(out, pb * co, work, |b0, rows| {
                blocks(b0, rows, Some((&skip[b0 * pb * co..], None)))
            }),
            Some((skip, Some(y))) => {
                par::split_rows_pair((out, y), (pb * co, pb * co), work, |b0, rows, y| {
                    blocks(b0, rows, Some((&skip[b0 * pb * co..], Some(y))))
                })
            }
        }
    }

    /// Output pixels `pixels` of an ungrouped convolution into `out` (`[pixels][Cout]`): the
    /// block's windows unfolded (or the image read in place), one GEMM, the epilogue (and the
    /// residual sum) while the block is in cache.
    fn block(
        &self,
        x: &[f32],
        pixels: std::ops::Range<usize>,
        out: &mut [f32],
        cols: &[Mutex<Aligned>],
        sum: Sum,
    ) {
        let ((h, w, c), k) = (self.input, self.window());
        let np = pixels.len();
        if self.wino.is_none() && !self.direct {
            // the row GEMM, its finish in its registers and the residual sum on each block of
            // output as it finishes it
            if let Some(pre) = &self.pre {
                return self.pair(pre, (x, pixels), out, cols, sum);
            }
            if self.pointwise() {
                return self.multiply((np, &x[pixels.start * c..], c), out, sum);
            }
            let mut scratch = scratch(cols);
            hwc::im2col(x, (h, w, c), (0, c), self.win, pixels, &mut scratch);
            return self.multiply((np, &scratch[..], k), out, sum);
        }
        // Winograd's algorithm or a direct convolution (which may finish its outputs itself):
        // the block, then what remains of its epilogue
        let finished = match self.wino {
            Some(wg) => {
                wg.block(x, (h, w), pixels, out, &mut scratch(cols));
                false
            }
            None => Direct {
                input: self.input,
                win: self.win,
                panels: self.panels,
                fin: self.finish(),
            }
            .block(x, pixels, out),
        };
        let epi = match finished {
            true => self.sum_epilogue(sum),
            false => self.epilogue(sum),
        };
        if finished && epi.sum.is_none() {
            return;
        }
        finish_rows(out, np, &epi);
    }

    /// Output pixels `pixels` (whole rows) of a 1×1 convolution computing its deferred
    /// depthwise convolution `pre` ([`separable`]) from the latter's input `x`: the depthwise
    /// rows into this thread's scratch, then the GEMM on them while they are in L2, the next
    /// block's input rows on their way into L2 meanwhile (a share each time the GEMM hands over
    /// a block of output).
    fn pair(
        &self,
        pre: &separable::Pre,
        (x, pixels): (&[f32], std::ops::Range<usize>),
        out: &mut [f32],
        cols: &[Mutex<Aligned>],
        sum: Sum,
    ) {
        let ((_, w, c), np) = (self.input, pixels.len());
        let epi = &self.sum_epilogue(sum);
        let mut scratch = scratch(cols);
        let rows = pixels.start / w..pixels.end.div_ceil(w);
        let image = (x, pre.input);
        let ahead = hwc::rows_after(image, &pre.win, rows.clone());
        hwc::depthwise_rows_at(image, pre.wt, pre.win, pre.epilogue, rows, &mut scratch);
        let lines = ahead.len().div_ceil(16);
        let per = lines.div_ceil(np.div_ceil(rowgemm::MC).max(1));
        let epi = |mut d: rowgemm::Done| {
            let t = (d.rows.start / rowgemm::MC) * per;
            hwc::prefetch_l2(ahead, t.min(lines)..(t + per).min(lines));
            if epi.sum.is_some() {
                epilogue(&mut d, epi)
            }
        };
        let a = (np, &scratch[..], c);
        let out = (out, self.out.1);
        rowgemm::gemm_panels_then(a, self.panels, out, self.finish(), Some(&epi));
    }

    /// The row GEMM of `rows` rows of `a` (`lda` apart) by the packed weights into `out`, its
    /// finish in the GEMM, the residual sum over each block as the GEMM finishes it.
    fn multiply(&self, (rows, a, lda): (usize, &[f32], usize), out: &mut [f32], sum: Sum) {
        let epi = self.sum_epilogue(sum);
        let then = |mut d: rowgemm::Done| epilogue(&mut d, &epi);
        let then: Option<rowgemm::Epilogue> = epi.sum.is_some().then_some(&then);
        let out = (out, self.out.1);
        rowgemm::gemm_panels_then((rows, a, lda), self.panels, out, self.finish(), then);
    }

    /// What the convolution does to its output once computed: the shift, the activation, and
    /// the residual sum `sum` when it completes one.
    fn epilogue<'s>(&'s self, sum: Sum<'s>) -> Epilogue<'s> {
        Epilogue {
            act: self.act,
            shift: &self.w.shift,
            sum: sum.map(|(skip, y)| (self.residual, skip, y.map(par::Shared::new))),
            co: self.out.1,
        }
    }

    /// The shift and the activation, as the row GEMM applies them ([`rowgemm::Finish`]).
    fn finish(&self) -> rowgemm::Finish<'_> {
        rowgemm::Finish {
            shift: &self.w.shift,
            act: self.act,
            stream: self.stream,
        }
    }

    /// [`Self::epilogue`] after the GEMM's [`Self::finish`]: the residual sum alone.
    fn sum_epilogue<'s>(&'s self, sum: Sum<'s>) -> Epilogue<'s> {
        Epilogue {
            act: ActK::None,
            shift: &[],
            ..self.epilogue(sum)
        }
    }

    /// `k` small images, one after another in `x`, into `out` (and the residual sum's rows of
    /// the same images): one GEMM over all their pixels (1×1 windows, read in place), or over
    /// as many of them at once as the scratch holds, unfolded; the columns over the cores. The
    /// weights are read once for the images, not once an image.
    fn images(
        &self,
        (x, k): (&[f32], usize),
        out: &mut [f32],
        cols: &[Mutex<Aligned>],
        mut sum: Sum,
    ) {
        let ((h, w, c), (p, co), kk) = (self.input, self.out, self.window());
        if self.pointwise() {
            return self.block(x, 0..k * p, out, cols, sum);
        }
        let mut scratch = scratch(cols);
        let group = (scratch.len() / (p * kk).max(1)).clamp(1, k);
        for (j, out) in out[..k * p * co].chunks_mut(group * p * co).enumerate() {
            let kg = out.len() / (p * co);
            for g in 0..kg {
                let image = &x[(j * group + g) * h * w * c..][..h * w * c];
                hwc::im2col(
                    image,
                    (h, w, c),
                    (0, c),
                    self.win,
                    0..p,
                    &mut scratch[g * p * kk..],
                );
            }
            let sum = rows_of(&mut sum, j * group * p * co, kg * p * co);
            self.multiply((kg * p, &scratch[..], kk), out, sum);
        }
    }

    /// The residual sum `act(out + skip)` into its own output, when this convolution completes
    /// one.
    fn add(&self, out: &mut [f32], sum: Sum) {
        match sum {
            Some((skip, Some(y))) => kernels::add_act(self.residual, out, skip, y),
            Some((skip, None)) => {
                out.iter_mut().zip(skip).for_each(|(a, b)| *a += b);
                kernels::act(self.residual, out);
            }
            None => {}
        }
    }

    /// A grouped convolution: each group's windows unfolded over the whole image (split over
    /// the cores), one GEMM per group (the row GEMM's for small images, else the `gemm`
    /// crate's, over the cores), then the epilogue.
    fn grouped(&self, x: &[f32], out: &mut [f32], cols: &mut [f32]) {
        let ((h, w, c), (p, co), (g, cg, cog)) = (self.input, self.out, self.groups);
        let kk = self.window();
        for gi in 0..g {
            let wg = self
                .w
                .w
                .get(gi * kk * cog..(gi + 1) * kk * cog)
                .unwrap_or(&[]);
            let (a, lda) = if self.pointwise() {
                (&x[gi * cg..], c)
            } else {
                let win = self.win;
                par::split_rows(&mut cols[..p * kk], kk, p * kk, |p0, rows| {
                    let pixels = p0..p0 + rows.len() / kk;
                    hwc::im2col(x, (h, w, c), (gi * cg, cg), win, pixels, rows)
                });
                (&cols[..], kk)
            };
            let c_g = &mut out[gi * cog..];
            match p < SMALL_IMAGE {
                true => rowgemm::gemm_nn((p, cog, kk), (a, lda), (wg, cog), (c_g, co)),
                false => kernels::gemm_strided(
                    (p, cog, kk),
                    (a, (lda, 1)),
                    (wg, (cog, 1)),
                    (c_g, (co, 1)),
                    false,
                ),
            }
        }
        kernels::bias_act(self.act, out, co, &self.w.shift);
    }
}

impl CpuDevice {
    /// A convolution over the sub-batch: one image at a time, each split over the cores, or
    /// (two images or more, on more than one thread) whole images in parallel, one per core.
    pub(super) fn conv(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
        let (
            Op::Conv2d {
                out_channels,
                kernel,
                groups,
                act,
                ..
            },
            Some(win),
        ) = (&node.op, window(node))
        else {
            return;
        };
        let (c, h, w) = node.in_chw();
        let (ho, wo) = node.out_hw();
        let (g, co) = (*groups, *out_channels);
        // (the capture changes only between runs, so both nodes of a pair decide alike)
        if self.nodes[i].deferred && !self.capture.wants(model, i) {
            // computed by the 1×1 convolution that reads it
            return;
        }
        // a deferred depthwise convolution this one computes first: its input is read instead
        // (`defer_depthwise` deferred only convolutions with an input, so `Pre::of` gives one)
        let pre = self.nodes[i].pre.filter(|&d| !self.capture.wants(model, d));
        // a convolution completing a residual sum writes the sum alone (into the add's output),
        // its own output being read by nothing else, unless a capture wants to see it
        let into_sum = g == 1 && !self.capture.wants(model, i);
        // the producer comes earlier in the node list (the IR is in topological order, and a
        // convolution never reads a previous step): its output is read in place, no copy
        let (before, from_here) = self.nodes.split_at_mut(i);
        let Some((n, later)) = from_here.split_first_mut() else {
            return;
        };
        let pre = pre.and_then(|d| separable::Pre::of(&model.nodes[d], &before[d]));
        let prod = pre.as_ref().map_or(node.inputs[0].node.idx(), |p| p.src);
        let src = &before[prod].out;
        let fused = n.residual;
        let conv = Conv {
            input: (h, w, c),
            out: (ho * wo, co),
            groups: (g, c / g, co / g),
            win,
            act: act_k(*act),
            w: &n.w,
            panels: &n.panels,
            wino: n.wino.as_ref(),
            direct: direct::applies(g, (c, co), kernel.0 * kernel.1),
            residual: fused.map_or(ActK::None, |r| r.act),
            pre,
            stream: streams(fused.is_some(), members.len(), co * ho * wo),
        };
        let layout = &self.layout;
        let x_len = conv
            .pre
            .as_ref()
            .map_or(c * h * w, |p| p.input.0 * p.input.1 * p.input.2);
        let x_of = |m: &Member| &src[layout.offset(prod, m.slot, 0)..][..x_len];
        let per_image = co * ho * wo;
        // the residual add this convolution completes: its other input and its output buffer
        let (skip, sums) = match fused {
            Some(r) => (&before[r.skip].out[..], &mut later[r.add - i - 1].out[..]),
            None => (&[][..], &mut [][..]),
        };
        let skip_of =
            |r: Residual, slot: u32, len: usize| &skip[layout.offset(r.skip, slot, 0)..][..len];
        let cols = &self.cols;
        let unfolds = conv.wino.is_none() && !conv.direct && g == 1;
        if unfolds && ho * wo < SMALL_IMAGE && members.len() >= 2 {
            // small images: each run of members in consecutive slots, whose images follow each
            // other in every buffer, at once (`Conv::images`)
            let who = &mut self.slot_member;
            for m in members {
                who[m.slot as usize] = 0;
            }
            let mut s = 0;
            while s < who.len() {
                if who[s] == NO_MEMBER {
                    s += 1;
                    continue;
                }
                let s0 = s;
                while s < who.len() && who[s] != NO_MEMBER {
                    who[s] = NO_MEMBER;
                    s += 1;
                }
                let (k, slot) = (s - s0, s0 as u32);
                let x = &src[layout.offset(prod, slot, 0)..][..k * c * h * w];
                let len = k * per_image;
                let out = &mut n.out[layout.offset(i, slot, 0)..][..len];
                let sum = fused.map(|r| {
                    let y = &mut sums[layout.offset(r.add, slot, 0)..][..len];
                    (skip_of(r, slot, len), y)
                });
                let (out, sum) = targets(out, sum, into_sum);
                conv.images((x, k), out, cols, sum);
            }
            return;
        }
        if members.len() < 2 || cols.len() < 2 {
            for m in members {
                let out = &mut n.out[layout.offset(i, m.slot, 0)..][..per_image];
                let sum = fused.map(|r| {
                    let y = &mut sums[layout.offset(r.add, m.slot, 0)..][..per_image];
                    (skip_of(r, m.slot, per_image), y)
                });
                let (out, sum) = targets(out, sum, into_sum);
                conv.image(x_of(m), out, cols, sum);
            }
            return;
        }
        // whole images in parallel: each slot's block of the output (and of the residual sum)
        // once, each thread its own unfolding scratch
        let who = &mut self.slot_member;
        for (j, m) in members.iter().enumerate() {
            who[m.slot as usize] = j as u32;
        }
        let (outs, sums) = (par::Shared::new(&mut n.out), par::Shared::new(sums));
        let who = &*who;
        // one share an image (the k-th occupied slot, in slot order, or each thread's in reverse
        // after a convolution that ran them forward): each thread takes its own images, then any
        // another has not started
        let occupied = || who.iter().enumerate().filter(|(_, j)| **j != NO_MEMBER);
        let count = occupied().count();
        let order = Serpentine {
            count,
            threads: count.min(team::team().threads()).max(1),
            reverse: n.reversed,
        };
        team::team().run(count, &|k| {
            let Some((slot, &j)) = occupied().nth(order.image(k)) else {
                return;
            };
            let m = &members[j as usize];
            let slot = slot as u32;
            // SAFETY: one slot's block of each output per share, each slot in one share
            let out = unsafe { outs.range(layout.offset(i, slot, 0), per_image) };
            let sum = fused.map(|r| {
                // SAFETY: as above
                let y = unsafe { sums.range(layout.offset(r.add, slot, 0), per_image) };
                (skip_of(r, slot, per_image), y)
            });
            let (out, sum) = targets(out, sum, into_sum);
            conv.image(x_of(m), out, cols, sum)
        });
        let who = &mut self.slot_member;
        for m in members {
            who[m.slot as usize] = NO_MEMBER;
        }
    }
}

#[cfg(test)]
mod tests;
