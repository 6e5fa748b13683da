//! Unit tests of [`super`] (`vision.rs`), in a file of their own so that the module reads top
//! to bottom: each translation against ONNX's definition written out in Rust, and each refusal
//! naming its node.

use super::super::test_graph::{computes, float, floats, int, ints, Built};
use super::window;
use crate::graph::Op;

/// A convolution as ONNX defines it: `x` is `[c][h][w]`, `wt` is `[co][c/g][kh][kw]`.
struct Conv {
    c: usize,
    h: usize,
    w: usize,
    co: usize,
    k: (usize, usize),
    g: usize,
    s: usize,
    p: usize,
}

impl Conv {
    fn out(&self) -> (usize, usize) {
        (
            (self.h + 2 * self.p - self.k.0) / self.s + 1,
            (self.w + 2 * self.p - self.k.1) / self.s + 1,
        )
    }

    fn apply(&self, x: &[f32], wt: &[f32], b: &[f32]) -> Vec<f32> {
        let (ho, wo) = self.out();
        let (cg, cog) = (self.c / self.g, self.co / self.g);
        let mut y = vec![0.0; self.co * ho * wo];
        for o in 0..self.co {
            let gi = o / cog;
            for oy in 0..ho {
                for ox in 0..wo {
                    let mut acc = b.get(o).copied().unwrap_or(0.0);
                    for ci in 0..cg {
                        for ky in 0..self.k.0 {
                            for kx in 0..self.k.1 {
                                let iy = (oy * self.s + ky) as isize - self.p as isize;
                                let ix = (ox * self.s + kx) as isize - self.p as isize;
                                if iy < 0
                                    || ix < 0
                                    || iy >= self.h as isize
                                    || ix >= self.w as isize
                                {
                                    continue;
                                }
                                let xv = x[((gi * cg + ci) * self.h + iy as usize) * self.w
                                    + ix as usize];
                                acc += xv * wt[((o * cg + ci) * self.k.0 + ky) * self.k.1 + kx];
                            }
                        }
                    }
                    y[(o * ho + oy) * wo + ox] = acc;
                }
            }
        }
        y
    }
}

/// Distinct weights: `n` values, none alike.
fn distinct(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) / 8.0).collect()
}

#[test]
fn a_window_fits_or_says_why_not() {
    assert_eq!(window(4, 3, 1, 0), Ok(2));
    assert_eq!(window(4, 5, 1, 1), Ok(2), "padding makes it fit");
    assert_eq!(window(5, 3, 2, 1), Ok(3));
    assert_eq!(window(6, 3, 2, 0), Ok(2), "floor rounding");
    assert_eq!(window(3, 3, 1, 0), Ok(1), "exactly the input");
    for (len, k, s, p) in [(4, 5, 1, 0), (4, 3, 0, 0), (4, 0, 1, 0)] {
        let e = window(len, k, s, p).unwrap_err();
        assert!(
            e.contains(&format!(
                "a window of {k} (stride {s}, padding {p}) does not fit an input of {len}"
            )),
            "{e}"
        );
    }
    // padded to exactly 2^24 is read; a value past it is not
    assert_eq!(window(0, 3, 1, 1 << 23), Ok((1 << 24) - 2));
    assert_eq!(
        window(1, 3, 1, 1 << 23).unwrap_err(),
        format!("padding {} is out of range", 1 << 23)
    );
    assert!(window(4, 3, 1, usize::MAX)
        .unwrap_err()
        .contains("out of range"));
}

#[test]
fn a_grouped_strided_padded_convolution_computes_what_onnx_defines() {
    let cv = Conv {
        c: 4,
        h: 5,
        w: 6,
        co: 6,
        k: (3, 2),
        g: 2,
        s: 2,
        p: 1,
    };
    let wt = distinct(6 * 2 * 3 * 2);
    let b = [0.5, -0.5, 0.25, 1.0, 0.0, -1.0];
    let m = floats(&[4, 5, 6])
        .init("w", &[6, 2, 3, 2], &wt)
        .init("b", &[6], &b)
        .node(
            "conv",
            "Conv",
            &["x", "w", "b"],
            "y",
            vec![
                int("group", 2),
                ints("strides", &[2, 2]),
                ints("pads", &[1, 1, 1, 1]),
                ints("kernel_shape", &[3, 2]),
                ints("dilations", &[1, 1]),
            ],
        )
        .output("y")
        .import();
    assert!(
        matches!(
            m.nodes[1].op,
            Op::Conv2d {
                out_channels: 6,
                kernel: (3, 2),
                stride: 2,
                padding: 1,
                groups: 2,
                ..
            }
        ),
        "{:?}",
        m.nodes[1].op
    );
    computes(&m, |x| cv.apply(x, &wt, &b));
    // depthwise, without a bias, auto_pad VALID
    let cv = Conv {
        c: 3,
        h: 4,
        w: 4,
        co: 3,
        k: (3, 3),
        g: 3,
        s: 1,
        p: 0,
    };
    let wt = distinct(27);
    let m = floats(&[3, 4, 4])
        .init("w", &[3, 1, 3, 3], &wt)
        .node("dw", "Conv", &["x", "w"], "y", vec![int("group", 3)])
        .output("y")
        .import();
    computes(&m, |x| cv.apply(x, &wt, &[]));
}

/// `x` per channel: `(x − mean) / √(var + eps) · gamma + beta`.
fn bn(x: &[f32], c: usize, [g, b, mean, var]: [&[f32]; 4], eps: f32) -> Vec<f32> {
    let per = x.len() / c;
    x.iter()
        .enumerate()
        .map(|(i, v)| {
            let k = i / per;
            (v - mean[k]) / (var[k] + eps).sqrt() * g[k] + b[k]
        })
        .collect()
}

const GAMMA: [f32; 2] = [2.0, 0.5];
const BETA: [f32; 2] = [0.1, -0.2];
const MEAN: [f32; 2] = [0.3, -0.1];
const VAR: [f32; 2] = [4.0, 0.25];

fn with_bn(b: Built) -> Built {
    b.init("g", &[2], &GAMMA)
        .init("beta", &[2], &BETA)
        .init("mean", &[2], &MEAN)
        .init("var", &[2], &VAR)
}

#[test]
fn batch_norm_folds_into_the_convolution_before_it_and_stands_alone_elsewhere() {
    let cv = Conv {
        c: 1,
        h: 3,
        w: 3,
        co: 2,
        k: (2, 2),
        g: 1,
        s: 1,
        p: 0,
    };
    let wt = distinct(8);
    let conv_bn = |bias: bool| {
        let mut b = with_bn(floats(&[1, 3, 3])).init("w", &[2, 1, 2, 2], &wt);
        let mut ins = vec!["x", "w"];
        if bias {
            b = b.init("cb", &[2], &[1.0, -1.0]);
            ins.push("cb");
        }
        b.node("conv", "Conv", &ins, "c", vec![])
            .node(
                "bn",
                "BatchNormalization",
                &["c", "g", "beta", "mean", "var"],
                "y",
                vec![float("epsilon", 0.01)],
            )
            .node("relu", "Relu", &["y"], "r", vec![])
            .output("r")
            .import()
    };
    for bias in [false, true] {
        let m = conv_bn(bias);
        assert_eq!(
            m.nodes.len(),
            2,
            "batch norm and ReLU folded into the convolution"
        );
        let cb: &[f32] = if bias { &[1.0, -1.0] } else { &[] };
        computes(&m, |x| {
            let y = bn(&cv.apply(x, &wt, cb), 2, [&GAMMA, &BETA, &MEAN, &VAR], 0.01);
            y.iter().map(|v| v.max(0.0)).collect()
        });
    }
    // after an activation, or on the input: a node of its own
    let m = with_bn(floats(&[1, 3, 3]))
        .init("w", &[2, 1, 2, 2], &wt)
        .node("conv", "Conv", &["x", "w"], "c", vec![])
        .node("relu", "Relu", &["c"], "r", vec![])
        .node(
            "bn",
            "BatchNormalization",
            &["r", "g", "beta", "mean", "var"],
            "y",
            vec![],
        )
        .output("y")
        .import();
    assert_eq!(m.nodes.len(), 3);
    computes(&m, |x| {
        let r: Vec<f32> = cv.apply(x, &wt, &[]).iter().map(|v| v.max(0.0)).collect();
        bn(&r, 2, [&GAMMA, &BETA, &MEAN, &VAR], 1e-5)
    });
    let m = with_bn(floats(&[2, 2, 2]))
        .node(
            "bn",
            "BatchNormalization",
            &["x", "g", "beta", "mean", "var"],
            "y",
            vec![],
        )
        .output("y")
        .import();
    computes(&m, |x| bn(x, 2, [&GAMMA, &BETA, &MEAN, &VAR], 1e-5));
    // when another node reads the convolution too, it is not folded
    let m = with_bn(floats(&[1, 3, 3]))
        .init("w", &[2, 1, 2, 2], &wt)
        .node("conv", "Conv", &["x", "w"], "c", vec![])
        .node(
            "bn",
            "BatchNormalization",
            &["c", "g", "beta", "mean", "var"],
            "y",
            vec![],
        )
        .node("sum", "Add", &["y", "c"], "s", vec![])
        .output("s")
        .import();
    assert_eq!(m.nodes.len(), 4);
    computes(&m, |x| {
        let c = cv.apply(x, &wt, &[]);
        let y = bn(&c, 2, [&GAMMA, &BETA, &MEAN, &VAR], 1e-5);
        y.iter().zip(&c).map(|(a, b)| a + b).collect()
    });
}

/// `[c][h][w]` pooled by a `k`×`k` window: max, or the average of what lies inside.
fn pooled(
    x: &[f32],
    (c, h, w): (usize, usize, usize),
    k: usize,
    s: usize,
    p: usize,
    max: bool,
) -> Vec<f32> {
    let (ho, wo) = ((h + 2 * p - k) / s + 1, (w + 2 * p - k) / s + 1);
    let mut y = Vec::new();
    for ch in 0..c {
        for oy in 0..ho {
            for ox in 0..wo {
                let mut seen = Vec::new();
                for ky in 0..k {
                    for kx in 0..k {
                        let (iy, ix) = (
                            (oy * s + ky) as isize - p as isize,
                            (ox * s + kx) as isize - p as isize,
                        );
                        if iy >= 0 && ix >= 0 && iy < h as isize && ix < w as isize {
                            seen.push(x[(ch * h + iy as usize) * w + ix as usize]);
                        }
                    }
                }
                y.push(if max {
                    seen.iter().copied().fold(f32::MIN, f32::max)
                } else {
                    seen.iter().sum::<f32>() / seen.len() as f32
                });
            }
        }
    }
    y
}

#[test]
fn pools_and_spatial_means_compute_what_onnx_defines() {
    let pool = |op: &str, attrs| {
        floats(&[2, 5, 5])
            .node("p", op, &["x"], "y", attrs)
            .output("y")
            .import()
    };
    let m = pool(
        "MaxPool",
        vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])],
    );
    computes(&m, |x| pooled(x, (2, 5, 5), 2, 2, 0, true));
    let m = pool(
        "MaxPool",
        vec![
            ints("kernel_shape", &[3, 3]),
            ints("pads", &[1, 1, 1, 1]),
            int("count_include_pad", 1),
        ],
    );
    computes(&m, |x| pooled(x, (2, 5, 5), 3, 1, 1, true));
    let m = pool(
        "AveragePool",
        vec![
            ints("kernel_shape", &[3, 3]),
            ints("strides", &[2, 2]),
            ints("pads", &[1, 1, 1, 1]),
        ],
    );
    computes(&m, |x| pooled(x, (2, 5, 5), 3, 2, 1, false));
    let m = pool(
        "AveragePool",
        vec![ints("kernel_shape", &[2, 2]), int("count_include_pad", 1)],
    );
    computes(&m, |x| pooled(x, (2, 5, 5), 2, 1, 0, false));
    let mean =
        |x: &[f32]| -> Vec<f32> { x.chunks(25).map(|c| c.iter().sum::<f32>() / 25.0).collect() };
    let m = pool("GlobalAveragePool", vec![]);
    computes(&m, mean);
    for (axes, keep) in [(vec![2, 3], 1), (vec![-1, -2], 0), (vec![3, 2], 0)] {
        let m = pool(
            "ReduceMean",
            vec![ints("axes", &axes), int("keepdims", keep)],
        );
        assert_eq!(
            m.nodes.len(),
            if keep == 1 { 2 } else { 3 },
            "a flatten when the axes go"
        );
        assert_eq!(
            m.nodes.last().unwrap().out.feat.len(),
            if keep == 1 { 3 } else { 1 }
        );
        computes(&m, mean);
    }
    // the axes as an input (opset 18)
    let m = floats(&[2, 5, 5])
        .init_i("axes", &[2], &[2, 3])
        .node("p", "ReduceMean", &["x", "axes"], "y", vec![])
        .output("y")
        .import();
    computes(&m, mean);
}

#[test]
fn a_convolution_or_pool_outside_what_is_computed_is_refused_naming_the_node() {
    let conv = |x: &[usize], w: &[usize], attrs| {
        let n = w.iter().product();
        floats(x)
            .init("w", w, &distinct(n))
            .node("cv", "Conv", &["x", "w"], "y", attrs)
            .output("y")
            .refused()
    };
    let cases: Vec<(&[usize], &[usize], Vec<_>, &str)> = vec![
        (
            &[4, 4],
            &[2, 1, 3, 3],
            vec![],
            "input shape [4, 4]: expected [C, H, W]",
        ),
        (
            &[1, 4, 4],
            &[2, 9],
            vec![],
            "weight dims [2, 9]: expected 4",
        ),
        (
            &[4, 4, 4],
            &[2, 2, 3, 3],
            vec![int("group", 3)],
            "group = 3 does not fit 4 input and 2 output channels",
        ),
        (
            &[4, 4, 4],
            &[3, 2, 3, 3],
            vec![int("group", 2)],
            "group = 2 does not fit 4 input and 3 output channels",
        ),
        (
            &[4, 4, 4],
            &[2, 4, 3, 3],
            vec![int("group", 2)],
            "group = 2 does not fit",
        ),
        (
            &[4, 4, 4],
            &[2, 4, 3, 3],
            vec![int("group", 0)],
            "group = 0 does not fit",
        ),
        (
            &[1, 4, 4],
            &[2, 1, 3, 3],
            vec![ints("kernel_shape", &[3, 2])],
            "kernel_shape [3, 2] disagrees",
        ),
        (
            &[1, 4, 4],
            &[2, 1, 3, 3],
            vec![ints("dilations", &[2, 2])],
            "dilations = [2, 2]: only 1",
        ),
        (
            &[1, 4, 4],
            &[2, 1, 3, 3],
            vec![ints("strides", &[1, 2])],
            "strides = [1, 2]: only equal strides",
        ),
        (
            &[1, 4, 4],
            &[2, 1, 3, 3],
            vec![ints("strides", &[2])],
            "strides = [2]",
        ),
        (
            &[1, 4, 4],
            &[2, 1, 3, 3],
            vec![ints("pads", &[1, 1, 1, 0])],
            "pads = [1, 1, 1, 0]: only the same padding",
        ),
        (
            &[1, 4, 4],
            &[2, 1, 3, 3],
            vec![ints("pads", &[0, 1, 1, 1])],
            "pads = [0, 1, 1, 1]",
        ),
        (
            &[1, 4, 4],
            &[2, 1, 3, 3],
            vec![ints("pads", &[1, 1])],
            "pads = [1, 1]",
        ),
        (
            &[1, 2, 4],
            &[2, 1, 3, 3],
            vec![],
            "a window of 3 (stride 1, padding 0) does not fit an input of 2",
        ),
        (
            &[1, 4, 2],
            &[2, 1, 3, 3],
            vec![],
            "a window of 3 (stride 1, padding 0) does not fit an input of 2",
        ),
    ];
    for (x, w, attrs, want) in cases {
        let e = conv(x, w, attrs);
        assert!(
            e.contains("node 'cv' (Conv)") && e.contains(want),
            "{want}: {e}"
        );
    }
    let mut auto = super::super::proto::pb::AttributeProto {
        name: Some("auto_pad".into()),
        ..Default::default()
    };
    auto.s = Some(b"SAME_UPPER".to_vec());
    let e = conv(&[1, 4, 4], &[2, 1, 3, 3], vec![auto]);
    assert!(
        e.contains("auto_pad = SAME_UPPER: only explicit pads"),
        "{e}"
    );
    let e = floats(&[1, 4, 4])
        .init("w", &[2, 1, 3, 3], &distinct(18))
        .init("b", &[3], &[0.0; 3])
        .node("cv", "Conv", &["x", "w", "b"], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("bias of 3 float values for 2 channels"), "{e}");
    let e = floats(&[1, 4, 4])
        .init("w", &[2, 1, 3, 3], &distinct(18))
        .init_i("b", &[2], &[1, 2])
        .node("cv", "Conv", &["x", "w", "b"], "y", vec![])
        .output("y")
        .refused();
    assert!(e.contains("bias of 0 float values for 2 channels"), "{e}");
    // batch norm in training mode, or with a table of the wrong length
    let e = with_bn(floats(&[2, 2, 2]))
        .node(
            "bn",
            "BatchNormalization",
            &["x", "g", "beta", "mean", "var"],
            "y",
            vec![int("training_mode", 1)],
        )
        .output("y")
        .refused();
    assert!(
        e.contains("node 'bn' (BatchNormalization): training_mode = 1"),
        "{e}"
    );
    let e = with_bn(floats(&[3, 2, 2]))
        .node(
            "bn",
            "BatchNormalization",
            &["x", "g", "beta", "mean", "var"],
            "y",
            vec![],
        )
        .output("y")
        .refused();
    assert!(e.contains("scale has 2 values for 3 channels"), "{e}");
    for (i, what) in [(1, "B"), (2, "mean"), (3, "var")] {
        let mut names = ["g", "beta", "mean", "var"];
        names[i] = "long";
        let e = with_bn(floats(&[2, 2, 2]))
            .init("long", &[3], &[1.0; 3])
            .node(
                "bn",
                "BatchNormalization",
                &["x", names[0], names[1], names[2], names[3]],
                "y",
                vec![],
            )
            .output("y")
            .refused();
        assert!(
            e.contains(&format!("{what} has 3 values for 2 channels")),
            "{e}"
        );
    }
    // pools
    let pool = |op: &str, x: &[usize], attrs| {
        floats(x)
            .node("p", op, &["x"], "y", attrs)
            .output("y")
            .refused()
    };
    let k2 = || ints("kernel_shape", &[2, 2]);
    let cases: Vec<(&str, &[usize], Vec<_>, &str)> = vec![
        (
            "MaxPool",
            &[4, 4],
            vec![k2()],
            "input shape [4, 4]: expected [C, H, W]",
        ),
        (
            "MaxPool",
            &[1, 4, 4],
            vec![ints("kernel_shape", &[2, 3])],
            "kernel_shape = [2, 3]: only square windows",
        ),
        (
            "MaxPool",
            &[1, 4, 4],
            vec![ints("kernel_shape", &[2])],
            "kernel_shape = [2]",
        ),
        (
            "MaxPool",
            &[1, 4, 4],
            vec![k2(), int("ceil_mode", 1)],
            "ceil_mode = 1",
        ),
        (
            "AveragePool",
            &[1, 4, 4],
            vec![
                k2(),
                ints("pads", &[1, 1, 1, 1]),
                int("count_include_pad", 1),
            ],
            "count_include_pad = 1 with padding",
        ),
        (
            "MaxPool",
            &[1, 1, 4],
            vec![k2()],
            "a window of 2 (stride 1, padding 0) does not fit an input of 1",
        ),
        (
            "MaxPool",
            &[1, 4, 1],
            vec![k2()],
            "does not fit an input of 1",
        ),
        (
            "GlobalAveragePool",
            &[16],
            vec![],
            "input shape [16]: expected [C, H, W]",
        ),
        (
            "ReduceMean",
            &[16],
            vec![ints("axes", &[1])],
            "ReduceMean is supported over an image's H and W only",
        ),
        (
            "ReduceMean",
            &[1, 4, 4],
            vec![ints("axes", &[1, 2])],
            "axes = [1, 2]",
        ),
        (
            "ReduceMean",
            &[1, 4, 4],
            vec![ints("axes", &[3])],
            "axes = [3]",
        ),
        (
            "ReduceMean",
            &[1, 4, 4],
            vec![ints("axes", &[3, 0])],
            "axes = [0, 3]",
        ),
    ];
    for (op, x, attrs, want) in cases {
        let e = pool(op, x, attrs);
        assert!(
            e.contains(&format!("node 'p' ({op})")) && e.contains(want),
            "{want}: {e}"
        );
    }
    // MaxPool's Indices output: named, refused; left out (an empty name), fine
    floats(&[1, 4, 4])
        .node("p", "MaxPool", &["x"], "y", vec![k2()])
        .also_output("")
        .output("y")
        .import();
    let e = floats(&[1, 4, 4])
        .node("p", "MaxPool", &["x"], "y", vec![k2()])
        .also_output("idx")
        .output("y")
        .refused();
    assert!(e.contains("the Indices output is not supported"), "{e}");
}
