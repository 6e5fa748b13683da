//! Unit tests of [`super`] (`eval.rs`): each operator a shape computation may use, evaluated
//! against ONNX's definition by hand (numpy's broadcasting, negative axes and indices, the
//! clamping of slices and shapes), every shape the evaluator infers, and each refusal.

use super::super::blocks::Graph;
use super::super::test_export::B;
use super::{axis, broadcast, strides, Eval, R, T};
use crate::graph::onnx::proto::pb::tensor_proto::DataType;
use crate::graph::onnx::proto::pb::{AttributeProto, TensorProto};
use crate::graph::onnx::test_graph::{int, ints};

/// The tensor `build` names in the graph it builds, evaluated with graph inputs of the shapes
/// in `inputs`.
fn eval(build: impl FnOnce(&mut B) -> String, inputs: &[(&str, &[usize])]) -> R<T> {
    let mut b = B::default();
    let x = build(&mut b);
    let gr = Graph::new(&b.g);
    let inputs = inputs
        .iter()
        .map(|(n, d)| (n.to_string(), d.to_vec()))
        .collect();
    Eval::new(&gr, inputs).value(&x)
}

fn t(dims: &[usize], v: &[f64]) -> T {
    T {
        dims: dims.to_vec(),
        v: v.to_vec(),
    }
}

/// `op` of integer initializers `args` (dims and values each) with `attrs`.
fn of_ints(op: &str, args: &[(&[usize], &[i64])], attrs: Vec<AttributeProto>) -> R<T> {
    eval(
        |b| {
            let names: Vec<String> = args.iter().map(|(d, v)| b.i("a", d, v)).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            b.op(op, &names, attrs)
        },
        &[],
    )
}

#[test]
fn shape_reads_an_input_s_axes_from_start_to_end_clamped() {
    let x: &[usize] = &[2, 5, 8];
    for (attrs, want) in [
        (vec![], vec![2.0, 5.0, 8.0]),
        (vec![int("start", 1)], vec![5.0, 8.0]),
        (vec![int("start", 1), int("end", -1)], vec![5.0]),
        (vec![int("start", -10), int("end", 10)], vec![2.0, 5.0, 8.0]),
        (vec![int("start", -1)], vec![8.0]),
        (vec![int("start", 2), int("end", 1)], vec![]),
    ] {
        let got = eval(|b| b.op("Shape", &["x"], attrs.clone()), &[("x", x)]);
        assert_eq!(got, Ok(t(&[want.len()], &want)), "{attrs:?}");
    }
}

#[test]
fn casts_truncate_to_integers_test_for_non_zero_to_booleans_and_keep_floats() {
    let cast = |to: i64, v: &[f32]| {
        let got = eval(
            |b| {
                let x = b.f("x", &[v.len()], v);
                b.op("Cast", &[&x], vec![int("to", to)])
            },
            &[],
        );
        got.unwrap().v
    };
    assert_eq!(cast(9, &[0.0, 2.5, -1.0]), [0.0, 1.0, 1.0]);
    for to in [2, 3, 4, 5, 6, 7, 12, 13] {
        assert_eq!(cast(to, &[2.75, -2.75, 3.0]), [2.0, -2.0, 3.0], "to {to}");
    }
    for to in [1, 10, 11] {
        assert_eq!(cast(to, &[2.75]), [2.75], "to {to}");
    }
    let copy = eval(
        |b| {
            let x = b.f("x", &[2], &[2.75, -1.5]);
            b.op("Identity", &[&x], vec![])
        },
        &[],
    );
    assert_eq!(copy, Ok(t(&[2], &[2.75, -1.5])));
}

#[test]
fn unsqueeze_and_squeeze_insert_and_drop_axes_from_an_input_or_an_attribute() {
    let v: &[i64] = &[1, 2, 3];
    let w = [1.0, 2.0, 3.0];
    let un = |axes: &[i64]| of_ints("Unsqueeze", &[(&[3], v), (&[axes.len()], axes)], vec![]);
    assert_eq!(un(&[0, -1]), Ok(t(&[1, 3, 1], &w)));
    assert_eq!(un(&[2, 0]), Ok(t(&[1, 3, 1], &w)));
    assert_eq!(un(&[1]), Ok(t(&[3, 1], &w)));
    assert_eq!(
        of_ints("Unsqueeze", &[(&[3], v)], vec![ints("axes", &[0])]),
        Ok(t(&[1, 3], &w))
    );
    let e = un(&[5]).unwrap_err();
    assert!(e.contains("(Unsqueeze): axis 5 outside rank 2"), "{e}");
    let sq = |axes: &[i64]| of_ints("Squeeze", &[(&[1, 3, 1], v), (&[axes.len()], axes)], vec![]);
    assert_eq!(sq(&[-1]), Ok(t(&[1, 3], &w)));
    assert_eq!(sq(&[0, 2]), Ok(t(&[3], &w)));
    assert_eq!(
        of_ints("Squeeze", &[(&[1, 3, 1], v)], vec![]),
        Ok(t(&[3], &w))
    );
    assert_eq!(
        of_ints("Squeeze", &[(&[1, 3, 1], v)], vec![ints("axes", &[0])]),
        Ok(t(&[3, 1], &w))
    );
    let e = sq(&[3]).unwrap_err();
    assert!(e.contains("(Squeeze): axis 3 outside rank 3"), "{e}");
}

#[test]
fn concat_joins_along_an_axis_counting_scalars_as_one_value() {
    assert_eq!(
        of_ints(
            "Concat",
            &[(&[], &[2]), (&[2], &[3, 4])],
            vec![int("axis", 0)]
        ),
        Ok(t(&[3], &[2.0, 3.0, 4.0]))
    );
    for a in [1, -1] {
        let got = of_ints(
            "Concat",
            &[(&[2, 2], &[1, 2, 3, 4]), (&[2, 1], &[5, 6])],
            vec![int("axis", a)],
        );
        assert_eq!(
            got,
            Ok(t(&[2, 3], &[1.0, 2.0, 5.0, 3.0, 4.0, 6.0])),
            "axis {a}"
        );
    }
    let rows = of_ints(
        "Concat",
        &[(&[1, 2], &[1, 2]), (&[2, 2], &[3, 4, 5, 6])],
        vec![int("axis", 0)],
    );
    assert_eq!(rows, Ok(t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])));
    let e = of_ints("Concat", &[(&[2], &[1, 2])], vec![int("axis", 1)]).unwrap_err();
    assert!(e.contains("axis 1 outside rank 1"), "{e}");
}

#[test]
fn gather_picks_along_an_axis_with_negative_indices_from_the_end() {
    let data: &[i64] = &[10, 20, 30];
    assert_eq!(
        of_ints("Gather", &[(&[3], data), (&[], &[-1])], vec![]),
        Ok(t(&[], &[30.0]))
    );
    assert_eq!(
        of_ints("Gather", &[(&[3], data), (&[1, 2], &[0, 2])], vec![]),
        Ok(t(&[1, 2], &[10.0, 30.0]))
    );
    let by_column = of_ints(
        "Gather",
        &[(&[2, 3], &[1, 2, 3, 4, 5, 6]), (&[2], &[2, 0])],
        vec![int("axis", 1)],
    );
    assert_eq!(by_column, Ok(t(&[2, 2], &[3.0, 1.0, 6.0, 4.0])));
    let by_row = of_ints(
        "Gather",
        &[(&[2, 3], &[1, 2, 3, 4, 5, 6]), (&[1], &[1])],
        vec![],
    );
    assert_eq!(by_row, Ok(t(&[1, 3], &[4.0, 5.0, 6.0])));
    for outside in [3, -4] {
        let e = of_ints("Gather", &[(&[3], data), (&[], &[outside])], vec![]).unwrap_err();
        assert!(e.contains("(Gather): index out of range"), "{outside}: {e}");
    }
}

#[test]
fn range_counts_up_or_down_and_refuses_a_step_of_zero() {
    let range =
        |s: i64, l: i64, d: i64| of_ints("Range", &[(&[], &[s]), (&[], &[l]), (&[], &[d])], vec![]);
    assert_eq!(range(2, 7, 2), Ok(t(&[3], &[2.0, 4.0, 6.0])));
    assert_eq!(range(2, 8, 2), Ok(t(&[3], &[2.0, 4.0, 6.0])));
    assert_eq!(range(5, 1, -2), Ok(t(&[2], &[5.0, 3.0])));
    assert_eq!(range(3, 3, 1), Ok(t(&[0], &[])));
    assert_eq!(range(3, 1, 1), Ok(t(&[0], &[])));
    let e = range(0, 1, 0).unwrap_err();
    assert!(e.contains("(Range): a Range with step 0"), "{e}");
    let quarter = eval(
        |b| {
            let (s, l, d) = (
                b.f("s", &[], &[0.0]),
                b.f("l", &[], &[1.0]),
                b.f("d", &[], &[0.25]),
            );
            b.op("Range", &[&s, &l, &d], vec![])
        },
        &[],
    );
    assert_eq!(quarter, Ok(t(&[4], &[0.0, 0.25, 0.5, 0.75])));
}

#[test]
fn arithmetic_and_comparisons_broadcast_as_numpy_does() {
    let v: &[i64] = &[1, 2, 3];
    for (op, want) in [
        ("Add", [3.0, 4.0, 5.0]),
        ("Sub", [-1.0, 0.0, 1.0]),
        ("Mul", [2.0, 4.0, 6.0]),
        ("Div", [0.5, 1.0, 1.5]),
        ("Equal", [0.0, 1.0, 0.0]),
        ("Less", [1.0, 0.0, 0.0]),
        ("LessOrEqual", [1.0, 1.0, 0.0]),
        ("Greater", [0.0, 0.0, 1.0]),
        ("GreaterOrEqual", [0.0, 1.0, 1.0]),
    ] {
        let got = of_ints(op, &[(&[3], v), (&[], &[2])], vec![]);
        assert_eq!(got, Ok(t(&[3], &want)), "{op}");
    }
    // [2, 1] against [3]: [2, 3]; [3] against [2, 1] the same, the other way round
    let col_row = of_ints("Sub", &[(&[2, 1], &[10, 20]), (&[3], &[1, 2, 3])], vec![]);
    assert_eq!(col_row, Ok(t(&[2, 3], &[9.0, 8.0, 7.0, 19.0, 18.0, 17.0])));
    let row_col = of_ints("Sub", &[(&[3], &[1, 2, 3]), (&[2, 1], &[10, 20])], vec![]);
    assert_eq!(
        row_col,
        Ok(t(&[2, 3], &[-9.0, -8.0, -7.0, -19.0, -18.0, -17.0]))
    );
    let e = of_ints("Add", &[(&[2], &[1, 2]), (&[3], v)], vec![]).unwrap_err();
    assert!(
        e.contains("(Add): shapes [2] and [3] do not broadcast (2 against 3)"),
        "{e}"
    );
    let e = of_ints("Add", &[(&[2], &[1, 2])], vec![]).unwrap_err();
    assert!(e.contains("(Add): input 1 missing"), "{e}");
}

#[test]
fn where_expand_and_constant_of_shape_fill_by_numpy_s_rules() {
    let chosen = of_ints(
        "Where",
        &[(&[3], &[1, 0, 1]), (&[], &[5]), (&[3], &[7, 8, 9])],
        vec![],
    );
    assert_eq!(chosen, Ok(t(&[3], &[5.0, 8.0, 5.0])));
    let rows = of_ints("Expand", &[(&[3], &[1, 2, 3]), (&[2], &[2, 1])], vec![]);
    assert_eq!(rows, Ok(t(&[2, 3], &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0])));
    let cols = of_ints("Expand", &[(&[2, 1], &[4, 5]), (&[2], &[2, 3])], vec![]);
    assert_eq!(cols, Ok(t(&[2, 3], &[4.0, 4.0, 4.0, 5.0, 5.0, 5.0])));
    let e = of_ints("Expand", &[(&[2], &[4, 5]), (&[1], &[3])], vec![]).unwrap_err();
    assert!(e.contains("do not broadcast"), "{e}");
    // the fill: a float, an integer, none (zeros); a negative size is none
    let value = |dt: DataType, f: Vec<f32>, i: Vec<i64>| AttributeProto {
        name: Some("value".into()),
        t: Some(TensorProto {
            dims: vec![1],
            data_type: Some(dt as i32),
            float_data: f,
            int64_data: i,
            ..Default::default()
        }),
        ..Default::default()
    };
    let filled = |attrs: Vec<AttributeProto>| of_ints("ConstantOfShape", &[(&[2], &[2, 3])], attrs);
    assert_eq!(
        filled(vec![value(DataType::Float, vec![1.5], vec![])]),
        Ok(t(&[2, 3], &[1.5; 6]))
    );
    assert_eq!(
        filled(vec![value(DataType::Int64, vec![], vec![7])]),
        Ok(t(&[2, 3], &[7.0; 6]))
    );
    assert_eq!(filled(vec![]), Ok(t(&[2, 3], &[0.0; 6])));
    assert_eq!(
        of_ints("ConstantOfShape", &[(&[2], &[-1, 3])], vec![]),
        Ok(t(&[0, 3], &[]))
    );
}

#[test]
fn reshape_keeps_zeros_axes_and_infers_one_minus_one() {
    let v: &[i64] = &[1, 2, 3, 4, 5, 6];
    let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let reshape = |to: &[i64]| of_ints("Reshape", &[(&[2, 3], v), (&[to.len()], to)], vec![]);
    assert_eq!(reshape(&[0, -1]), Ok(t(&[2, 3], &w)));
    assert_eq!(reshape(&[-1]), Ok(t(&[6], &w)));
    assert_eq!(reshape(&[3, -1]), Ok(t(&[3, 2], &w)));
    assert_eq!(reshape(&[-1, 0]), Ok(t(&[2, 3], &w)));
    let e = reshape(&[0, 0, 0]).unwrap_err();
    assert!(e.contains("(Reshape): a 0 past the input's rank"), "{e}");
}

#[test]
fn slice_clamps_its_bounds_and_counts_negative_ones_from_the_end() {
    let ten: Vec<i64> = (0..10).collect();
    let twelve: Vec<i64> = (0..12).collect();
    let slice = |data: (&[usize], &[i64]), s: &[i64], e: &[i64], axes: Option<&[i64]>| {
        let mut args: Vec<(&[usize], &[i64])> = vec![data, (&[1], s), (&[1], e)];
        if let Some(a) = axes {
            args.push((&[1], a));
        }
        of_ints("Slice", &args, vec![])
    };
    assert_eq!(
        slice((&[10], &ten), &[-3], &[100], None),
        Ok(t(&[3], &[7.0, 8.0, 9.0]))
    );
    assert_eq!(slice((&[10], &ten), &[5], &[2], None), Ok(t(&[0], &[])));
    // a bound of 0 is the axis's start, not counted from its end
    assert_eq!(
        slice((&[10], &ten), &[0], &[3], None),
        Ok(t(&[3], &[0.0, 1.0, 2.0]))
    );
    assert_eq!(slice((&[10], &ten), &[-4], &[0], None), Ok(t(&[0], &[])));
    assert_eq!(
        slice((&[10], &ten), &[-100], &[2], None),
        Ok(t(&[2], &[0.0, 1.0]))
    );
    // the middle columns of a 3 × 4
    assert_eq!(
        slice((&[3, 4], &twelve), &[1], &[-1], Some(&[1])),
        Ok(t(&[3, 2], &[1.0, 2.0, 5.0, 6.0, 9.0, 10.0]))
    );
    assert_eq!(
        slice((&[3, 4], &twelve), &[1], &[-1], Some(&[-1])),
        Ok(t(&[3, 2], &[1.0, 2.0, 5.0, 6.0, 9.0, 10.0]))
    );
    // the last two rows, the axes not given
    let rows: Vec<f64> = (4..12).map(f64::from).collect();
    assert_eq!(
        slice((&[3, 4], &twelve), &[1], &[3], None),
        Ok(t(&[2, 4], &rows))
    );
    let e = slice((&[3, 4], &twelve), &[1], &[3], Some(&[2])).unwrap_err();
    assert!(e.contains("(Slice): axis 2 outside rank 2"), "{e}");
}

#[test]
fn a_graph_input_or_another_operator_is_no_shape_computation() {
    let e = eval(|_| "x".into(), &[("x", &[2])]).unwrap_err();
    assert_eq!(e, "'x' is a graph input, not a shape computation");
    let e = eval(|b| b.op("Tanh", &["x"], vec![]), &[("x", &[2])]).unwrap_err();
    assert!(e.contains("(Tanh): Tanh is not a shape computation"), "{e}");
}

#[test]
fn shapes_are_inferred_through_copies_reshapes_gathers_norms_and_arithmetic() {
    let x: &[usize] = &[1, 5, 8];
    let shape_of = |build: &dyn Fn(&mut B) -> String, inputs: &[(&str, &[usize])]| {
        eval(
            |b| {
                let y = build(b);
                b.op("Shape", &[&y], vec![])
            },
            inputs,
        )
        .map(|t| t.v)
    };
    let dims = |d: &[usize]| Ok::<_, String>(d.iter().map(|&v| v as f64).collect::<Vec<f64>>());
    for op in ["Identity", "Cast", "Concat"] {
        let got = shape_of(&|b| b.op(op, &["x"], vec![]), &[("x", x)]);
        assert_eq!(got, dims(x), "{op}");
    }
    let reshaped = |to: &'static [i64]| {
        move |b: &mut B| {
            let s = b.i("to", &[to.len()], to);
            b.op("Reshape", &["x", &s], vec![])
        }
    };
    assert_eq!(shape_of(&reshaped(&[0, -1]), &[("x", x)]), dims(&[1, 40]));
    assert_eq!(
        shape_of(&reshaped(&[0, 0, 2, 4]), &[("x", x)]),
        dims(&[1, 5, 2, 4])
    );
    assert_eq!(shape_of(&reshaped(&[-1, 4]), &[("x", x)]), dims(&[10, 4]));
    // a table gathered by the token ids: their shape and the table's width
    let gathered = |b: &mut B| {
        let table = b.f("table", &[10, 8], &[0.5; 80]);
        b.op("Gather", &[&table, "ids"], vec![])
    };
    assert_eq!(shape_of(&gathered, &[("ids", &[1, 5])]), dims(&[1, 5, 8]));
    let normed = |b: &mut B| {
        let (g, s) = (b.f("g", &[8], &[1.0; 8]), b.f("s", &[8], &[0.0; 8]));
        b.op("LayerNormalization", &["x", &g, &s], vec![])
    };
    assert_eq!(shape_of(&normed, &[("x", x)]), dims(x));
    for op in ["Add", "Sub", "Mul", "Div"] {
        let arith = |b: &mut B| {
            let c = b.f("c", &[2, 1, 8], &[1.0; 16]);
            b.op(op, &["x", &c], vec![])
        };
        assert_eq!(shape_of(&arith, &[("x", x)]), dims(&[2, 5, 8]), "{op}");
    }
    // a computed value's own shape
    let counted = |b: &mut B| {
        let (s, l, d) = (
            b.i("s", &[], &[0]),
            b.i("l", &[], &[4]),
            b.i("d", &[], &[1]),
        );
        b.op("Range", &[&s, &l, &d], vec![])
    };
    assert_eq!(shape_of(&counted, &[]), dims(&[4]));
    // not inferred: another operator, a gather from a computed table or along another axis
    let e = shape_of(&|b| b.op("Tanh", &["x"], vec![]), &[("x", x)]).unwrap_err();
    assert!(
        e.contains("(Tanh): the shape of a Tanh is not inferred"),
        "{e}"
    );
    let e = shape_of(
        &|b| b.op("Gather", &["x", "ids"], vec![]),
        &[("x", x), ("ids", &[2])],
    )
    .unwrap_err();
    assert!(
        e.contains("(Gather): a gather from a computed table"),
        "{e}"
    );
    let along = |b: &mut B| {
        let table = b.f("table", &[10, 8], &[0.5; 80]);
        b.op("Gather", &[&table, "ids"], vec![int("axis", 1)])
    };
    let e = shape_of(&along, &[("ids", &[2])]).unwrap_err();
    assert!(e.contains("the shape of a Gather is not inferred"), "{e}");
    let e = shape_of(&|_| "nothing".into(), &[]).unwrap_err();
    assert_eq!(e, "'nothing' is a graph input, not a shape computation");
    // a Concat is a copy only of one input: of two, its shape is not its first input's
    let e = shape_of(
        &|b| b.op("Concat", &["x", "x"], vec![int("axis", 1)]),
        &[("x", x)],
    )
    .unwrap_err();
    assert!(
        e.contains("(Concat): the shape of a Concat is not inferred"),
        "{e}"
    );
}

#[test]
fn strides_broadcasts_and_axes_by_hand() {
    assert_eq!(strides(&[2, 3, 4]), [12, 4, 1]);
    assert_eq!(strides(&[5]), [1]);
    assert!(strides(&[]).is_empty());
    assert_eq!(broadcast(&[2, 1, 3], &[4, 1]), Ok(vec![2, 4, 3]));
    assert_eq!(broadcast(&[], &[3]), Ok(vec![3]));
    assert_eq!(broadcast(&[1], &[1]), Ok(vec![1]));
    assert!(broadcast(&[2], &[3]).is_err());
    assert_eq!((axis(-1, 3), axis(0, 3), axis(2, 3)), (Ok(2), Ok(0), Ok(2)));
    assert_eq!(axis(-3, 3), Ok(0));
    assert_eq!(axis(3, 3), Err("axis 3 outside rank 3".into()));
    assert_eq!(axis(-4, 3), Err("axis -4 outside rank 3".into()));
}
