//! Convolutions (im2col + GEMM, 1×1 read in place, depthwise) and pooling, image by image (a row's result never depends on the batch).

use super::*;

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
        let win = Window {
            kernel: (*kh, *kw),
            stride: *stride,
            pad: *padding,
            out: (ho, wo),
        };
        let mut cols = std::mem::take(&mut self.cols);
        let prod = node.inputs[0].node.idx();
        // the producer comes earlier in the node list (the IR is in topological order, and a
        // convolution never reads a previous step): its output is read in place, no copy
        let (before, from_here) = self.nodes.split_at_mut(i);
        let (src, n) = (&before[prod], &mut from_here[0]);
        for m in members {
            let ia = self.layout.offset(prod, m.slot, 0);
            let a = &src.out[ia..ia + c * h * w];
            let o = self.layout.offset(i, m.slot, 0);
            let (wts, out) = (&n.w, &mut n.out[o..o + co * p]);
            if depthwise {
                kernels::depthwise(a, (c, h, w), &wts.w, win, out);
            } else {
                let pointwise = (*kh, *kw, *stride, *padding) == (1, 1, 1, 0);
                for gi in 0..g {
                    let wg = &wts.w[gi * kk * cog..(gi + 1) * kk * cog];
                    // A[pixel, k] read from a [K × P] layout; C[pixel, channel] written
                    // channel-major into the [C, H, W] output
                    let a_kp: &[f32] = if pointwise {
                        &a[gi * cg * p..(gi + 1) * cg * p]
                    } else {
                        kernels::im2col_kp(a, (h, w), (gi * cg, cg), win, &mut cols);
                        &cols
                    };
                    kernels::gemm_strided(
                        (p, cog, kk),
                        (a_kp, (1, p)),
                        (wg, (cog, 1)),
                        (&mut out[gi * cog * p..], (1, p)),
                        false,
                    );
                }
            }
            let ak = act_k(*act);
            for ch in 0..co {
                let (sc, sh) = (
                    wts.scale.get(ch).copied().unwrap_or(1.0),
                    wts.shift.get(ch).copied().unwrap_or(0.0),
                );
                kernels::scale_shift_act(ak, &mut out[ch * p..(ch + 1) * p], sc, sh);
            }
        }
        self.cols = cols;
    }

    /// Pooling, image by image.
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
        let mut a = std::mem::take(&mut self.scratch_a);
        for m in members {
            self.gather_row(model, node, m, 0, &mut a[..c * h * w]);
            let out = self.out_row_mut(i, m.slot, 0);
            match kind {
                PoolKind::GlobalAvg => {
                    let win = Window {
                        kernel: (h.max(w), h.max(w)),
                        stride: 1,
                        pad: 0,
                        out: (1, 1),
                    };
                    kernels::pool(&a, (c, h, w), win, false, out)
                }
                PoolKind::Max | PoolKind::Avg => {
                    let win = Window {
                        kernel: (*kernel, *kernel),
                        stride: *stride,
                        pad: *padding,
                        out: (ho, wo),
                    };
                    kernels::pool(&a, (c, h, w), win, *kind == PoolKind::Max, out)
                }
            }
        }
        self.scratch_a = a;
    }
}
