//! Metrics of a run: per-request records into an HDR histogram (microseconds), the summary the
//! `run` command prints (latency percentiles, throughput, SLA violations, batch sizes, preemptions
//! and merges), and the HdrHistogram percentile-distribution text format (`.hgrm`).

use crate::engine::Outcome;
use crate::error::{Error, Result};
use crate::graph::Class;
use crate::time::Nanos;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// Latency summary in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyMs {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// What one run measured (the `run --json` object, less the run's identity fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Requests offered.
    pub requests: u64,
    /// Requests completed.
    pub completed: u64,
    /// Requests rejected (none are, today; counted so that nothing can vanish).
    pub rejected: u64,
    /// Latency percentiles.
    pub latency_ms: LatencyMs,
    /// Completed requests / (last completion − first arrival).
    pub throughput_rps: f64,
    /// Fraction of completed requests whose latency exceeded the SLA.
    pub sla_violation_rate: f64,
    /// Mean sub-batch size over node executions.
    pub mean_batch_size: f64,
    /// Preemptions of the active sub-batch.
    pub preemptions: u64,
    /// Sub-batch merges.
    pub merges: u64,
    /// Node executions whose members stood at different timesteps of a loop (merges across
    /// timesteps at work).
    #[serde(default)]
    pub cross_step_executions: u64,
    /// Where the device time went, by node class (classes the model has).
    #[serde(default)]
    pub by_class: Vec<ClassStats>,
}

impl Stats {
    /// The share of the run (first arrival to last completion) during which the device was
    /// busy: device time per completed request × completed requests per second.
    pub(crate) fn device_busy_fraction(&self) -> f64 {
        let per_request_ms: f64 = self.by_class.iter().map(|c| c.busy_ms_per_request).sum();
        per_request_ms / 1e3 * self.throughput_rps
    }
}

/// Device time and batch sizes at the nodes of one class.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassStats {
    /// `static`, `encoder` or `decoder`.
    pub class: String,
    /// Device time at these nodes per completed request (ms).
    pub busy_ms_per_request: f64,
    /// Mean sub-batch size at these nodes.
    pub mean_batch: f64,
}

/// Builds the latency histogram (µs, 3 significant digits) of the completed requests.
pub fn histogram(out: &Outcome) -> Result<Histogram<u64>> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .map_err(|e| Error::Internal(format!("histogram: {e}")))?;
    for r in &out.requests {
        if let Some(l) = r.latency() {
            h.record(l.0.div_ceil(1000).max(1))
                .map_err(|e| Error::Internal(format!("histogram: {e}")))?;
        }
    }
    Ok(h)
}

/// Summarizes each co-located model (parts `0..parts`) of a run.
pub fn summarize_parts(out: &Outcome, parts: usize) -> Result<Vec<Stats>> {
    (0..parts).map(|p| summarize_part(out, p as u16)).collect()
}

/// Summarizes the requests of one co-located model (part `part`), each against its own
/// deadline. The engine's counters (batch sizes, preemptions, merges) are whole-run figures and
/// are copied as they are.
pub(crate) fn summarize_part(out: &Outcome, part: u16) -> Result<Stats> {
    let sub = Outcome {
        requests: out
            .requests
            .iter()
            .filter(|r| r.part == part)
            .cloned()
            .collect(),
        counters: out.counters.clone(),
        snapshots: None,
    };
    summarize(&sub)
}

/// Summarizes an outcome; a request violates its SLA when it completes after its deadline.
pub(crate) fn summarize(out: &Outcome) -> Result<Stats> {
    let h = histogram(out)?;
    let lats: Vec<Nanos> = out.requests.iter().filter_map(|r| r.latency()).collect();
    let completed = lats.len() as u64;
    let requests = out.requests.len() as u64;
    let mean = if completed > 0 {
        lats.iter().map(|l| l.as_ms()).sum::<f64>() / completed as f64
    } else {
        0.0
    };
    let q = |p: f64| h.value_at_quantile(p) as f64 / 1e3;
    let first = out
        .requests
        .iter()
        .map(|r| r.arrival)
        .min()
        .unwrap_or_default();
    let last = out
        .requests
        .iter()
        .filter_map(|r| r.completion)
        .max()
        .unwrap_or_default();
    let span = last.saturating_sub(first).as_secs();
    let c = &out.counters;
    Ok(Stats {
        requests,
        completed,
        rejected: requests - completed,
        latency_ms: LatencyMs {
            mean,
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            max: lats.iter().max().map_or(0.0, |l| l.as_ms()),
        },
        throughput_rps: if span > 0.0 {
            completed as f64 / span
        } else {
            0.0
        },
        // each request against its own deadline (arrival + its SLA: the run's, or its model's)
        sla_violation_rate: if completed > 0 {
            out.requests
                .iter()
                .filter(|r| r.completion.is_some_and(|c| c > r.deadline))
                .count() as f64
                / completed as f64
        } else {
            0.0
        },
        mean_batch_size: if c.executions > 0 {
            c.batch_sum as f64 / c.executions as f64
        } else {
            0.0
        },
        preemptions: c.preemptions,
        merges: c.merges,
        cross_step_executions: c.cross_step,
        by_class: [Class::Static, Class::Encoder, Class::Decoder]
            .into_iter()
            .zip(&c.by_class)
            .filter(|(_, k)| k.executions > 0)
            .map(|(class, k)| ClassStats {
                class: class.to_string(),
                busy_ms_per_request: k.busy.as_ms() / completed.max(1) as f64,
                mean_batch: k.batch_sum as f64 / k.executions as f64,
            })
            .collect(),
    })
}

/// Writes `h` (recorded in µs) in HdrHistogram's `outputPercentileDistribution` text format with
/// values in milliseconds, as the Java tools and the online plotter read it.
pub fn write_hgrm<W: Write>(h: &Histogram<u64>, w: &mut W) -> std::io::Result<()> {
    let scale = 1000.0;
    let p = h.sigfig() as usize;
    writeln!(
        w,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    )?;
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let value = v.value_iterated_to() as f64 / scale;
        if q < 1.0 {
            writeln!(
                w,
                "{:>12.p$} {:>2.12} {:>10} {:>14.2}",
                value,
                q,
                total,
                1.0 / (1.0 - q),
                p = p
            )?;
        } else {
            writeln!(w, "{:>12.p$} {:>2.12} {:>10}", value, q, total, p = p)?;
        }
    }
    let sub_buckets = (2.0 * 10f64.powi(p as i32)).log2().ceil().exp2() as u64;
    writeln!(
        w,
        "#[Mean    = {:>12.p$}, StdDeviation   = {:>12.p$}]",
        h.mean() / scale,
        h.stdev() / scale,
        p = p
    )?;
    writeln!(
        w,
        "#[Max     = {:>12.p$}, Total count    = {:>12}]",
        h.max() as f64 / scale,
        h.len(),
        p = p
    )?;
    writeln!(
        w,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        sub_buckets
    )?;
    Ok(())
}

/// Quantile `p` (linear interpolation) of a sorted slice; NaN when it is empty.
pub(crate) fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let x = p * (sorted.len() - 1) as f64;
    let (i, f) = (x.floor() as usize, x - x.floor());
    let j = (i + 1).min(sorted.len() - 1);
    sorted[i] + (sorted[j] - sorted[i]) * f
}

/// Mean, 25th and 75th percentile of a sample (across seeds).
pub fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    (mean, quantile(&v, 0.25), quantile(&v, 0.75))
}
