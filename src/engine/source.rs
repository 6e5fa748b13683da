//! Where the engine's requests come from ([`ArrivalSource`]): pre-drawn arrivals on a virtual
//! clock ([`Predrawn`]), arrivals generated as the run asks for them ([`Stream`]), or (in
//! `wall.rs`) a generator thread delivering them at their real instants.

use crate::time::{Clock, Nanos};
use crate::traffic::Arrival;

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
        let next = self.it.peek().map(|a| a.time);
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
    fn expected(&self) -> usize {
        self.expected
    }
    fn next_due(&mut self) -> Option<Nanos> {
        Some(self.it.peek().map_or(Nanos::MAX, |a| a.time))
    }
}
