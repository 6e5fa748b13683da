//! What a run keeps as requests leave the server: per model and overall, a latency HDR
//! histogram (µs), the exact latency sum and maximum, SLA violations, rejections by reason and
//! the span from the first arrival to the last completion — a fixed size whatever the run's
//! length. Anything per request is kept only on request ([`KeepRecords`]): the sorted latencies
//! (`reproduce`'s CDFs), the records themselves (tests), or one CSV line per request streamed to
//! a file (`--keep-records`). The engine's counters live here too, and [`Recorder::stats`]
//! turns both into a [`Stats`].

use super::{ClassStats, LatencyMs, Stats};
use crate::error::{Error, Result};
use crate::graph::Class;
use crate::runtime::{Rejection, Request};
use crate::time::Nanos;
use hdrhistogram::Histogram;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// Counters of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Node executions.
    pub executions: u64,
    /// Σ of sub-batch sizes over executions.
    pub batch_sum: u64,
    /// Admissions onto a non-empty BatchTable (the active sub-batch was preempted).
    pub preemptions: u64,
    /// Sub-batch merges.
    pub merges: u64,
    /// Sub-batch splits (members diverging at an encoder end).
    pub splits: u64,
    /// Executions whose members stood at different timesteps of the node (cell batching).
    pub cross_step: u64,
    /// Busy device time.
    pub busy: Nanos,
    /// The same by node class (static, encoder, decoder): where the device time went.
    pub by_class: [ClassCounters; 3],
}

/// Executions, batch sizes and device time at the nodes of one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounters {
    /// Node executions.
    pub executions: u64,
    /// Σ of sub-batch sizes over them.
    pub batch_sum: u64,
    /// Device time.
    pub busy: Nanos,
}

impl Counters {
    /// Counts `executions` runs of a node of `class` at sub-batch size `batch`, taking `time`.
    pub(crate) fn record(&mut self, class: Class, executions: u64, batch: usize, time: Nanos) {
        self.executions += executions;
        self.batch_sum += executions * batch as u64;
        self.busy += time;
        let k = &mut self.by_class[class as usize];
        k.executions += executions;
        k.batch_sum += executions * batch as u64;
        k.busy += time;
    }

    /// Adds another server's counters (replicas behind a router: the whole run's).
    pub(crate) fn absorb(&mut self, o: &Counters) {
        // every field named, so that a new one cannot be forgotten here
        let Counters {
            executions,
            batch_sum,
            preemptions,
            merges,
            splits,
            cross_step,
            busy,
            by_class,
        } = o;
        self.executions += executions;
        self.batch_sum += batch_sum;
        self.preemptions += preemptions;
        self.merges += merges;
        self.splits += splits;
        self.cross_step += cross_step;
        self.busy += *busy;
        for (k, ok) in self.by_class.iter_mut().zip(by_class) {
            let ClassCounters {
                executions,
                batch_sum,
                busy,
            } = ok;
            k.executions += executions;
            k.batch_sum += batch_sum;
            k.busy += *busy;
        }
    }
}

/// What to keep per request besides the fixed-size summary (all off: memory independent of the
/// run's length).
#[derive(Clone, Default)]
pub struct KeepRecords {
    /// Every completed request's latency (ms), sorted at the end.
    pub latencies: bool,
    /// Every request's record, by id (tests; memory grows with the run).
    pub requests: bool,
    /// One CSV line per request, written as it leaves ([`CSV_HEADER`]).
    pub csv: Option<Arc<Mutex<dyn Write + Send>>>,
}

impl std::fmt::Debug for KeepRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KeepRecords {{ latencies: {}, requests: {}, csv: {} }}",
            self.latencies,
            self.requests,
            self.csv.is_some()
        )
    }
}

/// The columns of `--keep-records` (times in ms from the start of the run; `outcome` is
/// `completed`, `rejected:queue_full` or `rejected:shed`).
pub const CSV_HEADER: &str =
    "id,model,arrival_ms,first_issue_ms,completion_ms,latency_ms,deadline_ms,enc,dec,outcome";

/// A distribution of durations: a histogram (µs, 3 significant digits), the exact sum and
/// maximum, and how many.
#[derive(Clone, Debug)]
struct Dist {
    hist: Histogram<u64>,
    sum: u128,
    max: Nanos,
    n: u64,
}

impl Dist {
    fn new() -> Result<Dist> {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
            .map_err(|e| Error::Internal(format!("histogram: {e}")))?;
        hist.auto(true);
        Ok(Dist {
            hist,
            sum: 0,
            max: Nanos::ZERO,
            n: 0,
        })
    }

    fn record(&mut self, d: Nanos) -> Result<()> {
        self.n += 1;
        self.sum += u128::from(d.0);
        self.max = self.max.max(d);
        self.hist
            .record(d.0.div_ceil(1000).max(1))
            .map_err(|e| Error::Internal(format!("histogram: {e}")))
    }

    fn absorb(&mut self, o: &Dist) -> Result<()> {
        let Dist { hist, sum, max, n } = o;
        self.hist
            .add(hist)
            .map_err(|e| Error::Internal(format!("histogram: {e}")))?;
        self.sum += sum;
        self.max = self.max.max(*max);
        self.n += n;
        Ok(())
    }

    /// Mean, percentiles (the histogram's, never above the exact maximum) and maximum, in ms;
    /// None when nothing was recorded.
    fn summary(&self) -> Option<LatencyMs> {
        if self.n == 0 {
            return None;
        }
        let max_ms = self.max.as_ms();
        let q = |p: f64| (self.hist.value_at_quantile(p) as f64 / 1e3).min(max_ms);
        Some(LatencyMs {
            mean: self.sum as f64 / 1e6 / self.n as f64,
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            max: max_ms,
        })
    }
}

/// The summary of one model's requests (or all of them).
#[derive(Clone, Debug)]
struct Tally {
    offered: u64,
    completed: u64,
    rejected_queue_full: u64,
    rejected_shed: u64,
    rejected_abandoned: u64,
    rejected_cancelled: u64,
    rejected_late: u64,
    rejected_not_admitted: u64,
    /// Completed within their deadline.
    good: u64,
    /// Latencies in µs (3 significant digits; grows its range as needed).
    hist: Histogram<u64>,
    sum: u128,
    max: Nanos,
    violations: u64,
    first_arrival: Option<Nanos>,
    last_completion: Nanos,
    /// Models with a decoder: time to first token, time per output token after it, and the
    /// output tokens of completed requests.
    ttft: Dist,
    tpot: Dist,
    tokens: u64,
}

impl Tally {
    fn new() -> Result<Tally> {
        let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
            .map_err(|e| Error::Internal(format!("histogram: {e}")))?;
        hist.auto(true);
        Ok(Tally {
            offered: 0,
            completed: 0,
            rejected_queue_full: 0,
            rejected_shed: 0,
            rejected_abandoned: 0,
            rejected_cancelled: 0,
            rejected_late: 0,
            rejected_not_admitted: 0,
            good: 0,
            hist,
            sum: 0,
            max: Nanos::ZERO,
            violations: 0,
            first_arrival: None,
            last_completion: Nanos::ZERO,
            ttft: Dist::new()?,
            tpot: Dist::new()?,
            tokens: 0,
        })
    }

    fn arrive(&mut self, q: &Request) {
        self.offered += 1;
        self.first_arrival = Some(self.first_arrival.map_or(q.arrival, |f| f.min(q.arrival)));
    }

    fn complete(&mut self, q: &Request, at: Nanos) -> Result<()> {
        let lat = at - q.arrival;
        self.completed += 1;
        self.sum += u128::from(lat.0);
        self.max = self.max.max(lat);
        self.last_completion = self.last_completion.max(at);
        if at > q.deadline {
            self.violations += 1;
        } else {
            self.good += 1;
        }
        if let Some(first) = q.first_token {
            self.ttft.record(first - q.arrival)?;
            self.tokens += u64::from(q.tokens);
            if q.tokens >= 2 {
                self.tpot
                    .record(Nanos((at - first).0 / u64::from(q.tokens - 1)))?;
            }
        }
        self.hist
            .record(lat.0.div_ceil(1000).max(1))
            .map_err(|e| Error::Internal(format!("histogram: {e}")))
    }

    /// Adds another server's tally of the same kind of requests.
    fn absorb(&mut self, o: &Tally) -> Result<()> {
        // every field named, so that a new one cannot be forgotten here
        let Tally {
            offered,
            completed,
            rejected_queue_full,
            rejected_shed,
            rejected_abandoned,
            rejected_cancelled,
            rejected_late,
            rejected_not_admitted,
            good,
            hist,
            sum,
            max,
            violations,
            first_arrival,
            last_completion,
            ttft,
            tpot,
            tokens,
        } = o;
        self.ttft.absorb(ttft)?;
        self.tpot.absorb(tpot)?;
        self.tokens += tokens;
        self.offered += offered;
        self.completed += completed;
        self.rejected_queue_full += rejected_queue_full;
        self.rejected_shed += rejected_shed;
        self.rejected_abandoned += rejected_abandoned;
        self.rejected_cancelled += rejected_cancelled;
        self.rejected_late += rejected_late;
        self.rejected_not_admitted += rejected_not_admitted;
        self.good += good;
        self.hist
            .add(hist)
            .map_err(|e| Error::Internal(format!("histogram: {e}")))?;
        self.sum += sum;
        self.max = self.max.max(*max);
        self.violations += violations;
        self.first_arrival = match (self.first_arrival, *first_arrival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_completion = self.last_completion.max(*last_completion);
        Ok(())
    }

    fn reject(&mut self, why: Rejection) {
        match why {
            Rejection::QueueFull => self.rejected_queue_full += 1,
            Rejection::Shed => self.rejected_shed += 1,
            Rejection::Abandoned => self.rejected_abandoned += 1,
            Rejection::Cancelled => self.rejected_cancelled += 1,
            Rejection::Late => self.rejected_late += 1,
            Rejection::NotAdmitted(_) => self.rejected_not_admitted += 1,
        }
    }

    /// The summary, with the engine's whole-run counters.
    fn stats(&self, c: &Counters) -> Stats {
        let completed = self.completed;
        let max_ms = self.max.as_ms();
        // a percentile is the histogram's rounded value, never above the exact maximum
        let q = |p: f64| (self.hist.value_at_quantile(p) as f64 / 1e3).min(max_ms);
        let span = self
            .last_completion
            .saturating_sub(self.first_arrival.unwrap_or_default())
            .as_secs();
        let per = |x: f64, n: u64| if n > 0 { x / n as f64 } else { 0.0 };
        Stats {
            requests: self.offered,
            completed,
            rejected: self.rejected_queue_full
                + self.rejected_shed
                + self.rejected_abandoned
                + self.rejected_cancelled
                + self.rejected_late
                + self.rejected_not_admitted,
            rejected_queue_full: self.rejected_queue_full,
            rejected_shed: self.rejected_shed,
            rejected_abandoned: self.rejected_abandoned,
            rejected_cancelled: self.rejected_cancelled,
            rejected_late: self.rejected_late,
            rejected_not_admitted: self.rejected_not_admitted,
            goodput_rps: if span > 0.0 {
                self.good as f64 / span
            } else {
                0.0
            },
            latency_ms: LatencyMs {
                mean: per(self.sum as f64 / 1e6, completed),
                p50: q(0.50),
                p90: q(0.90),
                p95: q(0.95),
                p99: q(0.99),
                max: max_ms,
            },
            throughput_rps: if span > 0.0 {
                completed as f64 / span
            } else {
                0.0
            },
            sla_violation_rate: per(self.violations as f64, completed),
            mean_batch_size: per(c.batch_sum as f64, c.executions),
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
            ttft_ms: self.ttft.summary(),
            tpot_ms: self.tpot.summary(),
            tokens_per_s: (self.ttft.n > 0 && span > 0.0).then(|| self.tokens as f64 / span),
        }
    }
}

/// Everything a run keeps of its requests, filled as they arrive and leave.
#[derive(Clone)]
pub struct Recorder {
    all: Tally,
    /// Per co-located model (empty for one model).
    parts: Vec<Tally>,
    /// Per SLA class (empty without classes).
    classes: Vec<Tally>,
    keep: KeepRecords,
    latencies: Vec<f64>,
    requests: Vec<Request>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Recorder({} requests)", self.all.offered)
    }
}

impl Recorder {
    /// A recorder for a run of `parts` co-located models and `classes` SLA classes (1: one
    /// model, no classes).
    pub fn new((parts, classes): (usize, usize), keep: KeepRecords) -> Result<Self> {
        let tallies = |n: usize| -> Result<Vec<Tally>> {
            if n > 1 {
                (0..n).map(|_| Tally::new()).collect()
            } else {
                Ok(Vec::new())
            }
        };
        let (parts, classes) = (tallies(parts)?, tallies(classes)?);
        if let Some(w) = &keep.csv {
            writeln!(lock(w)?, "{CSV_HEADER}").map_err(write_err)?;
        }
        Ok(Recorder {
            all: Tally::new()?,
            parts,
            classes,
            keep,
            latencies: Vec::new(),
            requests: Vec::new(),
        })
    }

    /// A request arrived (it is offered, whatever happens to it next).
    pub(crate) fn arrive(&mut self, q: &Request) {
        self.all.arrive(q);
        if let Some(t) = self.parts.get_mut(usize::from(q.part)) {
            t.arrive(q);
        }
        if let Some(t) = self.classes.get_mut(usize::from(q.class)) {
            t.arrive(q);
        }
    }

    /// A request completed (its `completion` set).
    pub(crate) fn complete(&mut self, q: Request) -> Result<()> {
        let at = q
            .completion
            .ok_or_else(|| Error::Internal(format!("request {} has no completion", q.id.0)))?;
        self.all.complete(&q, at)?;
        if let Some(t) = self.parts.get_mut(usize::from(q.part)) {
            t.complete(&q, at)?;
        }
        if let Some(t) = self.classes.get_mut(usize::from(q.class)) {
            t.complete(&q, at)?;
        }
        if self.keep.latencies {
            self.latencies.push((at - q.arrival).as_ms());
        }
        self.write_csv(&q, "completed")?;
        if self.keep.requests {
            self.requests.push(q);
        }
        Ok(())
    }

    /// A request was turned away.
    pub(crate) fn reject(&mut self, q: Request, why: Rejection) -> Result<()> {
        self.all.reject(why);
        if let Some(t) = self.parts.get_mut(usize::from(q.part)) {
            t.reject(why);
        }
        if let Some(t) = self.classes.get_mut(usize::from(q.class)) {
            t.reject(why);
        }
        let outcome = match why {
            Rejection::QueueFull => "rejected:queue_full",
            Rejection::Shed => "rejected:shed",
            Rejection::Abandoned => "rejected:abandoned",
            Rejection::Cancelled => "rejected:cancelled",
            Rejection::Late => "rejected:late",
            Rejection::NotAdmitted(_) => "rejected:not_admitted",
        };
        self.write_csv(&q, outcome)?;
        if self.keep.requests {
            self.requests.push(q);
        }
        Ok(())
    }

    fn write_csv(&self, q: &Request, outcome: &str) -> Result<()> {
        let Some(w) = &self.keep.csv else {
            return Ok(());
        };
        let ms = |t: Option<Nanos>| t.map_or(String::new(), |t| format!("{:.6}", t.as_ms()));
        writeln!(
            lock(w)?,
            "{},{},{},{},{},{},{},{},{},{outcome}",
            q.id.0,
            q.part,
            ms(Some(q.arrival)),
            ms(q.first_issue),
            ms(q.completion),
            ms(q.latency()),
            ms(Some(q.deadline)),
            q.len.enc,
            q.len.dec,
        )
        .map_err(write_err)
    }

    /// Adds another server's record of the same run (replicas behind a router): every tally,
    /// and the latencies and requests kept.
    pub(crate) fn absorb(&mut self, o: Recorder) -> Result<()> {
        // every field named; `keep` is the same run's
        let Recorder {
            all,
            parts,
            classes,
            keep: _,
            mut latencies,
            mut requests,
        } = o;
        self.all.absorb(&all)?;
        for (t, ot) in self.parts.iter_mut().zip(&parts) {
            t.absorb(ot)?;
        }
        for (t, ot) in self.classes.iter_mut().zip(&classes) {
            t.absorb(ot)?;
        }
        self.latencies.append(&mut latencies);
        self.requests.append(&mut requests);
        Ok(())
    }

    /// The run's statistics, with the engine's counters.
    pub fn stats(&self, c: &Counters) -> Stats {
        self.all.stats(c)
    }

    /// Each co-located model's statistics (empty for one model); the counters are whole-run
    /// figures, copied as they are.
    pub fn part_stats(&self, c: &Counters) -> Vec<Stats> {
        self.parts.iter().map(|t| t.stats(c)).collect()
    }

    /// Each SLA class's statistics (empty without classes), counters as in
    /// [`Recorder::part_stats`].
    pub fn class_stats(&self, c: &Counters) -> Vec<Stats> {
        self.classes.iter().map(|t| t.stats(c)).collect()
    }

    /// Each SLA class's latency (ms) at each of `quantiles` (empty without classes; zeros for
    /// a class that completed nothing): the classes' CDFs from their histograms.
    pub fn class_quantiles(&self, quantiles: &[f64]) -> Vec<Vec<f64>> {
        self.classes
            .iter()
            .map(|t| {
                let max_ms = t.max.as_ms();
                quantiles
                    .iter()
                    .map(|&p| (t.hist.value_at_quantile(p) as f64 / 1e3).min(max_ms))
                    .collect()
            })
            .collect()
    }

    /// The latency histogram (µs) of the completed requests.
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.all.hist
    }

    /// The completed requests' latencies (ms), ascending, when kept.
    pub fn take_latencies(&mut self) -> Vec<f64> {
        let mut v = std::mem::take(&mut self.latencies);
        v.sort_by(f64::total_cmp);
        v
    }

    /// Every request's record by id, when kept.
    pub fn take_requests(&mut self) -> Vec<Request> {
        let mut v = std::mem::take(&mut self.requests);
        v.sort_by_key(|q| q.id);
        v
    }

    /// Flushes the CSV records.
    pub(crate) fn finish(&mut self) -> Result<()> {
        if let Some(w) = &self.keep.csv {
            lock(w)?.flush().map_err(write_err)?;
        }
        Ok(())
    }
}

fn write_err(e: std::io::Error) -> Error {
    Error::io("--keep-records", e)
}

fn lock<'a>(
    w: &'a Mutex<dyn Write + Send + 'static>,
) -> Result<std::sync::MutexGuard<'a, dyn Write + Send + 'static>> {
    w.lock()
        .map_err(|_| Error::Internal("the request records' writer was poisoned".into()))
}
