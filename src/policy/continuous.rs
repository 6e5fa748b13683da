//! `continuous[:B]`: iteration-level ("continuous") batching as Orca schedules it (Yu et al.,
//! OSDI 2022), the scheme vLLM and TGI serve decoders with, beside LazyB. What we read in the
//! paper and what we assumed where it is not specific, written down:
//!
//! * the running batch is re-formed at every iteration of the decoder (§4.1, iteration-level
//!   scheduling): an iteration boundary is the first node of the model's last loop (its
//!   decoder), at any step; requests leave at their own end of sequence (no padding) and the
//!   BatchTable merges sub-batches at loop nodes whatever their step (cells), so requests at
//!   different steps share each decoder layer's execution (§4.2, selective batching);
//! * newcomers are admitted first-come first-served, as many as the maximum batch B and the
//!   free activation slots allow (§4.3, Algorithm 1: max batch and the KV slots reserved for
//!   each request), with no time window;
//! * **our assumption**: Orca batches a newcomer's initiation phase (here everything before
//!   the decoder loop: the encoder, embeddings) into the same iteration as the running
//!   requests' decode steps. Our graphs run one node at a time, so at an iteration boundary
//!   the newcomers run their prefix as a sub-batch of their own, ahead of the running batch
//!   (which waits at the boundary), and join it when they reach the decoder;
//! * a model without loops has no iterations: a batch runs to its end and the next one starts
//!   with whatever is pending, which is work-conserving graph batching (`graph:0`, and the
//!   same runs: a test checks it).

use super::graph_batching::start_batch;
use super::spec::{Entry, ParamError, Parsed};
use super::{cellular, Decision, Policy, View};
use crate::graph::{Model, NodeStep};
use crate::time::Nanos;

/// Iteration-level batching.
#[derive(Clone, Debug)]
pub struct Continuous {
    max_batch: u32,
    name: String,
}

impl Continuous {
    /// At most `max_batch` requests in the running batch.
    pub fn new(max_batch: u32, name: &str) -> Self {
        Continuous {
            max_batch: max_batch.max(1),
            name: name.to_string(),
        }
    }
}

/// True when a batch whose next unit is `at` stands at an iteration boundary: the first node
/// of the model's last loop (its decoder), at any step.
pub(crate) fn at_iteration(model: &Model, at: NodeStep) -> bool {
    model.loops.last().is_some_and(|l| at.node == l.first)
}

impl Policy for Continuous {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn cell_nodes(&self, model: &Model) -> Vec<bool> {
        cellular::loop_cells(model)
    }

    fn decide(&mut self, v: &View) -> Decision {
        if v.infq.is_empty() {
            return Decision::Run;
        }
        let room = v.room(self.max_batch);
        match v.table.top() {
            // an idle device: everyone pending, at once, up to B (padding changes nothing on
            // a model without loops, and on a seq2seq batch requests leave at their own end)
            None => start_batch(v, Nanos(0), self.max_batch, !v.model.is_seq2seq()),
            Some(top) if room > 0 && at_iteration(v.model, top.next) => Decision::Admit {
                count: v.infq.len().min(room),
                pad: false,
            },
            Some(_) => Decision::Run,
        }
    }
}

/// `continuous[:B]`.
pub(crate) const ENTRY: Entry = Entry {
    names: &["continuous"],
    variant: None,
    usage: "continuous[:B]",
    examples: &["continuous:4"],
    parse: parse_continuous,
};

fn parse_continuous(
    _: &str,
    params: &[&str],
    default_max: u32,
) -> std::result::Result<Parsed, ParamError> {
    let b = match params {
        [] => default_max,
        [b] => b
            .parse::<u32>()
            .ok()
            .filter(|&b| (1..=default_max).contains(&b))
            .ok_or_else(|| {
                format!("the max batch must be an integer in [1, {default_max}] (the server's max batch)")
            })?,
        _ => return Err("use continuous or continuous:B (B max batch)".into()),
    };
    Ok(Parsed {
        one_model_only: true,
        ..Parsed::plain(move |name| Box::new(Continuous::new(b, name)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{zoo, NodeId};

    /// `continuous:B`'s decision on tiny_seq2seq (its decoder loop starts at node 3):
    /// requests 0..`in_flight` in flight at `node` (none: idle), `pending` more waiting.
    fn decide(b: u32, in_flight: u32, node: u32, pending: u32) -> Decision {
        use crate::profile::Profile;
        use crate::runtime::{BatchTable, InfQ, Ledger, Predictor, Request, RequestId};
        use crate::time::Nanos;
        let m = zoo::fixture("tiny_seq2seq.toml");
        let p = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 3);
        let len = crate::graph::Lengths { enc: 2, dec: 3 };
        let requests: Vec<Request> = (0..in_flight + pending)
            .map(|i| Request::new(RequestId(i), Nanos(0), Nanos::from_ms(100.0), len))
            .collect();
        let mut table = BatchTable::new(8);
        table.set_model(&m);
        if in_flight > 0 {
            let at = NodeStep {
                node: NodeId(node),
                step: 1,
            };
            table.push_from((0..in_flight).map(RequestId), at, None);
        }
        let mut infq = InfQ::with_capacity(16);
        (in_flight..in_flight + pending).for_each(|i| infq.push(RequestId(i)));
        let ledger = Ledger::of(&requests).unwrap();
        let v = View::new(Nanos(0), &m, &infq, &table, &p, 8, &ledger);
        crate::policy::parse(&format!("continuous:{b}"), 8)
            .unwrap()
            .decide(&v)
    }

    #[test]
    fn newcomers_fill_exactly_the_room_under_b_and_only_at_an_iteration() {
        let admit = |count| Decision::Admit { count, pad: false };
        // idle: everyone pending up to B, at once
        assert_eq!(decide(4, 0, 0, 4), admit(4));
        assert_eq!(decide(4, 0, 0, 5), admit(4));
        assert_eq!(decide(4, 0, 0, 3), admit(3));
        // three in flight at the decoder's first node: the room under B
        assert_eq!(decide(5, 3, 3, 4), admit(2));
        assert_eq!(decide(4, 3, 3, 4), admit(1));
        assert_eq!(decide(3, 3, 3, 4), Decision::Run);
        // anywhere else in the iteration the batch runs on
        assert_eq!(decide(8, 3, 4, 4), Decision::Run);
        assert_eq!(decide(8, 3, 2, 4), Decision::Run);
    }

    #[test]
    fn iterations_start_at_the_decoder_loops_first_node_at_any_step() {
        let m = zoo::load("gnmt").unwrap();
        let dec = m.loops.last().unwrap().first.idx();
        for n in 0..m.nodes.len() {
            for step in [0, 5] {
                let at = NodeStep {
                    node: NodeId(n as u32),
                    step,
                };
                assert_eq!(at_iteration(&m, at), n == dec, "node {n} step {step}");
            }
        }
        // GNMT's encoder loops come first: the decoder is the last loop
        assert!(m.loops.len() > 1 && m.loops[0].first.idx() < dec);
        let r = zoo::load("resnet50").unwrap();
        assert!((0..r.nodes.len()).all(|n| !at_iteration(
            &r,
            NodeStep {
                node: NodeId(n as u32),
                step: 0
            }
        )));
    }

    #[test]
    fn continuous_strings_are_checked() {
        for ok in ["continuous", "continuous:8", "continuous:64"] {
            assert!(crate::policy::Spec::parse(ok, 64).is_ok(), "{ok}");
        }
        for bad in [
            "continuous:0",
            "continuous:65",
            "continuous:x",
            "continuous:8:1",
        ] {
            assert!(crate::policy::Spec::parse(bad, 64).is_err(), "{bad}");
        }
    }
}
