//! The wall-clock driver: the same engine loop and policies as the simulator, with time from
//! the machine's monotonic clock and requests delivered by a generator thread at their real
//! instants (Poisson or a trace). Node latencies are whatever the device measures.

use crate::device::Device;
use crate::engine::{self, ArrivalSource, Outcome};
use crate::error::Result;
use crate::policy::Policy;
use crate::time::{Clock, Nanos};
use crate::traffic::{Arrival, Traffic};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// Requests delivered by a generator thread at `origin + arrival.time`; each is stamped with
/// the instant it was actually delivered.
pub(crate) struct ThreadArrivals {
    rx: Receiver<Arrival>,
    peeked: Option<Arrival>,
    total: usize,
    origin: Instant,
    handle: Option<JoinHandle<()>>,
}

impl ThreadArrivals {
    /// Starts the generator thread for `schedule` (sorted by time), relative to `origin`.
    pub(crate) fn spawn(schedule: Traffic, origin: Instant) -> Self {
        let (tx, rx) = mpsc::channel();
        let total = schedule.expected;
        let handle = std::thread::spawn(move || {
            for a in schedule.arrivals {
                let due = origin + Duration::from_nanos(a.time.0);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let stamped = Arrival {
                    time: Nanos(origin.elapsed().as_nanos() as u64),
                    ..a
                };
                if tx.send(stamped).is_err() {
                    return;
                }
            }
        });
        ThreadArrivals {
            rx,
            peeked: None,
            total,
            origin,
            handle: Some(handle),
        }
    }
}

impl Drop for ThreadArrivals {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl ArrivalSource for ThreadArrivals {
    fn poll(&mut self, _now: Nanos) -> Option<Arrival> {
        self.peeked.take().or_else(|| self.rx.try_recv().ok())
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        if self.peeked.is_some() {
            return true;
        }
        let got = match until {
            None => self.rx.recv().ok(),
            Some(t) => {
                let now = Nanos(self.origin.elapsed().as_nanos() as u64);
                match self
                    .rx
                    .recv_timeout(Duration::from_nanos(t.saturating_sub(now).0))
                {
                    Ok(a) => Some(a),
                    Err(RecvTimeoutError::Timeout) => return true,
                    Err(RecvTimeoutError::Disconnected) => {
                        clock.idle_until(t);
                        return true;
                    }
                }
            }
        };
        match got {
            Some(a) => {
                self.peeked = Some(a);
                true
            }
            None => until.is_some(),
        }
    }
    fn expected(&self) -> usize {
        self.total
    }
}

/// Serves `schedule` on `device` in real time and returns what happened.
pub fn serve(
    setup: &engine::Setup,
    device: &mut dyn Device,
    policy: &mut dyn Policy,
    schedule: Traffic,
) -> Result<Outcome> {
    let mut clock = WallClock::start();
    let mut src = ThreadArrivals::spawn(schedule, clock.origin());
    engine::run_source(setup, device, policy, &mut clock, &mut src)
}
