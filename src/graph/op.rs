//! Operators: the closed set of layer kinds a model may use, their shape rules, and the cost
//! each reports for one row of one request (MACs, weight and activation elements, GEMM shape,
//! vector-unit work). Devices and the slack predictor read costs from here and nowhere else.

use super::shape::{Rows, TensorShape};

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
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            _ => return None,
        })
    }
    /// Vector-unit work per element: (simple ops, transcendental ops).
    pub fn vec_work(self) -> (u64, u64) {
        match self {
            Act::None => (0, 0),
            Act::Relu => (1, 0),
            Act::Relu6 => (2, 0),
            Act::Gelu => (5, 1),
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
    /// Multi-head self-attention over packed Q|K|V; cached (causal) in a decoder loop.
    SelfAttn,
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
    LayerNorm,
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
        /// Which row.
        row: usize,
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
            Op::LayerNorm => "layernorm",
            Op::Softmax => "softmax",
            Op::Embedding { .. } => "embedding",
            Op::Lstm { .. } => "lstm",
            Op::Attention { .. } => "attention",
            Op::Argmax => "argmax",
            Op::Take { .. } => "take",
        }
    }

    /// True when the op is a depthwise convolution (runs on the vector unit of the NPU).
    pub fn is_depthwise(&self, in_channels: usize) -> bool {
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
    /// A device-independent size of one execution on `work`: multiply-accumulates, vector-unit
    /// operations and every element read or written (weights included). Real devices scale a
    /// measured latency by its ratio between two amounts of work (the encoder-length curve of a
    /// profile), where measuring every length would take too long.
    pub fn work_proxy(&self, work: &Work) -> f64 {
        let t = self.totals(work);
        let vec = (self.vec_simple_per_row + self.vec_transc_per_row) * work.rows;
        (t.macs + vec + t.in_elems + t.out_elems + t.weight_elems) as f64
    }

    /// Totals for one execution on `work`.
    pub fn totals(&self, work: &Work) -> CostTotals {
        let mut macs = self.vec_macs_per_row * work.rows;
        if let Some(g) = self.gemm {
            macs += g.m_per_row * work.rows * g.n * g.k * g.count;
        }
        if let Some(a) = self.attn {
            // scores (d per pair) and context (dv per pair)
            macs += work.pairs * (a.d + a.dv);
        }
        CostTotals {
            macs,
            weight_elems: self.weight_elems,
            in_elems: self.in_elems_per_row * work.rows
                + self.attn.map_or(0, |a| a.kv_elems_per_key * work.pairs),
            out_elems: self.out_elems_per_row * work.rows,
        }
    }
}

/// Why a node's inputs do not fit its op (the loader adds the file, line and field).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ShapeError(pub String);

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

/// Product of a shape's dimensions.
pub fn numel(shape: &[usize]) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

/// Output-size arithmetic of a sliding window.
pub fn window_out(input: usize, kernel: usize, stride: usize, padding: usize) -> Option<usize> {
    let padded = input + 2 * padding;
    if stride == 0 || kernel == 0 || padded < kernel {
        return None;
    }
    Some((padded - kernel) / stride + 1)
}

/// Checks a tensor has rank 3 ([C, H, W]).
fn chw(s: &TensorShape) -> Result<(usize, usize, usize), ShapeError> {
    match s.feat.as_slice() {
        [c, h, w] => Ok((*c, *h, *w)),
        other => Err(format!("expects a [C, H, W] input, got {other:?}").into()),
    }
}

fn vec1(s: &TensorShape) -> Result<usize, ShapeError> {
    match s.feat.as_slice() {
        [d] => Ok(*d),
        other => Err(format!("expects rows of a vector [D], got {other:?}").into()),
    }
}

/// Shape inference and cost for one node. `ins` are the per-step views of the inputs (after the
/// loop reading rules); `in_decoder_loop` selects cached self-attention. `tied_table` gives the
/// (vocab, dim) of the embedding a `tied` field names. Returns the output shape and the cost.
pub fn infer(
    op: &Op,
    ins: &[TensorShape],
    in_decoder_loop: bool,
    tied_table: Option<(usize, usize)>,
) -> Result<(TensorShape, NodeCost), ShapeError> {
    let want = |n: usize| -> Result<(), ShapeError> {
        if ins.len() == n {
            Ok(())
        } else {
            Err(format!("takes {n} input(s), got {}", ins.len()).into())
        }
    };
    let mut c = NodeCost::default();
    let out = match op {
        Op::Input { shape, rows, .. } => {
            want(0)?;
            if shape.is_empty() || shape.contains(&0) {
                return Err("shape must be non-empty with positive sizes".into());
            }
            c.out_elems_per_row = numel(shape);
            TensorShape::new(*rows, shape.clone())
        }
        Op::Conv2d {
            out_channels,
            kernel: (kh, kw),
            stride,
            padding,
            groups,
            bias,
            bn,
            act,
        } => {
            want(1)?;
            let (ci, h, w) = chw(&ins[0])?;
            let (co, g) = (*out_channels, *groups);
            if co == 0 || g == 0 || ci % g != 0 || co % g != 0 {
                return Err(format!("channels {ci}->{co} are not divisible by groups {g}").into());
            }
            let ho = window_out(h, *kh, *stride, *padding)
                .ok_or_else(|| format!("kernel {kh}x{kw} does not fit a {h}x{w} input"))?;
            let wo = window_out(w, *kw, *stride, *padding)
                .ok_or_else(|| format!("kernel {kh}x{kw} does not fit a {h}x{w} input"))?;
            let k = (ci / g * kh * kw) as u64;
            let weights = k * co as u64;
            c.params =
                weights + if *bias { co as u64 } else { 0 } + if *bn { 2 * co as u64 } else { 0 };
            c.weight_elems = c.params;
            let out_px = (ho * wo) as u64;
            if op.is_depthwise(ci) {
                c.vec_macs_per_row = out_px * co as u64 * k;
            } else {
                c.gemm = Some(Gemm {
                    m_per_row: out_px,
                    n: (co / g) as u64,
                    k,
                    count: g as u64,
                });
            }
            let epi = u64::from(*bias || *bn) + act.vec_work().0;
            c.vec_simple_per_row = out_px * co as u64 * epi;
            c.vec_transc_per_row = out_px * co as u64 * act.vec_work().1;
            c.in_elems_per_row = (ci * h * w) as u64;
            c.out_elems_per_row = out_px * co as u64;
            TensorShape::new(ins[0].rows, vec![co, ho, wo])
        }
        Op::Pool {
            kind,
            kernel,
            stride,
            padding,
        } => {
            want(1)?;
            let (ch, h, w) = chw(&ins[0])?;
            let (ho, wo, win) = if *kind == PoolKind::GlobalAvg {
                (1, 1, h * w)
            } else {
                let ho = window_out(h, *kernel, *stride, *padding)
                    .ok_or_else(|| format!("window {kernel} does not fit a {h}x{w} input"))?;
                let wo = window_out(w, *kernel, *stride, *padding)
                    .ok_or_else(|| format!("window {kernel} does not fit a {h}x{w} input"))?;
                (ho, wo, kernel * kernel)
            };
            c.vec_simple_per_row = (ch * ho * wo * win) as u64;
            c.in_elems_per_row = (ch * h * w) as u64;
            c.out_elems_per_row = (ch * ho * wo) as u64;
            TensorShape::new(ins[0].rows, vec![ch, ho, wo])
        }
        Op::Flatten => {
            want(1)?;
            let n = numel(&ins[0].feat) as usize;
            TensorShape::new(ins[0].rows, vec![n])
        }
        Op::Linear {
            out_features,
            bias,
            act,
            tied,
        } => {
            if ins.is_empty() {
                return Err("takes at least one input".into());
            }
            let rows = same_rows(ins)?;
            let mut k = 0usize;
            for s in ins {
                k += vec1(s)?;
            }
            let n = *out_features;
            if n == 0 {
                return Err("out_features must be positive".into());
            }
            if tied.is_some() {
                let (v, d) = tied_table.ok_or("tied table not found")?;
                if (v, d) != (n, k) {
                    return Err(
                        format!("tied table is {v}x{d} but this layer maps {k} -> {n}").into(),
                    );
                }
                c.params = if *bias { n as u64 } else { 0 };
                c.weight_elems = (k * n) as u64 + c.params;
            } else {
                c.params = (k * n) as u64 + if *bias { n as u64 } else { 0 };
                c.weight_elems = c.params;
            }
            c.gemm = Some(Gemm {
                m_per_row: 1,
                n: n as u64,
                k: k as u64,
                count: 1,
            });
            c.vec_simple_per_row = n as u64 * (u64::from(*bias) + act.vec_work().0);
            c.vec_transc_per_row = n as u64 * act.vec_work().1;
            c.in_elems_per_row = k as u64;
            c.out_elems_per_row = n as u64;
            TensorShape::new(rows, vec![n])
        }
        Op::Add { act } => {
            if ins.len() < 2 {
                return Err("takes at least two inputs".into());
            }
            for s in &ins[1..] {
                if s != &ins[0] {
                    return Err(format!("inputs differ in shape: {} vs {}", ins[0], s).into());
                }
            }
            let n = numel(&ins[0].feat);
            c.vec_simple_per_row = n * (ins.len() as u64 - 1 + act.vec_work().0);
            c.vec_transc_per_row = n * act.vec_work().1;
            c.in_elems_per_row = n * ins.len() as u64;
            c.out_elems_per_row = n;
            ins[0].clone()
        }
        Op::Concat => {
            if ins.is_empty() {
                return Err("takes at least one input".into());
            }
            let rows = same_rows(ins)?;
            let mut d = 0;
            for s in ins {
                d += vec1(s)?;
            }
            c.in_elems_per_row = d as u64;
            c.out_elems_per_row = d as u64;
            TensorShape::new(rows, vec![d])
        }
        Op::Activation { kind } => {
            want(1)?;
            let n = numel(&ins[0].feat);
            c.vec_simple_per_row = n * kind.vec_work().0.max(1);
            c.vec_transc_per_row = n * kind.vec_work().1;
            c.in_elems_per_row = n;
            c.out_elems_per_row = n;
            ins[0].clone()
        }
        Op::BatchNorm => {
            want(1)?;
            let ch = *ins[0].feat.first().ok_or("empty input shape")?;
            let n = numel(&ins[0].feat);
            c.params = 2 * ch as u64;
            c.weight_elems = c.params;
            c.vec_simple_per_row = 2 * n;
            c.in_elems_per_row = n;
            c.out_elems_per_row = n;
            ins[0].clone()
        }
        Op::LayerNorm => {
            want(1)?;
            let d = vec1(&ins[0])? as u64;
            c.params = 2 * d;
            c.weight_elems = c.params;
            c.vec_simple_per_row = 5 * d;
            c.vec_transc_per_row = 1;
            c.in_elems_per_row = d;
            c.out_elems_per_row = d;
            ins[0].clone()
        }
        Op::Softmax => {
            want(1)?;
            let d = vec1(&ins[0])? as u64;
            c.vec_simple_per_row = 3 * d;
            c.vec_transc_per_row = d;
            c.in_elems_per_row = d;
            c.out_elems_per_row = d;
            ins[0].clone()
        }
        Op::Embedding {
            vocab,
            dim,
            scale,
            positional,
            positions,
            token_types,
            tied,
        } => {
            want(1)?;
            if vec1(&ins[0])? != 1 {
                return Err("expects token ids (rows of [1])".into());
            }
            if *vocab == 0 || *dim == 0 {
                return Err("vocab and dim must be positive".into());
            }
            if tied.is_some() {
                let (v, d) = tied_table.ok_or("tied table not found")?;
                if (v, d) != (*vocab, *dim) {
                    return Err(
                        format!("tied table is {v}x{d}, this embedding is {vocab}x{dim}").into(),
                    );
                }
            } else {
                c.params = (vocab * dim) as u64;
            }
            let pos = if *positional == PosEnc::Learned {
                *positions
            } else {
                0
            };
            c.params += ((pos + token_types) * dim) as u64;
            let tables = 1 + u64::from(pos > 0) + u64::from(*token_types > 0);
            c.gather_elems_per_row = tables * *dim as u64;
            c.vec_simple_per_row = *dim as u64
                * (u64::from(*scale) + u64::from(*positional != PosEnc::None) + tables - 1);
            c.in_elems_per_row = 1;
            c.out_elems_per_row = *dim as u64;
            TensorShape::new(ins[0].rows, vec![*dim])
        }
        Op::Lstm { hidden, .. } => {
            if ins.is_empty() {
                return Err("takes at least one input".into());
            }
            let mut k = 0;
            for s in ins {
                if s.rows != Rows::One {
                    return Err(format!(
                        "an lstm steps one row at a time; input has {} rows (put it in a loop)",
                        s.rows
                    )
                    .into());
                }
                k += vec1(s)?;
            }
            let h = *hidden as u64;
            if h == 0 {
                return Err("hidden must be positive".into());
            }
            let kk = k as u64 + h;
            c.params = 4 * h * kk + 4 * h;
            c.weight_elems = c.params;
            c.gemm = Some(Gemm {
                m_per_row: 1,
                n: 4 * h,
                k: kk,
                count: 1,
            });
            // bias add on 4H gates, 3 sigmoids + 2 tanh, 3 muls + 1 add on H
            c.vec_simple_per_row = 4 * h + 4 * h;
            c.vec_transc_per_row = 5 * h;
            c.in_elems_per_row = kk + h; // x, h_{t-1}, c_{t-1}
            c.out_elems_per_row = 2 * h; // h_t, c_t
            TensorShape::new(Rows::One, vec![*hidden])
        }
        Op::Attention { mode, heads } => {
            let heads = *heads;
            if heads == 0 {
                return Err("heads must be positive".into());
            }
            match mode {
                AttnMode::Additive | AttnMode::Dot => {
                    want(3)?;
                    if ins[0].rows != Rows::One {
                        return Err("query must be one row (a decoder step)".into());
                    }
                    if heads != 1 {
                        return Err("additive and dot attention have one head".into());
                    }
                    let dq = vec1(&ins[0])?;
                    let dk = vec1(&ins[1])?;
                    let dv = vec1(&ins[2])?;
                    if ins[1].rows != ins[2].rows || !ins[1].rows.is_sequence() {
                        return Err("keys and values must be the same sequence".into());
                    }
                    if dq != dk {
                        return Err(format!("query width {dq} != key width {dk}").into());
                    }
                    if *mode == AttnMode::Additive {
                        c.params = 2 * dk as u64 + 1;
                        c.weight_elems = c.params;
                    }
                    c.attn = Some(AttnCost {
                        heads: 1,
                        d: dk as u64,
                        dv: dv as u64,
                        additive: *mode == AttnMode::Additive,
                        kv_elems_per_key: (dk + dv) as u64,
                    });
                    c.in_elems_per_row = dq as u64;
                    c.out_elems_per_row = dv as u64;
                    TensorShape::new(Rows::One, vec![dv])
                }
                AttnMode::SelfAttn => {
                    want(1)?;
                    let d3 = vec1(&ins[0])?;
                    if d3 % 3 != 0 || (d3 / 3) % heads != 0 {
                        return Err(format!(
                            "packed Q|K|V width {d3} is not 3 x a multiple of {heads} heads"
                        )
                        .into());
                    }
                    let d = d3 / 3;
                    if in_decoder_loop != (ins[0].rows == Rows::One) {
                        return Err(
                            "self-attention needs a whole sequence outside a decoder loop, and one row inside"
                                .into(),
                        );
                    }
                    c.attn = Some(AttnCost {
                        heads: heads as u64,
                        d: d as u64,
                        dv: d as u64,
                        additive: false,
                        kv_elems_per_key: if in_decoder_loop { 2 * d as u64 } else { 0 },
                    });
                    c.in_elems_per_row = d3 as u64;
                    c.out_elems_per_row = d as u64;
                    TensorShape::new(ins[0].rows, vec![d])
                }
                AttnMode::Cross => {
                    want(2)?;
                    let d = vec1(&ins[0])?;
                    let d2 = vec1(&ins[1])?;
                    if d2 != 2 * d || d % heads != 0 {
                        return Err(format!(
                            "cross-attention needs q [D] and packed K|V [2D] with D divisible by heads; got {d} and {d2}"
                        ).into());
                    }
                    if !ins[1].rows.is_sequence() {
                        return Err("K|V must be a sequence".into());
                    }
                    c.attn = Some(AttnCost {
                        heads: heads as u64,
                        d: d as u64,
                        dv: d as u64,
                        additive: false,
                        kv_elems_per_key: 2 * d as u64,
                    });
                    c.in_elems_per_row = d as u64;
                    c.out_elems_per_row = d as u64;
                    TensorShape::new(ins[0].rows, vec![d])
                }
            }
        }
        Op::Argmax => {
            want(1)?;
            let v = vec1(&ins[0])? as u64;
            c.vec_simple_per_row = v;
            c.in_elems_per_row = v;
            c.out_elems_per_row = 1;
            TensorShape::new(ins[0].rows, vec![1])
        }
        Op::Take { row } => {
            want(1)?;
            let d = vec1(&ins[0])?;
            match ins[0].rows {
                Rows::Fixed(n) if (*row as u32) < n => {}
                Rows::Fixed(n) => return Err(format!("row {row} out of range 0..{n}").into()),
                _ if *row == 0 => {}
                r => return Err(format!("row {row} may not exist in a {r}-row input").into()),
            }
            c.in_elems_per_row = d as u64;
            c.out_elems_per_row = d as u64;
            TensorShape::new(Rows::One, vec![d])
        }
    };
    Ok((out, c))
}

fn same_rows(ins: &[TensorShape]) -> Result<Rows, ShapeError> {
    let r = ins[0].rows;
    if ins.iter().any(|s| s.rows != r) {
        return Err("inputs have different row counts".into());
    }
    Ok(r)
}

/// The per-step feature shape an op produces regardless of its input widths, when it has one.
/// Shape inference of loops with `@prev` feedback starts from these.
pub fn op_implied_row(op: &Op) -> Option<Vec<usize>> {
    match op {
        Op::Linear { out_features, .. } => Some(vec![*out_features]),
        Op::Lstm { hidden, .. } => Some(vec![*hidden]),
        Op::Embedding { dim, .. } => Some(vec![*dim]),
        Op::Argmax => Some(vec![1]),
        _ => None,
    }
}
