//! Shape inference and cost of every op: from the per-step shapes of a node's inputs, its
//! output shape and what one execution costs ([`NodeCost`]: GEMM shape, vector work, elements
//! moved). One function per op; [`infer`] dispatches.

use super::op::*;
use super::shape::{Rows, TensorShape};

/// Shape inference and cost for one node. `ins` are the per-step views of the inputs (after the
/// loop reading rules); `in_decoder_loop` selects cached self-attention. `tied_table` gives the
/// (vocab, dim) of the embedding a `tied` field names. Returns the output shape and the cost.
pub(crate) fn infer(
    op: &Op,
    ins: &[TensorShape],
    in_decoder_loop: bool,
    tied_table: Option<(usize, usize)>,
) -> Result<(TensorShape, NodeCost), ShapeError> {
    let env = Env {
        in_decoder_loop,
        tied_table,
    };
    let mut c = NodeCost::default();
    let out = match op {
        Op::Input { .. } => input(op, ins, &mut c, env)?,
        Op::Conv2d { .. } => conv2d(op, ins, &mut c, env)?,
        Op::Pool { .. } => pool(op, ins, &mut c, env)?,
        Op::Flatten => flatten(op, ins, &mut c, env)?,
        Op::Linear { .. } => linear(op, ins, &mut c, env)?,
        Op::Add { .. } => add(op, ins, &mut c, env)?,
        Op::Concat => concat(op, ins, &mut c, env)?,
        Op::Activation { .. } => activation(op, ins, &mut c, env)?,
        Op::BatchNorm => batch_norm(op, ins, &mut c, env)?,
        Op::LayerNorm { .. } => layer_norm(op, ins, &mut c, env)?,
        Op::Softmax => softmax(op, ins, &mut c, env)?,
        Op::Embedding { .. } => embedding(op, ins, &mut c, env)?,
        Op::Lstm { .. } => lstm(op, ins, &mut c, env)?,
        Op::Attention { .. } => attention(op, ins, &mut c, env)?,
        Op::Argmax => argmax(op, ins, &mut c, env)?,
        Op::Take { .. } => take(op, ins, &mut c, env)?,
    };
    Ok((out, c))
}

/// What shape inference needs beside the inputs.
#[derive(Clone, Copy, Debug)]
struct Env {
    in_decoder_loop: bool,
    tied_table: Option<(usize, usize)>,
}

fn want_inputs(ins: &[TensorShape], n: usize) -> Result<(), ShapeError> {
    if ins.len() == n {
        Ok(())
    } else {
        Err(format!("takes {n} input(s), got {}", ins.len()).into())
    }
}

fn input(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Input { shape, rows, .. } = op else {
        return Err("internal: not an input op".into());
    };
    want_inputs(ins, 0)?;
    if shape.is_empty() || shape.contains(&0) {
        return Err("shape must be non-empty with positive sizes".into());
    }
    c.out_elems_per_row = numel(shape);
    Ok(TensorShape::new(*rows, shape.clone()))
}

fn conv2d(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Conv2d {
        out_channels,
        kernel: (kh, kw),
        stride,
        padding,
        groups,
        bias,
        bn,
        act,
    } = op
    else {
        return Err("internal: not a conv2d op".into());
    };
    want_inputs(ins, 1)?;
    let (ci, h, w) = chw(&ins[0])?;
    let (co, g) = (*out_channels, *groups);
    if co == 0 || g == 0 || ci % g != 0 || co % g != 0 {
        return Err(format!("channels {ci}->{co} are not divisible by groups {g}").into());
    }
    let ho = window_out(h, *kh, *stride, *padding)
        .ok_or_else(|| format!("kernel {kh}x{kw} does not fit a {h}x{w} input"))?;
    let wo = window_out(w, *kw, *stride, *padding)
        .ok_or_else(|| format!("kernel {kh}x{kw} does not fit a {h}x{w} input"))?;
    let k = (ci / g * kh * kw) as u64;
    let weights = k * co as u64;
    c.params = weights + if *bias { co as u64 } else { 0 } + if *bn { 2 * co as u64 } else { 0 };
    c.weight_elems = c.params;
    let out_px = (ho * wo) as u64;
    if op.is_depthwise(ci) {
        c.vec_macs_per_row = out_px * co as u64 * k;
    } else {
        c.gemm = Some(Gemm {
            m_per_row: out_px,
            n: (co / g) as u64,
            k,
            count: g as u64,
        });
    }
    let epi = u64::from(*bias || *bn) + act.vec_work().0;
    c.vec_simple_per_row = out_px * co as u64 * epi;
    c.vec_transc_per_row = out_px * co as u64 * act.vec_work().1;
    c.moves((ci * h * w) as u64, out_px * co as u64);
    Ok(TensorShape::new(ins[0].rows, vec![co, ho, wo]))
}

fn pool(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Pool {
        kind,
        kernel,
        stride,
        padding,
    } = op
    else {
        return Err("internal: not a pool op".into());
    };
    want_inputs(ins, 1)?;
    let (ch, h, w) = chw(&ins[0])?;
    let (ho, wo, win) = if *kind == PoolKind::GlobalAvg {
        (1, 1, h * w)
    } else {
        let ho = window_out(h, *kernel, *stride, *padding)
            .ok_or_else(|| format!("window {kernel} does not fit a {h}x{w} input"))?;
        let wo = window_out(w, *kernel, *stride, *padding)
            .ok_or_else(|| format!("window {kernel} does not fit a {h}x{w} input"))?;
        (ho, wo, kernel * kernel)
    };
    c.vec_simple_per_row = (ch * ho * wo * win) as u64;
    c.moves((ch * h * w) as u64, (ch * ho * wo) as u64);
    Ok(TensorShape::new(ins[0].rows, vec![ch, ho, wo]))
}

fn flatten(
    _op: &Op,
    ins: &[TensorShape],
    _c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    want_inputs(ins, 1)?;
    let n = numel(&ins[0].feat) as usize;
    Ok(TensorShape::new(ins[0].rows, vec![n]))
}

fn linear(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Linear {
        out_features,
        bias,
        act,
        tied,
    } = op
    else {
        return Err("internal: not a linear op".into());
    };
    let tied_table = env.tied_table;
    if ins.is_empty() {
        return Err("takes at least one input".into());
    }
    let rows = same_rows(ins)?;
    let mut k = 0usize;
    for s in ins {
        k += vec1(s)?;
    }
    let n = *out_features;
    if n == 0 {
        return Err("out_features must be positive".into());
    }
    if tied.is_some() {
        let (v, d) = tied_table.ok_or("tied table not found")?;
        if (v, d) != (n, k) {
            return Err(format!("tied table is {v}x{d} but this layer maps {k} -> {n}").into());
        }
        c.params = if *bias { n as u64 } else { 0 };
        c.weight_elems = (k * n) as u64 + c.params;
    } else {
        c.params = (k * n) as u64 + if *bias { n as u64 } else { 0 };
        c.weight_elems = c.params;
    }
    c.gemm = Some(Gemm {
        m_per_row: 1,
        n: n as u64,
        k: k as u64,
        count: 1,
    });
    c.vec_simple_per_row = n as u64 * (u64::from(*bias) + act.vec_work().0);
    c.vec_transc_per_row = n as u64 * act.vec_work().1;
    c.moves(k as u64, n as u64);
    Ok(TensorShape::new(rows, vec![n]))
}

fn add(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Add { act } = op else {
        return Err("internal: not an add op".into());
    };
    if ins.len() < 2 {
        return Err("takes at least two inputs".into());
    }
    for s in &ins[1..] {
        if s != &ins[0] {
            return Err(format!("inputs differ in shape: {} vs {}", ins[0], s).into());
        }
    }
    let n = numel(&ins[0].feat);
    c.vec_simple_per_row = n * (ins.len() as u64 - 1 + act.vec_work().0);
    c.vec_transc_per_row = n * act.vec_work().1;
    c.moves(n * ins.len() as u64, n);
    Ok(ins[0].clone())
}

fn concat(
    _op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    if ins.is_empty() {
        return Err("takes at least one input".into());
    }
    let rows = same_rows(ins)?;
    let mut d = 0;
    for s in ins {
        d += vec1(s)?;
    }
    c.moves(d as u64, d as u64);
    Ok(TensorShape::new(rows, vec![d]))
}

fn activation(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Activation { kind } = op else {
        return Err("internal: not an activation op".into());
    };
    want_inputs(ins, 1)?;
    let n = numel(&ins[0].feat);
    c.vec_simple_per_row = n * kind.vec_work().0.max(1);
    c.vec_transc_per_row = n * kind.vec_work().1;
    c.moves(n, n);
    Ok(ins[0].clone())
}

fn batch_norm(
    _op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    want_inputs(ins, 1)?;
    let ch = *ins[0].feat.first().ok_or("empty input shape")?;
    let n = numel(&ins[0].feat);
    c.params = 2 * ch as u64;
    c.weight_elems = c.params;
    c.vec_simple_per_row = 2 * n;
    c.moves(n, n);
    Ok(ins[0].clone())
}

fn layer_norm(
    _op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    want_inputs(ins, 1)?;
    let d = vec1(&ins[0])? as u64;
    c.params = 2 * d;
    c.weight_elems = c.params;
    c.vec_simple_per_row = 5 * d;
    c.vec_transc_per_row = 1;
    c.moves(d, d);
    Ok(ins[0].clone())
}

fn softmax(
    _op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    want_inputs(ins, 1)?;
    let d = vec1(&ins[0])? as u64;
    c.vec_simple_per_row = 3 * d;
    c.vec_transc_per_row = d;
    c.moves(d, d);
    Ok(ins[0].clone())
}

fn embedding(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Embedding {
        vocab,
        dim,
        scale,
        positional,
        positions,
        token_types,
        tied,
        after_src,
    } = op
    else {
        return Err("internal: not an embedding op".into());
    };
    let tied_table = env.tied_table;
    want_inputs(ins, 1)?;
    if *after_src && !env.in_decoder_loop {
        return Err("after_src places a decoder step's position after the source: it is for an embedding in a decoder loop".into());
    }
    if vec1(&ins[0])? != 1 {
        return Err("expects token ids (rows of [1])".into());
    }
    if *vocab == 0 || *dim == 0 {
        return Err("vocab and dim must be positive".into());
    }
    if tied.is_some() {
        let (v, d) = tied_table.ok_or("tied table not found")?;
        if (v, d) != (*vocab, *dim) {
            return Err(format!("tied table is {v}x{d}, this embedding is {vocab}x{dim}").into());
        }
    } else {
        c.params = (vocab * dim) as u64;
    }
    let pos = if *positional == PosEnc::Learned {
        *positions
    } else {
        0
    };
    c.params += ((pos + token_types) * dim) as u64;
    let tables = 1 + u64::from(pos > 0) + u64::from(*token_types > 0);
    c.gather_elems_per_row = tables * *dim as u64;
    c.vec_simple_per_row =
        *dim as u64 * (u64::from(*scale) + u64::from(*positional != PosEnc::None) + tables - 1);
    c.moves(1, *dim as u64);
    Ok(TensorShape::new(ins[0].rows, vec![*dim]))
}

fn lstm(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Lstm { hidden, .. } = op else {
        return Err("internal: not an lstm op".into());
    };
    if ins.is_empty() {
        return Err("takes at least one input".into());
    }
    let mut k = 0;
    for s in ins {
        if s.rows != Rows::One {
            return Err(format!(
                "an lstm steps one row at a time; input has {} rows (put it in a loop)",
                s.rows
            )
            .into());
        }
        k += vec1(s)?;
    }
    let h = *hidden as u64;
    if h == 0 {
        return Err("hidden must be positive".into());
    }
    let kk = k as u64 + h;
    c.params = 4 * h * kk + 4 * h;
    c.weight_elems = c.params;
    c.gemm = Some(Gemm {
        m_per_row: 1,
        n: 4 * h,
        k: kk,
        count: 1,
    });
    // bias add on 4H gates, 3 sigmoids + 2 tanh, 3 muls + 1 add on H
    c.vec_simple_per_row = 4 * h + 4 * h;
    c.vec_transc_per_row = 5 * h;
    // reads: x, h_{t-1}, c_{t-1}; writes: h_t, c_t
    c.moves(kk + h, 2 * h);
    Ok(TensorShape::new(Rows::One, vec![*hidden]))
}

fn attention(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Attention { mode, heads } = op else {
        return Err("internal: not an attention op".into());
    };
    let in_decoder_loop = env.in_decoder_loop;
    let heads = *heads;
    if heads == 0 {
        return Err("heads must be positive".into());
    }
    Ok(match mode {
        AttnMode::Additive | AttnMode::Dot => {
            want_inputs(ins, 3)?;
            if ins[0].rows != Rows::One {
                return Err("query must be one row (a decoder step)".into());
            }
            if heads != 1 {
                return Err("additive and dot attention have one head".into());
            }
            let dq = vec1(&ins[0])?;
            let dk = vec1(&ins[1])?;
            let dv = vec1(&ins[2])?;
            if ins[1].rows != ins[2].rows || !ins[1].rows.is_sequence() {
                return Err("keys and values must be the same sequence".into());
            }
            if dq != dk {
                return Err(format!("query width {dq} != key width {dk}").into());
            }
            if *mode == AttnMode::Additive {
                c.params = 2 * dk as u64 + 1;
                c.weight_elems = c.params;
            }
            c.attn = Some(AttnCost {
                heads: 1,
                d: dk as u64,
                dv: dv as u64,
                additive: *mode == AttnMode::Additive,
                kv_elems_per_key: (dk + dv) as u64,
            });
            c.moves(dq as u64, dv as u64);
            TensorShape::new(Rows::One, vec![dv])
        }
        AttnMode::SelfAttn | AttnMode::Causal => {
            let prefix = in_decoder_loop && ins.len() == 2;
            if !prefix {
                want_inputs(ins, 1)?;
            }
            let d3 = vec1(&ins[0])?;
            if d3 % 3 != 0 || (d3 / 3) % heads != 0 {
                return Err(format!(
                    "packed Q|K|V width {d3} is not 3 x a multiple of {heads} heads"
                )
                .into());
            }
            let d = d3 / 3;
            if *mode == AttnMode::Causal && in_decoder_loop {
                return Err(
                    "causal attention masks a whole sequence outside a loop; in a decoder loop, self-attention over its cache is causal already"
                        .into(),
                );
            }
            if in_decoder_loop != (ins[0].rows == Rows::One) {
                return Err(
                    "self-attention needs a whole sequence outside a decoder loop, and one row inside"
                        .into(),
                );
            }
            if prefix && (vec1(&ins[1])? != d3 || !ins[1].rows.is_sequence()) {
                return Err(format!(
                    "a decoder self-attention's second input is the prompt's packed Q|K|V: a sequence of [{d3}], got {} rows of {:?}",
                    ins[1].rows, ins[1].feat
                )
                .into());
            }
            c.attn = Some(AttnCost {
                heads: heads as u64,
                d: d as u64,
                dv: d as u64,
                additive: false,
                kv_elems_per_key: if in_decoder_loop { 2 * d as u64 } else { 0 },
            });
            c.moves(d3 as u64, d as u64);
            TensorShape::new(ins[0].rows, vec![d])
        }
        AttnMode::Cross => {
            want_inputs(ins, 2)?;
            let d = vec1(&ins[0])?;
            let d2 = vec1(&ins[1])?;
            if d2 != 2 * d || d % heads != 0 {
                return Err(format!(
                    "cross-attention needs q [D] and packed K|V [2D] with D divisible by heads; got {d} and {d2}"
                ).into());
            }
            if !ins[1].rows.is_sequence() {
                return Err("K|V must be a sequence".into());
            }
            c.attn = Some(AttnCost {
                heads: heads as u64,
                d: d as u64,
                dv: d as u64,
                additive: false,
                kv_elems_per_key: 2 * d as u64,
            });
            c.moves(d as u64, d as u64);
            TensorShape::new(ins[0].rows, vec![d])
        }
    })
}

fn argmax(
    _op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    want_inputs(ins, 1)?;
    let v = vec1(&ins[0])? as u64;
    c.vec_simple_per_row = v;
    c.moves(v, 1);
    Ok(TensorShape::new(ins[0].rows, vec![1]))
}

fn take(
    op: &Op,
    ins: &[TensorShape],
    c: &mut NodeCost,
    _env: Env,
) -> Result<TensorShape, ShapeError> {
    let Op::Take { row, from_end } = op else {
        return Err("internal: not a take op".into());
    };
    want_inputs(ins, 1)?;
    let d = vec1(&ins[0])?;
    match ins[0].rows {
        Rows::Fixed(n) if (*row as u32) < n => {}
        Rows::Fixed(n) => return Err(format!("row {row} out of range 0..{n}").into()),
        _ if *row == 0 => {}
        r if *from_end => {
            return Err(format!("row {row} from the end may not exist in a {r}-row input").into())
        }
        r => return Err(format!("row {row} may not exist in a {r}-row input").into()),
    }
    c.moves(d as u64, d as u64);
    Ok(TensorShape::new(Rows::One, vec![d]))
}

/// Checks a tensor has rank 3 ([C, H, W]).
fn chw(s: &TensorShape) -> Result<(usize, usize, usize), ShapeError> {
    match s.feat.as_slice() {
        [c, h, w] => Ok((*c, *h, *w)),
        other => Err(format!("expects a [C, H, W] input, got {other:?}").into()),
    }
}

fn vec1(s: &TensorShape) -> Result<usize, ShapeError> {
    match s.feat.as_slice() {
        [d] => Ok(*d),
        other => Err(format!("expects rows of a vector [D], got {other:?}").into()),
    }
}

fn same_rows(ins: &[TensorShape]) -> Result<Rows, ShapeError> {
    let r = ins[0].rows;
    if ins.iter().any(|s| s.rows != r) {
        return Err("inputs have different row counts".into());
    }
    Ok(r)
}

/// The per-step feature shape an op produces regardless of its input widths, when it has one.
/// Shape inference of loops with `@prev` feedback starts from these.
pub(crate) fn op_implied_row(op: &Op) -> Option<Vec<usize>> {
    match op {
        Op::Linear { out_features, .. } => Some(vec![*out_features]),
        Op::Lstm { hidden, .. } => Some(vec![*hidden]),
        Op::Embedding { dim, .. } => Some(vec![*dim]),
        Op::Argmax => Some(vec![1]),
        _ => None,
    }
}
