//! Residual adds fused into the convolution that completes them: ResNet's `conv3 + shortcut`
//! computed by the convolution's epilogue while its output is in cache ([`super::conv`]), the
//! add node then left with nothing to do.

use super::{act_k, image, ActK, NodeRt};
use crate::graph::op::Op;
use crate::graph::{Class, Model, View};

/// A residual add completed by the convolution that produces its later input, while the
/// convolution's output is still in cache: `add`'s output `act(conv + skip)`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Residual {
    pub(super) add: usize,
    pub(super) skip: usize,
    pub(super) act: ActK,
}

/// Marks each residual add whose later input is a convolution read by that add alone (ResNet's
/// `conv3 + shortcut`): the convolution writes the sum too (its own output stays as it is,
/// when a capture wants to see it) or only the sum (otherwise: nothing else reads its output),
/// and the add has nothing left to do. Both run for the same members at the same step, in this
/// order, so preemption between them changes nothing.
pub(super) fn fuse_residuals(model: &Model, nodes: &mut [NodeRt]) {
    let readers = model.readers();
    for n in &model.nodes {
        let (Op::Add { act }, [a, b]) = (&n.op, n.inputs.as_slice()) else {
            continue;
        };
        let (late, early) = (
            a.node.idx().max(b.node.idx()),
            a.node.idx().min(b.node.idx()),
        );
        let same = |k: usize| {
            let p = &model.nodes[k];
            p.class == Class::Static && p.out.feat == n.out.feat
        };
        let fusable = n.class == Class::Static
            && late != early
            && a.view == View::Same
            && b.view == View::Same
            && image(&n.out.feat).is_some()
            && same(late)
            && same(early)
            && readers[late].len() == 1
            && matches!(model.nodes[late].op, Op::Conv2d { .. });
        if fusable {
            nodes[late].residual = Some(Residual {
                add: n.id.idx(),
                skip: early,
                act: act_k(*act),
            });
            nodes[n.id.idx()].fused = true;
        }
    }
}
