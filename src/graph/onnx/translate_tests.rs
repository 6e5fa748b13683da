//! Unit tests of [`super`] (`translate.rs`): constants, aliases, activations and their fusion,
//! sums, flattens, reshapes and softmax, each against what ONNX defines, and each refusal
//! naming its node. In a file of their own so that the module reads top to bottom.

use super::super::proto::pb::tensor_proto::DataType;
use super::super::proto::pb::AttributeProto;
use super::super::test_graph::{computes, float, floats, int, tensor_f, Built};
use crate::graph::Op;

use super::super::test_graph::W;

/// What [`linear`] computes: `x[3] · W[3][2]`.
fn times(x: &[f32]) -> Vec<f32> {
    super::super::test_graph::times(x, &W, 2)
}

/// A linear layer `mm` of 3 → 2 reading `x`, output `h`.
fn linear() -> Built {
    floats(&[3])
        .init("w", &[3, 2], &W)
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
}

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + (-v).exp())
}

#[test]
fn an_activation_fuses_into_the_layer_before_it_only_when_it_is_that_layers_sole_reader() {
    type Act = fn(f32) -> f32;
    let acts: [(&str, Vec<AttributeProto>, Act); 5] = [
        ("Relu", vec![], |v| v.max(0.0)),
        ("Sigmoid", vec![], sigmoid),
        ("Tanh", vec![], f32::tanh),
        ("Clip", vec![float("min", 0.0), float("max", 6.0)], |v| {
            v.clamp(0.0, 6.0)
        }),
        ("Clip", vec![float("min", 0.0)], |v| v.max(0.0)),
    ];
    for (op, attrs, f) in acts {
        let m = linear()
            .node("a", op, &["h"], "y", attrs.clone())
            .output("y")
            .import();
        assert_eq!(m.nodes.len(), 2, "{op} fused");
        computes(&m, |x| times(x).into_iter().map(f).collect());
        // read by the sum too: its own node, the sum adding the layer's own output
        let m = linear()
            .node("a", op, &["h"], "y", attrs)
            .node("s", "Add", &["y", "h"], "z", vec![])
            .output("z")
            .import();
        assert_eq!(m.nodes.len(), 4, "{op} not fused");
        computes(&m, |x| times(x).into_iter().map(|v| f(v) + v).collect());
    }
    // a second activation, or one on the input: a node of its own
    let m = linear()
        .node("a", "Relu", &["h"], "y", vec![])
        .node("b", "Sigmoid", &["y"], "z", vec![])
        .output("z")
        .import();
    assert_eq!(m.nodes.len(), 3);
    computes(&m, |x| {
        times(x).into_iter().map(|v| sigmoid(v.max(0.0))).collect()
    });
    let m = floats(&[3])
        .node("a", "Tanh", &["x"], "y", vec![])
        .output("y")
        .import();
    assert!(
        matches!(m.nodes[1].op, Op::Activation { .. }),
        "{:?}",
        m.nodes[1].op
    );
    computes(&m, |x| x.iter().map(|v| v.tanh()).collect());
    // a sum takes one too
    let m = linear()
        .init("w2", &[3, 2], &W)
        .node("mm2", "MatMul", &["x", "w2"], "h2", vec![])
        .node("s", "Add", &["h", "h2"], "z", vec![])
        .node("a", "Relu", &["z"], "y", vec![])
        .output("y")
        .import();
    assert_eq!(
        m.nodes.len(),
        4,
        "input, two layers and the sum with its ReLU"
    );
    computes(&m, |x| {
        times(x).into_iter().map(|v| (2.0 * v).max(0.0)).collect()
    });
}

#[test]
fn clip_bounds_come_from_inputs_or_attributes_and_only_relu_and_relu6_are_taken() {
    let m = linear()
        .init("lo", &[], &[0.0])
        .init("hi", &[], &[6.0])
        .node("c", "Clip", &["h", "lo", "hi"], "y", vec![])
        .output("y")
        .import();
    computes(&m, |x| {
        times(x).into_iter().map(|v| v.clamp(0.0, 6.0)).collect()
    });
    let m = linear()
        .init("lo", &[], &[0.0])
        .node("c", "Clip", &["h", "lo"], "y", vec![])
        .output("y")
        .import();
    computes(&m, |x| times(x).into_iter().map(|v| v.max(0.0)).collect());
    for (lo, hi) in [(0.0, 5.0), (-1.0, 6.0), (1.0, f32::MAX)] {
        let e = linear()
            .node(
                "c",
                "Clip",
                &["h"],
                "y",
                vec![float("min", lo), float("max", hi)],
            )
            .output("y")
            .refused();
        assert!(
            e.contains(&format!(
                "node 'c' (Clip): min = {lo}, max = {hi}: only Clip(0, 6)"
            )),
            "{e}"
        );
    }
    let e = linear()
        .node("c", "Clip", &["h"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("min = -340282350000000000000000000000000000000"),
        "{e}"
    );
    let e = linear()
        .init("lo", &[0], &[])
        .node("c", "Clip", &["h", "lo"], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("node 'c' (Clip): input 1 is empty"), "{e}");
}

#[test]
fn constants_identities_and_flattens_compute_what_onnx_defines() {
    // a Constant's value in each attribute form, added as the layer's bias
    let value = AttributeProto {
        name: Some("value".into()),
        t: Some(tensor_f(&[2], &[1.0, -1.0])),
        ..Default::default()
    };
    let m = linear()
        .node("k", "Constant", &[], "c", vec![value])
        .node("id", "Identity", &["c"], "c2", vec![])
        .node("plus", "Add", &["h", "c2"], "b", vec![])
        .node("drop", "Dropout", &["b"], "y", vec![])
        .output("y")
        .import();
    assert_eq!(m.nodes.len(), 2);
    computes(&m, |x| {
        let y = times(x);
        vec![y[0] + 1.0, y[1] - 1.0]
    });
    // a scalar as Clip's lower bound
    let m = linear()
        .node("k", "Constant", &[], "c", vec![float("value_float", 0.0)])
        .node("clip", "Clip", &["h", "c"], "y", vec![])
        .output("y")
        .import();
    computes(&m, |x| times(x).into_iter().map(|v| v.max(0.0)).collect());
    let e = linear()
        .node("k", "Constant", &[], "c", vec![int("value_int", 2)])
        .node("plus", "Add", &["h", "c"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 'plus' (Add): adds a constant of shape []"),
        "{e}"
    );
    let e = linear()
        .node("k", "Constant", &[], "c", vec![int("sparse_value", 2)])
        .output("h")
        .refused();
    assert!(
        e.contains("node 'k' (Constant): only value, value_float, value_int(s)"),
        "{e}"
    );
    // Flatten (axis 1) and Reshape to [batch, -1] are one flatten; a reshape that keeps the
    // shape is none
    let image = || floats(&[2, 2, 2]);
    let flat = |x: &[f32]| x.to_vec();
    for b in [
        image().node("f", "Flatten", &["x"], "y", vec![]),
        image().node("f", "Flatten", &["x"], "y", vec![int("axis", 1)]),
        image()
            .init_i("s", &[2], &[-1, 8])
            .node("f", "Reshape", &["x", "s"], "y", vec![]),
        image()
            .init_i("s", &[2], &[0, -1])
            .node("f", "Reshape", &["x", "s"], "y", vec![]),
        image()
            .init_i("s", &[2], &[1, 8])
            .node("f", "Reshape", &["x", "s"], "y", vec![]),
    ] {
        let m = b.output("y").import();
        assert_eq!(m.nodes.len(), 2);
        assert_eq!(m.nodes[1].out.feat, [8]);
        computes(&m, flat);
    }
    for target in [[-1, 2, 2, 2], [0, 2, 0, 2], [-1, 0, 0, 0]] {
        let m = image()
            .init_i("s", &[4], &target)
            .node("f", "Reshape", &["x", "s"], "r", vec![])
            .node("g", "Flatten", &["r"], "y", vec![])
            .output("y")
            .import();
        assert_eq!(m.nodes.len(), 2, "{target:?} keeps the shape: no node");
    }
    // a vector is already a row
    let m = floats(&[3])
        .node("f", "Flatten", &["x"], "f1", vec![])
        .init("w", &[3, 2], &W)
        .node("mm", "MatMul", &["f1", "w"], "y", vec![])
        .output("y")
        .import();
    assert_eq!(m.nodes.len(), 2);
    for (attrs, shape, want) in [
        (
            vec![int("axis", 2)],
            None,
            "node 'f' (Flatten): axis = 2: only 1",
        ),
        (vec![int("axis", 0)], None, "axis = 0: only 1"),
        (
            vec![],
            Some([-1, 4, 2]),
            "shape [-1, 4, 2] from one request's [2, 2, 2]",
        ),
        (vec![], Some([2, -1, 0]), "shape [2, -1, 0]"),
        (vec![], Some([-1, 2, 3]), "shape [-1, 2, 3]"),
    ] {
        let b = match shape {
            None => image().node("f", "Flatten", &["x"], "y", attrs),
            Some(s) => image()
                .init_i("s", &[3], &s)
                .node("f", "Reshape", &["x", "s"], "y", attrs),
        };
        let e = b.output("y").refused();
        assert!(e.contains(want), "{want}: {e}");
    }
    // the request's axes but one, each as it is: not the same shape
    let e = image()
        .init_i("s", &[3], &[-1, 2, 2])
        .node("f", "Reshape", &["x", "s"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("shape [-1, 2, 2] from one request's [2, 2, 2]"),
        "{e}"
    );
    let e = image()
        .init_i("s", &[2], &[2, 4])
        .node("f", "Reshape", &["x", "s"], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("shape [2, 4]"), "{e}");
    let e = image()
        .init_i("s", &[2], &[-1, 7])
        .node("f", "Reshape", &["x", "s"], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("shape [-1, 7]"), "{e}");
}

#[test]
fn sums_and_softmax_compute_what_onnx_defines_and_refuse_what_they_do_not() {
    // softmax over the last axis, by default or named either way
    for attrs in [vec![], vec![int("axis", -1)], vec![int("axis", 1)]] {
        let m = linear()
            .node("sm", "Softmax", &["h"], "y", attrs)
            .output("y")
            .import();
        computes(&m, |x| {
            let y = times(x);
            let max = y[0].max(y[1]);
            let e: Vec<f32> = y.iter().map(|v| (v - max).exp()).collect();
            let s: f32 = e.iter().sum();
            e.iter().map(|v| v / s).collect()
        });
    }
    // over each row of a token sequence, by default
    let table: Vec<f32> = (0..10).map(|i| i as f32 / 3.0 - 1.0).collect();
    let m = super::super::test_graph::graph("ids", DataType::Int64, &[3])
        .init("table", &[5, 2], &table)
        .node("emb", "Gather", &["table", "ids"], "e", vec![])
        .node("sm", "Softmax", &["e"], "y", vec![])
        .output("y")
        .import();
    computes(&m, |ids| {
        ids.iter()
            .flat_map(|&id| {
                let r = &table[id as usize % 5 * 2..][..2];
                let max = r[0].max(r[1]);
                let s: f32 = r.iter().map(|v| (v - max).exp()).sum();
                r.iter()
                    .map(move |v| (v - max).exp() / s)
                    .collect::<Vec<_>>()
            })
            .collect()
    });
    let e = linear()
        .node("sm", "Softmax", &["h"], "y", vec![int("axis", 0)])
        .output("y")
        .refused();
    assert!(
        e.contains("node 'sm' (Softmax): axis = 0: only the last axis"),
        "{e}"
    );
    let e = floats(&[2, 2])
        .node("sm", "Softmax", &["x"], "y", vec![int("axis", 1)])
        .output("y")
        .refused();
    assert!(e.contains("axis = 1"), "{e}");
    // sums of two computed tensors of different shapes
    let e = linear()
        .node("s", "Add", &["h", "x"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 's' (Add): shapes [2] and [3]: only equal shapes"),
        "{e}"
    );
    // inputs that are missing or never defined
    let e = linear()
        .node("s", "Add", &["h"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 's' (Add): 1 inputs, where the operator takes 2"),
        "{e}"
    );
    let e = linear()
        .node("s", "Add", &["h", ""], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("input 1 is missing"), "{e}");
    let e = linear()
        .node("s", "Add", &["h", "later"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("input 1 'later' is neither an initializer nor computed before it"),
        "{e}"
    );
    // a constant where a computed tensor is read, or a computed one where a weight is
    let e = floats(&[3])
        .init("c", &[3], &[1.0; 3])
        .node("r", "Relu", &["c"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 'r' (Relu): input 0 is a constant where a computed tensor"),
        "{e}"
    );
    // a part of a pattern read by another operator: what may read it instead
    let e = linear()
        .init("half", &[], &[0.5])
        .node("s", "Mul", &["h", "half"], "hs", vec![])
        .node("r", "Relu", &["hs"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 'r' (Relu): input 0 is a tensor scaled by a constant that only the rest of the exact GELU x·0.5·(1 + erf(x/√2)) may read"),
        "{e}"
    );
    let e = super::super::test_graph::graph("ids", DataType::Int64, &[4])
        .init("table", &[5, 4], &[0.5; 20])
        .init_i("split", &[4], &[0, 0, 2, 2])
        .node("emb", "Gather", &["table", "ids"], "e", vec![])
        .node("heads", "Reshape", &["e", "split"], "h", vec![])
        .node("r", "Relu", &["h"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("input 0 is a tensor split into attention heads that only the rest of a self-attention (Reshape, Transpose, MatMul, Div, Softmax) may read"),
        "{e}"
    );
    let e = floats(&[3])
        .node("g", "Gemm", &["x", "x"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 'g' (Gemm): input 1 must be an initializer"),
        "{e}"
    );
}

#[test]
fn node_names_are_made_safe_and_unique() {
    let m = linear()
        .node("/block/act:0", "Relu", &["h"], "y", vec![])
        .node("", "Sigmoid", &["y"], "z", vec![])
        .node("/block/act:0", "Tanh", &["z"], "t", vec![])
        .node("ω", "Tanh", &["t"], "u", vec![])
        .output("u")
        .import();
    let names: Vec<&str> = m.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["x", "mm", "z", "block_act_0", "_"]);
    // the first fused into the layer; then "y" three times and "y_2" once
    let m = linear()
        .node("", "Sigmoid", &["h"], "y", vec![])
        .node("y", "Sigmoid", &["y"], "z", vec![])
        .node("y", "Tanh", &["z"], "t", vec![])
        .node("y_2", "Tanh", &["t"], "u", vec![])
        .node("y", "Relu", &["u"], "v", vec![])
        .output("v")
        .import();
    let names: Vec<&str> = m.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["x", "mm", "y", "y_2", "y_2_2", "y_3"]);
}
