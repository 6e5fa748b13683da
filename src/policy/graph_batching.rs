//! `graph:W[:B]`: graph batching as Triton and TF-Serving do it. When the device is free, wait
//! until B requests are pending or the oldest has waited W; then run the whole graph on that
//! batch without interruption. A seq2seq batch runs to its longest member's lengths and every
//! member completes at the end.
//!
//! With co-located models the paper says only that it follows PREMA's methodology, so two
//! readings are kept side by side. `graph:W[:B]` keeps **one queue** for every model: a batch
//! is the B oldest requests of any model, its window runs from the oldest, and the models'
//! padded batches run back to back, the oldest request's model first. `graph:W[:B]:per-model`
//! keeps **a queue per model**, as Triton's per-model dynamic batcher does: each model batches
//! its own requests with its own window (B of its own, or its oldest has waited W), and the
//! device runs one batch at a time, the model whose oldest request is oldest first among those
//! ready. With one model the two are the same.

use super::spec::{window_and_batch, Entry, ParamError, Parsed};
use super::{Decision, Policy, View};
use crate::time::Nanos;

/// Graph batching with a time window and a maximum batch.
#[derive(Clone, Debug)]
pub struct GraphBatching {
    window: Nanos,
    max_batch: u32,
    name: String,
    /// A queue per co-located model (`:per-model`).
    per_model: bool,
    /// Per model: its pending requests and its oldest one's arrival (scratch).
    queues: Vec<(usize, Option<Nanos>)>,
}

impl GraphBatching {
    /// Window `window`, at most `max_batch` requests per batch.
    pub fn new(window: Nanos, max_batch: u32, name: &str) -> Self {
        GraphBatching {
            window,
            max_batch: max_batch.max(1),
            name: name.to_string(),
            per_model: false,
            queues: Vec::new(),
        }
    }

    /// The same with a queue per co-located model.
    pub fn per_model(self) -> Self {
        GraphBatching {
            per_model: true,
            ..self
        }
    }

    /// On an idle device, with a queue per model: the batch of the ready model whose oldest
    /// request is oldest, else wait for the earliest window to close.
    fn start_model_batch(&mut self, v: &View) -> Decision {
        let cap = (self.max_batch as usize).min(v.free_slots()).max(1);
        self.queues.clear();
        self.queues.resize(v.model.parts.len(), (0, None));
        for &r in v.infq.iter() {
            let q = &mut self.queues[v.part(r)];
            q.0 += 1;
            q.1.get_or_insert_with(|| v.arrival(r));
        }
        let ready = |&(n, oldest): &(usize, Option<Nanos>)| {
            oldest.is_some_and(|a| n >= cap || v.now >= a + self.window)
        };
        let first = self
            .queues
            .iter()
            .enumerate()
            .filter(|(_, q)| ready(q))
            .min_by_key(|(_, q)| q.1);
        match first {
            Some((part, &(n, _))) => Decision::AdmitModel {
                part: part as u16,
                count: n.min(cap),
                pad: true,
            },
            None => match self.queues.iter().filter_map(|q| q.1).min() {
                Some(oldest) => Decision::WaitUntil(oldest + self.window),
                None => Decision::Run,
            },
        }
    }
}

impl Policy for GraphBatching {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn never_preempts(&self) -> bool {
        true
    }
    fn decide(&mut self, v: &View) -> Decision {
        if !v.table.is_empty() {
            return Decision::Run;
        }
        if self.per_model && v.model.parts.len() > 1 {
            return self.start_model_batch(v);
        }
        start_batch(v, self.window, self.max_batch, true)
    }
}

/// On an idle device: admit up to `max_batch` pending requests once that many wait or the
/// oldest has waited `window`, padded to their longest lengths when `pad`; else wait.
pub(super) fn start_batch(v: &View, window: Nanos, max_batch: u32, pad: bool) -> Decision {
    let Some(&oldest) = v.infq.front() else {
        return Decision::Run;
    };
    let cap = (max_batch as usize).min(v.free_slots()).max(1);
    let due = v.arrival(oldest) + window;
    if v.infq.len() >= cap || v.now >= due {
        Decision::Admit {
            count: v.infq.len().min(cap),
            pad,
        }
    } else {
        Decision::WaitUntil(due)
    }
}

/// `graph:W[:B][:per-model]`.
pub(crate) const ENTRY: Entry = Entry {
    names: &["graph"],
    variant: None,
    usage: "graph:W[:B][:per-model]",
    examples: &["graph:0:1", "graph:2", "graph:10:4", "graph:10:4:per-model"],
    parse: parse_graph,
};

fn parse_graph(_: &str, params: &[&str], max: u32) -> std::result::Result<Parsed, ParamError> {
    let (params, per_model) = match params.split_last() {
        Some((&"per-model", rest)) => (rest, true),
        _ => (params, false),
    };
    let (w, b) = window_and_batch(params, max, "graph:W, graph:W:B or graph:W[:B]:per-model")?;
    Ok(Parsed::plain(move |name| {
        let g = GraphBatching::new(w, b, name);
        Box::new(if per_model { g.per_model() } else { g })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{zoo, Lengths};
    use crate::profile::Profile;
    use crate::runtime::{BatchTable, InfQ, Ledger, Predictor, Request, RequestId};

    fn decide(window_ms: f64, max_batch: u32, waiting: u32, now_ms: f64) -> Decision {
        let m = zoo::fixture("eight_nodes.toml");
        let p = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
        let len = Lengths { enc: 1, dec: 1 };
        // request i arrived at i ms
        let requests: Vec<Request> = (0..waiting)
            .map(|i| {
                let at = Nanos::from_ms(f64::from(i));
                Request::new(RequestId(i), at, Nanos::from_ms(100.0), len)
            })
            .collect();
        let mut queue = InfQ::with_capacity(8);
        requests.iter().for_each(|r| queue.push(r.id));
        let table = BatchTable::new(8);
        let ledger = Ledger::of(&requests).unwrap();
        let v = View::new(Nanos::from_ms(now_ms), &m, &queue, &table, &p, 8, &ledger);
        GraphBatching::new(Nanos::from_ms(window_ms), max_batch, "graph").decide(&v)
    }

    #[test]
    fn waits_for_the_window_of_the_oldest_request_or_a_full_batch() {
        let admit = |count| Decision::Admit { count, pad: true };
        // two waiting, window 5 ms from the oldest (arrived at 0)
        assert_eq!(
            decide(5.0, 8, 2, 3.0),
            Decision::WaitUntil(Nanos::from_ms(5.0))
        );
        assert_eq!(decide(5.0, 8, 2, 5.0), admit(2));
        // a full batch goes at once, and no more than the maximum
        assert_eq!(decide(5.0, 2, 3, 2.0), admit(2));
        // exactly B pending is a full batch; one short of B waits for the window
        assert_eq!(decide(5.0, 3, 3, 2.0), admit(3));
        assert_eq!(
            decide(5.0, 4, 3, 2.0),
            Decision::WaitUntil(Nanos::from_ms(5.0))
        );
        // the window closes exactly W after the oldest arrival, not a nanosecond later
        assert_eq!(
            decide(5.0, 8, 2, 4.999999),
            Decision::WaitUntil(Nanos::from_ms(5.0))
        );
        // graph:0 never waits
        assert_eq!(decide(0.0, 8, 1, 0.0), admit(1));
    }
}

#[cfg(test)]
mod per_model_tests {
    use super::*;
    use crate::graph::{zoo, Lengths, Model};
    use crate::profile::Profile;
    use crate::runtime::{BatchTable, InfQ, Ledger, Predictor, Request, RequestId};

    /// Two co-located models; `queue` lists (model, arrival ms) oldest first, decided at `now`
    /// ms on an idle device by graph:5:`b`, shared queue or per model.
    fn decide(queue: &[(u16, f64)], b: u32, now: f64, per_model: bool) -> Decision {
        let m = Model::compose(vec![
            zoo::fixture("eight_nodes.toml"),
            zoo::fixture("grouped_convs.toml"),
        ]);
        let p = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
        let requests: Vec<Request> = queue
            .iter()
            .enumerate()
            .map(|(i, &(part, at))| {
                let len = Lengths { enc: 1, dec: 1 };
                let mut r = Request::new(
                    RequestId(i as u32),
                    Nanos::from_ms(at),
                    Nanos::from_ms(100.0),
                    len,
                );
                r.part = part;
                r
            })
            .collect();
        let mut infq = InfQ::with_capacity(8);
        requests.iter().for_each(|r| infq.push(r.id));
        let table = BatchTable::new(8);
        let ledger = Ledger::of(&requests).unwrap();
        let v = View::new(Nanos::from_ms(now), &m, &infq, &table, &p, 8, &ledger);
        let g = GraphBatching::new(Nanos::from_ms(5.0), b, "graph");
        let mut g = if per_model { g.per_model() } else { g };
        g.decide(&v)
    }

    #[test]
    fn each_model_batches_its_own_requests_with_its_own_window() {
        // model 0's request at 0 ms, model 1's three at 1, 2 and 3 ms; batches of at most 3
        let q = [(0, 0.0), (1, 1.0), (1, 2.0), (1, 3.0)];
        // one queue: at 3 ms four wait, a full batch of the three oldest of any model
        assert_eq!(
            decide(&q, 3, 3.0, false),
            Decision::Admit {
                count: 3,
                pad: true
            }
        );
        // a queue per model: model 1's three are a full batch of its own and go now, while
        // model 0's one waits for its window
        assert_eq!(
            decide(&q, 3, 3.0, true),
            Decision::AdmitModel {
                part: 1,
                count: 3,
                pad: true
            }
        );
        // with room for four, no model is full: wait for the earliest window (model 0's, 5 ms)
        assert_eq!(
            decide(&q, 4, 3.0, true),
            Decision::WaitUntil(Nanos::from_ms(5.0))
        );
        // at 5 ms model 0's window closed; model 1's closes at 6: model 0 goes, its one request
        assert_eq!(
            decide(&q, 4, 5.0, true),
            Decision::AdmitModel {
                part: 0,
                count: 1,
                pad: true
            }
        );
        // both ready at 6 ms: the model whose oldest request is oldest goes first
        assert_eq!(
            decide(&q, 4, 6.0, true),
            Decision::AdmitModel {
                part: 0,
                count: 1,
                pad: true
            }
        );
        assert_eq!(
            decide(&q[1..], 4, 6.0, true),
            Decision::AdmitModel {
                part: 1,
                count: 3,
                pad: true
            }
        );
    }

    #[test]
    fn it_is_named_by_its_string_and_is_graph_batching_for_one_model() {
        let spec = crate::policy::Spec::parse("graph:5:4:per-model", 8).unwrap();
        assert_eq!(spec.build().name(), "graph:5:4:per-model");
        assert!(crate::policy::Spec::parse("graph:5:per-model", 8).is_ok());
        let e = crate::policy::Spec::parse("graph:per-model", 8)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("graph:W[:B]:per-model"), "{e}");
    }
}
