//! Unit tests of [`super`] (`patterns.rs`): each way off the self-attention pattern is refused
//! naming its node — Q, K and V that disagree in heads or in shape, a softmax over another
//! axis, a mask that masks, a transpose that moves the batch, `IsNaN` and `Where` elsewhere.
//! The graphs are [`super::attention_tests`]'s.

use super::super::test_graph::{floats, int, ints, Built};
use super::attention_tests::{Attention, Context, ROWS, WIDTH};

/// `b` with `from` split into heads by a `Reshape` to the initializer `split`, then
/// transposed by `perm`, as `out`.
fn split(b: Built, from: &str, split: &str, perm: &[i64], out: &str) -> Built {
    let mid = format!("{out}_1");
    b.node(
        &format!("{out}_split"),
        "Reshape",
        &[from, split],
        &mid,
        vec![],
    )
    .node(
        &format!("{out}_t"),
        "Transpose",
        &[&mid],
        out,
        vec![ints("perm", perm)],
    )
}

#[test]
fn q_k_and_v_must_agree_in_heads_and_in_shape() {
    let a = Attention::new();
    let four = || a.heads().init_i("split4", &[4], &[0, 0, 4, -1]);
    let e = split(four(), "k0", "split4", &[0, 2, 3, 1], "k4")
        .node("qk", "MatMul", &["q", "k4"], "s", vec![])
        .output("s")
        .refused();
    assert!(
        e.contains(
            "node 'qk' (MatMul): MatMul of a tensor split into attention heads by a \
                    tensor split into attention heads: not the self-attention pattern"
        ),
        "{e}"
    );
    let e = split(four(), "v0", "split4", &[0, 2, 1, 3], "v4")
        .node("qk", "MatMul", &["q", "k"], "s", vec![])
        .node("sm", "Softmax", &["s"], "p", vec![int("axis", -1)])
        .node("pv", "MatMul", &["p", "v4"], "c", vec![])
        .output("c")
        .refused();
    assert!(
        e.contains(
            "node 'pv' (MatMul): MatMul of attention scores by a tensor split into \
                    attention heads: not the self-attention pattern"
        ),
        "{e}"
    );
    // V 6 wide (2 heads of 3), merged back by [0, 0, -1]
    let wv6: Vec<f32> = (0..WIDTH * 6).map(|i| (i % 7) as f32 / 7.0).collect();
    let b = a
        .heads()
        .init("wv6", &[WIDTH, 6], &wv6)
        .init_i("any", &[3], &[0, 0, -1])
        .node("v6_proj", "MatMul", &["e", "wv6"], "v60", vec![]);
    let e = split(b, "v60", "split", &[0, 2, 1, 3], "v6")
        .node("qk", "MatMul", &["q", "k"], "s0", vec![])
        .node("scaled", "Div", &["s0", "scale"], "s", vec![])
        .node("sm", "Softmax", &["s"], "p", vec![int("axis", -1)])
        .context("p", "v6", "any")
        .refused();
    assert!(
        e.contains("node 'merged' (Reshape): Q, K and V differ in shape"),
        "{e}"
    );
}

#[test]
fn attention_off_the_pattern_is_refused_naming_the_node() {
    let a = Attention::new();
    let scores = || a.heads().node("qk", "MatMul", &["q", "k"], "s0", vec![]);
    let tail = |b: Built, scale: f32, axis: i64| {
        b.init("sc", &[], &[scale])
            .node("scaled", "Div", &["s0", "sc"], "s", vec![])
            .node("sm", "Softmax", &["s"], "p", vec![int("axis", axis)])
            .context("p", "v", "merge")
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
    for perm in [[0, 1, 1, 2], [0, 1, 2, 4], [0, 0, 1, 2]] {
        let e = a
            .heads()
            .node("t2", "Transpose", &["q"], "z", vec![ints("perm", &perm)])
            .output("z")
            .refused();
        assert!(
            e.contains(&format!(
                "node 't2' (Transpose): perm = {perm:?}: the batch axis must stay first, the \
                 other three permuted"
            )),
            "{e}"
        );
    }
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
    // constants but the third input; after a softmax, a NaN replaced by 1, or by the softmax
    // of another tensor
    let where_ = |b: Built, inputs: [&str; 3]| {
        b.node("w", "Where", &inputs, "z", vec![])
            .output("z")
            .refused()
    };
    let softmax = || {
        a.heads()
            .init("one", &[], &[1.0])
            .node("qk", "MatMul", &["q", "k"], "s", vec![])
            .node("sm", "Softmax", &["s"], "p", vec![int("axis", -1)])
            .node("nan", "IsNaN", &["p"], "n", vec![])
    };
    for (b, inputs) in [
        (
            floats(&[2])
                .init("yes", &[], &[1.0])
                .init("zero", &[], &[0.0]),
            ["yes", "zero", "x"],
        ),
        (softmax(), ["n", "one", "p"]),
        (softmax(), ["n", "zero", "s"]),
    ] {
        let e = where_(b, inputs);
        assert!(
            e.contains(
                "node 'w' (Where): Where is supported on constants, and as \
                        Where(IsNaN(p), 0, p) after an attention softmax"
            ),
            "{inputs:?}: {e}"
        );
    }
    // merged back to a shape that is not [batch, rows, width]
    let e = a
        .heads()
        .init_i("bad", &[3], &[0, 0, 2])
        .node("qk", "MatMul", &["q", "k"], "s0", vec![])
        .init("sc", &[], &[2f32.sqrt()])
        .node("scaled", "Div", &["s0", "sc"], "s", vec![])
        .node("sm", "Softmax", &["s"], "p", vec![])
        .context("p", "v", "bad")
        .refused();
    assert!(
        e.contains("node 'merged' (Reshape): shape [0, 0, 2]: expected [batch, 4, 4]"),
        "{e}"
    );
}
