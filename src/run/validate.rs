//! Holding the simulator against real runs (`lazybatch validate`): the same arrivals — the same
//! instants, lengths and classes, drawn once from the run's seed — served twice, for real on a
//! device in wall time and on that device's latency table in virtual time
//! ([`crate::device::table`]), and each measured statistic beside its prediction with their
//! relative error. The pairing is checked, not assumed: both runs keep every request's record,
//! and a pair whose requests differ in number, lengths or class, or whose arrivals differ by
//! more than the wall clock's delivery allows ([`MAX_DELIVERY_LAG`]), is refused.

use super::drive::Arrivals;
use super::{RunSpec, Testbed};
use crate::error::{Error, Result};
use crate::metrics::{KeepRecords, Stats};
use crate::progress::Progress;
use crate::runtime::Request;
use crate::time::Nanos;
use crate::traffic::{Arrival, Traffic};

/// The most a wall-time run may deliver a request after its scheduled instant and still count
/// as serving the same arrivals (the arrival thread sleeps to each instant; on a loaded 2-core
/// machine a wake-up can be late by milliseconds).
pub const MAX_DELIVERY_LAG: Nanos = Nanos(50_000_000);

/// One configuration served for real and on the table.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The real device's statistics.
    pub measured: Stats,
    /// The table's.
    pub predicted: Stats,
    /// How late the wall-time run delivered its requests: the mean and largest lag behind the
    /// scheduled instants.
    pub lag_mean: Nanos,
    /// The largest lag.
    pub lag_max: Nanos,
    /// With `repeat`: the real device's statistics from serving the same arrivals a second
    /// time, what the measurement itself spreads by (its own repeatability).
    pub again: Option<Stats>,
}

/// Serves `cfg` on `real` (wall time) and on `table` (virtual time) with the same arrivals, and
/// with `repeat` serves them on `real` a second time; `shown` follows the real runs' delivered
/// traffic from `base` seconds on ([`crate::run::grid::delivered`]).
pub fn pair(
    real: &mut Testbed,
    table: &Testbed,
    cfg: &RunSpec,
    repeat: bool,
    (shown, base): (&Progress, u64),
) -> Result<Pair> {
    if real.is_virtual() || !table.is_virtual() {
        return Err(Error::Internal(
            "validate pairs a real device with a table".into(),
        ));
    }
    let drawn: Vec<_> = real.traffic(cfg)?.arrivals.collect();
    let keep = KeepRecords {
        requests: true,
        ..KeepRecords::default()
    };
    let traffic = crate::run::grid::delivered(Traffic::from_list(drawn.clone()), shown, base);
    let measured = real.drive(cfg, keep.clone(), Arrivals::Scheduled(traffic))?;
    let predicted = {
        let t = Traffic::from_list(drawn.clone());
        table.drive(cfg, keep.clone(), Arrivals::Scheduled(t))?
    };
    let (lag_mean, lag_max) = same_arrivals(&measured.requests, &predicted.requests)?;
    let again = if repeat {
        let secs = (cfg.requests as f64 / cfg.rate).ceil() as u64;
        let traffic = crate::run::grid::delivered(Traffic::from_list(drawn), shown, base + secs);
        let again = real.drive(cfg, keep, Arrivals::Scheduled(traffic))?;
        same_arrivals(&again.requests, &predicted.requests)?;
        Some(again.stats())
    } else {
        None
    };
    Ok(Pair {
        measured: measured.stats(),
        predicted: predicted.stats(),
        lag_mean,
        lag_max,
        again,
    })
}

/// Checks that two runs served the same requests: as many, each with the same lengths, class
/// and model, the measured one arriving no earlier than predicted and at most
/// [`MAX_DELIVERY_LAG`] later. Returns the mean and largest lag.
pub fn same_arrivals(measured: &[Request], predicted: &[Request]) -> Result<(Nanos, Nanos)> {
    let refuse = |msg: String| {
        Err(Error::Internal(format!(
            "validate: the measured and predicted runs did not serve the same arrivals: {msg}"
        )))
    };
    if measured.len() != predicted.len() {
        return refuse(format!(
            "{} requests against {}",
            measured.len(),
            predicted.len()
        ));
    }
    let (mut sum, mut max) = (0u64, 0u64);
    for (m, p) in measured.iter().zip(predicted) {
        if m.id != p.id || m.len != p.len || m.class != p.class || m.part != p.part {
            return refuse(format!("request {} differs: {m:?} against {p:?}", m.id.0));
        }
        let lag = m.arrival.0 as i128 - p.arrival.0 as i128;
        if lag < 0 || lag > i128::from(MAX_DELIVERY_LAG.0) {
            return refuse(format!(
                "request {} arrived {:.3} ms from its instant (allowed: 0 to {} ms late)",
                m.id.0,
                lag as f64 / 1e6,
                MAX_DELIVERY_LAG.as_ms()
            ));
        }
        sum += lag as u64;
        max = max.max(lag as u64);
    }
    Ok((Nanos(sum / measured.len().max(1) as u64), Nanos(max)))
}

/// A run's arrivals in 16 hex digits (64-bit FNV-1a over each arrival's instant, lengths, model
/// and class): recorded with a run (`compare`'s JSON) so that a replay can tell whether it drew
/// the same arrivals, whatever changed in between.
pub fn fingerprint<'a>(arrivals: impl IntoIterator<Item = &'a Arrival>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |x: u64| {
        for b in x.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for a in arrivals {
        eat(a.time.0);
        eat(u64::from(a.len.enc) << 32 | u64::from(a.len.dec));
        eat(u64::from(a.part) << 8 | u64::from(a.class));
    }
    format!("{h:016x}")
}

/// The relative error of a prediction: `(predicted − measured) / measured` (0 when both are 0;
/// infinite when only the measurement is).
pub fn error(measured: f64, predicted: f64) -> f64 {
    if measured == 0.0 {
        if predicted == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (predicted - measured) / measured
    }
}

/// One point of a validation as [`write_figure`] draws it: the policy, and its measured and
/// predicted statistics.
pub type FigurePoint<'a> = (&'a str, &'a Stats, &'a Stats);

/// Writes `path` (SVG): predicted against measured latency, one panel each for the mean, the
/// median and the 99th percentile, a line per policy through its points (in the order given:
/// by rate), with the line where they agree and lines 10% to either side of it.
pub fn write_figure(points: &[FigurePoint<'_>], path: &std::path::Path) -> Result<()> {
    use crate::plot::{Figure, Panel, Series};
    let mut policies: Vec<&str> = Vec::new();
    for (p, _, _) in points {
        if !policies.contains(p) {
            policies.push(p);
        }
    }
    type Pick = fn(&Stats) -> f64;
    let stats: [(&str, Pick); 3] = [
        ("mean", |s| s.latency_ms.mean),
        ("p50", |s| s.latency_ms.p50),
        ("p99", |s| s.latency_ms.p99),
    ];
    let panels = stats
        .iter()
        .map(|&(name, pick)| {
            let hi = points
                .iter()
                .flat_map(|(_, m, p)| [pick(m), pick(p)])
                .filter(|v| v.is_finite())
                .fold(1.0f64, f64::max)
                * 1.05;
            let bound = |name: &str, k: f64| Series {
                name: name.into(),
                // within the panel's range: to its top or its right edge
                points: vec![(0.0, 0.0), (hi.min(hi / k), (hi * k).min(hi))],
                // the ±10% band dashed; where they agree, a solid line
                dashed: k != 1.0,
                ..Series::default()
            };
            let mut series = vec![
                bound("predicted = measured", 1.0),
                bound("+10%", 1.1),
                bound("−10%", 0.9),
            ];
            series.extend(policies.iter().map(|&pol| {
                Series {
                    name: pol.to_string(),
                    points: points
                        .iter()
                        .filter(|(p, _, _)| *p == pol)
                        .map(|(_, m, p)| (pick(m), pick(p)))
                        .collect(),
                    markers: true,
                    ..Series::default()
                }
            }));
            Panel {
                title: format!("{name} latency"),
                x_label: "measured (ms)".into(),
                y_label: "predicted (ms)".into(),
                y_range: Some((0.0, hi)),
                series,
                ..Panel::default()
            }
        })
        .collect();
    Figure {
        panels,
        shared_legend: true,
    }
    .write_svg(path, 380, 380)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Lengths;
    use crate::runtime::RequestId;

    fn req(id: u32, arrival_us: f64, enc: u32) -> Request {
        Request::new(
            RequestId(id),
            Nanos::from_us(arrival_us),
            Nanos::from_ms(100.0),
            Lengths { enc, dec: 3 },
        )
    }

    #[test]
    fn runs_of_other_arrivals_are_refused() {
        let predicted = vec![req(0, 0.0, 5), req(1, 100.0, 7)];
        // the same, delivered 30 and 70 us late: paired, with the lags
        let ok = vec![req(0, 30.0, 5), req(1, 170.0, 7)];
        let (mean, max) = same_arrivals(&ok, &predicted).unwrap();
        assert_eq!((mean, max), (Nanos::from_us(50.0), Nanos::from_us(70.0)));
        // another length, another count, an early or very late arrival: refused
        for bad in [
            vec![req(0, 30.0, 5), req(1, 170.0, 8)],
            vec![req(0, 30.0, 5)],
            vec![req(0, 30.0, 5), req(1, 50.0, 7)],
            vec![req(0, 30.0, 5), req(1, 100.0 + 60_000.0, 7)],
        ] {
            let e = same_arrivals(&bad, &predicted).unwrap_err().to_string();
            assert!(e.contains("did not serve the same arrivals"), "{e}");
        }
    }

    #[test]
    fn a_fingerprint_changes_with_any_arrival() {
        let a = Arrival {
            time: Nanos(5),
            len: Lengths { enc: 3, dec: 4 },
            ..Arrival::default()
        };
        let f = |v: &[Arrival]| fingerprint(v);
        let base = f(&[a, a]);
        assert_eq!(base, f(&[a, a]));
        assert_eq!(base.len(), 16);
        for b in [
            Arrival {
                time: Nanos(6),
                ..a
            },
            Arrival {
                len: Lengths { enc: 3, dec: 5 },
                ..a
            },
            Arrival { class: 1, ..a },
        ] {
            assert_ne!(base, f(&[a, b]));
        }
        assert_ne!(base, f(&[a]));
    }

    #[test]
    fn errors_are_relative_to_the_measurement() {
        assert_eq!(error(10.0, 11.0), 0.1);
        assert!((error(10.0, 9.0) + 0.1).abs() < 1e-12);
        assert_eq!(error(0.0, 0.0), 0.0);
        assert!(error(0.0, 1.0).is_infinite());
    }
}
