//! `Forced`: a verification policy, not a batching strategy. It starts one request, then keeps
//! preempting the active sub-batch to admit one more pending request after a varying number of
//! node executions, ignoring the predictor, so that newcomers catch up and merge at many
//! different nodes. Like `lazy`, it merges sub-batches at a common loop node whatever their
//! timesteps, so newcomers also join batches deep in an encoder or decoder loop and run a layer
//! together with members at other steps. `verify` compares every request's output under it with
//! its output alone.

use super::cellular::loop_cells;
use super::{Decision, Policy, View};
use crate::graph::Model;

/// Preempt after gaps that alternate between short ones (1..=9 executions: merges at many
/// nodes near each other) and long ones (up to `reach` executions: merges deep into loops).
#[derive(Clone, Debug)]
pub struct Forced {
    reach: u32,
    since: u32,
    admitted: u32,
}

impl Forced {
    /// Long gaps reach up to `reach` node executions (use about one request's unrolled length).
    pub fn new(reach: u32) -> Self {
        Forced {
            reach: reach.max(1),
            since: 0,
            admitted: 0,
        }
    }

    fn gap(&self) -> u32 {
        let a = self.admitted;
        if a.is_multiple_of(2) {
            1 + (a * 7) % 9
        } else {
            1 + (a * 389) % self.reach
        }
    }
}

impl Policy for Forced {
    fn name(&self) -> String {
        format!("forced:{}", self.reach)
    }
    fn cell_nodes(&self, model: &Model) -> Vec<bool> {
        loop_cells(model)
    }
    fn decide(&mut self, v: &View) -> Decision {
        if v.infq.is_empty() || v.free_slots() == 0 {
            return Decision::Run;
        }
        if v.table.is_empty() || self.since >= self.gap() {
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
