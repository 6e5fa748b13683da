//! `Forced`: a verification policy, not a batching strategy. It starts one request, then keeps
//! preempting the active sub-batch to admit one more pending request after a varying number of
//! node executions, ignoring the predictor, so that newcomers catch up and merge at many
//! different nodes. `verify` compares every request's output under it with its output alone.

use super::{Decision, Policy, View};

/// Preempt after 1, 2, …, `spread` node executions in turn.
#[derive(Clone, Debug)]
pub struct Forced {
    spread: u32,
    since: u32,
    admitted: u32,
}

impl Forced {
    /// Preemption gaps cycle through 1..=`spread` executions.
    pub fn new(spread: u32) -> Self {
        Forced {
            spread: spread.max(1),
            since: 0,
            admitted: 0,
        }
    }
}

impl Policy for Forced {
    fn name(&self) -> String {
        format!("forced:{}", self.spread)
    }
    fn decide(&mut self, v: &View) -> Decision {
        if v.pending.is_empty() || v.free_slots() == 0 {
            return Decision::Run;
        }
        let gap = 1 + (self.admitted * 7) % self.spread;
        if v.table.is_empty() || self.since >= gap {
            self.since = 0;
            self.admitted += 1;
            return Decision::Admit {
                count: 1,
                pad: false,
            };
        }
        self.since += 1;
        Decision::Run
    }
}
