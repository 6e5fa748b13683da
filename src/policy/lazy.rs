//! `lazy` (LazyBatching) and `oracle`. When requests are pending and the slack predictor allows
//! it, preempt the active sub-batch at the node boundary, push the newcomers on the BatchTable,
//! let them catch up and merge; otherwise let the active batch run on and start the pending ones
//! when the table empties. No time window anywhere.
//!
//! ## The merge rule
//!
//! The paper's BatchTable keeps each entry's *graph node ID* and merges entries "able to execute
//! a common node" (§IV-B); Algorithm 1 lists every decoder node once, × `dec_timesteps`; and §III-B
//! argues that the cells of an unrolled recurrent layer share their weights across timesteps. So
//! `lazy` and `oracle` merge two sub-batches that stand at the same node of a loop (an encoder or
//! decoder layer) whatever their timesteps: a newcomer at decoder step 1 and a batch at step 7 run
//! the layer together, each member at its own step, position and length. `lazy:strict` and
//! `oracle:strict` merge only at an identical (node, timestep) — our first reading, kept as an
//! ablation. (`lazy+cell`, the name this rule had as an option, is accepted as an alias of
//! `lazy`.)
//!
//! ## Our reading of Eq. 2 (the paper leaves these details open)
//!
//! `Slack = SLA − (T_wait + Σ_i SingleInputExecTime_i)`, evaluated for every request the
//! decision affects — every request in flight (all BatchTable entries) and every newcomer:
//! * `T_wait` is the time a request has already spent in the server (`now − arrival`), waiting
//!   and executing: work already done counts as time spent, not again as work;
//! * the sum runs over **every** request in flight plus the newcomers, each term the request's
//!   **remaining** single-input latency (Algorithm 1 from its current node and step; full for
//!   newcomers, at their own encoder length), because after lazy batching they all finish
//!   together in one merged batch whose latency the paper conservatively estimates as the sum
//!   of its members' single-input latencies;
//! * LazyB admits the largest prefix of the pending queue (FIFO, within free slots) for which
//!   no affected request's slack is negative. A request already predicted to be late blocks
//!   lazy batching until the table drains (we first exempted such requests — they are late
//!   either way — but then nothing is protected under overload and the stack grows into dozens
//!   of batch-1 entries that never merge: GNMT at 250 req/s fell to batch 1.03).
//!
//! The Oracle replaces the conservative sum by the exact batched latencies of the profile: the
//! newcomers catch up with each stack entry below at their own batch size, merge, and the merged
//! batch finishes at its combined size, running until its slowest member (the one with the most
//! remaining work) is done. It admits the largest number of newcomers for which every affected
//! request still meets its deadline (a binary search: a longer prefix never finishes earlier).
//!
//! ## `lazy:no-decoder-preempt` (an ablation, not the paper's)
//!
//! The same gate, but never while the active sub-batch stands at a decoder node: newcomers wait
//! until the table drains or the active entry is in an encoder or at a static node. On GNMT the
//! paper's LazyB lets a short prefix of the queue preempt a batch in its long decoder, run the
//! encoders in a small group and rejoin with fresh predicted work that closes the gate on the
//! rest of the queue (`docs/policies.md`, the GNMT ablation); this variant measures that cause.
//! On models without a decoder it is `lazy`.

use super::spec::{Entry, ParamError, Parsed};
use super::{Decision, Policy, View};
use crate::graph::{Lengths, NodeStep};
use crate::runtime::SubBatch;

/// LazyBatching with the conservative predictor, or the Oracle; merging at a common loop node
/// whatever the timestep, or (`strict`) only at an identical (node, timestep).
#[derive(Clone, Debug)]
pub struct Lazy {
    oracle: bool,
    strict: bool,
    /// Never preempt an active sub-batch standing at a decoder node (the ablation).
    keep_decoder: bool,
    /// The Oracle's scratch: one group per BatchTable entry.
    groups: Vec<Group>,
    /// The entries below the active one, summed once per table generation.
    below: Below,
}

impl Lazy {
    /// The paper's LazyB.
    pub(crate) fn conservative() -> Self {
        Lazy {
            oracle: false,
            strict: false,
            keep_decoder: false,
            groups: Vec::new(),
            below: Below::default(),
        }
    }
    /// LazyB with exact batched latencies.
    pub fn oracle() -> Self {
        Lazy {
            oracle: true,
            strict: false,
            keep_decoder: false,
            groups: Vec::new(),
            below: Below::default(),
        }
    }
    /// The same policy merging only at an identical (node, timestep): the ablation of the merge
    /// rule.
    pub fn strict(self) -> Self {
        Lazy {
            strict: true,
            ..self
        }
    }
    /// The same policy never preempting an active sub-batch in its decoder: the GNMT ablation.
    pub fn keeping_decoder(self) -> Self {
        Lazy {
            keep_decoder: true,
            ..self
        }
    }
}

/// Σ over the members of one entry of their remaining single-input latency, and the earliest
/// deadline among them. Members mostly share a position and lengths: the remaining latency is
/// computed once per run of equal (lengths, step).
fn entry_load(v: &View, sb: &SubBatch) -> (u64, u64) {
    let mut total = 0u64;
    let mut min_deadline = u64::MAX;
    let mut last: Option<(Lengths, u32, u64)> = None;
    for (j, &r) in sb.members.iter().enumerate() {
        let q = v.request(r);
        let len = sb.padded.unwrap_or_else(|| v.predicted_len_of(q));
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
        min_deadline = min_deadline.min(q.deadline.0);
    }
    (total, min_deadline)
}

/// What the policy remembers of the entries below the active one: they do not move until the
/// table's generation changes, so their load is summed once per generation, not per decision.
#[derive(Clone, Debug, Default)]
struct Below {
    generation: Option<u64>,
    /// Σ remaining single-input latency and earliest deadline of the entries below the top.
    load: (u64, u64),
    /// The Oracle's groups for those entries, bottom first.
    groups: Vec<Group>,
}

impl Below {
    /// Brings the cache up to date with the table (`oracle`: also the groups).
    fn refresh(&mut self, v: &View, oracle: bool) {
        let generation = v.table.generation();
        if self.generation == Some(generation) {
            return;
        }
        let entries = v.table.entries();
        let below = &entries[..entries.len().saturating_sub(1)];
        self.load = below.iter().fold((0, u64::MAX), |(t, d), sb| {
            let (et, ed) = entry_load(v, sb);
            (t + et, d.min(ed))
        });
        self.groups.clear();
        if oracle {
            self.groups
                .extend(below.iter().map(|sb| entry_group(v, sb)));
        }
        self.generation = Some(generation);
    }
}

/// Σ over requests in flight of their remaining single-input latency, and the earliest deadline
/// among them.
fn in_flight(v: &View, below: &Below) -> (u64, u64) {
    match v.table.top() {
        None => (0, u64::MAX),
        Some(top) => {
            let (t, d) = entry_load(v, top);
            (below.load.0 + t, below.load.1.min(d))
        }
    }
}

/// The number of pending requests LazyB may admit now (0 = do not preempt).
fn lazy_admissible(v: &View, k_max: usize, below: &Below) -> usize {
    let (base, mut min_deadline) = in_flight(v, below);
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

/// Where a group of requests stands for the Oracle's look-ahead: the position and lengths of
/// its member with the most work left (a merged group runs until that member is done), and
/// its size. `at` None: not started.
#[derive(Clone, Copy, Debug)]
struct Group {
    at: Option<NodeStep>,
    len: Lengths,
    size: u32,
}

/// The representative of a BatchTable entry: its member with the most remaining single-input
/// work (members stand at different steps after cross-step merges).
fn entry_group(v: &View, sb: &SubBatch) -> Group {
    let mut best = (0u64, Some(sb.next), v.predicted_len(sb.members[0]));
    for (j, &r) in sb.members.iter().enumerate() {
        let q = v.request(r);
        let len = sb.padded.unwrap_or_else(|| v.predicted_len_of(q));
        let at = Some(NodeStep {
            node: sb.next.node,
            step: sb.steps.get(j).copied().unwrap_or(sb.next.step),
        });
        let rem = v.predictor.remaining(at, len, 1).0;
        if j == 0 || rem > best.0 {
            best = (rem, at, len);
        }
    }
    Group {
        at: best.1,
        len: best.2,
        size: sb.members.len() as u32,
    }
}

/// The unit at which a group standing at `from` first reaches `target`'s node: the target
/// itself under the strict rule, otherwise the group's own step at that node.
fn arrival(v: &View, from: Option<NodeStep>, target: NodeStep) -> NodeStep {
    if !v.table.is_cell(target) {
        return target;
    }
    let model = v.model;
    let l = model
        .node(target.node)
        .loop_id
        .map(|l| &model.loops[l.0 as usize]);
    let step = match (from, l) {
        (Some(f), Some(lp)) if f.node >= lp.first && f.node <= lp.last => {
            // inside the same loop: this iteration if the node is still ahead, else the next
            f.step + u32::from(f.node > target.node)
        }
        _ => 0,
    };
    NodeStep {
        node: target.node,
        step,
    }
}

/// Exact (profile-table) time until the whole table, plus `extra` newcomers at the first unit,
/// has finished, if each group catches up with the entry below, merges with it, and the merged
/// group runs at its combined size until its slowest member is done. `entries` are the
/// table's entries as groups, bottom first.
fn oracle_drain(v: &View, entries: &[Group], extra: Option<Group>) -> u64 {
    let p = v.predictor;
    // top of the stack first: the newcomers, then the entries from the top down
    let mut chain = extra.into_iter().chain(entries.iter().rev().copied());
    let Some(mut top) = chain.next() else {
        return 0;
    };
    let mut t = 0u64;
    for below in chain {
        let Some(target) = below.at else { continue };
        let meet = arrival(v, top.at, target);
        let from = p.remaining(top.at, top.len, top.size).0;
        let to = p.remaining(Some(meet), top.len, top.size).0;
        t += from.saturating_sub(to);
        // the merged group: whichever side has more work left leads it
        let mine = p.remaining(Some(meet), top.len, 1).0;
        let theirs = p.remaining(below.at, below.len, 1).0;
        top = if mine > theirs {
            Group {
                at: Some(meet),
                len: top.len,
                size: top.size + below.size,
            }
        } else {
            Group {
                size: top.size + below.size,
                ..below
            }
        };
    }
    t + p.remaining(top.at, top.len, top.size).0
}

/// The number of pending requests the Oracle may admit now (at most `k_max`, which the caller
/// bounds by the pending count): the largest k for which every affected request still meets
/// its deadline. Admitting more never finishes earlier (the batched latencies grow with the
/// batch) and only adds deadlines, so feasibility is monotone in k and a binary search finds it.
/// `below` holds the groups of the entries under the active one; `scratch` receives every
/// entry's group (kept by the policy, so that deciding allocates nothing).
fn oracle_admissible(v: &View, k_max: usize, below: &Below, scratch: &mut Vec<Group>) -> usize {
    let now = v.now.0;
    let inflight_min = in_flight(v, below).1;
    let Some(&first) = v.pending.front() else {
        return 0;
    };
    scratch.clear();
    scratch.extend_from_slice(&below.groups);
    scratch.extend(v.table.top().map(|sb| entry_group(v, sb)));
    let entries = &scratch[..];
    // the newcomers run as one sub-batch at the first one's predicted lengths
    let len = v.predicted_len(first);
    let feasible = |k: usize| {
        let extra = Group {
            at: None,
            len,
            size: k as u32,
        };
        let with = now + oracle_drain(v, entries, Some(extra));
        let new_min = v
            .pending
            .iter()
            .take(k)
            .map(|&r| v.deadline(r).0)
            .min()
            .unwrap_or(u64::MAX);
        inflight_min >= with && new_min >= with
    };
    let k_max = k_max.min(v.pending.len());
    // blocked is the common case under load: one look-ahead says so
    if k_max == 0 || !feasible(1) {
        return 0;
    }
    // invariant: lo is feasible, everything above hi is not
    let (mut lo, mut hi) = (1usize, k_max);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if feasible(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

impl Policy for Lazy {
    fn name(&self) -> String {
        match (self.oracle, self.strict, self.keep_decoder) {
            (true, false, false) => "oracle",
            (true, true, false) => "oracle:strict",
            (false, false, false) => "lazy",
            (false, true, false) => "lazy:strict",
            (true, _, true) => "oracle:no-decoder-preempt",
            (false, _, true) => "lazy:no-decoder-preempt",
        }
        .into()
    }

    fn cell_nodes(&self, model: &crate::graph::Model) -> Vec<bool> {
        if self.strict {
            Vec::new()
        } else {
            super::cellular::loop_cells(model)
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
        if self.keep_decoder && in_decoder(v) {
            return Decision::Run;
        }
        self.below.refresh(v, self.oracle);
        let k = if self.oracle {
            oracle_admissible(v, k_max, &self.below, &mut self.groups)
        } else {
            lazy_admissible(v, k_max, &self.below)
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

/// True when the active sub-batch stands at a decoder node.
fn in_decoder(v: &View) -> bool {
    v.table
        .top()
        .is_some_and(|top| v.model.node(top.next.node).class == crate::graph::Class::Decoder)
}

/// `lazy`, `oracle`, `lazy:strict`, `oracle:strict`, `lazy:no-decoder-preempt`,
/// `oracle:no-decoder-preempt`; `lazy+cell` is the name cross-step
/// merging had while it was an option.
/// (`lazy:adaptive` extends this grammar in `adaptive.rs`, whose entry the registry lists.)
pub(crate) const ENTRY: Entry = Entry {
    names: &["lazy", "oracle", "lazy+cell"],
    usage: "lazy[:strict|:no-decoder-preempt], oracle[:strict|:no-decoder-preempt]",
    parse: parse_lazy,
};

pub(crate) fn parse_lazy(
    name: &str,
    params: &[&str],
    _: u32,
) -> std::result::Result<Parsed, ParamError> {
    let (strict, keep_decoder) = match (name, params) {
        ("lazy+cell", []) | (_, []) => (false, false),
        ("lazy+cell", _) => return Err("takes no parameters".into()),
        (_, ["strict"]) => (true, false),
        (_, ["no-decoder-preempt"]) => (false, true),
        _ => {
            return Err(
                "takes no parameter but 'strict' (lazy:strict), 'no-decoder-preempt' \
                 or, for lazy, 'adaptive'"
                    .into(),
            )
        }
    };
    let oracle = name == "oracle";
    Ok(Parsed {
        build: std::sync::Arc::new(move |_| {
            let l = if oracle {
                Lazy::oracle()
            } else {
                Lazy::conservative()
            };
            let l = if strict { l.strict() } else { l };
            Box::new(if keep_decoder { l.keeping_decoder() } else { l })
        }),
        uses_sla: true,
        // the Oracle's look-ahead assumes every entry merges as it catches up: not so for
        // sub-batches of different models
        one_model_only: oracle,
    })
}

#[cfg(test)]
mod tests;
