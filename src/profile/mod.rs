//! The per-node latency table (node × batch size) that the slack predictor and the Oracle read:
//! its data, lookups, saving and loading. Measuring it on a device is
//! [`crate::device::measure`]'s; the paper's
//! Algorithm 1 over it (a request's single-input latency, the whole-graph batching curve) is the
//! predictor's, [`crate::runtime::Predictor`], the one place it is computed.

use crate::error::{Error, Result};
use crate::graph::{Lengths, Model, NodeId};
use crate::time::Nanos;
use serde::{Deserialize, Serialize};

/// One node's row of the table.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NodeProfile {
    /// Node index.
    pub id: u32,
    /// Node name.
    pub name: String,
    /// Op name.
    pub op: String,
    /// static / encoder / decoder.
    pub class: String,
    /// Latency in nanoseconds for batch 1..=max_batch.
    pub latency_ns: Vec<u64>,
    /// NPU only: compute cycles per batch size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compute_cycles: Vec<u64>,
    /// NPU only: DRAM cycles per batch size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_cycles: Vec<u64>,
    /// Nodes whose cost depends on the encoder length: the latency at batch 1 for encoder
    /// lengths 1..=max_enc (model steps), so that the predictor prices a request at its own
    /// length. Empty for every other node (and in tables saved before it existed, which the
    /// predictor then prices at the profiled length).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enc_latency_ns: Vec<u64>,
}

/// A device's per-node latency table for one model.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    /// Model name.
    pub model: String,
    /// Device name.
    pub device: String,
    /// Largest batch profiled.
    pub max_batch: u32,
    /// Lengths the length-dependent nodes were profiled at (decoder nodes at the middle step,
    /// which is their average cost over `dec` steps).
    pub lengths: Lengths,
    /// One row per node, in model order.
    pub nodes: Vec<NodeProfile>,
    /// A real device: what a pass costs more after the device idled, at a few measured gaps
    /// (ascending); empty for a virtual device (and in tables saved before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after_idle: Vec<AfterIdle>,
    /// A real device: how long a request's whole pass alone at `lengths` took, back to back,
    /// sorted ([`crate::device::measure::pass_times`]): the spread of its time that the table's medians do
    /// not show; empty for a virtual device (and in tables saved before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passes_ns: Vec<u64>,
    /// The factor the table device prices every node at (`device/table.rs`, "Level"): a
    /// number, or `"passes"` for the one the table's passes give; absent, 1 (the nodes as
    /// listed). `validate` prints the level the passes give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<Level>,
}

/// A table's level ([`Profile::level`]): a factor, or the one its passes give.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "serde_json::Value", into = "serde_json::Value")]
pub enum Level {
    /// Every node priced at this factor.
    Factor(f64),
    /// The median pass of `passes_ns` over the same pass priced from the nodes.
    Passes,
}

impl TryFrom<serde_json::Value> for Level {
    type Error = String;

    fn try_from(v: serde_json::Value) -> std::result::Result<Level, String> {
        match &v {
            serde_json::Value::Number(n) => n.as_f64().map(Level::Factor),
            serde_json::Value::String(s) if s == "passes" => Some(Level::Passes),
            _ => None,
        }
        .ok_or_else(|| format!("level: {v} is neither a number nor \"passes\""))
    }
}

impl From<Level> for serde_json::Value {
    fn from(l: Level) -> serde_json::Value {
        match l {
            Level::Factor(f) => serde_json::json!(f),
            Level::Passes => serde_json::json!("passes"),
        }
    }
}

/// What one request's first pass cost more, node by node, after the device idled for `gap_ns`
/// than back to back ([`crate::device::measure::after_idle`]): a real device's helper threads park, its caches
/// and clocks cool (`docs/validate.md`). The table device adds it to each node's first run
/// after such a gap.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AfterIdle {
    /// The idle gap before the pass, in nanoseconds.
    pub gap_ns: u64,
    /// Per node in model order: its first run's median after the gap minus its median back
    /// to back, at batch 1 (signed: a difference of two medians of noisy runs).
    pub extra_ns: Vec<i64>,
}

impl Profile {
    /// Writes the table as JSON.
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        let text =
            serde_json::to_string_pretty(self).map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))
    }

    /// Reads a table written by [`Profile::save`].
    pub fn load(path: &std::path::Path) -> Result<Profile> {
        let text = crate::files::read_text(path, crate::files::PROFILE)?;
        serde_json::from_str(&text).map_err(|e| Error::ConfigFile {
            file: path.to_path_buf(),
            line: e.line(),
            msg: e.to_string(),
        })
    }

    /// A table where every node takes `each` at every batch size: for runs whose policies do not
    /// consult the predictor (verification).
    pub fn uniform(model: &Model, max_batch: u32, each: Nanos) -> Profile {
        Profile {
            model: model.name.clone(),
            device: "uniform".into(),
            max_batch,
            lengths: model.ref_lengths(),
            after_idle: Vec::new(),
            passes_ns: Vec::new(),
            level: None,
            nodes: model
                .nodes
                .iter()
                .map(|n| NodeProfile {
                    id: n.id.0,
                    name: n.name.clone(),
                    op: n.op.kind_name().to_string(),
                    class: n.class.to_string(),
                    latency_ns: vec![each.0; max_batch as usize],
                    compute_cycles: Vec::new(),
                    memory_cycles: Vec::new(),
                    enc_latency_ns: Vec::new(),
                })
                .collect(),
        }
    }

    /// Checks the table belongs to `model` (same node names, in order).
    pub(crate) fn check_matches(&self, model: &Model) -> Result<()> {
        if self.model != model.name
            || self.nodes.len() != model.nodes.len()
            || self
                .nodes
                .iter()
                .zip(&model.nodes)
                .any(|(p, n)| p.name != n.name)
            || self
                .nodes
                .iter()
                .any(|p| p.latency_ns.len() != self.max_batch as usize)
        {
            return Err(Error::invalid(
                "profile",
                format!(
                    "the table is for '{}', not for model '{}' (or it is malformed)",
                    self.model, model.name
                ),
            ));
        }
        Ok(())
    }

    /// Refuses this table (read from `file`) for `model` at `max_batch`, naming the field and
    /// what was expected: another model (or width, or resolution: they are in its name), nodes
    /// missing, renamed or reordered, rows of another length than `max_batch` says, a batch
    /// range that does not reach `max_batch`, or a co-located composition (its parts' lengths are
    /// not in the table).
    pub fn check_for(&self, model: &Model, max_batch: u32, file: &std::path::Path) -> Result<()> {
        let bad = |field: String, msg: String| Error::ProfileFile {
            file: file.to_path_buf(),
            field,
            msg,
        };
        if self.model != model.name {
            return Err(bad(
                "model".into(),
                format!(
                    "the table is for '{}', the run's model is '{}' (profile that model, at that width and resolution)",
                    self.model, model.name
                ),
            ));
        }
        if model.parts.len() > 1 {
            return Err(bad(
                "model".into(),
                "a co-located composition: its parts' profiled lengths are not in a table; give each model its own".into(),
            ));
        }
        if let Some(Level::Factor(level)) = self.level {
            if !(level.is_finite() && level > 0.0 && level <= 100.0) {
                return Err(bad(
                    "level".into(),
                    format!("{level}: the factor every node is priced at must be in (0, 100] (or \"passes\"; leave it out for 1)"),
                ));
            }
        }
        if self.nodes.len() != model.nodes.len() {
            return Err(bad(
                "nodes".into(),
                format!(
                    "{} rows, the model has {} nodes",
                    self.nodes.len(),
                    model.nodes.len()
                ),
            ));
        }
        for (k, (p, n)) in self.nodes.iter().zip(&model.nodes).enumerate() {
            if p.name != n.name {
                return Err(bad(
                    format!("nodes[{k}].name"),
                    format!("'{}' where the model's node {k} is '{}'", p.name, n.name),
                ));
            }
            if p.latency_ns.len() != self.max_batch as usize {
                return Err(bad(
                    format!("nodes[{k}].latency_ns"),
                    format!(
                        "{} values, max_batch says {}",
                        p.latency_ns.len(),
                        self.max_batch
                    ),
                ));
            }
        }
        for (k, row) in self.after_idle.iter().enumerate() {
            if row.extra_ns.len() != self.nodes.len() {
                return Err(bad(
                    format!("after_idle[{k}].extra_ns"),
                    format!(
                        "{} values, the table has {} nodes",
                        row.extra_ns.len(),
                        self.nodes.len()
                    ),
                ));
            }
            if k > 0 && row.gap_ns <= self.after_idle[k - 1].gap_ns {
                return Err(bad(
                    format!("after_idle[{k}].gap_ns"),
                    format!(
                        "{} after {}: the gaps must ascend",
                        row.gap_ns,
                        self.after_idle[k - 1].gap_ns
                    ),
                ));
            }
        }
        if self.max_batch < max_batch {
            return Err(bad(
                "max_batch".into(),
                format!(
                    "the table reaches batch {}, the run asks for max batch {max_batch} (profile up to it, or lower the max batch)",
                    self.max_batch
                ),
            ));
        }
        Ok(())
    }

    /// Latency of `node` at batch 1 for a request of encoder length `enc` (clamped to the
    /// curve): the encoder-length curve where the node has one, else the profiled latency.
    pub(crate) fn latency_at_enc(&self, node: NodeId, enc: u32) -> Nanos {
        let row = &self.nodes[node.idx()];
        match row.enc_latency_ns.len() {
            0 => self.latency(node, 1),
            n => Nanos(row.enc_latency_ns[(enc.max(1) as usize).min(n) - 1]),
        }
    }

    /// Latency of `node` at `batch` (clamped to the profiled range): a table read.
    pub fn latency(&self, node: NodeId, batch: u32) -> Nanos {
        let row = &self.nodes[node.idx()].latency_ns;
        let b = batch.clamp(1, self.max_batch) as usize;
        Nanos(row[b - 1])
    }
}
