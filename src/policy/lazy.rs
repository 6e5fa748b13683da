//! `lazy` (LazyBatching) and `oracle`. When requests are pending and the slack predictor allows
//! it, preempt the active sub-batch at the node boundary, push the newcomers on the BatchTable,
//! let them catch up and merge; otherwise let the active batch run on and start the pending ones
//! when the table empties. No time window anywhere.
//!
//! ## Our reading of Eq. 2 (the paper leaves these details open)
//!
//! `Slack = SLA − (T_wait + Σ_i SingleInputExecTime_i)`, evaluated for every request the
//! decision affects — every request in flight (all BatchTable entries) and every newcomer:
//! * `T_wait` is the time a request has already spent in the server (`now − arrival`), waiting
//!   and executing: work already done counts as time spent, not again as work;
//! * the sum runs over **every** request in flight plus the newcomers, each term the request's
//!   **remaining** single-input latency (Algorithm 1 from its current node; full for newcomers),
//!   because after lazy batching they all finish together in one merged batch whose latency the
//!   paper conservatively estimates as the sum of its members' single-input latencies;
//! * LazyB admits the largest prefix of the pending queue (FIFO, within free slots) for which
//!   no affected request's slack is negative. A request already predicted to be late blocks
//!   lazy batching until the table drains (we first exempted such requests — they are late
//!   either way — but then nothing is protected under overload and the stack grows into dozens
//!   of batch-1 entries that never merge: GNMT at 250 req/s fell to batch 1.03).
//!
//! The Oracle replaces the conservative sum by the exact batched latencies of the profile: the
//! newcomers catch up with each stack entry below at their own batch size, merge, and the merged
//! batch finishes at its combined size.

use super::{Decision, Policy, View};
use crate::graph::{Lengths, NodeStep};

/// LazyBatching with the conservative predictor, or the Oracle; optionally merging decoder
/// sub-batches across timesteps (`lazy+cell`).
#[derive(Clone, Debug)]
pub struct Lazy {
    oracle: bool,
    cells: bool,
}

impl Lazy {
    /// The paper's LazyB.
    pub fn conservative() -> Self {
        Lazy {
            oracle: false,
            cells: false,
        }
    }
    /// LazyB with exact batched latencies.
    pub fn oracle() -> Self {
        Lazy {
            oracle: true,
            cells: false,
        }
    }
    /// LazyB whose sub-batches at the same decoder layer merge whatever their timestep (a
    /// decoder layer's weights are shared across steps, as cellular batching exploits).
    pub fn with_cells() -> Self {
        Lazy {
            oracle: false,
            cells: true,
        }
    }
}

/// Σ over requests in flight of their remaining single-input latency, and the earliest deadline
/// among them. Members of one entry share a position, and mostly their lengths too: the
/// remaining latency is computed once per run of equal lengths.
fn in_flight(v: &View) -> (u64, u64) {
    let mut total = 0u64;
    let mut min_deadline = u64::MAX;
    for sb in v.table.entries() {
        let mut last: Option<(Lengths, u32, u64)> = None;
        for (j, &r) in sb.members.iter().enumerate() {
            let len = sb.padded.unwrap_or_else(|| v.predicted_len(r));
            let step = sb.steps.get(j).copied().unwrap_or(sb.next.step);
            let rem = match last {
                Some((l, s, t)) if l == len && s == step => t,
                _ => {
                    v.predictor
                        .remaining(
                            Some(NodeStep {
                                node: sb.next.node,
                                step,
                            }),
                            len,
                            1,
                        )
                        .0
                }
            };
            last = Some((len, step, rem));
            total += rem;
            min_deadline = min_deadline.min(v.deadline(r).0);
        }
    }
    (total, min_deadline)
}

/// The number of pending requests LazyB may admit now (0 = do not preempt).
pub fn lazy_admissible(v: &View, k_max: usize) -> usize {
    let (base, mut min_deadline) = in_flight(v);
    let threshold = v.now.0 + base;
    let mut sum = 0u64;
    let mut ok = 0;
    for (i, &r) in v.pending.iter().take(k_max).enumerate() {
        sum += v.predictor.single_input_of(v.part(r), v.predicted_len(r)).0;
        min_deadline = min_deadline.min(v.deadline(r).0);
        if threshold + sum > min_deadline {
            break;
        }
        ok = i + 1;
    }
    ok
}

/// Exact (profile-table) time until the whole table, plus `extra` newcomers (lengths, count)
/// at the first unit, has finished, if everything merges as it catches up.
fn oracle_drain(v: &View, extra: Option<(Lengths, u32)>) -> u64 {
    // top of the stack first: the newcomers, then the entries from the top down
    let mut chain =
        extra
            .map(|(len, n)| (None, len, n))
            .into_iter()
            .chain(v.table.entries().iter().rev().map(|sb| {
                (
                    Some(sb.next),
                    sb.padded.unwrap_or_else(|| v.predicted_len(sb.members[0])),
                    sb.members.len() as u32,
                )
            }));
    let p = v.predictor;
    let mut t = 0u64;
    let Some((mut at, mut len, mut size)) = chain.next() else {
        return 0;
    };
    for (below_at, below_len, below_size) in chain {
        let from = p.remaining(at, len, size).0;
        let to = p.remaining(below_at, len, size).0;
        t += from.saturating_sub(to);
        at = below_at;
        len = below_len;
        size += below_size;
    }
    t + p.remaining(at, len, size).0
}

/// The number of pending requests the Oracle may admit now (at most `k_max`, which the caller
/// bounds by the pending count).
pub fn oracle_admissible(v: &View, k_max: usize) -> usize {
    let now = v.now.0;
    let inflight_min = v
        .table
        .entries()
        .iter()
        .flat_map(|sb| sb.members.iter())
        .map(|&r| v.deadline(r).0)
        .min()
        .unwrap_or(u64::MAX);
    let Some(&first) = v.pending.front() else {
        return 0;
    };
    // the newcomers run as one sub-batch at the first one's predicted lengths
    let len = v.predicted_len(first);
    let mut k = k_max.min(v.pending.len());
    while k > 0 {
        let with = now + oracle_drain(v, Some((len, k as u32)));
        let new_min = v
            .pending
            .iter()
            .take(k)
            .map(|&r| v.deadline(r).0)
            .min()
            .unwrap_or(u64::MAX);
        if inflight_min >= with && new_min >= with {
            return k;
        }
        k /= 2;
    }
    0
}

impl Policy for Lazy {
    fn name(&self) -> String {
        match (self.oracle, self.cells) {
            (true, _) => "oracle",
            (false, true) => "lazy+cell",
            (false, false) => "lazy",
        }
        .into()
    }

    fn uses_sla(&self) -> bool {
        true
    }

    fn supports_colocation(&self) -> bool {
        // the Oracle's look-ahead assumes every entry merges as it catches up: not so for
        // sub-batches of different models
        !self.oracle
    }

    fn cell_nodes(&self, model: &crate::graph::Model) -> Vec<bool> {
        if self.cells {
            model
                .nodes
                .iter()
                .map(|n| n.class == crate::graph::Class::Decoder)
                .collect()
        } else {
            Vec::new()
        }
    }

    fn decide(&mut self, v: &View) -> Decision {
        if v.pending.is_empty() {
            return Decision::Run;
        }
        let k_max = v.pending.len().min(v.free_slots()).min(v.table.max_batch());
        if k_max == 0 {
            return Decision::Run;
        }
        if v.table.is_empty() {
            return Decision::Admit {
                count: k_max,
                pad: false,
            };
        }
        let k = if self.oracle {
            oracle_admissible(v, k_max)
        } else {
            lazy_admissible(v, k_max)
        };
        if k > 0 {
            Decision::Admit {
                count: k,
                pad: false,
            }
        } else {
            Decision::Run
        }
    }
}
