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
mod tests {
    use super::super::proto::pb::tensor_proto::DataType;
    use super::super::test_graph::{computes, float, graph, int, Built};
    use crate::graph::Op;

    /// A vocabulary of 5 tokens of width 3.
    const TABLE: [f32; 15] = [
        0.0, 1.0, 2.0, //
        -1.0, 0.5, 3.0, //
        2.0, 2.0, -2.0, //
        0.25, -0.75, 1.5, //
        4.0, 0.0, -1.0,
    ];
    /// One row a position, for 4 positions.
    const POS: [f32; 12] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2];

    /// Four token ids a request, embedded from [`TABLE`].
    fn embedded() -> Built {
        graph("ids", DataType::Int64, &[4])
            .init("table", &[5, 3], &TABLE)
            .init("pos", &[1, 4, 3], &POS)
            .init("type", &[3], &[0.01, 0.02, 0.03])
            .node("emb", "Gather", &["table", "ids"], "e", vec![])
    }

    /// Each row of `x` (width `d`) normalized, times `scale` plus `shift`.
    fn normalized(x: &[f32], d: usize, scale: &[f32], shift: &[f32], eps: f32) -> Vec<f32> {
        x.chunks(d)
            .flat_map(|r| {
                let mean = r.iter().sum::<f32>() / d as f32;
                let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
                let inv = 1.0 / (var + eps).sqrt();
                r.iter()
                    .enumerate()
                    .map(move |(j, v)| (v - mean) * inv * scale[j] + shift[j])
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The table row of a generated id (the devices take ids modulo the vocabulary).
    fn token(id: f32) -> usize {
        id as usize % 5
    }

    /// What [`embedded`] then the position and token-type tables compute for `ids`.
    fn rows(ids: &[f32]) -> Vec<f32> {
        ids.iter()
            .enumerate()
            .flat_map(|(r, &id)| {
                (0..3)
                    .map(move |j| TABLE[token(id) * 3 + j] + POS[r * 3 + j] + [0.01, 0.02, 0.03][j])
            })
            .collect()
    }

    #[test]
    fn token_ids_are_embedded_with_their_position_and_type_tables_folded_into_one() {
        let m = embedded()
            .node("pos+", "Add", &["e", "pos"], "p", vec![])
            .node("type+", "Add", &["type", "p"], "t", vec![])
            .output("t")
            .import();
        assert_eq!(m.nodes.len(), 2, "the input and one embedding");
        assert!(
            matches!(
                m.nodes[1].op,
                Op::Embedding {
                    vocab: 5,
                    dim: 3,
                    ..
                }
            ),
            "{:?}",
            m.nodes[1].op
        );
        computes(&m, rows);
        // the positions without the batch axis, and no token type
        let m = graph("ids", DataType::Int64, &[4])
            .init("table", &[5, 3], &TABLE)
            .init("pos", &[4, 3], &POS)
            .node("emb", "Gather", &["table", "ids"], "e", vec![])
            .node("pos+", "Add", &["e", "pos"], "p", vec![])
            .output("p")
            .import();
        computes(&m, |ids| {
            rows(ids)
                .iter()
                .enumerate()
                .map(|(k, v)| v - [0.01, 0.02, 0.03][k % 3])
                .collect()
        });
    }

    #[test]
    fn layer_norm_normalizes_each_row_with_its_scale_shift_and_epsilon() {
        let (scale, shift) = ([1.0, 2.0, -0.5], [0.0, 0.25, 1.0]);
        for axis in [-1, 2] {
            let m = embedded()
                .init("g", &[3], &scale)
                .init("b", &[3], &shift)
                .node(
                    "ln",
                    "LayerNormalization",
                    &["e", "g", "b"],
                    "y",
                    vec![int("axis", axis), float("epsilon", 0.5)],
                )
                .output("y")
                .import();
            computes(&m, |ids| {
                let e: Vec<f32> = ids
                    .iter()
                    .flat_map(|&id| TABLE[token(id) * 3..][..3].to_vec())
                    .collect();
                normalized(&e, 3, &scale, &shift, 0.5)
            });
        }
        // without a bias, and with the default epsilon
        let m = embedded()
            .init("g", &[3], &scale)
            .node("ln", "LayerNormalization", &["e", "g"], "y", vec![])
            .output("y")
            .import();
        computes(&m, |ids| {
            let e: Vec<f32> = ids
                .iter()
                .flat_map(|&id| TABLE[token(id) * 3..][..3].to_vec())
                .collect();
            normalized(&e, 3, &scale, &[0.0; 3], 1e-5)
        });
    }

    #[test]
    fn an_embedding_or_layer_norm_outside_what_is_computed_is_refused_naming_the_node() {
        let why = |b: Built, out: &str| b.output(out).refused();
        // a table that is not a matrix, or read along its second axis
        let e = why(
            graph("ids", DataType::Int64, &[4])
                .init("table", &[15], &TABLE)
                .node("emb", "Gather", &["table", "ids"], "e", vec![]),
            "e",
        );
        assert!(
            e.contains("node 'emb' (Gather): table dims [15]: expected 2"),
            "{e}"
        );
        let e = why(
            graph("ids", DataType::Int64, &[4])
                .init("table", &[5, 3], &TABLE)
                .node(
                    "emb",
                    "Gather",
                    &["table", "ids"],
                    "e",
                    vec![int("axis", 1)],
                ),
            "e",
        );
        assert!(e.contains("expected rows of a float table (axis 0)"), "{e}");
        // rows of a table by a float input (no token ids)
        let e = why(
            super::super::test_graph::floats(&[4])
                .init("table", &[5, 3], &TABLE)
                .node("emb", "Gather", &["table", "x"], "e", vec![]),
            "e",
        );
        assert!(
            e.contains("only a Gather of constants, or of a table's rows"),
            "{e}"
        );
        // a position table of the wrong size, or added where another node reads the embedding
        let e = why(
            embedded().init("short", &[2, 3], &POS[..6]).node(
                "pos+",
                "Add",
                &["e", "short"],
                "p",
                vec![],
            ),
            "p",
        );
        assert!(
            e.contains("node 'pos+' (Add): adds a constant of [2, 3] to an embedding of 4 × 3"),
            "{e}"
        );
        let e = why(
            embedded()
                .node("pos+", "Add", &["e", "pos"], "p", vec![])
                .node("both", "Add", &["p", "e"], "y", vec![]),
            "y",
        );
        assert!(e.contains("node 'pos+' (Add)"), "{e}");
        // layer norm: another axis, scale or bias of the wrong width, epsilon outside (0, 1)
        let ln = |attrs, g: &[f32], b: &[f32]| {
            why(
                embedded()
                    .init("g", &[g.len()], g)
                    .init("b", &[b.len()], b)
                    .node("ln", "LayerNormalization", &["e", "g", "b"], "y", attrs),
                "y",
            )
        };
        for axis in [0, 1, 3] {
            let e = ln(vec![int("axis", axis)], &[1.0; 3], &[0.0; 3]);
            assert!(
                e.contains(&format!("node 'ln' (LayerNormalization): axis = {axis}")),
                "{e}"
            );
        }
        let e = ln(vec![], &[1.0; 2], &[0.0; 3]);
        assert!(e.contains("scale and bias must have 3 values"), "{e}");
        let e = ln(vec![], &[1.0; 3], &[0.0; 4]);
        assert!(e.contains("scale and bias must have 3 values"), "{e}");
        for eps in [0.0, 1.0, -1e-5] {
            let e = ln(vec![float("epsilon", eps)], &[1.0; 3], &[0.0; 3]);
            assert!(
                e.contains(&format!("epsilon = {eps}: expected (0, 1)")),
                "{e}"
            );
        }
    }
}
