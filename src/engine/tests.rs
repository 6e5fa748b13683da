//! The engine loop's own tests: decoder steps and first tokens as the policies and the
//! predictor read them.

use super::*;
use crate::device::npu::{Npu, NpuConfig};
use crate::graph::{zoo, Class, Lengths};
use crate::policy::{self, Decision, Policy, View};
use crate::profile::Profile;
use crate::runtime::Predictor;
use crate::time::VirtualClock;

/// A zoo model on the NPU model, profiled and prepared to batch 8, and its predictor.
pub(super) fn bench(name: &str) -> (Model, Npu, Predictor) {
    bench_of(zoo::load(name).unwrap())
}

/// [`bench`] for any model (co-located ones too).
pub(super) fn bench_of(m: Model) -> (Model, Npu, Predictor) {
    let mut npu = Npu::new(NpuConfig::default()).unwrap();
    let prof = Profile::measure(&mut npu, &m, 8, m.ref_lengths()).unwrap();
    let pred = Predictor::new(&m, &prof, 20);
    npu.prepare(&m, 8).unwrap();
    (m, npu, pred)
}

/// A run of `m` at a 5 s SLA (nothing is late) on 8 slots, every request's record and the
/// table after every step kept.
pub(super) fn kept<'a>(m: &'a Model, pred: &'a Predictor) -> Setup<'a> {
    Setup {
        keep: crate::metrics::KeepRecords {
            requests: true,
            ..Default::default()
        },
        snapshots: true,
        ..Setup::new(
            m,
            pred,
            Sla::from_ms(5e3).unwrap(),
            MaxBatch::new(8).unwrap(),
        )
    }
}

/// LazyB, checking at every decision that each request in the table has as many decoder
/// steps done as it has finished: its step at a decoder node, none before the decoder
/// (what the slack predictor's decoder-length estimate reads).
struct Observing {
    inner: Box<dyn Policy>,
    checked: usize,
}

impl Policy for Observing {
    fn name(&self) -> String {
        "observing".into()
    }
    fn cell_nodes(&self, model: &Model) -> Vec<bool> {
        self.inner.cell_nodes(model)
    }
    fn decide(&mut self, v: &View) -> Decision {
        for e in v.table.entries() {
            let decoder = v.model.node(e.next.node).class == Class::Decoder;
            for (j, &r) in e.members.iter().enumerate() {
                let step = e.steps.get(j).copied().unwrap_or(e.next.step);
                let want = if decoder { step } else { 0 };
                let q = v.request(r);
                assert_eq!(q.dec_done, want, "request {r:?} at {:?}", e.next);
                // its first token came with its first decoder step, and not before
                assert_eq!(q.first_token.is_some(), want > 0, "request {r:?}");
                self.checked += 1;
            }
        }
        self.inner.decide(v)
    }
}

#[test]
fn decoder_steps_done_are_the_steps_finished() {
    decoder_steps_done(0);
}

/// Requests keyed by a front end (their key is not their id) are served alike.
#[test]
fn keyed_requests_decode_like_the_others() {
    decoder_steps_done(1_000_000);
}

fn decoder_steps_done(key_offset: u64) {
    for name in ["gnmt", "transformer"] {
        let (m, mut npu, pred) = bench(name);
        let arrivals: Vec<_> = crate::traffic::generate(&m, (Default::default(), 300.0), 60, 4)
            .unwrap()
            .enumerate()
            .map(|(i, a)| Arrival {
                key: (key_offset > 0).then_some(key_offset + i as u64),
                ..a
            })
            .collect();
        let mut pol = Observing {
            inner: policy::parse("lazy", 8).unwrap(),
            checked: 0,
        };
        let out = run(
            &Setup {
                keep: crate::metrics::KeepRecords {
                    requests: true,
                    ..Default::default()
                },
                ..Setup::new(
                    &m,
                    &pred,
                    Sla::from_ms(100.0).unwrap(),
                    MaxBatch::new(8).unwrap(),
                )
            },
            &mut npu,
            &mut pol,
            &mut VirtualClock::new(),
            &arrivals,
        )
        .unwrap();
        assert!(pol.checked > 500, "{name}: {} checks", pol.checked);
        // each merge removes an entry that a preemption or a split put above another
        let c = &out.counters;
        assert!(
            c.merges > 0 && c.merges <= c.preemptions + c.splits,
            "{name}: {c:?}"
        );
        // and at the end, every request's own decoder length, its first token between
        // its first node and its completion
        for q in &out.requests {
            assert_eq!(q.dec_done, q.len.dec, "{name}: request {:?}", q.id);
            let first = q.first_token.unwrap();
            assert!(q.first_issue.unwrap() < first && first <= q.completion.unwrap());
        }
        // the run's figures are its requests': time to first token, per output token
        let st = out.stats();
        let (ttft, tpot) = (st.ttft_ms.unwrap(), st.tpot_ms.unwrap());
        let n = out.requests.len() as f64;
        let ttft_mean: f64 = out
            .requests
            .iter()
            .map(|q| (q.first_token.unwrap() - q.arrival).as_ms())
            .sum::<f64>()
            / n;
        assert!((ttft.mean - ttft_mean).abs() < 1e-9, "{name}: {ttft:?}");
        let per: Vec<Nanos> = out
            .requests
            .iter()
            .filter(|q| q.len.dec >= 2)
            .map(|q| {
                Nanos((q.completion.unwrap() - q.first_token.unwrap()).0 / u64::from(q.len.dec - 1))
            })
            .collect();
        let tpot_max = per.iter().max().unwrap().as_ms();
        assert_eq!(tpot.max, tpot_max, "{name}");
        let tokens: u64 = out.requests.iter().map(|q| u64::from(q.tokens)).sum();
        let span = out
            .requests
            .iter()
            .map(|q| q.completion.unwrap())
            .max()
            .unwrap()
            - out.requests.iter().map(|q| q.arrival).min().unwrap();
        assert_eq!(
            st.tokens_per_s,
            Some(tokens as f64 / span.as_secs()),
            "{name}"
        );
    }
}

#[test]
fn the_first_token_comes_when_the_first_decoder_step_ends() {
    // a request alone: its first token comes when a request of one output token, with the
    // same input, would be done (neither model has a node after its decoder's loop), and
    // the tokens after it each take one decoder step
    for name in ["gnmt", "transformer"] {
        let (m, npu, pred) = bench(name);
        let setup = Setup {
            keep: crate::metrics::KeepRecords {
                requests: true,
                ..Default::default()
            },
            ..Setup::new(
                &m,
                &pred,
                Sla::from_ms(1e3).unwrap(),
                MaxBatch::new(8).unwrap(),
            )
        };
        let alone = |dec: u32| {
            let a = Arrival {
                len: Lengths { enc: 20, dec },
                ..Arrival::default()
            };
            let mut pol = policy::parse("serial", 8).unwrap();
            run(
                &setup,
                &mut npu.clone(),
                pol.as_mut(),
                &mut VirtualClock::new(),
                &[a],
            )
            .unwrap()
            .requests
            .remove(0)
        };
        let (one, many) = (alone(1), alone(12));
        assert_eq!(many.first_token, one.completion, "{name}");
        assert_eq!(one.first_token, one.completion, "{name}");
    }
}

/// GPT-2's prefill chooses the first token: served alone, a request's first token comes when
/// its last static node (the prefill's argmax) ends — the sum of the prefill's node times —,
/// it outputs its decoder steps plus one token, and its time per output token spreads the
/// decode steps over the tokens after the first.
#[test]
fn a_decoder_only_models_first_token_comes_when_its_prefill_ends() {
    let (m, npu, pred) = bench("gpt2");
    let setup = Setup {
        keep: crate::metrics::KeepRecords {
            requests: true,
            ..Default::default()
        },
        ..Setup::new(
            &m,
            &pred,
            Sla::from_ms(1e4).unwrap(),
            MaxBatch::new(8).unwrap(),
        )
    };
    let len = Lengths { enc: 40, dec: 9 };
    let mut pol = policy::parse("serial", 8).unwrap();
    let out = run(
        &setup,
        &mut npu.clone(),
        pol.as_mut(),
        &mut VirtualClock::new(),
        &[Arrival {
            len,
            ..Arrival::default()
        }],
    )
    .unwrap();
    let q = &out.requests[0];
    // the prefill: every static node once, alone, on a fresh copy of the device
    let mut dev = npu.clone();
    let prefill: u64 = m
        .nodes
        .iter()
        .filter(|n| n.class == Class::Static)
        .map(|n| {
            let at = NodeStep {
                node: n.id,
                step: 0,
            };
            dev.execute(&m, at, &[Member::alone(len, 0)])
                .unwrap()
                .time
                .0
        })
        .sum();
    assert_eq!(q.first_token, Some(q.arrival + Nanos(prefill)));
    assert_eq!(q.tokens, 10);
    let st = out.stats();
    let tpot = st.tpot_ms.unwrap();
    let want = Nanos((q.completion.unwrap() - q.first_token.unwrap()).0 / 9).as_ms();
    assert_eq!((tpot.max, tpot.mean), (want, want));
    let span = (q.completion.unwrap() - q.arrival).as_secs();
    assert_eq!(st.tokens_per_s, Some(10.0 / span));
}

/// Every GPT-2 request under LazyB has its first token from the moment its prefill's argmax
/// ran, before any of its decoder steps, and ends with all of its decoder steps done.
#[test]
fn a_decoder_only_models_requests_get_their_first_token_from_the_prefill() {
    struct Watch {
        inner: Box<dyn Policy>,
        checked: usize,
    }
    impl Policy for Watch {
        fn name(&self) -> String {
            "watch".into()
        }
        fn cell_nodes(&self, model: &Model) -> Vec<bool> {
            self.inner.cell_nodes(model)
        }
        fn decide(&mut self, v: &View) -> Decision {
            for e in v.table.entries() {
                let decoder = v.model.node(e.next.node).class == Class::Decoder;
                for &r in &e.members {
                    // in the decoder: the prefill has chosen the first token; before: not yet
                    assert_eq!(v.request(r).first_token.is_some(), decoder, "{r:?}");
                    self.checked += 1;
                }
            }
            self.inner.decide(v)
        }
    }
    let (m, mut npu, pred) = bench("gpt2");
    // (four slots for many arrivals: requests wait, so the policy is asked, and the watch looks,
    // at every node)
    let arrivals: Vec<_> = crate::traffic::generate(&m, (Default::default(), 200.0), 60, 4)
        .unwrap()
        .collect();
    let mut pol = Watch {
        inner: policy::parse("lazy", 8).unwrap(),
        checked: 0,
    };
    let setup = Setup {
        keep: crate::metrics::KeepRecords {
            requests: true,
            ..Default::default()
        },
        ..Setup::new(
            &m,
            &pred,
            Sla::from_ms(5e3).unwrap(),
            MaxBatch::new(4).unwrap(),
        )
    };
    let out = run(
        &setup,
        &mut npu,
        &mut pol,
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap();
    assert!(
        pol.checked > 10_000 && out.counters.preemptions > 0,
        "{} {:?}",
        pol.checked,
        out.counters
    );
    for q in &out.requests {
        assert_eq!(
            (q.dec_done, q.tokens),
            (q.len.dec, q.len.dec + 1),
            "{:?}",
            q.id
        );
        assert!(q.first_issue.unwrap() < q.first_token.unwrap());
        assert!(q.first_token.unwrap() < q.completion.unwrap());
    }
}

/// GPT-2 on the NPU model at 60 req/s for 80 requests under `policy`, every request's record
/// and the table after every step kept.
fn gpt2_under(policy: &str) -> Outcome {
    let (m, mut npu, pred) = bench("gpt2");
    let arrivals: Vec<_> = crate::traffic::generate(&m, (Default::default(), 60.0), 80, 9)
        .unwrap()
        .collect();
    let setup = kept(&m, &pred);
    let mut pol = policy::parse(policy, 8).unwrap();
    run(
        &setup,
        &mut npu,
        pol.as_mut(),
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap()
}

/// A chunk that never runs out is the whole prefill first: `chunked` is then `continuous`,
/// every request's first token and completion to the nanosecond.
#[test]
fn chunks_that_never_run_out_are_continuous_batching() {
    let (a, b) = (gpt2_under("continuous"), gpt2_under("chunked:86400000"));
    let times = |o: &Outcome| -> Vec<_> {
        o.requests
            .iter()
            .map(|q| (q.id, q.first_token, q.completion))
            .collect()
    };
    assert_eq!(times(&a), times(&b));
    assert_eq!(a.requests.len(), 80);
}

/// `chunked:0` gives the decode batch an iteration after every prefill node: the table shows
/// the batch on top of a prefill that stands before the decoder, and between two of the batch's
/// iterations the prefill advances one node at most; every request completes.
#[test]
fn a_zero_chunk_gives_the_batch_an_iteration_after_every_prefill_node() {
    let (m, _, _) = bench("gpt2");
    let out = gpt2_under("chunked:0");
    assert_eq!(out.requests.len(), 80);
    let decoding = |at: NodeStep| m.node(at.node).class == Class::Decoder;
    let boundary = m.loops.last().unwrap().first;
    let snaps = out.snapshots.unwrap();
    let mut swapped_in = 0;
    // the prefill's position whenever the batch stands at its boundary on top of it: one node
    // further each iteration
    let mut last: Option<(Vec<u32>, NodeId)> = None;
    let mut steps_checked = 0;
    for (_, entries) in &snaps {
        if let [.., (_, below), (_, top)] = entries.as_slice() {
            if decoding(*top) && !decoding(*below) {
                swapped_in += 1;
            }
        }
        if let [.., (ids, below), (_, top)] = entries.as_slice() {
            if top.node == boundary && !decoding(*below) {
                if let Some((prev_ids, prev)) = &last {
                    if prev_ids == ids && prev != &below.node {
                        assert_eq!(below.node.0, prev.0 + 1, "the prefill skipped a node");
                        steps_checked += 1;
                    }
                }
                last = Some((ids.clone(), below.node));
            }
        }
    }
    assert!(
        swapped_in > 100 && steps_checked > 100,
        "{swapped_in} {steps_checked}"
    );
}

/// A policy that swaps a table of one entry is an internal error, never a silent run.
#[test]
fn a_swap_without_an_entry_below_is_an_error() {
    struct SwapAlways;
    impl Policy for SwapAlways {
        fn name(&self) -> String {
            "swap-always".into()
        }
        fn decide(&mut self, v: &View) -> Decision {
            match v.table.is_empty() {
                true => Decision::Admit {
                    count: 1,
                    pad: false,
                },
                false => Decision::Swap,
            }
        }
    }
    let (m, mut npu, pred) = bench("gnmt");
    let arrivals: Vec<_> = crate::traffic::generate(&m, (Default::default(), 300.0), 4, 4)
        .unwrap()
        .collect();
    let setup = Setup::new(
        &m,
        &pred,
        Sla::from_ms(100.0).unwrap(),
        MaxBatch::new(8).unwrap(),
    );
    let e = run(
        &setup,
        &mut npu,
        &mut SwapAlways,
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("swapped a BatchTable of fewer than two entries"),
        "{e}"
    );
}

/// Pre-drawn arrivals with what a front end says at the engine's looks: give up at the
/// `give_up_at`-th look at its give-up flag (once a turn, at the node boundary before the turn:
/// a shutdown's deadline), and tell the keys of `leaving` at the given look at its
/// cancellations (once a turn that receives: clients that went away).
pub(super) struct Scripted<'a> {
    inner: Predrawn<'a>,
    looks: std::cell::Cell<usize>,
    give_up_at: Option<usize>,
    cancel_looks: usize,
    leaving: Option<(usize, Vec<u64>)>,
}

impl<'a> Scripted<'a> {
    /// `list`'s arrivals, nothing said.
    pub(super) fn new(list: &'a [Arrival]) -> Self {
        Scripted {
            inner: Predrawn::new(list),
            looks: std::cell::Cell::new(0),
            give_up_at: None,
            cancel_looks: 0,
            leaving: None,
        }
    }
    /// Gives up at the `at`-th look.
    pub(super) fn giving_up_at(self, at: usize) -> Self {
        Scripted {
            give_up_at: Some(at),
            ..self
        }
    }
    /// Tells `keys` at the `at`-th look at its cancellations.
    pub(super) fn leaving_at(self, at: usize, keys: Vec<u64>) -> Self {
        Scripted {
            leaving: Some((at, keys)),
            ..self
        }
    }
}

impl ArrivalSource for Scripted<'_> {
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        self.inner.poll(now)
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        self.inner.idle(clock, until)
    }
    fn expected(&self) -> usize {
        self.inner.expected()
    }
    fn next_due(&mut self) -> Option<Nanos> {
        self.inner.next_due()
    }
    fn give_up(&self) -> bool {
        self.looks.set(self.looks.get() + 1);
        self.give_up_at.is_some_and(|at| self.looks.get() >= at)
    }
    fn may_give_up(&self) -> bool {
        true
    }
    fn cancelled(&mut self, keys: &mut Vec<u64>) {
        self.cancel_looks += 1;
        if let Some((at, told)) = &mut self.leaving {
            if self.cancel_looks == *at {
                keys.append(told);
            }
        }
    }
}

#[test]
fn a_source_that_gives_up_ends_the_run_at_a_node_boundary_with_every_request_counted() {
    // the eight-node fixture at 1 ms a node: twelve requests at once under Serial; the first
    // turn admits the first request and runs its first node, each next turn one node; at the
    // fourth look (3 ms, the first request three nodes in) the source gives up
    let m = zoo::fixture("eight_nodes.toml");
    let prof = Profile::uniform(&m, 8, Nanos::from_ms(1.0));
    let pred = Predictor::new(&m, &prof, 1);
    let setup = kept(&m, &pred);
    let mut dev = crate::device::table::TableDevice::from_profile(prof, "1 ms a node");
    dev.prepare(&m, 8).unwrap();
    let arrivals: Vec<Arrival> = (0..12)
        .map(|_| Arrival {
            len: Lengths { enc: 1, dec: 1 },
            ..Arrival::default()
        })
        .collect();
    let mut src = Scripted::new(&arrivals).giving_up_at(4);
    let mut pol = policy::parse("serial", 8).unwrap();
    let out = run_source(
        &setup,
        &mut dev,
        pol.as_mut(),
        &mut VirtualClock::new(),
        &mut src,
    )
    .unwrap();
    let st = out.stats();
    assert_eq!(
        (
            st.requests,
            st.completed,
            st.rejected,
            st.rejected_abandoned
        ),
        (12, 0, 12, 12)
    );
    assert_eq!((st.rejected_queue_full, st.rejected_shed), (0, 0));
    // nothing ran past the boundary where it gave up
    assert_eq!(out.counters.executions, 3, "{:?}", out.counters);
    assert_eq!(out.counters.busy, Nanos::from_ms(3.0));
    assert!(out.requests.iter().all(|q| q.completion.is_none()));
}
