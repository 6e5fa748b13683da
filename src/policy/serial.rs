//! `serial`: one request at a time, FIFO, the whole graph without interruption.

use super::{Decision, Policy, View};

/// Serial execution (no batching).
#[derive(Clone, Copy, Debug, Default)]
pub struct Serial;

impl Policy for Serial {
    fn name(&self) -> String {
        "serial".into()
    }
    fn never_preempts(&self) -> bool {
        true
    }
    fn decide(&mut self, v: &View) -> Decision {
        if v.table.is_empty() && !v.pending.is_empty() {
            Decision::Admit {
                count: 1,
                pad: true,
            }
        } else {
            Decision::Run
        }
    }
}
