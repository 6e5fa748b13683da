//! The operators of convolutional networks: `Conv` (groups and depthwise included, weights
//! reordered into our `[group][K][Cout/g]` layout), `BatchNormalization` (folded into the
//! convolution before it), and the pooling operators. Windows are square-free but must pad
//! every side alike and stride both axes alike, as our `conv2d` and `pool` do.

use super::proto::pb::NodeProto;
use super::proto::{attr_f, attr_i, attr_ints, attr_s};
use super::translate::{at, usize_of, Kind, Translator, Val, R};
use crate::graph::weights::Weights;

/// A sliding window's output size, or why the window does not fit.
fn window(len: usize, k: usize, s: usize, p: usize) -> R<usize> {
    let padded = p
        .checked_mul(2)
        .and_then(|p2| p2.checked_add(len))
        .filter(|&v| v <= 1 << 24)
        .ok_or_else(|| format!("padding {p} is out of range"))?;
    if s == 0 || k == 0 || padded < k {
        return Err(format!(
            "a window of {k} (stride {s}, padding {p}) does not fit an input of {len}"
        ));
    }
    Ok((padded - k) / s + 1)
}

impl Translator {
    pub(crate) fn conv(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let w = self.const_input(n, 1)?;
        let [c, h, wd] = shape[..] else {
            return Err(format!(
                "{}: input shape {shape:?}: expected [C, H, W]",
                at(n)
            ));
        };
        let [co, cg, kh, kw] = w.dims[..] else {
            return Err(format!("{}: weight dims {:?}: expected 4", at(n), w.dims));
        };
        let g = usize_of(attr_i(n, "group", 1), "group")?;
        if g == 0 || c % g != 0 || co % g != 0 || cg != c / g {
            return Err(format!(
                "{}: group = {g} does not fit {c} input and {co} output channels (weight {:?})",
                at(n),
                w.dims
            ));
        }
        let (stride, padding) = self.window_attrs(n, (kh, kw))?;
        let (ho, wo) = (
            window(h, kh, stride, padding),
            window(wd, kw, stride, padding),
        );
        let (ho, wo) = (
            ho.map_err(|e| format!("{}: {e}", at(n)))?,
            wo.map_err(|e| format!("{}: {e}", at(n)))?,
        );
        let bias = match n.input.get(2).filter(|s| !s.is_empty()) {
            Some(_) => Some(self.const_input(n, 2)?),
            None => None,
        };
        if let Some(b) = &bias {
            if b.len() != co || b.f.len() != co {
                return Err(format!(
                    "{}: bias of {} values for {co} channels",
                    at(n),
                    b.len()
                ));
            }
        }
        // [Cout][Cin/g][kh][kw] as [group][K = (ci, ky, kx)][Cout/g]
        let (cog, taps) = (co / g, kh * kw);
        let k = cg * taps;
        let mut canon = vec![0.0; w.f.len()];
        for gi in 0..g {
            for o in 0..cog {
                for kk in 0..k {
                    canon[(gi * k + kk) * cog + o] = w.f[(gi * cog + o) * k + kk];
                }
            }
        }
        let mut e = self.new_node(
            n,
            "conv2d",
            vec![from],
            Kind::Conv {
                bn: false,
                bias: bias.is_some(),
            },
        );
        e.fields = vec![
            ("out_channels", (co as i64).into()),
            (
                "kernel",
                toml_edit::Value::Array([kh as i64, kw as i64].into_iter().collect()),
            ),
            ("stride", (stride as i64).into()),
            ("padding", (padding as i64).into()),
            ("groups", (g as i64).into()),
            ("bias", bias.is_some().into()),
        ];
        e.weights = Some(Weights {
            w: canon,
            shift: bias.map(|b| b.f).unwrap_or_default(),
            ..Weights::default()
        });
        self.emit(n, e, vec![co, ho, wo])
    }

    /// A window's stride and padding, checked to be the same on both axes, with dilation 1 and
    /// explicit padding.
    fn window_attrs(&self, n: &NodeProto, (kh, kw): (usize, usize)) -> R<(usize, usize)> {
        let ks = attr_ints(n, "kernel_shape");
        if !ks.is_empty() && ks != [kh as i64, kw as i64] {
            return Err(format!(
                "{}: kernel_shape {ks:?} disagrees with the weights",
                at(n)
            ));
        }
        let pad = attr_s(n, "auto_pad", "NOTSET");
        if pad != "NOTSET" && pad != "VALID" {
            return Err(format!(
                "{}: auto_pad = {pad}: only explicit pads are supported (export with \
                 explicit padding)",
                at(n)
            ));
        }
        let dil = attr_ints(n, "dilations");
        if dil.iter().any(|&d| d != 1) {
            return Err(format!(
                "{}: dilations = {dil:?}: only 1 is supported",
                at(n)
            ));
        }
        let strides = attr_ints(n, "strides");
        let stride = match strides[..] {
            [] => 1,
            [a, b] if a == b => usize_of(a, "strides")?,
            _ => {
                return Err(format!(
                    "{}: strides = {strides:?}: only equal strides on both axes are supported",
                    at(n)
                ))
            }
        };
        let pads = attr_ints(n, "pads");
        let padding = match pads[..] {
            [] => 0,
            [a, b, c, d] if a == b && b == c && c == d => usize_of(a, "pads")?,
            _ => {
                return Err(format!(
                    "{}: pads = {pads:?}: only the same padding on every side is supported",
                    at(n)
                ))
            }
        };
        Ok((stride, padding))
    }

    pub(crate) fn batch_norm(&mut self, n: &NodeProto) -> R<()> {
        let (idx, from, shape) = self.node_input(n, 0)?;
        if attr_i(n, "training_mode", 0) != 0 {
            return Err(format!(
                "{}: training_mode = 1: export the model in eval mode",
                at(n)
            ));
        }
        let eps = attr_f(n, "epsilon", 1e-5);
        let c = shape.first().copied().unwrap_or(0);
        let [gamma, beta, mean, var] = [1, 2, 3, 4].map(|i| self.const_input(n, i));
        let (gamma, beta, mean, var) = (gamma?, beta?, mean?, var?);
        for (what, t) in [
            ("scale", &gamma),
            ("B", &beta),
            ("mean", &mean),
            ("var", &var),
        ] {
            if t.f.len() != c {
                return Err(format!(
                    "{}: {what} has {} values for {c} channels",
                    at(n),
                    t.f.len()
                ));
            }
        }
        let scale: Vec<f32> = (0..c)
            .map(|i| gamma.f[i] / (var.f[i] + eps).sqrt())
            .collect();
        let shift_of = |bias: &[f32]| -> Vec<f32> {
            (0..c)
                .map(|i| beta.f[i] + (bias.get(i).copied().unwrap_or(0.0) - mean.f[i]) * scale[i])
                .collect()
        };
        let fold = self.sole_reader(n)
            && matches!(self.nodes[idx].kind, Kind::Conv { bn: false, .. })
            && self.nodes[idx].act.is_none();
        if fold {
            let conv = &mut self.nodes[idx];
            let w = conv.weights.get_or_insert_with(Weights::default);
            w.shift = shift_of(&w.shift);
            w.scale = scale;
            conv.kind = Kind::Conv {
                bn: true,
                bias: true,
            };
            conv.fields.retain(|(k, _)| *k != "bias");
            conv.fields.push(("bn", true.into()));
            conv.origin = format!("{} + {}", conv.origin, at(n));
            return self.bind(n, Val::Node { idx, shape });
        }
        let mut e = self.new_node(n, "batchnorm", vec![from], Kind::Other);
        e.weights = Some(Weights {
            shift: shift_of(&[]),
            scale,
            ..Weights::default()
        });
        self.emit(n, e, shape)
    }

    pub(crate) fn pool(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let [c, h, w] = shape[..] else {
            return Err(format!(
                "{}: input shape {shape:?}: expected [C, H, W]",
                at(n)
            ));
        };
        let ks = attr_ints(n, "kernel_shape");
        let k = match ks[..] {
            [a, b] if a == b => usize_of(a, "kernel_shape")?,
            _ => {
                return Err(format!(
                    "{}: kernel_shape = {ks:?}: only square windows are supported",
                    at(n)
                ))
            }
        };
        if attr_i(n, "ceil_mode", 0) != 0 {
            return Err(format!(
                "{}: ceil_mode = 1: only floor rounding is supported",
                at(n)
            ));
        }
        let (stride, padding) = self.window_attrs(n, (k, k))?;
        let max = n.op_type() == "MaxPool";
        if !max && padding > 0 && attr_i(n, "count_include_pad", 0) != 0 {
            return Err(format!(
                "{}: count_include_pad = 1 with padding: our average leaves the padding out",
                at(n)
            ));
        }
        if n.output.len() > 1 && n.output[1..].iter().any(|o| !o.is_empty()) {
            return Err(format!("{}: the Indices output is not supported", at(n)));
        }
        let (ho, wo) = (window(h, k, stride, padding), window(w, k, stride, padding));
        let (ho, wo) = (
            ho.map_err(|e| format!("{}: {e}", at(n)))?,
            wo.map_err(|e| format!("{}: {e}", at(n)))?,
        );
        let mut e = self.new_node(n, "pool", vec![from], Kind::Other);
        e.fields = vec![
            ("kind", if max { "max" } else { "avg" }.into()),
            ("kernel", (k as i64).into()),
            ("stride", (stride as i64).into()),
            ("padding", (padding as i64).into()),
        ];
        self.emit(n, e, vec![c, ho, wo])
    }

    pub(crate) fn global_pool(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let [c, _, _] = shape[..] else {
            return Err(format!(
                "{}: input shape {shape:?}: expected [C, H, W]",
                at(n)
            ));
        };
        let mut e = self.new_node(n, "pool", vec![from], Kind::Other);
        e.fields = vec![("kind", "global_avg".into())];
        self.emit(n, e, vec![c, 1, 1])
    }

    /// `ReduceMean` over an image's two spatial axes: a global average pool (then a flatten
    /// when the reduced axes are not kept), as the PyTorch exporter writes
    /// `AdaptiveAvgPool2d(1)`.
    pub(crate) fn reduce_mean(&mut self, n: &NodeProto) -> R<()> {
        let (_, from, shape) = self.node_input(n, 0)?;
        let axes = match n.input.get(1).filter(|s| !s.is_empty()) {
            Some(_) => self.const_input(n, 1)?.i,
            None => attr_ints(n, "axes"),
        };
        let mut axes: Vec<i64> = axes
            .iter()
            .map(|&a| if a < 0 { a + 4 } else { a })
            .collect();
        axes.sort_unstable();
        let [c, _, _] = shape[..] else {
            return Err(format!(
                "{}: ReduceMean is supported over an image's H and W only",
                at(n)
            ));
        };
        if axes != [2, 3] {
            return Err(format!(
                "{}: axes = {axes:?}: ReduceMean is supported over an image's H and W (2, 3) only",
                at(n)
            ));
        }
        let mut e = self.new_node(n, "pool", vec![from], Kind::Other);
        e.fields = vec![("kind", "global_avg".into())];
        if attr_i(n, "keepdims", 1) != 0 {
            return self.emit(n, e, vec![c, 1, 1]);
        }
        let pooled = self.push_node(e, vec![c, 1, 1]);
        let name = self.nodes[pooled].name.clone();
        let mut f = self.new_node(n, "flatten", vec![name], Kind::Other);
        f.origin = format!("{} (keepdims = 0)", at(n));
        self.emit(n, f, vec![c])
    }
}

#[cfg(test)]
mod tests {
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
        let mean = |x: &[f32]| -> Vec<f32> {
            x.chunks(25).map(|c| c.iter().sum::<f32>() / 25.0).collect()
        };
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
        assert!(e.contains("bias of 3 values for 2 channels"), "{e}");
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
        ];
        for (op, x, attrs, want) in cases {
            let e = pool(op, x, attrs);
            assert!(
                e.contains(&format!("node 'p' ({op})")) && e.contains(want),
                "{want}: {e}"
            );
        }
        // MaxPool's Indices output
        let e = floats(&[1, 4, 4])
            .node("p", "MaxPool", &["x"], "y", vec![k2()])
            .also_output("idx")
            .output("y")
            .refused();
        assert!(e.contains("the Indices output is not supported"), "{e}");
    }
}
