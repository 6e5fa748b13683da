//! Many runs of one bench, and what each leaves: its statistics, its sorted latencies, each
//! co-located model's statistics and, when asked, its latency histogram. `compare` runs a grid
//! of policies × rates × seeds through [`run_all`]; `reproduce` runs its jobs through
//! [`run_one`]. The NPU model replays runs in parallel; a real device serves them one after
//! another in wall time.

use super::drive::Arrivals;
use super::{RunSpec, Testbed};
use crate::engine::Outcome;
use crate::error::Result;
use crate::metrics::{self, KeepRecords, Stats};
use crate::progress::{Mode, Progress};
use crate::traffic::Traffic;
use hdrhistogram::Histogram;
use rayon::prelude::*;

/// What to keep of a run besides its statistics.
#[derive(Clone, Copy, Debug, Default)]
pub struct Keep {
    /// The latency histogram.
    pub histogram: bool,
    /// Every completed request's latency, sorted (`reproduce`'s CDFs and SLA sweeps; memory
    /// grows with the run).
    pub latencies: bool,
}

/// A finished run.
#[derive(Clone, Debug)]
pub struct RunOut {
    /// Statistics at the run's SLA.
    pub stats: Stats,
    /// Latencies of completed requests, ascending (ms), when kept.
    pub lat_ms: Vec<f64>,
    /// Co-located runs: each model's statistics (empty for one model).
    pub parts: Vec<Stats>,
    /// The latency histogram, when kept.
    pub histogram: Option<Histogram<u64>>,
    /// Each SLA class's statistics (empty without classes).
    pub classes: Vec<Stats>,
    /// Each SLA class's latency (ms) at [`CLASS_QUANTILES`] (empty without classes).
    pub class_cdf: Vec<Vec<f64>>,
}

/// The quantiles at which a run keeps each SLA class's latency: every percentile, then the
/// 99.5th and 99.9th (a class's CDF, 101 numbers whatever the run's length).
pub const CLASS_QUANTILES: [f64; 101] = {
    let mut q = [0.0; 101];
    let mut i = 0;
    while i < 99 {
        q[i] = (i + 1) as f64 / 100.0;
        i += 1;
    }
    q[99] = 0.995;
    q[100] = 0.999;
    q
};

impl RunOut {
    /// Fraction of requests slower than `sla_ms` (the latencies must have been kept).
    pub fn violation(&self, sla_ms: f64) -> f64 {
        if self.lat_ms.is_empty() {
            return 0.0;
        }
        let ok = self.lat_ms.partition_point(|&l| l <= sla_ms);
        (self.lat_ms.len() - ok) as f64 / self.lat_ms.len() as f64
    }
}

fn records(keep: Keep) -> KeepRecords {
    KeepRecords {
        latencies: keep.latencies,
        ..KeepRecords::default()
    }
}

fn finish(mut out: Outcome, keep: Keep) -> RunOut {
    RunOut {
        stats: out.stats(),
        parts: out.part_stats(),
        lat_ms: out.record.take_latencies(),
        histogram: keep.histogram.then(|| out.record.histogram().clone()),
        classes: out.class_stats(),
        class_cdf: out.record.class_quantiles(&CLASS_QUANTILES),
    }
}

/// One run on the NPU model (any number of these can go at once).
pub(crate) fn run_one(bench: &Testbed, spec: &RunSpec, keep: Keep) -> Result<RunOut> {
    Ok(finish(bench.run(spec, records(keep))?, keep))
}

/// Every configuration of `cfgs` on `bench`, in order: in parallel on the NPU model, one after
/// another on a real device. `keep(i)` says what to keep of run `i`. Progress is shown under
/// `what` (runs done on the NPU model; seconds of traffic delivered on a real device, which
/// serves in real time).
pub fn run_all(
    bench: &Testbed,
    cfgs: &[RunSpec],
    keep: impl Fn(usize) -> Keep + Sync,
    progress: Mode,
    what: &str,
) -> Result<Vec<RunOut>> {
    if bench.is_virtual() {
        let shown = progress.start(what, cfgs.len() as u64, "runs");
        let outs = cfgs
            .par_iter()
            .enumerate()
            .map(|(i, c)| {
                let out = run_one(bench, c, keep(i));
                shown.inc(1);
                out
            })
            .collect();
        shown.finish();
        return outs;
    }
    let traffic = |bench: &Testbed, c: &RunSpec| bench.traffic(c);
    let total: u64 = cfgs
        .iter()
        .map(|c| traffic(bench, c).map(|t| traffic_secs(&t)))
        .sum::<Result<u64>>()?;
    let shown = progress.start(what, total, "s of traffic");
    let mut outs = Vec::with_capacity(cfgs.len());
    let mut base = 0;
    for (i, c) in cfgs.iter().enumerate() {
        let t = traffic(bench, c)?;
        let secs = traffic_secs(&t);
        shown.set_message(format!(
            "run {}/{}: {} at {:.1} req/s",
            i + 1,
            cfgs.len(),
            c.policy.text,
            c.rate
        ));
        let t = Arrivals::Scheduled(delivered(t, &shown, base));
        let out = bench.drive(c, records(keep(i)), t)?;
        base += secs;
        shown.set_position(base);
        outs.push(finish(out, keep(i)));
    }
    shown.finish();
    Ok(outs)
}

/// Whole seconds of arrivals in `t`: its count over its rate, rounded up (a real device serves
/// it in about that much wall time).
pub fn traffic_secs(t: &Traffic) -> u64 {
    if t.rate > 0.0 {
        (t.expected as f64 / t.rate).ceil() as u64
    } else {
        0
    }
}

/// `t` with `shown` moved to `base` plus the arrival's time (whole seconds) as each arrival is
/// handed over: the progress of a run in real time.
pub fn delivered(t: Traffic, shown: &Progress, base: u64) -> Traffic {
    let shown = shown.clone();
    Traffic {
        arrivals: Box::new(t.arrivals.inspect(move |a| {
            shown.set_position(base + a.time.0 / 1_000_000_000);
        })),
        ..t
    }
}

/// The mean over runs (seeds) of every statistic, counts rounded.
pub fn mean_stats(runs: &[&Stats]) -> Stats {
    let n = runs.len().max(1) as f64;
    let avg = |f: &dyn Fn(&Stats) -> f64| runs.iter().map(|s| f(s)).sum::<f64>() / n;
    let count = |f: &dyn Fn(&Stats) -> u64| avg(&|s| f(s) as f64).round() as u64;
    let first = runs.first().copied().cloned().unwrap_or_default();
    Stats {
        requests: first.requests,
        completed: count(&|s| s.completed),
        rejected: count(&|s| s.rejected),
        rejected_queue_full: count(&|s| s.rejected_queue_full),
        rejected_shed: count(&|s| s.rejected_shed),
        rejected_abandoned: count(&|s| s.rejected_abandoned),
        rejected_cancelled: count(&|s| s.rejected_cancelled),
        rejected_late: count(&|s| s.rejected_late),
        rejected_not_admitted: count(&|s| s.rejected_not_admitted),
        latency_ms: metrics::LatencyMs {
            mean: avg(&|s| s.latency_ms.mean),
            p50: avg(&|s| s.latency_ms.p50),
            p90: avg(&|s| s.latency_ms.p90),
            p95: avg(&|s| s.latency_ms.p95),
            p99: avg(&|s| s.latency_ms.p99),
            max: avg(&|s| s.latency_ms.max),
        },
        throughput_rps: avg(&|s| s.throughput_rps),
        sla_violation_rate: avg(&|s| s.sla_violation_rate),
        goodput_rps: avg(&|s| s.goodput_rps),
        mean_batch_size: avg(&|s| s.mean_batch_size),
        preemptions: count(&|s| s.preemptions),
        merges: count(&|s| s.merges),
        cross_step_executions: count(&|s| s.cross_step_executions),
        by_class: (0..first.by_class.len())
            .map(|k| metrics::ClassStats {
                class: first.by_class[k].class.clone(),
                busy_ms_per_request: avg(&|s| s.by_class[k].busy_ms_per_request),
                mean_batch: avg(&|s| s.by_class[k].mean_batch),
            })
            .collect(),
        ttft_ms: mean_latency(runs, |s| s.ttft_ms.as_ref()),
        tpot_ms: mean_latency(runs, |s| s.tpot_ms.as_ref()),
        tokens_per_s: (!runs.is_empty() && runs.iter().all(|s| s.tokens_per_s.is_some()))
            .then(|| avg(&|s| s.tokens_per_s.unwrap_or(0.0))),
    }
}

/// The mean over runs of a summary every run has (None when one lacks it).
fn mean_latency(
    runs: &[&Stats],
    of: impl Fn(&Stats) -> Option<&metrics::LatencyMs>,
) -> Option<metrics::LatencyMs> {
    let all: Vec<&metrics::LatencyMs> = runs.iter().map(|s| of(s)).collect::<Option<_>>()?;
    if all.is_empty() {
        return None;
    }
    let n = all.len() as f64;
    let avg = |f: fn(&metrics::LatencyMs) -> f64| all.iter().map(|l| f(l)).sum::<f64>() / n;
    Some(metrics::LatencyMs {
        mean: avg(|l| l.mean),
        p50: avg(|l| l.p50),
        p90: avg(|l| l.p90),
        p95: avg(|l| l.p95),
        p99: avg(|l| l.p99),
        max: avg(|l| l.max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_tokens(ttft_p99: f64, tokens: f64) -> Stats {
        Stats {
            ttft_ms: Some(metrics::LatencyMs {
                mean: ttft_p99 / 2.0,
                p99: ttft_p99,
                ..Default::default()
            }),
            tpot_ms: Some(metrics::LatencyMs {
                p99: ttft_p99 / 10.0,
                ..Default::default()
            }),
            tokens_per_s: Some(tokens),
            ..Stats::default()
        }
    }

    #[test]
    fn token_figures_average_over_seeds_only_when_every_seed_has_them() {
        let (a, b) = (with_tokens(10.0, 100.0), with_tokens(30.0, 300.0));
        let m = mean_stats(&[&a, &b]);
        assert_eq!(
            m.ttft_ms.as_ref().map(|l| (l.mean, l.p99)),
            Some((10.0, 20.0))
        );
        assert_eq!(m.tpot_ms.as_ref().map(|l| l.p99), Some(2.0));
        assert_eq!(m.tokens_per_s, Some(200.0));
        // a run without them (a static model) leaves the mean without them
        let none = mean_stats(&[&a, &Stats::default()]);
        assert_eq!(
            (none.ttft_ms, none.tpot_ms, none.tokens_per_s),
            (None, None, None)
        );
        let empty = mean_stats(&[]);
        assert_eq!((empty.ttft_ms, empty.tokens_per_s), (None, None));
    }
}
