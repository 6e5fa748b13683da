//! The slack check: the paper's Eq. 2, `Slack = SLA − (T_wait + Σ_i SingleInputExecTime_i)`,
//! as LazyB decides with it — how many pending requests may join the requests in flight without
//! any affected request's slack going negative. `lazy` asks it before every preemption; the
//! Oracle ([`super::oracle`]) replaces its conservative sum by exact batched latencies.
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

use super::View;
use crate::graph::{Lengths, NodeStep};
use crate::runtime::{Request, SubBatch};

/// How the predictor prices a request still decoding past its predicted decoder length
/// (`dec_timesteps`, the coverage step): the paper is silent (`lazy`'s module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Past {
    /// One step from done: its steps so far plus one (`lazy`).
    #[default]
    Step,
    /// `dec_timesteps` more steps (`lazy:past-again`).
    Again,
    /// The model's longest decoder length (`lazy:past-max`).
    Max,
}

/// The lengths the predictor assumes for request `q` under `past`: its encoder length, and
/// `dec_timesteps` decoder steps while it has done fewer; past them, as `past` says.
pub(super) fn predicted_len(v: &View, q: &Request, past: Past) -> Lengths {
    let len = v.predicted_len_of(q);
    // `lazy`'s own reading is the predictor's: nothing more to look up on this hot path
    if past == Past::Step {
        return len;
    }
    let dts = v
        .predictor
        .predicted_in(usize::from(q.part), q.enc_len(), 0)
        .dec;
    if q.dec_done < dts {
        return len;
    }
    let dec = match past {
        Past::Step => len.dec,
        Past::Again => q.dec_done + dts,
        Past::Max => v.model.parts[usize::from(q.part)]
            .seq
            .as_ref()
            .map_or(len.dec, |s| s.max_dec.max(q.dec_done + 1)),
    };
    Lengths { dec, ..len }
}

/// Σ over the members of one entry of their remaining single-input latency, and the earliest
/// deadline among them. Members mostly share a position and lengths: the remaining latency is
/// computed once per run of equal (lengths, step).
pub(super) fn entry_load(v: &View, sb: &SubBatch, past: Past) -> (u64, u64) {
    let mut total = 0u64;
    let mut min_deadline = u64::MAX;
    let mut last: Option<(Lengths, u32, u64)> = None;
    for (j, &r) in sb.members.iter().enumerate() {
        let q = v.request(r);
        let len = sb.padded.unwrap_or_else(|| predicted_len(v, q, past));
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

/// Σ over requests in flight of their remaining single-input latency, and the earliest deadline
/// among them; `below` is that of the entries under the active one ([`entry_load`] summed).
pub(super) fn in_flight(v: &View, below: (u64, u64), past: Past) -> (u64, u64) {
    match v.table.top() {
        None => (0, u64::MAX),
        Some(top) => {
            let (t, d) = entry_load(v, top, past);
            (below.0 + t, below.1.min(d))
        }
    }
}

/// Eq. 2: the number of pending requests LazyB may admit now (0 = do not preempt): the longest
/// prefix of the queue (at most `k_max`) for which no affected request's slack is negative.
/// `below` is the load of the entries under the active one ([`in_flight`]).
pub(super) fn admissible(v: &View, k_max: usize, below: (u64, u64), past: Past) -> usize {
    let (base, mut min_deadline) = in_flight(v, below, past);
    let threshold = v.now.0 + base;
    let mut sum = 0u64;
    let mut ok = 0;
    for (i, &r) in v.infq.iter().take(k_max).enumerate() {
        sum += v.predictor.single_input_of(v.part(r), v.predicted_len(r)).0;
        min_deadline = min_deadline.min(v.deadline(r).0);
        if threshold + sum > min_deadline {
            break;
        }
        ok = i + 1;
    }
    ok
}
