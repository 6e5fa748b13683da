//! The requests in the server, and the account that every request that arrived leaves exactly
//! once. Ids are handed out in arrival order; a request's record lives here only from its
//! arrival to its completion or rejection, in a window from the oldest request still in the
//! server to the newest — so memory follows what is in the server, not the length of the run.
//! Completing or rejecting an id that is not in the server (twice, or never arrived) is an
//! error that names it, and [`Ledger::close`] names the first id that never left. When the
//! window holds far more holes than requests — an old request stays while many later ones
//! come and go, as under a flood of rejections — its oldest requests move to a map of their own
//! and the window closes up behind them, so memory stays with what is in the server at any
//! arrival rate.

use super::request::{Request, RequestId};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, VecDeque};

/// The most holes the window keeps beyond twice the requests in it before its oldest requests
/// move out to [`Ledger`]'s map of stragglers.
const SLACK_HOLES: usize = 1024;

/// Why a request was turned away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The pending queue held its maximum (`--max-pending`).
    QueueFull,
    /// `--shed`: its deadline could no longer be met, even served alone at once.
    Shed,
    /// The server gave it up at a node boundary, queued or part-served: a shutdown's
    /// deadline (`serve --shutdown-timeout-s`) passed before it completed.
    Abandoned,
    /// Its client went away (an HTTP client disconnected, a gRPC call was cancelled) before
    /// it completed: it left the server at the next node boundary, queued or part-served, its
    /// slot freed for the next request and its batch-mates running on without it.
    Cancelled,
    /// Its deadline passed before it completed, and the server let it go at the next node
    /// boundary, queued or part-served (`--abandon-late`).
    Late,
    /// Refused at arrival (`--admit predicted`): behind the work already in the server, the
    /// slack predictor said it would complete past its deadline; the work ahead of it would
    /// have taken this long (a client's `Retry-After`).
    NotAdmitted(crate::time::Nanos),
}

/// The live requests and the count of those that left.
#[derive(Clone, Debug)]
pub struct Ledger {
    /// Id of `live[0]`.
    base: u64,
    /// Requests from `base` on; `None` once they left.
    live: VecDeque<Option<Request>>,
    /// Requests older than `base` still in the server (moved out of a window of holes).
    old: BTreeMap<u64, Request>,
    /// Requests in the server (the `Some`s of `live`).
    in_server: usize,
    arrived: u64,
    completed: u64,
    rejected: u64,
}

impl Ledger {
    /// An empty ledger with room for `capacity` live requests before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        Ledger {
            base: 0,
            live: VecDeque::with_capacity(capacity),
            old: BTreeMap::new(),
            in_server: 0,
            arrived: 0,
            completed: 0,
            rejected: 0,
        }
    }

    /// A ledger holding `requests` (ids 0, 1, … in order), as if they had arrived: for views
    /// built by hand.
    pub fn of(requests: &[Request]) -> Result<Self> {
        let mut l = Ledger::with_capacity(requests.len());
        for q in requests {
            l.arrive(q.clone())?;
        }
        Ok(l)
    }

    /// The id the next arrival gets, or an error when ids are exhausted.
    pub fn next_id(&self) -> Result<RequestId> {
        u32::try_from(self.arrived).map(RequestId).map_err(|_| {
            Error::invalid(
                "--requests",
                format!("a run takes at most {} requests", u32::MAX),
            )
        })
    }

    /// Takes in an arrived request (its id must be [`Ledger::next_id`]).
    pub fn arrive(&mut self, q: Request) -> Result<()> {
        if u64::from(q.id.0) != self.arrived {
            return Err(Error::Internal(format!(
                "request {} arrived out of order (expected {})",
                q.id.0, self.arrived
            )));
        }
        self.arrived += 1;
        self.in_server += 1;
        self.live.push_back(Some(q));
        Ok(())
    }

    /// The request `r`, which must be in the server.
    ///
    /// # Panics
    /// When it is not: a policy or the engine holds an id it should not (a bug, never input).
    pub fn get(&self, r: RequestId) -> &Request {
        let found = match self.slot(r) {
            Some(s) => self.live[s].as_ref(),
            None => self.old.get(&u64::from(r.0)),
        };
        found.unwrap_or_else(|| panic!("request {} is not in the server", r.0))
    }

    /// The request `r`, mutably (see [`Ledger::get`]).
    pub fn get_mut(&mut self, r: RequestId) -> &mut Request {
        let found = match self.slot(r) {
            Some(s) => self.live[s].as_mut(),
            None => self.old.get_mut(&u64::from(r.0)),
        };
        found.unwrap_or_else(|| panic!("request {} is not in the server", r.0))
    }

    fn slot(&self, r: RequestId) -> Option<usize> {
        let k = u64::from(r.0).checked_sub(self.base)?;
        (k < self.live.len() as u64).then_some(k as usize)
    }

    /// Takes `r` out of the server as completed and returns its record; an error when it is not
    /// in the server (completed twice, rejected, or never arrived).
    pub fn complete(&mut self, r: RequestId) -> Result<Request> {
        let q = self.leave(r, "completed")?;
        self.completed += 1;
        Ok(q)
    }

    /// Takes `r` out of the server as rejected (see [`Ledger::complete`]).
    pub fn reject(&mut self, r: RequestId) -> Result<Request> {
        let q = self.leave(r, "rejected")?;
        self.rejected += 1;
        Ok(q)
    }

    fn leave(&mut self, r: RequestId, how: &str) -> Result<Request> {
        let q = match self.slot(r) {
            Some(s) => self.live[s].take(),
            None => self.old.remove(&u64::from(r.0)),
        };
        let q = q.ok_or_else(|| {
            Error::Internal(format!(
                "request {} {how} but it is not in the server (it left before, or never arrived)",
                r.0
            ))
        })?;
        self.in_server -= 1;
        while matches!(self.live.front(), Some(None)) {
            self.live.pop_front();
            self.base += 1;
        }
        // too many holes for the requests in the window: its oldest move out
        let in_window = self.in_server - self.old.len();
        while self.live.len() > 2 * in_window + SLACK_HOLES {
            if let Some(Some(old)) = self.live.pop_front() {
                self.old.insert(self.base, old);
            }
            self.base += 1;
            while matches!(self.live.front(), Some(None)) {
                self.live.pop_front();
                self.base += 1;
            }
        }
        Ok(q)
    }

    /// Requests in the server now.
    pub fn in_server(&self) -> usize {
        self.in_server
    }

    /// (arrived, completed, rejected) so far.
    pub fn counts(&self) -> (u64, u64, u64) {
        (self.arrived, self.completed, self.rejected)
    }

    /// Checks the account at the end of a run: every request that arrived left exactly once.
    pub fn close(&self) -> Result<()> {
        if let Some(q) = self.old.values().chain(self.live.iter().flatten()).next() {
            return Err(Error::Internal(format!(
                "request {} never completed ({} of {} requests still in the server)",
                q.id.0, self.in_server, self.arrived
            )));
        }
        if self.completed + self.rejected != self.arrived {
            return Err(Error::Internal(format!(
                "{} completed + {} rejected != {} arrived",
                self.completed, self.rejected, self.arrived
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Lengths;
    use crate::time::Nanos;

    fn req(l: &Ledger) -> Request {
        let id = l.next_id().unwrap();
        Request::new(id, Nanos(u64::from(id.0)), Nanos(100), Lengths::default())
    }

    #[test]
    fn a_request_leaves_once_and_the_window_follows_the_oldest() {
        let mut l = Ledger::with_capacity(2);
        for _ in 0..4 {
            let q = req(&l);
            l.arrive(q).unwrap();
        }
        l.complete(RequestId(2)).unwrap();
        l.reject(RequestId(0)).unwrap();
        // 0 left and 1 is still here: the window starts at 1
        assert_eq!((l.base, l.live.len(), l.in_server()), (1, 3, 2));
        assert_eq!(l.get(RequestId(3)).id, RequestId(3));
        let e = l.close().unwrap_err().to_string();
        assert!(e.contains("request 1 never completed"), "{e}");
        l.complete(RequestId(1)).unwrap();
        l.complete(RequestId(3)).unwrap();
        assert_eq!((l.live.len(), l.counts()), (0, (4, 3, 1)));
        l.close().unwrap();
    }

    #[test]
    fn memory_follows_the_requests_in_the_server_under_a_flood_of_rejections() {
        let mut l = Ledger::with_capacity(4);
        // one request stays in the server while a million later ones arrive and are turned away
        let q = req(&l);
        l.arrive(q).unwrap();
        for _ in 0..1_000_000 {
            let q = req(&l);
            let id = q.id;
            l.arrive(q).unwrap();
            l.reject(id).unwrap();
            assert!(l.live.len() <= 2 + SLACK_HOLES, "{}", l.live.len());
        }
        // and one arrives that stays too: both still there, by id
        let q = req(&l);
        l.arrive(q).unwrap();
        assert_eq!(l.in_server(), 2);
        assert_eq!(l.get(RequestId(0)).id, RequestId(0));
        assert_eq!(l.get(RequestId(1_000_001)).id, RequestId(1_000_001));
        l.get_mut(RequestId(0)).dec_done = 3;
        let e = l.close().unwrap_err().to_string();
        assert!(e.contains("request 0 never completed"), "{e}");
        assert_eq!(l.complete(RequestId(0)).unwrap().dec_done, 3);
        assert!(l.complete(RequestId(0)).is_err(), "it left already");
        l.complete(RequestId(1_000_001)).unwrap();
        assert_eq!(l.counts(), (1_000_002, 2, 1_000_000));
        l.close().unwrap();
        assert!(l.old.is_empty() && l.live.is_empty());
    }

    #[test]
    fn a_planted_double_completion_is_caught_and_named() {
        let mut l = Ledger::with_capacity(4);
        for _ in 0..3 {
            let q = req(&l);
            l.arrive(q).unwrap();
        }
        l.complete(RequestId(1)).unwrap();
        let e = l.complete(RequestId(1)).unwrap_err().to_string();
        assert!(
            e.contains("request 1 completed but it is not in the server"),
            "{e}"
        );
        // ids that never arrived: far beyond, and the very next one (just past the window)
        for never in [7, 3] {
            let e = l.complete(RequestId(never)).unwrap_err().to_string();
            assert!(e.contains(&format!("request {never}")), "{e}");
        }
        // the first id to leave, gone from the window, cannot leave again either
        l.complete(RequestId(0)).unwrap();
        assert!(l.reject(RequestId(0)).is_err());
    }
}
