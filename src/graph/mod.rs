//! The model graph IR: a model is a list of nodes in a serialized topological order, each with an
//! [`Op`], a [`Class`] (STATIC, ENCODER, DECODER) and named inputs. Consecutive ENCODER or
//! DECODER nodes form a [`Loop`] that a seq2seq request unrolls for its own lengths; what the
//! scheduler batches is one [`NodeStep`] — a (node, timestep) pair — and two sub-batches may merge
//! only when their next `NodeStep` is identical.

pub(crate) mod infer;
pub mod loader;
pub mod onnx;
pub mod op;
pub mod shape;
pub mod weights;
pub mod zoo;

pub use op::{CostTotals, Gemm, NodeCost, Op, Work};
pub use shape::{Rows, TensorShape};

use serde::Serialize;
use std::fmt;

/// Index of a node in its model's node list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NodeId(pub u32);

impl NodeId {
    /// As a vector index.
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Index of a loop in its model's loop list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoopId(pub u32);

/// How often a node runs for one request (the paper's Algorithm 1 node types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// Once per request.
    Static,
    /// Once per encoder (input) step.
    Encoder,
    /// Once per decoder (output) step.
    Decoder,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::Static => "static",
            Class::Encoder => "encoder",
            Class::Decoder => "decoder",
        })
    }
}

/// One executable unit of an unrolled graph: a node at a timestep (0 for static nodes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct NodeStep {
    /// The node.
    pub node: NodeId,
    /// The loop iteration (0 for static nodes).
    pub step: u32,
}

impl fmt::Display for NodeStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}@{}", self.node.0, self.step)
    }
}

/// How a node sees one of its inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// The producer's value (same loop and step, or a static value).
    Same,
    /// The producer's value at the previous step of the same loop.
    Prev,
    /// [`View::Prev`], but at step 0 the one-row value of this static node (a decoder-only
    /// model's first token, chosen by its prefill) instead of zeros or the start token.
    PrevOr(NodeId),
    /// The producer's loop outputs collected into a sequence (one row per position).
    Collected,
    /// `ratio` consecutive rows of a sequence, at this node's step (from the end if `reverse`).
    StepRows {
        /// Rows concatenated per step.
        ratio: u32,
        /// Walk the sequence backwards.
        reverse: bool,
    },
    /// A collected sequence read row by row at this node's step.
    CollectedStepRows {
        /// Rows concatenated per step.
        ratio: u32,
        /// Walk the sequence backwards.
        reverse: bool,
    },
}

/// A resolved input edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    /// The producing node.
    pub node: NodeId,
    /// How it is read.
    pub view: View,
}

/// One layer of a model.
#[derive(Clone, Debug)]
pub struct Node {
    /// Its index.
    pub id: NodeId,
    /// Unique name from the model file.
    pub name: String,
    /// The operation.
    pub op: Op,
    /// STATIC, ENCODER or DECODER.
    pub class: Class,
    /// The loop it belongs to (None for static nodes).
    pub loop_id: Option<LoopId>,
    /// Resolved inputs.
    pub inputs: Vec<Input>,
    /// The per-step shapes of the inputs, as the op sees them.
    pub in_shapes: Vec<TensorShape>,
    /// Output shape (per step for loop nodes).
    pub out: TensorShape,
    /// Static cost description.
    pub cost: NodeCost,
    /// Line of the node in its file (1-based; 0 when built in code).
    pub line: usize,
    /// Which input's row count gives the attention key count (None: not key-driven).
    pub keys: Keys,
    /// The earlier node whose parameters this one uses (`shares` in the file): a decoder-only
    /// model's decode steps run the layers of its prefill. Its own parameter count is 0.
    pub shares: Option<NodeId>,
}

impl Node {
    /// The first input's channels, height and width (convolutions and pooling; the loader
    /// checked the rank).
    pub(crate) fn in_chw(&self) -> (usize, usize, usize) {
        let f = self.in_shapes.first().map_or(&[][..], |s| &s.feat[..]);
        let d = |i: usize| f.get(i).copied().unwrap_or(1);
        (d(0), d(1), d(2))
    }

    /// The output's height and width (convolutions and pooling).
    pub(crate) fn out_hw(&self) -> (usize, usize) {
        let d = |i: usize| self.out.feat.get(i).copied().unwrap_or(1);
        (d(1), d(2))
    }

    /// What the node keeps for each request slot from one of the request's steps to the next,
    /// which every device allocates for its maximum batch. Every op is named: a new op must
    /// say what it carries.
    pub(crate) fn carried(&self) -> Carried {
        match (&self.op, self.keys) {
            (Op::Lstm { hidden, .. }, _) => Carried::Hidden(*hidden),
            (Op::Attention { .. }, Keys::Cache | Keys::PrefixCache(_)) => Carried::KeysValues,
            (Op::Attention { .. }, Keys::None | Keys::OwnRows | Keys::Causal | Keys::Seq(_))
            | (
                Op::Input { .. }
                | Op::Conv2d { .. }
                | Op::Pool { .. }
                | Op::Flatten
                | Op::Linear { .. }
                | Op::Add { .. }
                | Op::Concat
                | Op::Activation { .. }
                | Op::BatchNorm
                | Op::LayerNorm { .. }
                | Op::Softmax
                | Op::Embedding { .. }
                | Op::Argmax
                | Op::Take { .. },
                _,
            ) => Carried::Nothing,
        }
    }
}

/// What a node keeps per request slot across the request's steps ([`Node::carried`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carried {
    /// Nothing: a step reads only its inputs.
    Nothing,
    /// An LSTM cell's hidden state, this many values.
    Hidden(usize),
    /// A decoder self-attention's keys and values of every step so far (its KV cache): two
    /// rows of the node's width a step, up to the model's longest decoder.
    KeysValues,
}

/// Where an attention node's key count comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// Not an attention node.
    None,
    /// Self-attention over the node's own rows.
    OwnRows,
    /// Cached decoder self-attention: step + 1 keys.
    Cache,
    /// Masked self-attention over the node's own rows: row `r` sees rows `0..=r`.
    Causal,
    /// Cached decoder self-attention after a prompt: the prompt's rows, then step + 1 keys.
    PrefixCache(Rows),
    /// The rows of a sequence input.
    Seq(Rows),
}

/// A run of consecutive ENCODER or DECODER nodes that repeats per step.
#[derive(Clone, Debug)]
pub struct Loop {
    /// Name (the `loop` field or the class name).
    pub name: String,
    /// ENCODER or DECODER.
    pub class: Class,
    /// Encoder loops: the loop runs ceil(enc_len / div) times.
    pub div: u32,
    /// First node.
    pub first: NodeId,
    /// Last node.
    pub last: NodeId,
}

impl Loop {
    /// How many times the loop runs for a request of lengths `len`.
    pub fn steps(&self, len: Lengths) -> u32 {
        match self.class {
            Class::Encoder => len.enc.div_ceil(self.div.max(1)).max(1),
            _ => len.dec.max(1),
        }
    }
}

/// The built-in length distributions a model's `[seq2seq] lengths` may name (their data:
/// `data/wmt/`, `data/llm/`; drawn from in `traffic::lengths`).
pub const LENGTH_DISTRIBUTIONS: &[&str] = &["wmt-ende", "azure-conv-2023"];

/// Sequence settings of a seq2seq model (`[seq2seq]` in the file).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SeqConfig {
    /// Built-in length distribution name.
    pub lengths: String,
    /// Encoder steps per source word.
    pub enc_scale: f64,
    /// Decoder steps per target word.
    pub dec_scale: f64,
    /// Reference encoder length (model steps).
    pub ref_enc: u32,
    /// Reference decoder length (model steps).
    pub ref_dec: u32,
    /// Longest encoder length.
    pub max_enc: u32,
    /// Longest decoder length.
    pub max_dec: u32,
    /// The most source and output tokens one request may hold together (`max_context`, a
    /// decoder-only model's context window): a request's lengths are drawn only from pairs
    /// that fit. None: no joint bound (each length clamped to its maximum alone).
    pub max_context: Option<u32>,
    /// True when the model's prefill (a static argmax before the decoder loop) emits the
    /// first output token, so that a request's tokens are its decoder steps plus one; set by
    /// the loader from the graph, not a file key.
    pub prefill_token: bool,
}

impl SeqConfig {
    /// Decoder steps for a request that outputs `tokens` tokens (at least one step).
    pub fn steps_for_tokens(&self, tokens: u32) -> u32 {
        tokens.saturating_sub(u32::from(self.prefill_token)).max(1)
    }

    /// Output tokens of a request with `dec` decoder steps.
    pub fn tokens_for_steps(&self, dec: u32) -> u32 {
        dec + u32::from(self.prefill_token)
    }
}

/// A validated model.
#[derive(Clone, Debug)]
pub struct Model {
    /// Name.
    pub name: String,
    /// One-line description.
    pub description: String,
    /// Where the layer facts come from.
    pub source: String,
    /// Model-allowed maximum batch.
    pub max_batch: u32,
    /// Sequence settings (None for static models).
    pub seq: Option<SeqConfig>,
    /// Nodes in execution order.
    pub nodes: Vec<Node>,
    /// Loops in execution order.
    pub loops: Vec<Loop>,
    /// The models this one is made of: one part for a model file; several for co-located models
    /// ([`Model::compose`]), each a contiguous range of nodes a request of that model runs.
    pub parts: Vec<Part>,
    /// The part each node belongs to.
    pub node_part: Vec<u16>,
    /// Real weights an imported model brings (empty: devices generate them from a seed).
    pub imported: weights::Imported,
}

/// One model of a (possibly composed) model: its node range and sequence settings.
#[derive(Clone, Debug)]
pub struct Part {
    /// The model's name.
    pub name: String,
    /// Its first node.
    pub first: NodeId,
    /// One past its last node.
    pub end: u32,
    /// Its sequence settings.
    pub seq: Option<SeqConfig>,
}

/// The lengths of one request, in model steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct Lengths {
    /// Encoder steps (source positions at full time resolution).
    pub enc: u32,
    /// Decoder steps.
    pub dec: u32,
}

impl Model {
    /// True when the model has encoder/decoder loops.
    pub fn is_seq2seq(&self) -> bool {
        !self.loops.is_empty()
    }

    /// What kind of network it is, as `models` names it: `static` (no loops), `decoder-only`
    /// (a prompt's prefill, then one output token a decoder step: a model whose prefill emits
    /// the first token or that has a context window, GPT-2) or `seq2seq` (an encoder over the
    /// source, a decoder over the target: GNMT, the Transformer, LAS).
    pub fn architecture(&self) -> &'static str {
        match self.parts.iter().find_map(|p| p.seq.as_ref()) {
            _ if !self.is_seq2seq() => "static",
            Some(s) if s.prefill_token || s.max_context.is_some() => "decoder-only",
            _ => "seq2seq",
        }
    }

    /// The node with id `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.idx()]
    }

    /// Each node's readers: the nodes that take its output as an input, in node order, once per
    /// input that names it.
    pub(crate) fn readers(&self) -> Vec<Vec<usize>> {
        let mut readers = vec![Vec::new(); self.nodes.len()];
        for n in &self.nodes {
            for input in &n.inputs {
                readers[input.node.idx()].push(n.id.idx());
            }
        }
        readers
    }

    /// Looks a node up by name.
    pub fn find(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The index of the node whose table `node` reads (a tied linear or embedding), None when
    /// the node owns its weights; an error when the named table is not in the model.
    pub(crate) fn tied_owner(&self, node: &Node) -> crate::Result<Option<usize>> {
        match &node.op {
            Op::Linear { tied: Some(t), .. } | Op::Embedding { tied: Some(t), .. } => {
                self.find(t).map(|x| Some(x.id.idx())).ok_or_else(|| {
                    crate::Error::Internal(format!(
                        "node '{}' of model '{}' ties to '{t}', which the model does not have",
                        node.name, self.name
                    ))
                })
            }
            _ => Ok(None),
        }
    }

    /// Total trainable parameters.
    pub fn params(&self) -> u64 {
        self.nodes.iter().map(|n| n.cost.params).sum()
    }

    /// The part (co-located model) node `n` belongs to.
    pub fn part_of(&self, n: NodeId) -> usize {
        usize::from(self.node_part[n.idx()])
    }

    /// Reference lengths of part `p`.
    pub fn ref_lengths_of(&self, p: usize) -> Lengths {
        match &self.parts[p].seq {
            Some(s) => Lengths {
                enc: s.ref_enc,
                dec: s.ref_dec,
            },
            None => Lengths { enc: 1, dec: 1 },
        }
    }

    /// The first unit a request of part `p` executes.
    pub(crate) fn first_step_of(&self, p: usize) -> NodeStep {
        NodeStep {
            node: self.parts[p].first,
            step: 0,
        }
    }

    /// Co-locates `models` on one device: one model whose nodes are the models' nodes one after
    /// another (names prefixed `model/`), with one [`Part`] each. Nodes of different parts never
    /// share an identity, so sub-batches of different models never merge.
    pub fn compose(models: Vec<Model>) -> Model {
        let imported = weights::Imported::concat(&models);
        let mut nodes = Vec::new();
        let mut loops = Vec::new();
        let mut parts = Vec::new();
        let mut node_part = Vec::new();
        let mut names = Vec::new();
        let (mut max_enc, mut max_dec) = (1, 1);
        let mut seq: Option<SeqConfig> = None;
        let mut max_batch = 0;
        for (pi, m) in models.into_iter().enumerate() {
            let off = nodes.len() as u32;
            let loff = loops.len() as u32;
            for l in &m.loops {
                loops.push(Loop {
                    name: format!("{}/{}", m.name, l.name),
                    first: NodeId(l.first.0 + off),
                    last: NodeId(l.last.0 + off),
                    ..l.clone()
                });
            }
            for mut n in m.nodes.clone() {
                n.id = NodeId(n.id.0 + off);
                n.name = format!("{}/{}", m.name, n.name);
                n.loop_id = n.loop_id.map(|l| LoopId(l.0 + loff));
                for i in &mut n.inputs {
                    i.node = NodeId(i.node.0 + off);
                }
                // a tied table is named; the composed model prefixes every name
                if let Op::Linear { tied: Some(t), .. } | Op::Embedding { tied: Some(t), .. } =
                    &mut n.op
                {
                    *t = format!("{}/{t}", m.name);
                }
                nodes.push(n);
                node_part.push(pi as u16);
            }
            if let Some(s) = &m.seq {
                max_enc = max_enc.max(s.max_enc);
                max_dec = max_dec.max(s.max_dec);
                seq.get_or_insert_with(|| s.clone());
            }
            max_batch = max_batch.max(m.max_batch);
            parts.push(Part {
                name: m.name.clone(),
                first: NodeId(off),
                end: nodes.len() as u32,
                seq: m.seq.clone(),
            });
            names.push(m.name);
        }
        if let Some(s) = seq.as_mut() {
            s.max_enc = max_enc;
            s.max_dec = max_dec;
        }
        Model {
            name: names.join("+"),
            description: format!("co-located: {}", names.join(", ")),
            source: String::new(),
            max_batch,
            seq,
            nodes,
            loops,
            parts,
            node_part,
            imported,
        }
    }

    /// The reference lengths (`ref_enc`, `ref_dec`; 1/1 for static models).
    pub fn ref_lengths(&self) -> Lengths {
        match &self.seq {
            Some(s) => Lengths {
                enc: s.ref_enc,
                dec: s.ref_dec,
            },
            None => Lengths { enc: 1, dec: 1 },
        }
    }

    /// How many times loop `l` runs for a request of lengths `len`.
    pub(crate) fn loop_steps(&self, l: &Loop, len: Lengths) -> u32 {
        l.steps(len)
    }

    /// How many times node `n` runs for a request of lengths `len` (Algorithm 1's multiplier).
    pub fn repeats(&self, n: NodeId, len: Lengths) -> u32 {
        match self.nodes[n.idx()].loop_id {
            None => 1,
            Some(l) => self.loop_steps(&self.loops[l.0 as usize], len),
        }
    }

    /// The first unit a request executes.
    pub fn first_step(&self) -> NodeStep {
        NodeStep {
            node: NodeId(0),
            step: 0,
        }
    }

    /// The unit after `at` for a request of lengths `len`, or None when the request is done.
    pub fn next_step(&self, at: NodeStep, len: Lengths) -> Option<NodeStep> {
        let node = &self.nodes[at.node.idx()];
        if let Some(l) = node.loop_id {
            let lp = &self.loops[l.0 as usize];
            if at.node == lp.last && at.step + 1 < self.loop_steps(lp, len) {
                return Some(NodeStep {
                    node: lp.first,
                    step: at.step + 1,
                });
            }
            if at.node != lp.last {
                return Some(NodeStep {
                    node: NodeId(at.node.0 + 1),
                    step: at.step,
                });
            }
        }
        let next = at.node.0 + 1;
        let end = self.parts[self.part_of(at.node)].end;
        (next < end).then_some(NodeStep {
            node: NodeId(next),
            step: 0,
        })
    }

    /// Every unit a request of lengths `len` executes, in order (from [`Model::first_step`]
    /// along [`Model::next_step`]).
    pub fn unrolled(&self, len: Lengths) -> impl Iterator<Item = NodeStep> + '_ {
        std::iter::successors(Some(self.first_step()), move |&at| self.next_step(at, len))
    }

    /// Number of units one request executes end to end.
    pub fn unrolled_len(&self, len: Lengths) -> u64 {
        (0..self.nodes.len() as u32)
            .map(|i| u64::from(self.repeats(NodeId(i), len)))
            .sum()
    }

    /// The work one request contributes when it executes `at`.
    pub(crate) fn member_work(&self, at: NodeStep, len: Lengths) -> Work {
        let node = &self.nodes[at.node.idx()];
        // loop nodes process one row per step; a static node one per output row (a `take`
        // reads a sequence but writes, and is costed per, one row)
        let rows = if node.loop_id.is_some() {
            1
        } else {
            node.out.rows.count(len.enc)
        };
        let keys = match node.keys {
            Keys::None => 0,
            Keys::OwnRows | Keys::Causal => rows,
            Keys::Cache => u64::from(at.step) + 1,
            Keys::PrefixCache(r) => r.count(len.enc) + u64::from(at.step) + 1,
            Keys::Seq(r) => r.count(len.enc),
        };
        // a masked row r sees r + 1 keys: rows (rows + 1) / 2 pairs
        let pairs = match node.keys {
            Keys::Causal => rows * (rows + 1) / 2,
            Keys::None | Keys::OwnRows | Keys::Cache | Keys::PrefixCache(_) | Keys::Seq(_) => {
                rows * keys
            }
        };
        Work {
            batch: 1,
            rows,
            pairs,
            max_keys: keys,
        }
    }

    /// The work a sub-batch does at node `node`, its members given as (lengths, step).
    pub fn work<I: IntoIterator<Item = (Lengths, u32)>>(&self, node: NodeId, members: I) -> Work {
        let mut w = Work::default();
        for (len, step) in members {
            let m = self.member_work(NodeStep { node, step }, len);
            w.batch += 1;
            w.rows += m.rows;
            w.pairs += m.pairs;
            w.max_keys = w.max_keys.max(m.max_keys);
        }
        w
    }

    /// [`Model::work`] for `count` members at the same lengths and step, in O(1).
    pub(crate) fn work_uniform(&self, at: NodeStep, len: Lengths, count: u32) -> Work {
        let m = self.member_work(at, len);
        Work {
            batch: count,
            rows: m.rows * u64::from(count),
            pairs: m.pairs * u64::from(count),
            max_keys: m.max_keys,
        }
    }

    /// True when the cost of every node depends on the batch size only (no length terms).
    pub(crate) fn node_is_length_free(&self, n: NodeId) -> bool {
        let node = &self.nodes[n.idx()];
        let rows_free = node.loop_id.is_some() || !matches!(node.out.rows, Rows::Src { .. });
        let keys_free = match node.keys {
            Keys::None => true,
            Keys::OwnRows | Keys::Causal => rows_free,
            Keys::Cache | Keys::PrefixCache(_) => false,
            Keys::Seq(r) => !matches!(r, Rows::Src { .. }),
        };
        rows_free && keys_free
    }

    /// True when the cost of node `n` depends on the request's encoder length: a static node
    /// with one row per source position (the Transformer's encoder, cross-attention keys and
    /// values), or attention over the source sequence.
    pub(crate) fn node_depends_on_enc(&self, n: NodeId) -> bool {
        let node = &self.nodes[n.idx()];
        let rows = node.loop_id.is_none() && matches!(node.out.rows, Rows::Src { .. });
        let keys = matches!(
            node.keys,
            Keys::Seq(Rows::Src { .. }) | Keys::PrefixCache(Rows::Src { .. })
        );
        rows || keys
    }

    /// The longest encoder length of the part node `n` belongs to (1 for static models).
    pub(crate) fn max_enc_of(&self, n: NodeId) -> u32 {
        self.parts[self.part_of(n)]
            .seq
            .as_ref()
            .map_or(1, |s| s.max_enc.max(1))
    }

    /// True when executing node `n` gives a request its first output token before its decoder
    /// loop: a static argmax (a decoder-only model's prefill choosing the first token).
    pub(crate) fn emits_first_token(&self, n: NodeId) -> bool {
        let node = &self.nodes[n.idx()];
        node.class == Class::Static
            && matches!(node.op, Op::Argmax)
            && self.parts[self.part_of(n)]
                .seq
                .as_ref()
                .is_some_and(|s| s.prefill_token)
    }

    /// Output tokens of a request of part `p` at lengths `len`: its decoder steps, plus the
    /// prefill's token where the prefill emits one; 0 for a model without a decoder.
    pub fn tokens_of(&self, p: usize, len: Lengths) -> u32 {
        self.parts[p]
            .seq
            .as_ref()
            .map_or(0, |s| s.tokens_for_steps(len.dec))
    }

    /// MACs of one request end to end at lengths `len` (batch 1).
    pub fn macs(&self, len: Lengths) -> u64 {
        self.unrolled(len)
            .map(|s| {
                let w = self.member_work(s, len);
                self.nodes[s.node.idx()].cost.totals(&w).macs
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lstm_cells_and_decoder_self_attention_carry_state_between_steps() {
        let mut seen = (0, 0);
        for name in ["gnmt", "transformer", "resnet50", "bert", "mobilenet"] {
            for n in &zoo::load(name).unwrap().nodes {
                // the definition, from the op and the node's class
                let want = match &n.op {
                    Op::Lstm { hidden, .. } => Carried::Hidden(*hidden),
                    Op::Attention {
                        mode: op::AttnMode::SelfAttn,
                        ..
                    } if n.class == Class::Decoder => Carried::KeysValues,
                    _ => Carried::Nothing,
                };
                assert_eq!(n.carried(), want, "{name}: {}", n.name);
                match want {
                    Carried::Hidden(_) => seen.0 += 1,
                    Carried::KeysValues => seen.1 += 1,
                    Carried::Nothing => {}
                }
            }
        }
        // GNMT's LSTM layers and the Transformer's decoder self-attentions were among them
        assert!(seen.0 >= 8 && seen.1 >= 6, "{seen:?}");
    }
}
