//! Unit tests of [`super`] (`sequence.rs`), in a file of their own so that the module reads top
//! to bottom: each translation against ONNX's definition written out in Rust, and each refusal
//! naming its node.

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
            (0..3).map(move |j| TABLE[token(id) * 3 + j] + POS[r * 3 + j] + [0.01, 0.02, 0.03][j])
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
