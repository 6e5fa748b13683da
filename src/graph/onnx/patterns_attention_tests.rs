//! Unit tests of [`super`] (`patterns.rs`), self-attention as exporters spell it: as Hugging
//! Face's BERT exports it, its 1/√head scale wherever an exporter may put it, heads split by
//! any `Reshape` ONNX allows and merged with the batch as a bmm export does, each against
//! attention written out in Rust. The spellings refused are in
//! `patterns_attention_refusal_tests.rs`.

use super::super::proto::pb::tensor_proto::DataType;
use super::super::test_graph::{computes, graph, int, ints, Built};

/// Self-attention over 4 tokens of width 4 in 2 heads, as Hugging Face's BERT exports it.
pub(super) struct Attention {
    table: Vec<f32>,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
}

pub(super) const ROWS: usize = 4;
pub(super) const WIDTH: usize = 4;
pub(super) const HEADS: usize = 2;

impl Attention {
    pub(super) fn new() -> Self {
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
    pub(super) fn heads(&self) -> Built {
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
            .context("p", "v", "merge")
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
            .context("p", "v", "merge")
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
        [0, 0, 1, 3],
    ] {
        assert_eq!(heads(four, &[4, 4], &target), None, "{target:?}");
    }
    // a node of width 0: no heads of 0, none 0 wide
    for target in [[0, 0, 0, 0], [0, 0, 2, 0], [0, 0, 0, 2]] {
        assert_eq!(heads(four, &[4, 0], &target), None, "{target:?}");
    }
    // the node's rows must be the token sequence's, and there must be one
    assert_eq!(heads(Some(3), &[4, 4], &[0, 0, 2, 2]), None);
    assert_eq!(heads(Some(3), &[3, 4], &[0, 3, 2, 2]), Some(2));
    assert_eq!(heads(None, &[4, 4], &[0, 0, 2, 2]), None);
    assert_eq!(heads(four, &[4, 4, 1], &[0, 0, 2, 2]), None);
    assert_eq!(heads(four, &[4, 4], &[0, 0, 2, 2, 1]), None);
}

/// The end of attention: the probabilities by V, transposed back and reshaped into `y`.
pub(super) trait Context {
    /// `self` with the probabilities `p` times `v`, back to `[batch, rows, heads, head]` and
    /// reshaped by the initializer `merge` into the graph's output `y`.
    fn context(self, p: &str, v: &str, merge: &str) -> Built;
}

impl Context for Built {
    fn context(self, p: &str, v: &str, merge: &str) -> Built {
        self.node("pv", "MatMul", &[p, v], "c0", vec![])
            .node(
                "back",
                "Transpose",
                &["c0"],
                "c1",
                vec![ints("perm", &[0, 2, 1, 3])],
            )
            .node("merged", "Reshape", &["c1", merge], "y", vec![])
            .output("y")
    }
}

/// `b` (from [`Attention::heads`]) through scores of `q` by `k`, scaled, a softmax, the
/// product by V and back to `[batch, rows, width]`.
fn attend(b: Built, q: &str, k: &str) -> Built {
    b.node("qk", "MatMul", &[q, k], "s0", vec![])
        .node("scaled", "Div", &["s0", "scale"], "s", vec![])
        .node("sm", "Softmax", &["s"], "p", vec![int("axis", -1)])
        .context("p", "v", "merge")
}

#[test]
fn heads_merged_with_the_batch_as_bmm_exports_them_compute_the_same_attention() {
    let a = Attention::new();
    let (rows, heads, head) = (ROWS as i64, HEADS as i64, (WIDTH / HEADS) as i64);
    // Q and K as [batch·heads, rows, head]; K then transposed to [batch·heads, head, rows];
    // each back to four axes for the product
    let merged = || {
        a.heads()
            .init_i("to3", &[3], &[-1, rows, head])
            .init_i("q4", &[4], &[1, heads, rows, head])
            .init_i("k4", &[4], &[1, heads, head, rows])
            .node("qm", "Reshape", &["q", "to3"], "q_m", vec![])
            .node("qu", "Reshape", &["q_m", "q4"], "q_u", vec![])
            .node(
                "kt",
                "Transpose",
                &["k1"],
                "k_t",
                vec![ints("perm", &[0, 2, 1, 3])],
            )
            .node("km", "Reshape", &["k_t", "to3"], "k_m", vec![])
    };
    let m = attend(
        merged()
            .node(
                "kmt",
                "Transpose",
                &["k_m"],
                "k_mt",
                vec![ints("perm", &[0, 2, 1])],
            )
            .node("ku", "Reshape", &["k_mt", "k4"], "k_u", vec![]),
        "q_u",
        "k_u",
    )
    .import();
    computes(&m, |ids| a.reference(ids));
    // merged heads transposed otherwise than by swapping their last two axes
    let e = merged()
        .node(
            "kmt",
            "Transpose",
            &["k_m"],
            "k_mt",
            vec![ints("perm", &[0, 1, 2])],
        )
        .output("k_mt")
        .refused();
    assert!(
        e.contains("node 'kmt' (Transpose): Transpose is supported only inside"),
        "{e}"
    );
    // back to four axes in another order or with another batch, each axis wrong in turn
    for target in [
        [1, 2, 2, 4],
        [0, 2, 4, 2],
        [2, 2, 4, 2],
        [1, 3, 4, 2],
        [1, 2, 3, 2],
        [1, 2, 4, 3],
    ] {
        let e = merged()
            .init_i("to4", &[4], &target)
            .node("ku", "Reshape", &["k_m", "to4"], "k_u", vec![])
            .output("k_u")
            .refused();
        let want = format!("node 'ku' (Reshape): shape {target:?} of attention heads of [2, 4, 2]");
        assert!(e.contains(&want), "{e}");
    }
    // merged otherwise: the merged axis given (0 would copy the batch), each axis wrong in turn
    for target in [[0, 4, 2], [2, 4, 2], [-1, 3, 2], [-1, 4, 3]] {
        let e = a
            .heads()
            .init_i("to3", &[3], &target)
            .node("qm", "Reshape", &["q", "to3"], "q_m", vec![])
            .output("q_m")
            .refused();
        let want = format!("node 'qm' (Reshape): shape {target:?} of attention heads of [2, 4, 2]");
        assert!(e.contains(&want), "{e}");
    }
}
