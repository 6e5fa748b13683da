//! LazyB's and the Oracle's decisions on hand-built servers, against hand-computed times.

use super::*;
use crate::graph::{zoo, Lengths, Model, NodeId, NodeStep};
use crate::profile::Profile;
use crate::runtime::{BatchTable, InfQ, Ledger, Predictor, Request, RequestId};
use crate::time::Nanos;

/// The paper's eight-node graph, every node 1 ms at any batch size (a request alone: 9 ms,
/// its input node included).
fn setup() -> (Model, Predictor) {
    setup_of("eight_nodes.toml")
}

/// A test fixture, every node 1 ms at any batch size, 3 decoder steps predicted.
fn setup_of(fixture: &str) -> (Model, Predictor) {
    let m = zoo::fixture(fixture);
    let p = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 3);
    (m, p)
}

fn ms(x: f64) -> Nanos {
    Nanos::from_ms(x)
}

/// Request `i` arriving at `arrival` ms with deadline `deadline` ms.
fn req(i: u32, arrival: f64, deadline: f64) -> Request {
    let len = Lengths { enc: 1, dec: 1 };
    Request::new(RequestId(i), ms(arrival), ms(deadline - arrival), len)
}

/// Decides at `now` ms on a hand-built server: BatchTable `entries` bottom first (members,
/// next node), `pending` queued oldest first.
fn decide_on(
    pol: &mut Lazy,
    requests: &[Request],
    entries: &[(&[u32], u32)],
    pending: &[u32],
    now: f64,
) -> Decision {
    decide_in(setup(), pol, requests, entries, pending, now)
}

/// [`decide_on`] on another model.
fn decide_in(
    (m, p): (Model, Predictor),
    pol: &mut Lazy,
    requests: &[Request],
    entries: &[(&[u32], u32)],
    pending: &[u32],
    now: f64,
) -> Decision {
    let mut table = BatchTable::new(8);
    table.set_model(&m);
    table.set_cells(pol.cell_nodes(&m));
    for (members, node) in entries {
        let at = NodeStep {
            node: NodeId(*node),
            step: 0,
        };
        table.push_from(members.iter().map(|&i| RequestId(i)), at, None);
    }
    let mut queue = InfQ::with_capacity(16);
    for &i in pending {
        queue.push(RequestId(i));
    }
    pol.decide(&View::new(
        ms(now),
        &m,
        &queue,
        &table,
        &p,
        8,
        &Ledger::of(requests).unwrap(),
    ))
}

/// Decides with request 0 in flight at node `node` and requests 1.. pending.
fn decide(pol: &mut Lazy, requests: &[Request], node: u32, now: f64) -> Decision {
    let pending: Vec<u32> = (1..requests.len() as u32).collect();
    decide_on(pol, requests, &[(&[0], node)], &pending, now)
}

#[test]
fn the_papers_worked_example_decision_by_decision() {
    // Fig. 8 (the BatchTable example): the predictor always finds lazy batching beneficial
    // (a generous SLA); node ids: input 0, A 1, B 2, C 3. Req1 = 0, Req2 = 1, Req3 = 2.
    let rs = [req(0, 2.0, 60.0), req(1, 3.5, 60.0), req(2, 4.5, 60.0)];
    // a fresh policy per decision: one policy serves one table, whose generation keys its
    // cache
    let lazy = Lazy::conservative;
    let admit_one = Decision::Admit {
        count: 1,
        pad: false,
    };
    // t=2: the table is empty, Req1 is pushed at A
    assert_eq!(decide_on(&mut lazy(), &rs, &[], &[0], 2.0), admit_one);
    // t=4: Req1 has run A and B (next C) and Req2 waits: preempt, push Req2 at A
    assert_eq!(
        decide_on(&mut lazy(), &rs, &[(&[0], 3)], &[1], 4.0),
        admit_one
    );
    // t=5: Req2 has run A (next B) and Req3 waits: preempt again, push Req3
    let two = [(&[0u32][..], 3), (&[1u32][..], 2)];
    assert_eq!(decide_on(&mut lazy(), &rs, &two, &[2], 5.0), admit_one);
    // t=6 and on: nothing pending, the active sub-batch runs (merges are the table's work)
    let merged = [(&[0u32][..], 3), (&[1u32, 2][..], 2)];
    assert_eq!(
        decide_on(&mut lazy(), &rs, &merged, &[], 6.0),
        Decision::Run
    );
    // the same moment under a tight SLA: Req1 (deadline 11 ms) cannot absorb Req3: Req2 and
    // Req1 run on
    let tight = [req(0, 2.0, 11.0), req(1, 3.5, 60.0), req(2, 4.5, 60.0)];
    assert_eq!(
        decide_on(&mut lazy(), &tight, &two, &[2], 5.0),
        Decision::Run
    );
}

fn admitted(d: Decision) -> usize {
    match d {
        Decision::Admit { count, .. } => count,
        _ => 0,
    }
}

#[test]
fn the_gate_admits_exactly_while_every_deadline_holds() {
    // at t = 3 ms request 0 stands at node C (3): 6 ms left; a newcomer needs 9 ms, so
    // both finish by 3 + 6 + 9 = 18 ms under the conservative sum
    for (deadline0, want) in [(30.0, 1), (18.0, 1), (17.9, 0)] {
        let rs = [req(0, 0.0, deadline0), req(1, 3.0, 40.0)];
        let got = admitted(decide(&mut Lazy::conservative(), &rs, 3, 3.0));
        assert_eq!(got, want, "in-flight deadline {deadline0} ms");
    }
    // the newcomer's own deadline counts too
    let rs = [req(0, 0.0, 50.0), req(1, 3.0, 17.5)];
    assert_eq!(admitted(decide(&mut Lazy::conservative(), &rs, 3, 3.0)), 0);
}

#[test]
fn lazy_admits_the_longest_prefix_that_fits() {
    // each newcomer adds 9 ms: 3 + 6 + 9 = 18, + 9 = 27, + 9 = 36 ms
    let rs = [
        req(0, 0.0, 30.0),
        req(1, 3.0, 60.0),
        req(2, 3.0, 60.0),
        req(3, 3.0, 60.0),
    ];
    assert_eq!(admitted(decide(&mut Lazy::conservative(), &rs, 3, 3.0)), 2);
}

#[test]
fn the_oracle_finds_the_largest_feasible_admission() {
    // batching is free here (1 ms per node at any size): the newcomers catch up in 3 ms and
    // everyone finishes at 3 + 3 + 6 = 12 ms, so deadlines, not sizes, limit them
    let rs = [
        req(0, 0.0, 30.0),
        req(1, 3.0, 60.0),
        req(2, 3.0, 60.0),
        req(3, 3.0, 11.0),
    ];
    assert_eq!(admitted(decide(&mut Lazy::oracle(), &rs, 3, 3.0)), 2);
    let rs = [req(0, 0.0, 30.0), req(1, 3.0, 12.0), req(2, 3.0, 12.0)];
    assert_eq!(admitted(decide(&mut Lazy::oracle(), &rs, 3, 3.0)), 2);
    // where the exact look-ahead admits both, the conservative sum (3 + 6 + 9 > 12) admits none
    assert_eq!(admitted(decide(&mut Lazy::conservative(), &rs, 3, 3.0)), 0);
}

#[test]
fn the_papers_slack_example_leaves_twenty_units() {
    // §IV-C: Req1 waited 2 units (t = 0 to 2) and runs nodes A to H alone in 8: under a
    // 30-unit SLA its slack is 30 − (2 + 8) = 20. Here Req1 has just been issued at A (its
    // input node, 1 ms in this profile, is done), so 8 ms of it remain at t = 2
    let (m, p) = setup();
    let len = Lengths { enc: 1, dec: 1 };
    let a = NodeStep {
        node: NodeId(1),
        step: 0,
    };
    assert_eq!(p.remaining(Some(a), len, 1), ms(8.0));
    let slack = ms(30.0).0 - (ms(2.0).0 + p.remaining(Some(a), len, 1).0);
    assert_eq!(slack, ms(20.0).0);
    assert_eq!(m.nodes.len(), 9);
    // each newcomer costs its whole graph alone (9 ms): the 20 units absorb two (18 ms),
    // not three (27 ms); at slack 18 exactly two still fit (zero slack left), at 17.9 one,
    // at slack 9 one (zero left), at 8.9 none
    let queue = |d0: f64| {
        [
            req(0, 0.0, d0),
            req(1, 2.0, 90.0),
            req(2, 2.0, 90.0),
            req(3, 2.0, 90.0),
        ]
    };
    for (deadline0, want) in [(30.0, 2), (28.0, 2), (27.9, 1), (19.0, 1), (18.9, 0)] {
        let got = admitted(decide(&mut Lazy::conservative(), &queue(deadline0), 1, 2.0));
        assert_eq!(got, want, "Req1's deadline {deadline0}");
    }
}

#[test]
fn a_request_deeper_in_the_stack_can_refuse_a_newcomer() {
    // request 0 waits below (preempted at node C, 6 ms left) and request 1 is active at B
    // (7 ms left): a newcomer adds 9 ms, so at t = 4 everyone is done by 4 + 6 + 7 + 9 = 26
    let entries = [(&[0u32][..], 3), (&[1u32][..], 2)];
    for (deadline0, want) in [(26.0, 1), (25.9, 0)] {
        let rs = [req(0, 0.0, deadline0), req(1, 1.0, 90.0), req(2, 4.0, 90.0)];
        let got = admitted(decide_on(
            &mut Lazy::conservative(),
            &rs,
            &entries,
            &[2],
            4.0,
        ));
        assert_eq!(got, want, "the lower entry's deadline {deadline0}");
    }
}

#[test]
fn admission_never_exceeds_the_free_slots_or_the_maximum_batch() {
    // eight slots, seven in flight: one newcomer at most, however loose the deadlines
    let rs: Vec<Request> = (0..10).map(|i| req(i, 0.0, 1e6)).collect();
    let entries = [(&[0u32, 1, 2, 3, 4, 5, 6][..], 3)];
    for oracle in [false, true] {
        let mut pol = if oracle {
            Lazy::oracle()
        } else {
            Lazy::conservative()
        };
        let got = admitted(decide_on(&mut pol, &rs, &entries, &[7, 8, 9], 1.0));
        assert_eq!(got, 1, "oracle {oracle}");
    }
    // an empty table admits up to the maximum batch at once, whatever the deadlines
    let got = admitted(decide_on(
        &mut Lazy::conservative(),
        &rs,
        &[],
        &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        1.0,
    ));
    assert_eq!(got, 8);
}

#[test]
fn each_member_of_an_entry_counts_its_own_remaining_work() {
    // tiny_seq2seq, 1 ms a node, 3 decoder steps predicted: from the encoder's first step a
    // request of encoder length e has e + 15 ms left; alone, 2 + e + 15 ms
    let rq = |i: u32, enc: u32, deadline: f64| {
        let len = Lengths { enc, dec: 3 };
        Request::new(RequestId(i), ms(0.0), ms(deadline), len)
    };
    // one entry of two members at the encoder (lengths 4 and 8): 19 + 23 = 42 ms left; a
    // newcomer of length 4 adds 21: all done by 42 + 21 = 63 ms
    for (deadline0, want) in [(63.0, 1), (62.9, 0)] {
        let rs = [rq(0, 4, deadline0), rq(1, 8, 90.0), rq(2, 4, 90.0)];
        let got = admitted(decide_in(
            setup_of("tiny_seq2seq.toml"),
            &mut Lazy::conservative(),
            &rs,
            &[(&[0, 1], 2)],
            &[2],
            0.0,
        ));
        assert_eq!(got, want, "deadline {deadline0}");
    }
}

#[test]
fn the_oracles_search_finds_the_largest_feasible_prefix_of_many() {
    // batching is free (1 ms a node at any size): however many join request 0 at node C
    // at t = 3, all finish at 3 + 3 + 6 = 12 ms; the sixth newcomer's deadline is 11 ms,
    // so exactly the first five may join, found by the binary search among seven (LazyB's
    // conservative sum, 3 + 6 + 9k ≤ 30, takes two)
    let mut rs = vec![req(0, 0.0, 30.0)];
    rs.extend((1..=7).map(|i| req(i, 3.0, if i == 6 { 11.0 } else { 60.0 })));
    for (oracle, want) in [(true, 5), (false, 2)] {
        let mut pol = if oracle {
            Lazy::oracle()
        } else {
            Lazy::conservative()
        };
        assert_eq!(
            admitted(decide(&mut pol, &rs, 3, 3.0)),
            want,
            "oracle {oracle}"
        );
    }
    // with every deadline loose, all seven
    rs[6] = req(6, 3.0, 60.0);
    assert_eq!(admitted(decide(&mut Lazy::oracle(), &rs, 3, 3.0)), 7);
}

/// The Oracle's decision on tiny_seq2seq with a batching cost (a node takes 1 + (b − 1)/2
/// ms at batch b, 3 decoder steps predicted) at t = 0: the BatchTable holds `entries`
/// bottom first, each one request (node, step, encoder length, decoder steps done);
/// request 0 (the bottom one) has deadline `deadline0` ms, the others 90 ms; one newcomer
/// of encoder length `enc` waits.
fn oracle_admits(entries: &[(u32, u32, u32, u32)], enc: u32, deadline0: f64) -> usize {
    admits(Lazy::oracle(), entries, enc, deadline0)
}

/// [`oracle_admits`] for any of the two policies.
fn admits(mut pol: Lazy, entries: &[(u32, u32, u32, u32)], enc: u32, deadline0: f64) -> usize {
    let (m, _) = setup_of("tiny_seq2seq.toml");
    let mut prof = Profile::uniform(&m, 8, Nanos::from_ms(1.0));
    for n in &mut prof.nodes {
        for (b, l) in n.latency_ns.iter_mut().enumerate() {
            *l = ms(1.0 + b as f64 / 2.0).0;
        }
    }
    let p = Predictor::new(&m, &prof, 3);
    let mut rs = Vec::new();
    let mut table = BatchTable::new(8);
    table.set_model(&m);
    table.set_cells(pol.cell_nodes(&m));
    for (i, &(node, step, enc, done)) in entries.iter().enumerate() {
        let deadline = if i == 0 { deadline0 } else { 90.0 };
        let len = Lengths { enc, dec: 3 };
        let mut r = Request::new(RequestId(i as u32), ms(0.0), ms(deadline), len);
        r.dec_done = done;
        rs.push(r);
        let at = NodeStep {
            node: NodeId(node),
            step,
        };
        table.push_from([RequestId(i as u32)], at, None);
    }
    let new = RequestId(entries.len() as u32);
    rs.push(Request::new(
        new,
        ms(0.0),
        ms(90.0),
        Lengths { enc, dec: 3 },
    ));
    let mut queue = InfQ::with_capacity(4);
    queue.push(new);
    let ledger = Ledger::of(&rs).unwrap();
    admitted(pol.decide(&View::new(ms(0.0), &m, &queue, &table, &p, 8, &ledger)))
}

#[test]
fn the_oracle_meets_each_entry_at_its_own_step_of_the_loop() {
    // Nodes: 2 the encoder (a one-node loop), 3..=7 the decoder loop (4 its LSTM). Times
    // below are Algorithm 1 from a unit at batch 1 (× 1.5 at batch 2, × 2 at batch 3).
    //
    // (a) request 0 at the LSTM, step 1; request 1 on top in the encoder at step 2 of 4;
    // the newcomer has encoder length 1. It reaches the encoder at its own step 0 in 2 ms
    // (src, emb) and joins request 1, which has more left (17 ms against 16) and leads;
    // the pair reaches the LSTM at step 0 (another loop: the first step), not request 0's
    // step 1, in (17 − 14) × 1.5 = 4.5 ms; the three then run 14 ms of units × 2: 34.5.
    let a = [(4, 1, 4, 0), (2, 2, 4, 0)];
    assert_eq!(
        (oracle_admits(&a, 1, 34.5), oracle_admits(&a, 1, 34.4)),
        (1, 0)
    );
    // (b) request 1 on top at the decoder's first node (3), step 2, with 5 steps done (6
    // predicted: 20 ms left). The newcomer (encoder length 4) reaches node 3 at step 0 in
    // 21 − 15 = 6 ms; request 1 leads; in the same loop, before the LSTM, the pair meets
    // request 0 at this iteration's LSTM, step 2, in (20 − 19) × 1.5 = 1.5 ms; then 19 ms
    // of units × 2: 6 + 1.5 + 38 = 45.5
    let b = [(4, 1, 4, 0), (3, 2, 4, 5)];
    assert_eq!(
        (oracle_admits(&b, 4, 45.5), oracle_admits(&b, 4, 45.4)),
        (1, 0)
    );
    // (c) request 1 past the LSTM, at node 6 of step 1 (22 ms left): the newcomer reaches
    // node 6 at step 0 in 21 − 12 = 9 ms; the pair reaches the LSTM at the next
    // iteration, step 2, in (22 − 19) × 1.5 = 4.5 ms; then 38: 9 + 4.5 + 38 = 51.5
    let c = [(4, 1, 4, 0), (6, 1, 4, 5)];
    assert_eq!(
        (oracle_admits(&c, 4, 51.5), oracle_admits(&c, 4, 51.4)),
        (1, 0)
    );
}

#[test]
fn an_entry_merged_across_steps_counts_each_members_own_step() {
    // request 1 pushed at the LSTM's step 0 merges (a cell) with request 0 at its step 1:
    // one entry, members at steps 1 and 0 with 9 and 14 ms left. LazyB: 9 + 14 + 21 (a
    // newcomer) = 44 ms
    let merged = [(4, 1, 4, 0), (4, 0, 4, 0)];
    let lazy = |d| admits(Lazy::conservative(), &merged, 4, d);
    assert_eq!((lazy(44.0), lazy(43.9)), (1, 0));
    // the Oracle leads the entry by its member with the most left: with 5 steps done
    // request 1 is predicted 6 steps (29 ms from step 0, against request 0's 9); the
    // newcomer reaches the LSTM in 7 ms and the three run 29 ms of units × 2: 65 ms
    let long = [(4, 1, 4, 0), (4, 0, 4, 5)];
    assert_eq!(
        (oracle_admits(&long, 4, 65.0), oracle_admits(&long, 4, 64.9)),
        (1, 0)
    );
    // and when the member with the most left comes first: request 0, predicted 6 steps
    // (24 ms from step 1), leads; the newcomer joins at step 0 in 7 ms: 7 + 24 × 2 = 55
    let first = [(4, 1, 4, 5), (4, 0, 4, 0)];
    assert_eq!(
        (
            oracle_admits(&first, 4, 55.0),
            oracle_admits(&first, 4, 54.9)
        ),
        (1, 0)
    );
}

#[test]
fn a_co_located_newcomer_is_priced_by_its_own_model() {
    // eight_nodes (9 nodes, 9 ms alone) beside grouped_convs (6 nodes, 6 ms alone): request 0
    // of the first model stands at node C at t = 3 ms (6 ms left); a newcomer for the second
    // model adds its own 6 ms, so both are done by 3 + 6 + 6 = 15 ms (priced as the first
    // model's, 18 ms)
    let m = Model::compose(vec![
        zoo::fixture("eight_nodes.toml"),
        zoo::fixture("grouped_convs.toml"),
    ]);
    let p = Predictor::new(&m, &Profile::uniform(&m, 8, ms(1.0)), 3);
    for (deadline0, want) in [(15.0, 1), (14.9, 0)] {
        let mut newcomer = req(1, 3.0, 90.0);
        newcomer.part = 1;
        let rs = [req(0, 0.0, deadline0), newcomer];
        let got = admitted(decide_in(
            (m.clone(), p.clone()),
            &mut Lazy::conservative(),
            &rs,
            &[(&[0], 3)],
            &[1],
            3.0,
        ));
        assert_eq!(got, want, "in-flight deadline {deadline0} ms");
    }
}

#[test]
fn the_no_decoder_preempt_ablation_waits_only_while_the_active_batch_is_in_its_decoder() {
    // tiny_seq2seq (src 0, emb 1, enc 2, dec_emb 3 … tok 7), a newcomer with a loose deadline:
    // LazyB preempts at the encoder and in the decoder, the ablation only at the encoder
    let rq = |i: u32| {
        let len = Lengths { enc: 4, dec: 3 };
        Request::new(RequestId(i), ms(0.0), ms(500.0), len)
    };
    let rs = [rq(0), rq(1)];
    for (node, lazy, ablation) in [(2, 1, 1), (3, 1, 0), (4, 1, 0), (7, 1, 0)] {
        let run = |pol: &mut Lazy| {
            admitted(decide_in(
                setup_of("tiny_seq2seq.toml"),
                pol,
                &rs,
                &[(&[0], node)],
                &[1],
                1.0,
            ))
        };
        assert_eq!(run(&mut Lazy::conservative()), lazy, "lazy at node {node}");
        let mut kept = Lazy::conservative().keeping_decoder();
        assert_eq!(run(&mut kept), ablation, "ablation at node {node}");
        assert_eq!(kept.name(), "lazy:no-decoder-preempt");
    }
    // its string parses, and the list of known policies names it
    let spec = crate::policy::Spec::parse("lazy:no-decoder-preempt", 8).unwrap();
    assert_eq!(spec.build().name(), "lazy:no-decoder-preempt");
    let err = crate::policy::Spec::parse("lazy:nodec", 8)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("no-decoder-preempt"), "{err}");
}

#[test]
fn each_variant_is_named_by_its_string_and_only_strict_merges_nowhere_but_its_own_step() {
    let m = zoo::fixture("tiny_seq2seq.toml");
    let loop_cells = crate::policy::cellular::loop_cells(&m);
    for text in [
        "lazy",
        "oracle",
        "lazy:strict",
        "oracle:strict",
        "lazy:no-decoder-preempt",
        "oracle:no-decoder-preempt",
    ] {
        let p = crate::policy::parse(text, 8).unwrap();
        assert_eq!(p.name(), text);
        let cells = p.cell_nodes(&m);
        if text.ends_with(":strict") {
            assert!(cells.is_empty(), "{text}: {cells:?}");
        } else {
            assert_eq!(cells, loop_cells, "{text}");
        }
    }
}

/// Requests 0 and 1 in flight on the eight-node graph since t = 0 (request 0's deadline 20 ms,
/// request 1's 100 ms), newcomer 2 (deadline 100 ms) pending; the pair stands at `node` at
/// t = `node` ms (it ran nodes 0..node, 1 ms each).
fn pair_at(pol: &mut Lazy, node: u32) -> Decision {
    let rs = [req(0, 0.0, 20.0), req(1, 0.0, 100.0), req(2, 0.5, 100.0)];
    decide_on(pol, &rs, &[(&[0, 1], node)], &[2], f64::from(node))
}

#[test]
fn a_refusal_holds_until_the_active_members_complete_then_the_gate_is_asked_again() {
    // Eq. 2 with the pair at node n at t = n: both have 9 − n ms left each, a newcomer 9 ms:
    // done by n + 2 (9 − n) + 9 = 27 − n ms against request 0's deadline of 20: refused at
    // nodes 2..=6, admissible from node 7 on
    let admit = Decision::Admit {
        count: 1,
        pad: false,
    };
    let mut recheck = Lazy::conservative().reading(Readings {
        recheck: true,
        ..Readings::default()
    });
    let mut lazy = Lazy::conservative();
    for node in 2..=6 {
        assert_eq!(pair_at(&mut recheck, node), Decision::Run, "node {node}");
        assert_eq!(pair_at(&mut lazy, node), Decision::Run, "node {node}");
    }
    assert_eq!(lazy.latch, [RequestId(0), RequestId(1)]);
    // the gate would pass now: the ablation asks it again and admits; lazy holds its refusal
    // at every boundary while the pair is in flight
    for node in 7..=8 {
        assert_eq!(pair_at(&mut recheck, node), admit, "node {node}");
        assert_eq!(pair_at(&mut lazy, node), Decision::Run, "node {node}");
    }
    // the pair completed (another request 3, pushed later at node A, is in flight): the gate
    // is asked again — 8 ms left for request 3 and 9 for the newcomer at t = 9: 26 ≤ 100
    let rs = [
        req(0, 0.0, 20.0),
        req(1, 0.0, 100.0),
        req(2, 0.5, 100.0),
        req(3, 8.0, 100.0),
    ];
    let after = decide_on(&mut lazy, &rs, &[(&[3], 1)], &[2], 9.0);
    assert_eq!(after, admit);
    assert!(lazy.latch.is_empty());
}

#[test]
fn the_latch_follows_the_active_members_wherever_they_stand_and_spares_an_idle_server() {
    let mut lazy = Lazy::conservative();
    assert_eq!(pair_at(&mut lazy, 2), Decision::Run);
    // request 1 merged into an entry with another request and request 0 gone: still held
    let rs = [
        req(0, 0.0, 20.0),
        req(1, 0.0, 100.0),
        req(2, 0.5, 100.0),
        req(3, 0.0, 100.0),
    ];
    assert_eq!(
        decide_on(&mut lazy, &rs, &[(&[1, 3], 7)], &[2], 6.0),
        Decision::Run
    );
    // an entry below the active one holding request 0: still held
    assert_eq!(
        decide_on(&mut lazy, &rs, &[(&[0], 7), (&[3], 2)], &[2], 6.0),
        Decision::Run
    );
    // an idle server admits everyone waiting at once, whatever was refused before, and the
    // refusal is over
    assert_eq!(
        decide_on(&mut lazy, &rs, &[], &[2, 3], 9.0),
        Decision::Admit {
            count: 2,
            pad: false
        }
    );
    assert!(lazy.latch.is_empty());
}

#[test]
fn all_or_nothing_admits_the_whole_queue_or_none_and_latches_like_lazy() {
    // request 0 at node C at t = 3 (6 ms left, deadline as given), newcomers 1 and 2 (9 ms
    // each, deadline 90): both done by 3 + 6 + 18 = 27 ms, the first alone by 18
    let rs = |d0| [req(0, 0.0, d0), req(1, 2.0, 90.0), req(2, 2.5, 90.0)];
    let all = || {
        Lazy::conservative().reading(Readings {
            all: true,
            ..Readings::default()
        })
    };
    assert_eq!(
        admitted(decide(&mut Lazy::conservative(), &rs(27.0), 3, 3.0)),
        2
    );
    assert_eq!(admitted(decide(&mut all(), &rs(27.0), 3, 3.0)), 2);
    assert_eq!(
        admitted(decide(&mut Lazy::conservative(), &rs(26.9), 3, 3.0)),
        1
    );
    let mut a = all();
    assert_eq!(admitted(decide(&mut a, &rs(26.9), 3, 3.0)), 0);
    assert_eq!(a.latch, [RequestId(0)], "its refusal latches");
}

#[test]
fn a_request_past_its_predicted_decoder_length_is_priced_as_each_reading_says() {
    // tiny_seq2seq, 1 ms a node alone, 3 decoder steps predicted, 12 at most; a decoder step
    // is 5 nodes. Request 0 at the decoder's first node, step 5, 5 steps done; a newcomer of
    // encoder length 4 costs 2 + 4 + 15 = 21 ms. Request 0 has left: one step (5 ms, `lazy`),
    // 3 more steps (15 ms, `past-again`) or up to step 12 (35 ms, `past-max`)
    let with = |past| {
        Lazy::conservative().reading(Readings {
            past,
            ..Readings::default()
        })
    };
    let past = [(4u32, 0u32, 4u32, 0u32), (3, 5, 4, 5)];
    let single = |pol: Lazy, d| admits(pol, &past[1..], 4, d);
    for (reading, bound) in [(Past::Step, 26.0), (Past::Again, 36.0), (Past::Max, 56.0)] {
        assert_eq!(
            (
                single(with(reading), bound),
                single(with(reading), bound - 0.1)
            ),
            (1, 0),
            "{reading:?}"
        );
    }
    // a request within its predicted length is priced alike by all three: request 0 at step
    // 1 of 3 with one step done has 2 steps and 5 nodes... 10 ms left: 10 + 21 = 31
    let within = [(3u32, 1u32, 4u32, 1u32)];
    for reading in [Past::Step, Past::Again, Past::Max] {
        assert_eq!(
            (
                admits(with(reading), &within, 4, 31.0),
                admits(with(reading), &within, 4, 30.9)
            ),
            (1, 0),
            "{reading:?}"
        );
    }
}

#[test]
fn readings_combine_and_a_name_lists_them_in_one_order() {
    for (text, name) in [
        ("lazy", "lazy"),
        ("lazy:recheck", "lazy:recheck"),
        ("lazy:all:recheck", "lazy:recheck:all"),
        ("oracle:past-max:strict", "oracle:strict:past-max"),
        ("lazy:past-again", "lazy:past-again"),
        ("lazy+cell", "lazy"),
    ] {
        assert_eq!(
            crate::policy::parse(text, 8).unwrap().name(),
            name,
            "{text}"
        );
    }
    for (bad, says) in [
        ("lazy:recheck:recheck", "given twice"),
        ("lazy:past-again:past-max", "one of"),
        ("lazy:nope", "unknown reading 'nope'"),
        ("lazy+cell:all", "takes no parameters"),
    ] {
        let e = crate::policy::Spec::parse(bad, 8)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}
