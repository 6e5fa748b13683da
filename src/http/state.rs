//! The state the HTTP and gRPC front ends share ([`Front`]) and how a request takes its place
//! in the server before anything of it is buffered: one of `--max-queue` places and a
//! reservation of `--max-inflight-mib`, both held until its handler returns.

use super::metrics::{outcome, Metrics, Waiting};
use super::protocol::Io;
use crate::device::exchange::Exchange;
use crate::engine::Told;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Instant;

/// One model the server serves: a part of the (co-located) model the engine runs, in the
/// protocol's terms.
#[derive(Clone)]
pub(super) struct Hosted {
    pub name: String,
    /// Its part in the engine's model (the arrivals' `part`; 0 for a single model).
    pub part: u16,
    pub input: Io,
    pub output: Io,
    /// The most decoder steps a request may ask for (0: not a seq2seq model).
    pub max_dec: u32,
    /// Decoder steps of a request that names none.
    pub default_dec: u32,
    /// The input's and output's variable-axis lengths at the model's reference lengths (what
    /// the model configuration's dims give for a -1).
    pub reference: (i64, i64),
    /// The SLA of its requests that name none (co-located models' `--slas`; None: the
    /// server's `--sla-ms`).
    pub sla: Option<crate::time::Nanos>,
}

/// The front ends' shared state.
pub(super) struct Front {
    /// The models served, in the engine's part order (one, or several co-located).
    pub models: Vec<Hosted>,
    pub emulated: bool,
    /// The device and the policy, as the metadata reports them.
    pub device: String,
    pub policy: String,
    /// The engine's channel: requests that arrived, and the keys of those whose clients went
    /// away (None once the server shuts down).
    pub tx: Mutex<Option<mpsc::Sender<Told>>>,
    pub origin: Instant,
    pub exchange: Arc<Exchange>,
    pub waiting: Arc<Waiting>,
    pub next_key: AtomicU64,
    /// Requests taken in (from before their body is read) and not yet answered.
    pub admitted: AtomicUsize,
    pub max_queue: usize,
    /// Bytes reserved by the bodies being read, parsed and served ([`Reserved`]).
    pub inflight: AtomicUsize,
    /// The most bytes the bodies in flight may reserve (`--max-inflight-mib`).
    pub max_inflight: usize,
    pub closing: AtomicBool,
    pub metrics: Arc<Metrics>,
    /// The server's maximum batch (activation slots).
    pub max_batch: u32,
    /// The largest body accepted, also once inflated (bytes).
    pub max_body: usize,
    /// The most a body may take to arrive once its headers are in.
    pub body_timeout: std::time::Duration,
}

impl Front {
    /// True once the server is shutting down or its engine has stopped: not ready, and new
    /// requests are refused.
    pub(super) fn closing_down(&self) -> bool {
        self.closing.load(Ordering::SeqCst) || self.waiting.stopped.load(Ordering::SeqCst)
    }

    /// The model served as `name` (at `version`, if given), or why there is none.
    pub(super) fn hosted(&self, name: &str, version: Option<&str>) -> Result<&Hosted, String> {
        let Some(h) = self.models.iter().find(|h| h.name == name) else {
            let names: Vec<String> = self
                .models
                .iter()
                .map(|h| format!("'{}'", h.name))
                .collect();
            return Err(format!(
                "unknown model '{name}' (this server serves {})",
                names.join(", ")
            ));
        };
        match version {
            Some(v) if v != VERSION => Err(format!(
                "unknown version '{v}' of model '{name}' (it has version {VERSION} only)"
            )),
            Some(_) | None => Ok(h),
        }
    }
}

/// The version every model is served at (the protocol's `/versions/{v}/` URLs name it).
pub(super) const VERSION: &str = "1";

/// Holds a request's place among the `--max-queue` admitted from before its body is read until
/// its handler returns (also when the client goes away).
pub(super) struct Taken<'a>(&'a Front);

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        self.0.admitted.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A body's reservation of `--max-inflight-mib`, held until its handler returns: it grows as
/// the body's bytes arrive ([`Reserved::grow`]), so that a client that declares a large body
/// and sends nothing holds none of the budget.
pub(super) struct Reserved<'a>(&'a Front, usize);

impl Reserved<'_> {
    /// Reserves `more` bytes besides what it holds (at most the whole budget for one request,
    /// so that one large request alone is served), or says why not: the outcome and the
    /// message of a 503; what it held stays held until it is dropped.
    pub(super) fn grow(&mut self, more: usize) -> std::result::Result<(), (&'static str, String)> {
        let f = self.0;
        let more = more.min(f.max_inflight.saturating_sub(self.1));
        let before = f.inflight.fetch_add(more, Ordering::SeqCst);
        if before + more > f.max_inflight {
            f.inflight.fetch_sub(more, Ordering::SeqCst);
            let msg = format!(
                "overloaded: the request bodies in flight hold {before} of {} bytes (--max-inflight-mib); this one would reserve {} more",
                f.max_inflight, more
            );
            return Err((outcome::OVERLOADED, msg));
        }
        self.1 += more;
        Ok(())
    }

    /// The bytes it holds.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.1
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(self.1, Ordering::SeqCst);
    }
}

/// Takes a place for a request before its body is read, or says why not (the outcome it is
/// counted under, and the message of its 503): the server is shutting down, `--max-queue`
/// requests are in, or the bodies in flight hold `--max-inflight-mib`.
pub(super) fn take_in(
    f: &Front,
    need: usize,
) -> std::result::Result<(Taken<'_>, Reserved<'_>), (&'static str, String)> {
    if f.closing_down() {
        let msg = "the server is shutting down".into();
        return Err((outcome::SHUTTING_DOWN, msg));
    }
    if f.admitted.fetch_add(1, Ordering::SeqCst) >= f.max_queue {
        f.admitted.fetch_sub(1, Ordering::SeqCst);
        let msg = format!(
            "queue full: {} requests are in the server (--max-queue)",
            f.max_queue
        );
        return Err((outcome::QUEUE_FULL, msg));
    }
    let taken = Taken(f);
    let before = f.inflight.fetch_add(need, Ordering::SeqCst);
    if before + need > f.max_inflight {
        f.inflight.fetch_sub(need, Ordering::SeqCst);
        let msg = format!(
            "overloaded: the request bodies in flight hold {} of {} bytes (--max-inflight-mib); this one would reserve {need}",
            before, f.max_inflight
        );
        return Err((outcome::OVERLOADED, msg));
    }
    Ok((taken, Reserved(f, need)))
}

/// A front end for the eight-node fixture with nobody behind it (the front ends' unit tests).
#[cfg(test)]
pub(super) use tests::{owned_front, test_front};

#[cfg(test)]
mod tests {
    use super::super::front::describe;
    use super::*;

    /// A front end for the eight-node fixture with nobody behind it.
    pub(in crate::http) fn test_front() -> Arc<Front> {
        let m = crate::graph::zoo::fixture("eight_nodes.toml");
        let hosted = describe(&m, 0).unwrap();
        let exchange = Arc::new(Exchange::new());
        let metrics = Arc::new(Metrics::new(&m, 8));
        let waiting = Arc::new(Waiting::new(exchange.clone(), metrics.clone()));
        Arc::new(Front {
            models: vec![hosted],
            emulated: true,
            device: "test".into(),
            policy: "serial".into(),
            tx: Mutex::new(None),
            origin: Instant::now(),
            exchange,
            waiting,
            next_key: AtomicU64::new(1),
            admitted: AtomicUsize::new(0),
            max_queue: 4,
            inflight: AtomicUsize::new(0),
            max_inflight: 64 << 20,
            closing: AtomicBool::new(false),
            metrics,
            max_batch: 8,
            max_body: 1 << 20,
            body_timeout: std::time::Duration::from_secs(30),
        })
    }

    /// [`test_front`], owned: its fields can be changed.
    pub(in crate::http) fn owned_front() -> Front {
        let Ok(f) = Arc::try_unwrap(test_front()) else {
            unreachable!("a fresh front has one owner")
        };
        f
    }

    /// The test front with room for `max_queue` requests and `max_inflight` bytes.
    fn sized(max_queue: usize, max_inflight: usize) -> Front {
        let f = owned_front();
        Front {
            max_queue,
            max_inflight,
            ..f
        }
    }

    #[test]
    fn a_place_is_taken_up_to_max_queue_and_given_back_when_its_handler_returns() {
        let f = sized(2, 1000);
        let a = take_in(&f, 1).unwrap();
        let b = take_in(&f, 1).unwrap();
        let Err((why, msg)) = take_in(&f, 1) else {
            panic!("a third request in a queue of two")
        };
        assert_eq!(why, outcome::QUEUE_FULL);
        assert!(msg.contains("queue full: 2 requests"), "{msg}");
        // the refused one held nothing
        assert_eq!(f.admitted.load(Ordering::SeqCst), 2);
        assert_eq!(f.inflight.load(Ordering::SeqCst), 2);
        drop(a);
        assert_eq!(f.admitted.load(Ordering::SeqCst), 1);
        assert_eq!(f.inflight.load(Ordering::SeqCst), 1);
        let c = take_in(&f, 1).unwrap();
        drop((b, c));
        assert_eq!(f.admitted.load(Ordering::SeqCst), 0);
        assert_eq!(f.inflight.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn bodies_reserve_up_to_max_inflight_exactly() {
        let f = sized(10, 1000);
        let a = take_in(&f, 600).unwrap();
        // exactly the rest fits; a byte more does not, and leaves nothing reserved
        let Err((why, msg)) = take_in(&f, 401) else {
            panic!("1001 bytes reserved of 1000")
        };
        assert_eq!(why, outcome::OVERLOADED);
        assert!(
            msg.contains("hold 600 of 1000 bytes") && msg.ends_with("reserve 401"),
            "{msg}"
        );
        assert_eq!(f.inflight.load(Ordering::SeqCst), 600);
        assert_eq!(f.admitted.load(Ordering::SeqCst), 1);
        let b = take_in(&f, 400).unwrap();
        assert_eq!(f.inflight.load(Ordering::SeqCst), 1000);
        drop(a);
        assert_eq!(f.inflight.load(Ordering::SeqCst), 400);
        drop(b);
        assert_eq!(f.inflight.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_closing_server_or_a_stopped_engine_takes_nothing_in() {
        let f = sized(10, 1000);
        assert!(!f.closing_down());
        f.closing.store(true, Ordering::SeqCst);
        assert!(f.closing_down());
        let Err((why, _)) = take_in(&f, 1) else {
            panic!("taken in while closing")
        };
        assert_eq!(why, outcome::SHUTTING_DOWN);
        assert_eq!(f.admitted.load(Ordering::SeqCst), 0);
        let g = sized(10, 1000);
        g.waiting.stopped.store(true, Ordering::SeqCst);
        assert!(g.closing_down());
        assert!(take_in(&g, 1).is_err());
    }

    #[test]
    fn a_model_is_found_by_name_at_its_one_version() {
        let f = sized(1, 1);
        let name = f.models[0].name.clone();
        assert_eq!(f.hosted(&name, None).unwrap().name, name);
        assert_eq!(f.hosted(&name, Some(VERSION)).unwrap().name, name);
        let e = f.hosted(&name, Some("2")).err().unwrap();
        assert_eq!(
            e,
            format!("unknown version '2' of model '{name}' (it has version 1 only)")
        );
        let e = f.hosted("nope", None).err().unwrap();
        assert_eq!(
            e,
            format!("unknown model 'nope' (this server serves '{name}')")
        );
    }
}
