//! Unit tests of the decoder import's attention and causal mask ([`super::attention`]):
//! each way off GPT-2's — Q|K|V's split, the heads, the present, the scores and their scale,
//! the mask (a lower-triangular buffer's slices or an additive mask evaluated at two shapes),
//! the softmax, the values, the heads merged — is refused naming its node, and each accepted
//! variant (a copy of the past, a softmax without its axis, a mask of `[seq, keys]`) taken.

use super::refusal_tests::{
    init, named, named_f, nth, refused, refused_as, reshape_init, set, translate,
};
use super::test_export::{export, Mask, Params, Spelling, SplitSizes, POS};
use crate::graph::onnx::proto::pb::tensor_proto::DataType;
use crate::graph::onnx::proto::pb::{NodeProto, TensorProto};
use crate::graph::onnx::test_graph::{int, ints};

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
