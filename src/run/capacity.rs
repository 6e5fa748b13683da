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

/// The lowest share of the serial capacity a search tries: on a simulated device (`virtual_time`)
/// or a real one.
pub fn lowest_share(virtual_time: bool) -> f64 {
    if virtual_time {
        UNDER_SERIAL
    } else {
        UNDER_SERIAL_REAL
    }
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
    if !(how.precision > 0.0 && how.precision < 1.0) {
        return Err(Error::invalid(
            "search precision",
            format!("must be in (0, 100) %, got {}", 100.0 * how.precision),
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
    let serial = bench.serial_capacity();
    let shown = progress.start("capacity", templates.len() as u64, "policies");
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

/// Draws `caps` as latency (or violation share) against throughput: one line per policy through
/// its probes in rate order, each capacity marked, the bound dashed (SVG at `path`).
pub fn write_figure(
    path: &std::path::Path,
    title: &str,
    caps: &[Capacity],
    bound: Bound,
) -> Result<()> {
    crate::plot::Figure {
        panels: vec![panel(title, caps, bound)],
        shared_legend: true,
    }
    .write_svg(path, 720, 460)
}

/// The figure's one panel: each policy's probes in rate order as (throughput, bounded figure),
/// its capacity marked, and the bound as a dashed line across them.
fn panel(title: &str, caps: &[Capacity], bound: Bound) -> crate::plot::Panel {
    use crate::plot::{Mark, Panel, Series};
    let y_of = |st: &Stats| match bound {
        Bound::P99Ms(_) | Bound::TtftP99Ms(_) | Bound::TpotP99Ms(_) | Bound::TokenSlo { .. } => {
            bound.value(st)
        }
        Bound::Violations(_) => 100.0 * violation_share(st),
    };
    let mut panel = Panel {
        title: title.to_string(),
        x_label: "throughput (req/s)".into(),
        y_label: match bound {
            Bound::P99Ms(_) => "p99 latency (ms)".into(),
            Bound::Violations(_) => "requests over their SLA (%)".into(),
            Bound::TtftP99Ms(_) => "p99 time to first token (ms)".into(),
            Bound::TpotP99Ms(_) => "p99 time per output token (ms)".into(),
            Bound::TokenSlo { .. } => "p99 TTFT or TPOT over its bound (the larger)".into(),
        },
        log_y: !matches!(bound, Bound::Violations(_)),
        ..Panel::default()
    };
    let mut max_x: f64 = 0.0;
    for (i, c) in caps.iter().enumerate() {
        let mut probes: Vec<&Probe> = c.probes.iter().collect();
        probes.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        let points: Vec<(f64, f64)> = probes
            .iter()
            .map(|p| (p.stats.throughput_rps, y_of(&p.stats).max(1e-3)))
            .collect();
        max_x = points.iter().fold(max_x, |m, p| m.max(p.0));
        panel.series.push(Series {
            name: c.policy.clone(),
            points,
            markers: true,
            ..Series::default()
        });
        if let Some(cap) = c.capacity_rps {
            let at = (c.at.throughput_rps, y_of(&c.at).max(1e-3));
            panel.marks.push(Mark {
                at,
                text_y: at.1,
                label: format!("{cap:.0}/s"),
                series: i,
            });
        }
    }
    let limit = match bound {
        Bound::P99Ms(x) | Bound::TtftP99Ms(x) | Bound::TpotP99Ms(x) => x,
        Bound::Violations(v) => 100.0 * v,
        Bound::TokenSlo { .. } => 1.0,
    };
    panel.series.push(Series {
        name: "the bound".into(),
        points: vec![(0.0, limit), (max_x, limit)],
        dashed: true,
        ..Series::default()
    });
    panel
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
mod tests {
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

    fn stats(p99: f64, viol: f64, rejected: u64) -> Stats {
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
    fn the_figure_draws_each_policys_probes_in_rate_order_its_capacity_and_the_bound() {
        let probe = |rate: f64, p99: f64, viol: f64, ok| Probe {
            rate,
            stats: Stats {
                throughput_rps: rate * 0.9,
                ..stats(p99, viol, 0)
            },
            ok,
        };
        let lazy = Capacity {
            policy: "lazy".into(),
            capacity_rps: Some(150.0),
            note: None,
            at: probe(150.0, 8.0, 0.01, true).stats,
            // in the order tried: 100, 200, 150
            probes: vec![
                probe(100.0, 5.0, 0.0, true),
                probe(200.0, 50.0, 0.2, false),
                probe(150.0, 8.0, 0.01, true),
            ],
        };
        let none = Capacity {
            policy: "serial".into(),
            capacity_rps: None,
            note: Some("meets the bound at no rate tried".into()),
            at: Stats::default(),
            probes: vec![probe(100.0, 0.0, 0.5, false)],
        };
        let caps = [lazy, none];
        let p = panel("ResNet-50 at p99 ≤ 10 ms", &caps, Bound::P99Ms(10.0));
        assert_eq!(p.title, "ResNet-50 at p99 ≤ 10 ms");
        assert_eq!(p.x_label, "throughput (req/s)");
        assert_eq!(p.y_label, "p99 latency (ms)");
        assert!(p.log_y);
        let names: Vec<&str> = p.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["lazy", "serial", "the bound"]);
        assert!(p.series[0].markers && !p.series[0].dashed);
        // sorted by rate; a zero p99 is drawn at 1e-3 on the log axis
        assert_eq!(
            p.series[0].points,
            [(90.0, 5.0), (135.0, 8.0), (180.0, 50.0)]
        );
        assert_eq!(p.series[1].points, [(90.0, 1e-3)]);
        let bound = &p.series[2];
        assert!(bound.dashed && !bound.markers);
        assert_eq!(bound.points, [(0.0, 10.0), (180.0, 10.0)]);
        // one mark, on the policy with a capacity
        assert_eq!(p.marks.len(), 1);
        let m = &p.marks[0];
        assert_eq!(
            (m.at, m.text_y, m.label.as_str(), m.series),
            ((135.0, 8.0), 8.0, "150/s", 0)
        );

        // the share over the SLA is drawn in %, on a linear axis
        let p = panel("t", &caps, Bound::Violations(0.05));
        assert_eq!(p.y_label, "requests over their SLA (%)");
        assert!(!p.log_y);
        assert_eq!(p.series[0].points[2], (180.0, 20.0));
        assert_eq!(p.series[2].points, [(0.0, 5.0), (180.0, 5.0)]);
        for (b, label) in [
            (Bound::TtftP99Ms(1.0), "p99 time to first token (ms)"),
            (Bound::TpotP99Ms(1.0), "p99 time per output token (ms)"),
            (
                Bound::TokenSlo {
                    ttft_ms: 1.0,
                    tpot_ms: 1.0,
                },
                "p99 TTFT or TPOT over its bound (the larger)",
            ),
        ] {
            let p = panel("t", &caps, b);
            assert_eq!(p.y_label, label);
            assert!(p.log_y);
            assert_eq!(p.series[2].points[0], (0.0, 1.0));
        }
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
}
