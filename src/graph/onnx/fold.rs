//! Constant subgraphs, computed at import: what exporters build to describe shapes (`Shape`,
//! `Gather`, `Unsqueeze`, `Concat` feeding a `Reshape`) and index buffers (`Slice` of
//! position ids), plus arithmetic between constants. A model's shapes are static once its
//! named axes are fixed, except the batch axis, which `Shape` reports as [`BATCH`] — a
//! `Reshape` reads that as "the batch", as it reads -1 there.

use super::proto::pb::NodeProto;
use super::proto::{attr_i, attr_ints, Const};
use super::translate::{at, Translator, Val, R};

/// What `Shape` gives for the batch axis (-1: "whatever it is", as `Reshape` reads it).
pub(crate) const BATCH: i64 = -1;

/// An axis attribute or input (negative from the end) as an index into `rank` axes.
fn axis(a: i64, rank: usize) -> R<usize> {
    let r = rank as i64;
    let v = if a < 0 { a + r } else { a };
    if (0..r).contains(&v) {
        Ok(v as usize)
    } else {
        Err(format!("axis {a} is outside a tensor of rank {rank}"))
    }
}

/// The `k`th value of `c` as a float, whether it holds floats or integers.
pub(crate) fn float_at(c: &Const, k: usize) -> f32 {
    c.f.get(k).copied().unwrap_or_else(|| c.i[k] as f32)
}

fn ints(dims: Vec<usize>, i: Vec<i64>) -> Const {
    Const {
        dims,
        f: Vec::new(),
        i,
    }
}

impl Translator {
    /// `Shape`, `Unsqueeze`, `Squeeze`, `Concat`, `Slice`, `Cast` of constants (and `Shape` of
    /// anything with a static shape).
    pub(crate) fn fold(&mut self, n: &NodeProto) -> R<()> {
        let ctx = |e: String| format!("{}: {e}", at(n));
        let c = match n.op_type() {
            "Shape" => self.shape_of(n)?,
            "Unsqueeze" | "Squeeze" => {
                let c = self.const_input(n, 0)?;
                let axes = match n.input.get(1).filter(|s| !s.is_empty()) {
                    Some(_) => self.const_input(n, 1)?.i,
                    None => attr_ints(n, "axes"),
                };
                squeeze(c, &axes, n.op_type() == "Unsqueeze").map_err(ctx)?
            }
            "Concat" => {
                let parts = (0..n.input.len())
                    .map(|i| self.const_input(n, i))
                    .collect::<R<Vec<_>>>()
                    .map_err(|_| format!("{}: only constants (shapes) are concatenated", at(n)))?;
                concat(&parts, attr_i(n, "axis", 0)).map_err(ctx)?
            }
            "Slice" => {
                let data = self.const_input(n, 0)?;
                let get = |i: usize| -> R<Option<Vec<i64>>> {
                    match n.input.get(i).filter(|s| !s.is_empty()) {
                        Some(_) => Ok(Some(self.const_input(n, i)?.i)),
                        None => Ok(None),
                    }
                };
                let (starts, ends) = (get(1)?.unwrap_or_default(), get(2)?.unwrap_or_default());
                slice(data, &starts, &ends, get(3)?, get(4)?).map_err(ctx)?
            }
            "Cast" => cast(self.const_input(n, 0)?, attr_i(n, "to", 0)).map_err(ctx)?,
            "Range" => {
                let [a, b, d] = [0, 1, 2].map(|i| self.const_input(n, i));
                range(a?, b?, d?).map_err(ctx)?
            }
            "Expand" => {
                let (c, shape) = (self.const_input(n, 0)?, self.const_input(n, 1)?.i);
                // the batch axis (-1 from `Shape`) broadcasts as 1: one request
                let to: Vec<usize> = shape.iter().map(|&d| d.max(1) as usize).collect();
                let dims = broadcast(&[&c.dims, &to]).map_err(ctx)?;
                gather_broadcast(&c, &dims)
            }
            "Where" => {
                let [c, x, y] = [0, 1, 2].map(|i| self.const_input(n, i));
                let (c, x, y) = (c?, x?, y?);
                let dims = broadcast(&[&c.dims, &x.dims, &y.dims]).map_err(ctx)?;
                let (c, x, y) = (
                    gather_broadcast(&c, &dims),
                    gather_broadcast(&x, &dims),
                    gather_broadcast(&y, &dims),
                );
                let pick = |k: usize| {
                    c.i.get(k)
                        .map_or(c.f.get(k).is_some_and(|v| *v != 0.0), |v| *v != 0)
                };
                if x.f.is_empty() && y.f.is_empty() {
                    let i = (0..c.len())
                        .map(|k| if pick(k) { x.i[k] } else { y.i[k] })
                        .collect();
                    ints(dims, i)
                } else {
                    let f = (0..c.len())
                        .map(|k| {
                            if pick(k) {
                                float_at(&x, k)
                            } else {
                                float_at(&y, k)
                            }
                        })
                        .collect();
                    Const {
                        dims,
                        f,
                        i: Vec::new(),
                    }
                }
            }
            "Equal" | "Greater" | "GreaterOrEqual" | "Less" | "LessOrEqual" => {
                let (a, b) = (self.const_input(n, 0)?, self.const_input(n, 1)?);
                let dims = broadcast(&[&a.dims, &b.dims]).map_err(ctx)?;
                let (a, b) = (gather_broadcast(&a, &dims), gather_broadcast(&b, &dims));
                let v = |c: &Const, k: usize| {
                    c.f.get(k).map_or_else(|| c.i[k] as f64, |&f| f64::from(f))
                };
                let op = n.op_type();
                let i = (0..a.len())
                    .map(|k| {
                        let (x, y) = (v(&a, k), v(&b, k));
                        i64::from(match op {
                            "Equal" => x == y,
                            "Greater" => x > y,
                            "GreaterOrEqual" => x >= y,
                            "Less" => x < y,
                            _ => x <= y,
                        })
                    })
                    .collect();
                ints(dims, i)
            }
            "GatherElements" => {
                let (data, idx) = (self.const_input(n, 0)?, self.const_input(n, 1)?);
                gather_elements(&data, &idx, attr_i(n, "axis", 0)).map_err(ctx)?
            }
            other => return Err(format!("{}: {other} is not folded", at(n))),
        };
        self.bind(n, Val::Const(c))
    }

    fn shape_of(&self, n: &NodeProto) -> R<Const> {
        let dims: Vec<i64> = match self.input(n, 0)? {
            Val::Const(c) => c.dims.iter().map(|&d| d as i64).collect(),
            Val::Node { shape, .. } => std::iter::once(BATCH)
                .chain(shape.iter().map(|&d| d as i64))
                .collect(),
            Val::Part(super::patterns::Part::Heads {
                x,
                heads,
                order,
                merged,
                ..
            }) => {
                let d = self.heads_dims(*x, *heads, *order).map(|v| v as i64);
                if *merged {
                    vec![BATCH, d[1], d[2]]
                } else {
                    vec![BATCH, d[0], d[1], d[2]]
                }
            }
            Val::Part(p) => return Err(format!("{}: the shape of {}", at(n), p.what())),
        };
        let r = dims.len() as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let (s, e) = (clamp(attr_i(n, "start", 0)), clamp(attr_i(n, "end", r)));
        let v = dims[s..e.max(s)].to_vec();
        Ok(ints(vec![v.len()], v))
    }

    /// `Reshape` of a constant.
    pub(crate) fn fold_reshape(&mut self, n: &NodeProto, c: Const) -> R<()> {
        let target = self.const_input(n, 1)?.i;
        let len = c.len();
        let mut dims = Vec::with_capacity(target.len());
        let mut infer = None;
        for (k, &t) in target.iter().enumerate() {
            match t {
                0 => dims.push(
                    *c.dims
                        .get(k)
                        .ok_or_else(|| format!("{}: 0 at axis {k} copies nothing", at(n)))?,
                ),
                -1 if infer.is_none() => {
                    infer = Some(k);
                    dims.push(1);
                }
                // a second -1, or any other negative size
                t => dims
                    .push(usize::try_from(t).map_err(|_| format!("{}: shape {target:?}", at(n)))?),
            }
        }
        let known: usize = dims.iter().product();
        if let Some(k) = infer {
            dims[k] = len.checked_div(known).unwrap_or(0);
        }
        if dims.iter().product::<usize>() != len {
            return Err(format!("{}: {len} values do not fit {target:?}", at(n)));
        }
        self.bind(n, Val::Const(Const { dims, ..c }))
    }

    /// `Add`, `Sub`, `Mul` or `Div` of two constants, broadcast as numpy does; floats when
    /// either is, and integers as ONNX Runtime computes them (wrapping, a quotient truncated
    /// toward zero).
    pub(crate) fn fold_binary(&mut self, n: &NodeProto, a: Const, b: Const) -> R<()> {
        let dims = broadcast(&[&a.dims, &b.dims]).map_err(|e| format!("{}: {e}", at(n)))?;
        let (a, b) = (gather_broadcast(&a, &dims), gather_broadcast(&b, &dims));
        let op = n.op_type();
        let c = if !a.f.is_empty() || !b.f.is_empty() {
            let f = (0..a.len())
                .map(|k| {
                    let (x, y) = (float_at(&a, k), float_at(&b, k));
                    match op {
                        "Add" => x + y,
                        "Sub" => x - y,
                        "Mul" => x * y,
                        _ => x / y,
                    }
                })
                .collect();
            Const {
                dims,
                f,
                i: Vec::new(),
            }
        } else {
            let i = (0..a.len())
                .map(|k| {
                    let (x, y) = (a.i[k], b.i[k]);
                    match op {
                        "Add" => Ok(x.wrapping_add(y)),
                        "Sub" => Ok(x.wrapping_sub(y)),
                        "Mul" => Ok(x.wrapping_mul(y)),
                        _ if y == 0 => Err(format!("{}: integer division by zero", at(n))),
                        _ => Ok(x.wrapping_div(y)),
                    }
                })
                .collect::<R<_>>()?;
            ints(dims, i)
        };
        self.bind(n, Val::Const(c))
    }

    /// `Gather` of constants along `axis`.
    pub(crate) fn fold_gather(&mut self, n: &NodeProto, data: Const, idx: Const) -> R<()> {
        let ax = axis(attr_i(n, "axis", 0), data.dims.len().max(1))
            .map_err(|e| format!("{}: {e}", at(n)))?;
        let dim = *data.dims.get(ax).unwrap_or(&1);
        let outer: usize = data.dims[..ax.min(data.dims.len())].iter().product();
        let inner: usize = data.dims.get(ax + 1..).map_or(1, |d| d.iter().product());
        let mut f = Vec::new();
        let mut i = Vec::new();
        for o in 0..outer {
            for &k in &idx.i {
                let k = if k < 0 { k + dim as i64 } else { k };
                if !(0..dim as i64).contains(&k) {
                    return Err(format!("{}: index {k} outside an axis of {dim}", at(n)));
                }
                let at_ = (o * dim + k as usize) * inner;
                if data.f.is_empty() {
                    i.extend_from_slice(&data.i[at_..at_ + inner]);
                } else {
                    f.extend_from_slice(&data.f[at_..at_ + inner]);
                }
            }
        }
        let mut dims = data.dims[..ax.min(data.dims.len())].to_vec();
        dims.extend_from_slice(&idx.dims);
        dims.extend_from_slice(data.dims.get(ax + 1..).unwrap_or(&[]));
        self.bind(n, Val::Const(Const { dims, f, i }))
    }
}

/// The numpy broadcast of `shapes` (aligned at their last axes; an axis of 1 stretches).
fn broadcast(shapes: &[&[usize]]) -> R<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        for (k, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + k];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(format!("shapes {shapes:?} do not broadcast"));
            }
        }
    }
    if out
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .is_none_or(|n| n > 1 << 26)
    {
        return Err(format!(
            "a constant of {out:?} is too large to compute at import"
        ));
    }
    Ok(out)
}

/// `c` stretched to `dims` (which [`broadcast`] gave).
fn gather_broadcast(c: &Const, dims: &[usize]) -> Const {
    let total: usize = dims.iter().product();
    let off = dims.len() - c.dims.len();
    let strides: Vec<usize> = (0..c.dims.len())
        .map(|k| c.dims[k + 1..].iter().product())
        .collect();
    let src = |flat: usize| {
        let (mut rem, mut at) = (flat, 0);
        for k in (0..dims.len()).rev() {
            let x = rem % dims[k];
            rem /= dims[k];
            if k >= off && c.dims[k - off] != 1 {
                at += x * strides[k - off];
            }
        }
        at
    };
    Const {
        dims: dims.to_vec(),
        f: if c.f.is_empty() {
            Vec::new()
        } else {
            (0..total).map(|k| c.f[src(k)]).collect()
        },
        i: if c.i.is_empty() {
            Vec::new()
        } else {
            (0..total).map(|k| c.i[src(k)]).collect()
        },
    }
}

fn range(start: Const, limit: Const, delta: Const) -> R<Const> {
    let one = |c: &Const| {
        c.i.first()
            .copied()
            .ok_or("Range folds integer bounds only")
    };
    let (s, l, d) = (one(&start)?, one(&limit)?, one(&delta)?);
    if d == 0 {
        return Err("Range with a step of 0".into());
    }
    let n = ((l - s) as f64 / d as f64).ceil().max(0.0) as usize;
    if n > 1 << 24 {
        return Err(format!("Range of {n} values"));
    }
    Ok(ints(vec![n], (0..n as i64).map(|k| s + k * d).collect()))
}

fn gather_elements(data: &Const, idx: &Const, ax: i64) -> R<Const> {
    let rank = data.dims.len();
    if idx.dims.len() != rank {
        return Err("data and indices differ in rank".into());
    }
    let ax = axis(ax, rank)?;
    let strides: Vec<usize> = (0..rank)
        .map(|k| data.dims[k + 1..].iter().product())
        .collect();
    let mut f = Vec::new();
    let mut i = Vec::new();
    for flat in 0..idx.len() {
        let (mut rem, mut at) = (flat, 0);
        for k in (0..rank).rev() {
            let x = rem % idx.dims[k];
            rem /= idx.dims[k];
            let x = if k == ax {
                let d = data.dims[k] as i64;
                let v = idx.i[flat];
                let v = if v < 0 { v + d } else { v };
                if !(0..d).contains(&v) {
                    return Err(format!("index {v} outside an axis of {d}"));
                }
                v as usize
            } else if x < data.dims[k] {
                x
            } else {
                return Err("indices exceed the data".into());
            };
            at += x * strides[k];
        }
        if data.f.is_empty() {
            i.push(data.i[at]);
        } else {
            f.push(data.f[at]);
        }
    }
    Ok(Const {
        dims: idx.dims.clone(),
        f,
        i,
    })
}

fn squeeze(c: Const, axes: &[i64], un: bool) -> R<Const> {
    let mut dims = c.dims.clone();
    if un {
        let rank = dims.len() + axes.len();
        let mut at: Vec<usize> = axes.iter().map(|&a| axis(a, rank)).collect::<R<_>>()?;
        at.sort_unstable();
        for a in at {
            dims.insert(a, 1);
        }
    } else {
        let rank = dims.len();
        let mut at: Vec<usize> = if axes.is_empty() {
            (0..rank).filter(|&k| dims[k] == 1).collect()
        } else {
            axes.iter().map(|&a| axis(a, rank)).collect::<R<_>>()?
        };
        at.sort_unstable();
        for a in at.into_iter().rev() {
            if dims[a] != 1 {
                return Err(format!("axis {a} has {} values, not 1", dims[a]));
            }
            dims.remove(a);
        }
    }
    Ok(Const { dims, ..c })
}

fn concat(parts: &[Const], ax: i64) -> R<Const> {
    let first = parts.first().ok_or("nothing to concatenate")?;
    let rank = first.dims.len().max(1);
    if axis(ax, rank)? != 0 || parts.iter().any(|p| p.dims.len() > 1) {
        return Err("only 1-D constants are concatenated".into());
    }
    let float = parts.iter().any(|p| !p.f.is_empty());
    let mut out = Const {
        dims: vec![0],
        f: Vec::new(),
        i: Vec::new(),
    };
    for p in parts {
        if float {
            out.f
                .extend(p.f.iter().copied().chain(p.i.iter().map(|&v| v as f32)));
        } else {
            out.i.extend_from_slice(&p.i);
        }
        out.dims[0] += p.len();
    }
    Ok(out)
}

fn slice(
    data: Const,
    starts: &[i64],
    ends: &[i64],
    axes: Option<Vec<i64>>,
    steps: Option<Vec<i64>>,
) -> R<Const> {
    let rank = data.dims.len();
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    if starts.len() != ends.len() || axes.len() != starts.len() {
        return Err("starts, ends and axes differ in length".into());
    }
    if steps.as_ref().is_some_and(|s| s.iter().any(|&v| v != 1)) {
        return Err("only steps of 1 are supported".into());
    }
    let mut lo: Vec<usize> = vec![0; rank];
    let mut hi: Vec<usize> = data.dims.clone();
    for ((&s, &e), &a) in starts.iter().zip(ends).zip(&axes) {
        let a = axis(a, rank)?;
        let d = data.dims[a] as i64;
        let clamp = |v: i64| (if v < 0 { v + d } else { v }).clamp(0, d) as usize;
        lo[a] = clamp(s);
        hi[a] = clamp(e).max(lo[a]);
    }
    let dims: Vec<usize> = lo.iter().zip(&hi).map(|(l, h)| h - l).collect();
    let total: usize = dims.iter().product();
    let mut f = Vec::new();
    let mut i = Vec::new();
    // walk every output index (row-major) and copy its value
    let strides: Vec<usize> = (0..rank)
        .map(|k| data.dims[k + 1..].iter().product())
        .collect();
    for flat in 0..total {
        let (mut rem, mut src) = (flat, 0);
        for k in (0..rank).rev() {
            let x = rem % dims[k].max(1);
            rem /= dims[k].max(1);
            src += (lo[k] + x) * strides[k];
        }
        if data.f.is_empty() {
            i.push(data.i[src]);
        } else {
            f.push(data.f[src]);
        }
    }
    Ok(Const { dims, f, i })
}

fn cast(c: Const, to: i64) -> R<Const> {
    match to {
        1 => {
            let f = if c.f.is_empty() {
                c.i.iter().map(|&v| v as f32).collect()
            } else {
                c.f
            };
            Ok(Const {
                dims: c.dims,
                f,
                i: Vec::new(),
            })
        }
        6 | 7 => {
            let i = if c.i.is_empty() {
                c.f.iter().map(|&v| v as i64).collect()
            } else {
                c.i
            };
            Ok(Const {
                dims: c.dims,
                f: Vec::new(),
                i,
            })
        }
        t => Err(format!(
            "to = {t}: only casts to float, int32 and int64 are folded"
        )),
    }
}

#[cfg(test)]
#[path = "fold_tests.rs"]
mod tests;
