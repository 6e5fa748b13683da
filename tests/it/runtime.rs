//! The serving runtime: nothing lost, merge rules, the paper's worked example, policy
//! equivalences, determinism, and the slack predictor's veto.

use lazybatch::device::npu::NpuConfig;
use lazybatch::engine;
use lazybatch::graph::{zoo, Lengths, Model};
use lazybatch::policy;
use lazybatch::profile::Profile;
use lazybatch::run::spec::Colocation;
use lazybatch::run::{RunSpec, Testbed};
use lazybatch::runtime::Predictor;
use lazybatch::time::{Nanos, Sla, VirtualClock};
use lazybatch::traffic::Arrival;
use proptest::prelude::*;

use crate::UnitDevice;

fn fixture(name: &str) -> Model {
    zoo::load(&format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn the_papers_worked_example_step_by_step() {
    let m = fixture("eight_nodes.toml");
    let mut dev = UnitDevice;
    let prof = Profile::measure(&mut dev, &m, 8, m.ref_lengths()).unwrap();
    let pred = Predictor::new(&m, &prof, 1);
    let at = |ms: f64| Arrival {
        time: Nanos::from_ms(ms),
        len: Lengths { enc: 1, dec: 1 },
        ..Arrival::default()
    };
    // Req1 is issued at t=2; Req2 arrives while Req1 runs B (3..4); Req3 while Req2 runs A (4..5)
    let arrivals = [at(2.0), at(3.5), at(4.5)];
    let mut pol = policy::parse("lazy", 8).unwrap();
    let out = engine::run(
        &engine::Setup {
            snapshots: true,
            keep: lazybatch::metrics::KeepRecords {
                requests: true,
                ..Default::default()
            },
            ..engine::Setup::new(&m, &pred, crate::sla(30.0), crate::mb(8))
        },
        &mut dev,
        pol.as_mut(),
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap();
    let snaps = out.snapshots.unwrap();
    // the table at the end of each time unit, as (members, next node) bottom first; node ids: in=0, A=1 .. H=8
    let table_at = |ms: f64| -> Vec<(Vec<u32>, u32)> {
        let t = Nanos::from_ms(ms);
        let s = snaps.iter().rev().find(|s| s.0 == t).unwrap();
        s.1.iter().map(|(m, n)| (m.clone(), n.node.0)).collect()
    };
    // node ids: in=0, A=1, B=2, C=3; request ids: Req1=0, Req2=1, Req3=2
    assert_eq!(
        table_at(2.0),
        vec![(vec![0], 1)],
        "t=2: Req1 pushed, next A"
    );
    assert_eq!(
        table_at(4.0),
        vec![(vec![0], 3), (vec![1], 1)],
        "t=4: Req1 preempted before C, Req2 pushed"
    );
    assert_eq!(
        table_at(5.0),
        vec![(vec![0], 3), (vec![1], 2), (vec![2], 1)],
        "t=5: Req3 pushed"
    );
    assert_eq!(
        table_at(6.0),
        vec![(vec![0], 3), (vec![1, 2], 2)],
        "t=6: Req2 and Req3 merge at B"
    );
    assert_eq!(
        table_at(7.0),
        vec![(vec![0, 1, 2], 3)],
        "t=7: all merge at C"
    );
    assert_eq!(out.counters.preemptions, 2);
    assert_eq!(out.counters.merges, 2);
    // every request completes exactly once, together at the end
    let done: Vec<Nanos> = out.requests.iter().map(|r| r.completion.unwrap()).collect();
    assert!(done.iter().all(|&d| d == done[0]));
}

/// Runs `policy` on the eight-node graph over the unit device (1 ms a node at any batch, the
/// input node free): completion times in ms, by request.
fn unit_run(policy: &str, arrivals: &[Arrival]) -> Vec<f64> {
    let m = fixture("eight_nodes.toml");
    let mut dev = UnitDevice;
    let prof = Profile::measure(&mut dev, &m, 8, m.ref_lengths()).unwrap();
    let pred = Predictor::new(&m, &prof, 1);
    let mut pol = policy::parse(policy, 8).unwrap();
    let setup = engine::Setup {
        keep: lazybatch::metrics::KeepRecords {
            requests: true,
            ..Default::default()
        },
        ..engine::Setup::new(&m, &pred, crate::sla(100.0), crate::mb(8))
    };
    let out = engine::run(
        &setup,
        &mut dev,
        pol.as_mut(),
        &mut VirtualClock::new(),
        arrivals,
    );
    out.unwrap()
        .requests
        .iter()
        .map(|r| r.completion.unwrap().as_ms())
        .collect()
}

/// A request of the eight-node graph (one step each way) arriving at `ms` with an SLA of `sla`
/// ms.
fn at(ms: f64, sla: f64) -> Arrival {
    Arrival {
        time: Nanos::from_ms(ms),
        len: Lengths { enc: 1, dec: 1 },
        sla: Some(Nanos::from_ms(sla)),
        ..Arrival::default()
    }
}

#[test]
fn a_refused_batch_runs_to_completion_and_arrivals_meanwhile_wait_for_it() {
    // the unit device: 1 ms a node, the input free, 8 ms alone. Requests 0 and 1 at t = 0
    // (request 0's SLA 20 ms), 2 at 0.5 ms and 3 at 5 ms (SLA 100 ms). At each boundary n
    // (t = n) the gate weighs n + 2 (8 − n) + 8 = 24 − n ms against request 0's deadline of 20
    let arrivals = [
        at(0.0, 20.0),
        at(0.0, 100.0),
        at(0.5, 100.0),
        at(5.0, 100.0),
    ];
    // the paper's rule: refused at t = 1, the pair runs to completion at 8 uninterrupted;
    // requests 2 and 3 (arrived meanwhile) then start together on the idle server: 16
    assert_eq!(unit_run("lazy", &arrivals), [8.0, 8.0, 16.0, 16.0]);
    // the Oracle's exact estimate sees that a batch costs what one request does here, so it
    // never refuses: request 2 at t = 1 (it runs A by 2 and merges with the pair at B),
    // request 3 at t = 5 (it catches up A..D by 9 and merges at E); the four finish at 13
    assert_eq!(unit_run("oracle", &arrivals), [13.0, 13.0, 13.0, 13.0]);
    // asked again at every node, the gate lets request 2 in at t = 4 (24 − 4 = 20): it
    // catches up with the pair at E at t = 8 and the three finish at 12; request 3 is refused
    // until the table empties (12 + 8 = 20)
    assert_eq!(
        unit_run("lazy:recheck", &arrivals),
        [12.0, 12.0, 12.0, 20.0]
    );
    // alone, a request is never refused: both rules are the single-input latency
    let one = [at(1.0, 100.0)];
    assert_eq!(unit_run("lazy", &one), [9.0]);
    assert_eq!(unit_run("lazy:recheck", &one), [9.0]);
}

#[test]
fn a_lone_request_starts_at_once_under_lazy_and_after_the_window_under_graph() {
    // one request at 1 ms on the unit device (8 ms alone): LazyB starts it on arrival; GraphB
    // holds it for its whole window first, since no second request comes to fill the batch
    let one = [Arrival {
        time: Nanos::from_ms(1.0),
        len: Lengths { enc: 1, dec: 1 },
        sla: Some(Nanos::from_ms(100.0)),
        ..Arrival::default()
    }];
    assert_eq!(unit_run("lazy", &one), [9.0]);
    assert_eq!(unit_run("serial", &one), [9.0]);
    assert_eq!(unit_run("graph:20", &one), [29.0]);
    assert_eq!(unit_run("graph:0", &one), [9.0]);
}

#[test]
fn the_oracles_estimate_is_the_simulated_finish_time() {
    // Req0 arrives at 0 and has run A, B, C by t = 3 (next D); two newcomers arrived at 2.5.
    // The Oracle's look-ahead: the newcomers catch up to D in 3 ms (A, B, C; the input is
    // free), then all three run D..H together in 5: everyone done at 3 + 3 + 5 = 11 ms. The
    // simulation must finish exactly then, and a deadline 1 µs earlier must refuse them
    // (Req0 then finishes alone at 8 and the newcomers run 8..16).
    let newcomers = [at(2.5, 100.0), at(2.5, 100.0)];
    let with = |sla0: f64| {
        let mut a = vec![at(0.0, sla0)];
        a.extend(newcomers);
        a
    };
    assert_eq!(unit_run("oracle", &with(11.0)), [11.0, 11.0, 11.0]);
    assert_eq!(unit_run("oracle", &with(10.999)), [8.0, 16.0, 16.0]);
    // LazyB's conservative sum asks for 3 + 5 + 8 + 8 = 24 ms of Req0's deadline for the same
    // schedule. Just below, it takes the longest prefix that fits: one newcomer at t = 3
    // (3 + 5 + 8 = 16), which merges with Req0 at D at t = 6. At t = 4 the gate refuses the
    // second (4 + 5 left for Req0 + 7 for the first newcomer + 8 = 24 ms): the refusal holds
    // until the first newcomer's sub-batch, the one active then, completes at 11; the second
    // then runs alone, 11..19. Asked again at every node (`lazy:recheck`), the gate lets it in
    // at t = 7, when the merged two have 4 ms each left (7 + 8 + 8 = 23): it catches up to E by
    // 11 and all are done at 15. Below 16 ms not even one fits at any boundary
    // (t + (8 − t) + 8 = 16).
    assert_eq!(unit_run("lazy", &with(24.0)), [11.0, 11.0, 11.0]);
    assert_eq!(unit_run("lazy", &with(23.999)), [11.0, 11.0, 19.0]);
    assert_eq!(unit_run("lazy:recheck", &with(23.999)), [15.0, 15.0, 15.0]);
    // at exactly 16 the first fits and the second never does (7 + 8 + 8 > 16): it runs alone
    // after the merged pair, 11..19, under either rule
    assert_eq!(unit_run("lazy", &with(16.0)), [11.0, 11.0, 19.0]);
    assert_eq!(unit_run("lazy:recheck", &with(16.0)), [11.0, 11.0, 19.0]);
    assert_eq!(unit_run("lazy", &with(15.999)), [8.0, 16.0, 16.0]);
}

fn bench(model: &str, max_batch: u32) -> Testbed {
    Testbed::new(
        zoo::load(model).unwrap(),
        NpuConfig::default(),
        crate::mb(max_batch),
        90.0,
    )
    .unwrap()
}

/// `c` with server maximum batch `mb` (the policy's default maximum batch follows it).
fn with_max(mut c: RunSpec, mb: u32) -> RunSpec {
    c.max_batch = crate::mb(mb);
    c.policy = policy::Spec::parse(&c.policy.text, mb).unwrap();
    c
}

fn cfg(policy: &str, rate: f64, n: usize, seed: u64) -> RunSpec {
    cfg_max(policy, rate, n, seed, 8)
}

fn cfg_max(policy: &str, rate: f64, n: usize, seed: u64, max_batch: u32) -> RunSpec {
    RunSpec {
        policy: policy::Spec::parse(policy, max_batch).unwrap(),
        rate,
        arrivals: Default::default(),
        classes: None,
        shed: false,
        abandon_late: false,
        admit: Default::default(),
        requests: n,
        sla: crate::sla(100.0),
        seed,
        max_batch: crate::mb(max_batch),
        max_pending: lazybatch::runtime::MaxPending::DEFAULT,
        colocated: None,
        replicas: lazybatch::engine::Replicas::ONE,
    }
}

/// One run keeping every request's record: its statistics and its outcome.
fn run(b: &Testbed, c: &RunSpec) -> (lazybatch::metrics::Stats, lazybatch::engine::Outcome) {
    let keep = lazybatch::metrics::KeepRecords {
        requests: true,
        ..Default::default()
    };
    let out = b.run(c, keep).unwrap();
    (out.stats(), out)
}

/// Every policy the registry lists, by the examples each declares
/// (`lazybatch::policy::examples`): a new policy is driven here without an edit.
fn policies() -> Vec<&'static str> {
    policy::examples().collect()
}

/// Arrivals whose clients go away: `leave[i]`, when set, is how long after its arrival request
/// `i`'s client leaves (told to the engine at its first look at or after that instant, after
/// the arrivals due by then: as a front end tells it).
struct Leaving<'a> {
    inner: engine::Predrawn<'a>,
    /// (instant, key), by instant.
    told: std::collections::VecDeque<(Nanos, u64)>,
    now: Nanos,
}

impl engine::ArrivalSource for Leaving<'_> {
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        self.now = now;
        self.inner.poll(now)
    }
    fn idle(&mut self, clock: &mut dyn lazybatch::time::Clock, until: Option<Nanos>) -> bool {
        // wake for the next leaving as for an arrival
        let until = match (until, self.told.front()) {
            (Some(u), Some(&(t, _))) => Some(u.min(t)),
            (u, t) => u.or(t.map(|t| t.0)),
        };
        self.inner.idle(clock, until)
    }
    fn expected(&self) -> usize {
        self.inner.expected()
    }
    fn next_due(&mut self) -> Option<Nanos> {
        let next = self.inner.next_due();
        match (next, self.told.front()) {
            (Some(n), Some(&(t, _))) => Some(n.min(t)),
            (n, _) => n,
        }
    }
    fn cancelled(&mut self, keys: &mut Vec<u64>) {
        while self.told.front().is_some_and(|&(t, _)| t <= self.now) {
            keys.extend(self.told.pop_front().map(|(_, k)| k));
        }
    }
}

/// A bench of two co-located models (a seq2seq model and a static one).
fn colocated_bench() -> Testbed {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
    let m = Model::compose(vec![
        zoo::load(&format!("{dir}/tiny_seq2seq.toml")).unwrap(),
        zoo::load(&format!("{dir}/eight_nodes.toml")).unwrap(),
    ]);
    Testbed::new(m, NpuConfig::default(), crate::mb(8), 90.0).unwrap()
}

proptest! {
    #![proptest_config(crate::proptest_config(48))]

    /// The account of requests: random traffic (bursts included), every policy of the
    /// registry, one model or two co-located, a pending queue small enough to reject, and
    /// clients that leave at random (queued, mid-batch or after their answer): every request
    /// that arrived leaves exactly once — completed, rejected or cancelled — and the counts
    /// agree with the records.
    #[test]
    fn every_request_leaves_exactly_once(
        gaps in proptest::collection::vec(0u32..2000, 1..60),
        lens in proptest::collection::vec((1u32..12, 1u32..12, 0u16..2), 60),
        pi in 0usize..64,
        max_pending in 1usize..6,
        colocated in any::<bool>(),
        shed in any::<bool>(),
        leave in proptest::collection::vec(proptest::option::weighted(0.2, 0u64..5000), 60),
    ) {
        let all = policies();
        let policy = all[pi % all.len()];
        // a policy that serves one model only (the Oracle, cellular, continuous…) runs one
        let two = Model::compose(vec![
            zoo::load(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/eight_nodes.toml")).unwrap(),
            zoo::load(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/eight_nodes.toml")).unwrap(),
        ]);
        let colocated = colocated && policy::Spec::parse(policy, 8).unwrap().check_for(&two).is_ok();
        let b = if colocated {
            colocated_bench()
        } else {
            bench(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny_seq2seq.toml"), 8)
        };
        let mut t = 0u64;
        let arrivals: Vec<Arrival> = gaps.iter().zip(&lens).map(|(g, l)| {
            t += u64::from(*g) * 100;
            let part = if colocated { l.2 } else { 0 };
            let len = if part == 1 { Lengths { enc: 1, dec: 1 } } else { Lengths { enc: l.0, dec: l.1 } };
            // a single model's requests fall in three SLA classes
            let class = if colocated { 0 } else { (l.0 % 3) as u8 };
            let sla = if colocated { Some(Nanos::from_ms(50.0)) } else { Some(Nanos::from_ms(10.0 * f64::from(class + 1))) };
            Arrival { time: Nanos(t), len, part, sla, class, key: None }
        }).collect();
        // some clients leave, each after its request arrived (its key: its id, the default)
        let mut told: Vec<(Nanos, u64)> = arrivals.iter().zip(&leave).enumerate()
            .filter_map(|(i, (a, l))| l.map(|d| (a.time + Nanos(d * 10), i as u64)))
            .collect();
        told.sort();
        let leaving = told.len() as u64;
        let mut src = Leaving { inner: engine::Predrawn::new(&arrivals), told: told.into(), now: Nanos::ZERO };
        let mut pol = policy::parse(policy, 8).unwrap();
        let setup = engine::Setup {
            max_pending: lazybatch::runtime::MaxPending::new(max_pending).unwrap(),
            check_invariants: true,
            keep: lazybatch::metrics::KeepRecords { requests: true, ..Default::default() },
            classes: if colocated { 1 } else { 3 },
            shed,
            ..engine::Setup::new(&b.model, &b.predictor, crate::sla(100.0), crate::mb(8))
        };
        let out = engine::run_source(&setup, &mut b.npu().unwrap().clone(), pol.as_mut(), &mut VirtualClock::new(), &mut src).unwrap();
        let st = out.stats();
        // one record per id, in order, and each either completed or rejected
        prop_assert_eq!(out.requests.len(), arrivals.len());
        for (i, r) in out.requests.iter().enumerate() {
            prop_assert_eq!(r.id.0 as usize, i);
            // completed once issued; issued and not completed only when its client left
            prop_assert!(r.completion.is_none() || r.first_issue.is_some());
            if r.first_issue.is_some() && r.completion.is_none() {
                prop_assert!(leave[i].is_some(), "request {} was issued and never completed", i);
            }
        }
        let completed = out.requests.iter().filter(|r| r.completion.is_some()).count() as u64;
        prop_assert_eq!(st.requests, arrivals.len() as u64);
        prop_assert_eq!(st.completed, completed);
        prop_assert_eq!(st.rejected, st.requests - completed);
        prop_assert_eq!(st.rejected, st.rejected_queue_full + st.rejected_shed + st.rejected_cancelled);
        prop_assert!(st.rejected_cancelled <= leaving);
        prop_assert!(shed || st.rejected_shed == 0);
        // per model, the same account
        let parts = out.part_stats();
        if colocated {
            prop_assert_eq!(parts.iter().map(|p| p.requests).sum::<u64>(), st.requests);
            prop_assert_eq!(parts.iter().map(|p| p.completed).sum::<u64>(), st.completed);
            prop_assert_eq!(parts.iter().map(|p| p.rejected).sum::<u64>(), st.rejected);
        } else {
            // per SLA class, the same account, each class's requests those of its arrivals
            let classes = out.class_stats();
            prop_assert_eq!(classes.len(), 3);
            for (k, c) in classes.iter().enumerate() {
                let n = arrivals.iter().filter(|a| usize::from(a.class) == k).count() as u64;
                prop_assert_eq!(c.requests, n);
                prop_assert_eq!(c.completed + c.rejected, n);
            }
            prop_assert_eq!(classes.iter().map(|c| c.rejected).sum::<u64>(), st.rejected);
        }
    }
}

/// The merge-rule test's maximum batch.
const MB: u32 = 4;

proptest! {
    #![proptest_config(crate::proptest_config(96))]

    #[test]
    fn nothing_is_lost_and_merges_follow_the_rules(
        gaps in proptest::collection::vec(0u32..400, 1..40),
        lens in proptest::collection::vec((1u32..12, 1u32..12), 40),
        pi in 0usize..64,
    ) {
        let all = policies();
        let name = all[pi % all.len()];
        // a maximum batch of 4 (the examples' largest own batch) and arrivals at most 40 µs
        // apart: merges that would exceed it and merges that reach it exactly both happen (96
        // cases: entries of exactly 4 under lazy, oracle, lazy:adaptive, cellular, dva and
        // graph batching, counted once by hand)
        let b = bench(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny_seq2seq.toml"), MB);
        let mut t = 0u64;
        let arrivals: Vec<Arrival> = gaps.iter().zip(&lens).map(|(g, l)| {
            t += u64::from(*g) * 100;
            Arrival { time: Nanos(t), len: Lengths { enc: l.0, dec: l.1 }, ..Arrival::default() }
        }).collect();
        let mut pol = policy::parse(name, MB).unwrap();
        let mut dev = b.npu().unwrap().clone();
        let out = engine::run(
&engine::Setup { snapshots: true, check_invariants: true, keep: lazybatch::metrics::KeepRecords { requests: true, ..Default::default() }, ..engine::Setup::new(&b.model, &b.predictor, crate::sla(100.0), crate::mb(MB)) },
&mut dev,
pol.as_mut(),
&mut VirtualClock::new(),
&arrivals,
).unwrap();
        prop_assert_eq!(out.requests.len(), arrivals.len());
        prop_assert!(out.requests.iter().all(|r| r.completion.is_some() && r.first_issue.is_some()));
        // a request is issued after it arrives and, once issued, takes at least its own graph
        // alone at batch 1 (Algorithm 1 at its actual lengths: batching never makes a node
        // faster for one member, and padding only adds steps)
        for r in &out.requests {
            let (issued, done) = (r.first_issue.unwrap(), r.completion.unwrap());
            prop_assert!(issued >= r.arrival);
            prop_assert!(done - issued >= b.predictor.single_input(r.len), "{:?}", r);
        }
        for (_, entries) in out.snapshots.unwrap() {
            let mut seen = std::collections::HashSet::new();
            for (members, _) in &entries {
                prop_assert!(!members.is_empty() && members.len() <= MB as usize);
                for m in members { prop_assert!(seen.insert(*m)); }
            }
            // adjacent entries never stand at the same unit (they would have merged)
            for w in entries.windows(2) {
                prop_assert!(w[0].1 != w[1].1 || w[0].0.len() + w[1].0.len() > MB as usize || name.starts_with("graph") || name == "serial");
                // at cells (every loop node, for lazy, oracle and cellular) the same layer at
                // another step must have merged too
                if ["cellular:2:4", "lazy", "oracle", "lazy:no-decoder-preempt", "dva:50:2:4"].contains(&name) {
                    prop_assert!(w[0].1.node != w[1].1.node || w[0].0.len() + w[1].0.len() > MB as usize || b.model.node(w[0].1.node).loop_id.is_none());
                }
            }
        }
    }
}

#[test]
fn graph_0_1_is_exactly_serial() {
    for model in ["resnet50", "gnmt"] {
        let b = bench(model, 8);
        let a = run(&b, &cfg("serial", 20.0, 300, 7)).0;
        let g = run(&b, &cfg("graph:0:1", 20.0, 300, 7)).0;
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&g).unwrap(),
            "{model}"
        );
    }
}

#[test]
fn same_seed_same_bytes_different_seed_differs() {
    let b = bench("transformer", 8);
    let run = |seed| serde_json::to_string(&run(&b, &cfg("lazy", 50.0, 200, seed)).0).unwrap();
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
}

#[test]
fn lazy_never_preempts_when_its_predictor_forbids_it() {
    // an SLA below one request's predicted latency: every slack check fails
    let b = bench("resnet50", 8);
    let single = b.predictor.single_input(b.model.ref_lengths());
    for p in ["lazy", "oracle"] {
        let mut c = cfg(p, 2000.0, 400, 1);
        c.sla = Sla::new(Nanos(single.0 / 2)).unwrap();
        let (st, _) = run(&b, &c);
        assert_eq!(st.preemptions, 0, "{p}");
        assert_eq!(st.completed, 400);
    }
    // with a generous SLA the same traffic is lazily batched
    let (st, _) = run(&b, &cfg("lazy", 2000.0, 400, 1));
    assert!(st.preemptions > 0);
}

#[test]
fn lazy_at_low_load_is_close_to_the_single_input_latency() {
    let b = bench("resnet50", 64);
    let single = b.predictor.single_input(b.model.ref_lengths()).as_ms();
    let (st, _) = run(&b, &cfg("lazy", 16.0, 500, 2));
    assert!(
        st.latency_ms.mean < 1.1 * single,
        "{} vs {single}",
        st.latency_ms.mean
    );
    let (g, _) = run(&b, &cfg("graph:25", 16.0, 500, 2));
    assert!(g.latency_ms.mean > 5.0 * st.latency_ms.mean);
}

#[test]
fn policy_strings_are_checked() {
    for bad in [
        "graph:abc",
        "graph:-5",
        "lazy:1",
        "serial:1",
        "graph",
        "graph:5:0",
        "graph:5:9",
        "fifo",
        "graph:1:2:3",
        "lazy+cell:strict",
    ] {
        let e = policy::parse(bad, 8)
            .err()
            .unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(e.to_string().contains(bad), "{e}");
    }
    // a policy answers to the string it was parsed from (results and reports are keyed by it)
    for good in [
        "serial",
        "graph:0",
        "graph:2.5:8",
        "lazy",
        "oracle",
        "lazy:strict",
        "oracle:strict",
        "cellular:2:4",
    ] {
        assert_eq!(policy::parse(good, 8).unwrap().name(), good);
    }
}

#[test]
fn violations_are_the_requests_over_the_sla_and_only_lazy_reads_it() {
    // The violation rate is, by definition, the fraction of completed requests whose latency
    // exceeds the SLA, counted here from every request's own record; an SLA-blind policy runs
    // the same schedule whatever the SLA (so its rate cannot rise with it), and LazyB's slack
    // gate reads the SLA (so its schedule changes with it).
    let b = bench("resnet50", 64);
    let n = 1000;
    for p in ["serial", "graph:25", "lazy"] {
        let mut schedules = Vec::new();
        let mut last = 1.0f64;
        for sla in [8.0, 20.0, 40.0, 100.0] {
            let mut c = with_max(cfg(p, 1000.0, n, 1), 64);
            c.sla = crate::sla(sla);
            let (st, out) = run(&b, &c);
            let lat: Vec<Nanos> = out.requests.iter().map(|r| r.latency().unwrap()).collect();
            assert_eq!(lat.len(), n, "{p}");
            let over = lat.iter().filter(|&&l| l > c.sla.nanos()).count();
            assert_eq!(
                st.sla_violation_rate,
                over as f64 / n as f64,
                "{p} at {sla} ms"
            );
            if p != "lazy" {
                assert!(
                    over > 0 || sla > 8.0,
                    "{p}: some requests miss 8 ms at 1,000 req/s"
                );
                assert!(st.sla_violation_rate <= last, "{p} at {sla} ms");
            }
            last = st.sla_violation_rate;
            schedules.push(lat);
        }
        let same = schedules.windows(2).all(|w| w[0] == w[1]);
        assert_eq!(
            same,
            p != "lazy",
            "{p}: schedule depends on the SLA: {}",
            !same
        );
    }
}

#[test]
fn cellular_is_graph_batching_on_resnet() {
    let b = bench("resnet50", 16);
    for (w, bb) in [(5.0, 16), (25.0, 8)] {
        let cg = cfg_max(&format!("graph:{w}:{bb}"), 800.0, 600, 3, 16);
        let cc = cfg_max(&format!("cellular:{w}:{bb}"), 800.0, 600, 3, 16);
        let (g, og) = run(&b, &cg);
        let (c, oc) = run(&b, &cc);
        assert_eq!(
            serde_json::to_string(&g).unwrap(),
            serde_json::to_string(&c).unwrap()
        );
        assert_eq!(og.counters, oc.counters);
    }
}

#[test]
fn cellular_batches_requests_of_different_timesteps_on_a_pure_rnn_model() {
    let b = bench("lstm_stack", 64);
    let mut c = cfg("cellular:5", 400.0, 600, 2);
    c.max_batch = crate::mb(64);
    let (st, out) = run(&b, &c);
    assert_eq!(st.completed, 600);
    assert!(out.counters.cross_step > 0, "no execution mixed timesteps");
    // requests that arrived at different times ran together: some execution batched a request
    // with one that had already advanced further through the loop (cross-step batch)
    let mut g = cfg("graph:5", 400.0, 600, 2);
    g.max_batch = crate::mb(64);
    let (_, og) = run(&b, &g);
    assert_eq!(og.counters.cross_step, 0);
    // and it does not help a model whose first layer is not a cell (GNMT starts with an embedding)
    let gn = bench("gnmt", 64);
    let mut c2 = cfg("cellular:5", 100.0, 300, 2);
    c2.max_batch = crate::mb(64);
    let (_, o2) = run(&gn, &c2);
    assert_eq!(
        o2.counters.preemptions, 0,
        "a newcomer cannot join a GNMT batch"
    );
}

#[test]
fn sla_classes_are_accounted_exactly_once_under_overload() {
    // 30 times GNMT's serial capacity (beyond what batches of 8 absorb) into a pending queue of
    // 30: many are rejected; every request leaves once, in its class, with its own deadline
    let b = bench("gnmt", 8);
    let mut c = cfg("lazy", 30.0 * b.serial_capacity(), 3000, 4);
    c.max_pending = lazybatch::runtime::MaxPending::new(30).unwrap();
    c.classes = Some("gold:1:1,bronze:86400000:3".parse().unwrap());
    let (st, mut out) = run(&b, &c);
    let per = out.class_stats();
    assert_eq!(per.len(), 2);
    assert!(
        st.rejected > 100,
        "not overloaded: {} rejected",
        st.rejected
    );
    assert_eq!(per.iter().map(|s| s.requests).sum::<u64>(), 3000);
    for s in &per {
        assert_eq!(s.completed + s.rejected, s.requests);
    }
    assert_eq!(per.iter().map(|s| s.rejected).sum::<u64>(), st.rejected);
    let gold_share = per[0].requests as f64 / 3000.0;
    assert!((gold_share - 0.25).abs() < 0.03, "gold share {gold_share}");
    // a 1 ms deadline is always missed, a one-day one never
    assert_eq!(per[0].sla_violation_rate, 1.0);
    assert_eq!(per[1].sla_violation_rate, 0.0);
    for q in out.record.take_requests() {
        let sla = if q.class == 0 { 1.0 } else { 86_400_000.0 };
        assert_eq!(
            q.deadline - q.arrival,
            Nanos::from_ms(sla),
            "request {}",
            q.id.0
        );
    }
}

#[test]
fn shedding_drops_only_lost_deadlines_and_goodput_counts_the_met_ones() {
    // ResNet-50 serves a request alone in 0.75 ms on this NPU, and never faster in a batch: a
    // 0.5 ms class can never be met (every such request is shed at arrival), a one-day class
    // always is (none shed)
    let b = bench("resnet50", 8);
    let mut c = cfg("lazy", 0.5 * b.serial_capacity(), 4000, 6);
    c.classes = Some("tight:0.5:1,loose:86400000:1".parse().unwrap());
    let (off, out_off) = run(&b, &c);
    assert_eq!((off.rejected_shed, off.rejected), (0, 0));
    assert_eq!(out_off.class_stats()[0].sla_violation_rate, 1.0);
    c.shed = true;
    let (on, out) = run(&b, &c);
    let (tight, loose) = (&out.class_stats()[0], &out.class_stats()[1]);
    assert!(tight.requests > 1000);
    assert_eq!(tight.rejected_shed, tight.requests);
    assert_eq!((tight.completed, loose.rejected), (0, 0));
    assert_eq!(on.rejected, on.rejected_shed);
    // goodput counts completions within their deadline: the loose class's, in both runs
    let within = |s: &lazybatch::metrics::Stats| s.completed as f64 * (1.0 - s.sla_violation_rate);
    assert!((within(&on) - loose.completed as f64).abs() < 0.5);
    assert!((within(&off) - loose.completed as f64).abs() < 0.5);
    assert!(on.goodput_rps > 0.0 && on.goodput_rps < on.throughput_rps * 1.0001);
}

#[test]
fn continuous_is_graph_0_on_a_model_without_loops() {
    // no iterations to join: a batch runs to its end and the next takes whatever is pending
    let b = bench("resnet50", 16);
    let rate = 0.9 * b.serial_capacity() * 4.0;
    let g = run(&b, &cfg_max("graph:0", rate, 2000, 3, 16)).0;
    let c = run(&b, &cfg_max("continuous", rate, 2000, 3, 16)).0;
    assert!(
        g.mean_batch_size > 1.5,
        "batches formed: {}",
        g.mean_batch_size
    );
    assert_eq!(
        serde_json::to_string(&g).unwrap(),
        serde_json::to_string(&c).unwrap()
    );
}

#[test]
fn continuous_admits_newcomers_at_decoder_iterations() {
    // GNMT: newcomers run their encoder ahead of the running batch (a preemption at an
    // iteration boundary) and join it in the decoder, at another step (a cross-step merge);
    // requests leave at their own length, the running batch never exceeds B
    let b = bench("gnmt", 8);
    let (st, out) = run(&b, &cfg("continuous", 60.0, 400, 5));
    assert_eq!(st.completed, 400);
    assert!(
        out.counters.preemptions > 0,
        "no newcomer joined a running batch"
    );
    assert!(
        out.counters.merges > 0 && out.counters.cross_step > 0,
        "{:?}",
        out.counters
    );
    let (_, graph) = run(&b, &cfg("graph:0", 60.0, 400, 5));
    assert_eq!(graph.counters.preemptions, 0);
    // the rule is on the largest batch in flight, not the mean: every snapshot of the table
    // holds at most B requests, and B is reached
    for (policy, cap) in [("continuous", 8), ("continuous:4", 4), ("continuous:3", 3)] {
        assert_eq!(largest_in_flight(&b, policy, 60.0, 400, 5), cap, "{policy}");
    }
}

/// The most requests in the BatchTable at once over a run of `n` Poisson arrivals at `rate`
/// (every snapshot the engine takes).
fn largest_in_flight(b: &Testbed, policy: &str, rate: f64, n: usize, seed: u64) -> usize {
    let arrivals: Vec<Arrival> = lazybatch::traffic::generate_parts(
        &b.model,
        Default::default(),
        (&[rate], &[Nanos::from_ms(100.0)]),
        n,
        seed,
    )
    .unwrap()
    .collect();
    let mut pol = policy::parse(policy, 8).unwrap();
    let out = engine::run(
        &engine::Setup {
            snapshots: true,
            ..engine::Setup::new(&b.model, &b.predictor, crate::sla(100.0), crate::mb(8))
        },
        &mut b.npu().unwrap().clone(),
        pol.as_mut(),
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap();
    out.snapshots
        .unwrap()
        .iter()
        .map(|(_, entries)| entries.iter().map(|(m, _)| m.len()).sum::<usize>())
        .max()
        .unwrap_or(0)
}

#[test]
fn lazy_merges_across_timesteps_and_strict_does_not() {
    for model in ["transformer", "gnmt"] {
        let b = bench(model, 8);
        for p in ["lazy", "oracle"] {
            let (st, out) = run(&b, &cfg(p, 300.0, 300, 4));
            assert_eq!(st.completed, 300, "{model} {p}");
            assert!(
                out.counters.cross_step > 0,
                "{model} {p}: no cross-step batch"
            );
            let strict = format!("{p}:strict");
            let (st, out) = run(&b, &cfg(&strict, 300.0, 300, 4));
            assert_eq!(st.completed, 300, "{model} {strict}");
            assert_eq!(out.counters.cross_step, 0, "{model} {strict}");
        }
    }
    // `lazy+cell`, the rule's name while it was an option, is `lazy`
    assert_eq!(policy::parse("lazy+cell", 8).unwrap().name(), "lazy");
    for bad in [
        "cellular:abc",
        "cellular",
        "lazy+cell:1",
        "cellular:5:0",
        "lazy:loose",
        "oracle:strict:1",
    ] {
        assert!(policy::parse(bad, 8).is_err(), "{bad}");
    }
}

#[test]
fn colocated_models_complete_once_and_never_share_a_sub_batch() {
    let m = lazybatch::graph::Model::compose(vec![
        zoo::load("resnet50").unwrap(),
        fixture("tiny_seq2seq.toml"),
        zoo::load("transformer").unwrap(),
    ]);
    let b = Testbed::new(m, NpuConfig::default(), crate::mb(8), 90.0).unwrap();
    let slas = [
        Nanos::from_ms(20.0),
        Nanos::from_ms(100.0),
        Nanos::from_ms(200.0),
    ];
    for p in [
        "serial",
        "graph:3:8",
        "graph:3:8:per-model",
        "lazy",
        "lazy:strict",
        "lazy:recheck",
    ] {
        let arrivals = lazybatch::traffic::generate_parts(
            &b.model,
            Default::default(),
            (&[300.0, 200.0, 100.0], &slas),
            300,
            9,
        )
        .unwrap()
        .collect::<Vec<_>>();
        let mut pol = policy::parse(p, 8).unwrap();
        let out = engine::run(
            &engine::Setup {
                snapshots: true,
                keep: lazybatch::metrics::KeepRecords {
                    requests: true,
                    ..Default::default()
                },
                ..engine::Setup::new(&b.model, &b.predictor, crate::sla(100.0), crate::mb(8))
            },
            &mut b.npu().unwrap().clone(),
            pol.as_mut(),
            &mut VirtualClock::new(),
            &arrivals,
        )
        .unwrap();
        assert!(out.requests.iter().all(|r| r.completion.is_some()), "{p}");
        // every request saw its own model's SLA
        for r in &out.requests {
            assert_eq!(r.deadline - r.arrival, slas[usize::from(r.part)], "{p}");
        }
        for (_, entries) in out.snapshots.unwrap() {
            for (members, next) in &entries {
                let part = b.model.part_of(next.node) as u16;
                assert!(
                    members
                        .iter()
                        .all(|&id| out.requests[id as usize].part == part),
                    "{p}: a sub-batch mixes models"
                );
            }
        }
        let parts: Vec<u16> = out.requests.iter().map(|r| r.part).collect();
        assert!(
            (0..3).all(|k| parts.contains(&k)),
            "every model received requests"
        );
    }
    // policies that assume one model refuse
    let sla3: Vec<_> = slas.iter().map(|&t| Sla::new(t).unwrap()).collect();
    let colo =
        |shares: &[f64]| Colocation::new(shares.len(), Some(shares), None, crate::sla(100.0));
    for p in ["oracle", "cellular:5"] {
        let spec = RunSpec {
            colocated: Some(
                Colocation::new(3, Some(&[50.0, 30.0, 20.0]), Some(&sla3), crate::sla(100.0))
                    .unwrap(),
            ),
            ..cfg(p, 100.0, 50, 1)
        };
        let e = b.run(&spec, Default::default()).unwrap_err();
        assert!(e.to_string().contains("co-located"), "{e}");
    }
    // shares that do not match the SLAs, or a co-location of another number of models
    assert!(Colocation::new(3, Some(&[50.0, 30.0]), Some(&sla3), crate::sla(100.0)).is_err());
    let two = RunSpec {
        colocated: Some(colo(&[50.0, 30.0]).unwrap()),
        ..cfg("lazy", 100.0, 50, 1)
    };
    let e = b.run(&two, Default::default()).unwrap_err().to_string();
    assert!(
        e.contains("the spec has 2, the model") && e.contains(" 3"),
        "{e}"
    );
    // and a co-located model run as if it were one
    let e = b
        .run(&cfg("lazy", 100.0, 50, 1), Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("has 3 parts"), "{e}");
}

#[test]
fn the_slack_check_protects_other_models() {
    // model 0 has an SLA barely above its own latency; a newcomer of model 1 may not preempt it
    let m = lazybatch::graph::Model::compose(vec![
        zoo::load("vgg16").unwrap(),
        zoo::load("resnet50").unwrap(),
    ]);
    let b = Testbed::new(m, NpuConfig::default(), crate::mb(8), 90.0).unwrap();
    let vgg = b.predictor.single_input_of(0, b.model.ref_lengths_of(0));
    let tight = Nanos(vgg.0 + vgg.0 / 10);
    let arrivals = [
        Arrival {
            time: Nanos::ZERO,
            part: 0,
            sla: Some(tight),
            ..Arrival::default()
        },
        Arrival {
            time: Nanos::from_us(50.0),
            part: 1,
            sla: Some(Nanos::from_secs(1.0)),
            ..Arrival::default()
        },
    ];
    let mut pol = policy::parse("lazy", 8).unwrap();
    let out = engine::run(
        &engine::Setup {
            snapshots: false,
            keep: lazybatch::metrics::KeepRecords {
                requests: true,
                ..Default::default()
            },
            ..engine::Setup::new(&b.model, &b.predictor, crate::sla(100.0), crate::mb(8))
        },
        &mut b.npu().unwrap().clone(),
        pol.as_mut(),
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap();
    assert_eq!(
        out.counters.preemptions, 0,
        "preempting VGG for ResNet would miss VGG's SLA"
    );
    assert!(out.requests[0].completion.unwrap() <= out.requests[0].deadline);
    // with a loose SLA for VGG the newcomer does preempt
    let loose = [
        Arrival {
            sla: Some(Nanos::from_secs(1.0)),
            ..arrivals[0]
        },
        arrivals[1],
    ];
    let mut pol = policy::parse("lazy", 8).unwrap();
    let out = engine::run(
        &engine::Setup {
            snapshots: false,
            keep: lazybatch::metrics::KeepRecords {
                requests: true,
                ..Default::default()
            },
            ..engine::Setup::new(&b.model, &b.predictor, crate::sla(100.0), crate::mb(8))
        },
        &mut b.npu().unwrap().clone(),
        pol.as_mut(),
        &mut VirtualClock::new(),
        &loose,
    )
    .unwrap();
    assert_eq!(out.counters.preemptions, 1);
}

#[test]
fn predictor_matches_the_direct_sum_over_nodes() {
    // Algorithm 1 (the predictor's suffix sums) against a sum written here node by node: at
    // batch 1 every node at its own encoder length (its curve), at batch b every node's
    // batch-b entry at the profiled lengths, each times the steps its loop runs
    for name in zoo::all_names() {
        let b = bench(name, 8);
        let (p, m) = (&b.profile, &b.model);
        let profiled = p.lengths.enc;
        let direct = |len: Lengths, batch: u32| -> u64 {
            m.nodes
                .iter()
                .map(|n| {
                    let row = &p.nodes[n.id.idx()];
                    let t = if batch == 1 && !row.enc_latency_ns.is_empty() {
                        let k = (len.enc.max(1) as usize).min(row.enc_latency_ns.len());
                        row.enc_latency_ns[k - 1]
                    } else {
                        p.latency(n.id, batch).0
                    };
                    t * u64::from(m.repeats(n.id, len))
                })
                .sum()
        };
        for (enc, dec) in [
            (1, 1),
            (2, 5),
            (4, 5),
            (7, 3),
            (7, 31),
            (15, 31),
            (31, 40),
            (60, 31),
            (80, 31),
            (profiled, 9),
        ] {
            let len = Lengths { enc, dec };
            let at_1 = b.predictor.remaining(None, len, 1).0;
            assert_eq!(at_1, direct(len, 1), "{name} {len:?} batch 1");
            assert_eq!(b.predictor.graph_latency(1, len).0, at_1, "{name} {len:?}");
            for batch in [3, 8] {
                let len = Lengths { enc: profiled, dec };
                let pred = b.predictor.remaining(None, len, batch).0;
                assert_eq!(pred, direct(len, batch), "{name} {len:?} batch {batch}");
            }
        }
    }
}

#[test]
fn timing_runs_of_nodes_at_once_changes_nothing() {
    // recording snapshots makes the engine execute node by node; without, the NPU model times
    // runs of batch-size-only nodes at once: every request and counter must be the same, and
    // the shortcut must be taken (fewer device calls than node executions)
    for model in ["resnet50", "gnmt", "transformer", "las"] {
        let b = bench(model, 8);
        for p in [
            "serial",
            "graph:5",
            "lazy",
            "oracle",
            "lazy:strict",
            "cellular:5",
        ] {
            let arrivals =
                lazybatch::traffic::generate(&b.model, (Default::default(), 400.0), 120, 3)
                    .unwrap()
                    .collect::<Vec<_>>();
            let run = |snapshots: bool| {
                let mut pol = policy::parse(p, 8).unwrap();
                let mut dev = Counting {
                    npu: b.npu().unwrap().clone(),
                    calls: Default::default(),
                };
                let out = engine::run(
                    &engine::Setup {
                        snapshots,
                        keep: lazybatch::metrics::KeepRecords {
                            requests: true,
                            ..Default::default()
                        },
                        ..engine::Setup::new(
                            &b.model,
                            &b.predictor,
                            crate::sla(100.0),
                            crate::mb(8),
                        )
                    },
                    &mut dev,
                    pol.as_mut(),
                    &mut VirtualClock::new(),
                    &arrivals,
                )
                .unwrap();
                (out, dev.calls.get())
            };
            let ((fast, fast_calls), (slow, slow_calls)) = (run(false), run(true));
            assert_eq!(fast.requests, slow.requests, "{model} {p}");
            assert_eq!(fast.counters, slow.counters, "{model} {p}");
            assert_eq!(
                slow_calls, slow.counters.executions,
                "{model} {p}: node by node"
            );
            // ResNet-50 is one straight run from its input to its classifier; the sequence
            // models' loops end theirs at each loop's last node
            let most = if model == "resnet50" {
                slow_calls / 2
            } else {
                slow_calls
            };
            assert!(
                fast_calls < most,
                "{model} {p}: {fast_calls} device calls for {slow_calls} node executions"
            );
        }
    }
}

#[test]
fn batch_table_invariants_are_checked_where_ci_requires_it() {
    // CI sets REQUIRE_CHECKS=1 and runs the README's `cargo test --release --features check`:
    // every BatchTable change in every test below is then checked
    let required = std::env::var("REQUIRE_CHECKS").is_ok_and(|v| v == "1");
    let checked = std::hint::black_box(lazybatch::runtime::BatchTable::CHECKED);
    if required || cfg!(feature = "check") {
        assert!(
            checked,
            "the check feature is on (or REQUIRE_CHECKS=1) but the BatchTable checks are compiled out"
        );
    }
    // a table holding one request twice: refused wherever it is checked
    let broken = || {
        let mut t = lazybatch::runtime::BatchTable::new(4);
        let at = lazybatch::graph::NodeStep {
            node: lazybatch::graph::NodeId(0),
            step: 0,
        };
        let r = lazybatch::runtime::RequestId(1);
        t.push_from([r, r], at, None);
        t
    };
    if checked {
        // every change is checked as it is made: the push itself stops
        assert!(
            std::panic::catch_unwind(broken).is_err(),
            "a request twice passed the compiled-in check"
        );
    } else {
        // compiled out: the change goes through, and only an explicit check sees it
        assert!(broken().check().is_err());
        crate::say_skipped(
            "SKIPPED-CHECKS batch_table_invariants_are_checked_where_ci_requires_it: the BatchTable checks are compiled out of this build (add --features check)",
        );
    }
}

#[test]
fn lazy_beats_the_best_graph_batching_at_high_load_where_batching_pays() {
    // The paper's direction (Fig. 11): on a model with a batching gain (ResNet-50 on the NPU:
    // over 1.2× the throughput at batch 16), at a load near Serial's capacity LazyB's mean latency
    // is below every GraphB window's and its throughput no lower
    let b = bench("resnet50", 64);
    let single = b.predictor.single_input(b.model.ref_lengths());
    let rate = 0.9e3 / single.as_ms();
    let (curve_1, curve_16) = (
        b.predictor.graph_latency(1, b.model.ref_lengths()),
        b.predictor.graph_latency(16, b.model.ref_lengths()),
    );
    assert!(
        6 * curve_16.0 < 5 * 16 * curve_1.0,
        "batching must pay on this model: {curve_1:?} at 1, {curve_16:?} at 16"
    );
    let run_at = |p: &str| run(&b, &with_max(cfg(p, rate, 2000, 1), 64)).0;
    let lazy = run_at("lazy");
    for w in ["graph:5", "graph:25", "graph:50", "graph:95"] {
        let g = run_at(w);
        assert!(
            lazy.latency_ms.mean < g.latency_ms.mean,
            "{w}: lazy {} ms vs {} ms",
            lazy.latency_ms.mean,
            g.latency_ms.mean
        );
        assert!(lazy.throughput_rps >= 0.99 * g.throughput_rps, "{w}");
    }
}

/// A policy that breaks the engine's contract in one of two ways.
/// A policy that answers `WaitUntil(now)` its first `waits_for_now` times, then admits one
/// request onto an empty table and runs (`behaves`) or runs whatever the table holds; or,
/// with `admits`, admits those counts in turn whenever requests are pending.
struct Misbehaving {
    waits_for_now: u32,
    behaves: bool,
    admits: Vec<usize>,
}
impl policy::Policy for Misbehaving {
    fn name(&self) -> String {
        "misbehaving".into()
    }
    fn decide(&mut self, v: &policy::View) -> policy::Decision {
        if self.waits_for_now > 0 {
            self.waits_for_now -= 1;
            policy::Decision::WaitUntil(v.now)
        } else if !self.admits.is_empty() && !v.infq.is_empty() {
            policy::Decision::Admit {
                count: self.admits.remove(0),
                pad: false,
            }
        } else if self.behaves && v.table.is_empty() {
            policy::Decision::Admit {
                count: 1,
                pad: false,
            }
        } else {
            policy::Decision::Run
        }
    }
}

#[test]
fn a_policy_that_breaks_the_contract_is_an_error_not_a_hang() {
    // running an empty BatchTable, or waiting for a moment that has passed (which would spin
    // forever), ends the run with an error naming the policy; two waits for the present in a
    // row are tolerated, a third is the error
    let m = fixture("eight_nodes.toml");
    let pred = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
    let run_with = |waits_for_now: u32, behaves: bool, admits: &[usize], arrivals: usize| {
        engine::run(
            &engine::Setup::new(&m, &pred, crate::sla(100.0), crate::mb(8)),
            &mut UnitDevice,
            &mut Misbehaving {
                waits_for_now,
                behaves,
                admits: admits.to_vec(),
            },
            &mut VirtualClock::new(),
            &vec![Arrival::default(); arrivals],
        )
    };
    let run = |waits_for_now: u32, behaves: bool| run_with(waits_for_now, behaves, &[], 1);
    for (waits, behaves, says) in [
        (0, false, "ran an empty BatchTable"),
        (u32::MAX, false, "waits for the past"),
        (3, true, "waits for the past"),
    ] {
        let e = run(waits, behaves)
            .err()
            .unwrap_or_else(|| panic!("{says}: accepted"))
            .to_string();
        assert!(e.contains("misbehaving") && e.contains(says), "{e}");
    }
    // admitting none, more than are pending, or more than the free slots (8 slots, 1 taken)
    for (admits, arrivals, says) in [
        (&[0][..], 1, "admitted 0 with 1 pending"),
        (&[2], 1, "admitted 2 with 1 pending"),
        (&[1, 8], 9, "admitted 8 with 8 pending and 7 free slots"),
    ] {
        let e = run_with(0, true, admits, arrivals)
            .err()
            .unwrap_or_else(|| panic!("{says}: accepted"))
            .to_string();
        assert!(e.contains(says), "{e}");
    }
    for waits in [0, 1, 2] {
        let out = run(waits, true).unwrap_or_else(|e| panic!("{waits} waits: {e}"));
        assert_eq!(out.stats().completed, 1, "{waits} waits");
    }
}

/// The NPU model, counting the calls the engine makes: nodes executed one by one, and runs of
/// nodes timed at once.
struct Counting {
    npu: lazybatch::device::npu::Npu,
    calls: std::cell::Cell<u64>,
}

impl lazybatch::device::Device for Counting {
    fn name(&self) -> &'static str {
        self.npu.name()
    }
    fn is_virtual(&self) -> bool {
        self.npu.is_virtual()
    }
    fn prepare(&mut self, m: &Model, mb: u32) -> lazybatch::Result<()> {
        self.npu.prepare(m, mb)
    }
    fn execute(
        &mut self,
        m: &Model,
        at: lazybatch::graph::NodeStep,
        members: &[lazybatch::device::Member],
    ) -> lazybatch::Result<lazybatch::device::Timing> {
        self.calls.set(self.calls.get() + 1);
        self.npu.execute(m, at, members)
    }
    fn time_run(
        &self,
        m: &Model,
        from: lazybatch::graph::NodeId,
        batch: usize,
        max_nodes: u32,
        budget: Option<Nanos>,
    ) -> Option<(u32, Nanos)> {
        let run = self.npu.time_run(m, from, batch, max_nodes, budget);
        self.calls.set(self.calls.get() + u64::from(run.is_some()));
        run
    }
}

/// `--coverage` reaches the predictor, as each co-located model's own percentile: GNMT (one
/// step per word) and LAS (six characters per word) at 16, 50 and 99% coverage; a predictor
/// that ignored the coverage, or gave every model the first one's decoder length, fails here.
#[test]
fn each_model_predicts_its_own_decoder_length_at_the_coverage_asked_for() {
    let wmt = zoo::load("gnmt").unwrap().seq.unwrap();
    let hist = lazybatch::traffic::lengths::profiled_output_lengths(&wmt).unwrap();
    let mut seen = Vec::new();
    for coverage in [16.0, 50.0, 99.0] {
        let words = lazybatch::traffic::lengths::percentile(&hist, coverage);
        let m = Model::compose(vec![zoo::load("gnmt").unwrap(), zoo::load("las").unwrap()]);
        let b = Testbed::new(m, NpuConfig::default(), crate::mb(8), coverage).unwrap();
        // each model's own steps per word and cap (models/gnmt.toml, models/las.toml)
        let gnmt = words.clamp(1, 80);
        let las = (words * 6).clamp(1, 480);
        assert_eq!(b.predictor.dec_timesteps_of(0), gnmt, "gnmt at {coverage}%");
        assert_eq!(b.predictor.dec_timesteps_of(1), las, "las at {coverage}%");
        // alone, the same model predicts the same length
        let alone = Testbed::new(
            zoo::load("las").unwrap(),
            NpuConfig::default(),
            crate::mb(8),
            coverage,
        )
        .unwrap();
        assert_eq!(alone.predictor.dec_timesteps_of(0), las);
        assert_eq!(alone.predictor.dec_timesteps, las);
        seen.push(gnmt);
    }
    assert!(
        seen[0] < seen[1] && seen[1] < seen[2],
        "the percentile grows with the coverage: {seen:?}"
    );
}

/// Co-located models admitted together run the model of the oldest request first: a
/// tiny_seq2seq request and an eight-node one arrive 0.1 ms apart, GraphB(5) admits both at
/// 5 ms, and whichever came first completes first, the other exactly its own single-input
/// latency later (one sub-batch per model, one after the other). Reversing the order, or
/// ordering by model instead of by arrival, fails one of the two cases.
#[test]
fn colocated_models_admitted_together_run_the_oldest_requests_model_first() {
    let b = colocated_bench();
    let len = |part: u16| {
        if part == 0 {
            Lengths { enc: 3, dec: 2 }
        } else {
            Lengths { enc: 1, dec: 1 }
        }
    };
    for first in [0u16, 1] {
        let second = 1 - first;
        let arrivals = [
            Arrival {
                time: Nanos::from_ms(0.0),
                len: len(first),
                part: first,
                sla: Some(Nanos::from_ms(100.0)),
                class: 0,
                key: None,
            },
            Arrival {
                time: Nanos::from_ms(0.1),
                len: len(second),
                part: second,
                sla: Some(Nanos::from_ms(100.0)),
                class: 0,
                key: None,
            },
        ];
        let mut pol = policy::parse("graph:5:8", 8).unwrap();
        let setup = engine::Setup {
            keep: lazybatch::metrics::KeepRecords {
                requests: true,
                ..Default::default()
            },
            classes: 1,
            ..engine::Setup::new(&b.model, &b.predictor, crate::sla(100.0), crate::mb(8))
        };
        let out = engine::run(
            &setup,
            &mut b.npu().unwrap().clone(),
            pol.as_mut(),
            &mut VirtualClock::new(),
            &arrivals,
        )
        .unwrap();
        let (a, z) = (&out.requests[0], &out.requests[1]);
        assert_eq!(
            a.first_issue,
            Some(Nanos::from_ms(5.0)),
            "admitted when the oldest's window closes"
        );
        assert_eq!(z.first_issue, Some(Nanos::from_ms(5.0)));
        let (ca, cz) = (a.completion.unwrap(), z.completion.unwrap());
        assert!(
            ca < cz,
            "part {first} arrived first and must finish first: {ca:?} vs {cz:?}"
        );
        // the second model ran alone after the first: its whole graph at batch 1
        assert_eq!(
            cz - ca,
            b.predictor
                .single_input_of(usize::from(second), len(second)),
            "part {second} after part {first}"
        );
    }
}
