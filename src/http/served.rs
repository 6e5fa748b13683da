//! One checked request through the engine, whichever protocol brought it (HTTP/JSON or gRPC):
//! its input goes into the device's exchange, its arrival down the engine's channel, and the
//! engine's observer answers it as it leaves — with its outputs shaped as the model's output,
//! or turned away with the outcome it is counted under. Each request is counted here exactly
//! once (completed or refused), so both protocols count alike.

use super::metrics::{outcome, rejected};
use super::protocol::Checked;
use super::state::{Front, Hosted};
use crate::engine::{stamped, Left, Told};
use crate::graph::Lengths;
use crate::runtime::Rejection;
use crate::traffic::Arrival;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::oneshot;

/// What an answer from a model device (which computes nothing) says of its outputs, in its
/// parameter `timing_emulation`.
pub(super) const EMULATED: &str =
    "the NPU model's latency for the batch this request ran in; no values computed (zeros)";

/// What became of a request.
pub(super) enum Served {
    /// Completed: its output's values (zeros on a model device, which computes none), their
    /// shape, and its latency in the engine.
    Done {
        values: Vec<f32>,
        shape: Vec<usize>,
        latency: Duration,
    },
    /// Turned away, and counted so (503, or gRPC's UNAVAILABLE): why.
    Refused(String),
    /// Not admitted (`--admit predicted`), and counted so (429 with `Retry-After`, or gRPC's
    /// RESOURCE_EXHAUSTED with `retry-after`): why, and the seconds to wait, at least 1 (the
    /// work ahead of it, rounded up).
    NotAdmitted(String, u64),
    /// The server failed it (500, or INTERNAL): why.
    Failed(String),
}

/// Counts a request in the server until it is answered (also when its client goes away, and
/// then its reply slot goes too, so the observer hears nobody is waiting). A client that goes
/// away (its handler dropped) before the answer, once the request was handed to the engine,
/// cancels it: the engine lets it go at its next node boundary (`engine::cancel`). While the
/// server shuts down it does not: connections the server itself drops at its limit are no
/// client's leaving, and what the engine holds then is given up as `abandoned`.
struct Admitted<'a> {
    front: &'a Front,
    key: u64,
    /// Handed to the engine.
    sent: bool,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let f = self.front;
        let unanswered = f
            .waiting
            .replies
            .lock()
            .map(|mut w| w.remove(&self.key).is_some())
            .unwrap_or(false);
        if unanswered && self.sent && !f.closing_down() {
            if let Ok(Some(tx)) = f.tx.lock().as_deref() {
                // the engine gone: nothing to tell
                let _ = tx.send(Told::Cancelled(self.key));
            }
        }
        f.metrics.in_server.dec();
    }
}

/// Refuses a request for `h` with `outcome`, counted.
fn refused(f: &Front, h: &Hosted, outcome: &'static str, msg: &str) -> Served {
    f.metrics.count(Some(h.part), outcome);
    Served::Refused(msg.to_string())
}

/// Serves `req` for model `h` and says how it left, with the key it was served under (the
/// default `id` of its answer).
pub(super) async fn serve(f: &Front, h: &Hosted, mut req: Checked) -> (Served, u64) {
    let key = f.next_key.fetch_add(1, Ordering::SeqCst);
    if f.closing_down() {
        let msg = "the server is shutting down";
        return (refused(f, h, outcome::SHUTTING_DOWN, msg), key);
    }
    f.metrics.in_server.inc();
    let mut admitted = Admitted {
        front: f,
        key,
        sent: false,
    };
    let (reply, answer) = oneshot::channel();
    if let Ok(mut w) = f.waiting.replies.lock() {
        w.insert(key, reply);
    }
    let dec = if h.max_dec > 0 {
        req.decode_steps.unwrap_or(h.default_dec)
    } else {
        1
    };
    if !f.emulated {
        // the device computes on it (a model device computes nothing)
        f.exchange.put_input(key, std::mem::take(&mut req.values));
    }
    let arrival = Arrival {
        key: Some(key),
        part: h.part,
        sla: req.sla.or(h.sla),
        len: Lengths {
            enc: req.len as u32,
            dec,
        },
        ..Arrival::default()
    };
    let arrival = stamped(arrival, f.origin);
    let sent =
        f.tx.lock()
            .ok()
            .and_then(|t| t.as_ref().map(|t| t.send(Told::Arrived(arrival)).is_ok()))
            .unwrap_or(false);
    if !sent {
        f.exchange.take_input(key);
        let msg = "the server is shutting down";
        return (refused(f, h, outcome::SHUTTING_DOWN, msg), key);
    }
    f.waiting.sent_one();
    admitted.sent = true;
    let Ok((how, latency)) = answer.await else {
        let msg = "the engine stopped before answering".to_string();
        return (Served::Failed(msg), key);
    };
    if let Left::Rejected(why) = how {
        let msg = match why {
            Rejection::Shed => "shed: its deadline could no longer be met (--shed)",
            Rejection::QueueFull => {
                "queue full: the engine's pending queue is full (--max-pending)"
            }
            Rejection::Abandoned => {
                "abandoned: the server shut down before it completed (--shutdown-timeout-s)"
            }
            Rejection::Cancelled => "cancelled: its client went away before it completed",
            Rejection::Late => {
                "late: its deadline passed before it completed, and the server let it go (--abandon-late)"
            }
            Rejection::NotAdmitted(ahead) => {
                f.metrics.count(Some(h.part), rejected(why));
                let wait = ahead.as_secs().ceil().max(1.0) as u64;
                let msg = format!(
                    "not admitted: behind the work in the server it would miss its deadline \
                     (--admit predicted); that work takes {:.1} ms",
                    ahead.as_ms()
                );
                return (Served::NotAdmitted(msg, wait), key);
            }
        };
        return (refused(f, h, rejected(why), msg), key);
    }
    (output(f, h, key, dec, latency), key)
}

/// Request `key`'s output as the device handed it over, shaped as the model's output for
/// `dec` decoder steps. It is counted completed, as the engine counts it, also when the device
/// handed over values that do not fit (a failure then, 500).
fn output(f: &Front, h: &Hosted, key: u64, dec: u32, latency: Duration) -> Served {
    f.metrics.count(Some(h.part), outcome::COMPLETED);
    let shape: Vec<usize> = h
        .output
        .shape
        .iter()
        .map(|&d| if d < 0 { dec as usize } else { d as usize })
        .collect();
    let n: usize = shape.iter().product();
    let values = match (f.emulated, f.exchange.take_output(key)) {
        (true, _) => vec![0.0; n],
        (false, Some(v)) if v.len() == n => v,
        // the decoder ran padded steps (graph batching pads to the longest member's length):
        // the request's own steps come first
        (false, Some(mut v))
            if h.max_dec > 0 && v.len() > n && v.len().is_multiple_of(n / dec as usize) =>
        {
            v.truncate(n);
            v
        }
        (false, got) => {
            return Served::Failed(format!(
                "the device handed over {} output values for shape {shape:?} ({n})",
                got.map_or(0, |v| v.len())
            ))
        }
    };
    Served::Done {
        values,
        shape,
        latency,
    }
}

#[cfg(test)]
mod tests {
    use super::super::state::owned_front;
    use super::*;

    #[test]
    fn outputs_that_do_not_fit_the_models_shape_fail_the_request_which_still_counts_completed() {
        // a computing device (not emulated): the values handed over are the answer
        let f = Front {
            emulated: false,
            ..owned_front()
        };
        let h = &f.models[0];
        let dec = h.default_dec;
        let n: usize = h
            .output
            .shape
            .iter()
            .map(|&d| if d < 0 { dec as usize } else { d as usize })
            .product();
        let failed = |s: Served| match s {
            Served::Failed(msg) => msg,
            Served::Done { .. } => panic!("answered 200"),
            Served::Refused(msg) | Served::NotAdmitted(msg, _) => panic!("refused: {msg}"),
        };
        f.exchange.put_output(1, vec![1.5; n]);
        match output(&f, h, 1, dec, Duration::ZERO) {
            Served::Done { values, shape, .. } => {
                assert_eq!((values.len(), values[0]), (n, 1.5));
                assert_eq!(shape.iter().product::<usize>(), n);
            }
            _ => panic!("request 1 fits"),
        }
        // one value too many, and none at all: 500, saying what came
        f.exchange.put_output(2, vec![1.5; n + 1]);
        let msg = failed(output(&f, h, 2, dec, Duration::ZERO));
        assert!(
            msg.contains(&format!("handed over {} output values", n + 1)),
            "{msg}"
        );
        let msg = failed(output(&f, h, 3, dec, Duration::ZERO));
        assert!(msg.contains("handed over 0 output values"), "{msg}");
        // the engine completed all three: each is counted once, as the engine counts it
        let done = f
            .metrics
            .by_outcome()
            .into_iter()
            .find(|(o, _)| *o == outcome::COMPLETED)
            .map(|(_, c)| c);
        assert_eq!(done, Some(3));
        assert_eq!(f.exchange.held(), (0, 0));
    }

    #[test]
    fn a_decoders_padded_steps_are_cut_to_its_own_and_anything_else_that_misfits_fails() {
        // a seq2seq output of 3 values a step, 2 steps asked: 6 values
        let mut f = owned_front();
        f.emulated = false;
        f.models[0].output.shape = vec![1, -1, 3];
        f.models[0].max_dec = 4;
        let h = &f.models[0];
        let step = |k: usize| (0..3).map(move |i| (10 * k + i) as f32);
        let steps = |n: usize| (0..n).flat_map(step).collect::<Vec<f32>>();
        let answer = |key: u64, values: Vec<f32>| {
            f.exchange.put_output(key, values);
            output(&f, h, key, 2, Duration::ZERO)
        };
        // exactly its steps, and padded to 3 or 4 steps (graph batching): its own first two
        for (key, n) in [(1, 2), (2, 3), (3, 4)] {
            match answer(key, steps(n)) {
                Served::Done { values, shape, .. } => {
                    assert_eq!((values, shape), (steps(2), vec![1, 2, 3]), "{n} steps");
                }
                _ => panic!("{n} steps of 3 values fit"),
            }
        }
        // one step short, or not whole steps: 500
        for (key, values) in [(4, steps(1)), (5, vec![0.0; 7])] {
            let n = values.len();
            match answer(key, values) {
                Served::Failed(msg) => assert!(msg.contains(&format!("handed over {n} ")), "{msg}"),
                _ => panic!("{n} values do not fit"),
            }
        }
        // a model without a decoder has no padded steps to cut
        let mut f = owned_front();
        f.emulated = false;
        f.models[0].output.shape = vec![1, 2, 3];
        f.exchange.put_output(6, steps(4));
        assert!(matches!(
            output(&f, &f.models[0], 6, 2, Duration::ZERO),
            Served::Failed(_)
        ));
        // a fixed axis of length 0 stays 0 (a model device answers zeros in that shape)
        let mut f = owned_front();
        f.models[0].output.shape = vec![1, -1, 0];
        match output(&f, &f.models[0], 7, 2, Duration::ZERO) {
            Served::Done { values, shape, .. } => {
                assert_eq!((values.len(), shape), (0, vec![1, 2, 0]))
            }
            _ => panic!("an emulated answer is always done"),
        }
        let done = f
            .metrics
            .by_outcome()
            .into_iter()
            .find(|(o, _)| *o == outcome::COMPLETED);
        assert_eq!(done, Some((outcome::COMPLETED, 1)));
    }

    use crate::engine::Observer;
    use crate::runtime::{Rejection, Request, RequestId};
    use crate::time::Nanos;

    fn checked(values: Vec<f32>, sla: Option<Nanos>, decode_steps: Option<u32>) -> Checked {
        Checked {
            values,
            len: 1,
            sla,
            decode_steps,
            binary_output: false,
            id: None,
        }
    }

    /// Serves `req` for model `m` of `f`, the engine played by `engine`, which is handed the
    /// arrival the server sent (None: none came) and says how the request leaves.
    fn served_by(
        f: &Front,
        m: usize,
        req: Checked,
        engine: impl FnOnce(&Arrival) -> Left,
    ) -> (Served, Option<Arrival>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let had = f.tx.lock().unwrap().is_some();
        if had {
            *f.tx.lock().unwrap() = Some(tx);
        }
        let h = &f.models[m];
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let play = async {
                if !had {
                    return None;
                }
                let a = loop {
                    if let Ok(crate::engine::Told::Arrived(a)) = rx.try_recv() {
                        break a;
                    }
                    tokio::task::yield_now().await;
                };
                let mut q = Request::new(RequestId(0), Nanos(0), Nanos(1), a.len);
                (q.key, q.part) = (a.key.unwrap(), a.part);
                f.waiting.left(&q, engine(&a));
                Some(a)
            };
            let ((s, _), a) = tokio::join!(serve(f, h, req), play);
            (s, a)
        })
    }

    /// A front whose engine is there (it takes arrivals) or not, computing or not, serving its
    /// model and a second copy of it as part 1 (a decoder of up to 4 steps, 2 by default, its
    /// SLA 7 ms).
    fn front(engine: bool, emulated: bool) -> Front {
        let mut f = owned_front();
        let mut other = f.models[0].clone();
        other.name = "other".into();
        (other.part, other.max_dec, other.default_dec) = (1, 4, 2);
        other.output.shape = vec![1, -1, 4];
        other.sla = Some(Nanos::from_ms(7.0));
        f.models.push(other);
        f.emulated = emulated;
        if engine {
            let (tx, _) = std::sync::mpsc::channel();
            f.tx = std::sync::Mutex::new(Some(tx));
        }
        f
    }

    fn counted(f: &Front, o: &str) -> u64 {
        let by = f.metrics.by_outcome();
        by.into_iter().find(|(k, _)| *k == o).map_or(0, |(_, n)| n)
    }

    #[test]
    fn a_request_reaches_the_engine_as_its_arrival_and_its_answer_is_what_the_engine_says() {
        // a computing device: the input goes into the exchange before the arrival
        let f = front(true, false);
        let (s, a) = served_by(
            &f,
            0,
            checked(vec![0.5; 4], Some(Nanos::from_ms(9.0)), None),
            |a| {
                let key = a.key.unwrap();
                assert_eq!(f.exchange.take_input(key), Some(vec![0.5; 4]));
                f.exchange.put_output(key, vec![2.0; 4]);
                Left::Completed(Nanos(5))
            },
        );
        let a = a.unwrap();
        assert_eq!(
            (a.part, a.sla, a.len),
            (0, Some(Nanos::from_ms(9.0)), Lengths { enc: 1, dec: 1 })
        );
        assert!(a.key.unwrap() > 0);
        assert!(matches!(s, Served::Done { values, .. } if values == vec![2.0; 4]));
        // a decoder, part 1, no SLA of its own: its model's; its default steps, or those asked
        for (asked, dec) in [(None, 2), (Some(3), 3)] {
            let (s, a) = served_by(&f, 1, checked(vec![0.0; 4], None, asked), |a| {
                f.exchange
                    .put_output(a.key.unwrap(), vec![1.0; 4 * dec as usize]);
                Left::Completed(Nanos(5))
            });
            let a = a.unwrap();
            assert_eq!(
                (a.part, a.sla, a.len.dec),
                (1, Some(Nanos::from_ms(7.0)), dec)
            );
            assert!(matches!(s, Served::Done { shape, .. } if shape == vec![1, dec as usize, 4]));
        }
        assert_eq!(f.exchange.held(), (0, 0));
        // a model device computes nothing: no input is handed over
        let f = front(true, true);
        let (_, a) = served_by(&f, 0, checked(vec![0.5; 4], None, None), |a| {
            assert_eq!(f.exchange.take_input(a.key.unwrap()), None);
            Left::Completed(Nanos(5))
        });
        assert_eq!(
            a.unwrap().sla,
            None,
            "the server's --sla-ms, which the engine applies"
        );
    }

    #[test]
    fn a_request_turned_away_is_refused_with_why_and_counted_once() {
        let f = front(true, false);
        for (why, says, o) in [
            (Rejection::Shed, "shed:", outcome::SHED),
            (Rejection::QueueFull, "queue full:", outcome::QUEUE_FULL),
            (Rejection::Late, "late:", outcome::LATE),
            (Rejection::Cancelled, "cancelled:", outcome::CANCELLED),
        ] {
            let (s, _) = served_by(&f, 0, checked(vec![0.5; 4], None, None), |_| {
                Left::Rejected(why)
            });
            assert!(
                matches!(&s, Served::Refused(msg) if msg.starts_with(says)),
                "{says}"
            );
            assert_eq!(counted(&f, o), 1, "{o}");
        }
        // not admitted (--admit predicted): why, and the wait ahead rounded up to whole
        // seconds, at least one (Retry-After takes seconds)
        for (ahead_ms, wait) in [(0.3, 1), (2_500.0, 3), (4_000.0, 4)] {
            let (s, _) = served_by(&f, 0, checked(vec![0.5; 4], None, None), |_| {
                Left::Rejected(Rejection::NotAdmitted(Nanos::from_ms(ahead_ms)))
            });
            assert!(
                matches!(&s, Served::NotAdmitted(msg, w) if msg.starts_with("not admitted:") && *w == wait),
                "{ahead_ms} ms"
            );
        }
        assert_eq!(counted(&f, outcome::NOT_ADMITTED), 3);
        // no engine to send to: shutting down, and the input taken back
        let f = front(false, false);
        let (s, a) = served_by(&f, 0, checked(vec![0.5; 4], None, None), |_| unreachable!());
        assert!(a.is_none());
        assert!(matches!(&s, Served::Refused(msg) if msg.contains("shutting down")));
        assert_eq!(counted(&f, outcome::SHUTTING_DOWN), 1);
        assert_eq!(f.exchange.held(), (0, 0));
        assert_eq!(
            f.waiting.replies.lock().unwrap().len(),
            0,
            "its reply slot gone"
        );
    }
}
