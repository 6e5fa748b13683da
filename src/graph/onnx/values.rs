//! What the importer's names stand for while it translates ([`Val`]), the parts of a
//! recognised pattern before it completes ([`Part`]), and our nodes before they are written
//! out ([`Emitted`]): the data the translation's files share.

use super::proto::Const;
use crate::graph::weights::Weights;

/// What an ONNX tensor name stands for.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// The output of our node `idx`, one request's shape (no batch axis).
    Node { idx: usize, shape: Vec<usize> },
    /// A constant.
    Const(Const),
    /// A value inside a pattern that is not one of our nodes until the pattern completes.
    Part(Part),
}

/// What kind of node an emitted node is, for fusion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A convolution (`bn`: a batch norm folded in; `bias`: has a bias).
    Conv { bn: bool, bias: bool },
    /// A linear layer.
    Linear { bias: bool },
    /// An elementwise sum.
    Add,
    /// A token embedding (`positions`: a learned position table added).
    Embedding { positions: bool },
    /// Anything else.
    Other,
}

/// One of our nodes, before it is written out as model-file text.
#[derive(Clone, Debug)]
pub(crate) struct Emitted {
    /// Unique name.
    pub name: String,
    /// The model-file op name.
    pub op: &'static str,
    /// Op fields (model-file key, value).
    pub fields: Vec<(&'static str, toml_edit::Value)>,
    /// Names of our input nodes.
    pub inputs: Vec<String>,
    /// Its real weights.
    pub weights: Option<Weights>,
    /// For fusion.
    pub kind: Kind,
    /// The fused activation (model-file name), for kinds that take one.
    pub act: Option<&'static str>,
    /// The ONNX node it came from, for messages.
    pub origin: String,
}

/// A value inside an incomplete pattern.
#[derive(Clone, Debug)]
pub(crate) enum Part {
    /// Our node `x` (ONNX tensor `name`) times `by`: a `Mul` or `Div` by one constant.
    Scaled { x: usize, name: String, by: f32 },
    /// `erf(x / √2)`.
    Erf { x: usize, name: String },
    /// `1 + erf(x / √2)`.
    /// `by · (1 + erf(x / √2))`.
    OnePlusErf { x: usize, name: String, by: f32 },
    /// `by · x · (1 + erf(x / √2))`.
    Gelu { x: usize, name: String, by: f32 },
    /// Our node `x`'s rows split into `heads`, times `scale`; `order` says which of (row,
    /// head, within the head) each of the three per-request axes holds; `merged`: the batch
    /// and the first of them share one axis (a `Reshape` to 3-D, as some exporters transpose K).
    Heads {
        x: usize,
        heads: usize,
        order: [u8; 3],
        scale: f32,
        merged: bool,
    },
    /// `IsNaN` of the tensor named `of` (attention probabilities).
    NanOf { of: String },
    /// `scale · Q·Kᵀ` per head.
    Scores {
        q: usize,
        k: usize,
        heads: usize,
        scale: f32,
    },
    /// `softmax(scale · Q·Kᵀ)` per head.
    Probs {
        q: usize,
        k: usize,
        heads: usize,
        scale: f32,
    },
    /// `softmax(scale · Q·Kᵀ) · V` per head, axes as in [`Part::Heads`].
    Context {
        q: usize,
        k: usize,
        v: usize,
        heads: usize,
        scale: f32,
        order: [u8; 3],
    },
}

impl Part {
    /// What it is, for messages.
    pub(crate) fn what(&self) -> &'static str {
        match self {
            Part::Scaled { .. } => "a tensor scaled by a constant",
            Part::Erf { .. } | Part::OnePlusErf { .. } | Part::Gelu { .. } => "part of a GELU",
            Part::Heads { .. } => "a tensor split into attention heads",
            Part::NanOf { .. } => "a NaN test of attention probabilities",
            Part::Scores { .. } | Part::Probs { .. } => "attention scores",
            Part::Context { .. } => "an attention context",
        }
    }

    /// What may read it, for messages.
    pub(crate) fn readers(&self) -> &'static str {
        match self {
            Part::Scaled { .. }
            | Part::Erf { .. }
            | Part::OnePlusErf { .. }
            | Part::Gelu { .. } => "the rest of the exact GELU x·0.5·(1 + erf(x/√2))",
            _ => "the rest of a self-attention (Reshape, Transpose, MatMul, Div, Softmax)",
        }
    }
}
