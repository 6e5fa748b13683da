//! The SLA slack predictor (paper §IV-C). It reads the device's per-node latency table
//! ([`Profile`]) and answers, in O(number of loops), how long the rest of a request's graph takes
//! at a given batch size — Algorithm 1 (STATIC nodes once, ENCODER nodes × enc_timesteps,
//! DECODER nodes × dec_timesteps) started from any (node, step).
//!
//! Lengths: a request's encoder length is known when it arrives; its decoder length is not, so
//! the predictor assumes `dec_timesteps` (the N-th percentile of the profiled output lengths), or
//! one more step than the request has already run once it passes that.

use crate::graph::{Lengths, Loop, Model, NodeId, NodeStep};
use crate::profile::Profile;
use crate::time::Nanos;

/// Per-batch-size suffix sums over the node list.
#[derive(Clone, Debug)]
struct Sums {
    /// Σ of static-node latencies from node i to the end.
    static_suffix: Vec<u64>,
    /// Σ of the latencies of node i and the later nodes of its loop (0 for static nodes).
    body_suffix: Vec<u64>,
    /// Latency of one iteration of each loop.
    body: Vec<u64>,
}

/// The slack predictor for one model on one device.
#[derive(Clone, Debug)]
pub struct Predictor {
    /// `sums[b-1]` for batch b.
    sums: Vec<Sums>,
    loops: Vec<Loop>,
    loop_of: Vec<Option<usize>>,
    /// Predicted decoder steps for requests whose output length is unknown (of part 0).
    pub dec_timesteps: u32,
    /// The same per part (co-located models).
    part_dts: Vec<u32>,
    part_of: Vec<u16>,
    part_first: Vec<NodeId>,
    part_end: Vec<u32>,
    max_batch: u32,
}

impl Predictor {
    /// Builds the predictor from a profile of `model` (checked to match).
    pub fn new(model: &Model, profile: &Profile, dec_timesteps: u32) -> Self {
        Self::for_parts(model, profile, vec![dec_timesteps; model.parts.len()])
    }

    /// Builds the predictor for co-located models, with each part's `dec_timesteps`.
    pub fn for_parts(model: &Model, profile: &Profile, part_dts: Vec<u32>) -> Self {
        let dec_timesteps = part_dts.first().copied().unwrap_or(1);
        let n = model.nodes.len();
        let loop_of: Vec<Option<usize>> = model
            .nodes
            .iter()
            .map(|x| x.loop_id.map(|l| l.0 as usize))
            .collect();
        let sums = (1..=profile.max_batch)
            .map(|b| {
                let lat: Vec<u64> = (0..n)
                    .map(|i| profile.latency(NodeId(i as u32), b).0)
                    .collect();
                let mut static_suffix = vec![0u64; n + 1];
                let mut body_suffix = vec![0u64; n + 1];
                for i in (0..n).rev() {
                    // suffix sums stop at the end of the node's own model (part)
                    let next = if i + 1 < n && model.node_part[i + 1] == model.node_part[i] {
                        static_suffix[i + 1]
                    } else {
                        0
                    };
                    static_suffix[i] = next + if loop_of[i].is_none() { lat[i] } else { 0 };
                    body_suffix[i] = match loop_of[i] {
                        Some(l) if loop_of.get(i + 1).copied().flatten() == Some(l) => {
                            lat[i] + body_suffix[i + 1]
                        }
                        Some(_) => lat[i],
                        None => 0,
                    };
                }
                let body = model
                    .loops
                    .iter()
                    .map(|l| body_suffix[l.first.idx()])
                    .collect();
                Sums {
                    static_suffix,
                    body_suffix,
                    body,
                }
            })
            .collect();
        Predictor {
            sums,
            loops: model.loops.clone(),
            loop_of,
            dec_timesteps: dec_timesteps.max(1),
            part_dts: part_dts.iter().map(|d| (*d).max(1)).collect(),
            part_of: model.node_part.clone(),
            part_first: model.parts.iter().map(|p| p.first).collect(),
            part_end: model.parts.iter().map(|p| p.end).collect(),
            max_batch: profile.max_batch,
        }
    }

    /// The lengths the predictor assumes for a request with encoder length `enc` that has run
    /// `dec_done` decoder steps.
    pub fn predicted(&self, enc: u32, dec_done: u32) -> Lengths {
        self.predicted_in(0, enc, dec_done)
    }

    /// [`Predictor::predicted`] for a request of part `part`.
    pub fn predicted_in(&self, part: usize, enc: u32, dec_done: u32) -> Lengths {
        let dts = self
            .part_dts
            .get(part)
            .copied()
            .unwrap_or(self.dec_timesteps);
        Lengths {
            enc,
            dec: dts.max(dec_done + 1),
        }
    }

    /// Algorithm 1 for a request of part `part`.
    pub fn single_input_of(&self, part: usize, len: Lengths) -> Nanos {
        let first = NodeStep {
            node: self.part_first[part],
            step: 0,
        };
        self.remaining(Some(first), len, 1)
    }

    /// Time to run a request from `at` to its end at batch `batch`, all nodes at that batch
    /// (Algorithm 1 from `at`; `None` = from the start).
    pub fn remaining(&self, at: Option<NodeStep>, len: Lengths, batch: u32) -> Nanos {
        let s = &self.sums[(batch.clamp(1, self.max_batch) - 1) as usize];
        let at = at.unwrap_or(NodeStep {
            node: NodeId(0),
            step: 0,
        });
        let i = at.node.idx();
        let mut t = 0u64;
        let after = match self.loop_of[i] {
            Some(l) => {
                let steps = u64::from(self.loops[l].steps(len));
                let left = steps.saturating_sub(u64::from(at.step) + 1);
                t += s.body_suffix[i] + left * s.body[l];
                self.loops[l].last.idx() + 1
            }
            None => i,
        };
        let end = self.part_end[usize::from(self.part_of[i])] as usize;
        if after < end {
            t += s.static_suffix[after];
        }
        for (lp, body) in self.loops.iter().zip(&s.body) {
            if lp.first.idx() >= after && lp.first.idx() < end {
                t += u64::from(lp.steps(len)) * body;
            }
        }
        Nanos(t)
    }

    /// Serial capacity: 1 / single-input latency at lengths `len` (requests/s).
    pub fn serial_capacity(&self, len: Lengths) -> f64 {
        1.0 / self.single_input(len).as_secs().max(1e-12)
    }

    /// Algorithm 1: the whole graph for one input of lengths `len`, at batch 1.
    pub fn single_input(&self, len: Lengths) -> Nanos {
        self.remaining(None, len, 1)
    }
}
