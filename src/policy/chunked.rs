//! `chunked:MS[:B]`: iteration-level batching whose newcomers' prefill advances in chunks
//! between the running batch's decode iterations, as Sarathi-Serve's stall-free batching does
//! (Agrawal et al., OSDI 2024), beside `continuous` (Orca: the prefill runs whole first, the
//! decode batch waiting) and LazyB. What we keep and what we cannot, written down:
//!
//! * like `continuous`, newcomers are admitted at an iteration boundary (the first node of the
//!   model's decoder loop), first-come first-served, as many as the maximum batch B and the
//!   free activation slots allow, and requests leave at their own end;
//! * **the chunk**: the newcomers' prefill (everything before the decoder loop) runs on top
//!   for at least MS milliseconds of device time (at least one node), then the decode batch
//!   runs one whole iteration ([`super::Decision::Swap`]), then the prefill its next chunk,
//!   and so on, until the prefill reaches the decoder and joins the batch at its boundary.
//!   Sarathi-Serve bounds each iteration's prefill by a token budget; our graphs run one node
//!   at a time, so the chunk is a run of the prefill's layers bounded by time: each decode
//!   iteration waits at most MS plus one prefill node for a newcomer, instead of the whole
//!   prefill (`continuous`), and MS = 0 gives the decode batch an iteration after every node;
//! * **what we cannot**: Sarathi-Serve's chunk rides in the same kernels as the decode
//!   iteration (one GEMM over the decode rows and the chunk's prompt rows, filling the
//!   compute a small decode batch leaves idle). Our prefill and decode are different nodes of
//!   the graph, so a chunk costs what it costs alone: this peer shows the stall-free
//!   schedule's effect on the time per output token, not the fused kernels' capacity gain;
//! * one prefill sub-batch at a time: newcomers that arrive during a prefill wait for the
//!   next boundary after it joined the batch.

use super::continuous::at_iteration;
use super::graph_batching::start_batch;
use super::spec::{Entry, ParamError, Parsed};
use super::{cellular, Decision, Policy, View};
use crate::graph::{Class, Model, NodeStep};
use crate::time::Nanos;

/// Iteration-level batching with chunked prefills.
#[derive(Clone, Debug)]
pub struct Chunked {
    budget: Nanos,
    max_batch: u32,
    name: String,
    /// When the prefill on top began its current chunk.
    chunk_from: Nanos,
    /// Prefill nodes run in the current chunk (the engine runs one as it admits or swaps).
    chunk_nodes: u32,
}

impl Chunked {
    /// Chunks of at least `budget` of device time, at most `max_batch` requests in the batch.
    pub fn new(budget: Nanos, max_batch: u32, name: &str) -> Self {
        Chunked {
            budget,
            max_batch: max_batch.max(1),
            name: name.to_string(),
            chunk_from: Nanos::ZERO,
            chunk_nodes: 0,
        }
    }

    /// A prefill's chunk begins now; the engine runs its first node at once.
    fn start_chunk(&mut self, now: Nanos) {
        self.chunk_from = now;
        self.chunk_nodes = 1;
    }
}

/// True when a sub-batch whose next unit is `at` is in its decode (the decoder loop's nodes).
fn decoding(model: &Model, at: NodeStep) -> bool {
    model.node(at.node).class == Class::Decoder
}

impl Policy for Chunked {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn cell_nodes(&self, model: &Model) -> Vec<bool> {
        cellular::loop_cells(model)
    }

    fn interleaves(&self) -> bool {
        true
    }

    fn decide(&mut self, v: &View) -> Decision {
        let m = v.model;
        match v.table.entries() {
            // an idle device: everyone pending, at once, up to B
            [] => start_batch(v, Nanos(0), self.max_batch, !m.is_seq2seq()),
            // the batch alone: newcomers' prefill starts at its iteration boundary
            [only] => {
                let room = v.room(self.max_batch);
                if room > 0 && !v.infq.is_empty() && at_iteration(m, only.next) {
                    self.start_chunk(v.now);
                    Decision::Admit {
                        count: v.infq.len().min(room),
                        pad: false,
                    }
                } else {
                    Decision::Run
                }
            }
            // a prefill on top, its decode batch waiting at the boundary below: the chunk
            // runs until it has taken the budget (and at least a node), then one iteration
            [.., below, top] if !decoding(m, top.next) => {
                let spent = v.now.saturating_sub(self.chunk_from) >= self.budget;
                if spent && self.chunk_nodes > 0 && at_iteration(m, below.next) {
                    self.chunk_nodes = 0;
                    Decision::Swap
                } else {
                    self.chunk_nodes += 1;
                    Decision::Run
                }
            }
            // the decode batch on top came round to its boundary (it swapped in there and ran
            // its first node at once): the prefill below takes its next chunk
            [.., below, top] if at_iteration(m, top.next) && !decoding(m, below.next) => {
                self.start_chunk(v.now);
                Decision::Swap
            }
            [.., _, _] => Decision::Run,
        }
    }
}

/// `chunked:MS[:B]`.
pub(crate) const ENTRY: Entry = Entry {
    names: &["chunked"],
    variant: None,
    usage: "chunked:MS[:B]",
    examples: &["chunked:2:4"],
    parse: parse_chunked,
};

fn parse_chunked(
    _: &str,
    params: &[&str],
    default_max: u32,
) -> std::result::Result<Parsed, ParamError> {
    let (ms, b) =
        match params {
            [ms] => (ms, None),
            [ms, b] => (ms, Some(b)),
            _ => return Err(
                "use chunked:MS or chunked:MS:B (MS ms of prefill between iterations, B max batch)"
                    .into(),
            ),
        };
    let day = crate::time::MAX_SLA.as_ms();
    let budget = ms
        .parse::<f64>()
        .ok()
        .filter(|x| (0.0..=day).contains(x))
        .ok_or_else(|| {
            format!("the chunk must be a number of milliseconds in [0, {day}] (one day)")
        })?;
    let b = match b {
        None => default_max,
        Some(b) => b
            .parse::<u32>()
            .ok()
            .filter(|&b| (1..=default_max).contains(&b))
            .ok_or_else(|| {
                format!("the max batch must be an integer in [1, {default_max}] (the server's max batch)")
            })?,
    };
    let budget = Nanos::from_ms(budget);
    Ok(Parsed {
        one_model_only: true,
        ..Parsed::plain(move |name| Box::new(Chunked::new(budget, b, name)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{zoo, NodeId};
    use crate::profile::Profile;
    use crate::runtime::{BatchTable, InfQ, Ledger, Predictor, Request, RequestId};

    /// tiny_seq2seq (its decoder loop starts at node 3, everything before is its prefill): a
    /// table of `entries` (first entry at the bottom; each `(requests, node)`), `pending` more
    /// requests waiting.
    struct Bench {
        m: Model,
        p: Predictor,
        table: BatchTable,
        infq: InfQ,
        requests: Vec<Request>,
    }

    fn bench(entries: &[(std::ops::Range<u32>, u32)], pending: u32) -> Bench {
        let m = zoo::fixture("tiny_seq2seq.toml");
        let p = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 3);
        let mut table = BatchTable::new(8);
        table.set_cells(cellular::loop_cells(&m));
        table.set_model(&m);
        let mut n = 0;
        for (ids, node) in entries {
            let step = u32::from(*node >= 3);
            let at = NodeStep {
                node: NodeId(*node),
                step,
            };
            table.push_from(ids.clone().map(RequestId), at, None);
            n = n.max(ids.end);
        }
        let len = crate::graph::Lengths { enc: 2, dec: 3 };
        let requests: Vec<Request> = (0..n + pending)
            .map(|i| Request::new(RequestId(i), Nanos(0), Nanos::from_ms(100.0), len))
            .collect();
        let mut infq = InfQ::with_capacity(16);
        (n..n + pending).for_each(|i| infq.push(RequestId(i)));
        Bench {
            m,
            p,
            table,
            infq,
            requests,
        }
    }

    impl Bench {
        fn decide(&self, pol: &mut Chunked, now_ms: f64) -> Decision {
            let ledger = Ledger::of(&self.requests).unwrap();
            let v = View::new(
                Nanos::from_ms(now_ms),
                &self.m,
                &self.infq,
                &self.table,
                &self.p,
                8,
                &ledger,
            );
            pol.decide(&v)
        }
    }

    #[test]
    fn newcomers_are_admitted_at_the_boundary_only_up_to_the_room() {
        let admit = |count| Decision::Admit { count, pad: false };
        let mut pol = Chunked::new(Nanos::from_ms(2.0), 5, "chunked:2:5");
        assert_eq!(bench(&[], 7).decide(&mut pol, 0.0), admit(5));
        // three decoding at the boundary: two more under B
        assert_eq!(bench(&[(0..3, 3)], 4).decide(&mut pol, 0.0), admit(2));
        // elsewhere in the iteration, or full, the batch runs on
        assert_eq!(bench(&[(0..3, 4)], 4).decide(&mut pol, 0.0), Decision::Run);
        assert_eq!(bench(&[(0..5, 3)], 4).decide(&mut pol, 0.0), Decision::Run);
    }

    #[test]
    fn a_prefill_yields_to_its_batch_once_its_chunk_has_taken_the_budget() {
        // admitted at 10 ms (and its first node run at once), with the batch below at its
        // boundary: it runs on until 12 ms, to the nanosecond, then the batch swaps in
        let mut pol = Chunked::new(Nanos::from_ms(2.0), 8, "chunked:2");
        let alone = bench(&[(0..3, 3)], 2);
        assert!(matches!(
            alone.decide(&mut pol, 10.0),
            Decision::Admit { .. }
        ));
        let b = bench(&[(0..3, 3), (3..5, 1)], 0);
        assert_eq!(b.decide(&mut pol, 11.0), Decision::Run);
        assert_eq!(b.decide(&mut pol, 11.999_999), Decision::Run);
        assert_eq!(b.decide(&mut pol, 12.0), Decision::Swap);
        // the batch on top runs its whole iteration; back at its boundary the prefill swaps
        // in for its next chunk, timed from then
        let d = bench(&[(3..5, 1), (0..3, 4)], 0);
        assert_eq!(d.decide(&mut pol, 12.5), Decision::Run);
        let back = bench(&[(3..5, 1), (0..3, 3)], 0);
        assert_eq!(back.decide(&mut pol, 13.0), Decision::Swap);
        assert_eq!(b.decide(&mut pol, 14.999), Decision::Run);
        assert_eq!(b.decide(&mut pol, 15.0), Decision::Swap);
    }

    #[test]
    fn a_zero_chunk_is_one_prefill_node_per_iteration() {
        let mut pol = Chunked::new(Nanos::ZERO, 8, "chunked:0");
        let alone = bench(&[(0..3, 3)], 2);
        assert!(matches!(
            alone.decide(&mut pol, 1.0),
            Decision::Admit { .. }
        ));
        // the admission ran a node: the batch's turn at once
        let b = bench(&[(0..3, 3), (3..5, 1)], 0);
        assert_eq!(b.decide(&mut pol, 1.0), Decision::Swap);
        let back = bench(&[(3..5, 1), (0..3, 3)], 0);
        assert_eq!(back.decide(&mut pol, 2.0), Decision::Swap);
        assert_eq!(b.decide(&mut pol, 2.0), Decision::Swap);
    }

    #[test]
    fn a_prefill_without_a_batch_below_at_its_boundary_runs_on() {
        let mut pol = Chunked::new(Nanos::ZERO, 8, "chunked:0");
        // below: another prefill (nothing decoding yet)
        let b = bench(&[(0..3, 0), (3..5, 1)], 0);
        assert_eq!(b.decide(&mut pol, 50.0), Decision::Run);
        // two decoding entries: the top runs on
        let d = bench(&[(0..3, 4), (3..5, 3)], 0);
        assert_eq!(d.decide(&mut pol, 50.0), Decision::Run);
    }

    #[test]
    fn it_is_named_by_its_string_interleaves_and_merges_in_the_decoder_loop() {
        let pol = Chunked::new(Nanos::ZERO, 8, "chunked:0:8");
        assert_eq!(pol.name(), "chunked:0:8");
        // asked at every node while two entries stand, so that it can swap them
        assert!(pol.interleaves());
        let m = zoo::fixture("tiny_seq2seq.toml");
        let cells = pol.cell_nodes(&m);
        assert_eq!(cells, cellular::loop_cells(&m));
        assert!(cells.contains(&true) && cells.contains(&false), "{cells:?}");
    }

    #[test]
    fn a_chunk_runs_at_least_one_node_and_the_batch_is_at_least_one() {
        // a prefill it did not start (no node counted yet) runs one node before the swap,
        // even with the budget spent
        let mut pol = Chunked::new(Nanos::ZERO, 8, "chunked:0");
        let b = bench(&[(0..3, 3), (3..5, 1)], 0);
        assert_eq!(b.decide(&mut pol, 5.0), Decision::Run);
        assert_eq!(b.decide(&mut pol, 5.0), Decision::Swap);
        // a max batch of 0 is taken as 1
        let mut one = Chunked::new(Nanos::ZERO, 0, "chunked:0");
        let admit = Decision::Admit {
            count: 1,
            pad: false,
        };
        assert_eq!(bench(&[], 3).decide(&mut one, 0.0), admit);
    }

    #[test]
    fn chunked_strings_are_checked() {
        for ok in [
            "chunked:0",
            "chunked:2.5",
            "chunked:5:64",
            "chunked:86400000",
        ] {
            assert!(crate::policy::Spec::parse(ok, 64).is_ok(), "{ok}");
        }
        for bad in [
            "chunked",
            "chunked:-1",
            "chunked:x",
            "chunked:5:0",
            "chunked:5:65",
            "chunked:5:8:1",
            "chunked:86400001",
        ] {
            let e = crate::policy::Spec::parse(bad, 64).err();
            assert!(e.is_some(), "{bad}");
        }
    }
}
