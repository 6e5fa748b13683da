//! A decoder layer's attention as the export spells it: Q|K|V split and reshaped to the heads,
//! K and V concatenated onto the layer's past (the `present` outputs), the scores scaled by
//! 1/√head and masked by slices of a lower-triangular constant, the softmax, the values, the
//! heads merged back; every step checked, the error naming the node.

use super::blocks::{Graph, InputAxis};
use super::{at, Sizes, R};
use crate::graph::onnx::proto::pb::NodeProto;
use crate::graph::onnx::proto::{attr_i, attr_ints};

impl Graph<'_> {
    /// A layer's attention from its packed Q|K|V `qkv` and its past inputs (`past`: key,
    /// value) to its output before the projection; marks the `present` outputs.
    pub(super) fn attention(&mut self, qkv: &str, past: (&str, &str), s: Sizes) -> R<String> {
        let split = self.reader(qkv, "Split")?;
        let axis = attr_i(split, "axis", 0);
        let sizes = match split.input.get(1).filter(|x| !x.is_empty()) {
            Some(x) => self.constant(x).map(|c| c.i),
            None => Some(attr_ints(split, "split")),
        };
        let equal = sizes.as_deref().is_none_or(|v| v.is_empty())
            || sizes.as_deref() == Some(&[s.width as i64; 3][..]);
        if split.output.len() != 3 || !(axis == 2 || axis == -1) || !equal {
            return Err(format!(
                "{}: Q|K|V split in three equal parts of the last axis is read",
                at(split)
            ));
        }
        let mut heads = Vec::with_capacity(3);
        for part in &split.output {
            let r = self.reader(part, "Reshape")?;
            let tail = self.shape_end(&r.input[1], 2);
            // (the heads given, or -1: the width over the head's)
            let (h, dh) = (s.heads as i64, s.head as i64);
            if tail.as_deref() != Some(&[h, dh][..]) && tail.as_deref() != Some(&[-1, dh][..]) {
                return Err(format!(
                    "{}: a reshape to [.., {}, {}] (the heads) was expected, its shape ends {tail:?}",
                    at(r),
                    s.heads,
                    s.head
                ));
            }
            let t = self.reader(&r.output[0], "Transpose")?;
            want_perm(t, &[0, 2, 1, 3])?;
            heads.push(t.output[0].clone());
        }
        let (q, k, v) = (&heads[0], &heads[1], &heads[2]);
        let mut present = Vec::new();
        for (x, p) in [(k, past.0), (v, past.1)] {
            let c = self.reader(x, "Concat")?;
            let ax = attr_i(c, "axis", 0);
            if c.input.len() != 2 || !self.is_or_copies(&c.input[0], p) || !(ax == 2 || ax == -2) {
                return Err(format!(
                    "{}: the past '{p}' then this step's, along the sequence, was expected",
                    at(c)
                ));
            }
            if let Some(&i) = self.producer.get(c.input[0].as_str()) {
                // the past's copy
                self.seen[i] = true;
            }
            if !self.g.output.iter().any(|o| o.name() == c.output[0]) {
                return Err(format!(
                    "{}: its result (the present) is not a graph output",
                    at(c)
                ));
            }
            present.push(c.output[0].clone());
        }
        let kt = self.reader(&present[0], "Transpose")?;
        want_perm(kt, &[0, 1, 3, 2])?;
        let scores = self.reader(q, "MatMul")?;
        if scores.input != [q.clone(), kt.output[0].clone()] {
            return Err(format!("{}: Q times K transposed was expected", at(scores)));
        }
        let scale = self.reader_of(&scores.output[0], &["Div", "Mul"])?;
        let c = self
            .constant(&scale.input[1])
            .filter(|c| c.len() == 1 && c.f.len() == 1)
            .ok_or_else(|| format!("{}: a scale by a constant was expected", at(scale)))?;
        let by = if scale.op_type() == "Div" {
            1.0 / c.f[0]
        } else {
            c.f[0]
        };
        let want = 1.0 / (s.head as f32).sqrt();
        if (by - want).abs() > 1e-5 * want {
            return Err(format!(
                "{}: scales the scores by {by}, not 1/sqrt({}) = {want}",
                at(scale),
                s.head
            ));
        }
        // the causal mask: the scores where a lower-triangular constant's slices hold
        // (`Where`), or plus a computed mask of zeros and large negatives (`Add`)
        let w = self.reader_of(&scale.output[0], &["Where", "Add"])?;
        if w.op_type() == "Where" {
            let masked = self
                .constant(&w.input[2])
                .filter(|c| c.len() == 1 && c.f.len() == 1);
            if w.input[1] != scale.output[0] || masked.is_none_or(|c| c.f[0] > -1e4) {
                return Err(format!(
                    "{}: the scores where the mask holds, a large negative value elsewhere",
                    at(w)
                ));
            }
            self.causal_mask(&w.input[0], w)?;
        } else {
            let m = if w.input[0] == scale.output[0] {
                &w.input[1]
            } else {
                &w.input[0]
            };
            self.additive_causal_mask(m, w, s)?;
        }
        let sm = self.reader(&w.output[0], "Softmax")?;
        let axis = attr_i(sm, "axis", -1);
        if axis != -1 && axis != 3 {
            return Err(format!(
                "{}: over the last axis (the keys) was expected",
                at(sm)
            ));
        }
        let weights = self.through_copies(&sm.output[0]);
        let ctx = self.reader(&weights, "MatMul")?;
        if ctx.input.get(1) != Some(&present[1]) {
            return Err(format!(
                "{}: the weights times V (the present values) was expected",
                at(ctx)
            ));
        }
        let back = self.reader(&ctx.output[0], "Transpose")?;
        want_perm(back, &[0, 2, 1, 3])?;
        let merged = self.reader(&back.output[0], "Reshape")?;
        // (the width, or -1: the heads times the head)
        let tail = self.shape_end(&merged.input[1], 1);
        if tail.as_deref() != Some(&[s.width as i64][..]) && tail.as_deref() != Some(&[-1][..]) {
            return Err(format!(
                "{}: a reshape to [.., {}] was expected",
                at(merged),
                s.width
            ));
        }
        Ok(merged.output[0].clone())
    }

    /// The last `k` entries of a reshape's shape: of a constant, or of a `Concat` whose last
    /// inputs are constants (the dimensions before them computed from shapes).
    pub(super) fn shape_end(&self, shape: &str, k: usize) -> Option<Vec<i64>> {
        let last = |v: &[i64]| (v.len() >= k).then(|| v[v.len() - k..].to_vec());
        if let Some(c) = self.constant(shape) {
            return last(&c.i);
        }
        let n = self.node(*self.producer.get(shape)?);
        if n.op_type() != "Concat" {
            return None;
        }
        let mut ends: Vec<i64> = Vec::new();
        for x in n.input.iter().rev() {
            let c = self.constant(x)?;
            ends.splice(0..0, c.i.iter().copied());
            if ends.len() >= k {
                break;
            }
        }
        last(&ends)
    }

    /// True when `x` is `p`, or a copy of it (`Identity`, or a `Concat` of `p` alone).
    fn is_or_copies(&self, x: &str, p: &str) -> bool {
        x == p
            || self
                .producer
                .get(x)
                .map(|&i| self.node(i))
                .is_some_and(|n| {
                    matches!(n.op_type(), "Identity" | "Concat")
                        && n.input.len() == 1
                        && n.input[0] == p
                })
    }

    /// A mask added to the scores, computed from shapes (as `transformers` builds it from
    /// positions): evaluated for a prompt (no past, 5 tokens) and a step after a past (3 past,
    /// 2 new), it must be 0 where a query row may see a key — the keys up to its own
    /// position — and a large negative value elsewhere.
    fn additive_causal_mask(&self, m: &str, w: &NodeProto, s: Sizes) -> R<()> {
        for (past, seq) in [(0usize, 5usize), (3, 2)] {
            let mut shapes = std::collections::HashMap::new();
            for (name, dims) in &self.input_shapes {
                let d: Vec<usize> = dims
                    .iter()
                    .map(|d| match d {
                        InputAxis::Batch => 1,
                        InputAxis::Seq => seq,
                        InputAxis::Past => past,
                        InputAxis::Fixed(n) => *n,
                    })
                    .collect();
                shapes.insert(name.clone(), d);
            }
            if let Some(e) = &self.embedded {
                shapes.insert(e.clone(), vec![1, seq, s.width]);
            }
            let t = super::eval::Eval::new(self, shapes)
                .value(m)
                .map_err(|e| format!("{}: the mask added to the scores: {e}", at(w)))?;
            let keys = past + seq;
            let n = t.dims.len();
            let fits = n >= 2
                && t.dims[n - 2] == seq
                && t.dims[n - 1] == keys
                && t.dims[..n - 2].iter().all(|&d| d == 1);
            let causal = (0..seq * keys).all(|e| {
                let (i, j) = (e / keys, e % keys);
                let v = t.v.get(e).copied().unwrap_or(f64::NAN);
                if j <= past + i {
                    v == 0.0
                } else {
                    v <= -1e4
                }
            });
            if !(fits && causal) {
                return Err(format!(
                    "{}: the mask added to the scores is not causal for {seq} tokens after {past} (shape {:?})",
                    at(w),
                    t.dims
                ));
            }
        }
        Ok(())
    }

    /// The condition of a masking `Where`: slices (of any computed bounds) of one constant
    /// that is lower-triangular over its last two axes, the causal mask.
    fn causal_mask(&self, cond: &str, w: &NodeProto) -> R<()> {
        let mut x = cond.to_string();
        loop {
            if let Some(c) = self.constant(&x) {
                let n = c.dims.len();
                let (rows, cols) = (c.dims.get(n.wrapping_sub(2)), c.dims.last());
                let (Some(&rows), Some(&cols)) = (rows, cols) else {
                    return Err(format!("{}: the mask '{x}' is not a matrix", at(w)));
                };
                let v = if c.i.len() == c.len() {
                    c.i.iter().map(|&v| v != 0).collect::<Vec<_>>()
                } else {
                    c.f.iter().map(|&v| v != 0.0).collect()
                };
                // (an empty mask is none: and no chunks of 0 values)
                let tril = !v.is_empty()
                    && v.chunks(rows * cols)
                        .all(|m| (0..rows * cols).all(|e| m[e] == (e % cols <= e / cols)));
                return if tril {
                    Ok(())
                } else {
                    Err(format!(
                        "{}: the mask '{x}' is not lower-triangular (causal)",
                        at(w)
                    ))
                };
            }
            let p = self
                .producer
                .get(x.as_str())
                .map(|&i| self.node(i))
                .filter(|n| n.op_type() == "Slice")
                .ok_or_else(|| {
                    format!(
                        "{}: the mask '{x}' is neither a constant nor a slice of one",
                        at(w)
                    )
                })?;
            x = p.input[0].clone();
        }
    }
}

fn want_perm(n: &NodeProto, perm: &[i64]) -> R<()> {
    let got = attr_ints(n, "perm");
    if got != perm {
        return Err(format!(
            "{}: perm {got:?} where {perm:?} was expected",
            at(n)
        ));
    }
    Ok(())
}
