//! What `lazybatch serve` exports at `/metrics` (Prometheus text through `prometheus-client`),
//! and the engine's [`Observer`] that answers each waiting handler and keeps those metrics:
//! outcomes by model, end-to-end, queueing and compute latency, SLA violations, the batch size
//! of every node execution, preemptions, merges, the BatchTable's depth and the pending queue.

use crate::device::exchange::Exchange;
use crate::engine::{Left, Observer, Progress};
use crate::graph::Model;
use crate::runtime::Request;
use crate::time::Nanos;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Outcomes a request is counted under, exactly one each (`lazybatch_requests_total`).
pub(crate) mod outcome {
    /// Answered with its outputs.
    pub const COMPLETED: &str = "completed";
    /// Completed in the engine after its client went away (nobody to answer), or given up at a
    /// node boundary when the shutdown's limit passed.
    pub const ABANDONED: &str = "abandoned";
    /// Its client went away (disconnected, or cancelled the gRPC call) and the engine let it
    /// go at the next node boundary, queued or part-served.
    pub const CANCELLED: &str = "cancelled";
    /// Its deadline passed before it completed and the engine let it go at the next node
    /// boundary (`--abandon-late`).
    pub const LATE: &str = "late";
    /// Malformed, or the wrong input name, datatype, shape or values.
    pub const BAD_REQUEST: &str = "bad_request";
    /// Turned away: `--max-queue` requests in the server, or the engine's pending queue full.
    pub const QUEUE_FULL: &str = "queue_full";
    /// Turned away by `--shed`: its deadline could no longer be met.
    pub const SHED: &str = "shed";
    /// Refused at arrival by `--admit predicted`: predicted to miss its deadline behind the
    /// work in the server.
    pub const NOT_ADMITTED: &str = "not_admitted";
    /// Arrived while the server was shutting down.
    pub const SHUTTING_DOWN: &str = "shutting_down";
    /// Its body did not arrive within the body timeout (`--body-timeout-s`): 408.
    pub const TIMED_OUT: &str = "timed_out";
    /// Its body was larger than `--max-body-mib` (also once inflated): 413.
    pub const TOO_LARGE: &str = "too_large";
    /// Turned away before its body was read: the bodies already in flight hold
    /// `--max-inflight-mib` (503).
    pub const OVERLOADED: &str = "overloaded";
    /// Its connection was refused at once: `--max-connections` were open (503).
    pub const TOO_MANY_CONNECTIONS: &str = "too_many_connections";
    /// Its request line or headers did not parse as HTTP/1.1, or were too large: answered by
    /// hyper before any handler (400, 414 or 431, without a body) and the connection closed.
    pub const MALFORMED: &str = "malformed";
    /// Every outcome, in the order the server's summary lists them.
    pub const ALL: &[&str] = &[
        COMPLETED,
        ABANDONED,
        CANCELLED,
        LATE,
        MALFORMED,
        BAD_REQUEST,
        TIMED_OUT,
        TOO_LARGE,
        TOO_MANY_CONNECTIONS,
        OVERLOADED,
        QUEUE_FULL,
        SHED,
        NOT_ADMITTED,
        SHUTTING_DOWN,
    ];
}

/// A metric's labels.
type Labels = Vec<(String, String)>;

/// A latency histogram in seconds: 100 µs to about 52 s, doubling.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 2.0, 20))
}

/// The exported metrics. A request's own metrics are labelled by its model (co-located models
/// each have theirs); the engine's (batches, preemptions, the BatchTable) are the device's.
pub(crate) struct Metrics {
    pub registry: Registry,
    /// The models served, by part.
    models: Vec<String>,
    /// Each node's part, and each part's first node (its batches enter the model there).
    node_part: Vec<u16>,
    part_first: Vec<u32>,
    requests: Family<Labels, Counter>,
    latency: Family<Labels, Histogram, fn() -> Histogram>,
    queue: Family<Labels, Histogram, fn() -> Histogram>,
    compute: Family<Labels, Histogram, fn() -> Histogram>,
    violations: Family<Labels, Counter>,
    pub in_server: Gauge,
    batch: Histogram,
    executions: Counter,
    preemptions: Counter,
    merges: Counter,
    cross_step: Counter,
    depth: Gauge,
    pending: Gauge,
    pub held: Family<Vec<(String, String)>, Gauge>,
    pub misfits: Gauge,
    /// The engine's totals already exported (its counters only grow).
    seen: [AtomicU64; 4],
    /// What the statistics extension reports (`/v2/models/{m}/stats`), by part.
    pub totals: Vec<Totals>,
}

/// Cumulative counts and durations for the statistics extension, in Triton's terms: kept beside
/// the histograms of `/metrics` from the same observations, so that the two agree.
#[derive(Debug)]
pub(crate) struct Totals {
    /// Completed requests, and the sum of their end-to-end latencies (ns).
    pub success: (AtomicU64, AtomicU64),
    /// Requests turned away or malformed (every outcome but completed and abandoned).
    pub fail: AtomicU64,
    /// The sum of completed requests' queueing (arrival to first node) and compute (first node
    /// to completion) times (ns).
    pub queue_ns: AtomicU64,
    pub compute_ns: AtomicU64,
    /// Executions of the model's first node: batches that entered the model (a sub-batch is
    /// admitted with it), so that inferences over executions is the admitted batch's size.
    pub executions: AtomicU64,
    /// When the last request completed, in ms since the Unix epoch (0: none yet).
    pub last_ms: AtomicU64,
    /// By sub-batch size (index: size − 1): executions of the first node at that size (batches
    /// that entered the model at that size), and the device time of every node execution at
    /// that size (ns) — Triton's `batch_stats`.
    pub by_size: Vec<(AtomicU64, AtomicU64)>,
}

impl Totals {
    /// Zero totals for a server of `max_batch` slots.
    fn new(max_batch: u32) -> Self {
        Totals {
            success: Default::default(),
            fail: AtomicU64::new(0),
            queue_ns: AtomicU64::new(0),
            compute_ns: AtomicU64::new(0),
            executions: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            by_size: (0..max_batch.max(1)).map(|_| Default::default()).collect(),
        }
    }
}

impl Metrics {
    /// Metrics of a server of `model` (its parts, when co-located) with `max_batch` slots.
    pub fn new(model: &Model, max_batch: u32) -> Self {
        let sizes = (32 - max_batch.max(1).leading_zeros()) as u16 + 1;
        let hist = || Family::new_with_constructor(seconds as fn() -> Histogram);
        let mut m = Metrics {
            registry: Registry::with_prefix("lazybatch"),
            models: model.parts.iter().map(|p| p.name.clone()).collect(),
            node_part: model.node_part.clone(),
            part_first: model.parts.iter().map(|p| p.first.0).collect(),
            requests: Family::default(),
            latency: hist(),
            queue: hist(),
            compute: hist(),
            violations: Family::default(),
            in_server: Gauge::default(),
            batch: Histogram::new(exponential_buckets(1.0, 2.0, sizes)),
            executions: Counter::default(),
            preemptions: Counter::default(),
            merges: Counter::default(),
            cross_step: Counter::default(),
            depth: Gauge::default(),
            pending: Gauge::default(),
            held: Family::default(),
            misfits: Gauge::default(),
            seen: Default::default(),
            totals: model.parts.iter().map(|_| Totals::new(max_batch)).collect(),
        };
        // every model's series exist from the start (at zero): a series that first appears at
        // one loses that increment in a scraper's rate()
        for name in &m.models {
            let labels = vec![("model".to_string(), name.clone())];
            for h in [&m.latency, &m.queue, &m.compute] {
                let _ = h.get_or_create(&labels);
            }
            let _ = m.violations.get_or_create(&labels);
        }
        m.registry.register(
            "requests",
            "Requests by model and outcome (model empty: turned away before it named one of several)",
            m.requests.clone(),
        );
        m.registry.register(
            "request_latency_seconds",
            "End-to-end latency of completed requests (arrival to completion, in the engine)",
            m.latency.clone(),
        );
        m.registry.register(
            "queue_seconds",
            "Time completed requests waited before their first node ran",
            m.queue.clone(),
        );
        m.registry.register(
            "compute_seconds",
            "Time from a completed request's first node to its completion (preemptions included)",
            m.compute.clone(),
        );
        m.registry.register(
            "sla_violations",
            "Completed requests that finished after their deadline",
            m.violations.clone(),
        );
        m.registry.register(
            "requests_in_server",
            "Requests admitted and not yet answered",
            m.in_server.clone(),
        );
        m.registry.register(
            "batch_size",
            "Sub-batch size of each node execution",
            m.batch.clone(),
        );
        m.registry
            .register("node_executions", "Node executions", m.executions.clone());
        m.registry.register(
            "preemptions",
            "Admissions onto a non-empty BatchTable (the running sub-batch preempted)",
            m.preemptions.clone(),
        );
        m.registry
            .register("merges", "Sub-batch merges", m.merges.clone());
        m.registry.register(
            "cross_step_executions",
            "Node executions whose members stood at different timesteps",
            m.cross_step.clone(),
        );
        m.registry.register(
            "batch_table_depth",
            "Sub-batches on the BatchTable",
            m.depth.clone(),
        );
        m.registry.register(
            "pending_requests",
            "Requests in the engine's pending queue",
            m.pending.clone(),
        );
        m.registry.register(
            "exchange_held",
            "Requests whose inputs or outputs the device exchange holds (in flight: none once answered)",
            m.held.clone(),
        );
        m.registry.register(
            "input_misfits",
            "Inputs the device could not use (a front-end bug; served on generated values)",
            m.misfits.clone(),
        );
        m
    }

    /// What the exchange holds, read when `/metrics` is scraped.
    pub fn exchange(&self, x: &Exchange) {
        let (inputs, outputs) = x.held();
        for (k, n) in [("inputs", inputs), ("outputs", outputs)] {
            let labels = vec![("kind".to_string(), k.to_string())];
            self.held.get_or_create(&labels).set(n as i64);
        }
        self.misfits.set(x.misfits() as i64);
    }

    /// The model a request of part `part` is counted for: that part; none given, the one
    /// model served, or none (a request turned away before it named one of several).
    fn counted_for(&self, part: Option<u16>) -> Option<usize> {
        match part {
            Some(p) => Some(usize::from(p)),
            None => (self.models.len() == 1).then_some(0),
        }
    }

    /// The `model` label of part `part`: its model's name, or `""` when it has none
    /// ([`Metrics::counted_for`]).
    fn model_label(&self, part: Option<u16>) -> String {
        self.counted_for(part)
            .and_then(|k| self.models.get(k))
            .cloned()
            .unwrap_or_default()
    }

    /// How many requests left under each outcome, every outcome listed (zeros included), all
    /// models together.
    pub fn by_outcome(&self) -> Vec<(&'static str, u64)> {
        let mut models: Vec<String> = self.models.clone();
        if models.len() > 1 {
            models.push(String::new());
        }
        outcome::ALL
            .iter()
            .map(|&o| {
                let n = models
                    .iter()
                    .map(|m| {
                        let labels = vec![
                            ("model".to_string(), m.clone()),
                            ("outcome".to_string(), o.to_string()),
                        ];
                        self.requests.get_or_create(&labels).get()
                    })
                    .sum();
                (o, n)
            })
            .collect()
    }

    /// Counts a request for part `part` (None: turned away before it named a model) under
    /// `outcome` (one of [`outcome`]).
    pub fn count(&self, part: Option<u16>, outcome: &str) {
        let labels = vec![
            ("model".to_string(), self.model_label(part)),
            ("outcome".to_string(), outcome.to_string()),
        ];
        self.requests.get_or_create(&labels).inc();
        if let Some(t) = self.counted_for(part).and_then(|k| self.totals.get(k)) {
            if outcome != outcome::COMPLETED && outcome != outcome::ABANDONED {
                t.fail.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A completed request's latencies and whether it met its deadline.
    fn completed(&self, q: &Request, at: Nanos) {
        let s = |d: Nanos| d.as_secs();
        let first = q.first_issue.unwrap_or(q.arrival);
        let (all, queue, compute) = (
            at.saturating_sub(q.arrival),
            first.saturating_sub(q.arrival),
            at.saturating_sub(first),
        );
        let labels = vec![("model".to_string(), self.model_label(Some(q.part)))];
        self.latency.get_or_create(&labels).observe(s(all));
        self.queue.get_or_create(&labels).observe(s(queue));
        self.compute.get_or_create(&labels).observe(s(compute));
        let Some(t) = self.totals.get(usize::from(q.part)) else {
            return;
        };
        t.success.0.fetch_add(1, Ordering::Relaxed);
        t.success.1.fetch_add(all.0, Ordering::Relaxed);
        t.queue_ns.fetch_add(queue.0, Ordering::Relaxed);
        t.compute_ns.fetch_add(compute.0, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        t.last_ms.store(now, Ordering::Relaxed);
        if at > q.deadline {
            self.violations.get_or_create(&labels).inc();
        }
    }

    /// The engine's state after a node execution.
    fn executed(&self, p: &Progress) {
        self.batch.observe(p.batch as f64);
        // the statistics of the model (part) the node belongs to
        let part = self
            .node_part
            .get(p.node.idx())
            .map_or(0, |&k| usize::from(k));
        if let (Some(totals), Some(&first)) = (self.totals.get(part), self.part_first.get(part)) {
            let size = totals.by_size.get(p.batch.saturating_sub(1));
            if p.node.0 == first {
                totals.executions.fetch_add(1, Ordering::Relaxed);
                if let Some((n, _)) = size {
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
            if let Some((_, ns)) = size {
                ns.fetch_add(p.took.0, Ordering::Relaxed);
            }
        }
        let c = p.counters;
        for (seen, (total, counter)) in self.seen.iter().zip([
            (c.executions, &self.executions),
            (c.preemptions, &self.preemptions),
            (c.merges, &self.merges),
            (c.cross_step, &self.cross_step),
        ]) {
            let before = seen.swap(total, Ordering::Relaxed);
            counter.inc_by(total.saturating_sub(before));
        }
        self.depth.set(p.depth as i64);
        self.pending.set(p.pending as i64);
    }
}

/// How a request left the engine, as its handler hears it.
pub(crate) type Heard = (Left, Duration);

/// Handlers waiting for their request, by key: the engine's observer answers them and keeps
/// the metrics.
#[derive(Debug)]
pub(crate) struct Waiting {
    pub replies: Mutex<HashMap<u64, oneshot::Sender<Heard>>>,
    pub exchange: Arc<Exchange>,
    pub metrics: Arc<Metrics>,
    /// The engine has stopped (an error): nobody is answered any more.
    pub stopped: std::sync::atomic::AtomicBool,
    /// Told when the engine stops, so that the server shuts down.
    pub gone: tokio::sync::Notify,
    /// Requests handed to the engine, and those it reported leaving (under `replies`' lock).
    sent: std::sync::atomic::AtomicU64,
    reported: std::sync::atomic::AtomicU64,
    /// The books are closed ([`Waiting::close_books`]): a report after it is not counted.
    closed: std::sync::atomic::AtomicBool,
    /// Set when the shutdown's share for connections has passed ([`Waiting::give_up_flag`]):
    /// the engine gives up what it holds, and the observer counts every request that leaves
    /// itself (the handlers may be dropped with the front end before they run).
    give_up: Arc<std::sync::atomic::AtomicBool>,
}

impl Waiting {
    /// Nobody waiting yet, for a server whose device exchanges through `exchange` and whose
    /// metrics are `metrics`.
    pub fn new(exchange: Arc<Exchange>, metrics: Arc<Metrics>) -> Self {
        Waiting {
            replies: Mutex::default(),
            exchange,
            metrics,
            stopped: std::sync::atomic::AtomicBool::new(false),
            gone: tokio::sync::Notify::new(),
            sent: std::sync::atomic::AtomicU64::new(0),
            reported: std::sync::atomic::AtomicU64::new(0),
            closed: std::sync::atomic::AtomicBool::new(false),
            give_up: Arc::default(),
        }
    }

    /// The flag that tells the engine's source to give up what the server holds
    /// ([`crate::engine::ChannelArrivals::giving_up_on`]); once set, every request that leaves
    /// is counted here, never handed to its handler.
    pub fn give_up_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.give_up.clone()
    }

    /// A request was handed to the engine.
    pub fn sent_one(&self) {
        self.sent.fetch_add(1, Ordering::SeqCst);
    }

    /// Closes the books while the engine still runs (a shutdown limit passed with the engine
    /// inside a node): every request handed to it that it has not reported leaving is counted
    /// `abandoned` now — none of them will be answered — and a report after this is not
    /// counted, so that each request is counted once. Returns how many were.
    pub fn close_books(&self) -> u64 {
        let _held = self.replies.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.swap(true, Ordering::SeqCst) {
            return 0;
        }
        let n = self
            .sent
            .load(Ordering::SeqCst)
            .saturating_sub(self.reported.load(Ordering::SeqCst));
        for _ in 0..n {
            self.metrics.count(None, outcome::ABANDONED);
        }
        n
    }

    /// Whether the engine has stopped ([`Waiting::engine_stopped`]).
    pub fn has_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// The engine stopped: every waiting handler hears so (its reply is dropped) and the
    /// server shuts down.
    pub fn engine_stopped(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.replies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.gone.notify_one();
    }
}

/// Calls [`Waiting::engine_stopped`] when dropped: the engine thread holds one, so that an
/// error or a panic there cannot leave a handler waiting for ever.
pub(crate) struct OnEngineExit(pub Arc<Waiting>);

impl Drop for OnEngineExit {
    fn drop(&mut self) {
        self.0.engine_stopped();
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("models", &self.models)
            .finish()
    }
}

impl Observer for Waiting {
    fn left(&self, q: &Request, how: Left) {
        let tx = {
            let mut m = self.replies.lock().unwrap_or_else(|e| e.into_inner());
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            self.reported.fetch_add(1, Ordering::SeqCst);
            let tx = m.remove(&q.key);
            // past the shutdown's limit a handler may be dropped before it runs: the
            // observer counts the request (as abandoned, or completed after its client went)
            if self.give_up.load(Ordering::SeqCst) {
                None
            } else {
                tx
            }
        };
        let latency = match how {
            Left::Completed(at) => {
                self.metrics.completed(q, at);
                Duration::from_nanos(at.saturating_sub(q.arrival).0)
            }
            Left::Rejected(_) => Duration::ZERO,
        };
        // an input no device took (turned away before its input node ran, or a model device
        // that computes nothing) goes now
        self.exchange.take_input(q.key);
        let heard = tx.is_some_and(|tx| tx.send((how, latency)).is_ok());
        if !heard {
            // the client went away: drop the outputs it will not take
            self.exchange.take_output(q.key);
            self.metrics.count(
                Some(q.part),
                match how {
                    Left::Completed(_) => outcome::ABANDONED,
                    Left::Rejected(why) => rejected(why),
                },
            );
        }
    }

    fn executed(&self, p: &Progress) {
        self.metrics.executed(p);
    }
}

/// The outcome a rejection is counted under.
pub(crate) fn rejected(why: crate::runtime::Rejection) -> &'static str {
    match why {
        crate::runtime::Rejection::QueueFull => outcome::QUEUE_FULL,
        crate::runtime::Rejection::Shed => outcome::SHED,
        crate::runtime::Rejection::Abandoned => outcome::ABANDONED,
        crate::runtime::Rejection::Cancelled => outcome::CANCELLED,
        crate::runtime::Rejection::Late => outcome::LATE,
        crate::runtime::Rejection::NotAdmitted(_) => outcome::NOT_ADMITTED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Lengths, NodeId};
    use crate::runtime::{Rejection, RequestId};

    fn fixture(name: &str) -> Model {
        let mut m = crate::graph::zoo::fixture("eight_nodes.toml");
        m.name = name.into();
        for p in &mut m.parts {
            p.name = name.into();
        }
        m
    }

    /// The metrics' text, as `/metrics` exports it.
    fn text(m: &Metrics) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &m.registry).unwrap();
        s
    }

    /// The value of the series `series` (its name and labels exactly), or None.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn request(key: u64, arrival: u64, sla: u64) -> Request {
        let mut q = Request::new(
            RequestId(key as u32),
            Nanos(arrival),
            Nanos(sla),
            Lengths { enc: 1, dec: 1 },
        );
        q.key = key;
        q
    }

    #[test]
    fn a_request_counts_for_its_model_and_one_turned_away_unnamed_for_the_only_one() {
        let one = Metrics::new(&fixture("a"), 4);
        assert_eq!(one.counted_for(None), Some(0));
        assert_eq!(one.counted_for(Some(0)), Some(0));
        assert_eq!(one.model_label(None), "a");
        let two = Metrics::new(&Model::compose(vec![fixture("a"), fixture("b")]), 4);
        assert_eq!(two.counted_for(None), None);
        assert_eq!(two.counted_for(Some(1)), Some(1));
        assert_eq!(two.model_label(Some(1)), "b");
        assert_eq!(two.model_label(None), "");

        // a failure counts against its model's statistics; completed and abandoned do not
        for o in [outcome::COMPLETED, outcome::ABANDONED, outcome::QUEUE_FULL] {
            two.count(Some(1), o);
        }
        two.count(None, outcome::BAD_REQUEST);
        let fail = |m: &Metrics, k: usize| m.totals[k].fail.load(Ordering::Relaxed);
        assert_eq!((fail(&two, 0), fail(&two, 1)), (0, 1));
        let t = text(&two);
        assert_eq!(
            value(
                &t,
                r#"lazybatch_requests_total{model="b",outcome="queue_full"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &t,
                r#"lazybatch_requests_total{model="",outcome="bad_request"}"#
            ),
            Some(1.0)
        );
        // every outcome listed, the unnamed model's counts included in the sums
        let by = two.by_outcome();
        assert_eq!(by.len(), outcome::ALL.len());
        for (o, n) in by {
            let expected = match o {
                outcome::COMPLETED | outcome::ABANDONED | outcome::QUEUE_FULL => 1,
                outcome::BAD_REQUEST => 1,
                _ => 0,
            };
            assert_eq!(n, expected, "{o}");
        }
        // one model: an unnamed request is that model's, and no unnamed series is made
        one.count(None, outcome::SHED);
        assert_eq!(fail(&one, 0), 1);
        let by: HashMap<_, _> = one.by_outcome().into_iter().collect();
        assert_eq!(by[outcome::SHED], 1);
        assert!(!text(&one).contains(r#"model="""#), "{}", text(&one));
    }

    #[test]
    fn a_completed_request_violates_its_sla_only_when_it_ends_after_its_deadline() {
        let m = Metrics::new(&fixture("a"), 4);
        let violations =
            |m: &Metrics| value(&text(m), r#"lazybatch_sla_violations_total{model="a"}"#);
        assert_eq!(
            violations(&m),
            Some(0.0),
            "the series exists from the start"
        );
        // arrival 100, deadline 100 + 50; first node at 120
        let mut q = request(1, 100, 50);
        q.first_issue = Some(Nanos(120));
        m.completed(&q, Nanos(150));
        assert_eq!(violations(&m), Some(0.0), "exactly at its deadline");
        m.completed(&q, Nanos(151));
        assert_eq!(violations(&m), Some(1.0));
        let t = &m.totals[0];
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(
            (
                get(&t.success.0),
                get(&t.success.1),
                get(&t.queue_ns),
                get(&t.compute_ns)
            ),
            (2, 50 + 51, 20 + 20, 30 + 31)
        );
        assert!(get(&t.last_ms) > 0);
        let t = text(&m);
        assert_eq!(
            value(&t, r#"lazybatch_request_latency_seconds_count{model="a"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(&t, r#"lazybatch_request_latency_seconds_sum{model="a"}"#),
            Some(Nanos(50).as_secs() + Nanos(51).as_secs())
        );
    }

    #[test]
    fn a_batch_counts_where_it_enters_the_model_and_its_time_at_every_node() {
        let model = fixture("a");
        let first = model.parts[0].first;
        let other = NodeId(first.0 + 1);
        let m = Metrics::new(&model, 4);
        let mut c = crate::metrics::record::Counters::default();
        let progress = |node, batch, took, c: &crate::metrics::record::Counters| {
            let p = Progress {
                node,
                counters: c,
                batch,
                took: Nanos(took),
                depth: 2,
                pending: 5,
            };
            m.executed(&p);
        };
        c.executions = 1;
        progress(first, 2, 10, &c);
        c.executions = 2;
        c.preemptions = 1;
        progress(other, 3, 7, &c);
        let t = &m.totals[0];
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(get(&t.executions), 1, "only the first node's");
        let sizes: Vec<(u64, u64)> = t.by_size.iter().map(|(n, ns)| (get(n), get(ns))).collect();
        assert_eq!(sizes, vec![(0, 0), (1, 10), (0, 7), (0, 0)]);
        let t = text(&m);
        assert_eq!(value(&t, "lazybatch_node_executions_total"), Some(2.0));
        assert_eq!(value(&t, "lazybatch_preemptions_total"), Some(1.0));
        assert_eq!(value(&t, "lazybatch_batch_table_depth"), Some(2.0));
        assert_eq!(value(&t, "lazybatch_pending_requests"), Some(5.0));
        assert_eq!(value(&t, "lazybatch_batch_size_count"), Some(2.0));
    }

    #[test]
    fn a_request_nobody_waits_for_is_counted_and_its_data_dropped() {
        let m = Arc::new(Metrics::new(&fixture("a"), 4));
        let x = Arc::new(Exchange::new());
        let w = Waiting::new(x.clone(), m.clone());
        // one handler waiting (key 1), nobody for keys 2 and 3
        let (tx, mut rx) = oneshot::channel();
        w.replies.lock().unwrap().insert(1, tx);
        for k in [1, 2, 3] {
            x.put_input(k, vec![0.0]);
        }
        x.put_output(2, vec![1.0]);
        m.exchange(&x);
        let t = text(&m);
        assert_eq!(
            value(&t, r#"lazybatch_exchange_held{kind="inputs"}"#),
            Some(3.0)
        );
        assert_eq!(
            value(&t, r#"lazybatch_exchange_held{kind="outputs"}"#),
            Some(1.0)
        );
        w.left(&request(1, 0, 100), Left::Completed(Nanos(40)));
        let (how, latency) = rx.try_recv().unwrap();
        assert!(matches!(how, Left::Completed(Nanos(40))));
        assert_eq!(latency, Duration::from_nanos(40));
        w.left(&request(2, 0, 100), Left::Completed(Nanos(40)));
        w.left(&request(3, 0, 100), Left::Rejected(Rejection::Shed));
        assert_eq!(
            x.held(),
            (0, 0),
            "every input and the unheard output dropped"
        );
        let by: HashMap<_, _> = m.by_outcome().into_iter().collect();
        // the heard one is counted by its handler, not here
        assert_eq!(
            (
                by[outcome::COMPLETED],
                by[outcome::ABANDONED],
                by[outcome::SHED]
            ),
            (0, 1, 1)
        );
        assert_eq!(rejected(Rejection::QueueFull), outcome::QUEUE_FULL);
        assert_eq!(rejected(Rejection::Shed), outcome::SHED);
    }

    #[test]
    fn an_engine_that_stops_answers_nobody_and_says_so_once_dropped() {
        let m = Arc::new(Metrics::new(&fixture("a"), 4));
        let w = Arc::new(Waiting::new(Arc::new(Exchange::new()), m));
        let (tx, mut rx) = oneshot::channel();
        w.replies.lock().unwrap().insert(1, tx);
        drop(OnEngineExit(w.clone()));
        assert!(w.stopped.load(Ordering::SeqCst));
        assert!(w.replies.lock().unwrap().is_empty());
        assert!(
            rx.try_recv().is_err(),
            "the handler hears its reply dropped"
        );
        assert!(format!("{:?}", w.metrics).contains("\"a\""));
    }
}
