//! The output comparison's tests: up to the first flipped token, judged by the logits.

use super::*;
use crate::graph::op::Op;

/// GNMT's argmax and the logits it reads, and a request's output steps on two devices:
/// logits (3 tokens) then the chosen token, at steps 0 and 1.
fn steps(l0: [f32; 3], t0: f32, l1: [f32; 3], t1: f32) -> (Model, Vec<TraceEntry>) {
    let model = crate::graph::zoo::load("gnmt").unwrap();
    let argmax = model
        .nodes
        .iter()
        .position(|n| matches!(n.op, Op::Argmax))
        .unwrap();
    let logits = model.nodes[argmax].inputs[0].node.idx();
    let e = |node, step, values: &[f32]| TraceEntry {
        input: 7,
        node,
        step,
        values: values.to_vec(),
    };
    let t = vec![
        e(logits, 0, &l0),
        e(argmax, 0, &[t0]),
        e(logits, 1, &l1),
        e(argmax, 1, &[t1]),
    ];
    (model, t)
}

#[test]
fn outputs_compare_up_to_the_first_flipped_token_and_judge_it_by_the_logits() {
    let (m, cpu) = steps([0.1, 2.0, 1.0], 1.0, [3.0, 0.0, 0.5], 0.0);
    // the same tokens, logits a little apart: compared throughout
    let (_, dev) = steps([0.1, 2.001, 1.0], 1.0, [3.0, 0.0, 0.5], 0.0);
    let c = compare_outputs(&m, &dev, &cpu).unwrap();
    assert_eq!((c.values, c.flips.len()), (8, 0));
    assert!((c.max_rel - 0.001 / 3.0).abs() < 1e-6 && c.ok(1e-3) && !c.ok(1e-4));
    // a near tie tipped the other way at step 0: step 1 (its own token fed back, other
    // logits) not compared
    let (_, tie) = steps([0.1, 2.0, 1.9995], 1.0, [3.0, 0.0, 0.5], 0.0);
    let (_, dev) = steps([0.1, 1.9996, 1.9999], 2.0, [0.0, 9.0, 0.0], 1.0);
    let c = compare_outputs(&m, &dev, &tie).unwrap();
    assert_eq!(c.values, 4);
    let f = &c.flips[0];
    assert_eq!((f.step, f.token, f.reference_token), (0, 2, 1));
    assert!((f.gap - 0.0005 / 3.0).abs() < 1e-6, "{}", f.gap);
    assert!(c.ok(1e-3) && !c.ok(1e-4), "{c:?}");
    // a token far below the reference's best is a real error whatever the tolerance allows
    let (_, dev) = steps([0.1, 2.0, 1.0], 0.0, [3.0, 0.0, 0.5], 0.0);
    let c = compare_outputs(&m, &dev, &cpu).unwrap();
    assert!((c.flips[0].gap - 1.9 / 3.0).abs() < 1e-6 && !c.ok(0.1));
    // runs that part otherwise (another number of values) do not compare
    let (_, mut dev) = steps([0.1, 2.0, 1.0], 1.0, [3.0, 0.0, 0.5], 0.0);
    dev[2].values.pop();
    assert!(compare_outputs(&m, &dev, &cpu).is_none());
}
