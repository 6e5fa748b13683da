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
        let w = self.weight_input(n, 1)?;
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
            if b.f.len() != co {
                return Err(format!(
                    "{}: bias of {} float values for {co} channels",
                    at(n),
                    b.f.len()
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
        if n.output.iter().skip(1).any(|o| !o.is_empty()) {
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
#[path = "vision_tests.rs"]
mod tests;
