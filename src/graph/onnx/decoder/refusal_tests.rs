//! Unit tests of the decoder import's refusals ([`super`]): each way off GPT-2 in the
//! operators, the past inputs, the tables, a linear layer, a norm, a residual, GELU, the
//! logits and a node left over is refused naming its node or tensor — on an export
//! [`super::test_export`] builds, changed by hand. The helpers here change an export; the
//! attention's and the mask's refusals are in `attention_tests.rs`.

use super::test_export::{export, Gelu, Linear, Params, Spelling, D, FFN, LAYERS, POS, VOCAB};
use crate::graph::onnx::proto::pb::tensor_proto::DataType;
use crate::graph::onnx::proto::pb::tensor_shape_proto::Dimension;
use crate::graph::onnx::proto::pb::type_proto::Value as TypeValue;
use crate::graph::onnx::proto::pb::{AttributeProto, GraphProto, NodeProto, TensorProto};
use crate::graph::onnx::test_graph::{int, Built};
use crate::graph::weights::Weights;

/// The export translated as the import does.
pub(super) fn translate(g: &GraphProto) -> Result<(String, Vec<(String, Weights)>), String> {
    super::translate("gpt", "a test export", g)
}

/// The fixture's spelling (`s`) exported, changed by `change`, translated: refused with
/// `want` in the message.
pub(super) fn refused_as(s: Spelling, change: impl FnOnce(&mut GraphProto), want: &str) {
    let mut g = export(s, &Params::new(s.tied));
    change(&mut g);
    match translate(&g) {
        Ok(_) => panic!("translated, but a refusal saying '{want}' was expected"),
        Err(e) => assert!(e.contains(want), "{e}\n(expected: {want})"),
    }
}

pub(super) fn refused(change: impl FnOnce(&mut GraphProto), want: &str) {
    refused_as(Spelling::FIXTURE, change, want);
}

/// The `k`-th node of operator `op`.
pub(super) fn nth<'a>(g: &'a mut GraphProto, op: &str, k: usize) -> &'a mut NodeProto {
    g.node
        .iter_mut()
        .filter(|n| n.op_type() == op)
        .nth(k)
        .unwrap_or_else(|| panic!("no {op} number {k}"))
}

/// The first initializer whose name starts with `prefix`.
pub(super) fn init<'a>(g: &'a mut GraphProto, prefix: &str) -> &'a mut TensorProto {
    g.initializer
        .iter_mut()
        .find(|t| t.name().starts_with(prefix))
        .unwrap_or_else(|| panic!("no initializer {prefix}"))
}

/// The initializer named `name`.
pub(super) fn named<'a>(g: &'a mut GraphProto, name: &str) -> &'a mut TensorProto {
    g.initializer
        .iter_mut()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no initializer {name}"))
}

/// `n`'s attribute `a` set (replaced or added).
pub(super) fn set(n: &mut NodeProto, a: AttributeProto) {
    n.attribute.retain(|x| x.name() != a.name());
    n.attribute.push(a);
}

/// A float initializer's dimensions and values replaced.
pub(super) fn reshape_init(t: &mut TensorProto, dims: &[i64], len: usize) {
    t.dims = dims.to_vec();
    t.float_data.resize(len, 0.5);
}

/// The float scalar initializer whose name starts with `prefix` set to `v`.
pub(super) fn named_f(g: &mut GraphProto, prefix: &str, v: f32) {
    init(g, prefix).float_data = vec![v];
}

#[test]
fn operators_past_inputs_and_tables_off_the_model_are_refused() {
    // every LogSoftmax named once, and an operator of another domain
    refused(
        |g| {
            for _ in 0..LAYERS {
                nth(g, "Softmax", 0).op_type = Some("LogSoftmax".into());
            }
        },
        "a decoder export with unsupported operators: LogSoftmax (node 'Softmax_",
    );
    let mut g = export(Spelling::FIXTURE, &Params::new(true));
    for _ in 0..LAYERS {
        nth(&mut g, "Softmax", 0).op_type = Some("LogSoftmax".into());
    }
    assert_eq!(translate(&g).unwrap_err().matches("LogSoftmax").count(), 1);
    refused(
        |g| nth(g, "Tanh", 0).domain = Some("com.microsoft".into()),
        "unsupported operators: Tanh (node 'Tanh_",
    );
    // the past inputs: three of them, not rank 4, heads not fixed, untyped
    refused(
        |g| g.input.retain(|i| i.name() != "past_key_values.1.value"),
        "3 past inputs: a key and a value per layer were expected",
    );
    /// The first past input's axes.
    fn dims(g: &mut GraphProto) -> &mut Vec<Dimension> {
        match g.input[1].r#type.as_mut().unwrap().value.as_mut() {
            Some(TypeValue::TensorType(t)) => &mut t.shape.as_mut().unwrap().dim,
            _ => unreachable!("a tensor input"),
        }
    }
    refused(
        |g| {
            dims(g).pop();
        },
        "past input 'past_key_values.0.key': [batch, heads, past, head] with fixed heads and head was expected, got 3 axes",
    );
    refused(
        |g| dims(g)[1] = dims(g)[0].clone(),
        "with fixed heads and head was expected, got 4 axes",
    );
    refused(
        |g| g.input[1].r#type = None,
        "input 'past_key_values.0.key' is not a tensor",
    );
    // the token table: not 2-D, or not heads × head wide
    refused(
        |g| init(g, "wte").dims = vec![VOCAB as i64, 2, 4],
        "(Gather): a [vocabulary, width] table was expected",
    );
    refused(
        |g| init(g, "wte").dims = vec![2 * VOCAB as i64, 4],
        "(Gather): a width of 4 for 2 heads of 4",
    );
    // the positions: not a gathered table, not 2-D, not the width, not past..past + seq
    refused(
        |g| nth(g, "Gather", 4).op_type = Some("Tanh".into()),
        "(Add): the token embedding plus a gathered position table was expected",
    );
    refused(
        |g| init(g, "wpe").dims = vec![POS as i64, 2, 4],
        "(Gather): a [positions, width] table was expected",
    );
    refused(
        |g| init(g, "wpe").dims = vec![2 * POS as i64, 4],
        "(Gather): positions 4 wide for a width of 8",
    );
    refused(
        |g| {
            let zero = init(g, "zero_").name().to_string();
            nth(g, "Range", 0).input[0] = zero;
        },
        "the positions gathered for 2 tokens after 3 are [0.0, 1.0, 2.0, 3.0, 4.0], not [3.0, 4.0]",
    );
}

/// The `k`th Gemm's weights made `[rows, cols]` and its bias `cols` long: a linear layer
/// `cols` wide.
fn narrow(g: &mut GraphProto, k: usize, rows: usize, cols: usize) {
    let (w, b) = (
        nth(g, "Gemm", k).input[1].clone(),
        nth(g, "Gemm", k).input[2].clone(),
    );
    reshape_init(named(g, &w), &[rows as i64, cols as i64], rows * cols);
    reshape_init(named(g, &b), &[cols as i64], cols);
}

#[test]
fn layers_of_the_wrong_width_or_wiring_are_refused() {
    // Q|K|V 16 wide, not three times the width
    refused(|g| narrow(g, 0, D, 16), "Q|K|V of 16 where 24 was expected");
    // the MLP's second layer 4 wide
    refused(
        |g| narrow(g, 3, FFN, 4),
        "a layer whose outputs are not 8 wide",
    );
    // the attention's projection 4 wide
    refused(
        |g| narrow(g, 1, D, 4),
        "a layer whose outputs are not 8 wide",
    );
    // a residual adding the norm's output instead of the block's input
    refused(
        |g| {
            let ln = nth(g, "LayerNormalization", 0).output[0].clone();
            let add = g
                .node
                .iter_mut()
                .filter(|n| n.op_type() == "Add")
                .find(|n| n.input.len() == 2 && n.input[1].starts_with("add_"))
                .unwrap();
            add.input[1] = ln;
        },
        "where the residual 'add_",
    );
    // a norm over another axis, without its bias, with 7 values
    refused(
        |g| set(nth(g, "LayerNormalization", 0), int("axis", 1)),
        "(LayerNormalization): over the last axis, with a scale and a bias, is read",
    );
    refused(
        |g| {
            nth(g, "LayerNormalization", 0).input.pop();
        },
        "over the last axis, with a scale and a bias, is read",
    );
    refused(
        |g| {
            let s = nth(g, "LayerNormalization", 0).input[1].clone();
            reshape_init(named(g, &s), &[7], 7);
        },
        "(LayerNormalization): 7 and 8 parameters for a width of 8",
    );
    refused(
        |g| {
            let s = nth(g, "LayerNormalization", 0).input[2].clone();
            reshape_init(named(g, &s), &[7], 7);
        },
        "(LayerNormalization): 8 and 7 parameters for a width of 8",
    );
    // a norm's epsilon is the file's
    let mut g = export(Spelling::FIXTURE, &Params::new(true));
    set(
        nth(&mut g, "LayerNormalization", 1),
        crate::graph::onnx::test_graph::float("epsilon", 2e-5),
    );
    let (text, _) = translate(&g).unwrap();
    assert_eq!(text.matches("eps = 2e-5").count(), 2, "{text}");
    // no norm where one was expected; two softmaxes reading the scores
    refused(
        |g| nth(g, "LayerNormalization", 0).op_type = Some("Sqrt".into()),
        "no LayerNormalization reads it where a decoder layer has one",
    );
    refused(
        |g| {
            let mut n = nth(g, "Softmax", 0).clone();
            n.output = vec!["again".into()];
            g.node.push(n);
        },
        "2 Softmax nodes read it; one was expected",
    );
}

#[test]
fn a_conv1d_or_matmul_off_a_linear_layer_is_refused() {
    let conv = Spelling::FIXTURE;
    let gemm = |g: &mut GraphProto| -> NodeProto { nth(g, "Gemm", 0).clone() };
    refused(
        |g| {
            let n = nth(g, "Reshape", 0);
            n.op_type = Some("Squeeze".into());
        },
        "one MatMul or Reshape was expected to read it, found 0",
    );
    refused(
        |g| {
            let flat = nth(g, "Reshape", 0).input[1].clone();
            named(g, &flat).int64_data = vec![-1, 7];
        },
        "(Reshape): a reshape to Some([-1, 7]) where [-1, 8] was expected",
    );
    for (what, change) in [
        ("transA", int("transA", 1)),
        ("alpha", crate::graph::onnx::test_graph::float("alpha", 2.0)),
        ("beta", crate::graph::onnx::test_graph::float("beta", 0.5)),
    ] {
        let mut g = export(conv, &Params::new(true));
        set(nth(&mut g, "Gemm", 0), change);
        let e = translate(&g).unwrap_err();
        assert!(
            e.contains("(Gemm): Gemm with transA, alpha, beta 0, 1, 1 and a bias is read"),
            "{what}: {e}"
        );
    }
    refused(
        |g| {
            nth(g, "Gemm", 0).input.pop();
        },
        "(Gemm): Gemm with transA, alpha, beta 0, 1, 1 and a bias is read",
    );
    refused(
        |g| {
            let w = gemm(g).input[1].clone();
            named(g, &w).dims = vec![(D * 3 * D) as i64];
        },
        "(Gemm): weights of rank 1",
    );
    refused(
        |g| {
            let w = gemm(g).input[1].clone();
            named(g, &w).dims = vec![4, 6 * D as i64];
        },
        "(Gemm): a [4, 48] weight for a 8-wide input",
    );
    // stored [out][in] under transB: the same weight, read the other way round
    refused_as(
        Spelling {
            linear: Linear::Conv1DTransposed,
            ..conv
        },
        |g| {
            let w = gemm(g).input[1].clone();
            named(g, &w).dims = vec![6 * D as i64, 4];
        },
        "(Gemm): a [4, 48] weight for a 8-wide input",
    );
    refused(
        |g| {
            let b = gemm(g).input[2].clone();
            reshape_init(named(g, &b), &[23], 23);
        },
        "(Gemm): a bias of 23 for 24 outputs",
    );
    refused(
        |g| nth(g, "Reshape", 1).op_type = Some("Squeeze".into()),
        "no Reshape reads it where a decoder layer has one",
    );
    // MatMul and Add
    let mm = Spelling {
        linear: Linear::MatMul,
        ..conv
    };
    refused_as(
        mm,
        |g| {
            let w = nth(g, "MatMul", 0).input[1].clone();
            named(g, &w).dims = vec![1, D as i64, 3 * D as i64];
        },
        "(MatMul): weights of rank 3",
    );
    refused_as(
        mm,
        |g| {
            let w = nth(g, "MatMul", 0).input[1].clone();
            named(g, &w).dims = vec![4, 6 * D as i64];
        },
        "(MatMul): a [4, 48] weight for a 8-wide input",
    );
    refused_as(
        mm,
        |g| {
            let out = nth(g, "MatMul", 0).output[0].clone();
            let add = g.node.iter().find(|n| n.input.contains(&out)).unwrap();
            let b = add.input[1].clone();
            reshape_init(named(g, &b), &[23], 23);
        },
        "(Add): a bias of 23 for 24 outputs",
    );
    // weights of the right shape but stored as integers
    let mut g = export(mm, &Params::new(mm.tied));
    let w = nth(&mut g, "MatMul", 0).input[1].clone();
    let t = named(&mut g, &w);
    t.data_type = Some(DataType::Int64 as i32);
    t.int64_data = vec![1; t.float_data.len()];
    t.float_data.clear();
    let e = translate(&g).unwrap_err();
    assert!(
        e.contains(&format!("(MatMul): '{w}' is not a float initializer")),
        "{e}"
    );
}

#[test]
fn an_activation_that_is_not_gelu_is_refused() {
    // another cubic coefficient; a vector where a scalar was; a second tensor read outside
    refused(
        |g| {
            let t = g
                .initializer
                .iter_mut()
                .find(|t| t.float_data == [0.044715])
                .unwrap();
            t.float_data = vec![0.05];
        },
        "the MLP's activation (ending in 'mul_",
    );
    refused(
        |g| {
            let three = nth(g, "Pow", 0).input[1].clone();
            reshape_init(named(g, &three), &[2], 2);
        },
        "(Pow): reads 'c_",
    );
    refused(
        |g| {
            let t = nth(g, "Tanh", 0).output[0].clone();
            g.node.push(NodeProto {
                input: vec![t],
                output: vec!["tanh_shape".into()],
                name: Some("also".into()),
                op_type: Some("Shape".into()),
                ..NodeProto::default()
            });
        },
        "the MLP's activation does not end in one tensor",
    );
    // GELU for negative inputs only: ONNX's Gelu plus x + |x| (`Sqrt` of `x·x`)
    refused_as(
        Spelling {
            gelu: Gelu::Onnx,
            ..Spelling::FIXTURE
        },
        |g| {
            let at = g.node.iter().position(|n| n.op_type() == "Gelu").unwrap();
            let (h, y) = (g.node[at].input[0].clone(), g.node[at].output[0].clone());
            g.node[at].output[0] = "gelu".into();
            let bend = Built::of(GraphProto::default())
                .node("sq", "Mul", &[&h, &h], "sq", vec![])
                .node("abs", "Sqrt", &["sq"], "abs", vec![])
                .node("ramp", "Add", &[&h, "abs"], "ramp", vec![])
                .node("bent", "Add", &["gelu", "ramp"], &y, vec![])
                .into_graph();
            g.node.splice(at + 1..at + 1, bend.node);
        },
        "') is neither GELU",
    );
    // ONNX's Gelu with an approximation it does not have
    refused_as(
        Spelling {
            gelu: Gelu::OnnxTanh,
            ..Spelling::FIXTURE
        },
        |g| {
            let sigmoid = crate::graph::onnx::test_graph::string("approximate", "sigmoid");
            set(nth(g, "Gelu", 0), sigmoid);
        },
        "(Gelu): approximate = \"sigmoid\", neither GELU's",
    );
}

#[test]
fn the_logits_and_the_rest_of_the_graph_are_checked() {
    // the logits not the first output; weights [vocab, width]; a cast that is not a copy
    refused(
        |g| g.output.swap(0, 1),
        "(MatMul): the logits, the graph's first output, were expected",
    );
    refused(
        |g| init(g, "lm_head").dims = vec![VOCAB as i64, D as i64],
        "(MatMul): logits weights [13, 8] for a width of 8 and a vocabulary of 13",
    );
    let copies = Spelling {
        copies: true,
        ..Spelling::FIXTURE
    };
    refused_as(
        copies,
        |g| {
            let n = g.node.len();
            set(&mut g.node[n - 2], int("to", 10));
        },
        "the logits, the graph's first output, were expected",
    );
    // the view back to [batch, seq, width] with a batch of 2
    refused_as(
        Spelling {
            view: Some(2),
            ..Spelling::FIXTURE
        },
        |_| {},
        "the view's shape for 5 tokens after 0 are [2.0, 5.0, 8.0], not [1.0, 5.0, 8.0]",
    );
    // computations besides the model's: the first five named
    let mut g = export(Spelling::FIXTURE, &Params::new(true));
    for k in 0..7 {
        g.node.push(NodeProto {
            input: vec!["logits".into()],
            output: vec![format!("extra_out{k}")],
            name: Some(format!("extra{k}")),
            op_type: Some("Tanh".into()),
            ..NodeProto::default()
        });
    }
    let e = translate(&g).unwrap_err();
    assert!(
        e.ends_with("not a decoder layer, the embeddings, the logits or a shape computation: node 'extra0' (Tanh), node 'extra1' (Tanh), node 'extra2' (Tanh), node 'extra3' (Tanh), node 'extra4' (Tanh)"),
        "{e}"
    );
    // a shape operator computing on activations, not shapes
    refused(
        |g| {
            let mul = Built::of(GraphProto::default())
                .node("scaled", "Mul", &["logits", "logits"], "scaled", vec![])
                .into_graph();
            g.node.extend(mul.node);
        },
        "or a shape computation: node 'scaled' (Mul)",
    );
}
