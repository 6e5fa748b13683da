//! The two patterns exporters spell out op by op that we run as one node: multi-head
//! self-attention and the exact GELU. While a pattern is incomplete its values are [`Part`]s,
//! which only the pattern's next op may read; when it completes it becomes our nodes.
//!
//! * **Attention** (what `torch.onnx.export` writes for Hugging Face's BERT): three linear
//!   layers Q, K, V of one input; each `Reshape`d to `[batch, seq, heads, head]` and
//!   `Transpose`d (Q and V to `[batch, heads, seq, head]`, K to `[batch, heads, head, seq]`);
//!   `MatMul(Q, K)`, a `Div` by `√head` (or `Mul` by its inverse), `Softmax` over the last axis,
//!   `MatMul` by V, `Transpose` back and `Reshape` to `[batch, seq, width]`. It becomes a
//!   `concat` of Q|K|V and our `attention` (`mode = "self"`). No attention mask (the importer
//!   takes one input: every position attends to every other).
//! * **Exact GELU**: `x · 0.5 · (1 + erf(x / √2))`, the factors in any order, becomes
//!   `act = "gelu_erf"` fused into the layer that computes `x`; ONNX's own `Gelu` (opset 20)
//!   maps directly.

use super::fold::float_at;
use super::proto::attr_i;
use super::proto::attr_s;
use super::proto::pb::NodeProto;
use super::proto::Const;
use super::translate::{at, Translator, R};
pub(crate) use super::values::{Kind, Part, Val};

/// (rows, heads, within the head), and the two transposes attention reads.
const ROWS_HEADS: [u8; 3] = [0, 1, 2];
const HEADS_ROWS: [u8; 3] = [1, 0, 2];
const HEADS_WITHIN_ROWS: [u8; 3] = [1, 2, 0];

/// The single value of a one-element float constant.
fn scalar(c: &Const) -> Option<f32> {
    (c.len() == 1).then(|| c.f.first().copied().or(c.i.first().map(|&v| v as f32)))?
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-5 * b.abs().max(1e-30)
}

impl Translator {
    /// `Mul`, `Div` and `Sub`: of constants, or inside a pattern.
    pub(crate) fn arith(&mut self, n: &NodeProto) -> R<()> {
        let (a, b) = (self.input(n, 0)?.clone(), self.input(n, 1)?.clone());
        let op = n.op_type();
        let unsupported = || {
            format!(
                "{}: {op} of computed tensors is supported only inside the exact GELU and \
                 self-attention patterns",
                at(n)
            )
        };
        let part = match (op, a, b) {
            (_, Val::Const(a), Val::Const(b)) => return self.fold_binary(n, a, b),
            // the arms below that match any op take Mul and Div only: Sub is refused here
            ("Sub", ..) => return Err(unsupported()),
            ("Div", Val::Node { idx, .. }, Val::Const(c)) => {
                let s = scalar(&c).filter(|s| *s != 0.0).ok_or_else(unsupported)?;
                Part::Scaled {
                    x: idx,
                    name: n.input[0].clone(),
                    by: 1.0 / s,
                }
            }
            ("Mul", Val::Node { idx, .. }, Val::Const(c)) => {
                let s = scalar(&c).ok_or_else(unsupported)?;
                Part::Scaled {
                    x: idx,
                    name: n.input[0].clone(),
                    by: s,
                }
            }
            ("Mul", Val::Const(c), Val::Node { idx, .. }) => {
                let s = scalar(&c).ok_or_else(unsupported)?;
                Part::Scaled {
                    x: idx,
                    name: n.input[1].clone(),
                    by: s,
                }
            }
            // a scale on Q or K split into heads, or on the scores: Mul either way round, Div
            // by the constant
            (
                _,
                Val::Part(Part::Heads {
                    x,
                    heads,
                    order,
                    scale,
                    merged,
                }),
                Val::Const(c),
            )
            | (
                "Mul",
                Val::Const(c),
                Val::Part(Part::Heads {
                    x,
                    heads,
                    order,
                    scale,
                    merged,
                }),
            ) => {
                let s = scalar(&c).filter(|s| *s != 0.0).ok_or_else(unsupported)?;
                let scale = if op == "Div" { scale / s } else { scale * s };
                Part::Heads {
                    x,
                    heads,
                    order,
                    scale,
                    merged,
                }
            }
            (_, Val::Part(Part::Scores { q, k, heads, scale }), Val::Const(c))
            | ("Mul", Val::Const(c), Val::Part(Part::Scores { q, k, heads, scale })) => {
                let s = scalar(&c).filter(|s| *s != 0.0).ok_or_else(unsupported)?;
                let scale = if op == "Div" { scale / s } else { scale * s };
                Part::Scores { q, k, heads, scale }
            }
            ("Mul", Val::Part(Part::Gelu { x, name, by }), Val::Const(c))
            | ("Mul", Val::Const(c), Val::Part(Part::Gelu { x, name, by })) => {
                let s = scalar(&c).ok_or_else(unsupported)?;
                Part::Gelu {
                    x,
                    name,
                    by: by * s,
                }
            }
            ("Mul", Val::Part(Part::OnePlusErf { x, name, by }), Val::Const(c))
            | ("Mul", Val::Const(c), Val::Part(Part::OnePlusErf { x, name, by })) => {
                let s = scalar(&c).ok_or_else(unsupported)?;
                Part::OnePlusErf {
                    x,
                    name,
                    by: by * s,
                }
            }
            ("Mul", Val::Part(Part::OnePlusErf { x, name, by }), Val::Node { idx, .. })
            | ("Mul", Val::Node { idx, .. }, Val::Part(Part::OnePlusErf { x, name, by }))
                if idx == x =>
            {
                Part::Gelu { x, name, by }
            }
            (
                "Mul",
                Val::Part(Part::OnePlusErf { x, name, by: b1 }),
                Val::Part(Part::Scaled { x: y, by, .. }),
            )
            | (
                "Mul",
                Val::Part(Part::Scaled { x: y, by, .. }),
                Val::Part(Part::OnePlusErf { x, name, by: b1 }),
            ) if x == y => Part::Gelu {
                x,
                name,
                by: by * b1,
            },
            _ => return Err(unsupported()),
        };
        if let Part::Gelu { x, name, by } = &part {
            if close(*by, 0.5) {
                // complete: x is read by the division inside erf and by this product only
                let sole = self.uses.get(name).copied().unwrap_or(0) == 2;
                return self.act_on(n, *x, "gelu_erf", sole);
            }
        }
        self.bind(n, Val::Part(part))
    }

    /// `Erf` of `x / √2`.
    pub(crate) fn erf(&mut self, n: &NodeProto) -> R<()> {
        match self.input(n, 0)?.clone() {
            Val::Part(Part::Scaled { x, name, by })
                if close(by, std::f32::consts::FRAC_1_SQRT_2) =>
            {
                self.bind(n, Val::Part(Part::Erf { x, name }))
            }
            _ => Err(format!(
                "{}: Erf is supported only as the exact GELU's erf(x / √2)",
                at(n)
            )),
        }
    }

    /// A constant added to a part: `1 + erf(x / √2)`.
    pub(crate) fn part_add(&mut self, n: &NodeProto, p: Part, c: Const) -> R<()> {
        match p {
            // an attention mask that masks nothing (built from shapes, without a mask input)
            p @ Part::Scores { .. } if (0..c.len()).all(|k| float_at(&c, k) == 0.0) => {
                self.bind(n, Val::Part(p))
            }
            Part::Scores { .. } => Err(format!(
                "{}: an attention mask that masks positions: not supported (every position \
                 attends to every other)",
                at(n)
            )),
            Part::Erf { x, name } if scalar(&c) == Some(1.0) => {
                self.bind(n, Val::Part(Part::OnePlusErf { x, name, by: 1.0 }))
            }
            p => Err(format!("{}: adds a constant to {}", at(n), p.what())),
        }
    }

    /// ONNX's `Gelu` (opset 20): exact, or the tanh approximation.
    pub(crate) fn gelu(&mut self, n: &NodeProto) -> R<()> {
        match attr_s(n, "approximate", "none").as_str() {
            "none" => self.act(n, "gelu_erf"),
            "tanh" => self.act(n, "gelu"),
            other => Err(format!("{}: approximate = {other}", at(n))),
        }
    }

    /// A `Reshape` of our node `idx` to `[batch, rows, heads, head]`: its rows split into heads.
    pub(crate) fn split_heads(&self, idx: usize, shape: &[usize], target: &[i64]) -> Option<Part> {
        let (&[s, d], Some(rows)) = (shape, self.seq) else {
            return None;
        };
        let [b, t, h, dh] = *target else {
            return None;
        };
        // one of the heads and the head width may be -1: inferred from the width
        let d64 = d as i64;
        let (h, dh) = match (h, dh) {
            (-1, dh) if dh > 0 && d64 % dh == 0 => (d64 / dh, dh),
            (h, -1) if h > 0 && d64 % h == 0 => (h, d64 / h),
            hd => hd,
        };
        let fits = (b == -1 || b == 0 || b == 1)
            && (t == s as i64 || t == 0 || t == -1)
            && s == rows
            && h > 0
            && dh > 0
            && h * dh == d64;
        fits.then_some(Part::Heads {
            x: idx,
            heads: h as usize,
            order: ROWS_HEADS,
            scale: 1.0,
            merged: false,
        })
    }

    /// `Transpose` of heads or of an attention context (the batch axis stays first).
    pub(crate) fn transpose(&mut self, n: &NodeProto) -> R<()> {
        let perm = super::proto::attr_ints(n, "perm");
        let reorder = |order: [u8; 3]| -> R<[u8; 3]> {
            let mut axes = perm.clone();
            axes.sort_unstable();
            match perm[..] {
                [0, a, b, c] if axes == [0, 1, 2, 3] => {
                    Ok([a, b, c].map(|v| order[v as usize - 1]))
                }
                _ => Err(format!(
                    "{}: perm = {perm:?}: the batch axis must stay first, the other three permuted",
                    at(n)
                )),
            }
        };
        let part = match self.input(n, 0)?.clone() {
            Val::Part(Part::Heads {
                x,
                heads,
                order,
                scale,
                merged: false,
            }) => Part::Heads {
                x,
                heads,
                order: reorder(order)?,
                scale,
                merged: false,
            },
            Val::Part(Part::Heads {
                x,
                heads,
                order,
                scale,
                merged: true,
            }) if perm == [0, 2, 1] => Part::Heads {
                x,
                heads,
                order: [order[0], order[2], order[1]],
                scale,
                merged: true,
            },
            Val::Part(Part::Context {
                q,
                k,
                v,
                heads,
                scale,
                order,
            }) => Part::Context {
                q,
                k,
                v,
                heads,
                scale,
                order: reorder(order)?,
            },
            _ => {
                return Err(format!(
                    "{}: Transpose is supported only inside a self-attention pattern",
                    at(n)
                ))
            }
        };
        self.bind(n, Val::Part(part))
    }

    /// `MatMul` inside attention: Q by Kᵀ, then the probabilities by V.
    pub(crate) fn part_matmul(&mut self, n: &NodeProto, a: Part, b: Part) -> R<()> {
        let part = match (a, b) {
            (
                Part::Heads {
                    x: q,
                    heads,
                    order: HEADS_ROWS,
                    scale: sq,
                    merged: false,
                },
                Part::Heads {
                    x: k,
                    heads: hk,
                    order: HEADS_WITHIN_ROWS,
                    scale: sk,
                    merged: false,
                },
            ) if heads == hk => Part::Scores {
                q,
                k,
                heads,
                scale: sq * sk,
            },
            (
                Part::Probs { q, k, heads, scale },
                Part::Heads {
                    x: v,
                    heads: hv,
                    order: HEADS_ROWS,
                    scale: 1.0,
                    merged: false,
                },
            ) if heads == hv => Part::Context {
                q,
                k,
                v,
                heads,
                scale,
                order: HEADS_ROWS,
            },
            (a, b) => {
                return Err(format!(
                    "{}: MatMul of {} by {}: not the self-attention pattern (Q as [batch, heads, \
                     seq, head] by K as [batch, heads, head, seq], then by V)",
                    at(n),
                    a.what(),
                    b.what()
                ))
            }
        };
        self.bind(n, Val::Part(part))
    }

    /// `Softmax` of attention scores over the keys.
    pub(crate) fn part_softmax(&mut self, n: &NodeProto, p: Part) -> R<()> {
        match p {
            Part::Scores { q, k, heads, scale } if matches!(attr_i(n, "axis", -1), -1 | 3) => {
                self.bind(n, Val::Part(Part::Probs { q, k, heads, scale }))
            }
            p => Err(format!(
                "{}: Softmax of {} over another axis",
                at(n),
                p.what()
            )),
        }
    }

    /// `Reshape` of an attention context back to `[batch, rows, width]`: the pattern is
    /// complete; it becomes `concat` of Q|K|V and `attention`.
    pub(crate) fn part_reshape(&mut self, n: &NodeProto, p: Part) -> R<()> {
        if let Part::Heads { .. } = p {
            return self.heads_reshape(n, p);
        }
        let Part::Context {
            q,
            k,
            v,
            heads,
            scale,
            order: ROWS_HEADS,
        } = p
        else {
            return Err(format!("{}: Reshape of {}", at(n), p.what()));
        };
        let shape = self.shapes[q].clone();
        let target = self.const_input(n, 1)?.i;
        let (s, d) = (shape[0] as i64, shape[1] as i64);
        let ok = matches!(target[..], [b, t, w] if (b == -1 || b == 0 || b == 1)
            && (t == s || t == 0 || t == -1) && (w == d || w == -1));
        if !ok {
            return Err(format!(
                "{}: shape {target:?}: expected [batch, {s}, {d}]",
                at(n)
            ));
        }
        let dh = (d as usize / heads) as f32;
        if !close(scale * dh.sqrt(), 1.0) {
            return Err(format!(
                "{}: attention scores scaled by {scale}: our attention scales by 1/√{dh}",
                at(n)
            ));
        }
        if self.shapes[k] != shape || self.shapes[v] != shape {
            return Err(format!("{}: Q, K and V differ in shape", at(n)));
        }
        let names = [q, k, v].map(|i| self.nodes[i].name.clone());
        let mut cat = self.new_node(n, "concat", names.to_vec(), Kind::Other);
        cat.origin = format!("{} (Q|K|V)", at(n));
        self.push_node(cat, vec![shape[0], 3 * shape[1]]);
        let qkv = self
            .nodes
            .last()
            .map(|e| e.name.clone())
            .unwrap_or_default();
        let mut e = self.new_node(n, "attention", vec![qkv], Kind::Other);
        e.fields = vec![("mode", "self".into()), ("heads", (heads as i64).into())];
        self.emit(n, e, shape)
    }

    /// The per-request sizes of heads' three axes, in their order.
    pub(crate) fn heads_dims(&self, x: usize, heads: usize, order: [u8; 3]) -> [usize; 3] {
        let (rows, width) = (self.shapes[x][0], self.shapes[x][1]);
        let size = [rows, heads, width / heads.max(1)];
        order.map(|o| size[o as usize])
    }

    /// `Reshape` of heads: merging the batch with the first axis (`[-1, a, b]`: the merged
    /// axis can only be inferred, the batch varying), or undoing that (`[batch, h, a, b]`, the
    /// batch -1, as `Shape` gives it, or 1).
    fn heads_reshape(&mut self, n: &NodeProto, p: Part) -> R<()> {
        let Part::Heads {
            x,
            heads,
            order,
            scale,
            merged,
        } = p
        else {
            return Err(format!("{}: Reshape of {}", at(n), p.what()));
        };
        let target = self.const_input(n, 1)?.i;
        let [a, b, c] = self.heads_dims(x, heads, order).map(|d| d as i64);
        let fits = match (merged, &target[..]) {
            (false, [-1, t1, t2]) => *t1 == b && *t2 == c,
            (true, [-1 | 1, t1, t2, t3]) => *t1 == a && *t2 == b && *t3 == c,
            _ => false,
        };
        if !fits {
            return Err(format!(
                "{}: shape {target:?} of attention heads of {:?}",
                at(n),
                [a, b, c]
            ));
        }
        self.bind(
            n,
            Val::Part(Part::Heads {
                x,
                heads,
                order,
                scale,
                merged: !merged,
            }),
        )
    }

    /// `Where(IsNaN(p), 0, p)` after a softmax (`p` cannot be NaN here: nothing is masked), or
    /// a `Where` of constants.
    pub(crate) fn where_(&mut self, n: &NodeProto) -> R<()> {
        match (self.input(n, 0)?.clone(), self.input(n, 1)?.clone()) {
            (Val::Const(_), Val::Const(_)) if matches!(self.input(n, 2)?, Val::Const(_)) => {
                self.fold(n)
            }
            (Val::Part(Part::NanOf { of }), Val::Const(z))
                if scalar(&z) == Some(0.0) && n.input.get(2) == Some(&of) =>
            {
                let v = self.input(n, 2)?.clone();
                self.bind(n, v)
            }
            _ => Err(format!(
                "{}: Where is supported on constants, and as Where(IsNaN(p), 0, p) after an \
                 attention softmax",
                at(n)
            )),
        }
    }

    /// `IsNaN` of attention probabilities (see [`Translator::where_`]).
    pub(crate) fn is_nan(&mut self, n: &NodeProto) -> R<()> {
        match self.input(n, 0)? {
            Val::Part(Part::Probs { .. }) => {
                let of = n.input[0].clone();
                self.bind(n, Val::Part(Part::NanOf { of }))
            }
            _ => Err(format!(
                "{}: IsNaN is supported after an attention softmax only",
                at(n)
            )),
        }
    }
}

#[cfg(test)]
#[path = "patterns_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "patterns_attention_tests.rs"]
mod attention_tests;

#[cfg(test)]
#[path = "patterns_attention_refusal_tests.rs"]
mod attention_refusal_tests;
