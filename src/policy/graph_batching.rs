//! `graph:W[:B]`: graph batching as Triton and TF-Serving do it. When the device is free, wait
//! until B requests are pending or the oldest has waited W; then run the whole graph on that
//! batch without interruption. A seq2seq batch runs to its longest member's lengths and every
//! member completes at the end.

use super::spec::{window_and_batch, Entry, ParamError, Parsed};
use super::{Decision, Policy, View};
use crate::time::Nanos;

/// Graph batching with a time window and a maximum batch.
#[derive(Clone, Debug)]
pub struct GraphBatching {
    window: Nanos,
    max_batch: u32,
    name: String,
}

impl GraphBatching {
    /// Window `window`, at most `max_batch` requests per batch.
    pub fn new(window: Nanos, max_batch: u32, name: &str) -> Self {
        GraphBatching {
            window,
            max_batch: max_batch.max(1),
            name: name.to_string(),
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

/// `graph:W[:B]`.
pub(crate) const ENTRY: Entry = Entry {
    names: &["graph"],
    variant: None,
    usage: "graph:W[:B]",
    parse: parse_graph,
};

fn parse_graph(_: &str, params: &[&str], max: u32) -> std::result::Result<Parsed, ParamError> {
    let (w, b) = window_and_batch(params, max, "graph:W or graph:W:B")?;
    Ok(Parsed::plain(move |name| {
        Box::new(GraphBatching::new(w, b, name))
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
