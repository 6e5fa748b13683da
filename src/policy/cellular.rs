//! `cellular:W[:B]`: cellular batching (BatchMaker, Gao et al., EuroSys 2018) as we read it.
//! BatchMaker has no public code; what we assume, written down:
//!
//! * a *cell* is one timestep of a loop (an RNN layer's step, or a decoder step); every step of
//!   a loop shares its weights, so cells of the same loop layer batch together whatever their
//!   timestep (the BatchTable merges at loop nodes ignoring the step);
//! * a newcomer joins the running batch at a cell boundary when its next cell is the cell the
//!   running batch is about to run: the first layer of the model's first loop (any timestep),
//!   with nothing but the model's input in front of that loop. It runs its input (a copy) and
//!   merges at once. Otherwise it waits for the running batch to end: we do not model
//!   BatchMaker's interleaving of different cell types, so a newcomer that arrives while the
//!   running batch is past the first layer waits. A non-RNN layer in front (a convolution, an
//!   embedding) means a newcomer never reaches a running batch's cell: graph batching, which is
//!   the paper's argument;
//! * requests leave the batch when their own sequence ends (no padding);
//! * everything else — starting a batch when the device is free — is graph batching with the
//!   same window W and maximum batch B.

use super::graph_batching::start_batch;
use super::spec::{window_and_batch, Entry, ParamError, Parsed};
use super::{Decision, Policy, View};
use crate::graph::{Model, NodeStep, Op};
use crate::time::Nanos;

/// Cellular batching.
#[derive(Clone, Debug)]
pub struct Cellular {
    window: Nanos,
    max_batch: u32,
    name: String,
}

impl Cellular {
    /// Window `window`, at most `max_batch` requests in the running batch.
    pub fn new(window: Nanos, max_batch: u32, name: &str) -> Self {
        Cellular {
            window,
            max_batch: max_batch.max(1),
            name: name.to_string(),
        }
    }
}

/// Every loop node is a cell.
pub(crate) fn loop_cells(model: &Model) -> Vec<bool> {
    model.nodes.iter().map(|n| n.loop_id.is_some()).collect()
}

/// True when a newcomer can join a batch whose next unit is `at`: `at` is the first layer of
/// the model's first loop and only model inputs stand in front of it.
pub(crate) fn joinable(model: &Model, at: NodeStep) -> bool {
    let Some(first) = model.loops.first() else {
        return false;
    };
    at.node == first.first
        && model.nodes[..first.first.idx()]
            .iter()
            .all(|n| matches!(n.op, Op::Input { .. }))
}

impl Policy for Cellular {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn cell_nodes(&self, model: &Model) -> Vec<bool> {
        loop_cells(model)
    }

    fn decide(&mut self, v: &View) -> Decision {
        if v.infq.is_empty() {
            return Decision::Run;
        }
        let room = v.room(self.max_batch);
        match v.table.top() {
            // an idle device: graph batching, without padding
            None => start_batch(v, self.window, self.max_batch, false),
            Some(top) if room > 0 && joinable(v.model, top.next) => Decision::Admit {
                count: v.infq.len().min(room),
                pad: false,
            },
            Some(_) => Decision::Run,
        }
    }
}

/// `cellular:W[:B]`.
pub(crate) const ENTRY: Entry = Entry {
    names: &["cellular"],
    variant: None,
    usage: "cellular:W[:B]",
    examples: &["cellular:2:4"],
    parse: parse_cellular,
};

fn parse_cellular(_: &str, params: &[&str], max: u32) -> std::result::Result<Parsed, ParamError> {
    let (w, b) = window_and_batch(params, max, "cellular:W or cellular:W:B")?;
    Ok(Parsed {
        one_model_only: true,
        ..Parsed::plain(move |name| Box::new(Cellular::new(w, b, name)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{zoo, NodeId};

    fn at(n: usize, step: u32) -> NodeStep {
        NodeStep {
            node: NodeId(n as u32),
            step,
        }
    }

    #[test]
    fn newcomers_join_only_at_the_first_loops_first_layer() {
        // lstm_stack: the input, then the LSTM loop
        let m = zoo::load("lstm_stack").unwrap();
        let first = m.loops[0].first.idx();
        assert!(first > 0, "the input stands in front of the loop");
        for n in 0..m.nodes.len() {
            for step in [0, 2] {
                assert_eq!(
                    joinable(&m, at(n, step)),
                    n == first,
                    "node {n} step {step}"
                );
            }
        }
        // an embedding in front of the loop: never (tiny_seq2seq's encoder)
        let m = zoo::fixture("tiny_seq2seq.toml");
        assert!((0..m.nodes.len()).all(|n| !joinable(&m, at(n, 0))));
        // a model without loops has no cell to join at
        let m = zoo::fixture("eight_nodes.toml");
        assert!(m.loops.is_empty());
        assert!((0..m.nodes.len()).all(|n| !joinable(&m, at(n, 0))));
    }
}
