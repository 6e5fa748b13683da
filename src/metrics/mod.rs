//! Metrics of a run: the summary the `run` command prints ([`Stats`]: latency percentiles,
//! throughput, SLA violations, rejections, batch sizes, preemptions and merges), built from what
//! [`record`] streams in as requests leave the server, so that memory does not grow with the
//! run; the HdrHistogram percentile-distribution text format ([`hgrm`]); and the spread of a
//! statistic over seeds.

mod hgrm;
pub mod record;

pub use hgrm::write_hgrm;
pub use record::{KeepRecords, Recorder};

use serde::{Deserialize, Serialize};

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
    /// Requests rejected, every one for a counted reason: the pending queue was full
    /// (`--max-pending`), `--shed` found its deadline lost, or a server's shutdown deadline
    /// passed before it completed.
    pub rejected: u64,
    /// Of those, rejected because the pending queue was full.
    #[serde(default)]
    pub rejected_queue_full: u64,
    /// Of those, shed: their deadline could no longer be met (`--shed`).
    #[serde(default)]
    pub rejected_shed: u64,
    /// Of those, abandoned at a node boundary when a server's shutdown deadline passed
    /// (`serve --shutdown-timeout-s`).
    #[serde(default)]
    pub rejected_abandoned: u64,
    /// Of those, cancelled: their client went away before they completed, and they left at
    /// the next node boundary (`serve`).
    #[serde(default)]
    pub rejected_cancelled: u64,
    /// Of those, let go at a node boundary once their deadline had passed (`--abandon-late`).
    #[serde(default)]
    pub rejected_late: u64,
    /// Of those, refused at arrival: predicted to miss their deadline behind the work in the
    /// server (`--admit predicted`).
    #[serde(default)]
    pub rejected_not_admitted: u64,
    /// Latency percentiles.
    pub latency_ms: LatencyMs,
    /// Completed requests / (last completion − first arrival).
    pub throughput_rps: f64,
    /// Fraction of completed requests whose latency exceeded the SLA.
    pub sla_violation_rate: f64,
    /// Requests completed within their deadline / (last completion − first arrival).
    #[serde(default)]
    pub goodput_rps: f64,
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
    /// Models with a decoder: time to first token, from arrival to the end of the request's
    /// first decoder step (its first output token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<LatencyMs>,
    /// Models with a decoder: time per output token after the first, (completion − first
    /// token) / (output tokens − 1), over requests of two tokens or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<LatencyMs>,
    /// Models with a decoder: output tokens of completed requests per second (first arrival to
    /// last completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
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

#[cfg(test)]
mod tests;
