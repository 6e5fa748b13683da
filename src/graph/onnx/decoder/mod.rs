//! Import of a decoder-only language model exported with its key/value cache — what
//! `torch.onnx.export` writes for Hugging Face's GPT-2 with `use_cache`: inputs `input_ids` and
//! `past_key_values.{i}.key`/`.value` (`[batch, heads, past, head]`), outputs `logits` and
//! `present.{i}.key`/`.value`. One graph serves both phases of such a model (the prompt with an
//! empty cache, then one token at a time with the cache it returned), where our graphs run the
//! prefill as static nodes and the decode steps as a loop; so the export is not translated op
//! by op as other graphs are ([`super::translate`]) but recognized block by block — the
//! embeddings, each layer's norms, Conv1D or MatMul layers, attention and GELU, the final norm
//! and the logits — and rebuilt as the graph `models/gpt2.toml` has, with the file's weights:
//! a masked prefill that chooses the first token, and decode steps that attend over the
//! prompt's keys and values, then their own, sharing the prefill's parameters.
//!
//! What each block must be, checked as it is found (the error names the node):
//! - **linear layers**: `MatMul` by a `[K, N]` initializer and `Add` of an `[N]` one, or
//!   Hugging Face's Conv1D as exported: `Reshape` to two dimensions, `Gemm` with the bias,
//!   `Reshape` back;
//! - **attention**: `Split` of the packed Q|K|V in three; each `Reshape`d to the heads and
//!   `Transpose`d to `[batch, heads, seq, head]`; K and V `Concat`enated onto the layer's past
//!   inputs along the sequence (the `present` outputs); `MatMul` of Q by K transposed, `Div` by
//!   √head (or `Mul` by its inverse); `Where` of a mask sliced from a lower-triangular constant
//!   (the causal mask), the masked scores a large negative constant; `Softmax` over the last
//!   axis; `MatMul` by V; `Transpose` back and `Reshape` to `[batch, seq, width]`;
//! - **GELU**: any elementwise chain from the MLP's first layer to its second that computes the
//!   tanh GELU or the exact one (evaluated at 201 points, within 1e-5), or ONNX's `Gelu`;
//! - **the logits**: a `MatMul` of the final norm's output by `[width, vocabulary]`: tied to the
//!   token table when it holds its transpose exactly.
//!
//! Everything else in the graph must compute shapes or positions only (integer tensors from
//! `Shape`, the causal mask's slices): a node that is neither is refused with its name. The
//! positions are taken as `past + 0..seq`, as Hugging Face computes them.

mod attention;
mod blocks;
mod emit;
mod eval;

use super::proto::pb::{GraphProto, NodeProto};
use super::proto::{value_type, Dim};
use crate::graph::weights::Weights;
use blocks::Graph;

type R<T> = std::result::Result<T, String>;

/// The operators a decoder export may use.
const OPS: &[&str] = &[
    "Gather",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Tanh",
    "Erf",
    "Sqrt",
    "Gelu",
    "LayerNormalization",
    "MatMul",
    "Gemm",
    "Reshape",
    "Transpose",
    "Split",
    "Concat",
    "Where",
    "Softmax",
    "Shape",
    "Unsqueeze",
    "Squeeze",
    "Slice",
    "Range",
    "Cast",
    "Identity",
    "Constant",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "Expand",
    "ConstantOfShape",
];

/// True when `g` is a decoder with a key/value cache: besides one input of token ids, graph
/// inputs named `past…` (and no other), and more than one output.
pub(super) fn is_decoder(g: &GraphProto) -> bool {
    let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
    let real: Vec<&str> = g
        .input
        .iter()
        .map(|i| i.name())
        .filter(|n| !inits.contains(n))
        .collect();
    real.len() > 1 && g.output.len() > 1 && real[1..].iter().all(|n| n.starts_with("past"))
}

/// One linear layer found: its weights `[K][N]`, bias, output width and output tensor.
struct Linear {
    w: Vec<f32>,
    bias: Vec<f32>,
    n: usize,
    out: String,
}

/// A layer norm found.
struct Norm {
    scale: Vec<f32>,
    shift: Vec<f32>,
    eps: f32,
    out: String,
}

/// One decoder layer's parameters.
struct Layer {
    ln1: Norm,
    qkv: Linear,
    proj: Linear,
    ln2: Norm,
    fc: Linear,
    act: &'static str,
    fc_proj: Linear,
}

/// A node in an error message.
fn at(n: &NodeProto) -> String {
    format!("node '{}' ({})", n.name(), n.op_type())
}

/// `[rows][cols]` transposed to `[cols][rows]`.
fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = w[r * cols + c];
        }
    }
    t
}

/// The model's sizes, from its inputs and its tables.
#[derive(Clone, Copy)]
struct Sizes {
    layers: usize,
    heads: usize,
    head: usize,
    width: usize,
    vocab: usize,
    positions: usize,
}

/// Layer `i` of the past inputs: (key, value), by their names' index and kind when they are
/// Hugging Face's (`past_key_values.{i}.key`), else in order.
fn past_pairs(names: &[&str]) -> R<Vec<(String, String)>> {
    if names.is_empty() || !names.len().is_multiple_of(2) {
        return Err(format!(
            "{} past inputs: a key and a value per layer were expected",
            names.len()
        ));
    }
    let parsed: Option<Vec<(usize, bool, &str)>> = names
        .iter()
        .map(|n| {
            let mut it = n.split('.');
            let (_, i, kv) = (it.next()?, it.next()?.parse::<usize>().ok()?, it.next()?);
            Some((i, kv == "value", *n))
        })
        .collect();
    let layers = names.len() / 2;
    match parsed {
        Some(mut p) => {
            p.sort();
            let ok = p
                .iter()
                .enumerate()
                .all(|(j, &(i, value, _))| i == j / 2 && value == (j % 2 == 1));
            if !ok {
                return Err(format!("past inputs {names:?}: layers 0..{layers}, a key and a value each, were expected"));
            }
            Ok(p.chunks(2)
                .map(|c| (c[0].2.to_string(), c[1].2.to_string()))
                .collect())
        }
        None => Ok(names
            .chunks(2)
            .map(|c| (c[0].to_string(), c[1].to_string()))
            .collect()),
    }
}

/// The value of `x`, a computation from shapes, evaluated for a prompt (5 tokens) and for a
/// step after a past (2 tokens after 3), is what `want(past, seq)` says (`what` names it).
fn evaluates_to(
    gr: &Graph,
    x: &str,
    width: usize,
    want: impl Fn(usize, usize) -> Vec<f64>,
    what: &str,
) -> R<()> {
    for (past, seq) in [(0usize, 5usize), (3, 2)] {
        let shapes = gr
            .input_shapes
            .iter()
            .map(|(name, axes)| {
                let d = axes
                    .iter()
                    .map(|a| match a {
                        blocks::InputAxis::Batch => 1,
                        blocks::InputAxis::Seq => seq,
                        blocks::InputAxis::Past => past,
                        blocks::InputAxis::Fixed(n) => *n,
                    })
                    .collect();
                (name.clone(), d)
            })
            .chain(gr.embedded.iter().map(|e| (e.clone(), vec![1, seq, width])))
            .collect();
        let t = eval::Eval::new(gr, shapes)
            .value(x)
            .map_err(|e| format!("{what}: {e}"))?;
        let w = want(past, seq);
        if t.v != w {
            return Err(format!(
                "{what} for {seq} tokens after {past} are {:?}, not {w:?}",
                t.v
            ));
        }
    }
    Ok(())
}

/// The decoder export `g` as model-file text (named after `stem`, described with `about`), and
/// each weighted node's weights by name.
pub(super) fn translate(
    stem: &str,
    about: &str,
    g: &GraphProto,
) -> R<(String, Vec<(String, Weights)>)> {
    let mut bad: Vec<String> = Vec::new();
    for n in &g.node {
        let default = n.domain().is_empty() || n.domain() == "ai.onnx";
        if (!OPS.contains(&n.op_type()) || !default)
            && !bad.iter().any(|b| b.starts_with(n.op_type()))
        {
            bad.push(format!("{} (node '{}')", n.op_type(), n.name()));
        }
    }
    if !bad.is_empty() {
        return Err(format!(
            "a decoder export with unsupported operators: {} (a decoder's are {})",
            bad.join(", "),
            OPS.join(", ")
        ));
    }
    let mut gr = Graph::new(g);
    let real: Vec<&str> = g
        .input
        .iter()
        .map(|i| i.name())
        .filter(|n| !gr.inits.contains_key(n))
        .collect();
    let tokens = real[0];
    let past = past_pairs(&real[1..])?;
    let dims_of = |name: &str| -> R<Vec<Dim>> {
        let v = g
            .input
            .iter()
            .find(|i| i.name() == name)
            .ok_or("an input went missing")?;
        value_type(v)
            .map(|t| t.1)
            .ok_or_else(|| format!("input '{name}' is not a tensor"))
    };
    let (heads, head) = match &dims_of(&past[0].0)?[..] {
        [_, Dim::Fixed(h), _, Dim::Fixed(d)] => (*h, *d),
        other => {
            return Err(format!(
                "past input '{}': [batch, heads, past, head] with fixed heads and head was expected, got {} axes",
                past[0].0,
                other.len()
            ))
        }
    };
    // each input's axes, for the shape computations a mask may read
    for name in &real {
        let axes = dims_of(name)?
            .iter()
            .enumerate()
            .map(|(j, d)| match (j, d) {
                (0, _) => blocks::InputAxis::Batch,
                (_, Dim::Fixed(n)) => blocks::InputAxis::Fixed(*n),
                (1, _) if *name == tokens => blocks::InputAxis::Seq,
                _ => blocks::InputAxis::Past,
            })
            .collect();
        gr.input_shapes.push((name.to_string(), axes));
    }
    // the embeddings: a table gathered by the token ids (or by them reshaped), plus positions
    // gathered from another
    let wte = match gr.reader(tokens, "Gather") {
        Ok(g) => g,
        Err(_) => {
            let r = gr.reader(tokens, "Reshape")?;
            gr.reader(&r.output[0], "Gather")?
        }
    };
    gr.embedded = Some(wte.output[0].clone());
    let table = gr.floats(&wte.input[0], &at(wte))?;
    let [vocab, width] = table.dims[..] else {
        return Err(format!(
            "{}: a [vocabulary, width] table was expected",
            at(wte)
        ));
    };
    if width != heads * head {
        return Err(format!(
            "{}: a width of {width} for {heads} heads of {head}",
            at(wte)
        ));
    }
    let add = gr.reader(&wte.output[0], "Add")?;
    let pos_in = if add.input[0] == wte.output[0] {
        &add.input[1]
    } else {
        &add.input[0]
    };
    // (through a cast or copy of the gathered positions)
    let mut pos_in = pos_in.clone();
    while let Some(&i) = gr.producer.get(pos_in.as_str()) {
        let n = gr.node(i);
        if !matches!(n.op_type(), "Cast" | "Identity") {
            break;
        }
        gr.seen[i] = true;
        pos_in = n.input[0].clone();
    }
    let wpe = gr
        .producer
        .get(pos_in.as_str())
        .map(|&i| (i, gr.node(i)))
        .filter(|(_, n)| n.op_type() == "Gather")
        .ok_or_else(|| {
            format!(
                "{}: the token embedding plus a gathered position table was expected",
                at(add)
            )
        })?;
    gr.seen[wpe.0] = true;
    let positions_table = gr.floats(&wpe.1.input[0], &at(wpe.1))?;
    let [positions, pw] = positions_table.dims[..] else {
        return Err(format!(
            "{}: a [positions, width] table was expected",
            at(wpe.1)
        ));
    };
    if pw != width {
        return Err(format!(
            "{}: positions {pw} wide for a width of {width}",
            at(wpe.1)
        ));
    }
    // the positions: the past's length onwards, one per token of the pass
    let positions_of = |past: usize, seq: usize| (past..past + seq).map(|p| p as f64).collect();
    evaluates_to(
        &gr,
        &wpe.1.input[1],
        width,
        positions_of,
        "the positions gathered",
    )?;
    let s = Sizes {
        layers: past.len(),
        heads,
        head,
        width,
        vocab,
        positions,
    };
    let mut x = add.output[0].clone();
    let mut layers = Vec::with_capacity(s.layers);
    for (k, v) in &past {
        let ln1 = gr.norm(&x, width)?;
        let qkv = gr.linear(&ln1.out, width)?;
        if qkv.n != 3 * width {
            return Err(format!(
                "'{}': Q|K|V of {} where {} was expected",
                qkv.out,
                qkv.n,
                3 * width
            ));
        }
        let a = gr.attention(&qkv.out, (k, v), s)?;
        let proj = gr.linear(&a, width)?;
        let r1 = gr.residual(&proj.out, &x)?;
        let ln2 = gr.norm(&r1, width)?;
        let fc = gr.linear(&ln2.out, width)?;
        let (act, hidden) = gr.gelu(&fc.out)?;
        let fc_proj = gr.linear(&hidden, fc.n)?;
        if proj.n != width || fc_proj.n != width {
            return Err(format!(
                "'{}': a layer whose outputs are not {width} wide",
                fc_proj.out
            ));
        }
        x = gr.residual(&fc_proj.out, &r1)?;
        layers.push(Layer {
            ln1,
            qkv,
            proj,
            ln2,
            fc,
            act,
            fc_proj,
        });
    }
    let ln_f = gr.norm(&x, width)?;
    // (through a view back to [batch, seq, width], which the export may spell out)
    let mut normed = ln_f.out.clone();
    if let Ok(r) = gr.reader(&normed, "Reshape") {
        // [batch, seq, width], the batch given as 1 or -1 (`view(-1, …)`)
        let shape = format!("{}: the view's shape", at(r));
        let as_batch = |b: f64| move |_: usize, seq: usize| vec![b, seq as f64, width as f64];
        evaluates_to(&gr, &r.input[1], width, as_batch(-1.0), &shape)
            .or_else(|_| evaluates_to(&gr, &r.input[1], width, as_batch(1.0), &shape))?;
        normed = r.output[0].clone();
    }
    let head_mm = gr.reader(&normed, "MatMul")?;
    let logits = gr.through_copies(&head_mm.output[0]);
    if g.output.first().map(|o| o.name()) != Some(logits.as_str()) {
        return Err(format!(
            "{}: the logits, the graph's first output, were expected",
            at(head_mm)
        ));
    }
    let lm = gr.floats(&head_mm.input[1], &at(head_mm))?;
    if lm.dims != [width, vocab] {
        return Err(format!(
            "{}: logits weights {:?} for a width of {width} and a vocabulary of {vocab}",
            at(head_mm),
            lm.dims
        ));
    }
    let tied = transpose(&table.f, vocab, width) == lm.f;
    gr.shapes_only()?;
    Ok(emit::emit(
        stem,
        about,
        s,
        (table.f, positions_table.f),
        &layers,
        (ln_f, (!tied).then_some(lm.f)),
    ))
}

#[cfg(test)]
mod attention_tests;
#[cfg(test)]
mod refusal_tests;
#[cfg(test)]
mod test_export;
#[cfg(test)]
mod tests;
