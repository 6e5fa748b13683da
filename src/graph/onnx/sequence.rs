//! What a transformer encoder adds to the CNN operators: token embeddings (`Gather` from a
//! table by the input's token ids), their position and token-type tables (constants added to
//! the embedding, folded into one learned position table), and `LayerNormalization`.

use super::proto::pb::NodeProto;
use super::proto::{attr_f, attr_i, Const};
use super::translate::{at, Kind, Translator, Val, R};
use crate::graph::weights::Weights;

impl Translator {
    /// `Gather`: of constants (folded), or rows of a table by the token ids (an embedding).
    pub(crate) fn gather(&mut self, n: &NodeProto) -> R<()> {
        let (data, idx) = (self.input(n, 0)?.clone(), self.input(n, 1)?.clone());
        match (data, idx) {
            (Val::Const(d), Val::Const(i)) => self.fold_gather(n, d, i),
            (Val::Const(table), Val::Node { idx: 0, shape }) if self.seq.is_some() => {
                self.embedding(n, table, shape)
            }
            _ => Err(format!(
                "{}: only a Gather of constants, or of a table's rows by the input's token ids",
                at(n)
            )),
        }
    }

    fn embedding(&mut self, n: &NodeProto, table: Const, ids: Vec<usize>) -> R<()> {
        let [vocab, dim] = table.dims[..] else {
            return Err(format!(
                "{}: table dims {:?}: expected 2",
                at(n),
                table.dims
            ));
        };
        if attr_i(n, "axis", 0) != 0 || table.f.len() != vocab * dim {
            return Err(format!(
                "{}: expected rows of a float table (axis 0)",
                at(n)
            ));
        }
        let from = self.nodes[0].name.clone();
        let mut e = self.new_node(
            n,
            "embedding",
            vec![from],
            Kind::Embedding { positions: false },
        );
        e.fields = vec![
            ("vocab", (vocab as i64).into()),
            ("dim", (dim as i64).into()),
        ];
        e.weights = Some(Weights {
            w: table.f,
            ..Weights::default()
        });
        let rows = ids.first().copied().unwrap_or(1);
        self.emit(n, e, vec![rows, dim])
    }

    /// A constant added to an embedding: a table of one row per position (`[1, rows, dim]`)
    /// or one row for every position (a token type), summed into the embedding's learned
    /// position table.
    pub(crate) fn position_add(
        &mut self,
        n: &NodeProto,
        idx: usize,
        shape: Vec<usize>,
        c: Const,
        has: bool,
    ) -> R<()> {
        let [rows, dim] = shape[..] else {
            return Err(format!("{}: embedding of shape {shape:?}", at(n)));
        };
        let per_row = c.f.len() == dim;
        let table = rows.checked_mul(dim).filter(|&t| t <= 1 << 28);
        if !self.sole_reader_of(n, idx) || table.is_none() || !(per_row || Some(c.f.len()) == table)
        {
            return Err(format!(
                "{}: adds a constant of {:?} to an embedding of {rows} × {dim}: expected a \
                 table of one row per position or one row",
                at(n),
                c.dims
            ));
        }
        let e = &mut self.nodes[idx];
        let w = e.weights.get_or_insert_with(Weights::default);
        if !has {
            w.extra = vec![0.0; rows * dim];
            e.fields.push(("positional", "learned".into()));
            e.fields.push(("positions", (rows as i64).into()));
            e.kind = Kind::Embedding { positions: true };
        }
        for (k, v) in w.extra.iter_mut().enumerate() {
            *v += c.f[if per_row { k % dim } else { k }];
        }
        e.origin = format!("{} + {}", e.origin, at(n));
        self.bind(n, Val::Node { idx, shape })
    }

    /// `LayerNormalization` over the last axis.
    pub(crate) fn layer_norm(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let d = shape.last().copied().unwrap_or(0);
        let ax = attr_i(n, "axis", -1);
        if ax != -1 && ax != shape.len() as i64 {
            return Err(format!(
                "{}: axis = {ax}: only the last axis is supported",
                at(n)
            ));
        }
        let scale = self.const_input(n, 1)?;
        let shift = match n.input.get(2).filter(|s| !s.is_empty()) {
            Some(_) => self.const_input(n, 2)?.f,
            None => vec![0.0; d],
        };
        if scale.f.len() != d || shift.len() != d {
            return Err(format!("{}: scale and bias must have {d} values", at(n)));
        }
        let eps = attr_f(n, "epsilon", 1e-5);
        if !(eps > 0.0 && eps < 1.0) {
            return Err(format!("{}: epsilon = {eps}: expected (0, 1)", at(n)));
        }
        let mut e = self.new_node(n, "layernorm", vec![from], Kind::Other);
        e.fields = vec![("eps", f64::from(eps).into())];
        e.weights = Some(Weights {
            scale: scale.f,
            shift,
            ..Weights::default()
        });
        self.emit(n, e, shape)
    }
}

#[cfg(test)]
#[path = "sequence_tests.rs"]
mod tests;
