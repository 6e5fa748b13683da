//! The engine step's own guards, each at its boundary: the time horizon, a policy that waits
//! for the past, the contract errors, and the quiet turns in which the policy is not asked
//! (and the ones in which an interleaving policy must be).

use super::tests::bench;
use super::*;
use crate::graph::{zoo, Class};
use crate::policy::{self, Decision, Policy, View};
use crate::time::VirtualClock;

/// `arrivals` of `model` served under `pol`, each request's record and every table kept.
fn serve(model: &str, pol: &mut dyn Policy, arrivals: &[Arrival]) -> Result<Outcome> {
    let (m, mut npu, pred) = bench(model);
    let setup = Setup {
        keep: crate::metrics::KeepRecords {
            requests: true,
            ..Default::default()
        },
        snapshots: true,
        ..Setup::new(
            &m,
            &pred,
            Sla::from_ms(5e3).unwrap(),
            MaxBatch::new(8).unwrap(),
        )
    };
    run(&setup, &mut npu, pol, &mut VirtualClock::new(), arrivals)
}

/// Requests of `model` at the times `at` (at most two), with the generator's lengths: the
/// first request's the same however many follow.
fn arrivals_at(model: &str, at: &[Nanos]) -> Vec<Arrival> {
    let m = zoo::load(model).unwrap();
    crate::traffic::generate(&m, (Default::default(), 100.0), 2, 3)
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
