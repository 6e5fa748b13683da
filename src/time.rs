//! Time in the engine: integer nanoseconds ([`Nanos`]), so that virtual-time runs are exact and
//! deterministic, and the [`Clock`] trait behind which the engine sees either a simulated clock
//! (the NPU model) or the wall clock (real devices).
//!
//! Arithmetic on [`Nanos`] saturates instead of wrapping, and a run's time is bounded by
//! [`Nanos::HORIZON`] (100 years): inputs are checked against it where they enter, and the
//! engine stops with an error should a run ever reach it.

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

/// The engine's view of time. A virtual clock is advanced by the engine by the duration the
/// device model returns; a wall clock advances by itself and `advance` only records.
pub trait Clock {
    /// The current time.
    fn now(&self) -> Nanos;
    /// Account for `d` of device time that has just elapsed (a virtual clock jumps by it).
    fn advance(&mut self, d: Nanos);
    /// Idle until `t` (a virtual clock jumps; a wall clock sleeps or waits for an arrival).
    fn idle_until(&mut self, t: Nanos);
}

/// A simulated clock: time moves only when the engine says so.
#[derive(Debug, Default, Clone)]
pub struct VirtualClock {
    now: Nanos,
}

impl VirtualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Nanos {
        self.now
    }
    fn advance(&mut self, d: Nanos) {
        self.now += d;
    }
    fn idle_until(&mut self, t: Nanos) {
        if t > self.now {
            self.now = t;
        }
    }
}
