//! Unit tests of [`super`] (`patterns.rs`), the exact GELU: each order of its factors and each
//! split of its half against ONNX's definition written out in Rust, and each way off the
//! pattern refused naming its node. Self-attention's tests are in
//! `patterns_attention_tests.rs`. In files of their own so that the module reads top to bottom.

use super::super::test_graph::{computes, erf_series, floats, string, Built};

use super::super::test_graph::W;

/// What [`linear`] computes: `x[3] · W[3][2]`.
fn times(x: &[f32]) -> Vec<f32> {
    super::super::test_graph::times(x, &W, 2)
}

fn erf(x: f32) -> f32 {
    erf_series(f64::from(x)) as f32
}

fn gelu(v: f32) -> f32 {
    0.5 * v * (1.0 + erf(v / std::f32::consts::SQRT_2))
}

/// A linear layer `h` (3 → 2) with the scalars GELU's spellings use.
fn linear() -> Built {
    floats(&[3])
        .init("w", &[3, 2], &W)
        .init("sqrt2", &[], &[std::f32::consts::SQRT_2])
        .init("inv_sqrt2", &[], &[std::f32::consts::FRAC_1_SQRT_2])
        .init("one", &[], &[1.0])
        .init("half", &[], &[0.5])
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
}

/// [`linear`] then `c = 1 + erf(h / √2)`, as PyTorch spells it.
fn one_plus_erf() -> Built {
    linear()
        .node("d", "Div", &["h", "sqrt2"], "a", vec![])
        .node("e", "Erf", &["a"], "b", vec![])
        .node("p", "Add", &["b", "one"], "c", vec![])
}

#[test]
fn the_exact_gelu_fuses_into_its_layer_whatever_the_order_of_its_factors() {
    let spellings = [
        // x / √2 → erf → 1 + · → x · · → · 0.5 (PyTorch's)
        one_plus_erf()
            .node("m", "Mul", &["h", "c"], "g", vec![])
            .node("m2", "Mul", &["g", "half"], "y", vec![]),
        // x · 1/√2, the constants first, 0.5 before x
        linear()
            .node("d", "Mul", &["h", "inv_sqrt2"], "a", vec![])
            .node("e", "Erf", &["a"], "b", vec![])
            .node("p", "Add", &["one", "b"], "c", vec![])
            .node("m", "Mul", &["half", "c"], "g", vec![])
            .node("m2", "Mul", &["g", "h"], "y", vec![]),
        // (x · 0.5) · (1 + erf)
        one_plus_erf()
            .node("s", "Mul", &["h", "half"], "hs", vec![])
            .node("m", "Mul", &["c", "hs"], "y", vec![]),
        // 0.5 · x first, the product the other way round
        one_plus_erf()
            .node("s", "Mul", &["half", "h"], "hs", vec![])
            .node("m", "Mul", &["hs", "c"], "y", vec![]),
        // x · (1 + erf) then · 0.5 with the constant first
        one_plus_erf()
            .node("m", "Mul", &["c", "h"], "g", vec![])
            .node("m2", "Mul", &["half", "g"], "y", vec![]),
        // (2 · (1 + erf)) · (0.25 · x): the two scales multiply to the half
        one_plus_erf()
            .init("two", &[], &[2.0])
            .init("quarter", &[], &[0.25])
            .node("c2", "Mul", &["c", "two"], "cc", vec![])
            .node("s", "Mul", &["h", "quarter"], "hs", vec![])
            .node("m", "Mul", &["cc", "hs"], "y", vec![]),
        // the half off by a relative 4e-6: within the match's relative 1e-5
        one_plus_erf()
            .init("near_half", &[], &[0.5 + 2e-6])
            .node("m", "Mul", &["h", "c"], "g", vec![])
            .node("m2", "Mul", &["g", "near_half"], "y", vec![]),
    ];
    for (i, b) in spellings.into_iter().enumerate() {
        let m = b.output("y").import();
        assert_eq!(m.nodes.len(), 2, "spelling {i}: fused into the layer");
        computes(&m, |x| times(x).into_iter().map(gelu).collect());
    }
    // ONNX's own Gelu: exact, or the tanh approximation
    for (attrs, f) in [
        (vec![], gelu as fn(f32) -> f32),
        (vec![string("approximate", "none")], gelu),
        (vec![string("approximate", "tanh")], |v: f32| {
            let c = (2.0 / std::f32::consts::PI).sqrt();
            0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
        }),
    ] {
        let m = linear()
            .node("g", "Gelu", &["h"], "y", attrs)
            .output("y")
            .import();
        assert_eq!(m.nodes.len(), 2);
        computes(&m, |x| times(x).into_iter().map(f).collect());
    }
    let e = linear()
        .node(
            "g",
            "Gelu",
            &["h"],
            "y",
            vec![string("approximate", "sigmoid")],
        )
        .output("y")
        .refused();
    assert!(e.contains("node 'g' (Gelu): approximate = sigmoid"), "{e}");
    // the layer's output read by another node too: the GELU is a node of its own
    let m = one_plus_erf()
        .node("m", "Mul", &["h", "c"], "g", vec![])
        .node("m2", "Mul", &["g", "half"], "y", vec![])
        .node("sum", "Add", &["y", "h"], "z", vec![])
        .output("z")
        .import();
    assert_eq!(m.nodes.len(), 4);
    computes(&m, |x| times(x).into_iter().map(|v| gelu(v) + v).collect());
}

#[test]
fn a_gelu_spelled_otherwise_is_refused_naming_the_node() {
    let refused = |b: Built, out: &str| b.output(out).refused();
    let e = refused(
        linear()
            .init("three", &[], &[3.0])
            .node("d", "Div", &["h", "three"], "a", vec![])
            .node("e", "Erf", &["a"], "b", vec![]),
        "b",
    );
    assert!(
        e.contains("node 'e' (Erf): Erf is supported only as the exact GELU's erf(x / √2)"),
        "{e}"
    );
    let e = refused(linear().node("e", "Erf", &["h"], "b", vec![]), "b");
    assert!(e.contains("node 'e' (Erf)"), "{e}");
    let e = refused(
        linear()
            .node("d", "Div", &["h", "sqrt2"], "a", vec![])
            .node("e", "Erf", &["a"], "b", vec![])
            .node("p", "Add", &["b", "half"], "c", vec![]),
        "c",
    );
    assert!(
        e.contains("node 'p' (Add): adds a constant to part of a GELU"),
        "{e}"
    );
    // 0.25 in place of 0.5, or the half off by a relative 1.6e-5 (beyond the match's 1e-5):
    // never complete
    for half in [0.25, 0.5 + 8e-6] {
        let e = refused(
            one_plus_erf()
                .init("not_half", &[], &[half])
                .node("m", "Mul", &["h", "c"], "g", vec![])
                .node("m2", "Mul", &["g", "not_half"], "y", vec![]),
            "y",
        );
        assert!(
            e.contains("output 'y' is part of a GELU, not a complete layer"),
            "{half}: {e}"
        );
    }
    // the product with another tensor than the erf's, as it is or as 0.5 · it
    let other = || {
        one_plus_erf()
            .init("w2", &[3, 2], &W)
            .node("mm2", "MatMul", &["x", "w2"], "h2", vec![])
    };
    for b in [
        other().node("m", "Mul", &["h2", "c"], "y", vec![]),
        other()
            .node("s", "Mul", &["h2", "half"], "hs", vec![])
            .node("m", "Mul", &["c", "hs"], "y", vec![]),
    ] {
        let e = refused(b, "y");
        assert!(
            e.contains("node 'm' (Mul): Mul of computed tensors is supported only inside"),
            "{e}"
        );
    }
    // Sub, a division by zero or by a vector, a product of two computed tensors
    let e = refused(linear().node("s", "Sub", &["h", "one"], "y", vec![]), "y");
    assert!(e.contains("node 's' (Sub): Sub of computed tensors"), "{e}");
    let e = refused(
        linear()
            .init("zero", &[], &[0.0])
            .node("d", "Div", &["h", "zero"], "y", vec![]),
        "y",
    );
    assert!(e.contains("node 'd' (Div): Div of computed tensors"), "{e}");
    let e = refused(
        linear()
            .init("two", &[2], &[1.0, 2.0])
            .node("d", "Mul", &["h", "two"], "y", vec![]),
        "y",
    );
    assert!(e.contains("node 'd' (Mul)"), "{e}");
    let e = refused(
        linear()
            .init("two", &[2], &[1.0, 2.0])
            .node("d", "Mul", &["two", "h"], "y", vec![]),
        "y",
    );
    assert!(e.contains("node 'd' (Mul)"), "{e}");
    let e = refused(linear().node("d", "Mul", &["h", "h"], "y", vec![]), "y");
    assert!(e.contains("node 'd' (Mul)"), "{e}");
}
