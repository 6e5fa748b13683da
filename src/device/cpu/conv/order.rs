//! The order in which a convolution's threads take a sub-batch's images when the images run in
//! parallel, one a share: each thread keeps the same images from node to node, and every other
//! convolution of a chain visits them in reverse.

use crate::graph::op::Op;
use crate::graph::Model;

/// The image a share of the team's `run` computes when a sub-batch's images run in parallel,
/// one a share: thread `t` of `threads` owns shares `t, t + threads, …` and runs them in that
/// order, so each thread keeps the same images from node to node; `reverse` runs each
/// thread's images in the opposite order (the images the previous node wrote last, the likeliest
/// still in cache, first).
pub(super) struct Serpentine {
    pub(super) count: usize,
    pub(super) threads: usize,
    pub(super) reverse: bool,
}

impl Serpentine {
    pub(super) fn image(&self, k: usize) -> usize {
        if !self.reverse {
            return k;
        }
        let (t, q) = (k % self.threads, k / self.threads);
        let owned = (self.count - t).div_ceil(self.threads);
        t + self.threads * (owned - 1 - q)
    }
}

/// Whether convolution `i` runs each thread's images in reverse ([`Serpentine`]): when its
/// input comes from a convolution that ran them forward — along a chain of convolutions, every
/// other one that runs (a `deferred` one runs in its reader: [`super::super::separable`]). At
/// batch 16 a layer's activations (13–51 MB for MobileNet-v1's first stages) outgrow the caches,
/// and a layer reading images in the order the previous one wrote them starts with those
/// evicted first; reversed, it starts with those written last. Interleaved whole passes at
/// batch 16 (4 pairs of 5–7): ResNet-50 4–6% faster, MobileNet-v1 2–6%.
pub(crate) fn runs_reversed(model: &Model, i: usize, deferred: &[bool]) -> bool {
    let mut reversed = false;
    let mut at = i;
    while let Some(p) = model.nodes[at].inputs.first().map(|x| x.node.idx()) {
        if p >= at || !matches!(model.nodes[p].op, Op::Conv2d { .. }) {
            break;
        }
        if !deferred.get(p).copied().unwrap_or(false) {
            reversed = !reversed;
        }
        at = p;
    }
    reversed
}
