//! Convolutions and pooling over channels-last images ([`super::hwc`]), image by image (a
//! request's result never depends on the batch it runs in). A convolution is one GEMM per
//! group over the image's pixels — the input read in place for a 1×1 window at stride 1, else
//! unfolded once — with the batch norm's scale folded into the weights at prepare time and its
//! shift and the activation applied in one pass over the output; a depthwise convolution is
//! one fused pass.

use super::*;

/// Images with fewer output pixels than this (ResNet's last stage: 7 × 7) run their GEMMs
/// through [`rowgemm`], which beats the `gemm` crate on so few rows (`cargo bench --bench cpu
/// -- gemm`, "conv 3x3 (layer4)").
const SMALL_IMAGE: usize = 128;

impl CpuDevice {
    pub(super) fn conv(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
        let Op::Conv2d {
            out_channels,
            kernel: (kh, kw),
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
        let p = ho * wo;
        let (g, co) = (*groups, *out_channels);
        let (cg, cog) = (c / g, co / g);
        let kk = cg * kh * kw;
        let depthwise = node.op.is_depthwise(c);
        let pointwise = (*kh, *kw, *stride, *padding) == (1, 1, 1, 0);
        let win = Window {
            kernel: (*kh, *kw),
            stride: *stride,
            pad: *padding,
            out: (ho, wo),
        };
        let ak = act_k(*act);
        let mut cols = std::mem::take(&mut self.cols);
        let prod = node.inputs[0].node.idx();
        // the producer comes earlier in the node list (the IR is in topological order, and a
        // convolution never reads a previous step): its output is read in place, no copy
        let (before, from_here) = self.nodes.split_at_mut(i);
        let (src, n) = (&before[prod], &mut from_here[0]);
        for m in members {
            let ia = self.layout.offset(prod, m.slot, 0);
            let x = &src.out[ia..ia + c * h * w];
            let o = self.layout.offset(i, m.slot, 0);
            let (wts, out) = (&n.w, &mut n.out[o..o + co * p]);
            if depthwise {
                hwc::depthwise(x, (h, w, c), &wts.w, win, (&wts.shift, ak), out);
                continue;
            }
            for gi in 0..g {
                let wg = &wts.w[gi * kk * cog..(gi + 1) * kk * cog];
                // A[pixel, k]: the image itself (rows of C channels) or its unfolding
                let (a, lda) = if pointwise {
                    (&x[gi * cg..], c)
                } else {
                    hwc::im2col(x, (h, w, c), (gi * cg, cg), win, &mut cols);
                    (&cols[..], kk)
                };
                if p < SMALL_IMAGE {
                    let c_g = &mut out[gi * cog..];
                    rowgemm::gemm_nn((p, cog, kk), (a, lda), (wg, cog), (c_g, co));
                    continue;
                }
                // each thread a share of the pixels, one GEMM each
                par::split_rows(out, co, p * cog * kk, |r0, rows| {
                    let np = rows.len() / co;
                    kernels::gemm_strided(
                        (np, cog, kk),
                        (&a[r0 * lda..], (lda, 1)),
                        (wg, (cog, 1)),
                        (&mut rows[gi * cog..], (co, 1)),
                        false,
                    );
                });
            }
            kernels::bias_act(ak, out, co, &wts.shift);
        }
        self.cols = cols;
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
