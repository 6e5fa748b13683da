//! Capacity at a latency bound: the highest Poisson rate at which a policy still meets a p99
//! latency or an SLA-violation bound — the figure operators size servers by and MLPerf's server
//! scenario reports. A bracket-and-bisect search over the rate: from the serial capacity, double
//! (or halve) until one rate meets the bound and another does not, then halve that bracket until
//! it is within the precision asked for. Each probe is the mean over seeds of runs through
//! the same runner as `compare`; a probe that rejects a request fails the bound. The search
//! assumes what a queue does — a higher rate never helps — and reports every probe, so a user
//! can see where noise made the curve bend.

use crate::error::{Error, Result};
use crate::metrics::Stats;
use crate::progress::Mode;
use crate::run::grid::{mean_stats, run_all, run_one, Keep};
use crate::run::{RunSpec, Testbed};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

mod figure;
pub use figure::write_figure;

/// What a rate must meet.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Bound {
    /// The p99 latency at most this many ms.
    P99Ms(f64),
    /// The share of requests over their SLA (rejected ones included) at most this fraction.
    Violations(f64),
    /// Models with a decoder: the p99 time to first token at most this many ms.
    TtftP99Ms(f64),
    /// Models with a decoder: the p99 time per output token at most this many ms.
    TpotP99Ms(f64),
    /// Models with a decoder, an LLM service's SLO: the p99 time to first token and the p99
    /// time per output token each within its bound (ms).
    TokenSlo {
        /// The p99 time to first token, at most.
        ttft_ms: f64,
        /// The p99 time per output token, at most.
        tpot_ms: f64,
    },
}

impl Bound {
    /// The measured value this bound reads from a probe's statistics.
    pub fn value(&self, st: &Stats) -> f64 {
        match self {
            Bound::P99Ms(_) => st.latency_ms.p99,
            Bound::Violations(_) => violation_share(st),
            // a run without the figure (no decoder) meets no bound on it
            Bound::TtftP99Ms(_) => st.ttft_ms.as_ref().map_or(f64::INFINITY, |t| t.p99),
            Bound::TpotP99Ms(_) => st.tpot_ms.as_ref().map_or(f64::INFINITY, |t| t.p99),
            // the tighter of the two, as a share of its bound (1: at the SLO)
            Bound::TokenSlo { ttft_ms, tpot_ms } => {
                let ttft = Bound::TtftP99Ms(*ttft_ms).value(st) / ttft_ms;
                let tpot = Bound::TpotP99Ms(*tpot_ms).value(st) / tpot_ms;
                ttft.max(tpot)
            }
        }
    }

    /// The figure it bounds, in words: `p99`, `p99 time to first token`, ….
    pub fn figure(&self) -> &'static str {
        match self {
            Bound::P99Ms(_) => "p99",
            Bound::Violations(_) => "share over the SLA",
            Bound::TtftP99Ms(_) => "p99 time to first token",
            Bound::TpotP99Ms(_) => "p99 time per output token",
            Bound::TokenSlo { .. } => "the tighter of p99 TTFT and TPOT,",
        }
    }

    /// The bounded figure of `st` in words with its unit: `12.345 ms`, `1.20%`, or for a token
    /// SLO the tighter figure's share of its bound (`0.989 of its bound`).
    pub fn shown(&self, st: &Stats) -> String {
        let v = self.value(st);
        match self {
            Bound::P99Ms(_) | Bound::TtftP99Ms(_) | Bound::TpotP99Ms(_) => format!("{v:.3} ms"),
            Bound::Violations(_) => format!("{:.2}%", 100.0 * v),
            Bound::TokenSlo { .. } => format!("{v:.3} of its bound"),
        }
    }

    /// Whether `st` meets the bound: within it, and nothing rejected.
    pub fn met_by(&self, st: &Stats) -> bool {
        let limit = match *self {
            Bound::P99Ms(x) | Bound::Violations(x) | Bound::TtftP99Ms(x) | Bound::TpotP99Ms(x) => x,
            Bound::TokenSlo { .. } => 1.0,
        };
        st.rejected == 0 && self.value(st) <= limit
    }

    /// True for a bound on time to first token or per output token (a model with a decoder).
    pub fn on_tokens(&self) -> bool {
        match self {
            Bound::TtftP99Ms(_) | Bound::TpotP99Ms(_) | Bound::TokenSlo { .. } => true,
            Bound::P99Ms(_) | Bound::Violations(_) => false,
        }
    }
}

/// The share of offered requests that missed their SLA or were rejected.
fn violation_share(st: &Stats) -> f64 {
    if st.requests == 0 {
        return 0.0;
    }
    let late = st.sla_violation_rate * st.completed as f64;
    (late + st.rejected as f64) / st.requests as f64
}

/// How the search runs.
#[derive(Clone, Copy, Debug)]
pub struct Search {
    /// The bound.
    pub bound: Bound,
    /// The bracket's relative width at which the search stops (0.02: within 2%).
    pub precision: f64,
    /// Seeds per probe (1..=seeds; the probe is their mean).
    pub seeds: u64,
    /// How far below the serial capacity the bracket may shrink, as a share of it
    /// ([`lowest_share`]).
    pub lowest_share: f64,
}

/// One rate tried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The offered rate (req/s).
    pub rate: f64,
    /// The mean over the seeds.
    pub stats: Stats,
    /// Whether it met the bound.
    pub ok: bool,
}

/// One policy's capacity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// The policy string.
    pub policy: String,
    /// The highest rate found to meet the bound (req/s); None when no bracket was found (then
    /// `note` says why).
    pub capacity_rps: Option<f64>,
    /// Why there is no capacity: no rate tried meets the bound, or every one does.
    pub note: Option<String>,
    /// The statistics at that rate.
    pub at: Stats,
    /// Every probe, in the order tried.
    pub probes: Vec<Probe>,
}

/// How far the bracket may grow past the serial capacity before the search gives up: no policy
/// serves more than `max_batch` inputs in the time of one, so a bound met far beyond that says
/// the runs are too short to fill a queue.
const OVER_SERIAL: f64 = 4.0;
/// How far below the serial capacity the bracket may shrink on a simulated device: ten halvings,
/// each probe as cheap as any other.
const UNDER_SERIAL: f64 = 1.0 / 1024.0;
/// … and on a real device, which serves every probe in real time: a probe of N requests at a
/// share s of the serial capacity lasts N / s single-input latencies, so four halvings (a probe
/// at most 16 × as long as one at the serial capacity) keep a policy that meets the bound at no
/// rate from searching for hours.
const UNDER_SERIAL_REAL: f64 = 1.0 / 16.0;

/// The finest precision a search takes (a share of the rate, 0.001%): a bracket narrower than
/// a double's resolution is never reached (1e-15 searched forever), and a probe's own noise is
/// far above this.
pub const MIN_PRECISION: f64 = 1e-5;

/// The lowest share of the serial capacity a search tries: on a simulated device (`virtual_time`)
/// or a real one.
pub fn lowest_share(virtual_time: bool) -> f64 {
    if virtual_time {
        UNDER_SERIAL
    } else {
        UNDER_SERIAL_REAL
    }
}

/// The end-to-end deadline a token bound sets for the SLA-aware policies, whose slack check
/// reads one deadline a request: the first token within the TTFT bound and every later one
/// within the TPOT bound, for a request of the predictor's lengths (the model's reference
/// encoder length, `dec_timesteps` decoder steps): `TTFT + TPOT · (T − 1)` ms for its `T`
/// output tokens. A bound given alone takes the other term from that request served alone (its
/// first token's time, or one decoder step's). None: not a token bound, or a model without a
/// decoder.
pub fn token_sla_ms(bench: &Testbed, bound: Bound) -> Option<f64> {
    let (ttft, tpot) = match bound {
        Bound::TtftP99Ms(x) => (Some(x), None),
        Bound::TpotP99Ms(x) => (None, Some(x)),
        Bound::TokenSlo { ttft_ms, tpot_ms } => (Some(ttft_ms), Some(tpot_ms)),
        Bound::P99Ms(_) | Bound::Violations(_) => return None,
    };
    let m = &bench.model;
    m.parts.first()?.seq.as_ref()?;
    let p = &bench.predictor;
    let enc = m.ref_lengths_of(0).enc;
    let len = p.predicted_in(0, enc, 0);
    let tokens = m.tokens_of(0, len).max(1);
    let ms = |dec| {
        p.single_input_of(0, crate::graph::Lengths { enc, dec })
            .as_ms()
    };
    let total = ms(len.dec);
    // one decoder step alone: the whole request less the same request one step shorter
    let step = if len.dec >= 2 {
        total - ms(len.dec - 1)
    } else {
        0.0
    };
    let later = f64::from(tokens - 1);
    let first = (total - later * step).max(0.0);
    Some(ttft.unwrap_or(first) + tpot.unwrap_or(step) * later)
}

/// Refuses a bound no rate can meet: a p99 or an SLA below the single-input latency, or a
/// violation share outside [0, 1).
pub fn check(bound: Bound, single_ms: f64, sla_ms: f64) -> Result<()> {
    match bound {
        Bound::P99Ms(x) if !(x.is_finite() && x > single_ms) => Err(Error::invalid(
            "p99 bound",
            format!(
                "{x} ms is not above the single-input latency ({single_ms:.3} ms): no rate meets it"
            ),
        )),
        Bound::Violations(v) if !(0.0..1.0).contains(&v) => Err(Error::invalid(
            "violation bound",
            format!("must be in [0, 100) %, got {}", 100.0 * v),
        )),
        Bound::Violations(_) if sla_ms <= single_ms => Err(Error::invalid(
            "SLA",
            format!(
                "{sla_ms} ms is not above the single-input latency ({single_ms:.3} ms): every request violates it"
            ),
        )),
        Bound::TtftP99Ms(x)
        | Bound::TpotP99Ms(x)
        | Bound::TokenSlo { ttft_ms: x, .. }
        | Bound::TokenSlo { tpot_ms: x, .. }
            if !(x.is_finite() && x > 0.0) =>
        {
            Err(Error::invalid(
                "token bound",
                format!("must be a positive number of ms, got {x}"),
            ))
        }
        Bound::P99Ms(_)
        | Bound::Violations(_)
        | Bound::TtftP99Ms(_)
        | Bound::TpotP99Ms(_)
        | Bound::TokenSlo { .. } => Ok(()),
    }
}

/// The search for one policy: `probe(rate)` gives the mean statistics at `rate`.
pub fn search_one(
    policy: &str,
    serial_rps: f64,
    max_batch: u32,
    how: &Search,
    mut probe: impl FnMut(f64) -> Result<Stats>,
) -> Result<Capacity> {
    if !(how.precision >= MIN_PRECISION && how.precision < 1.0) {
        return Err(Error::invalid(
            "search precision",
            format!(
                "must be in [{}, 100) %, got {}",
                100.0 * MIN_PRECISION,
                100.0 * how.precision
            ),
        ));
    }
    let mut probes: Vec<Probe> = Vec::new();
    let mut try_rate = |rate: f64, probes: &mut Vec<Probe>| -> Result<bool> {
        let stats = probe(rate)?;
        let ok = how.bound.met_by(&stats);
        probes.push(Probe { rate, stats, ok });
        Ok(ok)
    };
    let top = serial_rps * f64::from(max_batch) * OVER_SERIAL;
    if !(how.lowest_share > 0.0 && how.lowest_share < 1.0) {
        return Err(Error::invalid(
            "search's lowest rate",
            format!(
                "must be in (0, 1) of the serial capacity, got {}",
                how.lowest_share
            ),
        ));
    }
    let bottom = serial_rps * how.lowest_share;
    let none = |note: String, probes: Vec<Probe>| Capacity {
        policy: policy.to_string(),
        capacity_rps: None,
        note: Some(note),
        at: Stats::default(),
        probes,
    };
    // bracket: lo meets the bound, hi does not
    let (mut lo, mut hi) = if try_rate(serial_rps, &mut probes)? {
        let mut lo = serial_rps;
        loop {
            let r = lo * 2.0;
            if r > top {
                let why = match how.bound {
                    Bound::TpotP99Ms(_) | Bound::TokenSlo { .. } => "the runs are too short to fill a queue (raise --requests), the bound is too loose, or the policy never lets newcomers slow the requests it is decoding (then the time per output token does not grow with the queue)",
                    Bound::P99Ms(_) | Bound::Violations(_) | Bound::TtftP99Ms(_) => "the runs are too short to fill a queue (raise --requests) or the bound is too loose",
                };
                let note = format!(
                    "meets the bound at every rate tried, up to {lo:.1} req/s ({max_batch} × {OVER_SERIAL} × the serial capacity): {why}"
                );
                return Ok(none(note, probes));
            }
            if try_rate(r, &mut probes)? {
                lo = r;
            } else {
                break (lo, r);
            }
        }
    } else {
        let mut hi = serial_rps;
        loop {
            let r = hi / 2.0;
            if r < bottom {
                let note = format!(
                    "meets the bound at no rate tried, down to {hi:.4} req/s (1/{:.0} of the serial capacity)",
                    1.0 / how.lowest_share
                );
                return Ok(none(note, probes));
            }
            if try_rate(r, &mut probes)? {
                break (r, hi);
            }
            hi = r;
        }
    };
    while hi > lo * (1.0 + how.precision) {
        let mid = 0.5 * (lo + hi);
        if try_rate(mid, &mut probes)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let at = probes
        .iter()
        .rev()
        .find(|p| p.rate == lo)
        .map(|p| p.stats.clone())
        .unwrap_or_default();
    Ok(Capacity {
        policy: policy.to_string(),
        capacity_rps: Some(lo),
        note: None,
        at,
        probes,
    })
}

/// One policy's search in a line: its capacity (or why there is none) and its probes.
fn found(c: &Capacity, bound: Bound) -> String {
    let at = match (c.capacity_rps, &c.note) {
        (Some(r), _) => format!("{r:.1} req/s ({} {})", bound.figure(), bound.shown(&c.at)),
        (None, Some(why)) => format!("none: {why}"),
        (None, None) => "none".to_string(),
    };
    format!("capacity: {} {at}, {} probes", c.policy, c.probes.len())
}

/// Every policy of `templates` (their rates are ignored; seeds 1..=`how.seeds`) searched on
/// `bench`: on the NPU model or a table the policies in parallel, each probe's seeds too; on a
/// real device one run after another. Progress counts finished policies.
pub fn search_all(
    bench: &Testbed,
    templates: &[RunSpec],
    how: &Search,
    progress: Mode,
) -> Result<Vec<Capacity>> {
    search_all_as("capacity", bench, templates, how, progress)
}

/// [`search_all`], its progress shown under `label` (`reproduce` names the configuration,
/// model and bound).
pub fn search_all_as(
    label: &str,
    bench: &Testbed,
    templates: &[RunSpec],
    how: &Search,
    progress: Mode,
) -> Result<Vec<Capacity>> {
    let serial = bench.serial_capacity();
    let shown = progress.start(label, templates.len() as u64, "policies");
    let seeded = |t: &RunSpec, rate: f64| -> Vec<RunSpec> {
        (1..=how.seeds)
            .map(|seed| RunSpec {
                rate,
                seed,
                ..t.clone()
            })
            .collect()
    };
    let out = if bench.is_virtual() {
        templates
            .par_iter()
            .map(|t| {
                // N replicas start from N times one server's serial capacity
                let start = serial * t.replicas.count() as f64;
                let c = search_one(&t.policy.text, start, t.max_batch.get(), how, |rate| {
                    let runs = seeded(t, rate)
                        .par_iter()
                        .map(|c| run_one(bench, c, Keep::default()))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(mean_stats(
                        &runs.iter().map(|r| &r.stats).collect::<Vec<_>>(),
                    ))
                });
                shown.inc(1);
                c
            })
            .collect::<Result<Vec<_>>>()
    } else {
        let mut all = Vec::with_capacity(templates.len());
        for t in templates {
            let c = search_one(&t.policy.text, serial, t.max_batch.get(), how, |rate| {
                shown.set_message(format!("{} at {rate:.1} req/s", t.policy.text));
                let cfgs = seeded(t, rate);
                let runs = run_all(bench, &cfgs, |_| Keep::default(), Mode::Off, "")?;
                Ok(mean_stats(
                    &runs.iter().map(|r| &r.stats).collect::<Vec<_>>(),
                ))
            })?;
            shown.inc(1);
            // a real device's search takes minutes a policy: each result is said as it comes,
            // so a search cut off (a time limit) keeps what it found
            shown.note(&found(&c, how.bound));
            all.push(c);
        }
        Ok(all)
    };
    shown.finish();
    out
}

/// The probes a search takes at most, for a time estimate: doubling or halving from the serial
/// capacity to the bracket (at most `log2(max_batch × 4)` up), then halving the bracket to the
/// precision.
pub fn probes_at_most(max_batch: u32, precision: f64) -> u32 {
    let up = (f64::from(max_batch) * OVER_SERIAL).log2().ceil() as u32 + 1;
    let bisect = (1.0 / precision).log2().ceil() as u32;
    up + bisect
}

/// The time a search takes at most on a real device, in units of one probe at the serial
/// capacity (a probe's time is inversely proportional to its rate): the longer of the way up
/// (every probe at or above the serial capacity) and the way down to `lowest_share` of it, whose
/// halvings and bisection probes each last up to 1 / `lowest_share` units.
pub fn probe_time_at_most(max_batch: u32, precision: f64, lowest_share: f64) -> f64 {
    let up = f64::from(probes_at_most(max_batch, precision));
    let halvings = (1.0 / lowest_share).log2().ceil() as i32;
    let bisect = (1.0 / precision).log2().ceil();
    let down = 1.0 + (1..=halvings).map(|k| 2f64.powi(k)).sum::<f64>() + bisect / lowest_share;
    up.max(down)
}

#[cfg(test)]
pub(crate) mod tests;
