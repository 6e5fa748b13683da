//! ONNX nodes to our nodes, one at a time in the file's (topological) order. A BatchNorm that
//! follows a convolution is folded into it, an activation or a bias add is fused into the
//! node before it when nothing else reads that node's output, and `Identity`, `Dropout` and
//! shape-only reshapes disappear. Every tensor name stands for either one of our nodes (with
//! its per-request shape: the ONNX shape without the batch axis) or a constant.

use super::proto::pb::NodeProto;
use super::proto::{attr, attr_f, attr_i, attr_ints, attr_s, tensor, Const};
use crate::graph::weights::Weights;
use std::collections::HashMap;

/// The ONNX operators the importer translates.
pub(crate) const SUPPORTED: &[&str] = &[
    "Conv",
    "BatchNormalization",
    "Relu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "Add",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Flatten",
    "Reshape",
    "Gemm",
    "MatMul",
    "Softmax",
    "Identity",
    "Dropout",
    "Constant",
];

/// What an ONNX tensor name stands for.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    /// The output of our node `idx`, one request's shape (no batch axis).
    Node { idx: usize, shape: Vec<usize> },
    /// A constant.
    Const(Const),
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

/// The translation's state.
pub(crate) struct Translator {
    /// Every tensor name seen so far.
    pub vals: HashMap<String, Val>,
    /// How many nodes (and graph outputs) read each tensor.
    pub uses: HashMap<String, usize>,
    /// Our nodes so far.
    pub nodes: Vec<Emitted>,
    names: HashMap<String, usize>,
}

type R<T> = std::result::Result<T, String>;

fn at(n: &NodeProto) -> String {
    format!("node '{}' ({})", n.name(), n.op_type())
}

fn usize_of(v: i64, what: &str) -> R<usize> {
    usize::try_from(v).map_err(|_| format!("{what} = {v}: expected a non-negative integer"))
}

/// A sliding window's output size, or why the window does not fit.
fn window(len: usize, k: usize, s: usize, p: usize) -> R<usize> {
    let padded = len + 2 * p;
    if s == 0 || k == 0 || padded < k {
        return Err(format!(
            "a window of {k} (stride {s}, padding {p}) does not fit an input of {len}"
        ));
    }
    Ok((padded - k) / s + 1)
}

impl Translator {
    pub(crate) fn new(uses: HashMap<String, usize>) -> Self {
        Translator {
            vals: HashMap::new(),
            uses,
            nodes: Vec::new(),
            names: HashMap::new(),
        }
    }

    /// The graph's input, our first node.
    pub(crate) fn graph_input(&mut self, name: &str, shape: Vec<usize>) {
        let dims = shape.iter().map(|&d| d as i64).collect();
        self.names.insert(name.to_string(), 1);
        self.nodes.push(Emitted {
            name: name.to_string(),
            op: "input",
            fields: vec![
                ("shape", toml_edit::Value::Array(dims)),
                ("seq", "one".into()),
            ],
            inputs: Vec::new(),
            weights: None,
            kind: Kind::Other,
            act: None,
            origin: String::new(),
        });
        self.vals
            .insert(name.to_string(), Val::Node { idx: 0, shape });
    }

    /// A unique node name from the ONNX node's name (or its first output's).
    fn name_for(&mut self, n: &NodeProto) -> String {
        let base = if n.name().is_empty() {
            n.output.first().cloned().unwrap_or_else(|| "node".into())
        } else {
            n.name().to_string()
        };
        let k = self.names.entry(base.clone()).or_insert(0);
        *k += 1;
        if *k == 1 {
            base
        } else {
            format!("{base}#{k}")
        }
    }

    /// Adds our node and binds the ONNX node's first output to it.
    fn emit(&mut self, n: &NodeProto, e: Emitted, shape: Vec<usize>) -> R<()> {
        let idx = self.nodes.len();
        self.nodes.push(e);
        let out = n
            .output
            .first()
            .ok_or_else(|| format!("{}: no output", at(n)))?;
        self.vals.insert(out.clone(), Val::Node { idx, shape });
        Ok(())
    }

    fn new_node(
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

    /// The value input `i` of `n` names.
    fn input(&self, n: &NodeProto, i: usize) -> R<&Val> {
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
    fn node_input(&self, n: &NodeProto, i: usize) -> R<(usize, String, Vec<usize>)> {
        match self.input(n, i)? {
            Val::Node { idx, shape } => Ok((*idx, self.nodes[*idx].name.clone(), shape.clone())),
            Val::Const(_) => Err(format!(
                "{}: input {i} is a constant where a computed tensor is expected",
                at(n)
            )),
        }
    }

    /// Input `i` as a constant.
    fn const_input(&self, n: &NodeProto, i: usize) -> R<Const> {
        match self.input(n, i)? {
            Val::Const(c) => Ok(c.clone()),
            Val::Node { .. } => Err(format!(
                "{}: input {i} must be an initializer (a weight), not a computed tensor",
                at(n)
            )),
        }
    }

    /// True when our node `idx`'s output is read by this one consumer only.
    fn sole_reader(&self, n: &NodeProto) -> bool {
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
            "Flatten" => self.flatten(n),
            "Reshape" => self.reshape(n),
            "Gemm" => self.gemm(n),
            "MatMul" => self.matmul(n),
            "Softmax" => self.softmax(n),
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
        let out = n
            .output
            .first()
            .ok_or_else(|| format!("{}: no output", at(n)))?;
        self.vals.insert(out.clone(), Val::Const(c));
        Ok(())
    }

    fn alias(&mut self, n: &NodeProto) -> R<()> {
        let v = self.input(n, 0)?.clone();
        let out = n
            .output
            .first()
            .ok_or_else(|| format!("{}: no output", at(n)))?;
        self.vals.insert(out.clone(), v);
        Ok(())
    }

    fn conv(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let w = self.const_input(n, 1)?;
        let [c, h, wd] = shape[..] else {
            return Err(format!(
                "{}: input shape {shape:?}: expected [C, H, W]",
                at(n)
            ));
        };
        let [co, cg, kh, kw] = w.dims[..] else {
            return Err(format!("{}: weight dims {:?}: expected 4", at(n), w.dims));
        };
        let g = usize_of(attr_i(n, "group", 1), "group")?;
        if g == 0 || c % g != 0 || co % g != 0 || cg != c / g {
            return Err(format!(
                "{}: group = {g} does not fit {c} input and {co} output channels (weight {:?})",
                at(n),
                w.dims
            ));
        }
        let (stride, padding) = self.window_attrs(n, (kh, kw))?;
        let (ho, wo) = (
            window(h, kh, stride, padding),
            window(wd, kw, stride, padding),
        );
        let (ho, wo) = (
            ho.map_err(|e| format!("{}: {e}", at(n)))?,
            wo.map_err(|e| format!("{}: {e}", at(n)))?,
        );
        let bias = match n.input.get(2).filter(|s| !s.is_empty()) {
            Some(_) => Some(self.const_input(n, 2)?),
            None => None,
        };
        if let Some(b) = &bias {
            if b.len() != co || b.f.len() != co {
                return Err(format!(
                    "{}: bias of {} values for {co} channels",
                    at(n),
                    b.len()
                ));
            }
        }
        // [Cout][Cin/g][kh][kw] as [group][K = (ci, ky, kx)][Cout/g]
        let (cog, taps) = (co / g, kh * kw);
        let k = cg * taps;
        let mut canon = vec![0.0; w.f.len()];
        for gi in 0..g {
            for o in 0..cog {
                for kk in 0..k {
                    canon[(gi * k + kk) * cog + o] = w.f[(gi * cog + o) * k + kk];
                }
            }
        }
        let mut e = self.new_node(
            n,
            "conv2d",
            vec![from],
            Kind::Conv {
                bn: false,
                bias: bias.is_some(),
            },
        );
        e.fields = vec![
            ("out_channels", (co as i64).into()),
            (
                "kernel",
                toml_edit::Value::Array([kh as i64, kw as i64].into_iter().collect()),
            ),
            ("stride", (stride as i64).into()),
            ("padding", (padding as i64).into()),
            ("groups", (g as i64).into()),
            ("bias", bias.is_some().into()),
        ];
        e.weights = Some(Weights {
            w: canon,
            shift: bias.map(|b| b.f).unwrap_or_default(),
            ..Weights::default()
        });
        self.emit(n, e, vec![co, ho, wo])
    }

    /// A window's stride and padding, checked to be the same on both axes, with dilation 1 and
    /// explicit padding.
    fn window_attrs(&self, n: &NodeProto, (kh, kw): (usize, usize)) -> R<(usize, usize)> {
        let ks = attr_ints(n, "kernel_shape");
        if !ks.is_empty() && ks != [kh as i64, kw as i64] {
            return Err(format!(
                "{}: kernel_shape {ks:?} disagrees with the weights",
                at(n)
            ));
        }
        let pad = attr_s(n, "auto_pad", "NOTSET");
        if pad != "NOTSET" && pad != "VALID" {
            return Err(format!(
                "{}: auto_pad = {pad}: only explicit pads are supported (export with \
                 explicit padding)",
                at(n)
            ));
        }
        let dil = attr_ints(n, "dilations");
        if dil.iter().any(|&d| d != 1) {
            return Err(format!(
                "{}: dilations = {dil:?}: only 1 is supported",
                at(n)
            ));
        }
        let strides = attr_ints(n, "strides");
        let stride = match strides[..] {
            [] => 1,
            [a, b] if a == b => usize_of(a, "strides")?,
            _ => {
                return Err(format!(
                    "{}: strides = {strides:?}: only equal strides on both axes are supported",
                    at(n)
                ))
            }
        };
        let pads = attr_ints(n, "pads");
        let padding = match pads[..] {
            [] => 0,
            [a, b, c, d] if a == b && b == c && c == d => usize_of(a, "pads")?,
            _ => {
                return Err(format!(
                    "{}: pads = {pads:?}: only the same padding on every side is supported",
                    at(n)
                ))
            }
        };
        Ok((stride, padding))
    }

    fn batch_norm(&mut self, n: &NodeProto) -> R<()> {
        let (idx, from, shape) = self.node_input(n, 0)?;
        if attr_i(n, "training_mode", 0) != 0 {
            return Err(format!(
                "{}: training_mode = 1: export the model in eval mode",
                at(n)
            ));
        }
        let eps = attr_f(n, "epsilon", 1e-5);
        let c = shape.first().copied().unwrap_or(0);
        let [gamma, beta, mean, var] = [1, 2, 3, 4].map(|i| self.const_input(n, i));
        let (gamma, beta, mean, var) = (gamma?, beta?, mean?, var?);
        for (what, t) in [
            ("scale", &gamma),
            ("B", &beta),
            ("mean", &mean),
            ("var", &var),
        ] {
            if t.f.len() != c {
                return Err(format!(
                    "{}: {what} has {} values for {c} channels",
                    at(n),
                    t.f.len()
                ));
            }
        }
        let scale: Vec<f32> = (0..c)
            .map(|i| gamma.f[i] / (var.f[i] + eps).sqrt())
            .collect();
        let shift_of = |bias: &[f32]| -> Vec<f32> {
            (0..c)
                .map(|i| beta.f[i] + (bias.get(i).copied().unwrap_or(0.0) - mean.f[i]) * scale[i])
                .collect()
        };
        let fold = self.sole_reader(n)
            && matches!(self.nodes[idx].kind, Kind::Conv { bn: false, .. })
            && self.nodes[idx].act.is_none();
        if fold {
            let conv = &mut self.nodes[idx];
            let w = conv.weights.get_or_insert_with(Weights::default);
            w.shift = shift_of(&w.shift);
            w.scale = scale;
            conv.kind = Kind::Conv {
                bn: true,
                bias: true,
            };
            conv.fields.retain(|(k, _)| *k != "bias");
            conv.fields.push(("bn", true.into()));
            conv.origin = format!("{} + {}", conv.origin, at(n));
            let out = n
                .output
                .first()
                .ok_or_else(|| format!("{}: no output", at(n)))?;
            self.vals.insert(out.clone(), Val::Node { idx, shape });
            return Ok(());
        }
        let mut e = self.new_node(n, "batchnorm", vec![from], Kind::Other);
        e.weights = Some(Weights {
            shift: shift_of(&[]),
            scale,
            ..Weights::default()
        });
        self.emit(n, e, shape)
    }

    /// An activation: fused into the node before when nothing else reads it, else its own node.
    fn act(&mut self, n: &NodeProto, kind: &'static str) -> R<()> {
        let (idx, from, shape) = self.node_input(n, 0)?;
        let prev = &self.nodes[idx];
        let fusable = matches!(
            prev.kind,
            Kind::Conv { .. } | Kind::Linear { .. } | Kind::Add
        );
        if fusable && prev.act.is_none() && self.sole_reader(n) {
            let prev = &mut self.nodes[idx];
            prev.act = Some(kind);
            prev.origin = format!("{} + {}", prev.origin, at(n));
            let out = n
                .output
                .first()
                .ok_or_else(|| format!("{}: no output", at(n)))?;
            self.vals.insert(out.clone(), Val::Node { idx, shape });
            return Ok(());
        }
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
            | (Val::Const(c), Val::Node { idx, shape }) => self.bias_add(n, idx, shape, c),
            _ => Err(format!(
                "{}: adds two constants (fold them before export)",
                at(n)
            )),
        }
    }

    /// A constant added to a linear layer without a bias: its bias.
    fn bias_add(&mut self, n: &NodeProto, idx: usize, shape: Vec<usize>, c: Const) -> R<()> {
        let width = shape.last().copied().unwrap_or(0);
        let sole = self
            .uses
            .get(&self.nodes_output_name(n, idx))
            .copied()
            .unwrap_or(0)
            == 1;
        let prev = &mut self.nodes[idx];
        if prev.kind == (Kind::Linear { bias: false })
            && prev.act.is_none()
            && sole
            && c.f.len() == width
        {
            prev.kind = Kind::Linear { bias: true };
            prev.fields.retain(|(k, _)| *k != "bias");
            prev.fields.push(("bias", true.into()));
            prev.weights.get_or_insert_with(Weights::default).bias = c.f;
            prev.origin = format!("{} + {}", prev.origin, at(n));
            let out = n
                .output
                .first()
                .ok_or_else(|| format!("{}: no output", at(n)))?;
            self.vals.insert(out.clone(), Val::Node { idx, shape });
            return Ok(());
        }
        Err(format!(
            "{}: adds a constant of shape {:?}: supported only as the bias of the MatMul before it",
            at(n),
            c.dims
        ))
    }

    /// The ONNX tensor name of the input of `n` bound to our node `idx`.
    fn nodes_output_name(&self, n: &NodeProto, idx: usize) -> String {
        n.input
            .iter()
            .find(|x| matches!(self.vals.get(*x), Some(Val::Node { idx: i, .. }) if *i == idx))
            .cloned()
            .unwrap_or_default()
    }

    fn pool(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let [c, h, w] = shape[..] else {
            return Err(format!(
                "{}: input shape {shape:?}: expected [C, H, W]",
                at(n)
            ));
        };
        let ks = attr_ints(n, "kernel_shape");
        let k = match ks[..] {
            [a, b] if a == b => usize_of(a, "kernel_shape")?,
            _ => {
                return Err(format!(
                    "{}: kernel_shape = {ks:?}: only square windows are supported",
                    at(n)
                ))
            }
        };
        if attr_i(n, "ceil_mode", 0) != 0 {
            return Err(format!(
                "{}: ceil_mode = 1: only floor rounding is supported",
                at(n)
            ));
        }
        let (stride, padding) = self.window_attrs(n, (k, k))?;
        let max = n.op_type() == "MaxPool";
        if !max && padding > 0 && attr_i(n, "count_include_pad", 0) != 0 {
            return Err(format!(
                "{}: count_include_pad = 1 with padding: our average leaves the padding out",
                at(n)
            ));
        }
        if n.output.len() > 1 && n.output[1..].iter().any(|o| !o.is_empty()) {
            return Err(format!("{}: the Indices output is not supported", at(n)));
        }
        let (ho, wo) = (window(h, k, stride, padding), window(w, k, stride, padding));
        let (ho, wo) = (
            ho.map_err(|e| format!("{}: {e}", at(n)))?,
            wo.map_err(|e| format!("{}: {e}", at(n)))?,
        );
        let mut e = self.new_node(n, "pool", vec![from], Kind::Other);
        e.fields = vec![
            ("kind", if max { "max" } else { "avg" }.into()),
            ("kernel", (k as i64).into()),
            ("stride", (stride as i64).into()),
            ("padding", (padding as i64).into()),
        ];
        self.emit(n, e, vec![c, ho, wo])
    }

    fn global_pool(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let [c, _, _] = shape[..] else {
            return Err(format!(
                "{}: input shape {shape:?}: expected [C, H, W]",
                at(n)
            ));
        };
        let mut e = self.new_node(n, "pool", vec![from], Kind::Other);
        e.fields = vec![("kind", "global_avg".into())];
        self.emit(n, e, vec![c, 1, 1])
    }

    /// A flatten of one request's tensor into one row.
    fn flatten_to_row(&mut self, n: &NodeProto) -> R<()> {
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
        let (_, _, shape) = self.node_input(n, 0)?;
        let target = self.const_input(n, 1)?.i;
        let numel: usize = shape.iter().product();
        let same: Vec<i64> = std::iter::once(-1)
            .chain(shape.iter().map(|&d| d as i64))
            .collect();
        match target[..] {
            [b, f] if (b == -1 || b == 0 || b == 1) && (f == -1 || f == numel as i64) => {
                self.flatten_to_row(n)
            }
            _ if target.len() == same.len()
                && target.iter().zip(&same).skip(1).all(|(t, s)| t == s || *t == 0) =>
            {
                self.alias(n)
            }
            _ => Err(format!(
                "{}: shape {target:?} from one request's {shape:?}: only flattening to [batch, -1] is supported",
                at(n)
            )),
        }
    }

    /// A linear layer from a weight matrix `[K][N]` (already in our order).
    fn linear(
        &mut self,
        n: &NodeProto,
        k: usize,
        cols: usize,
        w: Vec<f32>,
        bias: Option<Vec<f32>>,
    ) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        if shape != [k] {
            return Err(format!(
                "{}: input shape {shape:?}: expected one row of the weights' K = {k} (flatten first)",
                at(n)
            ));
        }
        let mut e = self.new_node(
            n,
            "linear",
            vec![from],
            Kind::Linear {
                bias: bias.is_some(),
            },
        );
        e.fields = vec![
            ("out_features", (cols as i64).into()),
            ("bias", bias.is_some().into()),
        ];
        e.weights = Some(Weights {
            w,
            bias: bias.unwrap_or_default(),
            ..Weights::default()
        });
        let mut out = shape;
        if let Some(l) = out.last_mut() {
            *l = cols;
        }
        self.emit(n, e, out)
    }

    fn gemm(&mut self, n: &NodeProto) -> R<()> {
        let b = self.const_input(n, 1)?;
        let (alpha, beta) = (attr_f(n, "alpha", 1.0), attr_f(n, "beta", 1.0));
        if alpha != 1.0 || beta != 1.0 || attr_i(n, "transA", 0) != 0 {
            return Err(format!(
                "{}: alpha = {alpha}, beta = {beta}, transA = {}: only 1, 1, 0 are supported",
                at(n),
                attr_i(n, "transA", 0)
            ));
        }
        let [r, c] = b.dims[..] else {
            return Err(format!("{}: B dims {:?}: expected 2", at(n), b.dims));
        };
        let trans = attr_i(n, "transB", 0) != 0;
        let (k, cols) = if trans { (c, r) } else { (r, c) };
        let w = if trans {
            let mut t = vec![0.0; b.f.len()];
            for i in 0..cols {
                for j in 0..k {
                    t[j * cols + i] = b.f[i * k + j];
                }
            }
            t
        } else {
            b.f
        };
        let bias = match n.input.get(2).filter(|s| !s.is_empty()) {
            Some(_) => {
                let c = self.const_input(n, 2)?;
                if c.f.len() != cols {
                    return Err(format!(
                        "{}: C has {} values for N = {cols} (no broadcasting)",
                        at(n),
                        c.f.len()
                    ));
                }
                Some(c.f)
            }
            None => None,
        };
        self.linear(n, k, cols, w, bias)
    }

    fn matmul(&mut self, n: &NodeProto) -> R<()> {
        let b = self.const_input(n, 1).map_err(|_| {
            format!(
                "{}: only a MatMul by a weight matrix (an initializer) is supported",
                at(n)
            )
        })?;
        let [k, cols] = b.dims[..] else {
            return Err(format!("{}: weight dims {:?}: expected 2", at(n), b.dims));
        };
        self.linear(n, k, cols, b.f, None)
    }

    fn softmax(&mut self, n: &NodeProto) -> R<()> {
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
