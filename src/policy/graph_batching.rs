//! `graph:W[:B]`: graph batching as Triton and TF-Serving do it. When the device is free, wait
//! until B requests are pending or the oldest has waited W; then run the whole graph on that
//! batch without interruption. A seq2seq batch runs to its longest member's lengths and every
//! member completes at the end.

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
    let Some(&oldest) = v.pending.front() else {
        return Decision::Run;
    };
    let cap = (max_batch as usize).min(v.free_slots()).max(1);
    let due = v.arrival(oldest) + window;
    if v.pending.len() >= cap || v.now >= due {
        Decision::Admit {
            count: v.pending.len().min(cap),
            pad,
        }
    } else {
        Decision::WaitUntil(due)
    }
}
