//! Convolutions and pooling over channels-last images ([`super::hwc`]), image by image (a
//! request's result never depends on the batch it runs in). A convolution is one GEMM per
//! group over the image's pixels — the input read in place for a 1×1 window at stride 1, else
//! unfolded once — with the batch norm's scale folded into the weights at prepare time and its
//! shift and the activation applied in one pass over the output; a depthwise convolution is
//! one fused pass.

use super::*;

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
    /// The weights packed, for small images ([`SMALL_IMAGE`]).
    panels: &'a Panels,
}

impl Conv<'_> {
    /// Convolves one image `x` into `out` (`[P][Cout]`), with `cols` as unfolding scratch.
    fn image(&self, x: &[f32], out: &mut [f32], cols: &mut [f32]) {
        let ((h, w, c), (p, co), (g, cg, cog)) = (self.input, self.out, self.groups);
        let win = self.win;
        if cg == 1 && cog == 1 && g == c {
            hwc::depthwise(x, (h, w, c), &self.w.w, win, (&self.w.shift, self.act), out);
            return;
        }
        let kk = cg * win.kernel.0 * win.kernel.1;
        let pointwise = (win.kernel, win.stride, win.pad) == ((1, 1), 1, 0);
        for gi in 0..g {
            let wg = self
                .w
                .w
                .get(gi * kk * cog..(gi + 1) * kk * cog)
                .unwrap_or(&[]);
            // A[pixel, k]: the image itself (rows of C channels) or its unfolding
            let (a, lda) = if pointwise {
                (&x[gi * cg..], c)
            } else {
                hwc::im2col(x, (h, w, c), (gi * cg, cg), win, cols);
                (&cols[..], kk)
            };
            if p < SMALL_IMAGE {
                let c_g = &mut out[gi * cog..];
                match self.panels.data.is_empty() {
                    true => rowgemm::gemm_nn((p, cog, kk), (a, lda), (wg, cog), (c_g, co)),
                    false => rowgemm::gemm_panels((p, a, lda), self.panels, (c_g, co)),
                }
                continue;
            }
            // each thread a share of the pixels, one GEMM each, and (one group) its epilogue
            par::split_rows(out, co, p * cog * kk, |r0, rows| {
                let np = rows.len() / co;
                kernels::gemm_strided(
                    (np, cog, kk),
                    (&a[r0 * lda..], (lda, 1)),
                    (wg, (cog, 1)),
                    (&mut rows[gi * cog..], (co, 1)),
                    false,
                );
                if g == 1 {
                    kernels::bias_act(self.act, rows, co, &self.w.shift);
                }
            });
        }
        if g > 1 || p < SMALL_IMAGE {
            kernels::bias_act(self.act, out, co, &self.w.shift);
        }
    }
}

impl CpuDevice {
    /// A convolution over the sub-batch: one image at a time, each split over the cores, or
    /// (two images or more, on more than one thread) whole images in parallel, one per core.
    pub(super) fn conv(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
        let Op::Conv2d {
            out_channels,
            kernel,
            stride,
            padding,
            groups,
            act,
            ..
        } = &node.op
        else {
            return;
        };
        let (c, h, w) = node.in_chw();
        let (ho, wo) = node.out_hw();
        let (g, co) = (*groups, *out_channels);
        let prod = node.inputs[0].node.idx();
        // the producer comes earlier in the node list (the IR is in topological order, and a
        // convolution never reads a previous step): its output is read in place, no copy
        let (before, from_here) = self.nodes.split_at_mut(i);
        let (src, n) = (&before[prod].out, &mut from_here[0]);
        let conv = Conv {
            input: (h, w, c),
            out: (ho * wo, co),
            groups: (g, c / g, co / g),
            win: Window {
                kernel: *kernel,
                stride: *stride,
                pad: *padding,
                out: (ho, wo),
            },
            act: act_k(*act),
            w: &n.w,
            panels: &n.panels,
        };
        let layout = &self.layout;
        let x_of = |m: &Member| &src[layout.offset(prod, m.slot, 0)..][..c * h * w];
        let per_image = co * ho * wo;
        if members.len() < 2 || self.cols.len() < 2 {
            for m in members {
                let o = layout.offset(i, m.slot, 0);
                let cols = self.cols[0].get_mut().unwrap_or_else(|e| e.into_inner());
                conv.image(x_of(m), &mut n.out[o..o + per_image], cols);
            }
            return;
        }
        // whole images in parallel: each slot's block of the output once, each thread its
        // own unfolding scratch
        let who = &mut self.slot_member;
        for (j, m) in members.iter().enumerate() {
            who[m.slot as usize] = j as u32;
        }
        let cols = &self.cols;
        let slot_len = layout.offset(i, 1, 0);
        par::library_scope(|| {
            use rayon::prelude::*;
            n.out
                .par_chunks_mut(slot_len)
                .zip(who.par_iter())
                .filter(|(_, j)| **j != NO_MEMBER)
                .for_each(|(out, &j)| {
                    let t = rayon::current_thread_index().unwrap_or(0) % cols.len();
                    let mut scratch = cols[t].lock().unwrap_or_else(|e| e.into_inner());
                    conv.image(
                        x_of(&members[j as usize]),
                        &mut out[..per_image],
                        &mut scratch,
                    );
                })
        });
        for m in members {
            who[m.slot as usize] = NO_MEMBER;
        }
    }

    /// Pooling, image by image, reading the producer's output in place.
    pub(super) fn pool(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
        let Op::Pool {
            kind,
            kernel,
            stride,
            padding,
        } = &node.op
        else {
            return;
        };
        let (c, h, w) = node.in_chw();
        let (ho, wo) = node.out_hw();
        let win = Window {
            kernel: (*kernel, *kernel),
            stride: *stride,
            pad: *padding,
            out: (ho, wo),
        };
        let prod = node.inputs[0].node.idx();
        let (before, from_here) = self.nodes.split_at_mut(i);
        for m in members {
            let ia = self.layout.offset(prod, m.slot, 0);
            let x = &before[prod].out[ia..ia + c * h * w];
            let o = self.layout.offset(i, m.slot, 0);
            let out = &mut from_here[0].out[o..o + c * ho * wo];
            match kind {
                PoolKind::GlobalAvg => hwc::global_avg(x, (h, w, c), out),
                PoolKind::Max | PoolKind::Avg => {
                    hwc::pool(x, (h, w, c), win, *kind == PoolKind::Max, out)
                }
            }
        }
    }
}
