//! The integer, boolean and small float computations a decoder export builds from shapes — the
//! causal mask as `transformers` builds it (`Range`s of positions compared, `Expand`ed,
//! `Where` 0 or the most negative float), positions — evaluated at given input shapes, so that
//! a mask can be checked to be causal whatever its spelling. Every value is a dense tensor of
//! f64 (integers and booleans exactly); the ops are ONNX's, with numpy broadcasting.

use super::blocks::Graph;
use super::{at, R};
use crate::graph::onnx::proto::{attr_i, attr_ints};
use std::collections::HashMap;

/// A dense tensor.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct T {
    pub(super) dims: Vec<usize>,
    pub(super) v: Vec<f64>,
}

/// Evaluates the tensors of `g` that depend only on shapes and constants, the graph's inputs
/// having the shapes in `inputs` (the token embedding's output takes its index's shape and the
/// table's width).
pub(super) struct Eval<'a, 'g> {
    g: &'a Graph<'g>,
    inputs: HashMap<String, Vec<usize>>,
    known: HashMap<String, T>,
}

fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// numpy's broadcast of two shapes.
fn broadcast(a: &[usize], b: &[usize]) -> R<Vec<usize>> {
    let n = a.len().max(b.len());
    let get = |d: &[usize], i: usize| {
        let off = n - d.len();
        if i < off {
            1
        } else {
            d[i - off]
        }
    };
    (0..n)
        .map(|i| match (get(a, i), get(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => Err(format!(
                "shapes {a:?} and {b:?} do not broadcast ({x} against {y})"
            )),
        })
        .collect()
}

impl T {
    /// The value at `idx` of the broadcast shape `to`.
    fn at_broadcast(&self, idx: &[usize], to: &[usize]) -> f64 {
        let off = to.len() - self.dims.len();
        let st = strides(&self.dims);
        let mut k = 0;
        for (j, &d) in self.dims.iter().enumerate() {
            k += if d == 1 { 0 } else { idx[off + j] * st[j] };
        }
        self.v[k]
    }

    /// `f` elementwise over the broadcast of `ts`.
    fn map(ts: &[&T], f: impl Fn(&[f64]) -> f64) -> R<T> {
        let mut dims: Vec<usize> = Vec::new();
        for t in ts {
            dims = broadcast(&dims, &t.dims)?;
        }
        let n: usize = dims.iter().product();
        let st = strides(&dims);
        let mut idx = vec![0; dims.len()];
        let mut v = Vec::with_capacity(n);
        let mut args = vec![0.0; ts.len()];
        for e in 0..n {
            let mut r = e;
            for (j, s) in st.iter().enumerate() {
                idx[j] = r / s;
                r %= s;
            }
            for (a, t) in args.iter_mut().zip(ts) {
                *a = t.at_broadcast(&idx, &dims);
            }
            v.push(f(&args));
        }
        Ok(T { dims, v })
    }

    fn ints(&self) -> Vec<i64> {
        self.v.iter().map(|&x| x as i64).collect()
    }
}

/// An axis (negative from the end) of a tensor of `rank` axes.
fn axis(a: i64, rank: usize) -> R<usize> {
    let v = if a < 0 { a + rank as i64 } else { a };
    usize::try_from(v)
        .ok()
        .filter(|&v| v < rank)
        .ok_or_else(|| format!("axis {a} outside rank {rank}"))
}

impl<'a, 'g> Eval<'a, 'g> {
    pub(super) fn new(g: &'a Graph<'g>, inputs: HashMap<String, Vec<usize>>) -> Self {
        Eval {
            g,
            inputs,
            known: HashMap::new(),
        }
    }

    /// A tensor's shape: a graph input's, the token embedding's, a computed tensor's, or one
    /// inferred from its producer's inputs (copies, reshapes, gathers from a table,
    /// elementwise ops and layer norms over the hidden states).
    fn shape(&mut self, x: &str) -> R<Vec<usize>> {
        if let Some(d) = self.inputs.get(x) {
            return Ok(d.clone());
        }
        let computed = self.value(x);
        let Some(n) = self.g.producer.get(x).map(|&i| self.g.node(i)) else {
            return computed.map(|t| t.dims);
        };
        if let Ok(t) = computed {
            return Ok(t.dims);
        }
        match n.op_type() {
            "Identity" | "Cast" | "Concat" if n.input.len() == 1 => self.shape(&n.input[0]),
            "Reshape" => {
                let from = self.shape(&n.input[0])?;
                let mut to = self.value(&n.input[1])?.ints();
                for (j, d) in to.iter_mut().enumerate() {
                    if *d == 0 {
                        *d = from.get(j).copied().unwrap_or(1) as i64;
                    }
                }
                let total: usize = from.iter().product();
                let known: i64 = to.iter().filter(|&&d| d != -1).product();
                if let Some(d) = to.iter_mut().find(|d| **d == -1) {
                    *d = total as i64 / known.max(1);
                }
                Ok(to.iter().map(|&d| d.max(0) as usize).collect())
            }
            "Gather" if attr_i(n, "axis", 0) == 0 => {
                let table = self
                    .g
                    .constant(&n.input[0])
                    .ok_or_else(|| format!("{}: a gather from a computed table", at(n)))?;
                let mut d = self.shape(&n.input[1])?;
                d.extend_from_slice(&table.dims[1..]);
                Ok(d)
            }
            "LayerNormalization" => self.shape(&n.input[0]),
            "Add" | "Sub" | "Mul" | "Div" => {
                let (a, b) = (self.shape(&n.input[0])?, self.shape(&n.input[1])?);
                broadcast(&a, &b)
            }
            op => Err(format!("{}: the shape of a {op} is not inferred", at(n))),
        }
    }

    /// The value of tensor `x`.
    pub(super) fn value(&mut self, x: &str) -> R<T> {
        if let Some(t) = self.known.get(x) {
            return Ok(t.clone());
        }
        if let Some(c) = self.g.constant(x) {
            let v: Vec<f64> = if c.f.len() == c.len() {
                c.f.iter().map(|&f| f64::from(f)).collect()
            } else {
                c.i.iter().map(|&i| i as f64).collect()
            };
            return Ok(T { dims: c.dims, v });
        }
        let n = self
            .g
            .producer
            .get(x)
            .map(|&i| self.g.node(i))
            .ok_or_else(|| format!("'{x}' is a graph input, not a shape computation"))?;
        let arg = |s: &mut Self, j: usize| -> R<T> {
            let name = n
                .input
                .get(j)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("{}: input {j} missing", at(n)))?;
            s.value(name)
        };
        let e = |m: String| format!("{}: {m}", at(n));
        let out = match n.op_type() {
            "Shape" => {
                let d = self.shape(&n.input[0])?;
                let r = d.len() as i64;
                let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let (s, t) = (clamp(attr_i(n, "start", 0)), clamp(attr_i(n, "end", r)));
                let v: Vec<f64> = d[s..t.max(s)].iter().map(|&x| x as f64).collect();
                T {
                    dims: vec![v.len()],
                    v,
                }
            }
            "Identity" | "Cast" => {
                let t = arg(self, 0)?;
                // casts to integers truncate, to booleans test for non-zero
                match attr_i(n, "to", 1) {
                    9 => T {
                        v: t.v.iter().map(|&x| f64::from(u8::from(x != 0.0))).collect(),
                        ..t
                    },
                    2..=7 | 12 | 13 => T {
                        v: t.v.iter().map(|x| x.trunc()).collect(),
                        ..t
                    },
                    _ => t,
                }
            }
            "Unsqueeze" | "Squeeze" => {
                let t = arg(self, 0)?;
                let axes = match n.input.get(1).filter(|s| !s.is_empty()) {
                    Some(_) => arg(self, 1)?.ints(),
                    None => attr_ints(n, "axes"),
                };
                let mut dims = t.dims.clone();
                if n.op_type() == "Unsqueeze" {
                    let rank = dims.len() + axes.len();
                    let mut at: Vec<usize> = axes
                        .iter()
                        .map(|&a| axis(a, rank))
                        .collect::<R<_>>()
                        .map_err(e)?;
                    at.sort_unstable();
                    for a in at {
                        dims.insert(a, 1);
                    }
                } else {
                    let rank = dims.len();
                    let drop: Vec<usize> = if axes.is_empty() {
                        (0..rank).filter(|&i| dims[i] == 1).collect()
                    } else {
                        axes.iter()
                            .map(|&a| axis(a, rank))
                            .collect::<R<_>>()
                            .map_err(e)?
                    };
                    dims = dims
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !drop.contains(i))
                        .map(|(_, &d)| d)
                        .collect();
                }
                T { dims, v: t.v }
            }
            "Concat" => {
                let parts = (0..n.input.len())
                    .map(|j| arg(self, j))
                    .collect::<R<Vec<_>>>()?;
                let rank = parts[0].dims.len().max(1);
                let ax = axis(attr_i(n, "axis", 0), rank).map_err(e)?;
                let parts: Vec<T> = parts
                    .into_iter()
                    .map(|p| {
                        if p.dims.is_empty() {
                            T {
                                dims: vec![1],
                                v: p.v,
                            }
                        } else {
                            p
                        }
                    })
                    .collect();
                let outer: usize = parts[0].dims[..ax].iter().product();
                let mut dims = parts[0].dims.clone();
                dims[ax] = parts.iter().map(|p| p.dims[ax]).sum();
                let mut v = Vec::new();
                for o in 0..outer {
                    for p in &parts {
                        let inner: usize = p.dims[ax..].iter().product();
                        v.extend_from_slice(&p.v[o * inner..(o + 1) * inner]);
                    }
                }
                T { dims, v }
            }
            "Gather" => {
                let (data, idx) = (arg(self, 0)?, arg(self, 1)?);
                let ax = axis(attr_i(n, "axis", 0), data.dims.len()).map_err(e)?;
                let outer: usize = data.dims[..ax].iter().product();
                let inner: usize = data.dims[ax + 1..].iter().product();
                let mut v = Vec::new();
                for o in 0..outer {
                    for &i in &idx.ints() {
                        // (negative from the end; outside the axis either way refused)
                        let size = data.dims[ax];
                        let i = if i < 0 { i + size as i64 } else { i };
                        let i = usize::try_from(i)
                            .ok()
                            .filter(|&i| i < size)
                            .ok_or_else(|| e("index out of range".into()))?;
                        let base = (o * size + i) * inner;
                        v.extend_from_slice(&data.v[base..base + inner]);
                    }
                }
                let mut dims = data.dims[..ax].to_vec();
                dims.extend_from_slice(&idx.dims);
                dims.extend_from_slice(&data.dims[ax + 1..]);
                T { dims, v }
            }
            "Range" => {
                let (s, l, d) = (arg(self, 0)?.v[0], arg(self, 1)?.v[0], arg(self, 2)?.v[0]);
                if d == 0.0 {
                    return Err(e("a Range with step 0".into()));
                }
                let count = (((l - s) / d).ceil()).max(0.0) as usize;
                let v: Vec<f64> = (0..count).map(|k| s + k as f64 * d).collect();
                T {
                    dims: vec![count],
                    v,
                }
            }
            "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Less" | "LessOrEqual" | "Greater"
            | "GreaterOrEqual" => {
                let (a, b) = (arg(self, 0)?, arg(self, 1)?);
                let f: fn(f64, f64) -> f64 = match n.op_type() {
                    "Add" => |x, y| x + y,
                    "Sub" => |x, y| x - y,
                    "Mul" => |x, y| x * y,
                    "Div" => |x, y| x / y,
                    "Equal" => |x, y| f64::from(u8::from(x == y)),
                    "Less" => |x, y| f64::from(u8::from(x < y)),
                    "LessOrEqual" => |x, y| f64::from(u8::from(x <= y)),
                    "Greater" => |x, y| f64::from(u8::from(x > y)),
                    _ => |x, y| f64::from(u8::from(x >= y)),
                };
                T::map(&[&a, &b], |z| f(z[0], z[1])).map_err(e)?
            }
            "Where" => {
                let (c, a, b) = (arg(self, 0)?, arg(self, 1)?, arg(self, 2)?);
                T::map(&[&c, &a, &b], |z| if z[0] != 0.0 { z[1] } else { z[2] }).map_err(e)?
            }
            "Expand" => {
                let (t, shape) = (arg(self, 0)?, arg(self, 1)?);
                let to: Vec<usize> = shape.ints().iter().map(|&d| d.max(1) as usize).collect();
                let target = broadcast(&t.dims, &to).map_err(e)?;
                let zero = T {
                    v: vec![0.0; target.iter().product::<usize>()],
                    dims: target,
                };
                T::map(&[&t, &zero], |z| z[0]).map_err(e)?
            }
            "ConstantOfShape" => {
                let shape = arg(self, 0)?;
                let dims: Vec<usize> = shape.ints().iter().map(|&d| d.max(0) as usize).collect();
                let fill = n
                    .attribute
                    .iter()
                    .find(|a| a.name() == "value")
                    .and_then(|a| a.t.as_ref())
                    .and_then(|t| crate::graph::onnx::proto::tensor(t).ok())
                    .map_or(0.0, |c| {
                        c.f.first()
                            .map(|&f| f64::from(f))
                            .or(c.i.first().map(|&i| i as f64))
                            .unwrap_or(0.0)
                    });
                let count = dims.iter().product();
                T {
                    dims,
                    v: vec![fill; count],
                }
            }
            "Reshape" => {
                let (t, shape) = (arg(self, 0)?, arg(self, 1)?);
                let total = t.v.len();
                let mut dims: Vec<i64> = shape.ints();
                for (j, d) in dims.iter_mut().enumerate() {
                    if *d == 0 {
                        *d = *t
                            .dims
                            .get(j)
                            .ok_or_else(|| e("a 0 past the input's rank".into()))?
                            as i64;
                    }
                }
                let known: i64 = dims.iter().filter(|&&d| d != -1).product();
                if let Some(d) = dims.iter_mut().find(|d| **d == -1) {
                    *d = total as i64 / known.max(1);
                }
                T {
                    dims: dims.iter().map(|&d| d as usize).collect(),
                    v: t.v,
                }
            }
            "Slice" => {
                let data = arg(self, 0)?;
                let starts = arg(self, 1)?.ints();
                let ends = arg(self, 2)?.ints();
                let axes = match n.input.get(3).filter(|s| !s.is_empty()) {
                    Some(_) => arg(self, 3)?.ints(),
                    None => (0..starts.len() as i64).collect(),
                };
                let mut dims = data.dims.clone();
                let mut ranges: Vec<(usize, usize)> = dims.iter().map(|&d| (0, d)).collect();
                for ((&s, &en), &a) in starts.iter().zip(&ends).zip(&axes) {
                    let a = axis(a, dims.len()).map_err(e)?;
                    let d = dims[a] as i64;
                    let c = |v: i64| (if v < 0 { v + d } else { v }).clamp(0, d) as usize;
                    ranges[a] = (c(s), c(en).max(c(s)));
                }
                for (d, r) in dims.iter_mut().zip(&ranges) {
                    *d = r.1 - r.0;
                }
                let st = strides(&data.dims);
                let count: usize = dims.iter().product();
                let out_st = strides(&dims);
                let v = (0..count)
                    .map(|k| {
                        let mut src = 0;
                        let mut r = k;
                        for j in 0..dims.len() {
                            let i = r / out_st[j];
                            r %= out_st[j];
                            src += (ranges[j].0 + i) * st[j];
                        }
                        data.v[src]
                    })
                    .collect();
                T { dims, v }
            }
            op => return Err(format!("{}: {op} is not a shape computation", at(n))),
        };
        self.known.insert(x.to_string(), out.clone());
        Ok(out)
    }
}

#[cfg(test)]
#[path = "eval_tests.rs"]
mod tests;
