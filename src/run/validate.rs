//! Holding the simulator against real runs (`lazybatch validate`): the same arrivals — the same
//! lengths and classes, drawn once from the run's seed — served twice, for real on a device in
//! wall time and on that device's latency table in virtual time ([`crate::device::table`]),
//! and each measured statistic beside its prediction with their relative error.
//!
//! The prediction serves the arrivals **as the wall-time run delivered them** (each request at
//! the instant it really arrived), not as they were scheduled: a busy machine delivers requests
//! late, and that lateness is a measurement of the machine ([`Lag`], reported beside every
//! point, with a plain warning past [`LATE_DELIVERY`]), never a reason to refuse the pair. What
//! is still checked, and refused as a bug, is that both runs served the same requests: as many,
//! each with the same lengths, class and model, at the same instants.

use super::drive::Arrivals;
use super::{RunSpec, Testbed};
use crate::error::{Error, Result};
use crate::metrics::{KeepRecords, Stats};
use crate::progress::Progress;
use crate::runtime::Request;
use crate::time::Nanos;
use crate::traffic::{Arrival, Traffic};

/// How late a wall-time run may deliver its requests before its measurement says more about
/// the machine than about the device: past it `validate` still reports and writes everything,
/// and says in plain words that validation needs an idle machine ([`Lag::warning`]). The
/// arrival thread sleeps to each instant; an idle 2-core machine wakes it within a
/// millisecond, a loaded one tens of milliseconds late.
pub const LATE_DELIVERY: Nanos = Nanos(50_000_000);

/// How late a wall-time run delivered its requests behind their scheduled instants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lag {
    /// The mean lag over the run's requests.
    pub mean: Nanos,
    /// The largest.
    pub max: Nanos,
}

impl Lag {
    /// The lag of `measured` (a wall-time run's records, in arrival order) behind `drawn` (its
    /// schedule); a request stamped before its instant (which the arrival thread never does)
    /// counts as on time.
    pub fn of(drawn: &[Arrival], measured: &[Request]) -> Lag {
        let (mut sum, mut max) = (0u128, Nanos::ZERO);
        for (a, m) in drawn.iter().zip(measured) {
            let lag = Nanos(m.arrival.0.saturating_sub(a.time.0));
            sum += u128::from(lag.0);
            max = max.max(lag);
        }
        let n = drawn.len().min(measured.len()).max(1) as u128;
        Lag {
            mean: Nanos((sum / n) as u64),
            max,
        }
    }

    /// The larger of two runs' lags (each statistic apart).
    pub fn worst(self, other: Lag) -> Lag {
        Lag {
            mean: self.mean.max(other.mean),
            max: self.max.max(other.max),
        }
    }

    /// Whether the machine delivered a request later than [`LATE_DELIVERY`].
    pub fn is_late(&self) -> bool {
        self.max > LATE_DELIVERY
    }

    /// What to tell the user when [`Lag::is_late`]: the lag, and what to do about it.
    pub fn warning(&self) -> Option<String> {
        self.is_late().then(|| {
            format!(
                "the machine delivered requests up to {:.0} ms late (mean {:.1} ms; an idle machine delivers them within {} ms): the measured runs include time this machine spent on other work, which no table predicts, so validation needs an idle machine; see docs/validate.md",
                self.max.as_ms(),
                self.mean.as_ms(),
                LATE_DELIVERY.as_ms()
            )
        })
    }
}

/// One configuration served for real and on the table.
#[derive(Clone, Debug)]
pub struct Pair {
    /// The real device's statistics.
    pub measured: Stats,
    /// The table's, on the arrivals as the real run delivered them.
    pub predicted: Stats,
    /// How late the wall-time run delivered its requests behind their scheduled instants.
    pub lag: Lag,
    /// The instants at which the wall-time run delivered its requests, in order: the arrivals
    /// the prediction served (kept so that a replay predicts exactly the same).
    pub delivered: Vec<Nanos>,
    /// With `repeat`: the real device's statistics from serving the same arrivals a second
    /// time, what the measurement itself spreads by (its own repeatability), and that run's
    /// lag.
    pub again: Option<(Stats, Lag)>,
}

impl Pair {
    /// The worse lag of the real runs (the first, and with `repeat` the second).
    pub fn worst_lag(&self) -> Lag {
        self.again
            .as_ref()
            .map_or(self.lag, |(_, l)| self.lag.worst(*l))
    }
}

/// Serves `cfg` on `real` (wall time) and on `table` (virtual time, on the arrivals as `real`
/// delivered them), and with `repeat` serves the same schedule on `real` a second time;
/// `shown` follows the real runs' delivered traffic from `base` seconds on
/// ([`crate::run::grid::delivered`]).
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
    let delivered: Vec<Nanos> = measured.requests.iter().map(|r| r.arrival).collect();
    let predicted = predict(table, cfg, &drawn, &delivered, keep.clone())?;
    same_arrivals(&measured.requests, &predicted.requests)?;
    let lag = Lag::of(&drawn, &measured.requests);
    let again = if repeat {
        let secs = (cfg.requests as f64 / cfg.rate).ceil() as u64;
        let traffic =
            crate::run::grid::delivered(Traffic::from_list(drawn.clone()), shown, base + secs);
        let again = real.drive(cfg, keep, Arrivals::Scheduled(traffic))?;
        let lag = Lag::of(&drawn, &again.requests);
        Some((again.stats(), lag))
    } else {
        None
    };
    Ok(Pair {
        measured: measured.stats(),
        predicted: predicted.stats(),
        lag,
        delivered,
        again,
    })
}

/// Serves `drawn` on `table` with each request at its `delivered` instant instead of its
/// scheduled one: the prediction of a wall-time run that delivered them so.
pub fn predict(
    table: &Testbed,
    cfg: &RunSpec,
    drawn: &[Arrival],
    delivered: &[Nanos],
    keep: KeepRecords,
) -> Result<crate::engine::Outcome> {
    if drawn.len() != delivered.len() {
        return Err(Error::Internal(format!(
            "validate: {} arrivals drawn and {} delivered",
            drawn.len(),
            delivered.len()
        )));
    }
    let list: Vec<Arrival> = drawn
        .iter()
        .zip(delivered)
        .map(|(a, &time)| Arrival { time, ..*a })
        .collect();
    if list.windows(2).any(|w| w[1].time < w[0].time) {
        return Err(Error::Internal(
            "validate: the delivered instants are out of order".into(),
        ));
    }
    table.drive(cfg, keep, Arrivals::Scheduled(Traffic::from_list(list)))
}

/// Checks that two runs served the same requests: as many, each with the same lengths, class
/// and model, arriving at the same instant (the prediction serves the measured run's delivered
/// instants). A difference is a bug of the pairing, never the machine's lateness.
pub fn same_arrivals(measured: &[Request], predicted: &[Request]) -> Result<()> {
    let refuse = |msg: String| {
        Err(Error::Internal(format!(
            "validate: the measured and predicted runs did not serve the same requests: {msg}"
        )))
    };
    if measured.len() != predicted.len() {
        return refuse(format!(
            "{} requests against {}",
            measured.len(),
            predicted.len()
        ));
    }
    for (m, p) in measured.iter().zip(predicted) {
        if m.id != p.id
            || m.len != p.len
            || m.class != p.class
            || m.part != p.part
            || m.arrival != p.arrival
        {
            return refuse(format!("request {} differs: {m:?} against {p:?}", m.id.0));
        }
    }
    Ok(())
}

/// What a record's `lazy_rule` says of its LazyB policies (`compare.json`, `validate.json`):
/// their slack gate's refusals held until the active batch completed (the paper's rule, since
/// 2026-12). A record without it ran every `lazy` and `oracle` policy as today's `:recheck`
/// reading, and a replay runs them so ([`as_recorded`]).
pub const LAZY_RULE: &str = "latch";

/// The policy a record ran, in today's terms: `policy` as recorded when the record says its
/// `lazy_rule` ([`LAZY_RULE`]); without one (recorded before 2026-12), a LazyB or Oracle policy
/// asked its gate at every node, today's `:recheck` reading.
pub fn as_recorded(policy: &str, lazy_rule: Option<&str>) -> String {
    let lazy = policy.starts_with("lazy") || policy.starts_with("oracle");
    match lazy_rule {
        Some(_) => policy.to_string(),
        None if !lazy || policy.split(':').any(|p| p == "recheck") => policy.to_string(),
        None if policy == "lazy+cell" => "lazy:recheck".to_string(),
        None => format!("{policy}:recheck"),
    }
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

    fn drawn(us: &[f64]) -> Vec<Arrival> {
        us.iter()
            .map(|&t| Arrival {
                time: Nanos::from_us(t),
                ..Arrival::default()
            })
            .collect()
    }

    #[test]
    fn lateness_is_measured_and_reported_never_refused() {
        // scheduled at 0 and 100 us, delivered 30 us and 75 ms late: a busy machine's lag
        let late = vec![req(0, 30.0, 5), req(1, 100.0 + 75_000.0, 7)];
        let lag = Lag::of(&drawn(&[0.0, 100.0]), &late);
        assert_eq!(
            lag,
            Lag {
                mean: Nanos::from_us(37_515.0),
                max: Nanos::from_us(75_000.0)
            }
        );
        assert!(lag.is_late());
        let w = lag.warning().unwrap();
        assert!(
            w.starts_with("the machine delivered requests up to 75 ms late")
                && w.contains("validation needs an idle machine; see docs/validate.md"),
            "{w}"
        );
        // the prediction serves the delivered instants: the pair is the same requests
        same_arrivals(&late, &late.clone()).unwrap();
        // at the bound, not late; a nanosecond past it, late; never early
        let at = |ns: u64| vec![req(0, ns as f64 / 1e3, 5)];
        let on_time = Lag::of(&drawn(&[0.0]), &at(LATE_DELIVERY.0));
        assert!(!on_time.is_late() && on_time.warning().is_none());
        assert!(Lag::of(&drawn(&[0.0]), &at(LATE_DELIVERY.0 + 1)).is_late());
        assert_eq!(Lag::of(&drawn(&[50.0]), &at(10_000)), Lag::default());
        // the worse of two runs, statistic by statistic
        let a = Lag {
            mean: Nanos(5),
            max: Nanos(9),
        };
        let b = Lag {
            mean: Nanos(7),
            max: Nanos(8),
        };
        assert_eq!(
            a.worst(b),
            Lag {
                mean: Nanos(7),
                max: Nanos(9)
            }
        );
    }

    #[test]
    fn runs_of_other_requests_are_refused() {
        let predicted = vec![req(0, 0.0, 5), req(1, 100.0, 7)];
        same_arrivals(&predicted.clone(), &predicted).unwrap();
        // another length, another count, another instant: a bug of the pairing
        for bad in [
            vec![req(0, 0.0, 5), req(1, 100.0, 8)],
            vec![req(0, 0.0, 5)],
            vec![req(0, 0.0, 5), req(1, 101.0, 7)],
        ] {
            let e = same_arrivals(&bad, &predicted).unwrap_err();
            assert!(matches!(e, Error::Internal(_)), "{e}");
            assert!(
                e.to_string().contains("did not serve the same requests"),
                "{e}"
            );
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
    fn a_record_from_before_the_latch_is_replayed_under_the_rule_it_ran() {
        for (old, now) in [
            ("lazy", "lazy:recheck"),
            ("oracle", "oracle:recheck"),
            ("lazy:strict", "lazy:strict:recheck"),
            ("lazy:adaptive", "lazy:adaptive:recheck"),
            ("lazy+cell", "lazy:recheck"),
            ("lazy:recheck", "lazy:recheck"),
            ("graph:5", "graph:5"),
            ("serial", "serial"),
        ] {
            assert_eq!(as_recorded(old, None), now, "{old}");
            assert_eq!(as_recorded(old, Some(LAZY_RULE)), old, "{old}");
        }
    }

    /// A testbed of `model` on a table device pricing every node at `ns` at every batch size:
    /// a device whose node times are fixed.
    fn fixed(model: &crate::graph::Model, ns: u64) -> Testbed {
        use crate::device::open::Opened;
        use crate::device::table::TableDevice;
        use crate::profile::Profile;
        let table = TableDevice::from_profile(Profile::uniform(model, 4, Nanos(ns)), "fixed");
        let opts = crate::run::TestbedOptions {
            max_batch: crate::runtime::MaxBatch::new(4).unwrap(),
            coverage: 90.0,
            profile: None,
            sampling: Default::default(),
        };
        Testbed::open(model.clone(), Opened::Table(table), &opts).unwrap()
    }

    #[test]
    fn a_prediction_off_by_a_known_factor_has_that_error() {
        // The known answer: a "measured" run on a device whose every node takes 1 us, and its
        // prediction on a table that prices every node at 1.1 us, on the instants the
        // measurement delivered. Served one at a time (100 ms apart) or all at one instant
        // (queued behind each other), every latency is a sum of node times, so the prediction
        // is 1.1 times the measurement: +10% on the mean and the p99. On the measured device's
        // own table, 0.
        let m = crate::graph::zoo::load("resnet50").unwrap();
        let (measured_bed, off, same) = (fixed(&m, 1_000), fixed(&m, 1_100), fixed(&m, 1_000));
        for (gap_ms, policy) in [(100.0, "serial"), (0.0, "serial"), (0.0, "lazy")] {
            let spec = RunSpec {
                policy: crate::policy::Spec::parse(policy, 4).unwrap(),
                rate: 10.0,
                arrivals: Default::default(),
                classes: None,
                shed: false,
                abandon_late: false,
                admit: Default::default(),
                requests: 12,
                sla: crate::time::Sla::from_ms(1e4).unwrap(),
                seed: 1,
                max_batch: crate::runtime::MaxBatch::new(4).unwrap(),
                max_pending: crate::runtime::MaxPending::new(1000).unwrap(),
                colocated: None,
                replicas: crate::engine::Replicas::ONE,
            };
            let drawn: Vec<Arrival> = (0..12)
                .map(|k| Arrival {
                    time: Nanos::from_ms(gap_ms * f64::from(k)),
                    ..Arrival::default()
                })
                .collect();
            let keep = KeepRecords {
                requests: true,
                ..KeepRecords::default()
            };
            let measured = measured_bed
                .drive(
                    &spec,
                    keep.clone(),
                    Arrivals::Scheduled(Traffic::from_list(drawn.clone())),
                )
                .unwrap();
            let delivered: Vec<Nanos> = measured.requests.iter().map(|r| r.arrival).collect();
            let ms = measured.stats().latency_ms;
            for (bed, want) in [(&off, 0.10), (&same, 0.0)] {
                let p = predict(bed, &spec, &drawn, &delivered, keep.clone()).unwrap();
                same_arrivals(&measured.requests, &p.requests).unwrap();
                let ps = p.stats().latency_ms;
                for (stat, m, p) in [("mean", ms.mean, ps.mean), ("p99", ms.p99, ps.p99)] {
                    let e = error(m, p);
                    assert!(
                        (e - want).abs() < 1e-6,
                        "{policy} {gap_ms} ms apart, {stat}: measured {m}, predicted {p}, \
                         error {e}, want {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn errors_are_relative_to_the_measurement() {
        assert_eq!(error(10.0, 11.0), 0.1);
        assert!((error(10.0, 9.0) + 0.1).abs() < 1e-12);
        assert_eq!(error(0.0, 0.0), 0.0);
        assert!(error(0.0, 1.0).is_infinite());
    }
}
