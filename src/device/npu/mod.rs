//! The cycle-level NPU model: a systolic array (weight- or output-stationary, SCALE-Sim v2's fold
//! arithmetic), a vector unit for everything that is not a GEMM, on-chip activation and weight
//! SRAMs, and DRAM with fixed latency and bandwidth. What is modeled, exactly:
//!
//! * **Array.** A GEMM `M×K · K×N` (convs as implicit GEMM: M = batch·Hout·Wout, K = Cin·kh·kw,
//!   N = Cout) in weight-stationary mode runs `ceil(K/rows)·ceil(N/cols)` folds of
//!   `2·rows + cols + M − 2` cycles each (SCALE-Sim's count: `rows` cycles to load the fold's
//!   weights, then `rows + cols − 2` cycles of skew plus one cycle per streamed row). With
//!   `overlap_weight_load` (the default: the paper's NPU follows the TPU, whose PEs double-buffer
//!   weights fed by a weight FIFO) the next fold's weights load while the current fold streams
//!   and consecutive folds' fill and drain overlap, so a fold costs `max(M, rows)` cycles plus one
//!   exposed weight load (`rows`) and one drain (`rows + cols − 2`) per GEMM. Output-stationary mode runs
//!   `ceil(M/rows)·ceil(N/cols)` folds of `2·rows + cols + K − 2` cycles.
//! * **Vector unit.** `vector_lanes` element operations per cycle; a transcendental costs
//!   `vector_transcendental_cycles`. It runs bias/activation epilogues (overlapped with the array),
//!   pooling, norms, softmax, LSTM pointwise updates, depthwise convolutions and the attention
//!   GEMVs of single-row (decoder) queries.
//! * **Memory.** A node's weights stream from DRAM on every execution (the zoo's weights exceed
//!   the 4 MiB weight SRAM, so nothing stays resident between nodes); activations stay in the
//!   activation SRAM when a node's inputs and outputs fit in it, otherwise they stream too (in
//!   weight-stationary mode the inputs once per column fold). Embedding lookups gather their rows
//!   from DRAM. Bytes move at `dram_gbps` spread over the channels they touch.
//! * **Overlap.** Compute and memory are double-buffered: a node takes
//!   `max(compute, memory) + dram_latency_cycles` (the first tile's load is exposed), with
//!   compute = max(array, vector) for GEMM nodes with epilogues and array + vector for attention.
//!
//! Latencies of nodes whose cost depends on the batch size only are memoized per (node, batch)
//! in [`Device::prepare`]; the rest (sequence-length dependent) are a closed form of O(1).

pub mod config;

pub use config::{Dataflow, NpuConfig};

use super::{Device, Member, Timing};
use crate::error::{Error, Result};
use crate::graph::{Keys, Model, NodeId, NodeStep, Work};
use crate::time::Nanos;

/// The NPU device.
#[derive(Clone, Debug)]
pub struct Npu {
    cfg: NpuConfig,
    /// Memoized timings: `table[node][batch-1]`, empty for length-dependent nodes. Shared by
    /// clones (every simulated run clones its bench's device).
    table: std::sync::Arc<Vec<Vec<Timing>>>,
    model_name: String,
    /// Address of the prepared model's node list.
    prepared_nodes: usize,
    /// `prefix[b-1][i]`: Σ of the memoized times of nodes 0..i at batch b (0 for the others).
    prefix: std::sync::Arc<Vec<Vec<u64>>>,
    /// Per node: the first node at or after it whose time is not memoized.
    memo_end: std::sync::Arc<Vec<u32>>,
}

impl Npu {
    /// An NPU with configuration `cfg` (validated).
    pub fn new(cfg: NpuConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Npu {
            cfg,
            table: std::sync::Arc::new(Vec::new()),
            model_name: String::new(),
            prepared_nodes: 0,
            prefix: std::sync::Arc::new(Vec::new()),
            memo_end: std::sync::Arc::new(Vec::new()),
        })
    }

    /// True when the memoized tables belong to `model`: the same node list (its address,
    /// cheap) or, failing that, the same name.
    fn prepared_for(&self, model: &Model) -> bool {
        model.nodes.as_ptr() as usize == self.prepared_nodes
            && model.nodes.len() == self.table.len()
            || model.name == self.model_name
    }

    /// Cycles the systolic array needs for `count` GEMMs of `m×k · k×n`.
    pub fn gemm_cycles(&self, m: u64, n: u64, k: u64, count: u64) -> u64 {
        if m == 0 || n == 0 || k == 0 || count == 0 {
            return 0;
        }
        let (r, c) = (u64::from(self.cfg.rows), u64::from(self.cfg.cols));
        match self.cfg.dataflow {
            Dataflow::Ws => {
                let folds = k.div_ceil(r) * n.div_ceil(c) * count;
                let load = self.weight_load_cycles();
                if self.cfg.overlap_weight_load {
                    // double-buffered PE weights: fold i+1 loads while fold i streams, and
                    // consecutive folds' fill and drain overlap; one load and one drain exposed
                    load + folds * m.max(load) + (r + c - 2)
                } else {
                    folds * (load + r + c + m - 2)
                }
            }
            Dataflow::Os => {
                let folds = m.div_ceil(r) * n.div_ceil(c) * count;
                folds * (2 * r + c + k - 2)
            }
        }
    }

    /// Cycles to load one fold's weights into the array: `rows` (one PE row per cycle), or the
    /// fold's bytes at `weight_fill_gbps`.
    pub(crate) fn weight_load_cycles(&self) -> u64 {
        let r = u64::from(self.cfg.rows);
        if self.cfg.weight_fill_gbps <= 0.0 {
            return r;
        }
        let bytes = r * u64::from(self.cfg.cols) * self.cfg.bytes_per_element;
        let per_cycle = self.cfg.weight_fill_gbps * 1e3 / self.cfg.freq_mhz;
        ((bytes as f64 / per_cycle).ceil() as u64).max(1)
    }

    fn vector_cycles(&self, simple: u64, transc: u64) -> u64 {
        let ops = simple + transc * u64::from(self.cfg.vector_transcendental_cycles);
        ops.div_ceil(u64::from(self.cfg.vector_lanes))
    }

    /// DRAM cycles to move `bytes`.
    pub(crate) fn dram_cycles(&self, bytes: u64) -> u64 {
        if bytes == 0 {
            return 0;
        }
        let ch = u64::from(self.cfg.channels);
        let used = bytes.div_ceil(self.cfg.interleave_bytes).min(ch);
        let bytes_per_cycle =
            self.cfg.dram_gbps * 1e3 / self.cfg.freq_mhz * used as f64 / ch as f64;
        (bytes as f64 / bytes_per_cycle).ceil() as u64
    }

    /// Converts cycles to nanoseconds (rounded up).
    pub(crate) fn cycles_to_ns(&self, cycles: u64) -> Nanos {
        Nanos((cycles as f64 * 1e3 / self.cfg.freq_mhz).ceil() as u64)
    }

    /// The modeled timing of node `id` doing `work`.
    pub(crate) fn timing(&self, model: &Model, id: NodeId, work: &Work) -> Timing {
        let node = model.node(id);
        let c = &node.cost;
        let bpe = self.cfg.bytes_per_element;
        let (r, cols) = (u64::from(self.cfg.rows), u64::from(self.cfg.cols));
        let rows = work.rows;
        let mut array = 0;
        let mut col_passes = 1;
        if let Some(g) = c.gemm {
            array = self.gemm_cycles(g.m_per_row * rows, g.n, g.k, g.count);
            if self.cfg.dataflow == Dataflow::Ws {
                col_passes = g.n.div_ceil(cols).max(1);
            }
        }
        let simple = (c.vec_simple_per_row + c.vec_macs_per_row) * rows;
        let transc = c.vec_transc_per_row * rows;
        let mut attn_array = 0;
        let mut attn_vector = 0;
        if let Some(a) = c.attn {
            // a decoder step's one query row runs on the vector unit; whole sequences (the
            // masked one too: the array computes every tile of the scores, the vector unit's
            // softmax only the unmasked pairs) on the array
            let single_row_query = match node.keys {
                Keys::Cache | Keys::PrefixCache(_) => true,
                Keys::Seq(_) => node.loop_id.is_some(),
                Keys::None | Keys::OwnRows | Keys::Causal => false,
            };
            // softmax over every (query, key) pair and head
            let sm_simple = 3 * a.heads * work.pairs;
            let sm_transc = a.heads * work.pairs;
            if single_row_query {
                let mut s = work.pairs * (a.d + a.dv) + sm_simple;
                let mut t = sm_transc;
                if a.additive {
                    // tanh(keys + q) . v per pair and feature
                    s += 2 * work.pairs * a.d;
                    t += work.pairs * a.d;
                }
                attn_vector = self.vector_cycles(s, t);
            } else {
                let dh = a.d / a.heads.max(1);
                let fill = 2 * r + cols - 2;
                let fs = dh.div_ceil(r) * work.max_keys.div_ceil(cols);
                let fc = work.max_keys.div_ceil(r) * dh.div_ceil(cols);
                attn_array = a.heads * (fs + fc) * (u64::from(work.batch) * fill + rows);
                attn_vector = self.vector_cycles(sm_simple, sm_transc);
            }
        }
        let vector = self.vector_cycles(simple, transc);
        let compute = if c.attn.is_some() {
            attn_array + attn_vector + vector.max(array)
        } else {
            array.max(vector)
        };
        let t = c.totals(work);
        let weight_bytes = t.weight_elems * bpe + c.gather_elems_per_row * rows * bpe;
        let in_bytes = t.in_elems * bpe;
        let out_bytes = t.out_elems * bpe;
        let act_sram = self.cfg.act_sram_kib * 1024;
        let act_traffic = if in_bytes + out_bytes > act_sram {
            in_bytes * col_passes + out_bytes
        } else {
            0
        };
        let weight_traffic = match (self.cfg.dataflow, c.gemm) {
            (Dataflow::Os, Some(g)) if weight_bytes > self.cfg.weight_sram_kib * 1024 => {
                weight_bytes * (g.m_per_row * rows).div_ceil(r)
            }
            _ => weight_bytes,
        };
        let bytes = act_traffic + weight_traffic;
        let memory = self.dram_cycles(bytes);
        let latency = if bytes > 0 {
            self.cfg.dram_latency_cycles
        } else {
            0
        };
        let total = compute.max(memory) + latency;
        Timing {
            time: self.cycles_to_ns(total),
            compute_cycles: compute,
            memory_cycles: memory,
        }
    }
}

impl Device for Npu {
    fn name(&self) -> &'static str {
        "npu"
    }

    fn is_virtual(&self) -> bool {
        true
    }

    fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()> {
        if max_batch == 0 {
            return Err(Error::invalid("max batch", "must be at least 1"));
        }
        let len = model.ref_lengths();
        let table: Vec<Vec<Timing>> = model
            .nodes
            .iter()
            .map(|n| {
                if !model.node_is_length_free(n.id) {
                    return Vec::new();
                }
                let at = NodeStep {
                    node: n.id,
                    step: 0,
                };
                (1..=max_batch)
                    .map(|b| self.timing(model, n.id, &model.work_uniform(at, len, b)))
                    .collect()
            })
            .collect();
        let n = table.len();
        let mut memo_end = vec![n as u32; n + 1];
        for i in (0..n).rev() {
            memo_end[i] = if table[i].is_empty() {
                i as u32
            } else {
                memo_end[i + 1]
            };
        }
        let prefix = (0..max_batch as usize)
            .map(|b| {
                let mut p = Vec::with_capacity(n + 1);
                let mut acc = 0u64;
                p.push(0);
                for row in &table {
                    acc += row.get(b).map_or(0, |t| t.time.0);
                    p.push(acc);
                }
                p
            })
            .collect();
        self.prefix = std::sync::Arc::new(prefix);
        self.memo_end = std::sync::Arc::new(memo_end);
        self.table = std::sync::Arc::new(table);
        self.model_name = model.name.clone();
        self.prepared_nodes = model.nodes.as_ptr() as usize;
        Ok(())
    }

    fn time_run(
        &self,
        model: &Model,
        from: NodeId,
        batch: usize,
        max_nodes: u32,
        budget: Option<Nanos>,
    ) -> Option<(u32, Nanos)> {
        if !self.prepared_for(model) || batch == 0 || batch > self.prefix.len() {
            return None;
        }
        let i = from.idx();
        let end = (*self.memo_end.get(i)? as usize).min(i + max_nodes as usize);
        if end <= i {
            return None;
        }
        let p = &self.prefix[batch - 1];
        let j = match budget {
            None => end,
            // the first node after which the budget is spent
            Some(b) => {
                let target = p[i].saturating_add(b.0);
                (i + 1 + p[i + 1..=end].partition_point(|&x| x < target)).min(end)
            }
        };
        Some(((j - i) as u32, Nanos(p[j] - p[i])))
    }

    fn execute_uniform(
        &mut self,
        model: &Model,
        at: NodeStep,
        member: Member,
        count: u32,
    ) -> Result<Timing> {
        if count == 0 {
            return Err(Error::Internal("execute on an empty sub-batch".into()));
        }
        if let Some(t) = self
            .prepared_for(model)
            .then(|| self.table.get(at.node.idx()))
            .flatten()
            .and_then(|row| row.get(count as usize - 1))
        {
            return Ok(*t);
        }
        let w = model.work_uniform(at, member.len, count);
        Ok(self.timing(model, at.node, &w))
    }

    fn execute(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
        if members.is_empty() {
            return Err(Error::Internal("execute on an empty sub-batch".into()));
        }
        if let Some(t) = self
            .prepared_for(model)
            .then(|| self.table.get(at.node.idx()))
            .flatten()
            .and_then(|row| row.get(members.len() - 1))
        {
            return Ok(*t);
        }
        let w = model.work(at.node, members.iter().map(|m| (m.len, m.step)));
        Ok(self.timing(model, at.node, &w))
    }
}

#[cfg(test)]
mod tests;
