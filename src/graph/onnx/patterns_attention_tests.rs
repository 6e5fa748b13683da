//! Unit tests of [`super`] (`patterns.rs`), self-attention: as Hugging Face's BERT exports it
//! and with its 1/√head scale wherever an exporter may put it, each against ONNX's definition
//! written out in Rust, and each way off the pattern refused naming its node.

use super::super::proto::pb::tensor_proto::DataType;
use super::super::test_graph::{computes, floats, graph, int, ints, Built};

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
        self.heads_split_by(&[0, 0, HEADS as i64, -1])
    }

    /// [`Attention::heads`] with each projection split into heads by a `Reshape` to `split`.
    fn heads_split_by(&self, split: &[i64]) -> Built {
        let mut b = graph("ids", DataType::Int64, &[ROWS])
            .init("table", &[5, WIDTH], &self.table)
            .init("wq", &[WIDTH, WIDTH], &self.wq)
            .init("wk", &[WIDTH, WIDTH], &self.wk)
            .init("wv", &[WIDTH, WIDTH], &self.wv)
            .init_i("split", &[4], split)
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
        self.whole_split_by(&[0, 0, HEADS as i64, -1])
    }

    /// [`Attention::whole`] with the heads split by a `Reshape` to `split`.
    fn whole_split_by(&self, split: &[i64]) -> Built {
        self.heads_split_by(split)
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
    // scaled by 1/√head elsewhere, without the mask and the NaN guard: each spelling computes
    // the same attention
    let root = (WIDTH as f32 / HEADS as f32).sqrt();
    let heads = || {
        a.heads()
            .init("inv", &[], &[1.0 / root])
            .init("root", &[], &[root])
            .init("root4", &[], &[root.sqrt()])
    };
    let qk = |b: Built, q: &str, k: &str| b.node("qk", "MatMul", &[q, k], "s0", vec![]);
    let spellings = [
        (
            "Q · 1/√head",
            heads().node("qs", "Mul", &["q", "inv"], "qq", vec![]),
            "qq",
            "k",
        ),
        (
            "1/√head · Q",
            heads().node("qs", "Mul", &["inv", "q"], "qq", vec![]),
            "qq",
            "k",
        ),
        (
            "Q / √head",
            heads().node("qs", "Div", &["q", "root"], "qq", vec![]),
            "qq",
            "k",
        ),
        (
            "Q and K each / ⁴√head",
            heads()
                .node("qs", "Div", &["q", "root4"], "qq", vec![])
                .node("ks", "Div", &["k", "root4"], "kk", vec![]),
            "qq",
            "kk",
        ),
    ]
    .map(|(what, b, q, k)| (what, qk(b, q, k)))
    .into_iter()
    .chain([
        (
            "scores · 1/√head",
            qk(heads(), "q", "k").node("ss", "Mul", &["s0", "inv"], "s", vec![]),
        ),
        (
            "1/√head · scores",
            qk(heads(), "q", "k").node("ss", "Mul", &["inv", "s0"], "s", vec![]),
        ),
    ]);
    for (what, b) in spellings {
        let scores = if what.contains("scores") { "s" } else { "s0" };
        let m = b
            .node("sm", "Softmax", &[scores], "p", vec![int("axis", 3)])
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
            .import_with(&[])
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        computes(&m, |ids| a.reference(ids));
    }
}

#[test]
fn heads_split_by_any_reshape_onnx_allows_and_refused_otherwise() {
    let a = Attention::new();
    // the heads or the head width inferred (-1), the batch and the rows given or copied
    for split in [[0, 0, -1, 2], [1, 4, 2, 2], [-1, 0, 2, 2], [0, -1, 2, 2]] {
        let m = a
            .whole_split_by(&split)
            .import_with(&[])
            .unwrap_or_else(|e| panic!("{split:?}: {e}"));
        computes(&m, |ids| a.reference(ids));
    }
    // a width of 0 or 0 heads (as the heads, 0 would copy the input's width: 4 heads of 1),
    // heads that do not divide the width, a head width that does not, both inferred
    for split in [
        [0, 0, -1, 0],
        [0, 0, 0, -1],
        [0, 0, 3, -1],
        [0, 0, -1, 3],
        [0, 0, -1, -1],
    ] {
        let e = a.whole_split_by(&split).refused();
        assert!(
            e.contains(&format!("node 'q_split' (Reshape): shape {split:?}")),
            "{split:?}: {e}"
        );
    }
}

#[test]
fn a_reshape_splits_rows_into_heads_only_when_every_axis_fits() {
    use super::super::translate::Translator;
    use super::Part;
    // the heads a Reshape of a [rows, width] node to `target` makes, when it splits into heads
    let heads = |seq: Option<usize>, shape: &[usize], target: &[i64]| {
        let mut t = Translator::new(std::collections::HashMap::new());
        t.seq = seq;
        match t.split_heads(0, shape, target) {
            Some(Part::Heads { heads, .. }) => Some(heads),
            Some(p) => panic!("{target:?}: {p:?}"),
            None => None,
        }
    };
    let four = Some(4);
    for (target, want) in [
        ([0, 0, 2, -1], 2),
        ([0, 0, -1, 2], 2),
        ([0, 0, -1, 1], 4),
        ([1, 4, 2, 2], 2),
        ([-1, -1, 4, 1], 4),
        ([0, 4, 1, -1], 1),
    ] {
        assert_eq!(heads(four, &[4, 4], &target), Some(want), "{target:?}");
    }
    // the batch not 1 (or -1, 0), the rows not the sequence's, sizes that do not make the width
    // or are not positive (their product is), a width or heads of 0
    for target in [
        [2, 4, 2, 2],
        [0, 2, 2, 2],
        [0, 0, 4, 2],
        [0, 0, 2, 1],
        [0, 0, -2, -2],
        [0, 0, 3, -1],
        [0, 0, -1, 3],
        [0, 0, -1, -1],
        [0, 0, -1, 0],
        [0, 0, 0, -1],
    ] {
        assert_eq!(heads(four, &[4, 4], &target), None, "{target:?}");
    }
    // the node's rows must be the token sequence's, and there must be one
    assert_eq!(heads(Some(3), &[4, 4], &[0, 0, 2, 2]), None);
    assert_eq!(heads(Some(3), &[3, 4], &[0, 3, 2, 2]), Some(2));
    assert_eq!(heads(None, &[4, 4], &[0, 0, 2, 2]), None);
    assert_eq!(heads(four, &[4, 4, 1], &[0, 0, 2, 2]), None);
    assert_eq!(heads(four, &[4, 4], &[0, 0, 2, 2, 1]), None);
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
    // Sub is not a scale, nor is a constant divided by the scores or by Q
    let e = scores()
        .init("c", &[], &[2.0])
        .node("sub", "Sub", &["s0", "c"], "s", vec![])
        .output("s")
        .refused();
    assert!(
        e.contains("node 'sub' (Sub): Sub of computed tensors"),
        "{e}"
    );
    let e = a
        .heads()
        .init("c", &[], &[2.0])
        .node("sub", "Sub", &["q", "c"], "qq", vec![])
        .output("qq")
        .refused();
    assert!(
        e.contains("node 'sub' (Sub): Sub of computed tensors"),
        "{e}"
    );
    for x in ["s0", "q"] {
        let e = scores()
            .init("c", &[], &[2.0])
            .node("div", "Div", &["c", x], "z", vec![])
            .output("z")
            .refused();
        assert!(
            e.contains("node 'div' (Div): Div of computed tensors"),
            "{x}: {e}"
        );
    }
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
