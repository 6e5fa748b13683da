//! The wall-clock driver: the same engine loop and policies as the simulator, with time from
//! the machine's monotonic clock and requests delivered through a channel as they happen
//! ([`ChannelArrivals`]: a generator thread at their real instants, Poisson or a trace, or any
//! other sender). Node latencies are whatever the device measures.

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
    /// A clock whose zero is `origin` (a front end's, shared with its senders).
    pub(crate) fn starting_at(origin: Instant) -> Self {
        WallClock { start: origin }
    }
}

/// A model device (the NPU model) on the wall clock: each execution takes the time the model
/// says it takes, slept, so that a front end answers after the modelled latency — a timing
/// emulation; no values are computed. Executions end at `due`, the previous end plus the
/// modelled time, so that the sleeps' overshoot (tens of µs each) does not add up over a
/// request's nodes.
pub struct Emulated<D> {
    dev: D,
    due: Option<Instant>,
}

impl<D> Emulated<D> {
    /// `dev` on the wall clock.
    pub fn new(dev: D) -> Self {
        Emulated { dev, due: None }
    }
}

impl<D: Device> Device for Emulated<D> {
    fn name(&self) -> &'static str {
        self.dev.name()
    }
    fn description(&self) -> String {
        format!(
            "{} (timing emulated on the wall clock)",
            self.dev.description()
        )
    }
    fn is_virtual(&self) -> bool {
        false
    }
    fn prepare(&mut self, model: &crate::graph::Model, max_batch: u32) -> Result<()> {
        self.dev.prepare(model, max_batch)
    }
    fn resume(&mut self, idle: Nanos) {
        self.dev.resume(idle)
    }
    fn execute(
        &mut self,
        model: &crate::graph::Model,
        at: crate::graph::NodeStep,
        members: &[crate::device::Member],
    ) -> Result<crate::device::Timing> {
        let t = self.dev.execute(model, at, members)?;
        let now = Instant::now();
        // where the last node ended, even if a sleep overshot it (this one catches up), unless
        // the device sat idle since (then it starts now)
        let start = match self.due {
            Some(d) if now.saturating_duration_since(d) < Duration::from_millis(1) => d,
            _ => now,
        };
        let due = start + Duration::from_nanos(t.time.0);
        self.due = Some(due);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        Ok(t)
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

/// Requests delivered through a channel as they happen (a generator thread, or a network
/// front end's handlers), each stamped by its sender with the instant it arrived (time since
/// `origin`, [`stamped`]), so that time the engine spends running a node before it reads the
/// channel counts in the request's latency: the wall-clock [`ArrivalSource`]. When every sender is gone and nothing is waiting, the engine loop ends
/// once the requests in the server have left — a front end's graceful shutdown.
pub struct ChannelArrivals {
    rx: Receiver<Arrival>,
    peeked: Option<Arrival>,
    total: usize,
    origin: Instant,
}

impl ChannelArrivals {
    /// A source over `rx` on a clock whose zero is `origin`; `expected` requests in all, if
    /// known (0: unknown; it only sizes the queue up front).
    pub fn new(rx: Receiver<Arrival>, origin: Instant, expected: usize) -> Self {
        ChannelArrivals {
            rx,
            peeked: None,
            total: expected,
            origin,
        }
    }

    /// The instant its senders stamp from.
    pub fn origin(&self) -> Instant {
        self.origin
    }
}

/// `a` stamped with the instant it arrived on a clock whose zero is `origin`.
pub fn stamped(a: Arrival, origin: Instant) -> Arrival {
    Arrival {
        time: Nanos(origin.elapsed().as_nanos() as u64),
        ..a
    }
}

impl ArrivalSource for ChannelArrivals {
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

/// Requests delivered by a generator thread at `origin + arrival.time` (Poisson or a trace),
/// through a [`ChannelArrivals`].
pub(crate) struct ThreadArrivals {
    channel: ChannelArrivals,
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
                if tx.send(stamped(a, origin)).is_err() {
                    return;
                }
            }
        });
        ThreadArrivals {
            channel: ChannelArrivals::new(rx, origin, total),
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
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        self.channel.poll(now)
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        self.channel.idle(clock, until)
    }
    fn expected(&self) -> usize {
        self.channel.expected()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Member, Timing};
    use crate::graph::{zoo, Lengths, Model, NodeStep};
    use crate::metrics::KeepRecords;
    use crate::profile::Profile;
    use crate::runtime::Predictor;

    /// A real-time device: every node sleeps 1 ms (the input node none), whatever the batch.
    struct Sleeper;
    impl Device for Sleeper {
        fn name(&self) -> &'static str {
            "sleeper"
        }
        fn is_virtual(&self) -> bool {
            false
        }
        fn prepare(&mut self, _: &Model, _: u32) -> Result<()> {
            Ok(())
        }
        fn execute(&mut self, _: &Model, at: NodeStep, _: &[Member]) -> Result<Timing> {
            let t = Instant::now();
            if at.node.0 != 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(Timing {
                time: Nanos(t.elapsed().as_nanos() as u64),
                ..Timing::default()
            })
        }
    }

    fn arrival(ms: f64) -> Arrival {
        Arrival {
            time: Nanos::from_ms(ms),
            len: Lengths { enc: 1, dec: 1 },
            ..Arrival::default()
        }
    }

    /// Serves `arrivals` on the eight-node graph (8 ms a request alone) under `policy`, on a
    /// watchdog thread: a driver that never wakes fails the test instead of hanging it.
    fn serve_on_sleeper(policy: &str, arrivals: Vec<Arrival>, max_pending: usize) -> Outcome {
        let (tx, rx) = mpsc::channel();
        let policy = policy.to_string();
        std::thread::spawn(move || {
            let m = zoo::load(&format!(
                "{}/tests/fixtures/eight_nodes.toml",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            let pred = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
            let setup = engine::Setup {
                max_pending,
                keep: KeepRecords {
                    requests: true,
                    ..KeepRecords::default()
                },
                ..engine::Setup::new(&m, &pred, Nanos::from_ms(1000.0), 8)
            };
            let mut pol = crate::policy::parse(&policy, 8).unwrap();
            let t = Traffic::from_list(arrivals);
            let _ = tx.send(serve(&setup, &mut Sleeper, pol.as_mut(), t).unwrap());
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the wall-clock driver finished within 30 s")
    }

    #[test]
    fn arrivals_are_stamped_when_delivered_never_when_scheduled() {
        // an origin 50 ms in the past: arrivals scheduled at 0 and 10 ms are already due and
        // are delivered at once, so their stamps are the real delivery instants (≥ 50 ms)
        let origin = Instant::now() - Duration::from_millis(50);
        let t = Traffic::from_list(vec![arrival(0.0), arrival(10.0), arrival(70.0)]);
        let mut src = ThreadArrivals::spawn(t, origin);
        let mut clock = WallClock { start: origin };
        let mut got = Vec::new();
        while src.idle(&mut clock, None) {
            while let Some(a) = src.poll(clock.now()) {
                got.push(a.time);
            }
        }
        assert_eq!(got.len(), 3);
        assert!(
            got[0] >= Nanos::from_ms(50.0) && got[1] >= got[0],
            "{got:?}"
        );
        assert!(got[2] >= Nanos::from_ms(70.0), "never early: {got:?}");
    }

    #[test]
    fn idle_wakes_at_its_timeout_without_an_arrival() {
        let t = Traffic::from_list(vec![arrival(200.0)]);
        let mut clock = WallClock::start();
        let mut src = ThreadArrivals::spawn(t, clock.origin());
        let until = Nanos::from_ms(20.0);
        assert!(src.idle(&mut clock, Some(until)));
        assert!(clock.now() >= until, "woke early at {:?}", clock.now());
        assert!(
            src.poll(clock.now()).is_none(),
            "the arrival is 200 ms away"
        );
    }

    #[test]
    fn a_graph_window_expires_on_the_wall_clock() {
        // one request alone under graph:20: nothing else arrives, so the driver must wake at
        // the window's end (20 ms) and run it (8 ms); a driver that waited for another arrival
        // would hang
        let out = serve_on_sleeper("graph:20", vec![arrival(0.0)], 100);
        let r = &out.requests[0];
        let (issued, done) = (r.first_issue.unwrap(), r.completion.unwrap());
        assert!(
            issued - r.arrival >= Nanos::from_ms(20.0),
            "issued after {:?}",
            issued - r.arrival
        );
        assert!(done - issued >= Nanos::from_ms(8.0));
    }

    #[test]
    fn overload_rejects_by_count_and_loses_nothing() {
        // 40 requests at once into a 3-deep queue on a device that takes 8 ms each: most are
        // refused as the queue is full, the rest complete in arrival order, each exactly once
        let out = serve_on_sleeper("serial", (0..40).map(|_| arrival(0.0)).collect(), 3);
        let st = out.stats();
        assert_eq!(st.requests, 40);
        assert_eq!(st.completed + st.rejected, 40);
        assert_eq!(st.rejected, st.rejected_queue_full);
        assert!(st.rejected >= 30, "{} rejected", st.rejected);
        let done: Vec<&crate::runtime::Request> = out
            .requests
            .iter()
            .filter(|r| r.completion.is_some())
            .collect();
        assert_eq!(done.len() as u64, st.completed);
        for w in done.windows(2) {
            assert!(w[1].completion.unwrap() >= w[0].completion.unwrap() + Nanos::from_ms(8.0));
        }
    }

    /// Counts each request as it leaves (the engine's observer).
    #[derive(Debug, Default)]
    struct Tally(std::sync::Mutex<Vec<(u32, engine::Left)>>);
    impl engine::Observer for Tally {
        fn left(&self, q: &crate::runtime::Request, how: engine::Left) {
            self.0.lock().unwrap().push((q.id.0, how));
        }
    }

    #[test]
    fn a_front_end_feeds_the_engine_through_a_channel_and_hears_of_every_request_once() {
        // a sender stands in for a network front end: 30 requests, a millisecond apart, each
        // stamped as it arrives; dropping the sender drains the server and ends the run, and
        // the observer heard of every request exactly once, as the run's statistics did
        let m = zoo::load(&format!(
            "{}/tests/fixtures/eight_nodes.toml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let pred = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
        let tally = Tally::default();
        let setup = engine::Setup {
            observer: Some(&tally),
            ..engine::Setup::new(&m, &pred, Nanos::from_ms(1000.0), 8)
        };
        let mut clock = WallClock::start();
        let origin = clock.origin();
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || {
            for _ in 0..30 {
                std::thread::sleep(Duration::from_millis(1));
                tx.send(stamped(arrival(0.0), origin)).unwrap();
            }
        });
        let mut src = ChannelArrivals::new(rx, origin, 0);
        let mut pol = crate::policy::parse("lazy", 8).unwrap();
        let out =
            engine::run_source(&setup, &mut Sleeper, pol.as_mut(), &mut clock, &mut src).unwrap();
        sender.join().unwrap();
        let heard = tally.0.lock().unwrap().clone();
        assert_eq!(heard.len(), 30);
        let mut ids: Vec<u32> = heard.iter().map(|h| h.0).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 30, "each request heard of once");
        assert!(heard
            .iter()
            .all(|h| matches!(h.1, engine::Left::Completed(_))));
        assert_eq!(out.stats().completed, 30);
    }
}
