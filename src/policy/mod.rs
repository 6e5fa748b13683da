//! Batching policies. Each is a small type behind the [`Policy`] trait: it sees a read-only
//! [`View`] of the server (time, pending queue, BatchTable, predictor) and returns a
//! [`Decision`]; it never touches a device. [`parse`] turns a policy string (`serial`,
//! `graph:W[:B]`, `lazy`, `oracle`) into one, with clear errors.

pub(crate) mod cellular;
mod forced;
mod graph_batching;
mod lazy;
mod serial;

pub use cellular::Cellular;
pub use forced::Forced;
pub use graph_batching::GraphBatching;
pub use lazy::Lazy;
pub use serial::Serial;

use crate::error::{Error, Result};
use crate::graph::{Lengths, Model};
use crate::runtime::{BatchTable, Predictor, Request, RequestId};
use crate::time::Nanos;
use std::collections::VecDeque;

/// What the engine should do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Execute one node of the active (top) sub-batch.
    Run,
    /// Take the first `count` pending requests as a new sub-batch on top of the BatchTable
    /// (preempting the active one, if any), then execute its first node. With `pad`, the
    /// sub-batch runs as one graph batch: every member to the longest member's lengths, all
    /// completing together.
    Admit {
        /// How many pending requests, from the front of the queue.
        count: usize,
        /// Run as a graph batch.
        pad: bool,
    },
    /// Do nothing until this time (or the next arrival, whichever is first).
    WaitUntil(Nanos),
}

/// The read-only view a policy decides on. Deliberately narrow: a policy learns a request's
/// arrival, deadline, encoder length and progress, never its actual decoder length.
pub struct View<'a> {
    /// Current time.
    pub now: Nanos,
    /// The model being served.
    pub model: &'a Model,
    /// Pending requests, oldest first (the paper's InfQ).
    pub pending: &'a VecDeque<RequestId>,
    /// The BatchTable.
    pub table: &'a BatchTable,
    /// The slack predictor.
    pub predictor: &'a Predictor,
    /// Requests the device can hold at once (activation slots).
    pub capacity: usize,
    requests: &'a [Request],
}

impl<'a> View<'a> {
    /// Builds a view (the engine does this).
    pub fn new(
        now: Nanos,
        model: &'a Model,
        pending: &'a VecDeque<RequestId>,
        table: &'a BatchTable,
        predictor: &'a Predictor,
        capacity: usize,
        requests: &'a [Request],
    ) -> Self {
        View {
            now,
            model,
            pending,
            table,
            predictor,
            capacity,
            requests,
        }
    }
    /// A request's arrival time.
    pub fn arrival(&self, r: RequestId) -> Nanos {
        self.requests[r.idx()].arrival
    }
    /// A request's deadline (arrival + SLA).
    pub fn deadline(&self, r: RequestId) -> Nanos {
        self.requests[r.idx()].deadline
    }
    /// The lengths the predictor assumes for a request (actual encoder length, predicted
    /// decoder length).
    pub fn predicted_len(&self, r: RequestId) -> Lengths {
        let q = &self.requests[r.idx()];
        self.predictor
            .predicted_in(usize::from(q.part), q.enc_len(), q.dec_done)
    }
    /// The co-located model a request is for (0 for a single model).
    pub fn part(&self, r: RequestId) -> usize {
        usize::from(self.requests[r.idx()].part)
    }
    /// Free activation slots.
    pub fn free_slots(&self) -> usize {
        self.capacity.saturating_sub(self.table.in_flight())
    }
}

/// A batching policy.
///
/// Contract with the engine: while requests are in flight and none is pending, a policy has
/// nothing to decide and the engine runs the active sub-batch without asking it.
pub trait Policy: Send {
    /// The policy string it was parsed from (`graph:25:64`, `lazy`, ...).
    fn name(&self) -> String;
    /// Decides the next action. Called when requests are pending or in flight.
    fn decide(&mut self, view: &View) -> Decision;
    /// False for policies that cannot serve several co-located models.
    fn supports_colocation(&self) -> bool {
        true
    }
    /// True when decisions depend on the SLA and the predicted lengths (the slack check);
    /// false for policies blind to both.
    fn uses_sla(&self) -> bool {
        false
    }
    /// True for policies that never admit while requests are in flight (they start the next
    /// batch when the table is empty): the engine then runs the active sub-batch without asking
    /// them, whatever is pending.
    fn never_preempts(&self) -> bool {
        false
    }
    /// Nodes at which sub-batches merge across timesteps (cells); none by default.
    fn cell_nodes(&self, _model: &Model) -> Vec<bool> {
        Vec::new()
    }
}

/// Parses `W[:B]`: a window in ms (≥ 0) and a maximum batch (1..=`default_max`).
fn window_and_batch(rest: &[&str], default_max: u32) -> std::result::Result<(Nanos, u32), String> {
    let w: f64 = rest[0]
        .parse()
        .map_err(|_| "the window must be a number of milliseconds".to_string())?;
    if !w.is_finite() || w < 0.0 {
        return Err("the window must be ≥ 0 ms".into());
    }
    let b = match rest.get(1) {
        None => default_max,
        Some(s) => s
            .parse::<u32>()
            .ok()
            .filter(|&b| b >= 1)
            .ok_or_else(|| "the max batch must be a positive integer".to_string())?,
    };
    if b > default_max {
        return Err(format!(
            "max batch {b} exceeds the server's --max-batch {default_max}"
        ));
    }
    Ok((Nanos::from_ms(w), b))
}

/// [`parse`] for serving `model`: refuses a policy that cannot serve its co-located models.
pub fn parse_for(spec: &str, default_max: u32, model: &Model) -> Result<Box<dyn Policy>> {
    let pol = parse(spec, default_max)?;
    if model.parts.len() > 1 && !pol.supports_colocation() {
        return Err(Error::BadPolicy {
            spec: spec.to_string(),
            msg: "does not support co-located models (serial, graph and lazy do)".into(),
        });
    }
    Ok(pol)
}

/// Parses a policy string: `serial`, `graph:W[:B]`, `cellular:W[:B]` (window W ms ≥ 0, max
/// batch B ≥ 1, default `default_max`), `lazy`, `oracle`, `lazy:strict`, `oracle:strict`
/// (`lazy+cell` is an alias of `lazy`).
pub fn parse(spec: &str, default_max: u32) -> Result<Box<dyn Policy>> {
    let bad = |msg: &str| Error::BadPolicy {
        spec: spec.to_string(),
        msg: msg.to_string(),
    };
    let parts: Vec<&str> = spec.trim().split(':').collect();
    match parts.as_slice() {
        ["serial"] => Ok(Box::new(Serial)),
        // `lazy+cell` is the name cross-step merging had while it was an option
        ["lazy"] | ["lazy+cell"] => Ok(Box::new(Lazy::conservative())),
        ["oracle"] => Ok(Box::new(Lazy::oracle())),
        ["lazy", "strict"] => Ok(Box::new(Lazy::conservative().strict())),
        ["oracle", "strict"] => Ok(Box::new(Lazy::oracle().strict())),
        ["lazy" | "oracle", ..] => Err(bad("takes no parameter but 'strict' (lazy:strict)")),
        ["serial" | "lazy+cell", ..] => Err(bad("takes no parameters")),
        ["graph", rest @ ..] if !rest.is_empty() && rest.len() <= 2 => {
            let (w, b) = window_and_batch(rest, default_max).map_err(|m| bad(&m))?;
            Ok(Box::new(GraphBatching::new(w, b, spec.trim())))
        }
        ["graph"] | ["graph", ..] => Err(bad("use graph:W or graph:W:B (W ms, B max batch)")),
        ["cellular", rest @ ..] if !rest.is_empty() && rest.len() <= 2 => {
            let (w, b) = window_and_batch(rest, default_max).map_err(|m| bad(&m))?;
            Ok(Box::new(Cellular::new(w, b, spec.trim())))
        }
        ["cellular"] | ["cellular", ..] => {
            Err(bad("use cellular:W or cellular:W:B (W ms, B max batch)"))
        }
        _ => Err(bad(
            "unknown policy (serial, graph:W[:B], cellular:W[:B], lazy, oracle, lazy:strict, oracle:strict)",
        )),
    }
}
