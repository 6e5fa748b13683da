//! Dense layers: `Gemm` and `MatMul` by a weight matrix become our `linear` (weights as
//! `[K][N]`, `transB` undone), and a constant added right after becomes its bias. A layer
//! reads one row per request, or one per token of a sequence.

use super::proto::pb::NodeProto;
use super::proto::{attr_f, attr_i, Const};
use super::translate::{at, Kind, Translator, Val, R};
use crate::graph::weights::Weights;

impl Translator {
    /// A constant added to a linear layer without a bias: its bias.
    pub(crate) fn bias_add(
        &mut self,
        n: &NodeProto,
        idx: usize,
        shape: Vec<usize>,
        c: Const,
    ) -> R<()> {
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
            return self.bind(n, Val::Node { idx, shape });
        }
        Err(format!(
            "{}: adds a constant of shape {:?}: supported only as the bias of the MatMul before it",
            at(n),
            c.dims
        ))
    }

    /// A linear layer from a weight matrix `[K][N]` (already in our order).
    pub(crate) fn linear(
        &mut self,
        n: &NodeProto,
        k: usize,
        cols: usize,
        w: Vec<f32>,
        bias: Option<Vec<f32>>,
    ) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let rows_ok = match shape.len() {
            1 => true,
            2 => self.seq == Some(shape[0]),
            _ => false,
        };
        if !rows_ok || shape.last() != Some(&k) {
            return Err(format!(
                "{}: input shape {shape:?}: expected rows of the weights' K = {k} (flatten first)",
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

    pub(crate) fn gemm(&mut self, n: &NodeProto) -> R<()> {
        let b = self.weight_input(n, 1)?;
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

    pub(crate) fn matmul(&mut self, n: &NodeProto) -> R<()> {
        // (matched by reference: a weight matrix is not copied to learn it is not a part)
        if let (Val::Part(a), Val::Part(b)) = (self.input(n, 0)?, self.input(n, 1)?) {
            let (a, b) = (a.clone(), b.clone());
            return self.part_matmul(n, a, b);
        }
        let b = self.weight_input(n, 1).map_err(|_| {
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
}

#[cfg(test)]
#[path = "dense_tests.rs"]
mod tests;
