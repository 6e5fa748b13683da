//! The engine step's own guards, each at its boundary: the time horizon, a policy that waits
//! for the past, the contract errors, and the quiet turns in which the policy is not asked
//! (and the ones in which an interleaving policy must be).

use super::tests::{bench, bench_of, kept};
use super::*;
use crate::device::npu::Npu;
use crate::device::Timing;
use crate::graph::{zoo, Class};
use crate::policy::{self, Decision, Policy, View};
use crate::time::VirtualClock;
use std::cell::Cell;

/// `arrivals` of `model` served under `pol`, each request's record and every table kept.
fn serve(model: &str, pol: &mut dyn Policy, arrivals: &[Arrival]) -> Result<Outcome> {
    serve_with(model, pol, arrivals, |_| {}).map(|(out, _)| out)
}

/// [`serve`] under the rules `tweak` leaves, and what the device was told.
fn serve_with(
    model: &str,
    pol: &mut dyn Policy,
    arrivals: &[Arrival],
    tweak: impl FnOnce(&mut Setup),
) -> Result<(Outcome, Watched)> {
    let (m, npu, pred) = bench(model);
    let mut dev = Watched {
        npu,
        idles: Vec::new(),
        executed: 0,
        timed: Cell::new(0),
    };
    let mut setup = kept(&m, &pred);
    tweak(&mut setup);
    run(&setup, &mut dev, pol, &mut VirtualClock::new(), arrivals).map(|out| (out, dev))
}

/// The NPU model, noting what the engine tells it: each idle time before a node, how many
/// nodes it executed one by one, and how many straight runs it timed at once.
struct Watched {
    npu: Npu,
    idles: Vec<Nanos>,
    executed: u64,
    timed: Cell<u64>,
}

impl Device for Watched {
    fn name(&self) -> &'static str {
        self.npu.name()
    }
    fn is_virtual(&self) -> bool {
        self.npu.is_virtual()
    }
    fn prepare(&mut self, m: &Model, max_batch: u32) -> Result<()> {
        self.npu.prepare(m, max_batch)
    }
    fn execute(&mut self, m: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
        self.executed += 1;
        self.npu.execute(m, at, members)
    }
    fn time_run(
        &self,
        m: &Model,
        from: NodeId,
        batch: usize,
        max_nodes: u32,
        budget: Option<Nanos>,
    ) -> Option<(u32, Nanos)> {
        let run = self.npu.time_run(m, from, batch, max_nodes, budget);
        self.timed.set(self.timed.get() + u64::from(run.is_some()));
        run
    }
    fn resume(&mut self, idle: Nanos) {
        self.idles.push(idle);
    }
}

/// Requests of `model` at the times `at`, with the generator's lengths (drawn for at least
/// two, so that the first request's are the same whether one or two follow).
fn arrivals_at(model: &str, at: &[Nanos]) -> Vec<Arrival> {
    let m = zoo::load(model).unwrap();
    crate::traffic::generate(&m, (Default::default(), 100.0), at.len().max(2), 3)
        .unwrap()
        .zip(at)
        .map(|(a, &time)| Arrival { time, ..a })
        .collect()
}

#[test]
fn a_run_past_the_horizon_is_refused_with_what_was_in_the_server() {
    // arriving 1 ns before the horizon, the request's first node takes the clock past it
    let just_before = arrivals_at("resnet50", &[Nanos(Nanos::HORIZON.0 - 1)]);
    let mut pol = policy::parse("serial", 8).unwrap();
    let e = serve("resnet50", pol.as_mut(), &just_before)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("virtual time passed") && e.contains("(1 requests in the server)"),
        "{e}"
    );
    // arriving at the horizon itself, it is received (the step at the horizon runs) and the
    // next step refuses
    let at = arrivals_at("resnet50", &[Nanos::HORIZON]);
    let mut pol = policy::parse("serial", 8).unwrap();
    let e = serve("resnet50", pol.as_mut(), &at)
        .unwrap_err()
        .to_string();
    assert!(e.contains("(1 requests in the server)"), "{e}");
}

/// Waits for the time it is asked at, `left` more times, then admits everyone pending.
struct WaitsForNow {
    left: u32,
}

impl Policy for WaitsForNow {
    fn name(&self) -> String {
        "waits-for-now".into()
    }
    fn decide(&mut self, v: &View) -> Decision {
        if v.table.is_empty() && self.left > 0 {
            self.left -= 1;
            return Decision::WaitUntil(v.now);
        }
        match v.table.is_empty() {
            true => Decision::Admit {
                count: v.infq.len().min(8),
                pad: false,
            },
            false => Decision::Run,
        }
    }
}

#[test]
fn a_policy_may_wait_for_the_present_twice_in_a_row_not_three_times() {
    let one = arrivals_at("resnet50", &[Nanos::from_ms(1.0)]);
    let out = serve("resnet50", &mut WaitsForNow { left: 2 }, &one).unwrap();
    assert_eq!(out.requests.len(), 1);
    assert!(out.requests[0].completion.is_some());
    let e = serve("resnet50", &mut WaitsForNow { left: 3 }, &one)
        .unwrap_err()
        .to_string();
    assert!(e.contains("policy waits-for-now waits for the past"), "{e}");
}

#[test]
fn a_policy_that_runs_an_empty_table_is_an_error() {
    struct RunsAlways;
    impl Policy for RunsAlways {
        fn name(&self) -> String {
            "runs-always".into()
        }
        fn decide(&mut self, _: &View) -> Decision {
            Decision::Run
        }
    }
    let one = arrivals_at("resnet50", &[Nanos::from_ms(1.0)]);
    let e = serve("resnet50", &mut RunsAlways, &one)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("policy runs-always ran an empty BatchTable"),
        "{e}"
    );
}

/// A policy asked only when the contract says it must be: someone pending, an empty table,
/// or (one that interleaves) two entries or more. Counts the turns it was asked with a
/// prefill on top of a decode batch and nobody pending.
struct Contract {
    inner: Box<dyn Policy>,
    interleaving_turns: usize,
}

impl Policy for Contract {
    fn name(&self) -> String {
        self.inner.name()
    }
    fn cell_nodes(&self, model: &Model) -> Vec<bool> {
        self.inner.cell_nodes(model)
    }
    fn interleaves(&self) -> bool {
        self.inner.interleaves()
    }
    fn decide(&mut self, v: &View) -> Decision {
        let entries = v.table.entries().len();
        let interleaving = self.inner.interleaves() && entries > 1;
        assert!(
            !v.infq.is_empty() || entries == 0 || interleaving,
            "{} asked with nobody pending and {entries} entries",
            self.inner.name()
        );
        if v.infq.is_empty() && interleaving {
            self.interleaving_turns += 1;
        }
        self.inner.decide(v)
    }
}

#[test]
fn the_policy_is_asked_when_someone_waits_or_it_interleaves_two_entries() {
    // GPT-2: the second request arrives while the first decodes, then nobody waits
    let (m, _, _) = bench("gpt2");
    let solo = serve(
        "gpt2",
        policy::parse("continuous", 8).unwrap().as_mut(),
        &arrivals_at("gpt2", &[Nanos(0)]),
    )
    .unwrap();
    let first = &solo.requests[0];
    let (token, done) = (first.first_token.unwrap(), first.completion.unwrap());
    assert!(first.len.dec >= 3, "{:?}", first.len);
    let two = arrivals_at("gpt2", &[Nanos(0), Nanos((token.0 + done.0) / 2)]);
    for (text, interleaves) in [("lazy", false), ("chunked:0", true)] {
        let mut pol = Contract {
            inner: policy::parse(text, 8).unwrap(),
            interleaving_turns: 0,
        };
        let out = serve("gpt2", &mut pol, &two).unwrap();
        assert_eq!(out.requests.len(), 2, "{text}");
        // chunked:0 swaps the decode batch in over the newcomer's prefill with nobody
        // waiting: only if it is asked
        let decoding = |at: NodeStep| m.node(at.node).class == Class::Decoder;
        let swapped_in = out.snapshots.unwrap().iter().any(|(_, e)| {
            matches!(e.as_slice(), [.., (_, below), (_, top)] if decoding(*top) && !decoding(*below))
        });
        assert_eq!(swapped_in, interleaves, "{text}");
        assert_eq!(pol.interleaving_turns > 0, interleaves, "{text}");
    }
}

/// Admits the counts of `next` in turn, one each time it is asked, then what the table
/// allows: everyone pending (at most 8) on an empty table, else runs.
struct Admits {
    next: std::collections::VecDeque<usize>,
}

impl Admits {
    fn new(next: &[usize]) -> Self {
        Admits {
            next: next.iter().copied().collect(),
        }
    }
}

impl Policy for Admits {
    fn name(&self) -> String {
        "admits".into()
    }
    fn decide(&mut self, v: &View) -> Decision {
        match self.next.pop_front() {
            Some(count) => Decision::Admit { count, pad: false },
            None if v.table.is_empty() => Decision::Admit {
                count: v.infq.len().min(8),
                pad: false,
            },
            None => Decision::Run,
        }
    }
}

#[test]
fn an_admission_beyond_the_pending_or_the_free_slots_is_the_contracts_error() {
    // more than are pending, with every slot free
    let one = arrivals_at("resnet50", &[Nanos::from_ms(1.0)]);
    let e = serve("resnet50", &mut Admits::new(&[2]), &one)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("policy admits admitted 2 with 1 pending and 8 free slots"),
        "{e}"
    );
    // ten at once: five admitted, then four more over them, within the five pending and the
    // batch of 8, but beyond the 3 free slots
    let ten = arrivals_at("resnet50", &[Nanos::from_ms(1.0); 10]);
    let e = serve("resnet50", &mut Admits::new(&[5, 4]), &ten)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("policy admits admitted 4 with 5 pending and 3 free slots"),
        "{e}"
    );
    // three more fit: one preemption (the two left are admitted onto an empty table)
    let out = serve("resnet50", &mut Admits::new(&[5, 3]), &ten).unwrap();
    assert_eq!(out.stats().completed, 10);
    assert_eq!(out.counters.preemptions, 1);
}

#[test]
fn shedding_at_arrival_keeps_a_deadline_met_to_the_nanosecond_and_frees_the_queue() {
    let shedding = |s: &mut Setup| s.shed = true;
    let (_, _, pred) = bench("resnet50");
    let at = arrivals_at("resnet50", &[Nanos::from_ms(1.0)]);
    let q = Request::new(RequestId(0), at[0].time, Nanos::ZERO, at[0].len);
    let alone = pred.best_completion(&q, at[0].time) - at[0].time;
    // an SLA of exactly the time served alone can still be met; a nanosecond less cannot
    for (sla, shed) in [(alone, 0), (alone - Nanos(1), 1)] {
        let one = [Arrival {
            sla: Some(sla),
            ..at[0]
        }];
        let (out, _) = serve_with("resnet50", &mut Admits::new(&[]), &one, shedding).unwrap();
        let st = out.stats();
        assert_eq!(
            (st.completed, st.rejected_shed),
            (1 - shed, shed),
            "{sla:?}"
        );
    }
    // a hopeless arrival is turned away before it takes the one place in the queue, so the
    // request that arrives with it is kept
    let two = arrivals_at("resnet50", &[Nanos::from_ms(1.0); 2]);
    let two = [
        Arrival {
            sla: Some(Nanos(1)),
            ..two[0]
        },
        two[1],
    ];
    let (out, _) = serve_with("resnet50", &mut Admits::new(&[]), &two, |s| {
        s.shed = true;
        s.max_pending = MaxPending::new(1).unwrap();
    })
    .unwrap();
    let st = out.stats();
    assert_eq!(
        (st.completed, st.rejected_shed, st.rejected_queue_full),
        (1, 1, 0)
    );
}

#[test]
fn the_device_hears_how_long_it_idled_only_when_it_did() {
    // two requests far apart, node by node: the device idled since before the run, then from
    // the first request's completion to the second's arrival; back to back, never
    let at = [Nanos::from_ms(1.0), Nanos::from_ms(1000.0)];
    let two = arrivals_at("resnet50", &at);
    let mut pol = policy::parse("serial", 8).unwrap();
    let (out, dev) = serve_with("resnet50", pol.as_mut(), &two, |_| {}).unwrap();
    let first_done = out.requests[0].completion.unwrap();
    assert!(first_done < at[1]);
    assert_eq!(dev.idles, [Nanos::MAX, at[1] - first_done]);
}

#[test]
fn straight_runs_are_timed_at_once_and_count_as_node_by_node() {
    // without snapshots a virtual device times straight runs at once, up to the next arrival
    // for a policy that may preempt: far fewer calls than node executions, and the same
    // records and counters as node by node
    for (model, pol, n, most) in [
        ("resnet50", "serial", 3, 0.5),
        ("gnmt", "continuous", 24, 1.0),
    ] {
        let m = zoo::load(model).unwrap();
        let arrivals: Vec<Arrival> = crate::traffic::generate(&m, (Default::default(), 60.0), n, 5)
            .unwrap()
            .collect();
        let serve_as = |snapshots: bool| {
            let mut p = policy::parse(pol, 8).unwrap();
            serve_with(model, p.as_mut(), &arrivals, |s| s.snapshots = snapshots).unwrap()
        };
        let ((fast, fast_dev), (slow, slow_dev)) = (serve_as(false), serve_as(true));
        assert_eq!(fast.requests, slow.requests, "{model}");
        assert_eq!(fast.counters, slow.counters, "{model}");
        let c = &slow.counters;
        assert_eq!(slow_dev.executed, c.executions, "{model}: node by node");
        let calls = fast_dev.executed + fast_dev.timed.get();
        assert!(
            (calls as f64) < most * c.executions as f64,
            "{model}: {calls} device calls ({} runs) for {} nodes",
            fast_dev.timed.get(),
            c.executions
        );
        if model == "gnmt" {
            // newcomers join the decoding batch at another step; members of different lengths
            // split at the encoder's end
            assert!(0 < c.cross_step && c.cross_step < c.executions, "{c:?}");
            assert!(0 < c.splits && c.splits < c.executions, "{c:?}");
        }
    }
}

#[test]
fn a_co_located_run_tallies_each_model_apart() {
    let (m, mut npu, pred) = bench_of(Model::compose(vec![
        zoo::load("resnet50").unwrap(),
        zoo::load("gnmt").unwrap(),
    ]));
    let sla = Nanos::from_ms(5e3);
    let arrivals: Vec<Arrival> =
        crate::traffic::generate_parts(&m, Default::default(), (&[40.0, 20.0], &[sla, sla]), 30, 9)
            .unwrap()
            .collect();
    let mut pol = policy::parse("lazy", 8).unwrap();
    let setup = Setup::new(
        &m,
        &pred,
        Sla::from_ms(5e3).unwrap(),
        MaxBatch::new(8).unwrap(),
    );
    let out = run(
        &setup,
        &mut npu,
        pol.as_mut(),
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap();
    let parts = out.part_stats();
    assert_eq!(parts.len(), 2);
    for (p, st) in parts.iter().enumerate() {
        let sent = arrivals.iter().filter(|a| usize::from(a.part) == p).count();
        assert!(sent > 0, "model {p}");
        assert_eq!(st.completed, sent as u64, "model {p}");
    }
    assert_eq!(out.stats().completed, 30);
}
