//! Unit tests of [`super`] (`fold.rs`): every constant operator at its boundaries, through
//! the translator's dispatch as a file's node reaches it, and each refusal naming its node. In
//! a file of their own so that the module reads top to bottom.

use super::super::proto::pb::{AttributeProto, NodeProto};
use super::super::test_graph::{int, ints as ints_attr};
use super::*;
use std::collections::HashMap;

fn iv(dims: &[usize], v: &[i64]) -> Const {
    ints(dims.to_vec(), v.to_vec())
}

#[test]
fn slices_unsqueezes_and_concats_compute_what_onnx_defines() {
    // position ids [1, 8] sliced to the first 5 along axis 1
    let ids = iv(&[1, 8], &[0, 1, 2, 3, 4, 5, 6, 7]);
    let s = slice(ids, &[0], &[5], Some(vec![1]), None).unwrap();
    assert_eq!(
        (s.dims.clone(), s.i.clone()),
        (vec![1, 5], vec![0, 1, 2, 3, 4])
    );
    let s = slice(iv(&[4], &[9, 8, 7, 6]), &[-3], &[i64::MAX], None, None).unwrap();
    assert_eq!(s.i, [8, 7, 6]);
    let u = squeeze(iv(&[], &[5]), &[0], true).unwrap();
    assert_eq!(u.dims, [1]);
    let c = concat(&[iv(&[1], &[BATCH]), u, iv(&[2], &[4, 8])], 0).unwrap();
    assert_eq!((c.dims, c.i), (vec![4], vec![BATCH, 5, 4, 8]));
    assert!(squeeze(iv(&[2], &[1, 2]), &[0], false).is_err());
    assert_eq!(cast(iv(&[2], &[3, -1]), 1).unwrap().f, [3.0, -1.0]);
}

#[test]
fn masks_and_index_buffers_fold_as_numpy_computes_them() {
    let r = range(iv(&[], &[0]), iv(&[], &[4]), iv(&[], &[1])).unwrap();
    assert_eq!(r.i, [0, 1, 2, 3]);
    assert_eq!(
        range(iv(&[], &[5]), iv(&[], &[0]), iv(&[], &[-2]))
            .unwrap()
            .i,
        [5, 3, 1]
    );
    // [1, 3] stretched to [2, 3]; [2, 1] against [3] broadcasts to [2, 3]
    let e = gather_broadcast(&iv(&[1, 3], &[7, 8, 9]), &[2, 3]);
    assert_eq!(e.i, [7, 8, 9, 7, 8, 9]);
    assert_eq!(broadcast(&[&[2, 1], &[3]]).unwrap(), [2, 3]);
    assert!(broadcast(&[&[2], &[3]]).is_err());
    let col = gather_broadcast(&iv(&[2, 1], &[1, 2]), &[2, 3]);
    assert_eq!(col.i, [1, 1, 1, 2, 2, 2]);
    // out[i][j] = data[i][idx[i][j]] along axis 1
    let data = iv(&[1, 4], &[10, 11, 12, 13]);
    let g = gather_elements(&data, &iv(&[1, 3], &[3, 0, -1]), 1).unwrap();
    assert_eq!(g.i, [13, 10, 13]);
    assert!(gather_elements(&data, &iv(&[1, 1], &[4]), 1).is_err());
}

fn fv(dims: &[usize], v: &[f32]) -> Const {
    Const {
        dims: dims.to_vec(),
        f: v.to_vec(),
        i: Vec::new(),
    }
}

/// What the node `op` (with `attrs`) computes of the constants `inputs` (an empty name: an
/// input left out), as the translator folds it; or its error.
fn folded(op: &str, attrs: Vec<AttributeProto>, inputs: &[Option<Const>]) -> R<Const> {
    let mut t = Translator::new(HashMap::new());
    let mut names = Vec::new();
    for (k, c) in inputs.iter().enumerate() {
        match c {
            Some(c) => {
                let name = format!("in{k}");
                t.vals.insert(name.clone(), Val::Const(c.clone()));
                names.push(name);
            }
            None => names.push(String::new()),
        }
    }
    let n = NodeProto {
        name: Some("f".into()),
        op_type: Some(op.into()),
        input: names,
        output: vec!["out".into()],
        attribute: attrs,
        ..Default::default()
    };
    t.node(&n)?;
    match &t.vals["out"] {
        Val::Const(c) => Ok(c.clone()),
        other => panic!("{op}: not a constant: {other:?}"),
    }
}

/// [`folded`] of constants that must fold.
fn of(op: &str, attrs: Vec<AttributeProto>, inputs: &[Const]) -> Const {
    let ins: Vec<Option<Const>> = inputs.iter().cloned().map(Some).collect();
    folded(op, attrs, &ins).unwrap_or_else(|e| panic!("{op}: {e}"))
}

/// [`folded`]'s error, which must name the node.
fn refused(op: &str, attrs: Vec<AttributeProto>, inputs: &[Const]) -> String {
    let ins: Vec<Option<Const>> = inputs.iter().cloned().map(Some).collect();
    let e = folded(op, attrs, &ins).expect_err(op);
    assert!(e.starts_with(&format!("node 'f' ({op})")), "{e}");
    e
}

#[test]
fn an_axis_counts_from_the_end_when_negative_and_stays_inside_the_rank() {
    assert_eq!(axis(0, 3), Ok(0));
    assert_eq!(axis(2, 3), Ok(2));
    assert_eq!(axis(-1, 3), Ok(2));
    assert_eq!(axis(-3, 3), Ok(0));
    for a in [3, -4] {
        assert_eq!(
            axis(a, 3),
            Err(format!("axis {a} is outside a tensor of rank 3"))
        );
    }
    assert!(axis(0, 0).is_err());
}

#[test]
fn shapes_of_computed_tensors_and_constants_with_their_start_and_end() {
    let mut t = Translator::new(HashMap::new());
    t.vals.insert(
        "x".into(),
        Val::Node {
            idx: 0,
            shape: vec![3, 4, 5],
        },
    );
    t.vals.insert("c".into(), Val::Const(iv(&[2, 7], &[0; 14])));
    let shape = |t: &mut Translator, input: &str, attrs: Vec<AttributeProto>| {
        let n = NodeProto {
            name: Some("f".into()),
            op_type: Some("Shape".into()),
            input: vec![input.into()],
            output: vec!["out".into()],
            attribute: attrs,
            ..Default::default()
        };
        t.node(&n).unwrap();
        match &t.vals["out"] {
            Val::Const(c) => (c.dims.clone(), c.i.clone()),
            _ => unreachable!(),
        }
    };
    // the batch axis as -1, which a Reshape reads as "whatever it is"
    assert_eq!(shape(&mut t, "x", vec![]), (vec![4], vec![-1, 3, 4, 5]));
    assert_eq!(shape(&mut t, "c", vec![]), (vec![2], vec![2, 7]));
    assert_eq!(
        shape(&mut t, "x", vec![int("start", 1)]),
        (vec![3], vec![3, 4, 5])
    );
    assert_eq!(shape(&mut t, "x", vec![int("start", -1)]).1, [5]);
    assert_eq!(shape(&mut t, "x", vec![int("end", -1)]).1, [BATCH, 3, 4]);
    assert_eq!(
        shape(&mut t, "x", vec![int("start", 1), int("end", 3)]).1,
        [3, 4]
    );
    // clamped into the rank; an end before the start is empty
    assert_eq!(
        shape(&mut t, "x", vec![int("start", -9), int("end", 99)]).1,
        [BATCH, 3, 4, 5]
    );
    assert_eq!(
        shape(&mut t, "x", vec![int("start", 3), int("end", 1)]),
        (vec![0], vec![])
    );
    // attention heads of a [4, 6] node in 2 heads, as [heads, rows, head] after a transpose;
    // merged with the batch: [-1, rows, head]
    t.shapes.push(vec![4, 6]);
    for (merged, want) in [(false, vec![BATCH, 2, 4, 3]), (true, vec![BATCH, 4, 3])] {
        let heads = super::super::patterns::Part::Heads {
            x: 0,
            heads: 2,
            order: [1, 0, 2],
            scale: 1.0,
            merged,
        };
        t.vals.insert("h".into(), Val::Part(heads));
        assert_eq!(shape(&mut t, "h", vec![]).1, want, "merged: {merged}");
    }
    let scaled = super::super::patterns::Part::Scaled {
        x: 0,
        name: "x".into(),
        by: 0.5,
    };
    t.vals.insert("p".into(), Val::Part(scaled));
    let n = NodeProto {
        name: Some("f".into()),
        op_type: Some("Shape".into()),
        input: vec!["p".into()],
        output: vec!["out".into()],
        ..Default::default()
    };
    let e = t.node(&n).unwrap_err();
    assert!(e.starts_with("node 'f' (Shape): the shape of "), "{e}");
}

#[test]
fn unsqueeze_squeeze_concat_slice_and_cast_fold_as_onnx_defines() {
    // axes as an input (opset 13) or an attribute; negative from the end of the result
    let u = of("Unsqueeze", vec![], &[iv(&[2], &[4, 5]), iv(&[1], &[0])]);
    assert_eq!((u.dims, u.i), (vec![1, 2], vec![4, 5]));
    let u = of(
        "Unsqueeze",
        vec![ints_attr("axes", &[-1, 0])],
        &[iv(&[2], &[4, 5])],
    );
    assert_eq!(u.dims, [1, 2, 1]);
    let s = of("Squeeze", vec![], &[iv(&[1, 2, 1], &[4, 5])]);
    assert_eq!(s.dims, [2], "no axes: every axis of 1");
    let s = of(
        "Squeeze",
        vec![ints_attr("axes", &[-1])],
        &[iv(&[1, 2, 1], &[4, 5])],
    );
    assert_eq!(s.dims, [1, 2]);
    let e = refused(
        "Squeeze",
        vec![ints_attr("axes", &[1])],
        &[iv(&[1, 2, 1], &[4, 5])],
    );
    assert!(e.contains("axis 1 has 2 values, not 1"), "{e}");
    let e = refused(
        "Unsqueeze",
        vec![ints_attr("axes", &[3])],
        &[iv(&[2], &[4, 5])],
    );
    assert!(e.contains("axis 3 is outside a tensor of rank 2"), "{e}");
    // concat: ints, or floats when any part is
    let c = of(
        "Concat",
        vec![int("axis", 0)],
        &[iv(&[1], &[1]), iv(&[2], &[2, 3])],
    );
    assert_eq!((c.dims, c.i), (vec![3], vec![1, 2, 3]));
    let c = of(
        "Concat",
        vec![int("axis", -1)],
        &[iv(&[1], &[1]), fv(&[1], &[0.5])],
    );
    assert_eq!((c.f, c.i.len()), (vec![1.0, 0.5], 0));
    let e = refused("Concat", vec![int("axis", 1)], &[iv(&[1], &[1])]);
    assert!(e.contains("axis 1 is outside a tensor of rank 1"), "{e}");
    let e = refused("Concat", vec![], &[iv(&[1, 1], &[1])]);
    assert!(e.contains("only 1-D constants are concatenated"), "{e}");
    let e = refused("Concat", vec![], &[]);
    assert!(e.contains("nothing to concatenate"), "{e}");
    let mut t = Translator::new(HashMap::new());
    t.vals.insert(
        "x".into(),
        Val::Node {
            idx: 0,
            shape: vec![2],
        },
    );
    let n = NodeProto {
        name: Some("f".into()),
        op_type: Some("Concat".into()),
        input: vec!["x".into()],
        output: vec!["out".into()],
        ..Default::default()
    };
    assert_eq!(
        t.node(&n).unwrap_err(),
        "node 'f' (Concat): only constants (shapes) are concatenated"
    );
    // slice: by axes and steps given as inputs, ends past the end clamped, an empty range
    let data = iv(&[2, 3], &[0, 1, 2, 3, 4, 5]);
    let s = of(
        "Slice",
        vec![],
        &[
            data.clone(),
            iv(&[1], &[1]),
            iv(&[1], &[9]),
            iv(&[1], &[1]),
            iv(&[1], &[1]),
        ],
    );
    assert_eq!((s.dims, s.i), (vec![2, 2], vec![1, 2, 4, 5]));
    let s = of(
        "Slice",
        vec![],
        &[data.clone(), iv(&[2], &[1, -2]), iv(&[2], &[2, -1])],
    );
    assert_eq!((s.dims, s.i), (vec![1, 1], vec![4]));
    let s = of(
        "Slice",
        vec![],
        &[data.clone(), iv(&[1], &[2]), iv(&[1], &[1])],
    );
    assert_eq!(s.dims, [0, 3]);
    let floats = of(
        "Slice",
        vec![],
        &[fv(&[3], &[0.5, 1.5, 2.5]), iv(&[1], &[1]), iv(&[1], &[3])],
    );
    assert_eq!(floats.f, [1.5, 2.5]);
    let e = refused(
        "Slice",
        vec![],
        &[
            data.clone(),
            iv(&[1], &[0]),
            iv(&[1], &[2]),
            iv(&[1], &[1]),
            iv(&[1], &[2]),
        ],
    );
    assert!(e.contains("only steps of 1 are supported"), "{e}");
    let e = refused(
        "Slice",
        vec![],
        &[data.clone(), iv(&[2], &[0, 0]), iv(&[1], &[2])],
    );
    assert!(e.contains("starts, ends and axes differ in length"), "{e}");
    let e = refused(
        "Slice",
        vec![],
        &[data, iv(&[1], &[0]), iv(&[1], &[2]), iv(&[2], &[0, 1])],
    );
    assert!(e.contains("differ in length"), "{e}");
    // cast to float, int64 (7) and int32 (6): floats truncated toward zero
    assert_eq!(
        of("Cast", vec![int("to", 1)], &[iv(&[2], &[3, -1])]).f,
        [3.0, -1.0]
    );
    assert_eq!(of("Cast", vec![int("to", 1)], &[fv(&[1], &[0.5])]).f, [0.5]);
    for to in [6, 7] {
        let c = of("Cast", vec![int("to", to)], &[fv(&[3], &[1.9, -1.9, 0.0])]);
        assert_eq!((c.i, c.f.len()), (vec![1, -1, 0], 0));
        assert_eq!(of("Cast", vec![int("to", to)], &[iv(&[1], &[4])]).i, [4]);
    }
    let e = refused("Cast", vec![int("to", 10)], &[iv(&[1], &[1])]);
    assert!(
        e.contains("to = 10: only casts to float, int32 and int64"),
        "{e}"
    );
}

#[test]
fn ranges_expands_wheres_and_comparisons_fold_as_numpy_computes_them() {
    let r = |s: i64, l: i64, d: i64| {
        of(
            "Range",
            vec![],
            &[iv(&[], &[s]), iv(&[], &[l]), iv(&[], &[d])],
        )
    };
    assert_eq!(r(0, 4, 1).i, [0, 1, 2, 3]);
    assert_eq!(r(0, 5, 2).i, [0, 2, 4]);
    assert_eq!(r(4, 0, 1).i, Vec::<i64>::new());
    assert_eq!(r(4, 0, 1).dims, [0]);
    let e = refused(
        "Range",
        vec![],
        &[iv(&[], &[0]), iv(&[], &[4]), iv(&[], &[0])],
    );
    assert!(e.contains("Range with a step of 0"), "{e}");
    let e = refused(
        "Range",
        vec![],
        &[fv(&[], &[0.0]), iv(&[], &[4]), iv(&[], &[1])],
    );
    assert!(e.contains("Range folds integer bounds only"), "{e}");
    assert_eq!(r(0, 1 << 24, 1).i.len(), 1 << 24);
    let e = refused(
        "Range",
        vec![],
        &[iv(&[], &[0]), iv(&[], &[(1 << 24) + 1]), iv(&[], &[1])],
    );
    assert!(e.contains("Range of 16777217 values"), "{e}");
    // expand: the batch axis (-1) as one request
    let x = of(
        "Expand",
        vec![],
        &[iv(&[2], &[7, 8]), iv(&[2], &[BATCH, 2])],
    );
    assert_eq!((x.dims, x.i), (vec![1, 2], vec![7, 8]));
    let x = of("Expand", vec![], &[iv(&[2, 1], &[7, 8]), iv(&[2], &[2, 3])]);
    assert_eq!(x.i, [7, 7, 7, 8, 8, 8]);
    let e = refused("Expand", vec![], &[iv(&[2], &[7, 8]), iv(&[1], &[3])]);
    assert!(e.contains("do not broadcast"), "{e}");
    // where: by an int or a float condition, of ints or of floats
    let w = of(
        "Where",
        vec![],
        &[iv(&[3], &[1, 0, 2]), iv(&[3], &[1, 2, 3]), iv(&[], &[-1])],
    );
    assert_eq!(w.i, [1, -1, 3]);
    let w = of(
        "Where",
        vec![],
        &[
            fv(&[3], &[0.0, 0.5, 1.0]),
            fv(&[], &[9.0]),
            iv(&[3], &[1, 2, 3]),
        ],
    );
    assert_eq!((w.f, w.i.len()), (vec![1.0, 9.0, 9.0], 0));
    let e = refused(
        "Where",
        vec![],
        &[iv(&[2], &[1, 0]), iv(&[3], &[1, 2, 3]), iv(&[], &[0])],
    );
    assert!(e.contains("do not broadcast"), "{e}");
    // comparisons, each at its boundary, ints against floats
    let a = iv(&[3], &[1, 2, 3]);
    for (op, want) in [
        ("Equal", [0, 1, 0]),
        ("Greater", [0, 0, 1]),
        ("GreaterOrEqual", [0, 1, 1]),
        ("Less", [1, 0, 0]),
        ("LessOrEqual", [1, 1, 0]),
    ] {
        assert_eq!(
            of(op, vec![], &[a.clone(), fv(&[], &[2.0])]).i,
            want,
            "{op}"
        );
        assert_eq!(
            of(op, vec![], &[a.clone(), iv(&[1], &[2])]).dims,
            [3],
            "{op}"
        );
    }
    let e = refused("Less", vec![], &[a, iv(&[2], &[1, 2])]);
    assert!(e.contains("do not broadcast"), "{e}");
    // gather elements
    let g = of(
        "GatherElements",
        vec![int("axis", 0)],
        &[fv(&[3], &[0.5, 1.5, 2.5]), iv(&[2], &[2, -3])],
    );
    assert_eq!(g.f, [2.5, 0.5]);
    let data = iv(&[2, 2], &[1, 2, 3, 4]);
    let g = of(
        "GatherElements",
        vec![int("axis", -2)],
        &[data.clone(), iv(&[2, 2], &[1, 0, 0, 1])],
    );
    assert_eq!(g.i, [3, 2, 1, 4]);
    // along the last axis: each row's own values, the row read from the index's position
    let g = of(
        "GatherElements",
        vec![int("axis", 1)],
        &[data.clone(), iv(&[2, 2], &[1, 0, 0, 0])],
    );
    assert_eq!(g.i, [2, 1, 3, 3]);
    let e = refused(
        "GatherElements",
        vec![],
        &[data.clone(), iv(&[4], &[0, 0, 0, 0])],
    );
    assert!(e.contains("data and indices differ in rank"), "{e}");
    let e = refused(
        "GatherElements",
        vec![int("axis", 1)],
        &[data.clone(), iv(&[3, 1], &[0, 0, 0])],
    );
    assert!(e.contains("indices exceed the data"), "{e}");
    let e = refused(
        "GatherElements",
        vec![int("axis", 1)],
        &[data, iv(&[1, 1], &[-3])],
    );
    assert!(e.contains("index -1 outside an axis of 2"), "{e}");
}

#[test]
fn a_constant_is_reshaped_gathered_and_computed_as_onnx_defines() {
    let c = iv(&[2, 3], &[0, 1, 2, 3, 4, 5]);
    let reshaped = |target: &[i64]| {
        folded(
            "Reshape",
            vec![],
            &[Some(c.clone()), Some(iv(&[target.len()], target))],
        )
    };
    assert_eq!(reshaped(&[3, -1]).unwrap().dims, [3, 2]);
    assert_eq!(reshaped(&[0, 3]).unwrap().dims, [2, 3]);
    assert_eq!(reshaped(&[-1]).unwrap().dims, [6]);
    assert_eq!(reshaped(&[1, 0, -1]).unwrap().dims, [1, 3, 2]);
    assert_eq!(reshaped(&[6]).unwrap().i, [0, 1, 2, 3, 4, 5]);
    for (target, want) in [
        (vec![-1, -1], "shape [-1, -1]"),
        (vec![-2, 3], "shape [-2, 3]"),
        (vec![4, -1], "6 values do not fit [4, -1]"),
        (vec![4], "6 values do not fit [4]"),
        (vec![2, 3, 0], "0 at axis 2 copies nothing"),
    ] {
        let e = reshaped(&target).unwrap_err();
        assert!(
            e.contains(want) && e.starts_with("node 'f' (Reshape)"),
            "{want}: {e}"
        );
    }
    // nothing to infer from: an empty constant by -1
    let empty = folded(
        "Reshape",
        vec![],
        &[Some(iv(&[0], &[])), Some(iv(&[2], &[0, -1]))],
    )
    .unwrap();
    assert_eq!(empty.dims, [0, 0]);
    // gather of constants: by positive and negative indices, along either axis
    let g = of("Gather", vec![], &[c.clone(), iv(&[1], &[-1])]);
    assert_eq!((g.dims, g.i), (vec![1, 3], vec![3, 4, 5]));
    let g = of(
        "Gather",
        vec![int("axis", 1)],
        &[c.clone(), iv(&[2], &[2, 0])],
    );
    assert_eq!((g.dims, g.i), (vec![2, 2], vec![2, 0, 5, 3]));
    let g = of(
        "Gather",
        vec![int("axis", -1)],
        &[fv(&[3], &[0.5, 1.5, 2.5]), iv(&[], &[1])],
    );
    assert_eq!((g.dims, g.f), (vec![], vec![1.5]));
    let e = refused("Gather", vec![], &[c.clone(), iv(&[1], &[2])]);
    assert!(e.contains("index 2 outside an axis of 2"), "{e}");
    let e = refused("Gather", vec![], &[c.clone(), iv(&[1], &[-3])]);
    assert!(e.contains("index -1 outside an axis of 2"), "{e}");
    let e = refused("Gather", vec![int("axis", 2)], &[c.clone(), iv(&[1], &[0])]);
    assert!(e.contains("axis 2 is outside a tensor of rank 2"), "{e}");
    // arithmetic: floats, ints, a single value on either side, in the operand order
    let f = |op: &str, a: Const, b: Const| of(op, vec![], &[a, b]);
    let (two, v) = (iv(&[], &[2]), iv(&[3], &[5, 7, -9]));
    assert_eq!(f("Add", v.clone(), two.clone()).i, [7, 9, -7]);
    assert_eq!(f("Sub", v.clone(), two.clone()).i, [3, 5, -11]);
    assert_eq!(f("Sub", two.clone(), v.clone()).i, [-3, -5, 11]);
    assert_eq!(f("Mul", two.clone(), v.clone()).i, [10, 14, -18]);
    assert_eq!(f("Div", v.clone(), two.clone()).i, [2, 3, -4]);
    assert_eq!(f("Div", iv(&[], &[20]), v.clone()).i, [4, 2, -2]);
    assert_eq!(f("Add", v.clone(), v.clone()).i, [10, 14, -18]);
    assert_eq!(f("Add", v.clone(), v.clone()).dims, [3]);
    assert_eq!(
        f("Add", iv(&[], &[i64::MAX]), iv(&[], &[1])).i,
        [i64::MIN],
        "wraps as numpy's int64"
    );
    let half = fv(&[], &[0.5]);
    assert_eq!(f("Add", v.clone(), half.clone()).f, [5.5, 7.5, -8.5]);
    assert_eq!(f("Sub", half.clone(), v.clone()).f, [-4.5, -6.5, 9.5]);
    assert_eq!(f("Mul", half.clone(), v.clone()).f, [2.5, 3.5, -4.5]);
    assert_eq!(f("Div", v.clone(), half.clone()).f, [10.0, 14.0, -18.0]);
    assert_eq!(f("Div", half, iv(&[2], &[1, 4])).f, [0.5, 0.125]);
    let e = refused("Div", vec![], &[v.clone(), iv(&[3], &[1, 0, 1])]);
    assert!(e.contains("integer division by zero"), "{e}");
    assert_eq!(
        f("Div", iv(&[], &[i64::MIN]), iv(&[], &[-1])).i,
        [i64::MIN],
        "wraps, as the other integer operators do"
    );
    // broadcast as numpy does: a column by a row, a lower rank over the leading axes
    let sum = f("Add", iv(&[2, 1], &[10, 20]), iv(&[3], &[1, 2, 3]));
    assert_eq!(
        (sum.dims, sum.i),
        (vec![2, 3], vec![11, 12, 13, 21, 22, 23])
    );
    let quot = f("Div", fv(&[3], &[1.0, 2.0, 4.0]), iv(&[1, 3], &[2, 4, 8]));
    assert_eq!((quot.dims, quot.f), (vec![1, 3], vec![0.5, 0.5, 0.5]));
    let diff = f("Sub", iv(&[1, 3], &[2, 4, 8]), iv(&[3], &[1, 2, 3]));
    assert_eq!((diff.dims, diff.i), (vec![1, 3], vec![1, 2, 5]));
    // a middle axis stretched between two that are not: each value found by its strides
    let sum = f("Add", iv(&[2, 1, 2], &[1, 2, 3, 4]), iv(&[2, 1], &[10, 20]));
    assert_eq!(
        (sum.dims, sum.i),
        (vec![2, 2, 2], vec![11, 12, 21, 22, 13, 14, 23, 24])
    );
    let e = refused("Add", vec![], &[v, iv(&[2], &[1, 2])]);
    assert!(e.contains("shapes [[3], [2]] do not broadcast"), "{e}");
}

#[test]
fn a_constant_too_large_to_compute_at_import_is_refused() {
    assert_eq!(
        broadcast(&[&[1 << 13], &[1 << 13, 1]]).unwrap(),
        [1 << 13, 1 << 13]
    );
    let e = broadcast(&[&[1 << 13], &[(1 << 13) + 1, 1]]).unwrap_err();
    assert!(e.contains("too large to compute at import"), "{e}");
    assert!(broadcast(&[&[usize::MAX], &[2, 1]]).is_err());
    // aligned at the last axis: a lower rank stretches over the leading ones
    let x = gather_broadcast(&iv(&[3], &[1, 2, 3]), &[2, 3]);
    assert_eq!(x.i, [1, 2, 3, 1, 2, 3]);
    let x = gather_broadcast(&fv(&[], &[0.5]), &[2]);
    assert_eq!((x.f, x.i.len()), (vec![0.5, 0.5], 0));
}
