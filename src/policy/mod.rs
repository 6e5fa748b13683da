//! Batching policies. Each is a small type behind the [`Policy`] trait: it sees a read-only
//! [`View`] of the server (time, pending queue, BatchTable, predictor) and returns a
//! [`Decision`]; it never touches a device. [`Spec`] is a policy string (`serial`,
//! `graph:W[:B]`, `cellular:W[:B]`, `continuous[:B]`, `chunked:MS[:B]`, `dva:D:W[:B]`, `lazy`,
//! `oracle`, `auto`, …) checked once into a typed value that builds a fresh policy for every run.

mod adaptive;
pub(crate) mod auto;
pub use auto::{under_token_bound, FOR_TOKENS};
pub(crate) mod cellular;
mod chunked;
mod continuous;
mod dvabatch;
mod forced;
mod graph_batching;
mod lazy;
mod oracle;
mod serial;
mod slack;
mod spec;

pub use adaptive::Adaptive;
pub use cellular::Cellular;
pub use chunked::Chunked;
pub use continuous::Continuous;
pub use dvabatch::Dva;
pub use forced::Forced;
pub use graph_batching::GraphBatching;
pub use lazy::Lazy;
pub use serial::Serial;
pub use spec::{parse, parse_for, Entry, Parsed, Spec};

use crate::graph::{Lengths, Model};
use crate::runtime::{BatchTable, InfQ, Ledger, Predictor, Request, RequestId};
use crate::time::Nanos;

/// Every policy users can name, each declared by its own file: adding a policy is one file,
/// its `mod` line above and its line here.
pub const REGISTRY: &[&Entry] = &[
    &serial::ENTRY,
    &graph_batching::ENTRY,
    &cellular::ENTRY,
    &continuous::ENTRY,
    &chunked::ENTRY,
    &dvabatch::ENTRY,
    &lazy::ENTRY,
    &adaptive::ENTRY,
    &auto::ENTRY,
];

/// Every policy's examples ([`Entry::examples`]), in [`REGISTRY`]'s order: what the property
/// tests drive, so that a new policy is driven too.
pub fn examples() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().flat_map(|e| e.examples.iter().copied())
}

/// Every policy's grammar, in [`REGISTRY`]'s order, comma-separated (`serial, graph:W[:B]…`):
/// what the command line's help lists, derived here so that a new policy appears there too.
pub fn grammar() -> String {
    REGISTRY
        .iter()
        .map(|e| e.usage)
        .collect::<Vec<_>>()
        .join(", ")
}

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
    /// [`Decision::Admit`] of the `count` oldest pending requests **of one co-located model**
    /// (`part`), the others keeping their places in the queue: graph batching with a queue per
    /// model (`graph:W[:B]:per-model`, Triton's per-model batcher).
    AdmitModel {
        /// The model (its index among the co-located ones).
        part: u16,
        /// How many of its pending requests, oldest first.
        count: usize,
        /// Run as a graph batch.
        pad: bool,
    },
    /// Do nothing until this time (or the next arrival, whichever is first).
    WaitUntil(Nanos),
    /// Put the sub-batch below the active one on top (the active one waits where it stands),
    /// then execute its next node: a policy that interleaves a prefill with its decode batch's
    /// iterations (`chunked`), past the paper's stack. Only with two entries or more.
    Swap,
}

/// The read-only view a policy decides on. Deliberately narrow: a policy learns a request's
/// arrival, deadline, encoder length and progress, never its actual decoder length.
pub struct View<'a> {
    /// Current time.
    pub now: Nanos,
    /// The model being served.
    pub model: &'a Model,
    /// The InfQ: pending requests, oldest first.
    pub infq: &'a InfQ,
    /// The BatchTable.
    pub table: &'a BatchTable,
    /// The slack predictor.
    pub predictor: &'a Predictor,
    /// Requests the device can hold at once (activation slots).
    pub capacity: usize,
    requests: &'a Ledger,
}

impl<'a> View<'a> {
    /// Builds a view (the engine does this).
    pub fn new(
        now: Nanos,
        model: &'a Model,
        infq: &'a InfQ,
        table: &'a BatchTable,
        predictor: &'a Predictor,
        capacity: usize,
        requests: &'a Ledger,
    ) -> Self {
        View {
            now,
            model,
            infq,
            table,
            predictor,
            capacity,
            requests,
        }
    }
    /// A request's arrival time.
    pub fn arrival(&self, r: RequestId) -> Nanos {
        self.requests.get(r).arrival
    }
    /// A request's deadline (arrival + SLA).
    pub fn deadline(&self, r: RequestId) -> Nanos {
        self.requests.get(r).deadline
    }
    /// The lengths the predictor assumes for a request (actual encoder length, predicted
    /// decoder length).
    pub(crate) fn predicted_len(&self, r: RequestId) -> Lengths {
        self.predicted_len_of(self.requests.get(r))
    }
    /// [`View::predicted_len`] of a request already looked up.
    pub(crate) fn predicted_len_of(&self, q: &Request) -> Lengths {
        self.predictor
            .predicted_in(usize::from(q.part), q.enc_len(), q.dec_done)
    }
    /// A request's record, to read several of its fields with one lookup. Policies see its
    /// actual decoder length here too: they must not use it (the predictor's is
    /// [`View::predicted_len`]).
    pub(crate) fn request(&self, r: RequestId) -> &Request {
        self.requests.get(r)
    }
    /// The co-located model a request is for (0 for a single model).
    pub fn part(&self, r: RequestId) -> usize {
        usize::from(self.requests.get(r).part)
    }
    /// Free activation slots.
    pub(crate) fn free_slots(&self) -> usize {
        self.capacity.saturating_sub(self.table.in_flight())
    }
    /// How many newcomers a running batch capped at `max_batch` can take now (within the free
    /// slots too).
    pub(crate) fn room(&self, max_batch: u32) -> usize {
        (max_batch as usize)
            .saturating_sub(self.table.in_flight())
            .min(self.free_slots())
    }
}

/// True when a policy has nothing to decide and the active sub-batch just runs: requests are
/// in flight, and none is pending or the policy never preempts ([`Policy::never_preempts`]),
/// unless it interleaves several sub-batches ([`Policy::interleaves`]). The [`Policy`]
/// contract: the engine asks no policy then, and `auto` answers so for the candidate it serves
/// with.
pub(crate) fn nothing_to_decide(
    table: &BatchTable,
    none_pending: bool,
    never_preempts: bool,
    interleaves: bool,
) -> bool {
    let interleaving = interleaves && table.entries().len() > 1;
    !table.is_empty() && (none_pending || never_preempts) && !interleaving
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
    /// True for policies that never admit while requests are in flight (they start the next
    /// batch when the table is empty): the engine then runs the active sub-batch without asking
    /// them, whatever is pending.
    fn never_preempts(&self) -> bool {
        false
    }
    /// True for a policy that switches between sub-batches ([`Decision::Swap`]): the engine
    /// asks it before every node while the table holds more than one, pending requests or not.
    fn interleaves(&self) -> bool {
        false
    }
    /// Nodes at which sub-batches merge across timesteps (cells); none by default.
    fn cell_nodes(&self, _model: &Model) -> Vec<bool> {
        Vec::new()
    }
    /// Sizes the policy's scratch, before the run, for a BatchTable of up to `max_batch`
    /// requests (so at most `max_batch` entries): deciding then allocates nothing while
    /// serving (`tests/alloc.rs`). A policy that keeps no scratch ignores it.
    fn reserve(&mut self, _max_batch: usize) {}
}
