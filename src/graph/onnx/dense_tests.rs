//! Unit tests of [`super`] (`dense.rs`), in a file of their own so that the module reads top
//! to bottom: each translation against ONNX's definition written out in Rust, and each refusal
//! naming its node.

use super::super::proto::pb::tensor_proto::DataType;
use super::super::test_graph::{computes, float, floats, graph, int, times, W};
use crate::graph::Op;

#[test]
fn a_gemm_is_one_linear_layer_with_its_weights_in_our_order_and_its_bias() {
    // B is [N=3][K=2] under transB: our weights are its transpose
    let m = floats(&[2])
        .init("b", &[3, 2], &W)
        .init("c", &[3], &[0.1, 0.2, 0.3])
        .node("fc", "Gemm", &["x", "b", "c"], "y", vec![int("transB", 1)])
        .output("y")
        .import();
    assert_eq!(m.nodes.len(), 2, "the input and one linear layer");
    assert!(matches!(
        m.nodes[1].op,
        Op::Linear {
            out_features: 3,
            bias: true,
            ..
        }
    ));
    let w = m.imported.of(&m.nodes[1]).unwrap();
    assert_eq!(w.w, [1.0, 0.5, 0.25, -2.0, 3.0, -1.0]);
    computes(&m, |x| {
        let y = times(x, &[1.0, 0.5, 0.25, -2.0, 3.0, -1.0], 3);
        y.iter().zip([0.1, 0.2, 0.3]).map(|(a, b)| a + b).collect()
    });
    // as it is ([K=3][N=2]), without C, and with alpha, beta and transA at their defaults
    let m = floats(&[3])
        .init("b", &[3, 2], &W)
        .node(
            "fc",
            "Gemm",
            &["x", "b"],
            "y",
            vec![int("transB", 0), float("alpha", 1.0)],
        )
        .output("y")
        .import();
    assert!(matches!(
        m.nodes[1].op,
        Op::Linear {
            out_features: 2,
            bias: false,
            ..
        }
    ));
    computes(&m, |x| times(x, &W, 2));
}

#[test]
fn a_constant_added_to_a_matmul_is_its_bias_only_where_nothing_else_can_see_it() {
    let mm = || {
        floats(&[3])
            .init("w", &[3, 2], &W)
            .init("c", &[2], &[1.0, -1.0])
    };
    let m = mm()
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
        .node("plus", "Add", &["h", "c"], "y", vec![])
        .output("y")
        .import();
    assert_eq!(m.nodes.len(), 2, "the bias fused into the layer");
    assert!(matches!(m.nodes[1].op, Op::Linear { bias: true, .. }));
    computes(&m, |x| {
        let y = times(x, &W, 2);
        vec![y[0] + 1.0, y[1] - 1.0]
    });
    // the constant first, as some exporters write it
    let m = mm()
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
        .node("plus", "Add", &["c", "h"], "y", vec![])
        .output("y")
        .import();
    assert!(matches!(m.nodes[1].op, Op::Linear { bias: true, .. }));
    // refused: after an activation, when another node reads the product, a second bias,
    // a bias of the wrong width
    let why = |b: super::super::test_graph::Built| b.output("y").refused();
    let after_act = mm()
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
        .node("r", "Relu", &["h"], "a", vec![])
        .node("plus", "Add", &["a", "c"], "y", vec![]);
    let e = why(after_act);
    assert!(
        e.contains("node 'plus' (Add)") && e.contains("only as the bias of the MatMul"),
        "{e}"
    );
    let shared = mm()
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
        .node("plus", "Add", &["h", "c"], "b", vec![])
        .node("both", "Add", &["b", "h"], "y", vec![]);
    assert!(why(shared).contains("node 'plus' (Add)"));
    let twice = mm()
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
        .node("plus", "Add", &["h", "c"], "b", vec![])
        .node("again", "Add", &["b", "c"], "y", vec![]);
    assert!(why(twice).contains("node 'again' (Add)"));
    let wide = floats(&[3])
        .init("w", &[3, 2], &W)
        .init("c", &[3], &[1.0, 2.0, 3.0])
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
        .node("plus", "Add", &["h", "c"], "y", vec![]);
    let e = why(wide);
    assert!(e.contains("of shape [3]"), "{e}");
}

#[test]
fn a_layer_after_an_embedding_reads_one_row_per_token() {
    let table: Vec<f32> = (0..15).map(|i| i as f32 / 4.0 - 1.0).collect();
    let m = graph("ids", DataType::Int64, &[4])
        .init("table", &[5, 3], &table)
        .init("w", &[3, 2], &W)
        .node("emb", "Gather", &["table", "ids"], "e", vec![])
        .node("mm", "MatMul", &["e", "w"], "y", vec![])
        .output("y")
        .import();
    assert_eq!(m.nodes[2].out.feat, [2], "two features a row");
    computes(&m, |ids| {
        ids.iter()
            .flat_map(|&id| times(&table[id as usize % 5 * 3..][..3], &W, 2))
            .collect()
    });
}

#[test]
fn a_gemm_or_matmul_outside_what_is_computed_is_refused_naming_the_node() {
    let gemm = |attrs, b_dims: &[usize], c: Option<&[f32]>| {
        let mut b = floats(&[3]).init("b", b_dims, &W[..b_dims.iter().product()]);
        let mut ins = vec!["x", "b"];
        if let Some(c) = c {
            b = b.init("c", &[c.len()], c);
            ins.push("c");
        }
        b.node("fc", "Gemm", &ins, "y", attrs).output("y").refused()
    };
    for (attr, v) in [("alpha", 2.0), ("beta", 0.5)] {
        let e = gemm(vec![float(attr, v)], &[3, 2], None);
        assert!(
            e.contains("node 'fc' (Gemm)") && e.contains("only 1, 1, 0"),
            "{e}"
        );
    }
    let e = gemm(vec![int("transA", 1)], &[3, 2], None);
    assert!(e.contains("transA = 1"), "{e}");
    let e = gemm(vec![], &[6], None);
    assert!(e.contains("B dims [6]: expected 2"), "{e}");
    let e = gemm(vec![], &[3, 2], Some(&[1.0]));
    assert!(e.contains("C has 1 values for N = 2"), "{e}");
    // K must match the input's width
    let e = gemm(vec![int("transB", 1)], &[3, 2], None);
    assert!(e.contains("expected rows of the weights' K = 2"), "{e}");
    // a MatMul of two computed tensors, or by a weight that is not a matrix
    let e = floats(&[3])
        .node("mm", "MatMul", &["x", "x"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 'mm' (MatMul): only a MatMul by a weight matrix"),
        "{e}"
    );
    let e = floats(&[3])
        .init("w", &[1, 3, 2], &W)
        .node("mm", "MatMul", &["x", "w"], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("weight dims [1, 3, 2]: expected 2"), "{e}");
    // rows that are not a token sequence's
    let e = floats(&[2, 3])
        .init("w", &[3, 2], &W)
        .node("mm", "MatMul", &["x", "w"], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("input shape [2, 3]: expected rows"), "{e}");
    // an image is not a row: flatten first
    let e = floats(&[1, 2, 3])
        .init("w", &[3, 2], &W)
        .node("mm", "MatMul", &["x", "w"], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("input shape [1, 2, 3]"), "{e}");
}
