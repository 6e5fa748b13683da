//! The weights as the CPU device holds them, prepared once when it prepares a model: a
//! convolution's reordered for channels-last images with its batch norm's scale folded in; a
//! linear, LSTM or ungrouped convolution's matrix packed into [`Panels`] for the row GEMM, or
//! — a 3×3 convolution at stride 1 — transformed for Winograd's algorithm ([`winograd`]).

use super::panels::Panels;
use super::{hwc, winograd};
use crate::device::weights::Weights;
use crate::graph::op::Op;
use crate::graph::Node;

/// The weights as this device uses them: a convolution's reordered for channels-last images,
/// with its batch norm's scale folded in ([`hwc::conv_weights`], [`hwc::depthwise_weights`]).
pub(super) fn cpu_weights(n: &Node, mut w: Weights) -> Weights {
    if let Op::Conv2d {
        out_channels,
        kernel: (kh, kw),
        groups,
        ..
    } = &n.op
    {
        let (c, _, _) = n.in_chw();
        w.w = if n.op.is_depthwise(c) {
            hwc::depthwise_weights(&w.w, c, kh * kw, &w.scale)
        } else {
            let (g, co) = (*groups, *out_channels);
            hwc::conv_weights(&w.w, (g, c / g, co / g), (*kh, *kw), &w.scale)
        };
        w.scale = Vec::new();
    }
    w
}

/// A linear or LSTM layer's matrix (`[K][N]`) moved into [`Panels`], and an ungrouped
/// convolution's (reordered `[K][Cout]`), or transformed for Winograd's algorithm when that
/// applies; other nodes keep theirs.
pub(super) fn weight_panels(
    n: &Node,
    mut w: Weights,
    in_feat: usize,
) -> (Weights, Panels, Option<winograd::Winograd>) {
    let (k, cols) = match &n.op {
        Op::Linear {
            out_features,
            tied: None,
            ..
        } => (in_feat, *out_features),
        Op::Lstm { hidden, .. } => (in_feat + hidden, 4 * hidden),
        Op::Conv2d {
            out_channels,
            groups: 1,
            ..
        } => (w.w.len() / out_channels, *out_channels),
        // no packed panels: a tied linear reads its embedding table, a grouped convolution
        // runs group by group, and the other ops have no GEMM
        Op::Linear { tied: Some(_), .. }
        | Op::Conv2d { .. }
        | Op::Input { .. }
        | Op::Pool { .. }
        | Op::Flatten
        | Op::Add { .. }
        | Op::Concat
        | Op::Activation { .. }
        | Op::BatchNorm
        | Op::LayerNorm { .. }
        | Op::Softmax
        | Op::Embedding { .. }
        | Op::Attention { .. }
        | Op::Argmax
        | Op::Take { .. } => return (w, Panels::default(), None),
    };
    if let Some((c, co)) = winograd_channels(n) {
        let wino = winograd::Winograd::new(&w.w, (c, co), n.out_hw());
        w.w = Vec::new();
        return (w, Panels::default(), Some(wino));
    }
    let panels = Panels::pack(&w.w, k, cols);
    w.w = Vec::new();
    (w, panels, None)
}

/// A convolution's input and output channels when it runs by Winograd's algorithm.
fn winograd_channels(n: &Node) -> Option<(usize, usize)> {
    let Op::Conv2d {
        out_channels,
        kernel,
        stride,
        padding,
        groups,
        ..
    } = &n.op
    else {
        return None;
    };
    let c = n.in_chw().0;
    let geometry = (*kernel, *stride, *padding, *groups);
    winograd::applies(geometry, (c, *out_channels)).then_some((c, *out_channels))
}
