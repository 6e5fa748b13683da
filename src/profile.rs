//! The per-node latency table (node × batch size) that the slack predictor and the Oracle read,
//! measured by running each node on a device for every batch size, plus the graph-wide
//! single-input latency of the paper's Algorithm 1 and the whole-graph batching curve.

use crate::device::{Device, Member, Timing};
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
        if max_batch == 0 {
            return Err(Error::invalid("max batch", "must be at least 1"));
        }
        let sizes: Vec<u32> = (1..=max_batch).collect();
        Self::measure_at(device, model, max_batch, lens, &sizes, |d, at, members| {
            d.execute(model, at, members)
        })
    }

    /// Measures a real device: every node at batch sizes 1, 2, 4, … and `max_batch`, the median
    /// of `reps` runs each after one warm-up run, with the sizes in between interpolated
    /// linearly (measuring all 64 sizes of a full network would take minutes for little
    /// information). Nodes of part `p` run at `lens[p]` (the first length for parts beyond).
    pub fn measure_sampled(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        lens: &[Lengths],
        reps: u32,
    ) -> Result<Profile> {
        if max_batch == 0 || reps == 0 {
            return Err(Error::invalid(
                "max batch / repetitions",
                "must be at least 1",
            ));
        }
        let mut sizes: Vec<u32> = std::iter::successors(Some(1u32), |b| b.checked_mul(2))
            .take_while(|&b| b < max_batch)
            .collect();
        sizes.push(max_batch);
        let mut runs = Vec::with_capacity(reps as usize);
        Self::measure_at(device, model, max_batch, lens, &sizes, |d, at, members| {
            // one untimed run first: the first touch of freshly allocated buffers faults pages in
            d.execute(model, at, members)?;
            runs.clear();
            for _ in 0..reps {
                runs.push(d.execute(model, at, members)?.time.0);
            }
            runs.sort_unstable();
            Ok(Timing {
                time: Nanos(runs[runs.len() / 2]),
                ..Timing::default()
            })
        })
    }

    /// Prepares `device` and times every node of `model` with `time` at the batch sizes `sizes`
    /// (ascending, the last `max_batch`), each node of part `p` at lengths `lens[p]` (its
    /// middle decoder step for decoder nodes); sizes in between are interpolated linearly. A
    /// virtual device measured at every size also records its cycle counts.
    fn measure_at(
        device: &mut dyn Device,
        model: &Model,
        max_batch: u32,
        lens: &[Lengths],
        sizes: &[u32],
        mut time: impl FnMut(&mut dyn Device, NodeStep, &[Member]) -> Result<Timing>,
    ) -> Result<Profile> {
        let len = lens.first().copied().unwrap_or_default();
        device.prepare(model, max_batch)?;
        let cycles = device.is_virtual() && sizes.len() == max_batch as usize;
        let mut nodes = Vec::with_capacity(model.nodes.len());
        let mut measured = Vec::with_capacity(sizes.len());
        for n in &model.nodes {
            let len = lens.get(model.part_of(n.id)).copied().unwrap_or(len);
            let mid = len.dec.saturating_sub(1) / 2;
            let step = if n.class == Class::Decoder { mid } else { 0 };
            let at = NodeStep { node: n.id, step };
            measured.clear();
            for &b in sizes {
                let members: Vec<Member> = (0..b)
                    .map(|slot| Member {
                        slot,
                        len,
                        input: u64::from(slot),
                        step,
                    })
                    .collect();
                measured.push(time(&mut *device, at, &members)?);
            }
            let latency_ns: Vec<u64> = (1..=max_batch)
                .map(|b| {
                    let j = sizes.partition_point(|&s| s < b);
                    if sizes[j] == b || j == 0 {
                        measured[j].time.0
                    } else {
                        let (b0, b1) = (f64::from(sizes[j - 1]), f64::from(sizes[j]));
                        let (t0, t1) = (measured[j - 1].time.0 as f64, measured[j].time.0 as f64);
                        (t0 + (t1 - t0) * (f64::from(b) - b0) / (b1 - b0)).round() as u64
                    }
                })
                .collect();
            let per_size = |f: fn(&Timing) -> u64| -> Vec<u64> {
                if cycles {
                    measured.iter().map(f).collect()
                } else {
                    Vec::new()
                }
            };
            let enc_latency_ns = if model.node_depends_on_enc(n.id) {
                enc_curve(&mut *device, model, at, len, latency_ns[0])?
            } else {
                Vec::new()
            };
            nodes.push(NodeProfile {
                id: n.id.0,
                name: n.name.clone(),
                op: n.op.kind_name().to_string(),
                class: n.class.to_string(),
                latency_ns,
                compute_cycles: per_size(|t| t.compute_cycles),
                memory_cycles: per_size(|t| t.memory_cycles),
                enc_latency_ns,
            });
        }
        Ok(Profile {
            model: model.name.clone(),
            device: device.description(),
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
                    enc_latency_ns: Vec::new(),
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

    /// Latency of `node` at batch 1 for a request of encoder length `enc` (clamped to the
    /// curve): the encoder-length curve where the node has one, else the profiled latency.
    pub fn latency_at_enc(&self, node: NodeId, enc: u32) -> Nanos {
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

    /// Whole-graph latency of a batch of `batch` requests of lengths `len`, every node at
    /// `batch` (Algorithm 1 with the batched table). A node that depends on the encoder length
    /// takes its encoder-length curve's time at `len.enc`, scaled at batch b by its batch-b to
    /// batch-1 ratio at the profiled length.
    pub fn graph_latency(&self, model: &Model, batch: u32, len: Lengths) -> Nanos {
        model
            .nodes
            .iter()
            .map(|n| {
                let at_b = self.latency(n.id, batch).0;
                let t = if self.nodes[n.id.idx()].enc_latency_ns.is_empty() {
                    at_b
                } else {
                    let one = self.latency(n.id, 1).0.max(1) as f64;
                    let own = self.latency_at_enc(n.id, len.enc).0 as f64;
                    (at_b as f64 * own / one).round() as u64
                };
                Nanos(t * u64::from(model.repeats(n.id, len)))
            })
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

/// The batch-1 latency of a node whose cost depends on the encoder length, for every encoder
/// length 1..=max_enc of its model: executed on a virtual device (exact and cheap); on a real
/// device, the latency measured at `len` (`at_len`) scaled by the node's own work at each
/// length ([`crate::graph::NodeCost::work_proxy`]), since timing every length of every such
/// node would take minutes.
fn enc_curve(
    device: &mut dyn Device,
    model: &Model,
    at: NodeStep,
    len: Lengths,
    at_len: u64,
) -> Result<Vec<u64>> {
    let max_enc = model.max_enc_of(at.node);
    let member = |e: u32| Member {
        slot: 0,
        len: Lengths {
            enc: e,
            dec: len.dec,
        },
        input: 0,
        step: at.step,
    };
    if device.is_virtual() {
        return (1..=max_enc)
            .map(|e| Ok(device.execute(model, at, &[member(e)])?.time.0))
            .collect();
    }
    let cost = &model.node(at.node).cost;
    let proxy = |e: u32| cost.work_proxy(&model.work(at.node, [(member(e).len, at.step)]));
    let base = proxy(len.enc).max(1.0);
    Ok((1..=max_enc)
        .map(|e| (at_len as f64 * proxy(e) / base).round() as u64)
        .collect())
}

/// The latency of one request served alone at lengths `len`: every unit it executes, at
/// batch 1, timed by `device` (prepared for `model`). What Table II's "single-batch latency"
/// measures; Algorithm 1 over a profile estimates it.
pub fn alone_latency(device: &mut dyn Device, model: &Model, len: Lengths) -> Result<Nanos> {
    let mut t = Nanos::ZERO;
    let mut at = Some(model.first_step());
    while let Some(u) = at {
        let member = Member {
            slot: 0,
            len,
            input: 0,
            step: u.step,
        };
        t += device.execute(model, u, &[member])?.time;
        at = model.next_step(u, len);
    }
    Ok(t)
}

/// [`alone_latency`] averaged over the WMT 2019 newstest En→De length pairs (each pair's
/// lengths converted to the model's steps as requests' are), with the mean source and target
/// lengths in words. For a static model: its latency alone, and no lengths.
pub fn wmt19_mean_alone_latency(
    device: &mut dyn Device,
    model: &Model,
) -> Result<(Nanos, Option<(f64, f64)>)> {
    let Some(seq) = &model.seq else {
        return Ok((alone_latency(device, model, model.ref_lengths())?, None));
    };
    let joint = crate::runtime::lengths::JointLengths::wmt19()?;
    let (mut sum, mut count) = (0.0f64, 0u64);
    for ((en, de), n) in joint.pairs() {
        let len = Lengths {
            enc: crate::runtime::lengths::to_steps(en, seq.enc_scale, seq.max_enc),
            dec: crate::runtime::lengths::to_steps(de, seq.dec_scale, seq.max_dec),
        };
        sum += alone_latency(device, model, len)?.0 as f64 * n as f64;
        count += n;
    }
    let mean = Nanos((sum / count.max(1) as f64).round() as u64);
    Ok((mean, Some(joint.mean_words())))
}
