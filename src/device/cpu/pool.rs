//! Pooling over channels-last images ([`super::hwc::pool`], [`super::hwc::global_avg`]), image by
//! image, reading the producer's output in place.

use super::{hwc, window, CpuDevice};
use crate::device::Member;
use crate::graph::op::{Op, PoolKind};
use crate::graph::Model;

impl CpuDevice {
    /// Pooling, image by image, reading the producer's output in place.
    pub(super) fn pool(&mut self, model: &Model, i: usize, members: &[Member]) {
        let node = &model.nodes[i];
        let (Op::Pool { kind, .. }, Some(win)) = (&node.op, window(node)) else {
            return;
        };
        let (c, h, w) = node.in_chw();
        let (ho, wo) = node.out_hw();
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
