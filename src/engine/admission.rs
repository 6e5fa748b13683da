//! Admission by predicted latency (`--admit predicted`): at arrival, the slack predictor's
//! estimate of when a request would complete behind the work already in the server; one
//! predicted to miss its deadline is refused at once ([`Rejection::NotAdmitted`]), with the
//! time the work ahead of it would take as the client's `Retry-After`, instead of queueing only
//! to miss its deadline and to delay the requests behind it. `--max-pending` caps the queue
//! by count whatever the requests' deadlines; `--shed` refuses only a request that could not
//! meet its deadline even served alone at once.
//!
//! The estimate, a reading of ours (the paper has no admission control), from how the server
//! has lately served, whatever the policy: its drain time, the time between completions over
//! the requests they completed (a moving average, weight 1/16 a request), and the batch its
//! nodes lately ran at (a moving average over node executions, weight 1/64). The request
//! completes after every request in the server before it has drained, then its own batch's
//! pass through its model (Algorithm 1 at that batch size, [`Predictor::part_latency`], at its
//! predicted lengths); an empty server starts it at once, alone. Before any completion the
//! averages are serial's: the request's pass alone, batch 1.
//!
//! Two readings from the model's batching curve alone were measured first and dropped
//! (docs/traffic.md): the BatchTable's sub-batches to their ends (Algorithm 1 from their next
//! node) and then the queue in batches of the maximum size put serial's admitted requests 25%
//! late, since serial never batches; the queue in batches of the size requests lately
//! completed in put LazyB's GNMT requests, which complete one or two at a time out of batches
//! of dozens, so far behind that it refused two thirds of what it could serve. A policy that
//! reorders (LazyB runs the newest sub-batch first) can still delay an admitted request past
//! its prediction.
//!
//! [`Predictor::part_latency`]: crate::runtime::Predictor::part_latency

use super::Server;
use crate::runtime::{Rejection, Request};
use crate::time::Nanos;

/// Which arrivals the server admits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Admit {
    /// Every arrival the queue has room for (`--max-pending`).
    #[default]
    All,
    /// Only an arrival that the predictor says completes by its deadline behind the work in
    /// the server.
    Predicted,
}

impl Server<'_> {
    /// Why request `q`, arriving at `now`, is refused at admission, if it is.
    pub(super) fn not_admitted(&self, q: &Request, now: Nanos) -> Option<Rejection> {
        match self.setup.admit {
            Admit::All => None,
            Admit::Predicted => {
                let (ahead, done) = self.predicted(q, now);
                (done > q.deadline).then_some(Rejection::NotAdmitted(ahead))
            }
        }
    }

    /// For `q` arriving at `now`: the time the work already in the server takes before `q`'s
    /// batch starts, and `q`'s predicted completion (the module's reading).
    fn predicted(&self, q: &Request, now: Nanos) -> (Nanos, Nanos) {
        let p = self.setup.predictor;
        let (part, mb) = (usize::from(q.part), self.setup.max_batch.get());
        let len = p.predicted_in(part, q.enc_len(), q.dec_done);
        let alone = p.part_latency(part, len, 1);
        let on_table: usize = self.table.entries().iter().map(|e| e.members.len()).sum();
        let before = (on_table + self.infq.len()) as f64;
        if before == 0.0 {
            // an empty server: it starts at once, alone
            return (Nanos::ZERO, now + alone);
        }
        // serial's figures until the server has completed something
        let drain = self.seen.drain.unwrap_or(alone.0 as f64);
        let b = (self.seen.batch.round() as u32).clamp(1, mb);
        let ahead = Nanos((before * drain).round() as u64);
        (ahead, now + ahead + p.part_latency(part, len, b))
    }
}

/// How the server has lately served: the averages [`Server::predicted`] reads.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seen {
    /// Nanoseconds between completions per request completed (None: nothing completed yet).
    drain: Option<f64>,
    /// The sub-batch size its nodes ran at.
    batch: f64,
    /// The last completion.
    last: Option<Nanos>,
}

impl Default for Seen {
    fn default() -> Self {
        Seen {
            drain: None,
            batch: 1.0,
            last: None,
        }
    }
}

impl Seen {
    /// A node ran at batch `batch` and ended at `at`, completing `done` requests.
    pub(super) fn saw(&mut self, at: Nanos, batch: usize, done: usize) {
        self.batch += (batch as f64 - self.batch) / 64.0;
        if done == 0 {
            return;
        }
        if let Some(last) = self.last {
            let per = at.saturating_sub(last).0 as f64 / done as f64;
            // weight 1/16 a request: `done` steps of it at once
            let keep = (15.0f64 / 16.0).powi(done as i32);
            self.drain = Some(match self.drain {
                Some(d) => d * keep + per * (1.0 - keep),
                None => per,
            });
        }
        self.last = Some(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::table::TableDevice;
    use crate::engine::{run, Setup};
    use crate::graph::zoo;
    use crate::profile::Profile;
    use crate::runtime::{MaxBatch, Predictor};
    use crate::time::{Sla, VirtualClock};
    use crate::traffic::Arrival;

    /// A table that prices every node of `m` at 10 us at every batch size (max batch 1), and
    /// its whole pass.
    fn fixed(m: &crate::graph::Model) -> (Profile, Nanos) {
        let each = Nanos(10_000);
        (
            Profile::uniform(m, 1, each),
            Nanos(each.0 * m.nodes.len() as u64),
        )
    }

    /// A run of `m` at SLA 3 ms and max batch 1 under `--admit predicted`.
    fn admitting<'a>(m: &'a crate::graph::Model, pred: &'a Predictor) -> Setup<'a> {
        let mut setup = Setup::new(
            m,
            pred,
            Sla::from_ms(3.0).unwrap(),
            MaxBatch::new(1).unwrap(),
        );
        setup.admit = Admit::Predicted;
        setup
    }

    #[test]
    fn a_request_predicted_to_miss_its_deadline_behind_the_queue_is_refused_with_the_wait() {
        // A table that prices every node at 10 us at every batch size: a pass of ResNet-50's
        // 74 nodes takes 740 us alone or batched. Ten requests at one instant under serial,
        // SLA 3 ms, max batch 1: the request k places behind k others completes at
        // (k + 1) · 740 us, so the first four (2.96 ms) are admitted and the rest refused, each
        // told the wait ahead of it, 4 · 740 us (the four before it, as the queue stood).
        let m = zoo::load("resnet50").unwrap();
        let (profile, pass) = fixed(&m);
        let pred = Predictor::new(&m, &profile, 1);
        let setup = admitting(&m, &pred);
        let mut dev = TableDevice::from_profile(profile, "fixed");
        let arrivals = vec![Arrival::default(); 10];
        for (policy, refused) in [("serial", 6), ("graph:0", 6)] {
            let mut pol = crate::policy::parse(policy, 1).unwrap();
            let mut setup = setup.clone();
            setup.keep.requests = true;
            let out = run(
                &setup,
                &mut dev,
                pol.as_mut(),
                &mut VirtualClock::new(),
                &arrivals,
            )
            .unwrap();
            let st = out.stats();
            assert_eq!(
                (st.completed, st.rejected_not_admitted),
                (4, refused),
                "{policy}"
            );
            assert_eq!(st.rejected, refused, "{policy}");
            // every admitted request met its deadline: the prediction was exact here
            assert_eq!(st.sla_violation_rate, 0.0, "{policy}");
            let four = Nanos(4 * pass.0).as_ms();
            assert!((st.latency_ms.max - four).abs() < 1e-9, "{policy}: {st:?}");
        }
        // without it, all ten are served, six late
        let mut pol = crate::policy::parse("serial", 1).unwrap();
        let mut all = setup.clone();
        all.admit = Admit::All;
        let st = run(
            &all,
            &mut dev,
            pol.as_mut(),
            &mut VirtualClock::new(),
            &arrivals,
        )
        .unwrap()
        .stats();
        assert_eq!((st.completed, st.rejected), (10, 0));
        assert!((st.sla_violation_rate - 0.6).abs() < 1e-12, "{st:?}");
    }

    #[test]
    fn the_wait_told_is_the_work_ahead() {
        // the same table and arrivals, one request at a time into the engine's queue: the
        // fifth is told 4 passes, as above, and the sixth (the queue unchanged: the fifth
        // left) 4 passes too
        let m = zoo::load("resnet50").unwrap();
        let (profile, pass) = fixed(&m);
        let pred = Predictor::new(&m, &profile, 1);
        let mut setup = admitting(&m, &pred);
        let seen = std::sync::Mutex::new(Vec::new());
        #[derive(Debug)]
        struct Told<'a>(&'a std::sync::Mutex<Vec<Rejection>>);
        impl crate::engine::Observer for Told<'_> {
            fn left(&self, _q: &Request, how: crate::engine::Left) {
                if let crate::engine::Left::Rejected(why) = how {
                    self.0.lock().unwrap().push(why);
                }
            }
        }
        let told = Told(&seen);
        setup.observer = Some(&told);
        let mut dev = TableDevice::from_profile(profile, "fixed");
        let mut pol = crate::policy::parse("serial", 1).unwrap();
        let arrivals = vec![Arrival::default(); 6];
        run(
            &setup,
            &mut dev,
            pol.as_mut(),
            &mut VirtualClock::new(),
            &arrivals,
        )
        .unwrap();
        let four = Nanos(4 * pass.0);
        assert_eq!(
            *seen.lock().unwrap(),
            [Rejection::NotAdmitted(four), Rejection::NotAdmitted(four)]
        );
    }
}
