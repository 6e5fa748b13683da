//! ONNX nodes to our nodes, one at a time in the file's (topological) order. A BatchNorm that
//! follows a convolution is folded into it, an activation or a bias add is fused into the
//! node before it when nothing else reads that node's output, and `Identity`, `Dropout` and
//! shape-only reshapes disappear. Every tensor name stands for one of our nodes (with its
//! per-request shape: the ONNX shape without the batch axis; a token sequence's length is our
//! rows), a constant ([`fold`](super::fold) computes constant subgraphs such as shapes), or a
//! part of a recognised pattern — attention or the exact GELU — that becomes our nodes when it
//! completes ([`patterns`](super::patterns)). The operators themselves live by family:
//! convolutions and pooling in `vision`, dense layers in `dense`, embeddings and layer norm in
//! `sequence`; this file holds the state, the dispatch and the elementwise and shape operators.

use super::proto::pb::NodeProto;
use super::proto::{attr, attr_f, attr_i, tensor, Const};
use std::collections::HashMap;

pub(crate) use super::values::{Emitted, Kind, Val};

/// The ONNX operators the importer translates, each with the inputs the ONNX specification
/// allows it, fewest to most, over the opsets imported (an optional input left out in the middle,
/// an empty name, counts): `Unsqueeze`, `Squeeze`, `ReduceMean` and `Reshape` took their second
/// input as an attribute in early opsets, `Slice` its last four; `Concat` takes any number.
pub(crate) const SUPPORTED: &[(&str, usize, usize)] = &[
    ("Conv", 2, 3),
    ("LayerNormalization", 2, 3),
    ("Gelu", 1, 1),
    ("Erf", 1, 1),
    ("Mul", 2, 2),
    ("Div", 2, 2),
    ("Sub", 2, 2),
    ("Transpose", 1, 1),
    ("Gather", 2, 2),
    ("Shape", 1, 1),
    ("Unsqueeze", 1, 2),
    ("Squeeze", 1, 2),
    ("Concat", 1, usize::MAX),
    ("Slice", 1, 5),
    ("Cast", 1, 1),
    ("Range", 3, 3),
    ("Expand", 2, 2),
    ("Where", 3, 3),
    ("Equal", 2, 2),
    ("Greater", 2, 2),
    ("GreaterOrEqual", 2, 2),
    ("Less", 2, 2),
    ("LessOrEqual", 2, 2),
    ("GatherElements", 2, 2),
    ("IsNaN", 1, 1),
    ("BatchNormalization", 5, 5),
    ("Relu", 1, 1),
    ("Clip", 1, 3),
    ("Sigmoid", 1, 1),
    ("Tanh", 1, 1),
    ("Add", 2, 2),
    ("MaxPool", 1, 1),
    ("AveragePool", 1, 1),
    ("GlobalAveragePool", 1, 1),
    ("ReduceMean", 1, 2),
    ("Flatten", 1, 1),
    ("Reshape", 1, 2),
    ("Gemm", 2, 3),
    ("MatMul", 2, 2),
    ("Softmax", 1, 1),
    ("Identity", 1, 1),
    ("Dropout", 1, 3),
    ("Constant", 0, 0),
];

/// The translation's state.
pub(crate) struct Translator {
    /// Every tensor name seen so far.
    pub vals: HashMap<String, Val>,
    /// How many nodes (and graph outputs) read each tensor.
    pub uses: HashMap<String, usize>,
    /// Our nodes so far.
    pub nodes: Vec<Emitted>,
    /// Each of our nodes' per-request output shape.
    pub shapes: Vec<Vec<usize>>,
    names: HashMap<String, usize>,
    /// The rows of a token sequence (the input's length), when the input is one.
    pub seq: Option<usize>,
}

pub(crate) type R<T> = std::result::Result<T, String>;

pub(crate) fn at(n: &NodeProto) -> String {
    format!("node '{}' ({})", n.name(), n.op_type())
}

pub(crate) fn usize_of(v: i64, what: &str) -> R<usize> {
    usize::try_from(v).map_err(|_| format!("{what} = {v}: expected a non-negative integer"))
}

impl Translator {
    pub(crate) fn new(uses: HashMap<String, usize>) -> Self {
        Translator {
            vals: HashMap::new(),
            uses,
            nodes: Vec::new(),
            shapes: Vec::new(),
            names: HashMap::new(),
            seq: None,
        }
    }

    /// The graph's input, our first node: an image or a vector of floats (one row), or a
    /// sequence of token ids (one row per token).
    pub(crate) fn graph_input(&mut self, onnx_name: &str, shape: Vec<usize>, tokens: bool) {
        let mut fields = if tokens {
            self.seq = shape.first().copied();
            vec![
                (
                    "shape",
                    toml_edit::Value::Array([1i64].into_iter().collect()),
                ),
                ("seq", (shape.first().copied().unwrap_or(1) as i64).into()),
                ("tokens", true.into()),
            ]
        } else {
            let dims = shape.iter().map(|&d| d as i64).collect();
            vec![
                ("shape", toml_edit::Value::Array(dims)),
                ("seq", "one".into()),
            ]
        };
        fields.shrink_to_fit();
        let name = self.unique(onnx_name);
        self.nodes.push(Emitted {
            name: name.clone(),
            op: "input",
            fields,
            inputs: Vec::new(),
            weights: None,
            kind: Kind::Other,
            act: None,
            origin: String::new(),
        });
        self.shapes.push(shape.clone());
        self.vals
            .insert(onnx_name.to_string(), Val::Node { idx: 0, shape });
    }

    /// A unique node name from the ONNX node's name (or its first output's).
    fn name_for(&mut self, n: &NodeProto) -> String {
        let raw = if n.name().is_empty() {
            n.output.first().map_or("node", String::as_str)
        } else {
            n.name()
        };
        self.unique(raw)
    }

    /// `raw` in the characters a model file allows (others become `_`; a leading `/`, as
    /// PyTorch's exporter writes, is dropped), made unique with a `_2`, `_3`… suffix.
    fn unique(&mut self, raw: &str) -> String {
        let ok = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
        let mut base: String = raw
            .trim_start_matches('/')
            .chars()
            .map(|c| if ok(c) { c } else { '_' })
            .collect();
        if base.is_empty() {
            base = "node".into();
        }
        let mut name = base.clone();
        let mut k = 1;
        while self.names.contains_key(&name) {
            k += 1;
            name = format!("{base}_{k}");
        }
        self.names.insert(name.clone(), 1);
        name
    }

    /// Adds our node without binding any ONNX name to it.
    pub(crate) fn push_node(&mut self, e: Emitted, shape: Vec<usize>) -> usize {
        self.nodes.push(e);
        self.shapes.push(shape);
        self.nodes.len() - 1
    }

    /// Adds our node and binds the ONNX node's first output to it.
    pub(crate) fn emit(&mut self, n: &NodeProto, e: Emitted, shape: Vec<usize>) -> R<()> {
        let idx = self.push_node(e, shape.clone());
        self.bind(n, Val::Node { idx, shape })
    }

    pub(crate) fn new_node(
        &mut self,
        n: &NodeProto,
        op: &'static str,
        inputs: Vec<String>,
        kind: Kind,
    ) -> Emitted {
        Emitted {
            name: self.name_for(n),
            op,
            fields: Vec::new(),
            inputs,
            weights: None,
            kind,
            act: None,
            origin: at(n),
        }
    }

    /// Binds the ONNX node's first output to `v`.
    pub(crate) fn bind(&mut self, n: &NodeProto, v: Val) -> R<()> {
        let out = n
            .output
            .first()
            .ok_or_else(|| format!("{}: no output", at(n)))?;
        self.vals.insert(out.clone(), v);
        Ok(())
    }

    /// The value input `i` of `n` names.
    pub(crate) fn input(&self, n: &NodeProto, i: usize) -> R<&Val> {
        let name = n
            .input
            .get(i)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("{}: input {i} is missing", at(n)))?;
        self.vals.get(name).ok_or_else(|| {
            format!(
                "{}: input {i} '{name}' is neither an initializer nor computed before it",
                at(n)
            )
        })
    }

    /// Input `i` as one of our nodes: (its index, its name, its shape).
    pub(crate) fn node_input(&self, n: &NodeProto, i: usize) -> R<(usize, String, Vec<usize>)> {
        match self.input(n, i)? {
            Val::Node { idx, shape } => Ok((*idx, self.nodes[*idx].name.clone(), shape.clone())),
            Val::Const(_) => Err(format!(
                "{}: input {i} is a constant where a computed tensor is expected",
                at(n)
            )),
            Val::Part(p) => Err(format!(
                "{}: input {i} is {} that only {} may read",
                at(n),
                p.what(),
                p.readers()
            )),
        }
    }

    /// Input `i` as a constant.
    pub(crate) fn const_input(&self, n: &NodeProto, i: usize) -> R<Const> {
        self.const_input_ref(n, i).cloned()
    }

    /// [`Self::const_input`] for a node's weights: when `n` is their only reader, their values
    /// move out of the table instead of being copied (its entry keeps the dimensions), so that
    /// an imported model holds each weight once (a 1 GiB MatMul weight took 2 GiB).
    pub(crate) fn weight_input(&mut self, n: &NodeProto, i: usize) -> R<Const> {
        let c = self.const_input_ref(n, i)?;
        let name = &n.input[i];
        if self.uses.get(name).copied().unwrap_or(0) != 1 {
            return Ok(c.clone());
        }
        let dims = c.dims.clone();
        match self.vals.get_mut(name) {
            Some(Val::Const(c)) => Ok(std::mem::replace(
                c,
                Const {
                    dims,
                    f: Vec::new(),
                    i: Vec::new(),
                },
            )),
            _ => Err(format!("{}: input {i} '{name}' went missing", at(n))),
        }
    }

    /// Input `i` of `n`, which must be a constant, borrowed.
    fn const_input_ref(&self, n: &NodeProto, i: usize) -> R<&Const> {
        match self.input(n, i)? {
            Val::Const(c) => Ok(c),
            _ => Err(format!(
                "{}: input {i} must be an initializer (a weight), not a computed tensor",
                at(n)
            )),
        }
    }

    /// True when the input of `n` bound to our node `idx` is read by `n` only.
    pub(crate) fn sole_reader_of(&self, n: &NodeProto, idx: usize) -> bool {
        let name = self.nodes_output_name(n, idx);
        self.uses.get(&name).copied().unwrap_or(0) == 1
    }

    /// True when `n`'s first input is read by `n` only.
    pub(crate) fn sole_reader(&self, n: &NodeProto) -> bool {
        n.input
            .first()
            .is_some_and(|x| self.uses.get(x).copied().unwrap_or(0) == 1)
    }

    /// Translates one ONNX node.
    pub(crate) fn node(&mut self, n: &NodeProto) -> R<()> {
        match n.op_type() {
            "Constant" => self.constant(n),
            "Identity" | "Dropout" => self.alias(n),
            "Conv" => self.conv(n),
            "BatchNormalization" => self.batch_norm(n),
            "Relu" => self.act(n, "relu"),
            "Sigmoid" => self.act(n, "sigmoid"),
            "Tanh" => self.act(n, "tanh"),
            "Clip" => self.clip(n),
            "Add" => self.add(n),
            "MaxPool" | "AveragePool" => self.pool(n),
            "GlobalAveragePool" => self.global_pool(n),
            "ReduceMean" => self.reduce_mean(n),
            "Flatten" => self.flatten(n),
            "Reshape" => self.reshape(n),
            "Gemm" => self.gemm(n),
            "MatMul" => self.matmul(n),
            "Softmax" => self.softmax(n),
            "LayerNormalization" => self.layer_norm(n),
            "Gelu" => self.gelu(n),
            "Erf" => self.erf(n),
            "Mul" | "Div" | "Sub" => self.arith(n),
            "Transpose" => self.transpose(n),
            "Gather" => self.gather(n),
            "Where" => self.where_(n),
            "IsNaN" => self.is_nan(n),
            "Shape" | "Unsqueeze" | "Squeeze" | "Concat" | "Slice" | "Cast" | "Range"
            | "Expand" | "Equal" | "Greater" | "GreaterOrEqual" | "Less" | "LessOrEqual"
            | "GatherElements" => self.fold(n),
            other => Err(format!("{}: unsupported operator {other}", at(n))),
        }
    }

    fn constant(&mut self, n: &NodeProto) -> R<()> {
        let c = if let Some(t) = attr(n, "value").and_then(|a| a.t.as_ref()) {
            tensor(t).map_err(|e| format!("{}: value: {e}", at(n)))?
        } else if let Some(f) = attr(n, "value_float").and_then(|a| a.f) {
            Const {
                dims: vec![],
                f: vec![f],
                i: vec![],
            }
        } else if let Some(a) = attr(n, "value_ints") {
            Const {
                dims: vec![a.ints.len()],
                f: vec![],
                i: a.ints.clone(),
            }
        } else if let Some(i) = attr(n, "value_int").and_then(|a| a.i) {
            Const {
                dims: vec![],
                f: vec![],
                i: vec![i],
            }
        } else {
            return Err(format!(
                "{}: only value, value_float, value_int(s) are read",
                at(n)
            ));
        };
        self.bind(n, Val::Const(c))
    }

    fn alias(&mut self, n: &NodeProto) -> R<()> {
        let v = self.input(n, 0)?.clone();
        self.bind(n, v)
    }

    /// An activation: fused into the node before when nothing else reads it, else its own node.
    pub(crate) fn act(&mut self, n: &NodeProto, kind: &'static str) -> R<()> {
        let (idx, _, _) = self.node_input(n, 0)?;
        let sole = self.sole_reader(n);
        self.act_on(n, idx, kind, sole)
    }

    /// Activation `kind` applied to our node `idx` (fused into it when `sole`: nothing else
    /// reads its output), bound to `n`'s output.
    pub(crate) fn act_on(
        &mut self,
        n: &NodeProto,
        idx: usize,
        kind: &'static str,
        sole: bool,
    ) -> R<()> {
        let shape = self.shapes[idx].clone();
        let prev = &self.nodes[idx];
        let fusable = matches!(
            prev.kind,
            Kind::Conv { .. } | Kind::Linear { .. } | Kind::Add
        );
        if fusable && prev.act.is_none() && sole {
            let prev = &mut self.nodes[idx];
            prev.act = Some(kind);
            prev.origin = format!("{} + {}", prev.origin, at(n));
            return self.bind(n, Val::Node { idx, shape });
        }
        let from = self.nodes[idx].name.clone();
        let mut e = self.new_node(n, "act", vec![from], Kind::Other);
        e.fields = vec![("kind", kind.into())];
        self.emit(n, e, shape)
    }

    fn clip(&mut self, n: &NodeProto) -> R<()> {
        let bound = |i: usize, attr_name: &str, default: f32| -> R<f32> {
            match n.input.get(i).filter(|s| !s.is_empty()) {
                Some(_) => {
                    let c = self.const_input(n, i)?;
                    c.f.first()
                        .copied()
                        .ok_or_else(|| format!("{}: input {i} is empty", at(n)))
                }
                None => Ok(attr_f(n, attr_name, default)),
            }
        };
        let (lo, hi) = (bound(1, "min", f32::MIN)?, bound(2, "max", f32::MAX)?);
        match (lo, hi) {
            (0.0, 6.0) => self.act(n, "relu6"),
            (0.0, h) if h >= f32::MAX => self.act(n, "relu"),
            _ => Err(format!(
                "{}: min = {lo}, max = {hi}: only Clip(0, 6) (ReLU6) and Clip(0) (ReLU) are supported",
                at(n)
            )),
        }
    }

    fn add(&mut self, n: &NodeProto) -> R<()> {
        let (a, b) = (self.input(n, 0)?.clone(), self.input(n, 1)?.clone());
        match (a, b) {
            (Val::Part(p), Val::Const(c)) | (Val::Const(c), Val::Part(p)) => self.part_add(n, p, c),
            (Val::Const(a), Val::Const(b)) => self.fold_binary(n, a, b),
            (Val::Node { shape: sa, .. }, Val::Node { shape: sb, .. }) => {
                if sa != sb {
                    return Err(format!(
                        "{}: shapes {sa:?} and {sb:?}: only equal shapes are added (no broadcasting)",
                        at(n)
                    ));
                }
                let (_, x, _) = self.node_input(n, 0)?;
                let (_, y, _) = self.node_input(n, 1)?;
                let e = self.new_node(n, "add", vec![x, y], Kind::Add);
                self.emit(n, e, sa)
            }
            (Val::Node { idx, shape }, Val::Const(c))
            | (Val::Const(c), Val::Node { idx, shape }) => self.const_add(n, idx, shape, c),
            _ => Err(format!(
                "{}: adds a part of a pattern to a computed tensor",
                at(n)
            )),
        }
    }

    /// A constant added to our node: a linear layer's bias, or an embedding's position (and
    /// token type) table.
    fn const_add(&mut self, n: &NodeProto, idx: usize, shape: Vec<usize>, c: Const) -> R<()> {
        if let Kind::Embedding { positions } = self.nodes[idx].kind {
            return self.position_add(n, idx, shape, c, positions);
        }
        self.bias_add(n, idx, shape, c)
    }

    /// The ONNX tensor name of the input of `n` bound to our node `idx`.
    pub(crate) fn nodes_output_name(&self, n: &NodeProto, idx: usize) -> String {
        n.input
            .iter()
            .find(|x| matches!(self.vals.get(*x), Some(Val::Node { idx: i, .. }) if *i == idx))
            .cloned()
            .unwrap_or_default()
    }

    /// A flatten of one request's tensor into one row.
    pub(crate) fn flatten_to_row(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let numel = shape.iter().product();
        if shape.len() == 1 {
            return self.alias(n);
        }
        let e = self.new_node(n, "flatten", vec![from], Kind::Other);
        self.emit(n, e, vec![numel])
    }

    fn flatten(&mut self, n: &NodeProto) -> R<()> {
        let axis = attr_i(n, "axis", 1);
        if axis != 1 {
            return Err(format!(
                "{}: axis = {axis}: only 1 (keep the batch axis) is supported",
                at(n)
            ));
        }
        self.flatten_to_row(n)
    }

    fn reshape(&mut self, n: &NodeProto) -> R<()> {
        match self.input(n, 0)?.clone() {
            Val::Const(c) => return self.fold_reshape(n, c),
            Val::Part(p) => return self.part_reshape(n, p),
            Val::Node { .. } => {}
        }
        let (idx, _, shape) = self.node_input(n, 0)?;
        let target = self.const_input(n, 1)?.i;
        if let Some(part) = self.split_heads(idx, &shape, &target) {
            return self.bind(n, Val::Part(part));
        }
        let numel: usize = shape.iter().product();
        // the batch axis (whatever the target says there), then every axis as it is (0: copied)
        let keeps = target.len() == shape.len() + 1
            && target[1..]
                .iter()
                .zip(&shape)
                .all(|(&t, &s)| t == s as i64 || t == 0);
        match target[..] {
            [b, f] if (b == -1 || b == 0 || b == 1) && (f == -1 || f == numel as i64) => {
                self.flatten_to_row(n)
            }
            _ if keeps => self.alias(n),
            _ => Err(format!(
                "{}: shape {target:?} from one request's {shape:?}: only flattening to [batch, -1] is supported",
                at(n)
            )),
        }
    }

    fn softmax(&mut self, n: &NodeProto) -> R<()> {
        if let Val::Part(p) = self.input(n, 0)?.clone() {
            return self.part_softmax(n, p);
        }
        let (_, from, shape) = self.node_input(n, 0)?;
        let axis = attr_i(n, "axis", -1);
        let rank = shape.len() as i64 + 1;
        if axis != -1 && axis != rank - 1 {
            return Err(format!(
                "{}: axis = {axis}: only the last axis is supported",
                at(n)
            ));
        }
        let e = self.new_node(n, "softmax", vec![from], Kind::Other);
        self.emit(n, e, shape)
    }
}

#[cfg(test)]
#[path = "translate_tests.rs"]
mod tests;
