//! The export's graph, indexed — each tensor's producer and readers, its initializers, which
//! nodes a recognized block accounted for — and the blocks found in it but attention: linear
//! layers (MatMul and Add, or Conv1D's Reshape, Gemm, Reshape), layer norms, residual adds, the
//! MLP's GELU (its elementwise chain evaluated), and the check that nothing else computes
//! anything but shapes.

use super::{at, transpose, Linear, Norm, R};
use crate::graph::onnx::proto::pb::{GraphProto, NodeProto, TensorProto};
use crate::graph::onnx::proto::{attr_f, attr_i, attr_s, tensor, Const};
use std::collections::HashMap;

/// The graph, indexed: each tensor's producer and readers, its initializers, and which nodes a
/// recognized block has accounted for.
pub(super) struct Graph<'g> {
    pub(super) g: &'g GraphProto,
    pub(super) producer: HashMap<&'g str, usize>,
    pub(super) readers: HashMap<&'g str, Vec<usize>>,
    pub(super) inits: HashMap<&'g str, &'g TensorProto>,
    pub(super) seen: Vec<bool>,
    /// Each graph input's axes (what a shape computation reads of it).
    pub(super) input_shapes: Vec<(String, Vec<InputAxis>)>,
    /// The token embedding's output, once found (its shape: the tokens' and the width).
    pub(super) embedded: Option<String>,
}

/// An axis of a graph input, as a mask's evaluation sets it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum InputAxis {
    /// The batch (1 when evaluating).
    Batch,
    /// The tokens of this pass.
    Seq,
    /// The past's length.
    Past,
    /// A fixed size.
    Fixed(usize),
}

impl<'g> Graph<'g> {
    pub(super) fn new(g: &'g GraphProto) -> Self {
        let mut producer = HashMap::new();
        let mut readers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, n) in g.node.iter().enumerate() {
            for o in &n.output {
                producer.insert(o.as_str(), i);
            }
            for x in n.input.iter().filter(|x| !x.is_empty()) {
                readers.entry(x.as_str()).or_default().push(i);
            }
        }
        Graph {
            g,
            producer,
            readers,
            inits: g.initializer.iter().map(|t| (t.name(), t)).collect(),
            seen: vec![false; g.node.len()],
            input_shapes: Vec::new(),
            embedded: None,
        }
    }

    pub(super) fn node(&self, i: usize) -> &'g NodeProto {
        &self.g.node[i]
    }

    /// The constant a tensor holds: an initializer, a `Constant` node's value, or an
    /// `Identity` of one.
    pub(super) fn constant(&self, name: &str) -> Option<Const> {
        if let Some(t) = self.inits.get(name) {
            return tensor(t).ok();
        }
        let n = self.node(*self.producer.get(name)?);
        // (an exporter's deduplicated initializer: an `Identity` of its twin)
        if n.op_type() == "Identity" {
            return self.constant(&n.input[0]);
        }
        if n.op_type() != "Constant" {
            return None;
        }
        n.attribute
            .iter()
            .find(|a| a.name() == "value")
            .and_then(|a| a.t.as_ref())
            .and_then(|t| tensor(t).ok())
    }

    /// A float constant's values with its dimensions, or why not.
    pub(super) fn floats(&self, name: &str, what: &str) -> R<Const> {
        match self.constant(name) {
            Some(c) if c.f.len() == c.len() => Ok(c),
            _ => Err(format!("{what}: '{name}' is not a float initializer")),
        }
    }

    /// The nodes reading `x` whose op is one of `ops`.
    fn readers_among(&self, x: &str, ops: &[&str]) -> Vec<usize> {
        self.readers
            .get(x)
            .map(|r| {
                r.iter()
                    .copied()
                    .filter(|&i| ops.contains(&self.node(i).op_type()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Node `i`, marked as recognized.
    fn recognized(&mut self, i: usize) -> &'g NodeProto {
        self.seen[i] = true;
        self.node(i)
    }

    /// The one reader of `x` that is an `op`, marked as recognized.
    pub(super) fn reader(&mut self, x: &str, op: &str) -> R<&'g NodeProto> {
        let found = self.readers_among(x, &[op]);
        match found[..] {
            [i] => Ok(self.recognized(i)),
            [] => Err(format!(
                "'{x}': no {op} reads it where a decoder layer has one"
            )),
            _ => Err(format!(
                "'{x}': {} {op} nodes read it; one was expected",
                found.len()
            )),
        }
    }

    /// `x`, or the float copy of it its one reader makes (`Identity`, a `Cast` to float: an
    /// exporter's `.to(dtype)`), marked as recognized, as many times as there are.
    pub(super) fn through_copies(&mut self, x: &str) -> String {
        let mut x = x.to_string();
        loop {
            let only = match self.readers.get(x.as_str()).map(Vec::as_slice) {
                Some(&[i]) => i,
                _ => return x,
            };
            let n = self.node(only);
            let copy =
                n.op_type() == "Identity" || (n.op_type() == "Cast" && attr_i(n, "to", 0) == 1);
            if !copy {
                return x;
            }
            self.seen[only] = true;
            x = n.output[0].clone();
        }
    }

    /// The one reader of `x` whose op is one of `ops`, marked as recognized.
    pub(super) fn reader_of(&mut self, x: &str, ops: &[&str]) -> R<&'g NodeProto> {
        let found = self.readers_among(x, ops);
        match found[..] {
            [i] => Ok(self.recognized(i)),
            _ => Err(format!(
                "'{x}': one {} was expected to read it, found {}",
                ops.join(" or "),
                found.len()
            )),
        }
    }

    /// A linear layer reading `x` (`k` wide): `MatMul` by `[k, N]` then `Add` of `[N]`, or
    /// Conv1D as exported (`Reshape` to `[-1, k]`, `Gemm`, `Reshape` back).
    pub(super) fn linear(&mut self, x: &str, k: usize) -> R<Linear> {
        let n = self.reader_of(x, &["MatMul", "Reshape"])?;
        if n.op_type() == "MatMul" {
            let w = self.floats(&n.input[1], &at(n))?;
            let [wk, wn] = w.dims[..] else {
                return Err(format!("{}: weights of rank {}", at(n), w.dims.len()));
            };
            if wk != k {
                return Err(format!(
                    "{}: a [{wk}, {wn}] weight for a {k}-wide input",
                    at(n)
                ));
            }
            let out = n.output[0].clone();
            let add = self.reader(&out, "Add")?;
            let other = if add.input[0] == out {
                &add.input[1]
            } else {
                &add.input[0]
            };
            let bias = self.floats(other, &at(add))?;
            if bias.f.len() != wn {
                return Err(format!(
                    "{}: a bias of {} for {wn} outputs",
                    at(add),
                    bias.f.len()
                ));
            }
            return Ok(Linear {
                w: w.f,
                bias: bias.f,
                n: wn,
                out: add.output[0].clone(),
            });
        }
        // Conv1D: Reshape(x, [-1, k]) → Gemm(·, W, b) → Reshape(·, [batch, seq, N]); a
        // computed flattening shape is one the Gemm's 2-D input and k-row weights bound
        let flat = self.constant(&n.input[1]).map(|c| c.i);
        if flat.as_ref().is_some_and(|f| f[..] != [-1, k as i64]) {
            return Err(format!(
                "{}: a reshape to {flat:?} where [-1, {k}] was expected",
                at(n)
            ));
        }
        let gemm = self.reader(&n.output[0], "Gemm")?;
        let (ta, tb) = (attr_i(gemm, "transA", 0), attr_i(gemm, "transB", 0));
        let (alpha, beta) = (attr_f(gemm, "alpha", 1.0), attr_f(gemm, "beta", 1.0));
        if ta != 0 || alpha != 1.0 || beta != 1.0 || gemm.input.len() != 3 {
            return Err(format!(
                "{}: Gemm with transA, alpha, beta 0, 1, 1 and a bias is read",
                at(gemm)
            ));
        }
        let w = self.floats(&gemm.input[1], &at(gemm))?;
        let (wk, wn) = match w.dims[..] {
            [a, b] if tb == 0 => (a, b),
            [a, b] => (b, a),
            _ => return Err(format!("{}: weights of rank {}", at(gemm), w.dims.len())),
        };
        if wk != k {
            return Err(format!(
                "{}: a [{wk}, {wn}] weight for a {k}-wide input",
                at(gemm)
            ));
        }
        let w = if tb == 0 {
            w.f
        } else {
            transpose(&w.f, wn, wk)
        };
        let bias = self.floats(&gemm.input[2], &at(gemm))?;
        if bias.f.len() != wn {
            return Err(format!(
                "{}: a bias of {} for {wn} outputs",
                at(gemm),
                bias.f.len()
            ));
        }
        let back = self.reader(&gemm.output[0], "Reshape")?;
        Ok(Linear {
            w,
            bias: bias.f,
            n: wn,
            out: back.output[0].clone(),
        })
    }

    /// A `LayerNormalization` over the last axis reading `x`, `d` wide.
    pub(super) fn norm(&mut self, x: &str, d: usize) -> R<Norm> {
        let n = self.reader(x, "LayerNormalization")?;
        if attr_i(n, "axis", -1) != -1 || n.input.len() != 3 {
            return Err(format!(
                "{}: over the last axis, with a scale and a bias, is read",
                at(n)
            ));
        }
        let scale = self.floats(&n.input[1], &at(n))?.f;
        let shift = self.floats(&n.input[2], &at(n))?.f;
        if scale.len() != d || shift.len() != d {
            return Err(format!(
                "{}: {} and {} parameters for a width of {d}",
                at(n),
                scale.len(),
                shift.len()
            ));
        }
        Ok(Norm {
            scale,
            shift,
            eps: attr_f(n, "epsilon", 1e-5),
            out: n.output[0].clone(),
        })
    }

    /// The tensor `a + b` computes when `a` is read by an `Add` with another tensor: that `Add`'s
    /// output and the other input.
    pub(super) fn residual(&mut self, a: &str, b: &str) -> R<String> {
        let add = self.reader(a, "Add")?;
        let other = if add.input[0] == a {
            &add.input[1]
        } else {
            &add.input[0]
        };
        if other != b {
            return Err(format!(
                "{}: adds '{other}' where the residual '{b}' was expected",
                at(add)
            ));
        }
        Ok(add.output[0].clone())
    }
}

impl Graph<'_> {
    /// The elementwise chain from `x` (the MLP's first layer) to the tensor its second layer
    /// reads: the GELU it computes (`gelu` or `gelu_erf`) and that tensor.
    pub(super) fn gelu(&mut self, x: &str) -> R<(&'static str, String)> {
        const ELEMENTWISE: &[&str] = &[
            "Mul", "Add", "Sub", "Div", "Pow", "Tanh", "Erf", "Sqrt", "Gelu",
        ];
        // the chain: every elementwise node reachable from x through elementwise nodes
        let mut chain: Vec<usize> = Vec::new();
        let mut frontier = vec![x.to_string()];
        while let Some(t) = frontier.pop() {
            for &i in self
                .readers
                .get(t.as_str())
                .map(Vec::as_slice)
                .unwrap_or(&[])
            {
                let n = self.node(i);
                if ELEMENTWISE.contains(&n.op_type()) && !chain.contains(&i) {
                    chain.push(i);
                    frontier.push(n.output[0].clone());
                }
            }
        }
        chain.sort_unstable();
        // its result: the one output read outside it
        let outside: Vec<&str> = chain
            .iter()
            .map(|&i| self.node(i).output[0].as_str())
            .filter(|o| {
                self.readers
                    .get(o)
                    .is_some_and(|r| r.iter().any(|i| !chain.contains(i)))
            })
            .collect();
        let [out] = outside[..] else {
            return Err(format!(
                "'{x}': the MLP's activation does not end in one tensor ({outside:?})"
            ));
        };
        let xs = probes();
        let mut vals: HashMap<&str, Vec<f32>> = HashMap::new();
        vals.insert(x, xs.clone());
        for &i in &chain {
            let n = self.node(i);
            let arg = |j: usize| -> R<Vec<f32>> {
                let name = n
                    .input
                    .get(j)
                    .ok_or_else(|| format!("{}: an input missing", at(n)))?;
                if let Some(v) = vals.get(name.as_str()) {
                    return Ok(v.clone());
                }
                match self.constant(name) {
                    Some(c) if c.f.len() == 1 => Ok(vec![c.f[0]; xs.len()]),
                    _ => Err(format!(
                        "{}: reads '{name}', neither the activation's input nor a scalar",
                        at(n)
                    )),
                }
            };
            let a = arg(0)?;
            let two = |f: fn(f32, f32) -> f32| -> R<Vec<f32>> {
                Ok(a.iter().zip(arg(1)?).map(|(&p, q)| f(p, q)).collect())
            };
            let y: Vec<f32> = match n.op_type() {
                "Mul" => two(|p, q| p * q)?,
                "Add" => two(|p, q| p + q)?,
                "Sub" => two(|p, q| p - q)?,
                "Div" => two(|p, q| p / q)?,
                "Pow" => two(f32::powf)?,
                "Tanh" => a.iter().map(|v| v.tanh()).collect(),
                "Sqrt" => a.iter().map(|v| v.sqrt()).collect(),
                "Erf" => a.iter().map(|&v| erf(v)).collect(),
                _ => match attr_s(n, "approximate", "none").as_str() {
                    "tanh" => a.iter().map(|&v| gelu_tanh(v)).collect(),
                    "none" => a.iter().map(|&v| gelu_exact(v)).collect(),
                    other => {
                        return Err(format!(
                            "{}: approximate = \"{other}\", neither GELU's (\"none\" or \"tanh\")",
                            at(n)
                        ))
                    }
                },
            };
            vals.insert(n.output[0].as_str(), y);
        }
        let got = &vals[out];
        let near = |f: fn(f32) -> f32| {
            got.iter()
                .zip(&xs)
                .all(|(g, &v)| (g - f(v)).abs() <= 1e-5 * f(v).abs().max(1.0))
        };
        let act = if near(gelu_tanh) {
            "gelu"
        } else if near(gelu_exact) {
            "gelu_erf"
        } else {
            return Err(format!(
                "'{x}': the MLP's activation (ending in '{out}') is neither GELU"
            ));
        };
        for &i in &chain {
            self.seen[i] = true;
        }
        Ok((act, out.to_string()))
    }
}

impl Graph<'_> {
    /// Every node no block accounted for must compute shapes, positions or the mask only:
    /// from `Shape` outputs and integer or boolean constants, through shape operators.
    pub(super) fn shapes_only(&mut self) -> R<()> {
        const SHAPE_OPS: &[&str] = &[
            "Shape",
            "Gather",
            "Unsqueeze",
            "Squeeze",
            "Concat",
            "Slice",
            "Range",
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Cast",
            "Identity",
            "Constant",
            "Reshape",
            "Equal",
            "Less",
            "LessOrEqual",
            "Greater",
            "GreaterOrEqual",
            "Where",
            "Expand",
            "ConstantOfShape",
        ];
        let mut shaped: std::collections::HashSet<String> = self
            .inits
            .iter()
            .filter(|(_, t)| {
                use crate::graph::onnx::proto::pb::tensor_proto::DataType as T;
                matches!(
                    T::try_from(t.data_type.unwrap_or(0)),
                    Ok(T::Int64 | T::Int32 | T::Bool)
                )
            })
            .map(|(n, _)| n.to_string())
            .collect();
        for (i, n) in self.g.node.iter().enumerate() {
            if self.seen[i] {
                continue;
            }
            // (a scalar constant too: a mask's zero and most negative value)
            let scalar = |x: &str| self.constant(x).is_some_and(|c| c.len() == 1);
            let inputs_ok = n
                .input
                .iter()
                .filter(|x| !x.is_empty())
                .all(|x| shaped.contains(x.as_str()) || scalar(x) || n.op_type() == "Shape");
            // (an exporter's deduplicated weight: an `Identity` of its twin initializer)
            let twin = n.op_type() == "Identity" && self.inits.contains_key(n.input[0].as_str());
            if (SHAPE_OPS.contains(&n.op_type()) && inputs_ok) || twin {
                shaped.extend(n.output.iter().cloned());
                self.seen[i] = true;
            }
        }
        let left: Vec<String> = self
            .g
            .node
            .iter()
            .zip(&self.seen)
            .filter(|(_, s)| !**s)
            .map(|(n, _)| at(n))
            .take(5)
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "not a decoder layer, the embeddings, the logits or a shape computation: {}",
                left.join(", ")
            ))
        }
    }
}

/// Where an activation chain is evaluated: 201 points 0.05 apart over [-5, 5], a range over
/// which the two GELUs differ by more than the 1e-5 the match allows.
pub(super) fn probes() -> Vec<f32> {
    (0..201).map(|i| -5.0 + i as f32 * 0.05).collect()
}

pub(super) fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

pub(super) fn gelu_exact(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x / std::f32::consts::SQRT_2))
}

/// The error function (Abramowitz and Stegun 7.1.26, within 1.5e-7).
pub(super) fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let y = 1.0
        - (((((1.061_405_4 * t - 1.453_152_1) * t) + 1.421_413_7) * t - 0.284_496_74) * t
            + 0.254_829_6)
            * t
            * (-x * x).exp();
    y.copysign(x)
}
