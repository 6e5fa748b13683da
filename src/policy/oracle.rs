//! The Oracle (`oracle`, `oracle:strict`): LazyB whose slack check uses exact batched latencies
//! instead of Eq. 2's conservative sum.
//!
//! The Oracle replaces the conservative sum by the exact batched latencies of the profile: the
//! newcomers catch up with each stack entry below at their own batch size, merge, and the merged
//! batch finishes at its combined size, running until its slowest member (the one with the most
//! remaining work) is done. It admits the largest number of newcomers for which every affected
//! request still meets its deadline (a binary search: a longer prefix never finishes earlier).

use super::slack::{in_flight, predicted_len, Past};
use super::View;
use crate::graph::{Lengths, NodeStep};
use crate::runtime::SubBatch;

/// Where a group of requests stands for the Oracle's look-ahead: the position and lengths of
/// its member with the most work left (a merged group runs until that member is done), and
/// its size. `at` None: not started.
#[derive(Clone, Copy, Debug)]
pub(super) struct Group {
    at: Option<NodeStep>,
    len: Lengths,
    size: u32,
}

/// The representative of a BatchTable entry: its member with the most remaining single-input
/// work (members stand at different steps after cross-step merges).
pub(super) fn entry_group(v: &View, sb: &SubBatch, past: Past) -> Group {
    let mut best = (0u64, Some(sb.next), v.predicted_len(sb.members[0]));
    for (j, &r) in sb.members.iter().enumerate() {
        let q = v.request(r);
        let len = sb.padded.unwrap_or_else(|| predicted_len(v, q, past));
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
fn drain(v: &View, entries: &[Group], extra: Option<Group>) -> u64 {
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
/// `below` gives the entries under the active one: their load (Σ remaining single-input
/// latency, earliest deadline) and their groups; `scratch` receives every entry's group (kept
/// by the policy, so that deciding allocates nothing).
pub(super) fn admissible(
    v: &View,
    k_max: usize,
    below: ((u64, u64), &[Group]),
    past: Past,
    scratch: &mut Vec<Group>,
) -> usize {
    let now = v.now.0;
    let (below_load, below_groups) = below;
    let inflight_min = in_flight(v, below_load, past).1;
    let Some(&first) = v.infq.front() else {
        return 0;
    };
    scratch.clear();
    scratch.extend_from_slice(below_groups);
    scratch.extend(v.table.top().map(|sb| entry_group(v, sb, past)));
    let entries = &scratch[..];
    // the newcomers run as one sub-batch at the first one's predicted lengths
    let len = v.predicted_len(first);
    let feasible = |k: usize| {
        let extra = Group {
            at: None,
            len,
            size: k as u32,
        };
        let with = now + drain(v, entries, Some(extra));
        let new_min = v
            .infq
            .iter()
            .take(k)
            .map(|&r| v.deadline(r).0)
            .min()
            .unwrap_or(u64::MAX);
        inflight_min >= with && new_min >= with
    };
    let k_max = k_max.min(v.infq.len());
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
