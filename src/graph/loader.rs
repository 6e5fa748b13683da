//! Reads a model file (TOML, see `docs/model-format.md`), validates it — known ops and fields,
//! names defined before use, shapes that agree along every edge, well-formed loops — and builds a
//! [`Model`]. Every error names the file, the line and the field.

use super::infer::{infer, op_implied_row};
use super::op::{Act, AttnMode, NodeCost, Op, PoolKind, PosEnc};
use super::shape::{Rows, TensorShape};
use super::{Class, Input, Keys, Loop, LoopId, Model, Node, NodeId, SeqConfig, View};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use toml_edit::{ImDocument, Item, Table, Value};

/// Fields every node may carry; each op adds its own (see [`op_fields`]).
const COMMON_FIELDS: &[&str] = &["name", "op", "inputs", "class", "loop", "div"];

fn op_fields(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "input" => &["shape", "seq", "tokens"],
        "conv2d" => &[
            "out_channels",
            "kernel",
            "stride",
            "padding",
            "groups",
            "bias",
            "bn",
            "act",
        ],
        "pool" => &["kind", "kernel", "stride", "padding"],
        "flatten" | "concat" | "batchnorm" | "layernorm" | "softmax" | "argmax" => &[],
        "linear" => &["out_features", "bias", "act", "tied"],
        "add" => &["act"],
        "act" => &["kind"],
        "embedding" => &[
            "vocab",
            "dim",
            "scale",
            "positional",
            "positions",
            "token_types",
            "tied",
        ],
        "lstm" => &["hidden", "reverse"],
        "attention" => &["mode", "heads"],
        "take" => &["row"],
        _ => return None,
    })
}

/// Parses model text. `file` is used in error messages only.
pub fn parse_model(text: &str, file: &Path) -> Result<Model> {
    parse_model_scaled(text, file, Scale::default())
}

/// Parses model text and shrinks (or grows) it by `scale` before shape inference, so that every
/// edge of the reduced variant is checked like the original's.
pub fn parse_model_scaled(text: &str, file: &Path, scale: Scale) -> Result<Model> {
    scale.validate()?;
    let mut m = Parser {
        text,
        file: file.to_path_buf(),
        scale,
    }
    .parse()?;
    if scale != Scale::default() {
        m.name = format!("{}@{}", m.name, scale.tag());
        m.parts[0].name = m.name.clone();
    }
    Ok(m)
}

/// Reads and parses a model file.
pub fn load_model_file(path: &Path) -> Result<Model> {
    load_model_file_scaled(path, Scale::default())
}

/// Reads and parses a model file, scaled.
pub fn load_model_file_scaled(path: &Path, scale: Scale) -> Result<Model> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_model_scaled(&text, path, scale)
}

/// A reduced-size variant of a model: every width (channels, features, hidden units, embedding
/// widths and vocabularies) times `width`, and every spatial input dimension times `resolution`.
/// Model inputs' channel counts (RGB, filterbank, token) and attention head counts stay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    /// Width multiplier (0, 1].
    pub width: f64,
    /// Spatial resolution multiplier (0, 1].
    pub resolution: f64,
}

impl Default for Scale {
    fn default() -> Self {
        Scale {
            width: 1.0,
            resolution: 1.0,
        }
    }
}

impl Scale {
    fn validate(&self) -> Result<()> {
        for (what, v) in [("--width", self.width), ("--res", self.resolution)] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(Error::invalid(what, format!("must be in (0, 1], got {v}")));
            }
        }
        Ok(())
    }

    /// The suffix that names the variant (`w0.125` / `w0.125r0.25`).
    pub fn tag(&self) -> String {
        let mut t = String::new();
        if self.width != 1.0 {
            t.push_str(&format!("w{}", self.width));
        }
        if self.resolution != 1.0 {
            t.push_str(&format!("r{}", self.resolution));
        }
        t
    }

    fn w(&self, x: usize) -> usize {
        ((x as f64 * self.width).round() as usize).max(1)
    }

    /// Applies the scale to one op (`heads` keeps attention widths divisible).
    fn apply(&self, op: &mut Op) {
        if *self == Scale::default() {
            return;
        }
        match op {
            Op::Input { shape, .. } if shape.len() == 3 => {
                for d in &mut shape[1..] {
                    *d = ((*d as f64 * self.resolution).round() as usize).max(1);
                }
            }
            Op::Conv2d {
                out_channels,
                groups,
                ..
            } => {
                if *groups > 1 {
                    *groups = self.w(*groups);
                }
                *out_channels = self.w(*out_channels);
            }
            Op::Linear { out_features, .. } => *out_features = self.w(*out_features),
            Op::Embedding { vocab, dim, .. } => {
                *vocab = self.w(*vocab);
                *dim = self.w(*dim);
            }
            Op::Lstm { hidden, .. } => *hidden = self.w(*hidden),
            _ => {}
        }
    }
}

struct Parser<'a> {
    text: &'a str,
    file: PathBuf,
    scale: Scale,
}

/// A node's resolved inputs, their per-step shapes, and its cost.
type Resolved = (Vec<Input>, Vec<TensorShape>, NodeCost);

/// A field value with its position.
struct Field<'t> {
    value: &'t Value,
    line: usize,
}

struct RawNode<'t> {
    table: &'t Table,
    line: usize,
    name: String,
}

impl<'a> Parser<'a> {
    fn line_of(&self, span: Option<std::ops::Range<usize>>) -> usize {
        match span {
            Some(r) => {
                self.text[..r.start.min(self.text.len())]
                    .matches('\n')
                    .count()
                    + 1
            }
            None => 0,
        }
    }

    fn err(&self, line: usize, field: impl Into<String>, msg: impl Into<String>) -> Error {
        Error::ModelFile {
            file: self.file.clone(),
            line,
            field: field.into(),
            msg: msg.into(),
        }
    }

    fn field<'t>(&self, t: &'t Table, key: &str) -> Option<Field<'t>> {
        match t.get(key) {
            Some(Item::Value(v)) => Some(Field {
                value: v,
                line: self.line_of(v.span()),
            }),
            _ => None,
        }
    }

    fn get_str(&self, t: &Table, key: &str, ctx: &str, tline: usize) -> Result<Option<String>> {
        match self.field(t, key) {
            None => Ok(None),
            Some(f) => match f.value.as_str() {
                Some(s) => Ok(Some(s.to_string())),
                None => Err(self.err(f.line, format!("{ctx}{key}"), "expected a string")),
            },
        }
        .and_then(|v| {
            if t.get(key).is_some_and(|i| !i.is_value()) {
                Err(self.err(tline, format!("{ctx}{key}"), "expected a value"))
            } else {
                Ok(v)
            }
        })
    }

    fn get_uint(&self, t: &Table, key: &str, ctx: &str) -> Result<Option<usize>> {
        match self.field(t, key) {
            None => Ok(None),
            Some(f) => match f.value.as_integer() {
                Some(i) if i > 0 => Ok(Some(i as usize)),
                Some(0) if key == "padding" || key == "row" || key == "token_types" => Ok(Some(0)),
                _ => Err(self.err(f.line, format!("{ctx}{key}"), "expected a positive integer")),
            },
        }
    }

    fn get_float(&self, t: &Table, key: &str, ctx: &str) -> Result<Option<f64>> {
        match self.field(t, key) {
            None => Ok(None),
            Some(f) => {
                let v = f
                    .value
                    .as_float()
                    .or_else(|| f.value.as_integer().map(|i| i as f64));
                match v {
                    Some(x) if x > 0.0 && x.is_finite() => Ok(Some(x)),
                    _ => Err(self.err(f.line, format!("{ctx}{key}"), "expected a positive number")),
                }
            }
        }
    }

    fn get_bool(&self, t: &Table, key: &str, ctx: &str) -> Result<Option<bool>> {
        match self.field(t, key) {
            None => Ok(None),
            Some(f) => match f.value.as_bool() {
                Some(b) => Ok(Some(b)),
                None => Err(self.err(f.line, format!("{ctx}{key}"), "expected true or false")),
            },
        }
    }

    fn parse(&self) -> Result<Model> {
        let doc = ImDocument::parse(self.text).map_err(|e| {
            let line = self.line_of(e.span());
            self.err(line, "syntax", e.message().trim().to_string())
        })?;
        let root = doc.as_table();
        for (k, item) in root.iter() {
            if ![
                "name",
                "description",
                "source",
                "max_batch",
                "seq2seq",
                "node",
            ]
            .contains(&k)
            {
                let line = self.line_of(item.span());
                return Err(self.err(line, k, "unknown top-level key"));
            }
        }
        let name = self
            .get_str(root, "name", "", 1)?
            .ok_or_else(|| self.err(1, "name", "missing (every model needs a name)"))?;
        let description = self
            .get_str(root, "description", "", 1)?
            .unwrap_or_default();
        let source = self.get_str(root, "source", "", 1)?.unwrap_or_default();
        let max_batch = self.get_uint(root, "max_batch", "")?.unwrap_or(64) as u32;
        let seq = match root.get("seq2seq") {
            None => None,
            Some(Item::Table(t)) => Some(self.parse_seq(t)?),
            Some(other) => {
                return Err(self.err(self.line_of(other.span()), "seq2seq", "expected a table"))
            }
        };
        let raw_nodes = match root.get("node") {
            Some(Item::ArrayOfTables(a)) => a
                .iter()
                .map(|t| {
                    let line = self.line_of(t.span());
                    let name = self
                        .get_str(t, "name", "node.", line)?
                        .ok_or_else(|| self.err(line, "node.name", "missing"))?;
                    Ok(RawNode {
                        table: t,
                        line,
                        name,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
            Some(other) => {
                return Err(self.err(
                    self.line_of(other.span()),
                    "node",
                    "expected [[node]] tables",
                ))
            }
            None => return Err(self.err(1, "node", "the model has no [[node]] tables")),
        };
        self.build(name, description, source, max_batch, seq, &raw_nodes)
    }

    fn parse_seq(&self, t: &Table) -> Result<SeqConfig> {
        let line = self.line_of(t.span());
        for (k, item) in t.iter() {
            if ![
                "lengths",
                "enc_scale",
                "dec_scale",
                "ref_enc",
                "ref_dec",
                "max_enc",
                "max_dec",
            ]
            .contains(&k)
            {
                return Err(self.err(
                    self.line_of(item.span()),
                    format!("seq2seq.{k}"),
                    "unknown key",
                ));
            }
        }
        let lengths = self
            .get_str(t, "lengths", "seq2seq.", line)?
            .unwrap_or_else(|| "wmt-ende".into());
        if lengths != "wmt-ende" {
            return Err(self.err(
                line,
                "seq2seq.lengths",
                format!("unknown length distribution '{lengths}' (known: wmt-ende)"),
            ));
        }
        let g = |k: &str, d: usize| -> Result<u32> {
            Ok(self.get_uint(t, k, "seq2seq.")?.unwrap_or(d) as u32)
        };
        Ok(SeqConfig {
            lengths,
            enc_scale: self.get_float(t, "enc_scale", "seq2seq.")?.unwrap_or(1.0),
            dec_scale: self.get_float(t, "dec_scale", "seq2seq.")?.unwrap_or(1.0),
            ref_enc: g("ref_enc", 30)?,
            ref_dec: g("ref_dec", 30)?,
            max_enc: g("max_enc", 80)?,
            max_dec: g("max_dec", 80)?,
        })
    }

    fn parse_act(&self, t: &Table, key: &str, ctx: &str, line: usize) -> Result<Act> {
        match self.get_str(t, key, ctx, line)? {
            None => Ok(Act::None),
            Some(s) => Act::parse(&s).ok_or_else(|| {
                let l = self.field(t, key).map_or(line, |f| f.line);
                self.err(
                    l,
                    format!("{ctx}{key}"),
                    format!("unknown activation '{s}' (none, relu, relu6, gelu, tanh, sigmoid)"),
                )
            }),
        }
    }

    fn parse_op(&self, raw: &RawNode, op_name: &str, ctx: &str) -> Result<Op> {
        let t = raw.table;
        let line = raw.line;
        let need = |k: &str| -> Result<usize> {
            self.get_uint(t, k, ctx)?.ok_or_else(|| {
                self.err(
                    line,
                    format!("{ctx}{k}"),
                    format!("required by op {op_name}"),
                )
            })
        };
        let b = |k: &str| -> Result<bool> { Ok(self.get_bool(t, k, ctx)?.unwrap_or(false)) };
        Ok(match op_name {
            "input" => {
                let f = self
                    .field(t, "shape")
                    .ok_or_else(|| self.err(line, format!("{ctx}shape"), "required by op input"))?;
                let shape = f
                    .value
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|v| v.as_integer().filter(|&i| i > 0).map(|i| i as usize))
                            .collect::<Option<Vec<_>>>()
                    })
                    .unwrap_or(None)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| {
                        self.err(
                            f.line,
                            format!("{ctx}shape"),
                            "expected a list of positive integers",
                        )
                    })?;
                let rows = match self.field(t, "seq") {
                    None => Rows::One,
                    Some(f) => match (f.value.as_str(), f.value.as_integer()) {
                        (Some("one"), _) => Rows::One,
                        (Some("src"), _) => Rows::Src { div: 1 },
                        (_, Some(n)) if n > 0 => Rows::Fixed(n as u32),
                        _ => {
                            return Err(self.err(
                                f.line,
                                format!("{ctx}seq"),
                                "expected \"one\", \"src\" or a positive integer",
                            ))
                        }
                    },
                };
                Op::Input {
                    shape,
                    rows,
                    tokens: b("tokens")?,
                }
            }
            "conv2d" => {
                let kernel = match self.field(t, "kernel") {
                    None => {
                        return Err(self.err(line, format!("{ctx}kernel"), "required by op conv2d"))
                    }
                    Some(f) => match (f.value.as_integer(), f.value.as_array()) {
                        (Some(k), _) if k > 0 => (k as usize, k as usize),
                        (_, Some(a)) if a.len() == 2 => {
                            let v: Vec<i64> = a.iter().filter_map(|x| x.as_integer()).collect();
                            if v.len() != 2 || v[0] <= 0 || v[1] <= 0 {
                                return Err(self.err(
                                    f.line,
                                    format!("{ctx}kernel"),
                                    "expected k or [kh, kw] > 0",
                                ));
                            }
                            (v[0] as usize, v[1] as usize)
                        }
                        _ => {
                            return Err(self.err(
                                f.line,
                                format!("{ctx}kernel"),
                                "expected k or [kh, kw] > 0",
                            ))
                        }
                    },
                };
                Op::Conv2d {
                    out_channels: need("out_channels")?,
                    kernel,
                    stride: self.get_uint(t, "stride", ctx)?.unwrap_or(1),
                    padding: self.get_uint(t, "padding", ctx)?.unwrap_or(0),
                    groups: self.get_uint(t, "groups", ctx)?.unwrap_or(1),
                    bias: b("bias")?,
                    bn: b("bn")?,
                    act: self.parse_act(t, "act", ctx, line)?,
                }
            }
            "pool" => {
                let kind_s = self
                    .get_str(t, "kind", ctx, line)?
                    .ok_or_else(|| self.err(line, format!("{ctx}kind"), "required by op pool"))?;
                let kind = match kind_s.as_str() {
                    "max" => PoolKind::Max,
                    "avg" => PoolKind::Avg,
                    "global_avg" => PoolKind::GlobalAvg,
                    other => {
                        return Err(self.err(
                            self.field(t, "kind").map_or(line, |f| f.line),
                            format!("{ctx}kind"),
                            format!("unknown pool kind '{other}' (max, avg, global_avg)"),
                        ))
                    }
                };
                let kernel = if kind == PoolKind::GlobalAvg {
                    self.get_uint(t, "kernel", ctx)?.unwrap_or(1)
                } else {
                    need("kernel")?
                };
                Op::Pool {
                    kind,
                    kernel,
                    stride: self.get_uint(t, "stride", ctx)?.unwrap_or(kernel),
                    padding: self.get_uint(t, "padding", ctx)?.unwrap_or(0),
                }
            }
            "flatten" => Op::Flatten,
            "concat" => Op::Concat,
            "batchnorm" => Op::BatchNorm,
            "layernorm" => Op::LayerNorm,
            "softmax" => Op::Softmax,
            "argmax" => Op::Argmax,
            "linear" => Op::Linear {
                out_features: need("out_features")?,
                bias: b("bias")?,
                act: self.parse_act(t, "act", ctx, line)?,
                tied: self.get_str(t, "tied", ctx, line)?,
            },
            "add" => Op::Add {
                act: self.parse_act(t, "act", ctx, line)?,
            },
            "act" => {
                let a = self.parse_act(t, "kind", ctx, line)?;
                if a == Act::None && self.field(t, "kind").is_none() {
                    return Err(self.err(line, format!("{ctx}kind"), "required by op act"));
                }
                Op::Activation { kind: a }
            }
            "embedding" => {
                let positional = match self.get_str(t, "positional", ctx, line)?.as_deref() {
                    None | Some("none") => PosEnc::None,
                    Some("sinusoidal") => PosEnc::Sinusoidal,
                    Some("learned") => PosEnc::Learned,
                    Some(o) => {
                        return Err(self.err(
                            self.field(t, "positional").map_or(line, |f| f.line),
                            format!("{ctx}positional"),
                            format!(
                                "unknown positional encoding '{o}' (none, sinusoidal, learned)"
                            ),
                        ))
                    }
                };
                let positions = self.get_uint(t, "positions", ctx)?.unwrap_or(0);
                if positional == PosEnc::Learned && positions == 0 {
                    return Err(self.err(
                        line,
                        format!("{ctx}positions"),
                        "required with positional = \"learned\"",
                    ));
                }
                Op::Embedding {
                    vocab: need("vocab")?,
                    dim: need("dim")?,
                    scale: b("scale")?,
                    positional,
                    positions,
                    token_types: self.get_uint(t, "token_types", ctx)?.unwrap_or(0),
                    tied: self.get_str(t, "tied", ctx, line)?,
                }
            }
            "lstm" => Op::Lstm {
                hidden: need("hidden")?,
                reverse: b("reverse")?,
            },
            "attention" => {
                let mode_s = self.get_str(t, "mode", ctx, line)?.ok_or_else(|| {
                    self.err(line, format!("{ctx}mode"), "required by op attention")
                })?;
                let mode = match mode_s.as_str() {
                    "additive" => AttnMode::Additive,
                    "dot" => AttnMode::Dot,
                    "self" => AttnMode::SelfAttn,
                    "cross" => AttnMode::Cross,
                    o => {
                        return Err(self.err(
                            self.field(t, "mode").map_or(line, |f| f.line),
                            format!("{ctx}mode"),
                            format!("unknown attention mode '{o}' (additive, dot, self, cross)"),
                        ))
                    }
                };
                Op::Attention {
                    mode,
                    heads: self.get_uint(t, "heads", ctx)?.unwrap_or(1),
                }
            }
            "take" => Op::Take {
                row: self.get_uint(t, "row", ctx)?.unwrap_or(0),
            },
            _ => unreachable!("op names are checked before parse_op"),
        })
    }

    fn build(
        &self,
        name: String,
        description: String,
        source: String,
        max_batch: u32,
        seq: Option<SeqConfig>,
        raws: &[RawNode],
    ) -> Result<Model> {
        let mut by_name: HashMap<&str, NodeId> = HashMap::new();
        let mut loops: Vec<Loop> = Vec::new();
        let mut loop_names_done: Vec<String> = Vec::new();
        // pass 1: names, classes and loops
        let mut classes = Vec::with_capacity(raws.len());
        for (i, raw) in raws.iter().enumerate() {
            let ctx = format!("node '{}': ", raw.name);
            if raw.name.is_empty()
                || !raw
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
            {
                return Err(self.err(raw.line, format!("{ctx}name"), "use only [A-Za-z0-9_.-]"));
            }
            if by_name.insert(&raw.name, NodeId(i as u32)).is_some() {
                return Err(self.err(raw.line, format!("{ctx}name"), "duplicate node name"));
            }
            let class = match self.get_str(raw.table, "class", &ctx, raw.line)?.as_deref() {
                None | Some("static") => Class::Static,
                Some("encoder") => Class::Encoder,
                Some("decoder") => Class::Decoder,
                Some(o) => {
                    return Err(self.err(
                        self.field(raw.table, "class").map_or(raw.line, |f| f.line),
                        format!("{ctx}class"),
                        format!("unknown class '{o}' (static, encoder, decoder)"),
                    ))
                }
            };
            if class != Class::Static && seq.is_none() {
                return Err(self.err(
                    raw.line,
                    format!("{ctx}class"),
                    "encoder/decoder nodes need a [seq2seq] table in the model file",
                ));
            }
            let loop_name = self.get_str(raw.table, "loop", &ctx, raw.line)?;
            let div = self.get_uint(raw.table, "div", &ctx)?;
            if class == Class::Static && (loop_name.is_some() || div.is_some()) {
                return Err(self.err(
                    raw.line,
                    format!("{ctx}loop"),
                    "static nodes are in no loop",
                ));
            }
            if class == Class::Decoder && div.is_some_and(|d| d != 1) {
                return Err(self.err(
                    raw.line,
                    format!("{ctx}div"),
                    "only encoder loops may have div",
                ));
            }
            let loop_id = if class == Class::Static {
                None
            } else {
                let lname = loop_name.unwrap_or_else(|| class.to_string());
                let div = div.unwrap_or(1) as u32;
                let continues = loops
                    .last()
                    .is_some_and(|l: &Loop| l.name == lname && l.last.idx() + 1 == i);
                if continues {
                    let l = loops
                        .last_mut()
                        .ok_or_else(|| Error::Internal("loop".into()))?;
                    if l.class != class || l.div != div {
                        return Err(self.err(
                            raw.line,
                            format!("{ctx}loop"),
                            format!("loop '{lname}' mixes classes or div values"),
                        ));
                    }
                    l.last = NodeId(i as u32);
                } else {
                    if loop_names_done.contains(&lname) {
                        return Err(self.err(
                            raw.line,
                            format!("{ctx}loop"),
                            format!("loop '{lname}' is split: its nodes must be consecutive"),
                        ));
                    }
                    loop_names_done.push(lname.clone());
                    loops.push(Loop {
                        name: lname,
                        class,
                        div,
                        first: NodeId(i as u32),
                        last: NodeId(i as u32),
                    });
                }
                Some(LoopId(loops.len() as u32 - 1))
            };
            classes.push((class, loop_id));
        }
        // pass 2: ops and input references
        struct Pending {
            op: Op,
            refs: Vec<(NodeId, bool, usize)>,
            tied_table: Option<(usize, usize)>,
        }
        let mut pend: Vec<Pending> = Vec::with_capacity(raws.len());
        for (i, raw) in raws.iter().enumerate() {
            let ctx = format!("node '{}': ", raw.name);
            let t = raw.table;
            let op_name = self
                .get_str(t, "op", &ctx, raw.line)?
                .ok_or_else(|| self.err(raw.line, format!("{ctx}op"), "missing"))?;
            let allowed = op_fields(&op_name).ok_or_else(|| {
                self.err(
                    self.field(t, "op").map_or(raw.line, |f| f.line),
                    format!("{ctx}op"),
                    format!("unknown op '{op_name}' (see docs/model-format.md)"),
                )
            })?;
            for (k, item) in t.iter() {
                if !COMMON_FIELDS.contains(&k) && !allowed.contains(&k) {
                    return Err(self.err(
                        self.line_of(item.span()).max(raw.line),
                        format!("{ctx}{k}"),
                        format!("unknown field for op {op_name}"),
                    ));
                }
            }
            let mut op = self.parse_op(raw, &op_name, &ctx)?;
            self.scale.apply(&mut op);
            let (class, loop_id) = classes[i];
            let input_names: Vec<(String, usize)> = match self.field(t, "inputs") {
                None => Vec::new(),
                Some(f) => match f.value.as_array() {
                    Some(a) => a
                        .iter()
                        .map(|v| {
                            v.as_str().map(|s| (s.to_string(), f.line)).ok_or_else(|| {
                                self.err(
                                    f.line,
                                    format!("{ctx}inputs"),
                                    "expected a list of node names",
                                )
                            })
                        })
                        .collect::<Result<_>>()?,
                    None => {
                        return Err(self.err(
                            f.line,
                            format!("{ctx}inputs"),
                            "expected a list of node names",
                        ))
                    }
                },
            };
            if matches!(op, Op::Input { .. }) != input_names.is_empty() {
                return Err(self.err(
                    raw.line,
                    format!("{ctx}inputs"),
                    if input_names.is_empty() {
                        "missing (only op input has no inputs)"
                    } else {
                        "an input node takes no inputs"
                    },
                ));
            }
            if let Op::Input { rows, .. } = &op {
                if loop_id.is_some() {
                    return Err(self.err(raw.line, format!("{ctx}class"), "inputs are static"));
                }
                if matches!(rows, Rows::Src { .. }) && seq.is_none() {
                    return Err(self.err(
                        raw.line,
                        format!("{ctx}seq"),
                        "seq = \"src\" needs a [seq2seq] table",
                    ));
                }
            }
            let mut refs = Vec::new();
            for (iname, iline) in &input_names {
                let (base, prev) = match iname.strip_suffix("@prev") {
                    Some(b) => (b, true),
                    None => (iname.as_str(), false),
                };
                let field = format!("{ctx}inputs");
                let pid = *by_name
                    .get(base)
                    .ok_or_else(|| self.err(*iline, &field, format!("unknown node '{base}'")))?;
                let (pclass, ploop) = classes[pid.idx()];
                if prev {
                    if loop_id.is_none() || ploop != loop_id {
                        return Err(self.err(
                            *iline,
                            &field,
                            format!("'{iname}': @prev reads a node of the same loop"),
                        ));
                    }
                    if pid.idx() == i {
                        return Err(self.err(
                            *iline,
                            &field,
                            "a node cannot read itself (an lstm keeps its own state)",
                        ));
                    }
                } else if pid.idx() >= i {
                    return Err(self.err(
                        *iline,
                        &field,
                        format!("'{base}' is not defined before this node (inputs must come earlier; use {base}@prev for the previous step)"),
                    ));
                } else if pclass == Class::Decoder && ploop != loop_id {
                    return Err(self.err(
                        *iline,
                        &field,
                        format!(
                            "'{base}' is a decoder-loop value; it cannot be read outside its loop"
                        ),
                    ));
                }
                let _ = class;
                refs.push((pid, prev, *iline));
            }
            let tied_table = match &op {
                Op::Linear { tied: Some(n), .. } | Op::Embedding { tied: Some(n), .. } => {
                    let tid = by_name
                        .get(n.as_str())
                        .filter(|id| id.idx() < i)
                        .ok_or_else(|| {
                            self.err(
                                raw.line,
                                format!("{ctx}tied"),
                                format!("'{n}' is not an earlier node"),
                            )
                        })?;
                    match &pend[tid.idx()].op {
                        Op::Embedding {
                            vocab,
                            dim,
                            tied: None,
                            ..
                        } => Some((*vocab, *dim)),
                        _ => {
                            return Err(self.err(
                                raw.line,
                                format!("{ctx}tied"),
                                format!("'{n}' is not an embedding that owns its table"),
                            ))
                        }
                    }
                }
                _ => None,
            };
            pend.push(Pending {
                op,
                refs,
                tied_table,
            });
        }
        // pass 3: shapes. Loops may feed values back with @prev, so shapes are found by a fixpoint:
        // a loop node whose inputs are not all known yet gets the output its op alone implies, and
        // the sweep repeats until every node is inferred from known inputs and nothing changes.
        let n = raws.len();
        let mut outs: Vec<Option<TensorShape>> = vec![None; n];
        let mut done: Vec<Option<Resolved>> = vec![None; n];
        for _sweep in 0..n + 2 {
            let mut changed = false;
            for i in 0..n {
                let raw = &raws[i];
                let ctx = format!("node '{}': ", raw.name);
                let (class, loop_id) = classes[i];
                let my_div = loop_id.map_or(1, |l| loops[l.0 as usize].div);
                let p = &pend[i];
                let reverse = matches!(p.op, Op::Lstm { reverse: true, .. });
                let mut inputs = Vec::new();
                let mut shapes = Vec::new();
                let mut known = true;
                for &(pid, prev, iline) in &p.refs {
                    let Some(pshape) = outs[pid.idx()].clone() else {
                        known = false;
                        break;
                    };
                    let (_, ploop) = classes[pid.idx()];
                    let field = format!("{ctx}inputs");
                    let (view, shape) = if prev {
                        (View::Prev, pshape)
                    } else if ploop.is_some() && ploop == loop_id {
                        (View::Same, pshape)
                    } else {
                        let (collected, seen) = match ploop {
                            Some(pl) => (
                                true,
                                TensorShape::new(
                                    Rows::Src {
                                        div: loops[pl.0 as usize].div,
                                    },
                                    pshape.feat.clone(),
                                ),
                            ),
                            None => (false, pshape),
                        };
                        match (class, seen.rows) {
                            (Class::Encoder, Rows::Src { div }) => {
                                if my_div % div != 0 {
                                    return Err(self.err(iline, &field, format!("loop div {my_div} is not a multiple of the input's div {div}")));
                                }
                                let ratio = my_div / div;
                                let mut feat = seen.feat.clone();
                                if feat.len() != 1 {
                                    return Err(self.err(
                                        iline,
                                        &field,
                                        "encoder loops read sequences of vectors",
                                    ));
                                }
                                feat[0] *= ratio as usize;
                                let view = if collected {
                                    View::CollectedStepRows { ratio, reverse }
                                } else {
                                    View::StepRows { ratio, reverse }
                                };
                                (view, TensorShape::new(Rows::One, feat))
                            }
                            (Class::Encoder, Rows::Fixed(_)) => {
                                return Err(self.err(
                                    iline,
                                    &field,
                                    "encoder loops cannot step through a fixed-length sequence",
                                ))
                            }
                            _ => (
                                if collected {
                                    View::Collected
                                } else {
                                    View::Same
                                },
                                seen,
                            ),
                        }
                    };
                    inputs.push(Input { node: pid, view });
                    shapes.push(shape);
                }
                let new_out = if known {
                    let (out, cost) = infer(&p.op, &shapes, class == Class::Decoder, p.tied_table)
                        .map_err(|m| {
                            self.err(raw.line, format!("{ctx}op {}", p.op.kind_name()), m.0)
                        })?;
                    if loop_id.is_some() && out.rows != Rows::One {
                        return Err(self.err(
                            raw.line,
                            format!("{ctx}class"),
                            "a loop node must produce one row per step",
                        ));
                    }
                    done[i] = Some((inputs, shapes, cost));
                    Some(out)
                } else if loop_id.is_some() {
                    done[i] = None;
                    op_implied_row(&p.op).map(|f| TensorShape::new(Rows::One, f))
                } else {
                    done[i] = None;
                    None
                };
                if new_out != outs[i] {
                    outs[i] = new_out;
                    changed = true;
                }
            }
            if !changed && done.iter().all(Option::is_some) {
                break;
            }
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(n);
        for i in 0..n {
            let raw = &raws[i];
            let (Some(out), Some((inputs, in_shapes, cost))) = (outs[i].clone(), done[i].take())
            else {
                return Err(self.err(
                    raw.line,
                    format!("node '{}': inputs", raw.name),
                    "shapes cannot be resolved: an @prev cycle gives no op a known output width",
                ));
            };
            let (class, loop_id) = classes[i];
            let op = pend[i].op.clone();
            let keys = match &op {
                Op::Attention { mode, .. } => match mode {
                    AttnMode::SelfAttn if class == Class::Decoder => Keys::Cache,
                    AttnMode::SelfAttn => Keys::OwnRows,
                    _ => Keys::Seq(in_shapes[1].rows),
                },
                _ => Keys::None,
            };
            nodes.push(Node {
                id: NodeId(i as u32),
                name: raw.name.clone(),
                op,
                class,
                loop_id,
                inputs,
                in_shapes,
                out,
                cost,
                line: raw.line,
                keys,
            });
        }
        if !nodes.iter().any(|n| matches!(n.op, Op::Input { .. })) {
            return Err(self.err(1, "node", "the model has no input node"));
        }
        if seq.is_some() && !loops.iter().any(|l| l.class == Class::Decoder) {
            return Err(self.err(1, "seq2seq", "a seq2seq model needs a decoder loop"));
        }
        if let Some(s) = &seq {
            if s.ref_enc > s.max_enc || s.ref_dec > s.max_dec {
                return Err(self.err(1, "seq2seq", "reference lengths exceed the maximum lengths"));
            }
        }
        let parts = vec![super::Part {
            name: name.clone(),
            first: NodeId(0),
            end: nodes.len() as u32,
            seq: seq.clone(),
        }];
        let node_part = vec![0; nodes.len()];
        Ok(Model {
            name,
            description,
            source,
            max_batch,
            seq,
            nodes,
            loops,
            parts,
            node_part,
        })
    }
}
