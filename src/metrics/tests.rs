//! Unit tests of a run's metrics: a [`Recorder`] fed five hand-made requests (three completed,
//! one of them at its deadline exactly, two rejected for each reason) and the engine's counters,
//! with every figure of the summary, of each co-located model's and of each SLA class's pinned
//! by hand; two recorders absorbed into one; the kept records; the quantile helpers; and the
//! `.hgrm` text.

use super::*;
use crate::graph::{Class, Lengths};
use crate::runtime::{Rejection, Request, RequestId};
use crate::time::Nanos;
use record::Counters;
use std::sync::{Arc, Mutex};

/// Microseconds as a time (the hand-made requests' times are whole nanoseconds).
fn us(x: f64) -> Nanos {
    Nanos::from_us(x)
}

/// What happens to a hand-made request.
enum Fate {
    /// Completed at this time (µs), its first token at the other, with this many tokens.
    Done {
        at: f64,
        first: f64,
        tokens: u32,
    },
    Rejected(Rejection),
}

/// Request `id` for model `part`, class `class`, arriving at `arrival` µs with an SLA of `sla`
/// µs, and its fate.
fn request(id: u32, (part, class): (u16, u8), (arrival, sla): (f64, f64), fate: &Fate) -> Request {
    let mut q = Request::new(
        RequestId(id),
        us(arrival),
        us(sla),
        Lengths {
            enc: 2 + id,
            dec: 5 + id,
        },
    );
    (q.part, q.class) = (part, class);
    match fate {
        Fate::Done { at, first, tokens } => {
            q.completion = Some(us(*at));
            q.first_token = Some(us(*first));
            q.tokens = *tokens;
            q.first_issue = Some(us(arrival + 10.0));
        }
        Fate::Rejected(_) => {}
    }
    q
}

/// The five requests, in the order they arrive at the recorder (a later one first: the run's
/// first arrival is the earliest, not the first recorded).
/// - 0: model 0, class 0, at 1,000 µs, SLA 1,000; done at 1,200 (200 µs), first token at
///   1,050, 3 tokens (TPOT 75 µs).
/// - 2: model 1, class 0, at 900: the queue was full.
/// - 1: model 1, class 1, at 1,100, SLA 100; done at 1,400.4 (300.4 µs: late), first token at
///   1,150, 1 token (no TPOT).
/// - 4: model 0, class 1, at 1,500, SLA 500.4; done at 2,000.4 (500.4 µs: at its deadline
///   exactly, so on time), first token at 1,600, 2 tokens (TPOT 400.4 µs).
/// - 3: model 0, class 0, at 1,700: shed.
fn five() -> Vec<(Request, Fate)> {
    let done = |at, first, tokens| Fate::Done { at, first, tokens };
    [
        (0, (0, 0), (1000.0, 1000.0), done(1200.0, 1050.0, 3)),
        (
            2,
            (1, 0),
            (900.0, 50.0),
            Fate::Rejected(Rejection::QueueFull),
        ),
        (1, (1, 1), (1100.0, 100.0), done(1400.4, 1150.0, 1)),
        (4, (0, 1), (1500.0, 500.4), done(2000.4, 1600.0, 2)),
        (3, (0, 0), (1700.0, 50.0), Fate::Rejected(Rejection::Shed)),
    ]
    .into_iter()
    .map(|(id, who, when, fate)| (request(id, who, when, &fate), fate))
    .collect()
}

fn feed(r: &mut Recorder, requests: Vec<(Request, Fate)>) {
    for (q, fate) in requests {
        r.arrive(&q);
        match fate {
            Fate::Done { .. } => r.complete(q).unwrap(),
            Fate::Rejected(why) => r.reject(q, why).unwrap(),
        }
    }
}

/// The engine's counters: 2 static executions of 4, 3 decoder ones of 2 (none of the encoder),
/// 6 µs and 3 µs of device time, and a count of each event.
fn counters() -> Counters {
    let mut c = Counters::default();
    c.record(Class::Static, 2, 4, us(6.0));
    c.record(Class::Decoder, 3, 2, us(3.0));
    (c.preemptions, c.merges, c.splits, c.cross_step) = (7, 5, 3, 2);
    c
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

fn assert_latency(got: &LatencyMs, want: [f64; 6], what: &str) {
    let g = [got.mean, got.p50, got.p90, got.p95, got.p99, got.max];
    assert!(
        g.iter().zip(&want).all(|(a, b)| close(*a, *b)),
        "{what}: got {g:?}, want {want:?}"
    );
}

#[test]
fn a_runs_summary_counts_every_request_once_with_its_percentiles_tokens_and_counters() {
    let mut r = Recorder::new((2, 2), KeepRecords::default()).unwrap();
    feed(&mut r, five());
    let s = r.stats(&counters());
    assert_eq!(
        (s.requests, s.completed, s.rejected),
        (5, 3, 2),
        "offered, completed, rejected"
    );
    assert_eq!((s.rejected_queue_full, s.rejected_shed), (1, 1));
    // latencies 200, 300.4 and 500.4 µs, histogrammed in whole µs rounded up (301, 501) but
    // never above the exact maximum
    assert_latency(
        &s.latency_ms,
        [1000.8e-3 / 3.0, 0.301, 0.5004, 0.5004, 0.5004, 0.5004],
        "latency",
    );
    // from the first arrival (900 µs, recorded second) to the last completion (2,000.4 µs)
    let span = 1100.4e-6;
    assert!(close(s.throughput_rps, 3.0 / span), "{}", s.throughput_rps);
    assert!(close(s.goodput_rps, 2.0 / span), "{}", s.goodput_rps);
    assert!(
        close(s.sla_violation_rate, 1.0 / 3.0),
        "{}",
        s.sla_violation_rate
    );
    // (2 × 4 + 3 × 2) / 5 executions
    assert!(close(s.mean_batch_size, 2.8), "{}", s.mean_batch_size);
    assert_eq!(
        (s.preemptions, s.merges, s.cross_step_executions),
        (7, 5, 2)
    );
    let classes: Vec<_> = s
        .by_class
        .iter()
        .map(|k| (k.class.as_str(), k.busy_ms_per_request, k.mean_batch))
        .collect();
    assert_eq!(classes.len(), 2, "{classes:?}");
    assert_eq!(classes[0].0, "static");
    assert!(close(classes[0].1, 0.006 / 3.0) && close(classes[0].2, 4.0));
    assert_eq!(classes[1].0, "decoder");
    assert!(close(classes[1].1, 0.003 / 3.0) && close(classes[1].2, 2.0));
    // first tokens 50, 50 and 100 µs after arrival; TPOT 75 µs (2 tokens after the first in
    // 150 µs) and 400.4 µs (one in 400.4: a request of exactly two tokens counts); 6 tokens
    assert_latency(
        s.ttft_ms.as_ref().unwrap(),
        [0.2 / 3.0, 0.05, 0.1, 0.1, 0.1, 0.1],
        "ttft",
    );
    assert_latency(
        s.tpot_ms.as_ref().unwrap(),
        [0.2377, 0.075, 0.4004, 0.4004, 0.4004, 0.4004],
        "tpot",
    );
    assert!(close(s.tokens_per_s.unwrap(), 6.0 / span));
    // busy 9 µs per 3 requests at 3 / span requests per second
    assert!(close(s.device_busy_fraction(), 9e-6 / span));
}

#[test]
fn each_model_and_each_class_has_its_own_summary() {
    let mut r = Recorder::new((2, 2), KeepRecords::default()).unwrap();
    feed(&mut r, five());
    let c = counters();
    let parts = r.part_stats(&c);
    let classes = r.class_stats(&c);
    assert_eq!((parts.len(), classes.len()), (2, 2));
    let row = |s: &Stats| {
        (
            s.requests,
            s.completed,
            s.rejected_queue_full,
            s.rejected_shed,
        )
    };
    // model 0: requests 0 and 4 done, 3 shed; model 1: 1 done (late), 2 queue full
    assert_eq!(row(&parts[0]), (3, 2, 0, 1));
    assert_eq!(row(&parts[1]), (2, 1, 1, 0));
    assert_latency(
        &parts[0].latency_ms,
        [0.3502, 0.2, 0.5004, 0.5004, 0.5004, 0.5004],
        "model 0",
    );
    assert!(close(parts[0].sla_violation_rate, 0.0));
    assert!(close(parts[1].sla_violation_rate, 1.0));
    // model 0 from 1,000 to 2,000.4 µs; model 1 from 900 to 1,400.4
    assert!(close(parts[0].throughput_rps, 2.0 / 1000.4e-6));
    assert!(close(parts[1].throughput_rps, 1.0 / 500.4e-6));
    assert!(close(parts[1].goodput_rps, 0.0));
    // the counters are the whole run's, copied
    assert_eq!(parts[1].preemptions, 7);
    // class 0: request 0 done, 2 and 3 rejected; class 1: 1 (late) and 4 done
    assert_eq!(row(&classes[0]), (3, 1, 1, 1));
    assert_eq!(row(&classes[1]), (2, 2, 0, 0));
    assert!(close(classes[1].sla_violation_rate, 0.5));
    assert_eq!(
        r.class_quantiles(&[0.5, 1.0]),
        [vec![0.2, 0.2], vec![0.301, 0.5004]]
    );
    // one model and no classes keep no separate summaries
    let one = Recorder::new((1, 1), KeepRecords::default()).unwrap();
    assert!(one.part_stats(&c).is_empty() && one.class_stats(&c).is_empty());
    assert!(one.class_quantiles(&[0.5]).is_empty());
}

#[test]
fn a_run_that_completed_nothing_reports_zeros_not_nans() {
    let mut r = Recorder::new((1, 1), KeepRecords::default()).unwrap();
    let five = five();
    let rejected: Vec<_> = five
        .into_iter()
        .filter(|(_, f)| matches!(f, Fate::Rejected(_)))
        .collect();
    feed(&mut r, rejected);
    let s = r.stats(&Counters::default());
    assert_eq!((s.requests, s.completed, s.rejected), (2, 0, 2));
    assert_eq!(
        (
            s.latency_ms.mean,
            s.throughput_rps,
            s.goodput_rps,
            s.sla_violation_rate,
            s.mean_batch_size
        ),
        (0.0, 0.0, 0.0, 0.0, 0.0)
    );
    assert!(s.by_class.is_empty());
    assert_eq!((s.ttft_ms, s.tpot_ms, s.tokens_per_s), (None, None, None));
}

#[test]
fn requests_without_tokens_report_no_token_figures() {
    // a model without a decoder: no first token
    let mut r = Recorder::new((1, 1), KeepRecords::default()).unwrap();
    let mut q = request(0, (0, 0), (0.0, 100.0), &Fate::Rejected(Rejection::Shed));
    q.completion = Some(us(50.0));
    r.arrive(&q);
    r.complete(q).unwrap();
    let s = r.stats(&Counters::default());
    assert_eq!(s.completed, 1);
    assert_eq!((s.ttft_ms, s.tpot_ms, s.tokens_per_s), (None, None, None));
    // a request done the instant it arrived, with a token: no span, so no rates
    let mut r = Recorder::new((1, 1), KeepRecords::default()).unwrap();
    let q = request(
        0,
        (0, 0),
        (40.0, 100.0),
        &Fate::Done {
            at: 40.0,
            first: 40.0,
            tokens: 1,
        },
    );
    r.arrive(&q);
    r.complete(q).unwrap();
    let s = r.stats(&Counters::default());
    assert_eq!(s.completed, 1);
    assert!(s.ttft_ms.is_some());
    assert_eq!((s.throughput_rps, s.tokens_per_s), (0.0, None));
    // a completion is required
    let q = request(1, (0, 0), (0.0, 100.0), &Fate::Rejected(Rejection::Shed));
    let e = r.complete(q).unwrap_err().to_string();
    assert!(e.contains("request 1 has no completion"), "{e}");
}

#[test]
fn two_servers_records_absorbed_are_the_records_of_one() {
    let c = counters();
    let keep = KeepRecords {
        latencies: true,
        requests: true,
        csv: None,
    };
    let mut whole = Recorder::new((2, 2), keep.clone()).unwrap();
    feed(&mut whole, five());
    // requests 0, 2 and 1 on one server, 4 and 3 on the other
    let (mut a, mut b) = (
        Recorder::new((2, 2), keep.clone()).unwrap(),
        Recorder::new((2, 2), keep).unwrap(),
    );
    let mut all = five();
    let later = all.split_off(3);
    feed(&mut a, all);
    feed(&mut b, later);
    a.absorb(b).unwrap();
    assert_eq!(a.stats(&c), whole.stats(&c));
    assert_eq!(a.part_stats(&c), whole.part_stats(&c));
    assert_eq!(a.class_stats(&c), whole.class_stats(&c));
    assert_eq!(a.histogram(), whole.histogram());
    assert_eq!((a.histogram().len(), a.histogram().max()), (3, 501));
    assert_eq!(a.take_latencies(), [0.2, 0.3004, 0.5004]);
    let ids: Vec<u32> = a.take_requests().iter().map(|q| q.id.0).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    // a server that saw nothing takes the other's first arrival
    let mut empty = Recorder::new((2, 2), KeepRecords::default()).unwrap();
    empty.absorb(whole).unwrap();
    assert_eq!(empty.stats(&c).throughput_rps, a.stats(&c).throughput_rps);

    // the counters too: each field the sum of both servers'
    let mut one = counters();
    one.absorb(&counters());
    let mut twice = Counters::default();
    for _ in 0..2 {
        twice.record(Class::Static, 2, 4, us(6.0));
        twice.record(Class::Decoder, 3, 2, us(3.0));
    }
    (
        twice.preemptions,
        twice.merges,
        twice.splits,
        twice.cross_step,
    ) = (14, 10, 6, 4);
    assert_eq!(one, twice);
    assert_eq!(
        (twice.executions, twice.batch_sum, twice.busy),
        (10, 28, us(18.0))
    );
    assert_eq!(
        twice.by_class.map(|k| (k.executions, k.batch_sum, k.busy)),
        [(4, 16, us(12.0)), (0, 0, Nanos::ZERO), (6, 12, us(6.0))]
    );
}

/// A writer that holds what it is given until it is flushed, into `flushed`; or, `failing`,
/// refuses every write.
#[derive(Default)]
struct Sink {
    pending: Vec<u8>,
    flushed: Arc<Mutex<Vec<u8>>>,
    failing: bool,
}

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if self.failing {
            return Err(std::io::Error::other("disk full"));
        }
        self.pending.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.flushed.lock().unwrap().append(&mut self.pending);
        Ok(())
    }
}

#[test]
fn each_request_leaves_one_csv_line_flushed_at_the_end() {
    let sink = Sink::default();
    let flushed = sink.flushed.clone();
    let keep = KeepRecords {
        csv: Some(Arc::new(Mutex::new(sink))),
        ..KeepRecords::default()
    };
    assert_eq!(
        format!("{keep:?}"),
        "KeepRecords { latencies: false, requests: false, csv: true }"
    );
    let mut r = Recorder::new((2, 2), keep).unwrap();
    feed(&mut r, five());
    assert_eq!(format!("{r:?}"), "Recorder(5 requests)");
    assert!(flushed.lock().unwrap().is_empty());
    r.finish().unwrap();
    let text = String::from_utf8(flushed.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            record::CSV_HEADER,
            "0,0,1.000000,1.010000,1.200000,0.200000,2.000000,2,5,completed",
            "2,1,0.900000,,,,0.950000,4,7,rejected:queue_full",
            "1,1,1.100000,1.110000,1.400400,0.300400,1.200000,3,6,completed",
            "4,0,1.500000,1.510000,2.000400,0.500400,2.000400,6,9,completed",
            "3,0,1.700000,,,,1.750000,5,8,rejected:shed",
        ]
    );
}

#[test]
fn a_quantile_interpolates_between_the_ranks_around_it() {
    let v = [1.0, 2.0, 3.0, 4.0];
    let q: Vec<f64> = [0.0, 0.25, 0.5, 1.0]
        .iter()
        .map(|&p| quantile(&v, p))
        .collect();
    assert_eq!(q, [1.0, 1.75, 2.5, 4.0]);
    assert!(quantile(&[], 0.5).is_nan());
    assert_eq!(quantile(&[7.0], 0.9), 7.0);
    assert_eq!(spread(vec![4.0, 1.0, 3.0, 2.0]), (2.5, 1.75, 3.25));
    let (mean, lo, hi) = spread(Vec::new());
    assert_eq!(mean, 0.0);
    assert!(lo.is_nan() && hi.is_nan());
}

#[test]
fn the_hgrm_text_lists_cumulative_counts_and_the_histograms_summary() {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    for v in [1000, 1000, 1500, 2000] {
        h.record(v).unwrap();
    }
    let mut out = Vec::new();
    write_hgrm(&h, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    );
    assert_eq!(lines[1], "");
    let rows: Vec<Vec<f64>> = lines[2..]
        .iter()
        .take_while(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert!(rows.len() > 3, "{text}");
    // values in ms, percentiles rising to 1 with the count of values at or below each
    for r in &rows {
        let below = [1.0, 1.0, 1.5, 2.0].iter().filter(|&&v| v <= r[0]).count();
        assert_eq!(r[2], below as f64, "{text}");
        match r.len() {
            4 => assert!(
                r[1] < 1.0 && (r[3] - 1.0 / (1.0 - r[1])).abs() < 0.01,
                "{text}"
            ),
            3 => assert_eq!(r[1], 1.0, "{text}"),
            n => panic!("a row of {n} fields: {text}"),
        }
    }
    assert_eq!(rows[0][0], 1.0, "{text}");
    assert_eq!(rows.last().unwrap()[..3], [2.0, 1.0, 4.0], "{text}");
    assert!(rows.windows(2).all(|w| w[0][1] <= w[1][1]), "{text}");
    let footer: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("#["))
        .copied()
        .collect();
    assert_eq!(
        footer,
        [
            "#[Mean    =        1.375, StdDeviation   =        0.415]",
            "#[Max     =        2.000, Total count    =            4]",
            &format!(
                "#[Buckets = {:>12}, SubBuckets     =         2048]",
                h.buckets()
            ),
        ]
    );
}

#[test]
fn a_records_file_that_cannot_be_written_is_named_in_the_error() {
    let keep = KeepRecords {
        csv: Some(Arc::new(Mutex::new(Sink {
            failing: true,
            ..Sink::default()
        }))),
        ..KeepRecords::default()
    };
    let e = Recorder::new((1, 1), keep).unwrap_err().to_string();
    assert!(
        e.contains("--keep-records") && e.contains("disk full"),
        "{e}"
    );
}
