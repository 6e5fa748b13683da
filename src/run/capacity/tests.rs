//! The capacity search's unit tests: bounds, the search on a model queue, its refusals and
//! its time estimate.

use super::*;

#[test]
fn a_policys_result_is_said_in_one_line_found_or_not() {
    let probe = |rate, ok| Probe {
        rate,
        stats: stats(40.0, 0.0, 0),
        ok,
    };
    let c = Capacity {
        policy: "graph:5".into(),
        capacity_rps: Some(1438.46),
        note: None,
        at: stats(49.119, 0.0, 0),
        probes: vec![probe(320.0, true), probe(2557.0, false)],
    };
    assert_eq!(
        found(&c, Bound::P99Ms(50.0)),
        "capacity: graph:5 1438.5 req/s (p99 49.119 ms), 2 probes"
    );
    let none = Capacity {
        capacity_rps: None,
        note: Some("no rate tried meets the bound".into()),
        ..c
    };
    assert_eq!(
        found(&none, Bound::P99Ms(50.0)),
        "capacity: graph:5 none: no rate tried meets the bound, 2 probes"
    );
}

#[test]
fn token_bounds_read_their_own_figure_and_a_run_without_it_meets_none() {
    let mut s = stats(500.0, 0.5, 0);
    s.ttft_ms = Some(crate::metrics::LatencyMs {
        p99: 40.0,
        ..Default::default()
    });
    s.tpot_ms = Some(crate::metrics::LatencyMs {
        p99: 2.0,
        ..Default::default()
    });
    // the end-to-end p99 (500 ms) and violations do not enter a token bound
    assert!(Bound::TtftP99Ms(40.0).met_by(&s));
    assert!(!Bound::TtftP99Ms(39.9).met_by(&s));
    assert!(Bound::TpotP99Ms(2.0).met_by(&s));
    assert!(!Bound::TpotP99Ms(1.9).met_by(&s));
    let static_model = stats(1.0, 0.0, 0);
    assert!(!Bound::TtftP99Ms(1e9).met_by(&static_model));
    assert!(!Bound::TpotP99Ms(1e9).met_by(&static_model));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = check(Bound::TtftP99Ms(bad), 3.0, 100.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("positive"), "{e}");
        assert!(check(Bound::TpotP99Ms(bad), 3.0, 100.0).is_err());
    }
    // a bound below the single-input latency is no error for a token bound: the first
    // token comes before the request ends
    assert!(check(Bound::TtftP99Ms(1.0), 3.0, 100.0).is_ok());
}

pub(super) fn stats(p99: f64, viol: f64, rejected: u64) -> Stats {
    let mut s = Stats {
        requests: 100,
        completed: 100 - rejected,
        rejected,
        sla_violation_rate: viol,
        ..Stats::default()
    };
    s.latency_ms.p99 = p99;
    s
}

#[test]
fn the_longest_search_takes_exactly_the_probes_its_estimate_says() {
    // met from the serial capacity (100) up to 12,800, missed from 13,000: nine probes up
    // (100 × 2^0..=8; 25,600 is the top, 64 × 4 × 100), then six halvings of the bracket
    // [12,800, 25,600] to within 2%, each one missed
    let how = Search {
        bound: Bound::P99Ms(30.0),
        precision: 0.02,
        seeds: 1,
        lowest_share: lowest_share(true),
    };
    let c = search_one("p", 100.0, 64, &how, queue(10.0, 12_800.5 * 1.5)).unwrap();
    assert_eq!(c.capacity_rps, Some(12_800.0));
    assert_eq!(probes_at_most(64, 0.02), 9 + 6);
    assert_eq!(c.probes.len() as u32, probes_at_most(64, 0.02));
    assert_eq!(probes_at_most(1, 0.5), 3 + 1);
    // on a real device the way down is the longer: the serial probe (1), four halvings to
    // 1/16 (2 + 4 + 8 + 16) and six bisection probes of up to 16 each
    assert_eq!(probe_time_at_most(64, 0.02, 1.0 / 16.0), 1.0 + 30.0 + 96.0);
    // … and with one halving and one bisection the way up (ten probes) is
    assert_eq!(probe_time_at_most(64, 0.5, 0.5), 10.0);
}

#[test]
fn a_bound_is_met_within_it_and_with_nothing_rejected() {
    assert!(Bound::P99Ms(10.0).met_by(&stats(10.0, 0.0, 0)));
    assert!(!Bound::P99Ms(10.0).met_by(&stats(10.1, 0.0, 0)));
    assert!(!Bound::P99Ms(10.0).met_by(&stats(1.0, 0.0, 1)));
    // 10% of 90 completed late plus 10 rejected: 19 of 100
    let s = stats(1.0, 0.1, 10);
    assert!((Bound::Violations(0.19).value(&s) - 0.19).abs() < 1e-12);
    assert!(!Bound::Violations(0.5).met_by(&s));
    // a token SLO: both p99s within their bounds, each at its exact edge
    let tokens = |ttft: f64, tpot: f64| {
        let mut s = stats(1.0, 0.0, 0);
        let l = |p99| crate::metrics::LatencyMs {
            p99,
            ..Default::default()
        };
        (s.ttft_ms, s.tpot_ms) = (Some(l(ttft)), Some(l(tpot)));
        s
    };
    let slo = Bound::TokenSlo {
        ttft_ms: 100.0,
        tpot_ms: 5.0,
    };
    assert!(slo.met_by(&tokens(100.0, 5.0)));
    assert!(!slo.met_by(&tokens(100.001, 1.0)));
    assert!(!slo.met_by(&tokens(1.0, 5.001)));
    assert_eq!(slo.value(&tokens(50.0, 4.0)), 0.8);
    assert_eq!(slo.shown(&tokens(50.0, 4.0)), "0.800 of its bound");
    assert_eq!(Bound::Violations(0.1).shown(&stats(1.0, 0.1, 10)), "19.00%");
    assert_eq!(Bound::P99Ms(10.0).shown(&stats(2.5, 0.0, 0)), "2.500 ms");
    // a run without the figures (no decoder) meets no token bound
    assert!(!slo.met_by(&stats(1.0, 0.0, 0)));
    assert!(check(slo, 0.0, 100.0).is_ok());
    let bad = Bound::TokenSlo {
        ttft_ms: 100.0,
        tpot_ms: -1.0,
    };
    assert!(check(bad, 0.0, 100.0).is_err());
}

/// A server whose p99 is `base / (1 - rate / cap)`: it meets a p99 of `x` up to
/// `cap × (1 - base / x)`.
fn queue(base: f64, cap: f64) -> impl FnMut(f64) -> Result<Stats> {
    move |rate| {
        let p99 = if rate >= cap {
            1e9
        } else {
            base / (1.0 - rate / cap)
        };
        Ok(stats(p99, 0.0, 0))
    }
}

#[test]
fn the_search_brackets_then_bisects_to_the_precision() {
    let how = Search {
        bound: Bound::P99Ms(40.0),
        precision: 0.02,
        seeds: 1,
        lowest_share: lowest_share(true),
    };
    // true capacity 1000 × (1 − 10/40) = 750 req/s, serial capacity 100: up 100, 200,
    // 400, 800 (fails), then bisect [400, 800]
    let c = search_one("p", 100.0, 64, &how, queue(10.0, 1000.0)).unwrap();
    let cap = c.capacity_rps.unwrap();
    assert!((750.0 / 1.02..=750.0).contains(&cap), "{cap}");
    let rates: Vec<f64> = c.probes.iter().take(4).map(|p| p.rate).collect();
    assert_eq!(rates, [100.0, 200.0, 400.0, 800.0]);
    assert!(c.probes.len() as u32 <= probes_at_most(64, 0.02));
    // from above: serial capacity 2000 fails, halves to 1000 (fails), 500 (meets)
    let c = search_one("p", 2000.0, 64, &how, queue(10.0, 1000.0)).unwrap();
    let cap = c.capacity_rps.unwrap();
    assert!((750.0 / 1.02..=750.0).contains(&cap));
    assert_eq!(c.probes[2].rate, 500.0);
}

#[test]
fn a_real_devices_search_stops_halving_at_a_sixteenth_and_within_its_time_estimate() {
    let how = |x, precision| Search {
        bound: Bound::P99Ms(x),
        precision,
        seeds: 1,
        lowest_share: lowest_share(false),
    };
    // no rate meets it: 100, 50, 25, 12.5, 6.25, then the next would be under 100/16
    let never = search_one("p", 100.0, 8, &how(5.0, 0.1), queue(10.0, 1000.0)).unwrap();
    let rates: Vec<f64> = never.probes.iter().map(|p| p.rate).collect();
    assert_eq!(rates, [100.0, 50.0, 25.0, 12.5, 6.25]);
    assert!(never.note.unwrap().contains("(1/16 of"));
    // each probe lasts (serial rate / its rate) units; wherever the capacity lies, the
    // search's total stays within the estimate the CLI prints
    for precision in [0.02, 0.1, 0.3] {
        let most = probe_time_at_most(8, precision, lowest_share(false));
        for cap in [7.0, 13.0, 40.0, 99.0, 150.0, 900.0, 1e9] {
            let c = search_one("p", 100.0, 8, &how(20.0, precision), |rate| {
                Ok(stats(if rate <= cap { 1.0 } else { 100.0 }, 0.0, 0))
            })
            .unwrap();
            let spent: f64 = c.probes.iter().map(|p| 100.0 / p.rate).sum();
            assert!(
                spent <= most,
                "capacity {cap}, {precision}: {spent} > {most}"
            );
        }
    }
}

#[test]
fn bounds_that_no_rate_or_every_rate_meets_end_the_search_with_a_note() {
    let how = |x| Search {
        bound: Bound::P99Ms(x),
        precision: 0.02,
        seeds: 1,
        lowest_share: lowest_share(true),
    };
    let never = search_one("p", 100.0, 8, &how(5.0), queue(10.0, 1000.0)).unwrap();
    assert_eq!(never.capacity_rps, None);
    let note = never.note.unwrap();
    assert!(note.contains("at no rate tried, down to"), "{note}");
    // 100, 50, …, down to the first rate under 100/1024
    assert_eq!(never.probes.len(), 11);
    let always = search_one("p", 100.0, 8, &how(5.0), |_| Ok(stats(1.0, 0.0, 0))).unwrap();
    let note = always.note.unwrap();
    assert!(
        note.contains("at every rate tried, up to 3200.0 req/s"),
        "{note}"
    );
    let e = check(Bound::P99Ms(2.0), 3.0, 100.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("invalid p99 bound") && e.contains("single-input latency"),
        "{e}"
    );
    let e = check(Bound::Violations(0.01), 3.0, 2.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid SLA"), "{e}");
    assert!(check(Bound::Violations(1.0), 3.0, 100.0).is_err());
    assert!(check(Bound::P99Ms(30.0), 3.0, 100.0).is_ok());
    let bad = Search {
        precision: 0.0,
        ..how(30.0)
    };
    assert!(search_one("p", 1.0, 1, &bad, queue(1.0, 2.0)).is_err());
}

#[test]
fn each_input_is_refused_exactly_at_its_boundary() {
    // a p99 bound at exactly the single-input latency leaves no room for any queueing
    assert!(check(Bound::P99Ms(3.0), 3.0, 100.0).is_err());
    assert!(check(Bound::P99Ms(3.001), 3.0, 100.0).is_ok());
    // an SLA at exactly the single-input latency: every request violates it
    assert!(check(Bound::Violations(0.01), 3.0, 3.0).is_err());
    assert!(check(Bound::Violations(0.0), 3.0, 3.001).is_ok());
    let how = |precision, lowest_share| Search {
        bound: Bound::P99Ms(30.0),
        precision,
        seeds: 1,
        lowest_share,
    };
    let ok = |h: Search| search_one("p", 100.0, 8, &h, queue(10.0, 1000.0)).is_ok();
    // the precision is a share in (0, 1): 100% would stop before bisecting at all
    assert!(!ok(how(1.0, lowest_share(true))));
    assert!(!ok(how(0.0, lowest_share(true))));
    assert!(ok(how(0.999, lowest_share(true))));
    // the lowest share is in (0, 1): at 0 a policy that meets the bound at no rate would
    // halve forever; at 1 or more the search could not go below the serial capacity
    for bad in [0.0, -0.5, 1.0, 2.0] {
        let e = search_one("p", 100.0, 8, &how(0.02, bad), queue(10.0, 1000.0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("lowest rate"), "{bad}: {e}");
    }
    assert!(ok(how(0.02, 0.999)));
    assert!(ok(how(0.02, 1e-9)));
    // a bracket exactly as wide as the precision is within it: the search stops there
    // (met at 100, missed at 200, then at 150 = 100 × 1.5)
    let half = Search {
        bound: Bound::P99Ms(11.5),
        ..how(0.5, lowest_share(true))
    };
    let c = search_one("p", 100.0, 8, &half, queue(10.0, 1000.0)).unwrap();
    let rates: Vec<f64> = c.probes.iter().map(|p| p.rate).collect();
    assert_eq!(rates, [100.0, 200.0, 150.0]);
    assert_eq!(c.capacity_rps, Some(100.0));
}

#[test]
fn a_token_bound_sets_the_deadline_of_a_request_of_the_predicted_lengths() {
    // tiny_seq2seq on a table of 1 ms a node at any batch: a request of the reference encoder
    // length (4) takes src + emb + 4 encoder steps + its first decoder step (5 nodes) = 11 ms
    // to its first token, then 5 ms a further token; it has `dec` tokens (no prefill token)
    let m = crate::graph::zoo::fixture("tiny_seq2seq.toml");
    let table = crate::device::table::TableDevice::from_profile(
        crate::profile::Profile::uniform(&m, 8, crate::time::Nanos::from_ms(1.0)),
        "uniform",
    );
    let opts = crate::run::TestbedOptions {
        max_batch: crate::runtime::MaxBatch::new(8).unwrap(),
        coverage: 90.0,
        profile: None,
        sampling: crate::device::measure::Sampling::default(),
    };
    let bench = Testbed::open(m, crate::device::open::Opened::Table(table), &opts).unwrap();
    let dec = bench.predictor.predicted_in(0, 4, 0).dec;
    assert!(dec >= 2, "{dec}");
    let later = f64::from(dec - 1);
    let sla = |b| token_sla_ms(&bench, b).unwrap();
    let both = Bound::TokenSlo {
        ttft_ms: 30.0,
        tpot_ms: 2.0,
    };
    assert!((sla(both) - (30.0 + 2.0 * later)).abs() < 1e-9);
    // a bound alone takes the other term from the request served alone
    assert!((sla(Bound::TtftP99Ms(30.0)) - (30.0 + 5.0 * later)).abs() < 1e-9);
    assert!((sla(Bound::TpotP99Ms(2.0)) - (11.0 + 2.0 * later)).abs() < 1e-9);
    // other bounds set no deadline
    assert!(token_sla_ms(&bench, Bound::P99Ms(100.0)).is_none());
    assert!(token_sla_ms(&bench, Bound::Violations(0.01)).is_none());
}
