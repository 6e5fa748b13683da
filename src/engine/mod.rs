//! THE engine loop, written once ([`run_source`]): receive arrivals into the pending queue, ask
//! the policy, run one node of the active sub-batch on the device, update the BatchTable, record
//! what happened. Time comes from a [`Clock`] — virtual for the NPU model, wall for real
//! devices — and the device, policy and clock are traits, so every driver reuses this loop
//! unchanged. The loop's state and its steps are a [`Server`]'s.

use crate::device::{Device, Member};
use crate::error::{Error, Result};
use crate::graph::{Class, Lengths, Model, NodeId, NodeStep};
use crate::metrics::{KeepRecords, Recorder, Stats};
use crate::policy::{Decision, Policy, View};
use crate::runtime::{
    BatchTable, InfQ, Ledger, MaxBatch, MaxPending, Predictor, Rejection, Request, RequestId,
};
use crate::time::{Clock, Nanos, Sla};
use crate::traffic::Arrival;

pub use crate::metrics::record::{ClassCounters, Counters};
pub use admission::Admit;
pub(crate) use replicas::run_replicas;
pub use router::{Replicas, Router};
pub(crate) use source::ThreadArrivals;
pub use source::{stamped, ArrivalSource, ChannelArrivals, Predrawn, Stream, Told};

mod admission;
mod cancel;
mod replicas;
mod router;
mod source;

/// A snapshot of the BatchTable (bottom first: members and next unit), for tests and traces.
pub(crate) type Snapshot = (Nanos, Vec<(Vec<u32>, NodeStep)>);

/// The outcome of a run: what it recorded of its requests, and the counters.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Every request's record by id, when [`KeepRecords::requests`] asked for them (else empty).
    pub requests: Vec<Request>,
    /// Counters.
    pub counters: Counters,
    /// BatchTable snapshots after every admission and execution, when asked for.
    pub snapshots: Option<Vec<Snapshot>>,
    /// Latency histograms, sums and rejections, overall and per co-located model.
    pub record: Recorder,
    /// Replicas behind a router ([`Replicas`]): each one's statistics (empty for one server).
    pub replicas: Vec<Stats>,
}

impl Outcome {
    /// The run's statistics.
    pub fn stats(&self) -> Stats {
        self.record.stats(&self.counters)
    }
    /// Each co-located model's statistics (empty for one model).
    pub fn part_stats(&self) -> Vec<Stats> {
        self.record.part_stats(&self.counters)
    }

    /// Each SLA class's statistics (empty without classes).
    pub fn class_stats(&self) -> Vec<Stats> {
        self.record.class_stats(&self.counters)
    }
}

/// What a run serves and under which rules.
#[derive(Clone, Debug)]
pub struct Setup<'a> {
    /// The model (co-located models composed into one).
    pub model: &'a Model,
    /// The slack predictor the policies read.
    pub predictor: &'a Predictor,
    /// The SLA of requests that carry none of their own.
    pub sla: Sla,
    /// Activation slots: the most requests in flight.
    pub max_batch: MaxBatch,
    /// Record a BatchTable snapshot after every admission and execution (tests, traces).
    pub snapshots: bool,
    /// The most requests waiting in the pending queue; an arrival beyond it is rejected (and
    /// counted), so that an overloaded run's memory stays bounded.
    pub max_pending: MaxPending,
    /// What to keep per request besides the run's summary.
    pub keep: KeepRecords,
    /// Check the BatchTable's invariants after every admission and execution, stopping with
    /// an error that names the broken one (on in debug builds and in the tests; it costs a
    /// pass over the table per step).
    pub check_invariants: bool,
    /// SLA classes of the arrivals (1: none), each tallied apart.
    pub classes: usize,
    /// Reject a request, at arrival or when it reaches the head of the queue, whose deadline
    /// can no longer be met even served alone at once (`--shed`).
    pub shed: bool,
    /// Let go of every request whose deadline has passed, queued or part-served, at the next
    /// node boundary (`--abandon-late`): counted [`Rejection::Late`], its slot freed.
    pub abandon_late: bool,
    /// Which arrivals are admitted (`--admit`): all the queue has room for, or only those the
    /// predictor says meet their deadline behind the work in the server.
    pub admit: Admit,
    /// Told of every request as it leaves the server (a network front end answers its
    /// client there).
    pub observer: Option<&'a dyn Observer>,
}

/// How a request left the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Its last node ran; it completed at this time.
    Completed(Nanos),
    /// Turned away, with the reason.
    Rejected(Rejection),
}

/// The server's state after a node execution, for a front end's live metrics.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'c> {
    /// The node that just ran.
    pub node: NodeId,
    /// The run's counters so far (executions, preemptions, merges, ...).
    pub counters: &'c Counters,
    /// The sub-batch that just ran.
    pub batch: usize,
    /// The device time it took.
    pub took: Nanos,
    /// Sub-batches on the BatchTable after it ran.
    pub depth: usize,
    /// Requests waiting in the pending queue.
    pub pending: usize,
}

/// Told of each request as it leaves the server, exactly once, and of each node execution, on
/// the engine's thread (so it should only hand the news on, not work).
pub trait Observer: Sync + std::fmt::Debug {
    /// Request `q` (its record as it leaves) left as `how`.
    fn left(&self, q: &Request, how: Left);
    /// A node ran; the server now stands as `p` says.
    fn executed(&self, _p: &Progress) {}
}

impl<'a> Setup<'a> {
    /// A run of `model` at SLA `sla` and `max_batch` slots: no snapshots, at most
    /// [`MaxPending::DEFAULT`] pending, nothing kept per request.
    pub fn new(model: &'a Model, predictor: &'a Predictor, sla: Sla, max_batch: MaxBatch) -> Self {
        Setup {
            model,
            predictor,
            sla,
            max_batch,
            snapshots: false,
            max_pending: MaxPending::DEFAULT,
            keep: KeepRecords::default(),
            check_invariants: cfg!(debug_assertions),
            classes: 1,
            shed: false,
            abandon_late: false,
            admit: Admit::All,
            observer: None,
        }
    }
}

/// Runs pre-drawn `arrivals` (sorted by time) to completion.
pub fn run<D: Device + ?Sized, C: Clock>(
    setup: &Setup,
    device: &mut D,
    policy: &mut dyn Policy,
    clock: &mut C,
    arrivals: &[Arrival],
) -> Result<Outcome> {
    run_source(setup, device, policy, clock, &mut Predrawn::new(arrivals))
}

/// Runs the requests of `arrivals` to completion: the engine loop ([`Server::step`] until the
/// source has no more).
pub fn run_source<D: Device + ?Sized, C: Clock, A: ArrivalSource + ?Sized>(
    setup: &Setup,
    device: &mut D,
    policy: &mut dyn Policy,
    clock: &mut C,
    arrivals: &mut A,
) -> Result<Outcome> {
    let mut s = Server::new(setup, policy, arrivals.expected())?;
    loop {
        match s.step(device, policy, clock, arrivals)? {
            Step::Went => {}
            Step::Done => return s.finish(),
            Step::Blocked => {
                return Err(Error::Internal(
                    "an arrival source that is never ready to say what comes next".into(),
                ))
            }
        }
    }
}

/// What one turn of the engine loop did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// It decided, admitted, ran a node or let time pass: call again.
    Went,
    /// It would let time pass, but its source cannot yet say until when (a router has not
    /// decided the arrivals to come): call again once it can.
    Blocked,
    /// Nothing is in the server and nothing will arrive: the run is over.
    Done,
}

/// The state of one run and the steps of the engine loop.
pub struct Server<'a> {
    setup: &'a Setup<'a>,
    /// The requests in the server (and the account that each leaves once).
    requests: Ledger,
    record: Recorder,
    infq: InfQ,
    table: BatchTable,
    free_slots: Vec<u32>,
    counters: Counters,
    snaps: Option<Vec<Snapshot>>,
    never_preempts: bool,
    /// The policy interleaves sub-batches ([`Policy::interleaves`]).
    interleaves: bool,
    /// The active sub-batch as the device sees it, and the table generation it was built at.
    members: Vec<Member>,
    members_of: Option<u64>,
    mixed_steps: bool,
    finished: Vec<RequestId>,
    /// The requests being admitted, and their models (parts), oldest request's first.
    batch: Vec<RequestId>,
    order: Vec<u16>,
    /// When the device last finished a node (`None`: not yet this run).
    free_at: Option<Nanos>,
    /// Turns in a row whose policy waited for a time already past.
    stalls: u32,
    /// Time is to pass until the next arrival or this time (`Some(None)`: the next arrival
    /// only), once the source can say when that is.
    idling: Option<Option<Nanos>>,
    /// Keys of requests whose clients went away, told by the source and not yet let go
    /// ([`cancel`]).
    cancels: Vec<u64>,
    /// Scratch: the requests found late (`--abandon-late`, [`cancel`]).
    late: Vec<RequestId>,
    /// How fast the server lately drained its requests ([`admission`]).
    seen: admission::Seen,
}

impl<'a> Server<'a> {
    fn new(setup: &'a Setup<'a>, policy: &mut dyn Policy, expected: usize) -> Result<Self> {
        let (model, mb) = (setup.model, setup.max_batch.get());
        policy.reserve(mb as usize);
        let mut table = BatchTable::new(mb);
        table.set_cells(policy.cell_nodes(model));
        table.set_model(model);
        // room for the expected backlog up front (no allocation while serving), bounded so that
        // a long run does not reserve memory for all its requests
        let room = expected
            .clamp(64, 1 << 16)
            .min(setup.max_pending.get().max(64));
        Ok(Server {
            setup,
            requests: Ledger::with_capacity(room + mb as usize),
            record: Recorder::new((model.parts.len(), setup.classes), setup.keep.clone())?,
            infq: InfQ::with_capacity(room),
            table,
            free_slots: (0..mb).rev().collect(),
            counters: Counters::default(),
            snaps: setup.snapshots.then(Vec::new),
            never_preempts: policy.never_preempts(),
            interleaves: policy.interleaves(),
            members: Vec::with_capacity(mb as usize),
            members_of: None,
            mixed_steps: false,
            finished: Vec::with_capacity(mb as usize),
            batch: Vec::with_capacity(mb as usize),
            order: Vec::with_capacity(model.parts.len()),
            free_at: None,
            stalls: 0,
            idling: None,
            cancels: Vec::new(),
            late: Vec::with_capacity(mb as usize),
            seen: admission::Seen::default(),
        })
    }

    /// One turn of the engine loop: receive what has arrived, ask the policy, admit or run one
    /// node (or a run of them, [`Server::run_ahead`]), or let time pass until the next arrival
    /// or the time the policy waits for.
    pub(crate) fn step<D: Device + ?Sized, C: Clock, A: ArrivalSource + ?Sized>(
        &mut self,
        device: &mut D,
        policy: &mut dyn Policy,
        clock: &mut C,
        arrivals: &mut A,
    ) -> Result<Step> {
        // a node boundary: the source may give up what the server holds (a shutdown)
        if arrivals.give_up() {
            self.abandon_all()?;
            return Ok(Step::Done);
        }
        if let Some(until) = self.idling {
            if !arrivals.ready(until) {
                return Ok(Step::Blocked);
            }
            self.idling = None;
            let more = arrivals.idle(clock, until);
            return Ok(if more || until.is_some() {
                Step::Went
            } else {
                Step::Done
            });
        }
        let setup = self.setup;
        let now = clock.now();
        if now > Nanos::HORIZON {
            return Err(Error::invalid(
                "run",
                format!(
                    "virtual time passed {} years ({} requests in the server): the run is longer than lazybatch measures",
                    Nanos::HORIZON.as_secs() / 31_557_600.0,
                    self.requests.in_server()
                ),
            ));
        }
        self.receive(arrivals, now)?;
        // asked after the arrivals are received: each request told has arrived (`cancel`)
        arrivals.cancelled(&mut self.cancels);
        if !self.cancels.is_empty() {
            self.let_go(device, now)?;
        }
        if setup.abandon_late {
            self.let_go_late(device, now)?;
        }
        if setup.shed {
            self.shed_hopeless(now)?;
        }
        if self.infq.is_empty() && self.table.is_empty() {
            self.idling = Some(None);
            return Ok(Step::Went);
        }
        // with requests in flight and nothing to decide (the policy contract), just run; a
        // policy that interleaves sub-batches decides whenever there are several
        let quiet = crate::policy::nothing_to_decide(
            &self.table,
            self.infq.is_empty(),
            self.never_preempts,
            self.interleaves,
        );
        let decision = if quiet {
            Decision::Run
        } else {
            policy.decide(&self.view(now))
        };
        match decision {
            Decision::WaitUntil(t) => {
                if t <= now {
                    self.stalls += 1;
                    if self.stalls > 2 {
                        return Err(Error::Internal(format!(
                            "policy {} waits for the past",
                            policy.name()
                        )));
                    }
                }
                self.idling = Some(Some(t));
                return Ok(Step::Went);
            }
            Decision::Admit { count, pad } => self.admit(None, count, pad, now, policy)?,
            Decision::AdmitModel { part, count, pad } => {
                self.admit(Some(part), count, pad, now, policy)?
            }
            Decision::Swap if !self.table.swap_top() => {
                return Err(Error::Internal(format!(
                    "policy {} swapped a BatchTable of fewer than two entries",
                    policy.name()
                )))
            }
            Decision::Swap => {}
            Decision::Run if self.table.is_empty() => {
                return Err(Error::Internal(format!(
                    "policy {} ran an empty BatchTable",
                    policy.name()
                )))
            }
            Decision::Run => {}
        }
        self.stalls = 0;
        self.refresh_members()?;
        self.wake(device, now);
        // a node boundary where a request may be let go is one to stop at
        if quiet
            && !arrivals.may_give_up()
            && !setup.abandon_late
            && self.run_ahead(device, clock, arrivals.next_due(), now)
        {
            self.free_at = Some(clock.now());
            return Ok(Step::Went);
        }
        self.execute(device, clock)?;
        self.free_at = Some(clock.now());
        Ok(Step::Went)
    }

    /// The run's outcome, once its last request has left.
    pub(crate) fn finish(mut self) -> Result<Outcome> {
        self.requests.close()?;
        self.record.finish()?;
        Ok(Outcome {
            requests: self.record.take_requests(),
            counters: self.counters,
            snapshots: self.snaps,
            record: self.record,
            replicas: Vec::new(),
        })
    }

    /// The read-only view a policy decides on.
    fn view(&self, now: Nanos) -> View<'_> {
        View::new(
            now,
            self.setup.model,
            &self.infq,
            &self.table,
            self.setup.predictor,
            self.setup.max_batch.get() as usize,
            &self.requests,
        )
    }

    fn snap(&mut self, now: Nanos) {
        if let Some(s) = self.snaps.as_mut() {
            s.push((
                now,
                self.table
                    .entries()
                    .iter()
                    .map(|e| (e.members.iter().map(|r| r.0).collect(), e.next))
                    .collect(),
            ));
        }
    }

    /// Every request that has arrived by `now` joins the queue.
    fn receive<A: ArrivalSource + ?Sized>(&mut self, arrivals: &mut A, now: Nanos) -> Result<()> {
        let parts = self.setup.model.parts.len();
        while let Some(a) = arrivals.poll(now) {
            let id = self.requests.next_id()?;
            if usize::from(a.part) >= parts {
                return Err(Error::invalid(
                    "arrival",
                    format!("request for model #{} of {parts}", a.part),
                ));
            }
            if a.time > Nanos::HORIZON {
                return Err(Error::invalid(
                    "arrival",
                    format!(
                        "request {} arrives after the {:.0}-year horizon",
                        id.0,
                        Nanos::HORIZON.as_secs() / 31_557_600.0
                    ),
                ));
            }
            let mut q = Request::new(id, a.time, a.sla.unwrap_or(self.setup.sla.nanos()), a.len);
            (q.part, q.class) = (a.part, a.class);
            q.tokens = self.setup.model.tokens_of(usize::from(a.part), a.len);
            if let Some(k) = a.key {
                q.key = k;
            }
            let hopeless =
                self.setup.shed && self.setup.predictor.best_completion(&q, now) > q.deadline;
            let refused = self.not_admitted(&q, now);
            self.record.arrive(&q);
            self.requests.arrive(q)?;
            let why = if self.infq.len() >= self.setup.max_pending.get() {
                Some(Rejection::QueueFull)
            } else if hopeless {
                Some(Rejection::Shed)
            } else {
                refused
            };
            match why {
                Some(why) => {
                    let q = self.requests.reject(id)?;
                    if let Some(o) = self.setup.observer {
                        o.left(&q, Left::Rejected(why));
                    }
                    self.record.reject(q, why)?;
                }
                None => self.infq.push(id),
            }
        }
        Ok(())
    }

    /// Every request in the server leaves as [`Rejection::Abandoned`]: those on the
    /// BatchTable (part-served, at this node boundary) and those queued. The run then ends
    /// ([`ArrivalSource::give_up`]).
    fn abandon_all(&mut self) -> Result<()> {
        let mut ids: Vec<RequestId> = self
            .table
            .entries()
            .iter()
            .flat_map(|e| e.members.iter().copied())
            .collect();
        while let Some(&id) = self.infq.front() {
            self.infq.shed_front();
            ids.push(id);
        }
        for id in ids {
            let q = self.requests.reject(id)?;
            if let Some(o) = self.setup.observer {
                o.left(&q, Left::Rejected(Rejection::Abandoned));
            }
            self.record.reject(q, Rejection::Abandoned)?;
        }
        Ok(())
    }

    /// `--shed`: requests at the head of the queue whose deadline can no longer be met, even
    /// served alone at once, leave as rejected (as Triton's queue policy drops requests that
    /// timed out while queued).
    fn shed_hopeless(&mut self, now: Nanos) -> Result<()> {
        while let Some(&id) = self.infq.front() {
            if self
                .setup
                .predictor
                .best_completion(self.requests.get(id), now)
                <= self.requests.get(id).deadline
            {
                break;
            }
            self.infq.shed_front();
            let q = self.requests.reject(id)?;
            if let Some(o) = self.setup.observer {
                o.left(&q, Left::Rejected(Rejection::Shed));
            }
            self.record.reject(q, Rejection::Shed)?;
        }
        Ok(())
    }

    /// Takes the `count` oldest pending requests (of model `part` only, when given) into slots
    /// and onto the table: one sub-batch per model (a single model: one), each at its model's
    /// first node, pushed so that the model of the oldest admitted request runs first; `pad`:
    /// run as graph batches.
    fn admit(
        &mut self,
        part: Option<u16>,
        count: usize,
        pad: bool,
        now: Nanos,
        policy: &dyn Policy,
    ) -> Result<()> {
        if count == 0
            || count > self.infq.len()
            || count > self.free_slots.len()
            || count > self.setup.max_batch.get() as usize
        {
            return Err(Error::Internal(format!(
                "policy {} admitted {count} with {} pending and {} free slots",
                policy.name(),
                self.infq.len(),
                self.free_slots.len()
            )));
        }
        if !self.table.is_empty() {
            self.counters.preemptions += 1;
        }
        self.batch.clear();
        match part {
            None => self.batch.extend(self.infq.next_batch(count)),
            Some(p) => {
                let requests = &self.requests;
                let of = |r: RequestId| requests.get(r).part == p;
                self.infq.take_where(count, of, &mut self.batch);
                if self.batch.len() < count {
                    return Err(Error::Internal(format!(
                        "policy {} admitted {count} requests of model {p}, {} pending",
                        policy.name(),
                        self.batch.len()
                    )));
                }
            }
        }
        self.order.clear();
        for r in &self.batch {
            let q = self.requests.get_mut(*r);
            q.slot = self.free_slots.pop();
            // admitted requests run their first node now, on top of the table
            q.first_issue = Some(now);
            if !self.order.contains(&q.part) {
                self.order.push(q.part);
            }
        }
        for i in (0..self.order.len()).rev() {
            let p = self.order[i];
            let (requests, batch) = (&self.requests, &self.batch);
            let padded = pad.then(|| {
                batch
                    .iter()
                    .map(|&r| requests.get(r))
                    .filter(|q| q.part == p)
                    .fold(Lengths::default(), |l, q| Lengths {
                        enc: l.enc.max(q.len.enc),
                        dec: l.dec.max(q.len.dec),
                    })
            });
            let ids = batch.iter().copied().filter(|&r| requests.get(r).part == p);
            let first = self.setup.model.first_step_of(usize::from(p));
            self.table.push_from(ids, first, padded);
        }
        self.snap(now);
        self.check()
    }

    /// Rebuilds the device's member list when the active sub-batch changed.
    fn refresh_members(&mut self) -> Result<()> {
        if self.members_of == Some(self.table.generation()) {
            return Ok(());
        }
        let top = self
            .table
            .top()
            .ok_or_else(|| Error::Internal("empty table".into()))?;
        self.members.clear();
        for (j, r) in top.members.iter().enumerate() {
            let q = self.requests.get(*r);
            self.members.push(Member {
                slot: q.slot.unwrap_or(0),
                len: top.padded.unwrap_or(q.len),
                input: q.key,
                step: top.steps.get(j).copied().unwrap_or(top.next.step),
            });
        }
        self.mixed_steps = self.members.iter().any(|m| m.step != self.members[0].step);
        self.members_of = Some(self.table.generation());
        Ok(())
    }

    /// A virtual device times a run of batch-size-only nodes at once, up to the next unit where
    /// anything can happen: a node that ends a loop or the model, a node whose time depends on
    /// lengths, the entry below (a merge), or the next arrival (`next_due`) for a policy that
    /// may preempt — byte-identical to executing them one by one. False: nothing was run.
    fn run_ahead<D: Device + ?Sized, C: Clock>(
        &mut self,
        device: &mut D,
        clock: &mut C,
        next_due: Option<Nanos>,
        now: Nanos,
    ) -> bool {
        if self.snaps.is_some() {
            return false;
        }
        let budget = match (self.never_preempts, next_due) {
            (true, _) => None,
            (false, Some(due)) => Some(Nanos(due.0.saturating_sub(now.0))),
            (false, None) => return false,
        };
        let ahead = self.table.straight_ahead();
        let Some(at) = self.table.top().map(|t| t.next) else {
            return false;
        };
        if ahead <= 1 {
            return false;
        }
        let model = self.setup.model;
        let Some((k, t)) = device.time_run(model, at.node, self.members.len(), ahead, budget)
        else {
            return false;
        };
        // a run stays within one node class (BatchTable::straight_ahead)
        let class = model.node(at.node).class;
        self.counters
            .record(class, u64::from(k), self.members.len(), t);
        if self.mixed_steps {
            self.counters.cross_step += u64::from(k);
        }
        clock.advance(t);
        self.counters.merges += u64::from(self.table.advance_straight(k));
        true
    }

    /// Tells the device how long it sat idle before its next node, when it did
    /// ([`Device::resume`]: what a table device with after-idle rows charges).
    fn wake<D: Device + ?Sized>(&self, device: &mut D, now: Nanos) {
        let idle = self.free_at.map_or(Nanos::MAX, |f| now.saturating_sub(f));
        if idle > Nanos::ZERO {
            device.resume(idle);
        }
    }

    /// Executes one node of the active sub-batch, advances the table and completes the
    /// requests that finished.
    fn execute<D: Device + ?Sized, C: Clock>(
        &mut self,
        device: &mut D,
        clock: &mut C,
    ) -> Result<()> {
        let model = self.setup.model;
        let at = self
            .table
            .top()
            .ok_or_else(|| Error::Internal("empty table".into()))?
            .next;
        if self.mixed_steps {
            self.counters.cross_step += 1;
        }
        let timing = device.execute(model, at, &self.members)?;
        let node = model.node(at.node);
        self.counters
            .record(node.class, 1, self.members.len(), timing.time);
        clock.advance(timing.time);
        let done_at = clock.now();
        let ends_dec_step = node.class == Class::Decoder
            && node
                .loop_id
                .is_some_and(|l| model.loops[l.0 as usize].last == at.node);
        if model.emits_first_token(at.node) {
            // a prefill's argmax: the first output token, before any decoder step
            if let Some(top) = self.table.top() {
                for &r in &top.members {
                    self.requests.get_mut(r).first_token.get_or_insert(done_at);
                }
            }
        }
        if ends_dec_step {
            // the top entry's members, in the order of the device's members (their steps)
            if let Some(top) = self.table.top() {
                for (&r, m) in top.members.iter().zip(&self.members) {
                    let q = self.requests.get_mut(r);
                    q.dec_done = m.step + 1;
                    q.first_token.get_or_insert(done_at);
                }
            }
        }
        self.finished.clear();
        let requests = &self.requests;
        let adv = self
            .table
            .advance(model, |r| requests.get(r).len, &mut self.finished);
        if adv.wrapped {
            // every member's step went up by one; a changed table is rebuilt next time anyway
            self.members.iter_mut().for_each(|m| m.step += 1);
        }
        self.counters.merges += u64::from(adv.merges);
        self.counters.splits += u64::from(adv.splits);
        self.seen
            .saw(done_at, self.members.len(), self.finished.len());
        for &r in &self.finished {
            let mut q = self.requests.complete(r)?;
            q.completion = Some(done_at);
            release_slot(device, &mut self.free_slots, &mut q);
            if let Some(o) = self.setup.observer {
                o.left(&q, Left::Completed(done_at));
            }
            self.record.complete(q)?;
        }
        if let Some(o) = self.setup.observer {
            o.executed(&Progress {
                node: at.node,
                counters: &self.counters,
                batch: self.members.len(),
                took: timing.time,
                depth: self.table.entries().len(),
                pending: self.infq.len(),
            });
        }
        self.snap(done_at);
        self.check()
    }

    /// The BatchTable's invariants, when the setup asks for them.
    fn check(&self) -> Result<()> {
        if self.setup.check_invariants {
            self.table.check()?;
        }
        Ok(())
    }
}

/// Frees the slot request `q` held, if any, for the next request: the device hands over (or,
/// for a request let go, drops through the front end) what it keeps for the request first.
fn release_slot<D: Device + ?Sized>(device: &mut D, free_slots: &mut Vec<u32>, q: &mut Request) {
    if let Some(s) = q.slot.take() {
        device.complete(&Member {
            slot: s,
            len: q.len,
            input: q.key,
            step: 0,
        });
        free_slots.push(s);
    }
}

#[cfg(test)]
mod step_tests;
#[cfg(test)]
mod tests;
