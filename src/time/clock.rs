//! The engine's clocks side by side: the [`Clock`] trait, the [`VirtualClock`] a model device
//! runs on (time moves only when the engine says so, so a seed fixes every result) and the
//! [`WallClock`] a real device runs on (the machine's monotonic clock; `advance` only
//! acknowledges time that has really passed).

use super::Nanos;
use std::time::{Duration, Instant};

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

/// Time since the clock was created; `advance` only acknowledges time that has really passed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WallClock {
    start: Instant,
}

impl WallClock {
    /// A clock at zero now.
    pub fn start() -> Self {
        WallClock {
            start: Instant::now(),
        }
    }
    /// The instant of time zero.
    pub(crate) fn origin(&self) -> Instant {
        self.start
    }
    /// A clock whose zero is `origin` (a front end's, shared with its senders).
    pub(crate) fn starting_at(origin: Instant) -> Self {
        WallClock { start: origin }
    }
}

impl Clock for WallClock {
    fn now(&self) -> Nanos {
        Nanos(self.start.elapsed().as_nanos() as u64)
    }
    fn advance(&mut self, _d: Nanos) {}
    fn idle_until(&mut self, t: Nanos) {
        let now = self.now();
        if t > now {
            std::thread::sleep(Duration::from_nanos((t - now).0));
        }
    }
}
