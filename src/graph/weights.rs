//! Real weights a model file brings (an imported ONNX model's initializers), per node, in the
//! layout every device reads ([`Weights`]). A model without them (the zoo, TOML files) gets
//! weights generated from a seed on each device instead.

use super::{Model, Node};
use std::sync::Arc;

/// A node's parameters, in the one layout every device reads. `w` is the main matrix (conv:
/// `[group][K = (ci, ky, kx)][Cout/g]`; linear `[K][N]`; lstm `[K+H][4H]`; embedding table
/// `[V][d]`; additive attention: the normalized `g·v/‖v‖`), `bias` the bias (embedding: the
/// token-type-0 row; attention: `b`), `scale`/`shift` a folded batch norm or a layer norm's
/// gamma/beta (a convolution's bias is its `shift`), `extra` a learned position table.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Weights {
    /// Main matrix.
    pub w: Vec<f32>,
    /// Bias.
    pub bias: Vec<f32>,
    /// Per-channel scale.
    pub scale: Vec<f32>,
    /// Per-channel shift.
    pub shift: Vec<f32>,
    /// Extra table.
    pub extra: Vec<f32>,
}

/// Each node's real weights, or none (generated). Shared: cloning a model copies no weight.
#[derive(Clone, Debug, Default)]
pub struct Imported(Vec<Option<Arc<Weights>>>);

impl Imported {
    /// Weights for the nodes in order (`None`: generated).
    pub(crate) fn new(per_node: Vec<Option<Weights>>) -> Self {
        Imported(per_node.into_iter().map(|w| w.map(Arc::new)).collect())
    }

    /// True when no node has real weights.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// Node `n`'s real weights, if its model brought them.
    pub(crate) fn of(&self, n: &Node) -> Option<&Weights> {
        self.0.get(n.id.idx()).and_then(|w| w.as_deref())
    }

    /// The parameters of models composed one after another (co-location): `models`' nodes in
    /// order.
    pub(crate) fn concat(models: &[Model]) -> Self {
        if models.iter().all(|m| m.imported.is_empty()) {
            return Imported::default();
        }
        let mut all = Vec::new();
        for m in models {
            let own = &m.imported.0;
            all.extend((0..m.nodes.len()).map(|i| own.get(i).cloned().flatten()));
        }
        Imported(all)
    }
}
