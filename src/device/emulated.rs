//! A model device on the wall clock ([`Emulated`]): the NPU model or a saved table, its
//! modelled time slept, so that a network front end answers after the modelled latency.

use super::{Device, Member, Timing};
use crate::error::Result;
use crate::graph::{Model, NodeStep};
use crate::time::Nanos;
use std::time::{Duration, Instant};

/// A model device (the NPU model) on the wall clock: each execution takes the time the model
/// says it takes, slept, so that a front end answers after the modelled latency — a timing
/// emulation; no values are computed. Executions end at `due`, the previous end plus the
/// modelled time, so that the sleeps' overshoot (tens of µs each) does not add up over a
/// request's nodes.
pub struct Emulated<D> {
    dev: D,
    due: Option<Instant>,
}

impl<D> Emulated<D> {
    /// `dev` on the wall clock.
    pub fn new(dev: D) -> Self {
        Emulated { dev, due: None }
    }
}

impl<D: Device> Device for Emulated<D> {
    fn name(&self) -> &'static str {
        self.dev.name()
    }
    fn description(&self) -> String {
        format!(
            "{} (timing emulated on the wall clock)",
            self.dev.description()
        )
    }
    fn is_virtual(&self) -> bool {
        false
    }
    fn prepare(&mut self, model: &Model, max_batch: u32) -> Result<()> {
        self.dev.prepare(model, max_batch)
    }
    fn resume(&mut self, idle: Nanos) {
        self.dev.resume(idle)
    }
    fn execute(&mut self, model: &Model, at: NodeStep, members: &[Member]) -> Result<Timing> {
        let t = self.dev.execute(model, at, members)?;
        let now = Instant::now();
        // where the last node ended, even if a sleep overshot it (this one catches up), unless
        // the device sat idle since (then it starts now)
        let start = match self.due {
            Some(d) if now.saturating_duration_since(d) < Duration::from_millis(1) => d,
            _ => now,
        };
        let due = start + Duration::from_nanos(t.time.0);
        self.due = Some(due);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        Ok(t)
    }
}
