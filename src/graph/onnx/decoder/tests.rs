//! Unit tests of the decoder import ([`super`]): every spelling [`super::test_export`] builds
//! imports as GPT-2's prefill and decode loop with the export's weights and serves GPT-2's
//! logits step by step (against the forward pass written out in Rust), and each way off the
//! model — in the embeddings, a linear layer, a norm, attention, the mask, GELU, the logits,
//! the past inputs — is refused naming its node or tensor.

use super::test_export::{
    export, past_names, reference_logits, transposed, Gelu, Linear, Mask, Params, Spelling,
    SplitSizes, D, FFN, LAYERS, POS, VOCAB,
};
use crate::graph::onnx::proto::pb::tensor_proto::DataType;
use crate::graph::onnx::proto::pb::tensor_shape_proto::Dimension;
use crate::graph::onnx::proto::pb::type_proto::Value as TypeValue;
use crate::graph::onnx::proto::pb::{
    AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto,
};
use crate::graph::onnx::test_graph::{int, ints, run, Built};
use crate::graph::weights::Weights;
use prost::Message;
use std::path::PathBuf;

/// The spellings the import accepts, each choice of each kind at least once.
fn spellings() -> Vec<Spelling> {
    let f = Spelling::FIXTURE;
    vec![
        f,
        Spelling {
            linear: Linear::Conv1DTransposed,
            scale_by_mul: true,
            mask: Mask::Additive,
            gelu: Gelu::Erf,
            split: SplitSizes::Attribute,
            tied: false,
            view: Some(-1),
            hf_names: false,
            reshaped_ids: true,
            inferred_heads: true,
            copies: true,
        },
        Spelling {
            linear: Linear::MatMul,
            gelu: Gelu::Onnx,
            split: SplitSizes::Absent,
            view: Some(1),
            copies: true,
            ..f
        },
        Spelling {
            linear: Linear::MatMulBiasFirst,
            gelu: Gelu::OnnxTanh,
            mask: Mask::Additive,
            tied: false,
            ..f
        },
    ]
}

fn translate(g: &GraphProto) -> Result<(String, Vec<(String, Weights)>), String> {
    super::translate("gpt", "a test export", g)
}

#[test]
fn every_spelling_imports_as_gpt2_and_serves_its_logits_and_tokens_step_by_step() {
    for s in spellings() {
        let p = Params::new(s.tied);
        let m = Built::of(export(s, &p)).import();
        let mut steps = 0;
        for r in run(&m) {
            // the captured outputs: per step the logits and the token chosen, which the next
            // step reads
            let mut tokens: Vec<usize> = r.input.iter().map(|&t| t as usize % VOCAB).collect();
            assert!(
                !tokens.is_empty() && r.output.len() % (VOCAB + 1) == 0,
                "{s:?}"
            );
            for step in r.output.chunks(VOCAB + 1) {
                let want = reference_logits(&p, s.gelu.exact(), &tokens);
                let top = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
                for (j, (g, w)) in step[..VOCAB].iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(*g) - w).abs() <= 1e-4 * top,
                        "{s:?}: after {} tokens, logit {j}: {g}, expected {w}",
                        tokens.len()
                    );
                }
                let best = (0..VOCAB).fold(0, |b, j| if want[j] > want[b] { j } else { b });
                assert_eq!(step[VOCAB] as usize, best, "{s:?}: the token chosen");
                tokens.push(best);
                steps += 1;
            }
        }
        assert!(steps > 3, "{s:?}: {steps} steps served");
    }
}

#[test]
fn the_import_writes_gpt2_s_model_file_with_the_export_s_weights() {
    for s in spellings() {
        let p = Params::new(s.tied);
        let (text, weights) = translate(&export(s, &p)).unwrap();
        assert!(text.contains("name = \"gpt\""), "{text}");
        assert!(
            text.contains("description = \"a test export: decoder-only, 2 layers, width 8, 2 heads, vocabulary 13, 128 positions\""),
            "{text}"
        );
        // the activation in the prefill and the decode steps, each layer
        let (act, other) = match s.gelu.exact() {
            true => ("act = \"gelu_erf\"", "act = \"gelu\"\n"),
            false => ("act = \"gelu\"\n", "act = \"gelu_erf\""),
        };
        assert_eq!(text.matches(act).count(), 2 * LAYERS, "{s:?}");
        assert_eq!(text.matches(other).count(), 0, "{s:?}");
        assert_eq!(text.matches("eps = 1e-5").count(), 2 * (2 * LAYERS + 1));
        // the weights, each by the node that holds them: the linear layers' as [in][out]
        // whatever the export's layout
        let by: std::collections::HashMap<&str, &Weights> =
            weights.iter().map(|(n, w)| (n.as_str(), w)).collect();
        assert_eq!(by["wte"].w, p.wte);
        assert_eq!(by["wte"].extra, p.wpe);
        for (i, l) in p.layers.iter().enumerate() {
            let w = |part: &str| by[format!("p{i}.{part}").as_str()];
            for (part, lin) in [
                ("qkv", &l.qkv),
                ("proj", &l.proj),
                ("fc", &l.fc),
                ("fc_proj", &l.fc_proj),
            ] {
                assert_eq!(
                    (&w(part).w, &w(part).bias),
                    (&lin.w, &lin.b),
                    "{s:?} {part}"
                );
            }
            for (part, ln) in [("ln1", &l.ln1), ("ln2", &l.ln2)] {
                assert_eq!((&w(part).scale, &w(part).shift), (&ln.g, &ln.b), "{part}");
            }
        }
        assert_eq!(
            (&by["ln_f"].scale, &by["ln_f"].shift),
            (&p.ln_f.g, &p.ln_f.b)
        );
        // the logits tied to the token table, or their own weights
        assert_eq!(
            text.matches("tied = \"wte\"").count(),
            2 * usize::from(s.tied)
        );
        match s.tied {
            true => assert!(!by.contains_key("first_logits")),
            false => {
                assert_eq!(by["first_logits"].w, p.lm);
                assert!(text.contains("shares = \"first_logits\""), "{text}");
            }
        }
        assert_eq!(weights.len(), 2 + 6 * LAYERS + usize::from(!s.tied));
    }
}

#[test]
fn the_imported_model_holds_the_export_s_parameters_once_and_its_context_window() {
    for tied in [true, false] {
        let s = Spelling {
            tied,
            ..Spelling::FIXTURE
        };
        let m = Built::of(export(s, &Params::new(tied))).import();
        let d = D as u64;
        let layer =
            2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d);
        let own_logits = if tied { 0 } else { d * VOCAB as u64 };
        let tables = (VOCAB * D + POS * D) as u64;
        assert_eq!(
            m.params(),
            tables + LAYERS as u64 * layer + 2 * d + own_logits
        );
        let c = m.seq.as_ref().unwrap();
        // GPT-2's reference lengths within the context: a half, a quarter, and two short
        assert_eq!(
            (
                c.lengths.as_str(),
                c.ref_enc,
                c.ref_dec,
                c.max_enc,
                c.max_dec
            ),
            ("azure-conv-2023", 64, 32, 126, 126)
        );
        assert_eq!((c.max_context, c.prefill_token), (Some(128), true));
    }
}

/// The fixture's spelling (`s`) exported, changed by `change`, translated: refused with
/// `want` in the message.
fn refused_as(s: Spelling, change: impl FnOnce(&mut GraphProto), want: &str) {
    let mut g = export(s, &Params::new(s.tied));
    change(&mut g);
    match translate(&g) {
        Ok(_) => panic!("translated, but a refusal saying '{want}' was expected"),
        Err(e) => assert!(e.contains(want), "{e}\n(expected: {want})"),
    }
}

fn refused(change: impl FnOnce(&mut GraphProto), want: &str) {
    refused_as(Spelling::FIXTURE, change, want);
}

/// The `k`-th node of operator `op`.
fn nth<'a>(g: &'a mut GraphProto, op: &str, k: usize) -> &'a mut NodeProto {
    g.node
        .iter_mut()
        .filter(|n| n.op_type() == op)
        .nth(k)
        .unwrap_or_else(|| panic!("no {op} number {k}"))
}

/// The first initializer whose name starts with `prefix`.
fn init<'a>(g: &'a mut GraphProto, prefix: &str) -> &'a mut TensorProto {
    g.initializer
        .iter_mut()
        .find(|t| t.name().starts_with(prefix))
        .unwrap_or_else(|| panic!("no initializer {prefix}"))
}

/// The initializer named `name`.
fn named<'a>(g: &'a mut GraphProto, name: &str) -> &'a mut TensorProto {
    g.initializer
        .iter_mut()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no initializer {name}"))
}

/// `n`'s attribute `a` set (replaced or added).
fn set(n: &mut NodeProto, a: AttributeProto) {
    n.attribute.retain(|x| x.name() != a.name());
    n.attribute.push(a);
}

/// A float initializer's dimensions and values replaced.
fn reshape_init(t: &mut TensorProto, dims: &[i64], len: usize) {
    t.dims = dims.to_vec();
    t.float_data.resize(len, 0.5);
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

#[test]
fn layers_of_the_wrong_width_or_wiring_are_refused() {
    // Q|K|V 16 wide, not three times the width
    refused(
        |g| {
            let w = nth(g, "Gemm", 0).input[1].clone();
            let b = nth(g, "Gemm", 0).input[2].clone();
            reshape_init(named(g, &w), &[D as i64, 16], D * 16);
            reshape_init(named(g, &b), &[16], 16);
        },
        "Q|K|V of 16 where 24 was expected",
    );
    // the MLP's second layer 4 wide
    refused(
        |g| {
            let w = nth(g, "Gemm", 3).input[1].clone();
            let b = nth(g, "Gemm", 3).input[2].clone();
            reshape_init(named(g, &w), &[FFN as i64, 4], FFN * 4);
            reshape_init(named(g, &b), &[4], 4);
        },
        "a layer whose outputs are not 8 wide",
    );
    // the attention's projection 4 wide
    refused(
        |g| {
            let w = nth(g, "Gemm", 1).input[1].clone();
            let b = nth(g, "Gemm", 1).input[2].clone();
            reshape_init(named(g, &w), &[D as i64, 4], D * 4);
            reshape_init(named(g, &b), &[4], 4);
        },
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
}

#[test]
fn attention_off_gpt2_s_is_refused_naming_the_node() {
    // Q|K|V: two parts, another axis, unequal sizes (as an input or an attribute)
    refused(
        |g| {
            nth(g, "Split", 0).output.pop();
        },
        "(Split): Q|K|V split in three equal parts of the last axis is read",
    );
    refused(
        |g| set(nth(g, "Split", 0), int("axis", 1)),
        "Q|K|V split in three equal parts",
    );
    refused(
        |g| {
            let sizes = nth(g, "Split", 0).input[1].clone();
            named(g, &sizes).int64_data = vec![16, 4, 4];
        },
        "Q|K|V split in three equal parts",
    );
    refused_as(
        Spelling {
            split: SplitSizes::Attribute,
            ..Spelling::FIXTURE
        },
        |g| set(nth(g, "Split", 0), ints("split", &[16, 4, 4])),
        "Q|K|V split in three equal parts",
    );
    // the heads: another reshape, another transpose
    refused(
        |g| {
            let tail = g
                .initializer
                .iter_mut()
                .find(|t| t.name().starts_with("tail") && t.int64_data == [2, 4])
                .unwrap();
            tail.int64_data = vec![4, 2];
        },
        "(the heads) was expected, its shape ends Some([4, 2])",
    );
    refused(
        |g| set(nth(g, "Transpose", 0), ints("perm", &[0, 1, 2, 3])),
        "(Transpose): perm [0, 1, 2, 3] where [0, 2, 1, 3] was expected",
    );
    // the present: this step's before the past, along another axis, not an output
    refused(
        |g| nth(g, "Concat", 3).input.swap(0, 1),
        "the past 'past_key_values.0.key' then this step's, along the sequence, was expected",
    );
    refused(
        |g| set(nth(g, "Concat", 3), int("axis", 1)),
        "the past 'past_key_values.0.key' then this step's",
    );
    refused(
        |g| g.output.retain(|o| o.name() != "present.1.value"),
        "its result (the present) is not a graph output",
    );
    // the past copied (an Identity, or a Concat of it alone) before, but not computed on or
    // joined with another
    let copies = Spelling {
        copies: true,
        ..Spelling::FIXTURE
    };
    let mut g = export(copies, &Params::new(true));
    nth(&mut g, "Identity", 0).op_type = Some("Concat".into());
    assert!(translate(&g).is_ok());
    refused_as(
        copies,
        |g| nth(g, "Identity", 0).op_type = Some("Tanh".into()),
        "the past 'past_key_values.0.key' then this step's, along the sequence, was expected",
    );
    refused_as(
        copies,
        |g| {
            let n = nth(g, "Identity", 0);
            n.op_type = Some("Concat".into());
            n.input.push(n.input[0].clone());
        },
        "the past 'past_key_values.0.key' then this step's, along the sequence, was expected",
    );
    // the scores: K not transposed, Q and K swapped, scaled by a vector or by 1/7, or by a
    // computed value
    refused(
        |g| {
            let kt = g
                .node
                .iter_mut()
                .filter(|n| n.op_type() == "Transpose")
                .find(|n| n.input[0] == "present.0.key")
                .unwrap();
            set(kt, ints("perm", &[0, 1, 2, 3]));
        },
        "perm [0, 1, 2, 3] where [0, 1, 3, 2] was expected",
    );
    refused(
        |g| nth(g, "MatMul", 0).input.swap(0, 1),
        "(MatMul): Q times K transposed was expected",
    );
    refused(
        |g| reshape_init(init(g, "sqrt_dh"), &[2], 2),
        "(Div): a scale by a constant was expected",
    );
    refused(
        |g| {
            let t = init(g, "sqrt_dh");
            t.data_type = Some(DataType::Int64 as i32);
            (t.float_data, t.int64_data) = (vec![], vec![2]);
        },
        "(Div): a scale by a constant was expected",
    );
    refused(
        |g| named_f(g, "sqrt_dh", 7.0),
        "scales the scores by 0.14285715, not 1/sqrt(4) = 0.5",
    );
    let by_mul = Spelling {
        scale_by_mul: true,
        ..Spelling::FIXTURE
    };
    refused_as(
        by_mul,
        |g| named_f(g, "inv_sqrt_dh", 0.25),
        "(Mul): scales the scores by 0.25, not 1/sqrt(4) = 0.5",
    );
    // within 1e-5 of the scale, relatively: 0.500002 is, 0.50001 is not
    refused_as(
        by_mul,
        |g| named_f(g, "inv_sqrt_dh", 0.50001),
        "(Mul): scales the scores by 0.50001, not 1/sqrt(4) = 0.5",
    );
    let mut g = export(by_mul, &Params::new(true));
    named_f(&mut g, "inv_sqrt_dh", 0.500002);
    assert!(translate(&g).is_ok());
    refused(
        |g| nth(g, "Div", 0).op_type = Some("Sub".into()),
        "one Div or Mul was expected to read it, found 0",
    );
    // the softmax over another axis (none given is the last); the weights times K
    refused(
        |g| set(nth(g, "Softmax", 0), int("axis", 2)),
        "(Softmax): over the last axis (the keys) was expected",
    );
    let mut g = export(Spelling::FIXTURE, &Params::new(true));
    nth(&mut g, "Softmax", 0).attribute.clear();
    assert!(translate(&g).is_ok());
    refused(
        |g| nth(g, "MatMul", 1).input[1] = "present.0.key".into(),
        "(MatMul): the weights times V (the present values) was expected",
    );
    // the heads merged: another transpose, another width
    refused(
        |g| set(nth(g, "Transpose", 4), ints("perm", &[0, 1, 2, 3])),
        "perm [0, 1, 2, 3] where [0, 2, 1, 3] was expected",
    );
    refused(
        |g| {
            let tail = g
                .initializer
                .iter_mut()
                .find(|t| t.name().starts_with("tail") && t.int64_data == [8])
                .unwrap();
            tail.int64_data = vec![4];
        },
        "(Reshape): a reshape to [.., 8] was expected",
    );
}

/// The float scalar initializer whose name starts with `prefix` set to `v`.
fn named_f(g: &mut GraphProto, prefix: &str, v: f32) {
    init(g, prefix).float_data = vec![v];
}

#[test]
fn a_mask_that_is_not_causal_is_refused() {
    // the buffer: all true, its last position unable to see itself, a vector, empty, or no
    // buffer at all
    refused(
        |g| {
            let t = init(g, "attn_bias");
            *t.raw_data.as_mut().unwrap().last_mut().unwrap() = 0;
        },
        "is not lower-triangular (causal)",
    );
    refused(
        |g| {
            let t = init(g, "attn_bias");
            let n = t.raw_data.as_ref().unwrap().len();
            t.raw_data = Some(vec![1; n]);
        },
        "is not lower-triangular (causal)",
    );
    refused(
        |g| init(g, "attn_bias").dims = vec![(POS * POS) as i64],
        "(Where): the mask 'attn_bias_",
    );
    refused(
        |g| {
            let t = init(g, "attn_bias");
            t.dims = vec![1, 1, 0, 0];
            t.raw_data = Some(vec![]);
        },
        "is not lower-triangular (causal)",
    );
    refused(
        |g| {
            let start = nth(g, "Slice", 0).input[1].clone();
            nth(g, "Where", 0).input[0] = start;
        },
        "is neither a constant nor a slice of one",
    );
    // the masked scores: not the scores, not a large negative value
    refused(
        |g| nth(g, "Where", 0).input.swap(1, 2),
        "(Where): the scores where the mask holds, a large negative value elsewhere",
    );
    // (-1e4 and below is large: -9999 is not, nor an integer)
    refused(
        |g| named_f(g, "mask_value", -9999.0),
        "the scores where the mask holds, a large negative value elsewhere",
    );
    let mut g = export(Spelling::FIXTURE, &Params::new(true));
    named_f(&mut g, "mask_value", -1e4);
    assert!(translate(&g).is_ok());
    refused(
        |g| {
            let t = init(g, "mask_value");
            t.data_type = Some(DataType::Int64 as i32);
            (t.float_data, t.int64_data) = (vec![], vec![-100_000]);
        },
        "the scores where the mask holds, a large negative value elsewhere",
    );
    // the additive mask: a key after the query seen, or a small penalty
    let additive = Spelling {
        mask: Mask::Additive,
        ..Spelling::FIXTURE
    };
    refused_as(
        additive,
        |g| nth(g, "LessOrEqual", 0).op_type = Some("Less".into()),
        "the mask added to the scores is not causal for 5 tokens after 0 (shape [1, 1, 5, 5])",
    );
    refused_as(
        additive,
        |g| named_f(g, "min", -100.0),
        "the mask added to the scores is not causal for 5 tokens after 0",
    );
    refused_as(
        additive,
        |g| {
            let to = nth(g, "Unsqueeze", 5).input[1].clone();
            named(g, &to).int64_data = vec![0, 2];
        },
        "the mask added to the scores is not causal for 5 tokens after 0 (shape [1, 5, 1, 5])",
    );
    // the mask as [seq, keys] alone is causal; its rows twice over along the queries is not
    let mut g = export(additive, &Params::new(true));
    let (m, m4) = {
        let n = nth(&mut g, "Unsqueeze", 5);
        (n.input[0].clone(), n.output[0].clone())
    };
    for n in g.node.iter_mut().filter(|n| n.input.contains(&m4)) {
        n.input[1] = m.clone();
    }
    assert!(translate(&g).is_ok());
    refused_as(
        additive,
        |g| {
            let n = nth(g, "Unsqueeze", 5);
            let (m4, twice) = (n.output[0].clone(), "twice".to_string());
            for n in g.node.iter_mut().filter(|n| n.input.contains(&m4)) {
                n.input[1] = twice.clone();
            }
            g.node.push(NodeProto {
                input: vec![m4.clone(), m4],
                output: vec![twice],
                name: Some("twice".into()),
                op_type: Some("Concat".into()),
                attribute: vec![int("axis", 2)],
                ..NodeProto::default()
            });
        },
        "(Add): the mask added to the scores is not causal for 5 tokens after 0 (shape [1, 1, 10, 5])",
    );
    // every row checked: the last query (position 4) kept from keys 2 on, which only a check
    // of the rows after the first two (a prompt of 5) or of the second row's last keys (2
    // after 3) sees
    refused_as(
        additive,
        |g| {
            let le = nth(g, "LessOrEqual", 0).clone();
            let (c2, r2, seen) = (&le.input[0], &le.input[1], &le.output[0]);
            for n in g.node.iter_mut().filter(|n| n.input.contains(seen)) {
                n.input[0] = "window".into();
            }
            for (name, v) in [("four", 4), ("two_keys", 2)] {
                g.initializer.push(TensorProto {
                    name: Some(name.into()),
                    data_type: Some(DataType::Int64 as i32),
                    int64_data: vec![v],
                    ..Default::default()
                });
            }
            let node = |op: &str, input: [&str; 2], out: &str| NodeProto {
                input: input.iter().map(|s| s.to_string()).collect(),
                output: vec![out.into()],
                name: Some(out.into()),
                op_type: Some(op.into()),
                ..NodeProto::default()
            };
            g.node.push(node("Equal", [r2, "four"], "last_query"));
            g.node.push(node("Less", [c2, "two_keys"], "first_keys"));
            let mut w = node("Where", ["last_query", "first_keys"], "window");
            w.input.push(seen.clone());
            g.node.push(w);
        },
        "(Add): the mask added to the scores is not causal for 5 tokens after 0 (shape [1, 1, 5, 5])",
    );
    // the mask reading the hidden states: not a shape computation
    refused_as(
        additive,
        |g| {
            let seen = nth(g, "LessOrEqual", 0).output[0].clone();
            let where_ = g.node.iter_mut().find(|n| n.input.contains(&seen)).unwrap();
            where_.input[1] = "input_ids".into();
        },
        "the mask added to the scores: 'input_ids' is a graph input, not a shape computation",
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
}

#[test]
fn past_inputs_pair_by_layer_and_kind_in_hugging_face_s_names_else_in_order() {
    let pairs = |names: &[&str]| super::past_pairs(names);
    let own = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        pairs(&["p.1.value", "p.0.key", "p.1.key", "p.0.value"]),
        Ok(own(&[("p.0.key", "p.0.value"), ("p.1.key", "p.1.value")]))
    );
    assert_eq!(
        pairs(&["past_v0", "past_k0"]),
        Ok(own(&[("past_v0", "past_k0")]))
    );
    for bad in [
        &["p.0.key", "p.2.value"][..],
        &["p.0.key", "p.0.key"],
        &["p.1.key", "p.1.value"],
    ] {
        let e = pairs(bad).unwrap_err();
        assert!(
            e.contains("layers 0..1, a key and a value each, were expected"),
            "{bad:?}: {e}"
        );
    }
    assert_eq!(
        pairs(&[]).unwrap_err(),
        "0 past inputs: a key and a value per layer were expected"
    );
    let names = past_names(true);
    assert_eq!(names[1].1, "past_key_values.1.value");
}

#[test]
fn a_decoder_is_one_token_input_past_inputs_and_more_than_one_output() {
    let g = export(Spelling::FIXTURE, &Params::new(true));
    assert!(super::is_decoder(&g));
    // the token table listed as an input too (an initializer): still a decoder
    let copies = export(
        Spelling {
            copies: true,
            ..Spelling::FIXTURE
        },
        &Params::new(true),
    );
    assert!(super::is_decoder(&copies));
    let mut one_output = g.clone();
    one_output.output.truncate(1);
    assert!(!super::is_decoder(&one_output));
    let mut tokens_only = g.clone();
    tokens_only.input.truncate(1);
    assert!(!super::is_decoder(&tokens_only));
    let mut other = g.clone();
    other.input[2].name = Some("attention_mask".into());
    assert!(!super::is_decoder(&other));
}

#[test]
fn transposing_swaps_rows_and_columns() {
    let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    assert_eq!(super::transpose(&w, 2, 3), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(super::transpose(&w, 2, 3), transposed(&w, 2, 3));
    assert_eq!(super::transpose(&w, 3, 2), [1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
}

fn fixture() -> ModelProto {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/onnx/gpt2_style.onnx"
    );
    ModelProto::decode(&std::fs::read(path).unwrap()[..]).unwrap()
}

#[test]
fn the_committed_fixture_is_refused_where_it_is_changed() {
    // `gpt2_style.onnx` as scripts/onnx-fixtures.py writes it, its mask made all true
    let mut m = fixture();
    let t = m
        .graph
        .as_mut()
        .unwrap()
        .initializer
        .iter_mut()
        .find(|t| t.name().starts_with("attn_bias"))
        .unwrap();
    let n = t.raw_data.as_ref().unwrap().len();
    t.raw_data = Some(vec![1; n]);
    let dir = std::env::temp_dir().join(format!("lazybatch-decoder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join("all_seen.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let e = crate::graph::onnx::import(&path, &[])
        .unwrap_err()
        .to_string();
    std::fs::remove_file(&path).ok();
    assert!(e.contains("is not lower-triangular (causal)"), "{e}");
}

#[test]
fn a_decoder_export_takes_no_dim() {
    let e = Built::of(export(Spelling::FIXTURE, &Params::new(true)))
        .import_with(&[("seq", 8)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--dim seq: a decoder export's sequence axes stay variable"),
        "{e}"
    );
}

#[test]
fn the_gelus_and_erf_are_within_their_bounds() {
    use crate::graph::onnx::test_graph::erf_series;
    for i in 0..=80 {
        let x = -4.0 + i as f32 * 0.1;
        let e = erf_series(f64::from(x));
        assert!(
            (f64::from(super::blocks::erf(x)) - e).abs() < 5e-7,
            "erf({x})"
        );
        let exact = 0.5 * f64::from(x) * (1.0 + erf_series(f64::from(x) / 2f64.sqrt()));
        assert!(
            (f64::from(super::blocks::gelu_exact(x)) - exact).abs() < 1e-6,
            "{x}"
        );
        let k = (2.0 / std::f64::consts::PI).sqrt();
        let v = f64::from(x);
        let tanh = 0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh());
        assert!(
            (f64::from(super::blocks::gelu_tanh(x)) - tanh).abs() < 1e-6,
            "{x}"
        );
    }
    // the two differ: telling them apart is what the import does
    assert!((super::blocks::gelu_exact(1.5) - super::blocks::gelu_tanh(1.5)).abs() > 1e-5);
}
