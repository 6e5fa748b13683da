//! Time in the engine: integer nanoseconds ([`Nanos`]), so that virtual-time runs are exact and
//! deterministic, and (in `clock.rs`) the [`Clock`] trait behind which the engine sees either a
//! simulated clock (the NPU model) or the wall clock (real devices).
//!
//! Arithmetic on [`Nanos`] saturates instead of wrapping, and a run's time is bounded by
//! [`Nanos::HORIZON`] (100 years): inputs are checked against it where they enter, and the
//! engine stops with an error should a run ever reach it.

mod clock;
#[cfg(test)]
pub(crate) mod watchdog;

pub(crate) use clock::WallClock;
pub use clock::{Clock, VirtualClock};

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// The longest SLA (and graph-batching window) a run accepts: one day.
pub const MAX_SLA: Nanos = Nanos(86_400_000_000_000);

/// An SLA given in milliseconds, if it is one: in (0, one day] and at least 1 ns once rounded
/// to nanoseconds (every place that takes an SLA checks it here: `--sla-ms`, `--slas`,
/// `--classes`, a request's `sla_ms`).
pub fn sla_from_ms(ms: f64) -> Option<Nanos> {
    let t = Nanos::from_ms(ms);
    (ms > 0.0 && ms <= MAX_SLA.as_ms() && t.0 > 0).then_some(t)
}

/// What [`sla_from_ms`] accepts, in words.
pub const SLA_RANGE: &str = "(0, 86400000] ms (one day), at least 1 ns (1e-6 ms)";

/// A run's SLA target, in (0, [`MAX_SLA`]]: checked when it is made, so that whatever holds
/// one (a [`crate::run::RunSpec`], the engine's setup) never checks it again. Errors name the
/// setting ("SLA"); a command line maps that to its own flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sla(Nanos);

impl Sla {
    /// An SLA of `ms` milliseconds, if [`sla_from_ms`] takes it.
    pub fn from_ms(ms: f64) -> crate::Result<Sla> {
        sla_from_ms(ms).map(Sla).ok_or_else(|| {
            crate::Error::invalid(
                "SLA",
                format!("must be in {SLA_RANGE}, got {}", crate::error::num(ms)),
            )
        })
    }
    /// An SLA of `t`, if it is in (0, [`MAX_SLA`]].
    pub fn new(t: Nanos) -> crate::Result<Sla> {
        if t.0 > 0 && t <= MAX_SLA {
            Ok(Sla(t))
        } else {
            Err(crate::Error::invalid(
                "SLA",
                format!("must be in {SLA_RANGE}, got {} ns", t.0),
            ))
        }
    }
    /// The SLA as a duration.
    pub fn nanos(self) -> Nanos {
        self.0
    }
    /// The SLA in milliseconds.
    pub fn as_ms(self) -> f64 {
        self.0.as_ms()
    }
}

#[cfg(test)]
mod sla_tests {
    use super::*;

    #[test]
    fn an_sla_is_positive_at_most_a_day_and_at_least_a_nanosecond() {
        assert_eq!(sla_from_ms(100.0), Some(Nanos(100_000_000)));
        assert_eq!(sla_from_ms(1e-6), Some(Nanos(1)));
        assert_eq!(sla_from_ms(MAX_SLA.as_ms()), Some(MAX_SLA));
        for bad in [
            0.0,
            -1.0,
            1e-7,
            MAX_SLA.as_ms() + 0.1,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert_eq!(sla_from_ms(bad), None, "{bad}");
        }
        // the words say what the check does
        assert!(SLA_RANGE.starts_with(&format!("(0, {}] ms", MAX_SLA.as_ms())));
    }

    #[test]
    fn an_sla_value_holds_only_what_the_check_takes() {
        assert_eq!(Sla::from_ms(100.0).unwrap().nanos(), Nanos(100_000_000));
        assert_eq!(Sla::new(Nanos(1)).unwrap().nanos(), Nanos(1));
        assert_eq!(Sla::new(MAX_SLA).unwrap().nanos(), MAX_SLA);
        for bad in [Nanos(0), Nanos(MAX_SLA.0 + 1), Nanos(u64::MAX)] {
            let e = Sla::new(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("invalid SLA: must be in (0, 86400000] ms"),
                "{e}"
            );
        }
        let e = Sla::from_ms(0.0).unwrap_err().to_string();
        assert!(e.ends_with("got 0"), "{e}");
    }
}

/// A point in time or a duration, in integer nanoseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Zero.
    pub const ZERO: Nanos = Nanos(0);
    /// The largest representable time ("never").
    pub const MAX: Nanos = Nanos(u64::MAX);
    /// The longest a run may last: 100 years (of 365.25 days), a sixth of what u64
    /// nanoseconds hold, so that any sum of two times within it is exact.
    pub const HORIZON: Nanos = Nanos(3_155_760_000_000_000_000);
    /// From microseconds.
    pub fn from_us(us: f64) -> Nanos {
        Nanos((us * 1e3).round().max(0.0) as u64)
    }
    /// From milliseconds.
    pub fn from_ms(ms: f64) -> Nanos {
        Nanos((ms * 1e6).round().max(0.0) as u64)
    }
    /// From seconds.
    pub fn from_secs(s: f64) -> Nanos {
        Nanos((s * 1e9).round().max(0.0) as u64)
    }
    /// As microseconds.
    pub fn as_us(self) -> f64 {
        self.0 as f64 / 1e3
    }
    /// As milliseconds.
    pub fn as_ms(self) -> f64 {
        self.0 as f64 / 1e6
    }
    /// As seconds.
    pub(crate) fn as_secs(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// `self - other`, or zero when `other` is later.
    pub(crate) fn saturating_sub(self, other: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(other.0))
    }
}

// Saturating, never wrapping: a sum past u64 stays at `Nanos::MAX` ("never"), a difference
// below zero at zero. Runs stay within `Nanos::HORIZON`, far from either end.
impl Add for Nanos {
    type Output = Nanos;
    fn add(self, o: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(o.0))
    }
}
impl AddAssign for Nanos {
    fn add_assign(&mut self, o: Nanos) {
        self.0 = self.0.saturating_add(o.0);
    }
}
impl Sub for Nanos {
    type Output = Nanos;
    fn sub(self, o: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(o.0))
    }
}
impl std::iter::Sum for Nanos {
    fn sum<I: Iterator<Item = Nanos>>(iter: I) -> Nanos {
        iter.fold(Nanos::ZERO, |a, b| a + b)
    }
}
impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3} ms", self.as_ms())
    }
}
