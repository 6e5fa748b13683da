//! The SLA slack predictor (paper §IV-C). It reads the device's per-node latency table
//! ([`Profile`]) and answers, in O(number of loops), how long the rest of a request's graph takes
//! at a given batch size — Algorithm 1 (STATIC nodes once, ENCODER nodes × enc_timesteps,
//! DECODER nodes × dec_timesteps) started from any (node, step).
//!
//! Lengths: a request's encoder length is known when it arrives; its decoder length is not, so
//! the predictor assumes `dec_timesteps` (the N-th percentile of the profiled output lengths), or
//! one more step than the request has already run once it passes that. Nodes whose cost depends
//! on the encoder length (the Transformer's encoder, cross-attention keys and values, attention
//! over the source) are priced at the request's own encoder length, from the profile's
//! encoder-length curves: exactly at batch 1 (what LazyB's conservative sum uses), and at
//! batch b by scaling the profiled batch-b time by the batch-1 ratio between the request's
//! length and the profiled one (what the Oracle uses).

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

impl Sums {
    /// Suffix sums of the node latencies `lat` (one per node, in model order).
    fn new(model: &Model, loop_of: &[Option<usize>], lat: &[u64]) -> Sums {
        let n = lat.len();
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
    }
}

/// The slack predictor for one model on one device.
#[derive(Clone, Debug)]
pub struct Predictor {
    /// `sums[b-1]` for batch b, every node at the profiled lengths.
    sums: Vec<Sums>,
    /// `enc1[e-1]`: batch 1, nodes that depend on the encoder length at length e (empty when
    /// none does, or the profile has no curves).
    enc1: Vec<Sums>,
    /// `dep[b-1]`: like `sums`, but only the nodes that depend on the encoder length (empty
    /// when `enc1` is).
    dep: Vec<Sums>,
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
    /// `loop_from[x]`: how many loops start before node x (loops are in node order).
    loop_from: Vec<usize>,
    /// The per-node table it was built from (a policy that simulates on it: `auto`).
    table: std::sync::Arc<Profile>,
}

/// The shape of Algorithm 1 from one position ([`Predictor::walk`]).
struct Walk {
    i: usize,
    /// The current loop and its iterations left after this one.
    cur: Option<(usize, u64)>,
    /// The first node after the current loop (or the current static node), if in the model.
    after: Option<usize>,
    /// The later loops of the model.
    loops: std::ops::Range<usize>,
    len: Lengths,
}

impl Predictor {
    /// Builds the predictor from a profile of `model` (checked to match).
    pub fn new(model: &Model, profile: &Profile, dec_timesteps: u32) -> Self {
        Self::for_parts(model, profile, vec![dec_timesteps; model.parts.len()])
    }

    /// Builds the predictor for co-located models, with each part's `dec_timesteps`.
    pub(crate) fn for_parts(model: &Model, profile: &Profile, part_dts: Vec<u32>) -> Self {
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
                Sums::new(model, &loop_of, &lat)
            })
            .collect();
        let curves = profile.nodes.iter().any(|p| !p.enc_latency_ns.is_empty());
        let max_enc = (0..n)
            .map(|i| model.max_enc_of(NodeId(i as u32)))
            .max()
            .unwrap_or(1);
        let dep = if curves {
            (1..=profile.max_batch)
                .map(|b| {
                    let lat: Vec<u64> = (0..n)
                        .map(|i| {
                            let id = NodeId(i as u32);
                            if model.node_depends_on_enc(id) {
                                profile.latency(id, b).0
                            } else {
                                0
                            }
                        })
                        .collect();
                    Sums::new(model, &loop_of, &lat)
                })
                .collect()
        } else {
            Vec::new()
        };
        let enc1 = if curves {
            (1..=max_enc)
                .map(|e| {
                    let lat: Vec<u64> = (0..n)
                        .map(|i| profile.latency_at_enc(NodeId(i as u32), e).0)
                        .collect();
                    Sums::new(model, &loop_of, &lat)
                })
                .collect()
        } else {
            Vec::new()
        };
        Predictor {
            sums,
            enc1,
            dep,
            loops: model.loops.clone(),
            loop_of,
            dec_timesteps: dec_timesteps.max(1),
            part_dts: part_dts.iter().map(|d| (*d).max(1)).collect(),
            part_of: model.node_part.clone(),
            part_first: model.parts.iter().map(|p| p.first).collect(),
            part_end: model.parts.iter().map(|p| p.end).collect(),
            max_batch: profile.max_batch,
            loop_from: (0..=n)
                .map(|x| model.loops.iter().filter(|l| l.first.idx() < x).count())
                .collect(),
            table: std::sync::Arc::new(profile.clone()),
        }
    }

    /// The per-node latency table it was built from: the device's own, which a policy may
    /// serve candidate schedules on in virtual time (`auto`).
    pub(crate) fn table(&self) -> &std::sync::Arc<Profile> {
        &self.table
    }

    /// The decoder length (`dec_timesteps`) it assumes for a request of co-located model
    /// `part` that has run no decoder step: that model's own coverage percentile.
    pub fn dec_timesteps_of(&self, part: usize) -> u32 {
        self.predicted_in(part, 1, 0).dec
    }

    /// The lengths the predictor assumes for a request with encoder length `enc` that has run
    /// `dec_done` decoder steps.
    pub fn predicted(&self, enc: u32, dec_done: u32) -> Lengths {
        self.predicted_in(0, enc, dec_done)
    }

    /// [`Predictor::predicted`] for a request of part `part`.
    pub(crate) fn predicted_in(&self, part: usize, enc: u32, dec_done: u32) -> Lengths {
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
        self.part_latency(part, len, 1)
    }

    /// A batch of `batch` requests of part `part` at lengths `len` through that part's whole
    /// graph, every node at `batch` (Algorithm 1 from the part's first node).
    pub fn part_latency(&self, part: usize, len: Lengths, batch: u32) -> Nanos {
        let first = NodeStep {
            node: self.part_first[part],
            step: 0,
        };
        self.remaining(Some(first), len, batch)
    }

    /// The earliest a pending request could complete if it started alone at `now`, at the
    /// lengths the predictor assumes for it (`--shed` drops it when that misses its deadline).
    pub(crate) fn best_completion(&self, q: &crate::runtime::Request, now: Nanos) -> Nanos {
        let len = self.predicted_in(usize::from(q.part), q.enc_len(), q.dec_done);
        now + self.single_input_of(usize::from(q.part), len)
    }

    /// Time to run a request from `at` to its end at batch `batch`, all nodes at that batch
    /// (Algorithm 1 from `at`; `None` = from the start), nodes that depend on the encoder
    /// length priced at `len.enc`.
    pub fn remaining(&self, at: Option<NodeStep>, len: Lengths, batch: u32) -> Nanos {
        let b = batch.clamp(1, self.max_batch);
        let own = (!self.enc1.is_empty())
            .then(|| &self.enc1[(len.enc.max(1) as usize).min(self.enc1.len()) - 1]);
        match own {
            None => Nanos(self.sum_from(&self.sums[b as usize - 1], at, len)),
            Some(own) if b == 1 => Nanos(self.sum_from(own, at, len)),
            Some(own) => {
                // nodes that do not depend on the encoder length: the batch-b table; those
                // that do: their batch-b time at the profiled length, scaled by their batch-1
                // ratio of the request's own length to the profiled one
                let w = self.walk(at, len);
                let sum = |s: &Sums| self.apply(&w, s);
                let all_b = sum(&self.sums[b as usize - 1]);
                let dep_b = sum(&self.dep[b as usize - 1]);
                let dep_1 = sum(&self.dep[0]);
                let own_1 = sum(own).saturating_sub(sum(&self.sums[0]) - dep_1);
                let scaled = dep_b as f64 * own_1 as f64 / dep_1.max(1) as f64;
                Nanos(all_b - dep_b + scaled.round() as u64)
            }
        }
    }

    /// Algorithm 1 from `at` over the suffix sums `s`.
    fn sum_from(&self, s: &Sums, at: Option<NodeStep>, len: Lengths) -> u64 {
        self.apply(&self.walk(at, len), s)
    }

    /// What Algorithm 1 from `at` visits, whatever the latencies: the rest of the current loop,
    /// the static nodes after it, and the later loops of the same model.
    fn walk(&self, at: Option<NodeStep>, len: Lengths) -> Walk {
        let at = at.unwrap_or(NodeStep {
            node: NodeId(0),
            step: 0,
        });
        let i = at.node.idx();
        let (cur, after) = match self.loop_of[i] {
            Some(l) => {
                let steps = u64::from(self.loops[l].steps(len));
                let left = steps.saturating_sub(u64::from(at.step) + 1);
                (Some((l, left)), self.loops[l].last.idx() + 1)
            }
            None => (None, i),
        };
        let end = self.part_end[usize::from(self.part_of[i])] as usize;
        Walk {
            i,
            cur,
            after: (after < end).then_some(after),
            loops: self.loop_from[after.min(end)]..self.loop_from[end],
            len,
        }
    }

    /// The time of walk `w` over the suffix sums `s`.
    fn apply(&self, w: &Walk, s: &Sums) -> u64 {
        let mut t = 0u64;
        if let Some((l, left)) = w.cur {
            t += s.body_suffix[w.i] + left * s.body[l];
        }
        if let Some(a) = w.after {
            t += s.static_suffix[a];
        }
        for k in w.loops.clone() {
            t += u64::from(self.loops[k].steps(w.len)) * s.body[k];
        }
        t
    }

    /// Serial capacity: 1 / single-input latency at lengths `len` (requests/s).
    pub fn serial_capacity(&self, len: Lengths) -> f64 {
        1.0 / self.single_input(len).as_secs().max(1e-12)
    }

    /// Algorithm 1: the whole graph for one input of lengths `len`, at batch 1.
    pub fn single_input(&self, len: Lengths) -> Nanos {
        self.remaining(None, len, 1)
    }

    /// Algorithm 1 for a batch of `batch` requests of lengths `len`, every node at `batch`:
    /// the whole graph (every co-located model's, one after another).
    pub fn graph_latency(&self, batch: u32, len: Lengths) -> Nanos {
        self.part_first
            .iter()
            .map(|&node| self.remaining(Some(NodeStep { node, step: 0 }), len, batch))
            .sum()
    }

    /// The batching curve: (batch, whole-graph latency, throughput in requests/s) for every
    /// batch size the table holds.
    pub fn batch_curve(&self, len: Lengths) -> Vec<(u32, Nanos, f64)> {
        (1..=self.max_batch)
            .map(|b| {
                let t = self.graph_latency(b, len);
                (b, t, f64::from(b) / t.as_secs().max(1e-12))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::npu::{Npu, NpuConfig};
    use crate::device::{Device, Member};
    use crate::graph::{zoo, Class};

    /// Σ of the exact batch-1 times of a request's static nodes before its decoder loop.
    fn static_prefix(npu: &mut Npu, model: &Model, len: Lengths) -> u64 {
        let member = Member::alone(len, 0);
        model
            .nodes
            .iter()
            .take_while(|n| n.class != Class::Decoder)
            .map(|n| {
                let at = NodeStep {
                    node: n.id,
                    step: 0,
                };
                npu.execute(model, at, &[member]).unwrap().time.0
            })
            .sum()
    }

    #[test]
    fn static_nodes_are_priced_at_the_requests_own_encoder_length() {
        let model = zoo::load("transformer").unwrap();
        let mut npu = Npu::new(NpuConfig::default()).unwrap();
        let profile = Profile::measure(&mut npu, &model, 4, model.ref_lengths()).unwrap();
        let p = Predictor::new(&model, &profile, 31);
        let dec = model.loops[0].first;
        let mut seen = Vec::new();
        for enc in [3, 30, 71] {
            let len = Lengths { enc, dec: 31 };
            let whole = p.remaining(None, len, 1).0;
            let from_decoder = p.remaining(Some(NodeStep { node: dec, step: 0 }), len, 1).0;
            assert_eq!(
                whole - from_decoder,
                static_prefix(&mut npu, &model, len),
                "encoder length {enc}"
            );
            seen.push(whole);
        }
        assert!(seen[0] < seen[1] && seen[1] < seen[2], "{seen:?}");
        // at the profiled length and batch b the table is read as it is
        let len = Lengths { enc: 30, dec: 31 };
        assert_eq!(
            p.remaining(None, len, 3),
            Nanos(p.sum_from(&p.sums[2], None, len))
        );
    }

    #[test]
    fn remaining_work_from_mid_graph_and_mid_decoder_is_algorithm_1_from_there() {
        // the tiny seq2seq model, every node 1 ms: src and emb (static), enc (encoder loop,
        // 1 node), dec_emb, dec, ctx, logits, tok (decoder loop, 5 nodes)
        let m = zoo::fixture("tiny_seq2seq.toml");
        let p = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 3);
        let len = Lengths { enc: 4, dec: 3 };
        let at = |node: u32, step: u32| {
            Some(NodeStep {
                node: NodeId(node),
                step,
            })
        };
        let ms = |x: f64| Nanos::from_ms(x);
        for batch in [1, 4, 8] {
            // 2 static + 4 encoder steps × 1 + 3 decoder steps × 5
            assert_eq!(p.remaining(None, len, batch), ms(21.0));
            // encoder step 2 of 4: this step and one more, then the decoder
            assert_eq!(p.remaining(at(2, 2), len, batch), ms(2.0 + 15.0));
            // the decoder's first node: three whole steps
            assert_eq!(p.remaining(at(3, 0), len, batch), ms(15.0));
            // ctx at step 1: ctx, logits, tok of this step, then one whole step
            assert_eq!(p.remaining(at(5, 1), len, batch), ms(3.0 + 5.0));
            // the last node of the last step
            assert_eq!(p.remaining(at(7, 2), len, batch), ms(1.0));
        }
        // the decoder length is predicted (3 here) until a request has run past it
        assert_eq!(p.predicted(4, 0), len);
        assert_eq!(p.predicted(4, 2), len);
        assert_eq!(p.predicted(4, 5), Lengths { enc: 4, dec: 6 });
        // so a request at its 6th step (step 5) is predicted to finish with this step
        assert_eq!(p.remaining(at(3, 5), p.predicted(4, 5), 1), ms(5.0));
    }
}
