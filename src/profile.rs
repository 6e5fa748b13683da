//! The per-node latency table (node × batch size) that the slack predictor and the Oracle read,
//! measured by running each node on a device for every batch size, plus the graph-wide
//! single-input latency of the paper's Algorithm 1 and the whole-graph batching curve.

use crate::device::{Device, Member};
use crate::error::{Error, Result};
use crate::graph::{Class, Lengths, Model, NodeId, NodeStep};
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
}

impl Profile {
    /// Measures every node at every batch size 1..=`max_batch` on `device`, at lengths `len`.
    pub fn measure(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        len: Lengths,
    ) -> Result<Profile> {
        Self::measure_parts(device, model, max_batch, &vec![len; model.parts.len()])
    }

    /// [`Profile::measure`] for co-located models: each model's nodes at its own lengths.
    pub fn measure_parts(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        lens: &[Lengths],
    ) -> Result<Profile> {
        let len = lens.first().copied().unwrap_or_default();
        if max_batch == 0 {
            return Err(Error::invalid("max batch", "must be at least 1"));
        }
        device.prepare(model, max_batch)?;
        let mut nodes = Vec::with_capacity(model.nodes.len());
        for n in &model.nodes {
            let len = lens.get(model.part_of(n.id)).copied().unwrap_or(len);
            let mid = len.dec.saturating_sub(1) / 2;
            let step = if n.class == Class::Decoder { mid } else { 0 };
            let at = NodeStep { node: n.id, step };
            let mut row = NodeProfile {
                id: n.id.0,
                name: n.name.clone(),
                op: n.op.kind_name().to_string(),
                class: n.class.to_string(),
                latency_ns: Vec::with_capacity(max_batch as usize),
                compute_cycles: Vec::new(),
                memory_cycles: Vec::new(),
            };
            for b in 1..=max_batch {
                let members: Vec<Member> = (0..b)
                    .map(|slot| Member {
                        slot,
                        len,
                        input: u64::from(slot),
                        step: at.step,
                    })
                    .collect();
                let t = device.execute(model, at, &members)?;
                row.latency_ns.push(t.time.0);
                if device.is_virtual() {
                    row.compute_cycles.push(t.compute_cycles);
                    row.memory_cycles.push(t.memory_cycles);
                }
            }
            nodes.push(row);
        }
        Ok(Profile {
            model: model.name.clone(),
            device: device.name().to_string(),
            max_batch,
            lengths: len,
            nodes,
        })
    }

    /// Measures a real device: every node at batch sizes 1, 2, 4, … and `max_batch`, the median
    /// of `reps` runs each after one warm-up run, with the sizes in between interpolated linearly (measuring all 64
    /// sizes of a full network would take minutes for little information).
    pub fn measure_sampled(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        len: Lengths,
        reps: u32,
    ) -> Result<Profile> {
        if max_batch == 0 || reps == 0 {
            return Err(Error::invalid(
                "max batch / repetitions",
                "must be at least 1",
            ));
        }
        device.prepare(model, max_batch)?;
        let mut sizes: Vec<u32> = std::iter::successors(Some(1u32), |b| b.checked_mul(2))
            .take_while(|&b| b < max_batch)
            .collect();
        sizes.push(max_batch);
        let mid = len.dec.saturating_sub(1) / 2;
        let mut nodes = Vec::with_capacity(model.nodes.len());
        for n in &model.nodes {
            let step = if n.class == Class::Decoder { mid } else { 0 };
            let at = NodeStep { node: n.id, step };
            let mut measured = Vec::with_capacity(sizes.len());
            for &b in &sizes {
                let members: Vec<Member> = (0..b)
                    .map(|slot| Member {
                        slot,
                        len,
                        input: u64::from(slot),
                        step: at.step,
                    })
                    .collect();
                // one untimed run first: the first touch of freshly allocated buffers faults pages in
                device.execute(model, at, &members)?;
                let mut runs = Vec::with_capacity(reps as usize);
                for _ in 0..reps {
                    runs.push(device.execute(model, at, &members)?.time.0);
                }
                runs.sort_unstable();
                measured.push(runs[runs.len() / 2]);
            }
            let mut latency_ns = Vec::with_capacity(max_batch as usize);
            for b in 1..=max_batch {
                let j = sizes.partition_point(|&s| s < b);
                let v = if sizes[j] == b || j == 0 {
                    measured[j]
                } else {
                    let (b0, b1) = (f64::from(sizes[j - 1]), f64::from(sizes[j]));
                    let (t0, t1) = (measured[j - 1] as f64, measured[j] as f64);
                    (t0 + (t1 - t0) * (f64::from(b) - b0) / (b1 - b0)).round() as u64
                };
                latency_ns.push(v);
            }
            nodes.push(NodeProfile {
                id: n.id.0,
                name: n.name.clone(),
                op: n.op.kind_name().to_string(),
                class: n.class.to_string(),
                latency_ns,
                compute_cycles: Vec::new(),
                memory_cycles: Vec::new(),
            });
        }
        Ok(Profile {
            model: model.name.clone(),
            device: device.name().to_string(),
            max_batch,
            lengths: len,
            nodes,
        })
    }

    /// Writes the table as JSON.
    pub fn save(&self, path: &std::path::Path) -> Result<()> {
        let text =
            serde_json::to_string_pretty(self).map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))
    }

    /// Reads a table written by [`Profile::save`].
    pub fn load(path: &std::path::Path) -> Result<Profile> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
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
                })
                .collect(),
        }
    }

    /// Checks the table belongs to `model` (same node names, in order).
    pub fn check_matches(&self, model: &Model) -> Result<()> {
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

    /// Latency of `node` at `batch` (clamped to the profiled range): a table read.
    pub fn latency(&self, node: NodeId, batch: u32) -> Nanos {
        let row = &self.nodes[node.idx()].latency_ns;
        let b = batch.clamp(1, self.max_batch) as usize;
        Nanos(row[b - 1])
    }

    /// Whole-graph latency of a batch of `batch` requests of lengths `len`, every node at
    /// `batch` (Algorithm 1 with the batched table).
    pub fn graph_latency(&self, model: &Model, batch: u32, len: Lengths) -> Nanos {
        model
            .nodes
            .iter()
            .map(|n| Nanos(self.latency(n.id, batch).0 * u64::from(model.repeats(n.id, len))))
            .sum()
    }

    /// The paper's Algorithm 1: single-input latency, STATIC nodes once, ENCODER nodes ×
    /// enc_timesteps, DECODER nodes × dec_timesteps.
    pub fn single_input_latency(&self, model: &Model, len: Lengths) -> Nanos {
        self.graph_latency(model, 1, len)
    }

    /// The batching curve: (batch, whole-graph latency, throughput in requests/s).
    pub fn batch_curve(&self, model: &Model, len: Lengths) -> Vec<(u32, Nanos, f64)> {
        (1..=self.max_batch)
            .map(|b| {
                let t = self.graph_latency(model, b, len);
                (b, t, f64::from(b) / t.as_secs().max(1e-12))
            })
            .collect()
    }
}
