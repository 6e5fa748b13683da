//! Where the engine's requests come from ([`ArrivalSource`]): pre-drawn arrivals on a virtual
//! clock ([`Predrawn`]), arrivals generated as the run asks for them ([`Stream`]), requests
//! sent through a channel as they happen and stamped by their sender ([`ChannelArrivals`]: a
//! network front end's handlers), and a generator thread delivering them at their real
//! instants through such a channel ([`ThreadArrivals`]).

use crate::time::{Clock, Nanos};
use crate::traffic::{Arrival, Traffic};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where requests come from: pre-drawn arrival times on a virtual clock, or a generator thread
/// delivering them at their real instants on the wall clock.
pub trait ArrivalSource {
    /// The next request that has arrived by `now`, if any.
    fn poll(&mut self, now: Nanos) -> Option<Arrival>;
    /// Nothing to do: let time pass until the next arrival or `until`, whichever comes first.
    /// Returns false when no request will ever arrive again and `until` is None.
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool;
    /// How many requests will arrive in all, if known.
    fn expected(&self) -> usize {
        0
    }
    /// A time before which no request arrives (`Nanos::MAX` when none will), if known.
    fn next_due(&mut self) -> Option<Nanos> {
        None
    }
    /// Whether it can say now when the next arrival before `until` (or any next arrival, for
    /// `None`) comes: false while a router has yet to decide where the arrivals up to then go
    /// ([`super::replicas`]); the engine then waits for it before letting time pass.
    fn ready(&self, _until: Option<Nanos>) -> bool {
        true
    }
    /// Whether the server is to give up every request it holds now, at this node boundary
    /// (a server's shutdown deadline passed): they leave as [`Rejection::Abandoned`] and the
    /// run ends.
    ///
    /// [`Rejection::Abandoned`]: crate::runtime::Rejection::Abandoned
    fn give_up(&self) -> bool {
        false
    }
    /// Whether it may ever give up ([`ArrivalSource::give_up`]) or cancel requests
    /// ([`ArrivalSource::cancelled`]): then the engine never runs several nodes as one (a run
    /// ahead), so that every node boundary is one where it looks.
    fn may_give_up(&self) -> bool {
        false
    }
    /// Moves into `keys` the keys ([`Arrival::key`]) of requests whose clients went away, told
    /// since it was last asked: each leaves the server at this node boundary as
    /// [`Rejection::Cancelled`] if it is still there. Asked after the arrivals are received:
    /// a request's cancellation is told after its arrival, so every request told has arrived.
    ///
    /// [`Rejection::Cancelled`]: crate::runtime::Rejection::Cancelled
    fn cancelled(&mut self, _keys: &mut Vec<u64>) {}
}

/// A virtual-time source's idle: the clock jumps to the `next` arrival or `until`, whichever
/// comes first; false when neither will ever come.
pub(super) fn idle_until_next(
    clock: &mut dyn Clock,
    next: Option<Nanos>,
    until: Option<Nanos>,
) -> bool {
    match (next, until) {
        (None, None) => false,
        (Some(t), None) | (None, Some(t)) => {
            clock.idle_until(t);
            true
        }
        (Some(a), Some(u)) => {
            clock.idle_until(a.min(u));
            true
        }
    }
}

/// Pre-drawn arrivals, sorted by time: a [`Stream`] over a list.
pub struct Predrawn<'a>(Stream<std::iter::Copied<std::slice::Iter<'a, Arrival>>>);

impl<'a> Predrawn<'a> {
    /// A source over `list` (sorted by time).
    pub fn new(list: &'a [Arrival]) -> Self {
        Predrawn(Stream::new(list.iter().copied(), list.len()))
    }
}

impl ArrivalSource for Predrawn<'_> {
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        self.0.poll(now)
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        self.0.idle(clock, until)
    }
    fn expected(&self) -> usize {
        self.0.expected()
    }
    fn next_due(&mut self) -> Option<Nanos> {
        self.0.next_due()
    }
}

/// Arrivals generated as they are needed (a Poisson process, a trace read line by line): the
/// virtual-time source whose memory does not depend on the run's length.
pub struct Stream<I: Iterator<Item = Arrival>> {
    it: std::iter::Peekable<I>,
    expected: usize,
}

impl<I: Iterator<Item = Arrival>> Stream<I> {
    /// A source over `it` (sorted by time), which will yield `expected` arrivals.
    pub fn new(it: I, expected: usize) -> Self {
        Stream {
            it: it.peekable(),
            expected,
        }
    }
}

impl<I: Iterator<Item = Arrival>> ArrivalSource for Stream<I> {
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        match self.it.peek() {
            Some(a) if a.time <= now => self.it.next(),
            _ => None,
        }
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        idle_until_next(clock, self.it.peek().map(|a| a.time), until)
    }
    fn expected(&self) -> usize {
        self.expected
    }
    fn next_due(&mut self) -> Option<Nanos> {
        Some(self.it.peek().map_or(Nanos::MAX, |a| a.time))
    }
}

/// Requests delivered through a channel as they happen (a generator thread, or a network
/// front end's handlers), each stamped by its sender with the instant it arrived (time since
/// `origin`, [`stamped`]), so that time the engine spends running a node before it reads the
/// channel counts in the request's latency: the wall-clock [`ArrivalSource`]. When every sender is gone and nothing is waiting, the engine loop ends
/// once the requests in the server have left — a front end's graceful shutdown.
pub struct ChannelArrivals {
    rx: Receiver<Told>,
    peeked: Option<Arrival>,
    total: usize,
    origin: Instant,
    /// Set by the front end when its shutdown deadline passed ([`ArrivalSource::give_up`]).
    give_up: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Keys of requests whose clients went away, read from the channel and not yet asked for
    /// ([`ArrivalSource::cancelled`]).
    cancels: Vec<u64>,
}

/// What a sender tells the engine through a [`ChannelArrivals`]: a request arrived, or the
/// client of the request under a key went away. Both travel in one channel, in the order they
/// happened (a request's cancellation after its arrival), and a cancellation wakes an engine
/// that idles (a policy's batching window) so that it lets the request go at once.
#[derive(Clone, Copy, Debug)]
pub enum Told {
    /// A request arrived (stamped: [`stamped`]).
    Arrived(Arrival),
    /// The client of the request under this key ([`Arrival::key`]) went away.
    Cancelled(u64),
}

impl ChannelArrivals {
    /// A source over `rx` on a clock whose zero is `origin`; `expected` requests in all, if
    /// known (0: unknown; it only sizes the queue up front).
    pub fn new(rx: Receiver<Told>, origin: Instant, expected: usize) -> Self {
        ChannelArrivals {
            rx,
            peeked: None,
            total: expected,
            origin,
            give_up: None,
            cancels: Vec::new(),
        }
    }

    /// The same source, giving up the requests in the server once `flag` is set (a front
    /// end's shutdown deadline: [`ArrivalSource::give_up`]).
    pub fn giving_up_on(self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        ChannelArrivals {
            give_up: Some(flag),
            ..self
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

impl ChannelArrivals {
    /// Takes in what was told: an arrival is kept for [`ArrivalSource::poll`], a cancellation
    /// for [`ArrivalSource::cancelled`].
    fn heard(&mut self, told: Told) {
        match told {
            Told::Arrived(a) => self.peeked = Some(a),
            Told::Cancelled(key) => self.cancels.push(key),
        }
    }
}

impl ArrivalSource for ChannelArrivals {
    fn poll(&mut self, _now: Nanos) -> Option<Arrival> {
        while self.peeked.is_none() {
            let told = self.rx.try_recv().ok()?;
            self.heard(told);
        }
        self.peeked.take()
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        if self.peeked.is_some() || !self.cancels.is_empty() {
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
                    Ok(told) => Some(told),
                    Err(RecvTimeoutError::Timeout) => return true,
                    Err(RecvTimeoutError::Disconnected) => {
                        clock.idle_until(t);
                        return true;
                    }
                }
            }
        };
        match got {
            Some(told) => {
                self.heard(told);
                true
            }
            None => until.is_some(),
        }
    }
    fn expected(&self) -> usize {
        self.total
    }
    fn give_up(&self) -> bool {
        self.give_up
            .as_ref()
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst))
    }
    /// A front end sets its give-up flag ([`ChannelArrivals::giving_up_on`]); the one that
    /// cancels requests is such a front end.
    fn may_give_up(&self) -> bool {
        self.give_up.is_some()
    }
    fn cancelled(&mut self, keys: &mut Vec<u64>) {
        keys.append(&mut self.cancels);
    }
}

/// Requests delivered by a generator thread at `origin + arrival.time` (Poisson or a trace),
/// through a [`ChannelArrivals`]. Dropping it (the run ended, or failed, before the schedule
/// did) wakes the generator from its wait for the next arrival and stops it at once.
pub(crate) struct ThreadArrivals {
    channel: ChannelArrivals,
    /// Never sent on: dropped, it wakes the generator, which waits for each arrival on the
    /// other end, and the generator ends.
    stop: Option<mpsc::Sender<()>>,
    generator: Option<JoinHandle<()>>,
}

impl ThreadArrivals {
    /// Starts the generator thread for `schedule` (sorted by time), relative to `origin`.
    pub(crate) fn spawn(schedule: Traffic, origin: Instant) -> Self {
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        let total = schedule.expected;
        let generator = std::thread::spawn(move || {
            for a in schedule.arrivals {
                let due = origin + Duration::from_nanos(a.time.0);
                loop {
                    let now = Instant::now();
                    if due <= now {
                        break;
                    }
                    match stopped.recv_timeout(due - now) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                if tx.send(Told::Arrived(stamped(a, origin))).is_err() {
                    return;
                }
            }
        });
        ThreadArrivals {
            channel: ChannelArrivals::new(rx, origin, total),
            stop: Some(stop),
            generator: Some(generator),
        }
    }
}

impl Drop for ThreadArrivals {
    /// Stops the generator and waits for it to end, so that no thread outlives its source.
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(g) = self.generator.take() {
            let _ = g.join();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Lengths;
    use crate::time::{VirtualClock, WallClock};

    fn arrival(ms: f64) -> Arrival {
        Arrival {
            time: Nanos::from_ms(ms),
            len: Lengths { enc: 1, dec: 1 },
            ..Arrival::default()
        }
    }

    #[test]
    fn a_virtual_source_gives_each_arrival_at_its_time_and_says_when_the_next_is_due() {
        let list = [arrival(1.0), arrival(1.0), arrival(3.0)];
        let mut src = Predrawn::new(&list);
        let mut clock = VirtualClock::new();
        assert_eq!(src.expected(), 3);
        assert_eq!(src.next_due(), Some(Nanos::from_ms(1.0)));
        // not a nanosecond early; both arrivals due at 1 ms at 1 ms, then nothing
        assert!(src.poll(Nanos(Nanos::from_ms(1.0).0 - 1)).is_none());
        for _ in 0..2 {
            let a = src.poll(Nanos::from_ms(1.0)).expect("due at 1 ms");
            assert_eq!(a.time, Nanos::from_ms(1.0));
        }
        assert!(src.poll(Nanos::from_ms(2.9)).is_none());
        assert_eq!(src.next_due(), Some(Nanos::from_ms(3.0)));
        // idle: until the time asked for when it comes first, else until the next arrival
        assert!(src.idle(&mut clock, Some(Nanos::from_ms(2.0))));
        assert_eq!(clock.now(), Nanos::from_ms(2.0));
        assert!(src.idle(&mut clock, Some(Nanos::from_ms(4.0))));
        assert_eq!(clock.now(), Nanos::from_ms(3.0));
        assert!(src.poll(clock.now()).is_some());
        // none left: due never, and idling without a time to wait for ends the run
        assert_eq!(src.next_due(), Some(Nanos::MAX));
        assert!(src.idle(&mut clock, Some(Nanos::from_ms(5.0))));
        assert_eq!(clock.now(), Nanos::from_ms(5.0));
        assert!(!src.idle(&mut clock, None));
        assert_eq!(clock.now(), Nanos::from_ms(5.0));
        // a stream says the count it was given
        assert_eq!(Stream::new(list.iter().copied(), 7).expected(), 7);
    }

    #[test]
    fn a_source_that_says_nothing_more_is_taken_as_unknown_and_ready() {
        struct Bare;
        impl ArrivalSource for Bare {
            fn poll(&mut self, _: Nanos) -> Option<Arrival> {
                None
            }
            fn idle(&mut self, _: &mut dyn Clock, _: Option<Nanos>) -> bool {
                false
            }
        }
        // no count (the queue is sized at its floor) and no time due (no straight runs
        // for a policy that may preempt); ready to say when its next arrival comes
        assert_eq!(Bare.expected(), 0);
        assert_eq!(Bare.next_due(), None);
        assert!(Bare.ready(None) && Bare.ready(Some(Nanos::ZERO)));
    }

    #[test]
    fn arrivals_are_stamped_when_delivered_never_when_scheduled() {
        // an origin 50 ms in the past: arrivals scheduled at 0 and 10 ms are already due and
        // are delivered at once, so their stamps are the real delivery instants (≥ 50 ms)
        let origin = Instant::now() - Duration::from_millis(50);
        let t = Traffic::from_list(vec![arrival(0.0), arrival(10.0), arrival(70.0)]);
        let mut src = ThreadArrivals::spawn(t, origin);
        let mut clock = WallClock::starting_at(origin);
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
    fn a_thread_source_says_its_schedule_s_count() {
        let t = Traffic::from_list(vec![arrival(0.0), arrival(0.0), arrival(0.0)]);
        let src = ThreadArrivals::spawn(t, Instant::now());
        assert_eq!(src.expected(), 3);
        let (_tx, rx) = mpsc::channel();
        assert_eq!(ChannelArrivals::new(rx, Instant::now(), 5).expected(), 5);
    }

    #[test]
    fn dropping_a_thread_source_stops_its_generator_without_waiting_for_the_schedule() {
        // the run ended (an error, say) with an arrival still an hour away: dropping the
        // source must not wait out the hour; a minute is the generous bound of a hang
        let t = Traffic::from_list(vec![arrival(0.0), arrival(3_600_000.0)]);
        let hang = "dropping the source waited for its schedule";
        crate::time::watchdog::within(Duration::from_secs(60), hang, move || {
            let mut src = ThreadArrivals::spawn(t, Instant::now());
            let mut clock = WallClock::start();
            // the first arrival is delivered at once; the generator then waits for the next
            assert!(src.idle(&mut clock, None));
            assert!(src.poll(clock.now()).is_some());
            drop(src);
        });
    }

    #[test]
    fn idle_wakes_at_its_timeout_without_an_arrival() {
        let t = Traffic::from_list(vec![arrival(60_000.0)]);
        let mut clock = WallClock::start();
        let mut src = ThreadArrivals::spawn(t, clock.origin());
        let until = Nanos::from_ms(20.0);
        assert!(src.idle(&mut clock, Some(until)));
        assert!(clock.now() >= until, "woke early at {:?}", clock.now());
        assert!(
            src.poll(clock.now()).is_none(),
            "the arrival is a minute away"
        );
    }
}
