//! Unit tests of [`super`] (`patterns.rs`): the exact GELU in each order of its factors and
//! self-attention as exporters spell it, each against ONNX's definition written out in Rust,
//! and each way off the pattern refused naming its node. In a file of their own so that the
//! module reads top to bottom.

use super::super::proto::pb::tensor_proto::DataType;
use super::super::test_graph::{computes, erf_series, floats, graph, int, ints, string, Built};

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
    // 0.25 in place of 0.5: never complete
    let e = refused(
        one_plus_erf()
            .init("quarter", &[], &[0.25])
            .node("m", "Mul", &["h", "c"], "g", vec![])
            .node("m2", "Mul", &["g", "quarter"], "y", vec![]),
        "y",
    );
    assert!(
        e.contains("output 'y' is part of a GELU, not a complete layer"),
        "{e}"
    );
    // the product with another tensor than the erf's
    let e = refused(
        one_plus_erf()
            .init("w2", &[3, 2], &W)
            .node("mm2", "MatMul", &["x", "w2"], "h2", vec![])
            .node("m", "Mul", &["h2", "c"], "y", vec![]),
        "y",
    );
    assert!(
        e.contains("node 'm' (Mul): Mul of computed tensors is supported only inside"),
        "{e}"
    );
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

/// Self-attention over 4 tokens of width 4 in 2 heads, as Hugging Face's BERT exports it.
struct Attention {
    table: Vec<f32>,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
}

const ROWS: usize = 4;
const WIDTH: usize = 4;
const HEADS: usize = 2;

impl Attention {
    fn new() -> Self {
        let vals = |n: usize, k: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * k + 3) % 13) as f32 - 6.0) / 9.0)
                .collect()
        };
        Attention {
            table: vals(5 * WIDTH, 5),
            wq: vals(WIDTH * WIDTH, 7),
            wk: vals(WIDTH * WIDTH, 3),
            wv: vals(WIDTH * WIDTH, 11),
        }
    }

    /// The embedding, its three projections Q, K and V, and each split into heads (K
    /// transposed), ready for the scores.
    fn heads(&self) -> Built {
        let mut b = graph("ids", DataType::Int64, &[ROWS])
            .init("table", &[5, WIDTH], &self.table)
            .init("wq", &[WIDTH, WIDTH], &self.wq)
            .init("wk", &[WIDTH, WIDTH], &self.wk)
            .init("wv", &[WIDTH, WIDTH], &self.wv)
            .init_i("split", &[4], &[0, 0, HEADS as i64, -1])
            .init_i("merge", &[3], &[0, 0, WIDTH as i64])
            .init("scale", &[], &[(WIDTH as f32 / HEADS as f32).sqrt()])
            .init("mask", &[1, 1, 1, ROWS], &[0.0; ROWS])
            .init("zero", &[], &[0.0])
            .node("emb", "Gather", &["table", "ids"], "e", vec![]);
        for (w, p, perm) in [
            ("q", "wq", [0, 2, 1, 3]),
            ("k", "wk", [0, 2, 3, 1]),
            ("v", "wv", [0, 2, 1, 3]),
        ] {
            b = b
                .node(
                    &format!("{w}_proj"),
                    "MatMul",
                    &["e", p],
                    &format!("{w}0"),
                    vec![],
                )
                .node(
                    &format!("{w}_split"),
                    "Reshape",
                    &[&format!("{w}0"), "split"],
                    &format!("{w}1"),
                    vec![],
                )
                .node(
                    &format!("{w}_t"),
                    "Transpose",
                    &[&format!("{w}1")],
                    w,
                    vec![ints("perm", &perm)],
                );
        }
        b
    }

    /// [`Attention::heads`] through the scores, a softmax, the product by V and back.
    fn whole(&self) -> Built {
        self.heads()
            .node("qk", "MatMul", &["q", "k"], "s0", vec![])
            .node("scaled", "Div", &["s0", "scale"], "s1", vec![])
            .node("masked", "Add", &["s1", "mask"], "s", vec![])
            .node("sm", "Softmax", &["s"], "p0", vec![int("axis", -1)])
            .node("nan", "IsNaN", &["p0"], "n", vec![])
            .node("where", "Where", &["n", "zero", "p0"], "p", vec![])
            .node("pv", "MatMul", &["p", "v"], "c0", vec![])
            .node(
                "back",
                "Transpose",
                &["c0"],
                "c1",
                vec![ints("perm", &[0, 2, 1, 3])],
            )
            .node("merged", "Reshape", &["c1", "merge"], "y", vec![])
            .output("y")
    }

    /// What ONNX computes for the token ids `ids`.
    fn reference(&self, ids: &[f32]) -> Vec<f32> {
        let e: Vec<f32> = ids
            .iter()
            .flat_map(|&id| self.table[id as usize % 5 * WIDTH..][..WIDTH].to_vec())
            .collect();
        let proj = |w: &[f32]| -> Vec<f32> {
            (0..ROWS * WIDTH)
                .map(|k| {
                    let (r, j) = (k / WIDTH, k % WIDTH);
                    (0..WIDTH)
                        .map(|i| e[r * WIDTH + i] * w[i * WIDTH + j])
                        .sum()
                })
                .collect()
        };
        let (q, k, v) = (proj(&self.wq), proj(&self.wk), proj(&self.wv));
        let dh = WIDTH / HEADS;
        let mut out = vec![0.0; ROWS * WIDTH];
        for h in 0..HEADS {
            for i in 0..ROWS {
                let s: Vec<f32> = (0..ROWS)
                    .map(|j| {
                        (0..dh)
                            .map(|d| q[i * WIDTH + h * dh + d] * k[j * WIDTH + h * dh + d])
                            .sum::<f32>()
                            / (dh as f32).sqrt()
                    })
                    .collect();
                let max = s.iter().copied().fold(f32::MIN, f32::max);
                let ex: Vec<f32> = s.iter().map(|v| (v - max).exp()).collect();
                let sum: f32 = ex.iter().sum();
                for d in 0..dh {
                    out[i * WIDTH + h * dh + d] = (0..ROWS)
                        .map(|j| ex[j] / sum * v[j * WIDTH + h * dh + d])
                        .sum();
                }
            }
        }
        out
    }
}

#[test]
fn self_attention_as_exported_becomes_one_attention_node_computing_what_onnx_defines() {
    let a = Attention::new();
    let m = a.whole().import();
    let ops: Vec<&str> = m.nodes.iter().map(|n| n.op.kind_name()).collect();
    assert_eq!(
        ops,
        [
            "input",
            "embedding",
            "linear",
            "linear",
            "linear",
            "concat",
            "attention"
        ]
    );
    computes(&m, |ids| a.reference(ids));
    // scaled by 1/√head on Q instead of the scores, without the mask and the NaN guard
    let m = a
        .heads()
        .init("inv", &[], &[1.0 / (WIDTH as f32 / HEADS as f32).sqrt()])
        .node("qs", "Mul", &["q", "inv"], "qq", vec![])
        .node("qk", "MatMul", &["qq", "k"], "s", vec![])
        .node("sm", "Softmax", &["s"], "p", vec![int("axis", 3)])
        .node("pv", "MatMul", &["p", "v"], "c0", vec![])
        .node(
            "back",
            "Transpose",
            &["c0"],
            "c1",
            vec![ints("perm", &[0, 2, 1, 3])],
        )
        .node("merged", "Reshape", &["c1", "merge"], "y", vec![])
        .output("y")
        .import();
    computes(&m, |ids| a.reference(ids));
}

#[test]
fn attention_off_the_pattern_is_refused_naming_the_node() {
    let a = Attention::new();
    let scores = || a.heads().node("qk", "MatMul", &["q", "k"], "s0", vec![]);
    let tail = |b: Built, scale: f32, axis: i64| {
        b.init("sc", &[], &[scale])
            .node("scaled", "Div", &["s0", "sc"], "s", vec![])
            .node("sm", "Softmax", &["s"], "p", vec![int("axis", axis)])
            .node("pv", "MatMul", &["p", "v"], "c0", vec![])
            .node(
                "back",
                "Transpose",
                &["c0"],
                "c1",
                vec![ints("perm", &[0, 2, 1, 3])],
            )
            .node("merged", "Reshape", &["c1", "merge"], "y", vec![])
            .output("y")
            .refused()
    };
    let e = tail(scores(), 3.0, -1);
    assert!(
        e.contains("node 'merged' (Reshape): attention scores scaled by")
            && e.contains("our attention scales by 1/√2"),
        "{e}"
    );
    let e = tail(scores(), 2f32.sqrt(), 2);
    assert!(
        e.contains("node 'sm' (Softmax): Softmax of attention scores over another axis"),
        "{e}"
    );
    // a mask that masks something
    let e = scores()
        .init("m", &[1, 1, 1, ROWS], &[0.0, 0.0, -1e4, 0.0])
        .node("masked", "Add", &["s0", "m"], "s", vec![])
        .output("s")
        .refused();
    assert!(
        e.contains("node 'masked' (Add): an attention mask that masks positions"),
        "{e}"
    );
    // Q by V, or by K untransposed
    let e = a
        .heads()
        .node("qk", "MatMul", &["q", "v"], "s0", vec![])
        .output("s0")
        .refused();
    assert!(
        e.contains("node 'qk' (MatMul): MatMul of a tensor split into attention heads by a tensor split into attention heads: not the self-attention pattern"),
        "{e}"
    );
    // the batch axis moved
    let e = a
        .heads()
        .node(
            "t2",
            "Transpose",
            &["q"],
            "z",
            vec![ints("perm", &[1, 0, 2, 3])],
        )
        .output("z")
        .refused();
    assert!(
        e.contains("node 't2' (Transpose): perm = [1, 0, 2, 3]: the batch axis must stay first"),
        "{e}"
    );
    let e = floats(&[2, 2])
        .node(
            "t",
            "Transpose",
            &["x"],
            "z",
            vec![ints("perm", &[0, 2, 1])],
        )
        .output("z")
        .refused();
    assert!(
        e.contains("Transpose is supported only inside a self-attention pattern"),
        "{e}"
    );
    // IsNaN and Where elsewhere
    let e = floats(&[2])
        .node("n", "IsNaN", &["x"], "z", vec![])
        .output("z")
        .refused();
    assert!(
        e.contains("node 'n' (IsNaN): IsNaN is supported after an attention softmax only"),
        "{e}"
    );
    let e = floats(&[2])
        .init("zero", &[], &[0.0])
        .node("w", "Where", &["x", "zero", "x"], "z", vec![])
        .output("z")
        .refused();
    assert!(
        e.contains("node 'w' (Where): Where is supported on constants"),
        "{e}"
    );
    // merged back to a shape that is not [batch, rows, width]
    let e = a
        .heads()
        .init_i("bad", &[3], &[0, 0, 2])
        .node("qk", "MatMul", &["q", "k"], "s0", vec![])
        .init("sc", &[], &[2f32.sqrt()])
        .node("scaled", "Div", &["s0", "sc"], "s", vec![])
        .node("sm", "Softmax", &["s"], "p", vec![])
        .node("pv", "MatMul", &["p", "v"], "c0", vec![])
        .node(
            "back",
            "Transpose",
            &["c0"],
            "c1",
            vec![ints("perm", &[0, 2, 1, 3])],
        )
        .node("merged", "Reshape", &["c1", "bad"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 'merged' (Reshape): shape [0, 0, 2]: expected [batch, 4, 4]"),
        "{e}"
    );
}
