//! THE engine loop, written once: admit arrivals into the pending queue, ask the policy, run one
//! node of the active sub-batch on the device, update the BatchTable, record what happened. Time
//! comes from a [`Clock`] — virtual for the NPU model, wall for real devices — and the device,
//! policy and clock are traits, so every driver reuses this loop unchanged.

use crate::device::{Device, Member};
use crate::error::{Error, Result};
use crate::graph::{Class, Lengths, Model, NodeStep};
use crate::policy::{Decision, Policy, View};
use crate::runtime::{BatchTable, Predictor, Request, RequestId};
use crate::time::{Clock, Nanos};
use crate::traffic::Arrival;
use std::collections::VecDeque;

/// Counters of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Node executions.
    pub executions: u64,
    /// Σ of sub-batch sizes over executions.
    pub batch_sum: u64,
    /// Admissions onto a non-empty BatchTable (the active sub-batch was preempted).
    pub preemptions: u64,
    /// Sub-batch merges.
    pub merges: u64,
    /// Sub-batch splits (members diverging at an encoder end).
    pub splits: u64,
    /// Executions whose members stood at different timesteps of the node (cell batching).
    pub cross_step: u64,
    /// Busy device time.
    pub busy: Nanos,
    /// The same by node class (static, encoder, decoder): where the device time went.
    pub by_class: [ClassCounters; 3],
}

/// Executions, batch sizes and device time at the nodes of one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounters {
    /// Node executions.
    pub executions: u64,
    /// Σ of sub-batch sizes over them.
    pub batch_sum: u64,
    /// Device time.
    pub busy: Nanos,
}

impl Counters {
    fn record(&mut self, class: Class, executions: u64, batch: usize, time: Nanos) {
        self.executions += executions;
        self.batch_sum += executions * batch as u64;
        self.busy += time;
        let k = &mut self.by_class[class as usize];
        k.executions += executions;
        k.batch_sum += executions * batch as u64;
        k.busy += time;
    }
}

/// A snapshot of the BatchTable (bottom first: members and next unit), for tests and traces.
pub type Snapshot = (Nanos, Vec<(Vec<u32>, NodeStep)>);

/// The outcome of a run: every request's record and the counters.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Requests in arrival order.
    pub requests: Vec<Request>,
    /// Counters.
    pub counters: Counters,
    /// BatchTable snapshots after every admission and execution, when asked for.
    pub snapshots: Option<Vec<Snapshot>>,
}

/// Where requests come from: pre-drawn arrival times on a virtual clock, or a generator thread
/// delivering them at their real instants on the wall clock.
pub trait ArrivalSource {
    /// The next request that has arrived by `now`, if any.
    fn poll(&mut self, now: Nanos) -> Option<Arrival>;
    /// Nothing to do: let time pass until the next arrival or `until`, whichever comes first.
    /// Returns false when no request will ever arrive again and `until` is None.
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool;
    /// How many requests will arrive in all, if known.
    fn expected(&self) -> usize {
        0
    }
    /// A time before which no request arrives (`Nanos::MAX` when none will), if known.
    fn next_due(&self) -> Option<Nanos> {
        None
    }
}

/// Pre-drawn arrivals, sorted by time (the virtual-time source).
#[derive(Clone, Debug)]
pub struct Predrawn<'a> {
    list: &'a [Arrival],
    next: usize,
}

impl<'a> Predrawn<'a> {
    /// A source over `list` (sorted by time).
    pub fn new(list: &'a [Arrival]) -> Self {
        Predrawn { list, next: 0 }
    }
}

impl ArrivalSource for Predrawn<'_> {
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        let a = *self.list.get(self.next)?;
        (a.time <= now).then(|| {
            self.next += 1;
            a
        })
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        let next = self.list.get(self.next).map(|a| a.time);
        match (next, until) {
            (None, None) => false,
            (Some(t), None) | (None, Some(t)) => {
                clock.idle_until(t);
                true
            }
            (Some(a), Some(u)) => {
                clock.idle_until(a.min(u));
                true
            }
        }
    }
    fn expected(&self) -> usize {
        self.list.len()
    }
    fn next_due(&self) -> Option<Nanos> {
        Some(self.list.get(self.next).map_or(Nanos::MAX, |a| a.time))
    }
}

/// Runs pre-drawn `arrivals` (sorted by time) to completion.
#[allow(clippy::too_many_arguments)]
pub fn run<D: Device + ?Sized, C: Clock>(
    model: &Model,
    device: &mut D,
    policy: &mut dyn Policy,
    clock: &mut C,
    predictor: &Predictor,
    arrivals: &[Arrival],
    sla: Nanos,
    max_batch: u32,
    record_snapshots: bool,
) -> Result<Outcome> {
    let mut src = Predrawn::new(arrivals);
    run_source(
        model,
        device,
        policy,
        clock,
        predictor,
        &mut src,
        sla,
        max_batch,
        record_snapshots,
    )
}

/// Runs the requests of `arrivals` to completion: the engine loop.
#[allow(clippy::too_many_arguments)]
pub fn run_source<D: Device + ?Sized, C: Clock, A: ArrivalSource + ?Sized>(
    model: &Model,
    device: &mut D,
    policy: &mut dyn Policy,
    clock: &mut C,
    predictor: &Predictor,
    arrivals: &mut A,
    sla: Nanos,
    max_batch: u32,
    record_snapshots: bool,
) -> Result<Outcome> {
    if max_batch == 0 {
        return Err(Error::invalid("max batch", "must be at least 1"));
    }
    let mut requests: Vec<Request> = Vec::with_capacity(arrivals.expected());
    let mut pending: VecDeque<RequestId> = VecDeque::with_capacity(arrivals.expected().max(64));
    let mut table = BatchTable::new(max_batch);
    table.set_cells(policy.cell_nodes(model));
    table.set_model(model);
    let never_preempts = policy.never_preempts();
    // the active sub-batch as the device sees it, rebuilt only when the table says it changed
    let mut members_of: Option<u64> = None;
    let mut mixed_steps = false;
    let mut free_slots: Vec<u32> = (0..max_batch).rev().collect();
    let mut c = Counters::default();
    let mut snaps = record_snapshots.then(Vec::new);
    let mut members: Vec<Member> = Vec::with_capacity(max_batch as usize);
    let mut finished: Vec<RequestId> = Vec::with_capacity(max_batch as usize);
    // the models (parts) of an admitted group, oldest request's first
    let mut order: Vec<u16> = Vec::with_capacity(model.parts.len());
    let mut stalls = 0u32;
    let snap = |table: &BatchTable, now: Nanos, snaps: &mut Option<Vec<Snapshot>>| {
        if let Some(s) = snaps.as_mut() {
            s.push((
                now,
                table
                    .entries()
                    .iter()
                    .map(|e| (e.members.iter().map(|r| r.0).collect(), e.next))
                    .collect(),
            ));
        }
    };
    loop {
        let now = clock.now();
        while let Some(a) = arrivals.poll(now) {
            let id = RequestId(requests.len() as u32);
            if usize::from(a.part) >= model.parts.len() {
                return Err(Error::invalid(
                    "arrival",
                    format!("request for model #{} of {}", a.part, model.parts.len()),
                ));
            }
            let mut q = Request::new(id, a.time, a.sla.unwrap_or(sla), a.len);
            q.part = a.part;
            requests.push(q);
            pending.push_back(id);
        }
        if pending.is_empty() && table.is_empty() {
            if arrivals.idle(clock, None) {
                continue;
            }
            break;
        }
        let quiet = !table.is_empty() && (pending.is_empty() || never_preempts);
        let decision = if quiet {
            // nothing to decide (the policy contract): run the active sub-batch
            Decision::Run
        } else {
            let view = View::new(
                now,
                model,
                &pending,
                &table,
                predictor,
                max_batch as usize,
                &requests,
            );
            policy.decide(&view)
        };
        match decision {
            Decision::WaitUntil(t) => {
                if t <= now {
                    stalls += 1;
                    if stalls > 2 {
                        return Err(Error::Internal(format!(
                            "policy {} waits for the past",
                            policy.name()
                        )));
                    }
                }
                arrivals.idle(clock, Some(t));
                continue;
            }
            Decision::Admit { count, pad } => {
                if count == 0
                    || count > pending.len()
                    || count > free_slots.len()
                    || count > max_batch as usize
                {
                    return Err(Error::Internal(format!(
                        "policy {} admitted {count} with {} pending and {} free slots",
                        policy.name(),
                        pending.len(),
                        free_slots.len()
                    )));
                }
                for r in pending.iter().take(count) {
                    let q = &mut requests[r.idx()];
                    q.slot = free_slots.pop();
                    // admitted requests run their first node now, on top of the table
                    q.first_issue = Some(now);
                }
                if !table.is_empty() {
                    c.preemptions += 1;
                }
                let padded_of = |part: u16| -> Lengths {
                    let mut l = Lengths::default();
                    for r in pending.iter().take(count) {
                        let q = &requests[r.idx()];
                        if q.part == part {
                            l.enc = l.enc.max(q.len.enc);
                            l.dec = l.dec.max(q.len.dec);
                        }
                    }
                    l
                };
                // one sub-batch per model (a single model: one), each at its model's first
                // node, pushed so that the model of the oldest admitted request runs first
                order.clear();
                for r in pending.iter().take(count) {
                    let p = requests[r.idx()].part;
                    if !order.contains(&p) {
                        order.push(p);
                    }
                }
                for &p in order.iter().rev() {
                    let padded = pad.then(|| padded_of(p));
                    let ids = pending
                        .iter()
                        .take(count)
                        .copied()
                        .filter(|r| requests[r.idx()].part == p);
                    table.push_from(ids, model.first_step_of(usize::from(p)), padded);
                }
                pending.drain(..count);
                snap(&table, now, &mut snaps);
            }
            Decision::Run => {
                if table.is_empty() {
                    return Err(Error::Internal(format!(
                        "policy {} ran an empty BatchTable",
                        policy.name()
                    )));
                }
            }
        }
        stalls = 0;
        // execute one node of the active sub-batch
        let top = table
            .top()
            .ok_or_else(|| Error::Internal("empty table".into()))?;
        let at = top.next;
        if members_of != Some(table.generation()) {
            members.clear();
            for (j, r) in top.members.iter().enumerate() {
                let q = &requests[r.idx()];
                members.push(Member {
                    slot: q.slot.unwrap_or(0),
                    len: top.padded.unwrap_or(q.len),
                    input: u64::from(r.0),
                    step: top.steps.get(j).copied().unwrap_or(at.step),
                });
            }
            mixed_steps = members.iter().any(|m| m.step != members[0].step);
            members_of = Some(table.generation());
        }
        // a virtual device times a run of batch-size-only nodes at once, up to the next unit
        // where anything can happen: a node that ends a loop or the model, a node whose time
        // depends on lengths, the entry below (a merge), or the next arrival for a policy that
        // may preempt (byte-identical to executing them one by one)
        if quiet && snaps.is_none() {
            let budget = match (never_preempts, arrivals.next_due()) {
                (true, _) => Some(None),
                (false, Some(due)) => Some(Some(Nanos(due.0.saturating_sub(now.0)))),
                (false, None) => None,
            };
            let ahead = table.straight_ahead();
            if let (Some(budget), true) = (budget, ahead > 1) {
                if let Some((k, t)) = device.time_run(model, at.node, members.len(), ahead, budget)
                {
                    // a run stays within one node class (BatchTable::straight_ahead)
                    c.record(model.node(at.node).class, u64::from(k), members.len(), t);
                    if mixed_steps {
                        c.cross_step += u64::from(k);
                    }
                    clock.advance(t);
                    c.merges += u64::from(table.advance_straight(k));
                    continue;
                }
            }
        }
        if mixed_steps {
            c.cross_step += 1;
        }
        let timing = device.execute(model, at, &members)?;
        let node = model.node(at.node);
        c.record(node.class, 1, members.len(), timing.time);
        clock.advance(timing.time);
        let done_at = clock.now();
        let ends_dec_step = node.class == Class::Decoder
            && node
                .loop_id
                .is_some_and(|l| model.loops[l.0 as usize].last == at.node);
        if ends_dec_step {
            for m in &members {
                requests[m.input as usize].dec_done = m.step + 1;
            }
        }
        finished.clear();
        let adv = table.advance(model, |r| requests[r.idx()].len, &mut finished);
        if adv.wrapped {
            // every member's step went up by one; a changed table is rebuilt next time anyway
            members.iter_mut().for_each(|m| m.step += 1);
        }
        c.merges += u64::from(adv.merges);
        c.splits += u64::from(adv.splits);
        for &r in &finished {
            let q = &mut requests[r.idx()];
            if q.completion.is_some() {
                return Err(Error::Internal(format!("request {} completed twice", r.0)));
            }
            q.completion = Some(done_at);
            if let Some(s) = q.slot.take() {
                device.complete(&Member {
                    slot: s,
                    len: q.len,
                    input: u64::from(r.0),
                    step: 0,
                });
                free_slots.push(s);
            }
        }
        snap(&table, done_at, &mut snaps);
    }
    Ok(Outcome {
        requests,
        counters: c,
        snapshots: snaps,
    })
}
