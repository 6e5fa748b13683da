//! Operators: the closed set of layer kinds a model may use, their shape rules, and the cost
//! each reports for one row of one request (MACs, weight and activation elements, GEMM shape,
//! vector-unit work). Devices and the slack predictor read costs from here and nowhere else.

use super::shape::Rows;

/// An elementwise activation, standalone or fused into a conv/linear/add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// Identity.
    None,
    /// max(x, 0).
    Relu,
    /// min(max(x, 0), 6).
    Relu6,
    /// Gaussian error linear unit (tanh approximation).
    Gelu,
    /// Gaussian error linear unit, exact: `x · Φ(x)` through erf (what PyTorch's `nn.GELU()`
    /// and ONNX's `Gelu` compute by default).
    GeluErf,
    /// Hyperbolic tangent.
    Tanh,
    /// Logistic sigmoid.
    Sigmoid,
}

impl Act {
    /// Parses the model-file spelling.
    pub fn parse(s: &str) -> Option<Act> {
        Some(match s {
            "none" => Act::None,
            "relu" => Act::Relu,
            "relu6" => Act::Relu6,
            "gelu" => Act::Gelu,
            "gelu_erf" => Act::GeluErf,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            _ => return None,
        })
    }
    /// Vector-unit work per element: (simple ops, transcendental ops).
    pub(crate) fn vec_work(self) -> (u64, u64) {
        match self {
            Act::None => (0, 0),
            Act::Relu => (1, 0),
            Act::Relu6 => (2, 0),
            Act::Gelu => (5, 1),
            Act::GeluErf => (9, 1),
            Act::Tanh | Act::Sigmoid => (0, 1),
        }
    }
}

/// Pooling kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    /// Max over each window.
    Max,
    /// Mean over each window (zero padding counted out).
    Avg,
    /// Mean over the whole plane (output 1×1).
    GlobalAvg,
}

/// Positional encodings an embedding may add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PosEnc {
    /// None.
    None,
    /// Fixed sinusoids (Vaswani et al.).
    Sinusoidal,
    /// A learned table of `positions` rows.
    Learned,
}

/// Attention flavours (see docs/model-format.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnMode {
    /// Normalized Bahdanau (GNMT): inputs query, keys, values.
    Additive,
    /// Dot-product content attention (LAS): inputs query, keys, values.
    Dot,
    /// Multi-head self-attention over packed Q|K|V; cached (causal) in a decoder loop, where a
    /// second input (a static packed Q|K|V sequence: a decoder-only model's prompt) comes first.
    SelfAttn,
    /// Masked (causal) multi-head self-attention over packed Q|K|V outside a loop: each row
    /// attends to itself and the rows before it (a decoder-only model's prefill).
    Causal,
    /// Multi-head cross-attention: q and a packed K|V sequence.
    Cross,
}

/// One layer's operation and its hyper-parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A model input.
    Input {
        /// Feature shape of one row.
        shape: Vec<usize>,
        /// Row count per request.
        rows: Rows,
        /// Values are token ids.
        tokens: bool,
    },
    /// 2-D convolution (depthwise when groups == in channels == out channels).
    Conv2d {
        /// Output channels.
        out_channels: usize,
        /// Kernel height and width.
        kernel: (usize, usize),
        /// Stride (both axes).
        stride: usize,
        /// Zero padding (both axes).
        padding: usize,
        /// Channel groups.
        groups: usize,
        /// Has a bias vector.
        bias: bool,
        /// Batch norm (gamma, beta) folded into the conv.
        bn: bool,
        /// Fused activation.
        act: Act,
    },
    /// Spatial pooling.
    Pool {
        /// Max, average or global average.
        kind: PoolKind,
        /// Window size.
        kernel: usize,
        /// Stride.
        stride: usize,
        /// Padding.
        padding: usize,
    },
    /// Reshape to one dimension (no work).
    Flatten,
    /// Fully connected layer over the last dimension; several inputs are concatenated.
    Linear {
        /// Output features.
        out_features: usize,
        /// Has a bias vector.
        bias: bool,
        /// Fused activation.
        act: Act,
        /// Reuses (transposed) the table of this embedding node.
        tied: Option<String>,
    },
    /// Elementwise sum of its inputs.
    Add {
        /// Fused activation.
        act: Act,
    },
    /// Concatenation along the features.
    Concat,
    /// Standalone activation.
    Activation {
        /// Which one.
        kind: Act,
    },
    /// Explicit batch norm (inference form: scale and shift per channel).
    BatchNorm,
    /// Layer norm over the last dimension.
    LayerNorm {
        /// Added to the variance (1e-5 unless the model file says otherwise; BERT uses 1e-12).
        eps: f32,
    },
    /// Softmax over the last dimension.
    Softmax,
    /// Token embedding lookup, optionally scaled and with positions added.
    Embedding {
        /// Table rows.
        vocab: usize,
        /// Embedding width.
        dim: usize,
        /// Multiply by sqrt(dim).
        scale: bool,
        /// Positional encoding.
        positional: PosEnc,
        /// Learned position table size.
        positions: usize,
        /// Token-type table size (BERT).
        token_types: usize,
        /// Shares the table of this embedding node.
        tied: Option<String>,
        /// In a decoder loop: positions continue after the source rows (step `s` of a request
        /// whose source has `enc` rows sits at position `enc + s`: a decoder-only model's
        /// decode steps follow its prompt); otherwise a step's position is the step.
        after_src: bool,
    },
    /// One LSTM cell step: fused gate GEMM plus pointwise update, state kept per request.
    Lstm {
        /// Hidden units.
        hidden: usize,
        /// Runs over the sequence backwards.
        reverse: bool,
    },
    /// Attention (see [`AttnMode`]).
    Attention {
        /// Flavour.
        mode: AttnMode,
        /// Heads (1 for additive/dot).
        heads: usize,
    },
    /// Index of the largest value (greedy decoding).
    Argmax,
    /// One row of a sequence.
    Take {
        /// Which row (counted from the last when `from_end`).
        row: usize,
        /// Count `row` back from the last row (0: the last), whatever the sequence's length.
        from_end: bool,
    },
}

impl Op {
    /// The model-file name of the op.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Op::Input { .. } => "input",
            Op::Conv2d { .. } => "conv2d",
            Op::Pool { .. } => "pool",
            Op::Flatten => "flatten",
            Op::Linear { .. } => "linear",
            Op::Add { .. } => "add",
            Op::Concat => "concat",
            Op::Activation { .. } => "act",
            Op::BatchNorm => "batchnorm",
            Op::LayerNorm { .. } => "layernorm",
            Op::Softmax => "softmax",
            Op::Embedding { .. } => "embedding",
            Op::Lstm { .. } => "lstm",
            Op::Attention { .. } => "attention",
            Op::Argmax => "argmax",
            Op::Take { .. } => "take",
        }
    }

    /// Why a node of this op may not use the parameters of a node of `owner`'s op (a node's
    /// `shares`), or None when it may: the same kind, with parameters of the same shapes (the
    /// loader checks the input and output widths beside). Only ops with parameters share.
    pub(crate) fn share_mismatch(&self, owner: &Op) -> Option<String> {
        let same = match (self, owner) {
            (
                Op::Linear {
                    out_features: a,
                    bias: ba,
                    tied: ta,
                    ..
                },
                Op::Linear {
                    out_features: b,
                    bias: bb,
                    tied: tb,
                    ..
                },
            ) => a == b && ba == bb && ta.is_none() && tb.is_none(),
            (
                Op::Embedding {
                    vocab: va,
                    dim: da,
                    positional: pa,
                    positions: qa,
                    token_types: ta,
                    tied: None,
                    ..
                },
                Op::Embedding {
                    vocab: vb,
                    dim: db,
                    positional: pb,
                    positions: qb,
                    token_types: tb,
                    tied: None,
                    ..
                },
            ) => (va, da, pa, qa, ta) == (vb, db, pb, qb, tb),
            (Op::LayerNorm { .. }, Op::LayerNorm { .. }) | (Op::BatchNorm, Op::BatchNorm) => true,
            (Op::Conv2d { .. }, Op::Conv2d { .. }) | (Op::Lstm { .. }, Op::Lstm { .. }) => {
                self == owner
            }
            (
                Op::Attention {
                    mode: AttnMode::Additive,
                    ..
                },
                _,
            ) => self == owner,
            (
                Op::Input { .. }
                | Op::Pool { .. }
                | Op::Flatten
                | Op::Add { .. }
                | Op::Concat
                | Op::Activation { .. }
                | Op::Softmax
                | Op::Attention { .. }
                | Op::Argmax
                | Op::Take { .. },
                _,
            ) => {
                return Some(format!(
                    "op {} has no parameters to share",
                    self.kind_name()
                ))
            }
            (
                Op::Linear { .. }
                | Op::Embedding { .. }
                | Op::LayerNorm { .. }
                | Op::BatchNorm
                | Op::Conv2d { .. }
                | Op::Lstm { .. },
                _,
            ) => false,
        };
        (!same).then(|| {
            format!(
                "a {} shares only the parameters of a {} with the same sizes and options (untied)",
                self.kind_name(),
                self.kind_name()
            )
        })
    }

    /// True when the op is a depthwise convolution (runs on the vector unit of the NPU).
    pub(crate) fn is_depthwise(&self, in_channels: usize) -> bool {
        matches!(self, Op::Conv2d { groups, out_channels, .. }
            if *groups > 1 && *groups == in_channels && *out_channels % *groups == 0 && *out_channels / *groups == 1)
    }
}

/// A GEMM `[M × K] · [K × N]`, repeated `count` times (conv groups), with M given per row of
/// one request: a sub-batch with R rows in total runs M = `m_per_row` · R.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Gemm {
    /// Output rows per input row (Hout·Wout for a conv, 1 for a linear).
    pub m_per_row: u64,
    /// Output columns.
    pub n: u64,
    /// Reduction length.
    pub k: u64,
    /// Independent GEMMs (groups).
    pub count: u64,
}

/// Attention work that scales with the number of (query row, key) pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnCost {
    /// Heads.
    pub heads: u64,
    /// Model width (heads × head width; for additive/dot: the key width).
    pub d: u64,
    /// Width of the values (output width).
    pub dv: u64,
    /// Additive (tanh energies) rather than dot-product scores.
    pub additive: bool,
    /// Key/value bytes per key that live in a cache (K and V together), in elements.
    pub kv_elems_per_key: u64,
}

/// The static cost description of one node for one row of one request. Batch- and
/// length-dependent totals come from [`NodeCost::totals`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeCost {
    /// Trainable parameters owned by the node (tied tables count once, at their owner).
    pub params: u64,
    /// Weight elements the node reads per execution, independent of the batch.
    pub weight_elems: u64,
    /// Elements gathered from a table per row (embeddings).
    pub gather_elems_per_row: u64,
    /// The GEMM the node runs on a matrix unit, if any.
    pub gemm: Option<Gemm>,
    /// Multiply-accumulates per row that run on the vector unit (depthwise convs).
    pub vec_macs_per_row: u64,
    /// Vector-unit simple element operations per row.
    pub vec_simple_per_row: u64,
    /// Vector-unit transcendental operations (exp, tanh, ...) per row.
    pub vec_transc_per_row: u64,
    /// Activation elements read per row.
    pub in_elems_per_row: u64,
    /// Activation elements written per row.
    pub out_elems_per_row: u64,
    /// Attention work, if any.
    pub attn: Option<AttnCost>,
}

/// The amount of work one execution of a node does for a sub-batch: summed over its members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Work {
    /// Requests in the sub-batch.
    pub batch: u32,
    /// Rows in total (a static sequence node has one row per position per request).
    pub rows: u64,
    /// Attention (query row, key) pairs in total.
    pub pairs: u64,
    /// Longest key sequence among the members.
    pub max_keys: u64,
}

/// Totals for one execution (what `profile` and reports print).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostTotals {
    /// Multiply-accumulates.
    pub macs: u64,
    /// Weight elements read.
    pub weight_elems: u64,
    /// Activation elements read.
    pub in_elems: u64,
    /// Activation elements written.
    pub out_elems: u64,
}

impl NodeCost {
    /// Sets the activation elements one row reads and writes.
    pub(crate) fn moves(&mut self, read: u64, written: u64) {
        self.in_elems_per_row = read;
        self.out_elems_per_row = written;
    }

    /// A device-independent size of one execution on `work`: multiply-accumulates, vector-unit
    /// operations and every element read or written (weights included). Real devices scale a
    /// measured latency by its ratio between two amounts of work (the encoder-length curve of a
    /// profile), where measuring every length would take too long.
    pub(crate) fn work_proxy(&self, work: &Work) -> f64 {
        let t = self.totals(work);
        let vec = (self.vec_simple_per_row + self.vec_transc_per_row) as f64 * work.rows as f64;
        t.macs as f64 + vec + t.in_elems as f64 + t.out_elems as f64 + t.weight_elems as f64
    }

    /// Totals for one execution on `work`. Saturating: a hostile model's sizes give
    /// `u64::MAX`, which the engine turns into an error (its time horizon), never a wrap.
    pub fn totals(&self, work: &Work) -> CostTotals {
        let mul = |xs: &[u64]| xs.iter().fold(1u64, |a, &x| a.saturating_mul(x));
        let mut macs = mul(&[self.vec_macs_per_row, work.rows]);
        if let Some(g) = self.gemm {
            macs = macs.saturating_add(mul(&[g.m_per_row, work.rows, g.n, g.k, g.count]));
        }
        if let Some(a) = self.attn {
            // scores (d per pair) and context (dv per pair)
            macs = macs.saturating_add(mul(&[work.pairs, a.d.saturating_add(a.dv)]));
        }
        CostTotals {
            macs,
            weight_elems: self.weight_elems,
            in_elems: mul(&[self.in_elems_per_row, work.rows]).saturating_add(
                self.attn
                    .map_or(0, |a| mul(&[a.kv_elems_per_key, work.pairs])),
            ),
            out_elems: mul(&[self.out_elems_per_row, work.rows]),
        }
    }
}

/// Why a node's inputs do not fit its op (the loader adds the file, line and field).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ShapeError(pub String);

impl From<String> for ShapeError {
    fn from(s: String) -> Self {
        ShapeError(s)
    }
}

impl From<&str> for ShapeError {
    fn from(s: &str) -> Self {
        ShapeError(s.to_string())
    }
}

/// Product of a shape's dimensions (saturating; the loader refuses shapes past
/// [`MAX_ROW_ELEMS`]).
pub(crate) fn numel(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
}

/// The most elements one row of a node's input or output may hold (2³², 16 GiB of f32).
pub(crate) const MAX_ROW_ELEMS: u64 = 1 << 32;

/// Output-size arithmetic of a sliding window.
pub(crate) fn window_out(
    input: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
) -> Option<usize> {
    let padded = input + 2 * padding;
    if stride == 0 || kernel == 0 || padded < kernel {
        return None;
    }
    Some((padded - kernel) / stride + 1)
}
