//! Reads a model file (TOML, see `docs/model-format.md`), validates it — known ops and fields,
//! names defined before use, shapes that agree along every edge, well-formed loops — and builds a
//! [`Model`]. Every error names the file, the line and the field.

mod build;
mod ops;

use super::infer::{infer, op_implied_row};
use super::op::{numel, Act, AttnMode, NodeCost, Op, PoolKind, PosEnc, MAX_ROW_ELEMS};
use super::shape::{Rows, TensorShape};
use super::{Class, Input, Keys, Loop, LoopId, Model, Node, NodeId, SeqConfig, View};
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use toml_edit::{ImDocument, Item, Table, Value};

/// Fields every node may carry; each op adds its own (see [`op_fields`]).
const COMMON_FIELDS: &[&str] = &["name", "op", "inputs", "class", "loop", "div", "shares"];

/// Parses model text. `file` is used in error messages only.
pub fn parse_model(text: &str, file: &Path) -> Result<Model> {
    parse_model_scaled(text, file, Scale::default())
}

/// Parses model text and shrinks (or grows) it by `scale` before shape inference, so that every
/// edge of the reduced variant is checked like the original's.
pub(crate) fn parse_model_scaled(text: &str, file: &Path, scale: Scale) -> Result<Model> {
    scale.validate()?;
    let mut m = Parser {
        text,
        line_starts: std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect(),
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

/// Reads and parses a model file, scaled.
pub(crate) fn load_model_file_scaled(path: &Path, scale: Scale) -> Result<Model> {
    let text = crate::files::read_text(path, crate::files::MODEL_TOML)?;
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
                return Err(Error::invalid(
                    what,
                    format!("must be in (0, 1], got {}", crate::error::num(v)),
                ));
            }
        }
        Ok(())
    }

    /// The suffix that names the variant (`w0.125` / `w0.125r0.25`).
    pub(crate) fn tag(&self) -> String {
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

/// The largest size, count or index a model file may give (2²⁴).
pub(crate) const MAX_DIM: usize = 1 << 24;
/// The largest maximum batch a model (or a run) may ask for.
pub const MAX_BATCH: u32 = 4096;
/// The longest encoder or decoder a model may declare (steps).
pub(crate) const MAX_STEPS: u32 = 4096;

struct Parser<'a> {
    text: &'a str,
    /// Byte offset of every line's start (line numbers in O(log n), so reading is linear).
    line_starts: Vec<usize>,
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
            Some(r) => self.line_starts.partition_point(|&s| s <= r.start),
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
        // sizes, counts and steps; the model's batch and sequence limits are tighter
        let max = match (ctx, key) {
            ("", "max_batch") => MAX_BATCH as i64,
            ("seq2seq.", _) => MAX_STEPS as i64,
            _ => MAX_DIM as i64,
        };
        let zero_ok = key == "padding" || key == "row" || key == "token_types";
        let min = if zero_ok { 0 } else { 1 };
        match self.field(t, key) {
            None => Ok(None),
            Some(f) => match f.value.as_integer() {
                Some(i) if (min..=max).contains(&i) => Ok(Some(i as usize)),
                _ => Err(self.err(
                    f.line,
                    format!("{ctx}{key}"),
                    format!("expected an integer in [{min}, {max}]"),
                )),
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
        if let Err(why) = crate::files::check_name(&name) {
            let line = root.get("name").map_or(1, |i| self.line_of(i.span()));
            return Err(self.err(line, "name", &why));
        }
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
        let header = build::Header {
            name,
            description,
            source,
            max_batch,
            seq,
        };
        self.build(header, &raw_nodes)
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
                "max_context",
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
        if !super::LENGTH_DISTRIBUTIONS.contains(&lengths.as_str()) {
            return Err(self.err(
                line,
                "seq2seq.lengths",
                format!(
                    "unknown length distribution '{lengths}' (known: {})",
                    super::LENGTH_DISTRIBUTIONS.join(", ")
                ),
            ));
        }
        let g = |k: &str, d: usize| -> Result<u32> {
            Ok(self.get_uint(t, k, "seq2seq.")?.unwrap_or(d) as u32)
        };
        let max_context = match self.get_uint(t, "max_context", "seq2seq.")? {
            None => None,
            Some(n) if n >= 2 => Some(n as u32),
            Some(_) => {
                return Err(self.err(
                    self.field(t, "max_context").map_or(line, |f| f.line),
                    "seq2seq.max_context",
                    format!("expected an integer in [2, {MAX_STEPS}]"),
                ))
            }
        };
        Ok(SeqConfig {
            lengths,
            enc_scale: self.get_float(t, "enc_scale", "seq2seq.")?.unwrap_or(1.0),
            dec_scale: self.get_float(t, "dec_scale", "seq2seq.")?.unwrap_or(1.0),
            ref_enc: g("ref_enc", 30)?,
            ref_dec: g("ref_dec", 30)?,
            max_enc: g("max_enc", 80)?,
            max_dec: g("max_dec", 80)?,
            max_context,
            // set from the graph once its nodes are known (Parser::build)
            prefill_token: false,
        })
    }
}
