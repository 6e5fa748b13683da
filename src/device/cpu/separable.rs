//! Depthwise-separable convolutions (MobileNet's depthwise → pointwise pairs) run as one pass: a
//! depthwise convolution whose output only a 1×1 convolution reads is deferred to that reader,
//! which computes the depthwise output a block of whole rows at a time into its thread's
//! scratch (in L2) just before it multiplies the block ([`super::conv`]). The depthwise output
//! then never goes through memory: at batch 16, MobileNet-v1's depthwise outputs (8 MB an
//! image) were written to memory by one node and read back by the next.
//!
//! Both nodes still run at their place in the node order: the depthwise one does nothing, and
//! its input stays live until the pointwise one has read it ([`super::arena`]), in the request's
//! slot, so preempting or merging sub-batches between the two changes nothing. Each output
//! row of the depthwise convolution is computed by the same code whichever rows are computed
//! with it, and the row GEMM's rows do not depend on how many it multiplies at once, so the
//! pair gives the same bits as the two passes — which still run when a capture wants to see
//! the depthwise output (`verify --ops`; a test compares the two).

use super::{act_k, direct, window, ActK, NodeRt, Window, SMALL_IMAGE};
use crate::graph::op::Op;
use crate::graph::{Class, Model, Node};

/// A deferred depthwise convolution ([`defer_depthwise`]) as the 1×1 convolution computing it
/// sees it: the node whose output is its input, that input's `(h, w, c)`, its window, weights
/// and epilogue (shift, activation).
pub(super) struct Pre<'a> {
    pub(super) src: usize,
    pub(super) input: (usize, usize, usize),
    pub(super) win: Window,
    pub(super) wt: &'a [f32],
    pub(super) epilogue: (&'a [f32], ActK),
}

impl<'a> Pre<'a> {
    /// Depthwise convolution `d` (its node and weights) as the 1×1 convolution that computes it
    /// sees it (None: not a convolution).
    pub(super) fn of(d: &Node, rt: &'a NodeRt) -> Option<Pre<'a>> {
        let (c, h, w) = d.in_chw();
        let (Op::Conv2d { act, .. }, Some(win)) = (&d.op, window(d)) else {
            return None;
        };
        Some(Pre {
            src: d.inputs.first()?.node.idx(),
            input: (h, w, c),
            win,
            wt: &rt.w.w,
            epilogue: (&rt.w.shift, act_k(*act)),
        })
    }
}

/// Depthwise output values (one thread's scratch) a block of the pair computes at most, whole
/// rows (at least one): 256 KiB, which stay in L2 with the block of output the GEMM writes.
const BLOCK_VALUES: usize = 64 * 1024;

/// Marks each depthwise convolution read only by a 1×1 convolution at stride 1 (large images:
/// at least [`SMALL_IMAGE`] pixels, which run in blocks of rows) as deferred, and the
/// 1×1 convolution as computing it first (`pre`).
pub(super) fn defer_depthwise(model: &Model, nodes: &mut [NodeRt]) {
    let readers = model.readers();
    for d in &model.nodes {
        let c = d.in_chw().0;
        let (di, [p]) = (d.id.idx(), readers[d.id.idx()].as_slice()) else {
            continue;
        };
        let pw = &model.nodes[*p];
        let Op::Conv2d {
            out_channels,
            kernel,
            stride,
            padding,
            groups,
            ..
        } = &pw.op
        else {
            continue;
        };
        let (ho, wo) = pw.out_hw();
        let fusable = d.class == Class::Static
            && pw.class == Class::Static
            && d.op.is_depthwise(c)
            && d.inputs.len() == 1
            && pw.inputs.len() == 1
            && (*kernel, *stride, *padding, *groups) == ((1, 1), 1, 0, 1)
            && ho * wo >= SMALL_IMAGE
            && !direct::applies(1, (c, *out_channels), 1);
        if fusable {
            nodes[di].deferred = true;
            nodes[*p].pre = Some(di);
        }
    }
}

/// The output rows of a depthwise output `(ho, wo, c)` that a block of the pair computes:
/// [`BLOCK_VALUES`] worth (at least one row), evened out so that the blocks split between
/// `threads` threads in equal numbers when one image runs on all of them.
pub(super) fn block_rows((ho, wo, c): (usize, usize, usize), threads: usize) -> usize {
    let most = (BLOCK_VALUES / (wo * c).max(1)).clamp(1, ho.max(1));
    let blocks = ho.div_ceil(most).next_multiple_of(threads.max(1));
    ho.div_ceil(blocks).max(1)
}

/// The scratch a block takes for a depthwise output `(ho, wo, c)` (any thread count).
pub(super) fn scratch_len((ho, wo, c): (usize, usize, usize)) -> usize {
    block_rows((ho, wo, c), 1) * wo * c
}

#[cfg(test)]
mod tests;
