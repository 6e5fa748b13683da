//! `lazy` (LazyBatching) and its readings. When requests are pending and the slack check
//! ([`super::slack`], the paper's Eq. 2) allows it, preempt the active sub-batch at the node
//! boundary, push the newcomers on the BatchTable, let them catch up and merge; when it refuses,
//! let the active batch complete uninterrupted. No time window anywhere. The Oracle
//! ([`super::oracle`]) is the same policy with an exact check.
//!
//! ## A refusal holds until the active batch completes (the latch)
//!
//! §IV-B: "When the … predictor determines that an additional batching can violate SLA, then
//! the scheduler does not try to batch more inputs and authorize the currently active batch to
//! complete its execution uninterrupted." `lazy` reads this literally. When the gate refuses,
//! the policy remembers the members of **the currently active batch: the sub-batch on top of
//! the BatchTable at that moment**, the one executing (the paper's "active batch", which its
//! Fig. 8 keeps on top of the stack; the entries below are preempted batches, not executing).
//! Until every one of those members has completed, nobody is admitted and the gate is not asked
//! again; the members may meanwhile merge with entries below as they catch up, or split where
//! their lengths diverge — they are followed by identity, wherever they stand. Then the gate is
//! asked again at the next node boundary. An idle server admits at once, as always (there is no
//! active batch to protect). The Oracle follows the same rule.
//!
//! `lazy:recheck` is the reading the code had until 2026-12 and is kept as an ablation: the
//! gate is asked again at every node boundary while anyone is pending, so a refusal lasts one
//! node, and as the active batch's remaining work shrinks a short prefix of the queue slips in
//! and preempts it (GNMT under `paper` at 512 req/s, 500 requests, seed 1: 213 preemptions, a
//! mean encoder batch of 2.2 and a mean latency of 61.2 ms, against 71, 3.8 and 19.7 ms
//! latched; `docs/policies.md`).
//!
//! ## Who is admitted when the gate passes
//!
//! The paper's predictor weighs "the active batch and pending inputs" and says nothing of
//! admitting part of the queue. `lazy` admits the longest FIFO prefix of the pending queue
//! (within the free slots and the maximum batch) for which no affected deadline is predicted
//! missed; `lazy:all` admits every pending request that fits the slots or none
//! (all-or-nothing), an equally plausible reading kept as an ablation.
//!
//! ## A request past its predicted decoder length
//!
//! Eq. 2 prices a request's decoder at `dec_timesteps` (the coverage step, `--coverage`); the
//! paper is silent on a request still decoding past it (14.4% of newstest2019's outputs exceed
//! 32 words). `lazy` prices it as one step from done (its predicted length is its steps so far
//! plus one); `lazy:past-again` prices it at `dec_timesteps` more steps, and `lazy:past-max` at
//! the model's longest decoder length — the conservative readings the paper's principle ("we
//! overestimate … for a conservative slack prediction") would favour.
//!
//! ## The merge rule
//!
//! The paper's BatchTable keeps each entry's *graph node ID* and merges entries "able to execute
//! a common node" (§IV-B); Algorithm 1 lists every decoder node once, × `dec_timesteps`; and §III-B
//! argues that the cells of an unrolled recurrent layer share their weights across timesteps. So
//! `lazy` and `oracle` merge two sub-batches that stand at the same node of a loop (an encoder or
//! decoder layer) whatever their timesteps: a newcomer at decoder step 1 and a batch at step 7 run
//! the layer together, each member at its own step, position and length. `lazy:strict` and
//! `oracle:strict` merge only at an identical (node, timestep) — our first reading, kept as an
//! ablation. (`lazy+cell`, the name this rule had as an option, is accepted as an alias of
//! `lazy`.)
//!
//! ## `lazy:no-decoder-preempt` (an ablation, not the paper's)
//!
//! The same gate, but never while the active sub-batch stands at a decoder node: newcomers wait
//! until the table drains or the active entry is in an encoder or at a static node. It measures
//! how much of GNMT's result comes from preempting a batch in its long decoder (`docs/policies.md`,
//! the GNMT ablation). On models without a decoder it is `lazy`.
//!
//! The readings combine (`lazy:recheck:all`); a policy's name lists them in [`READINGS`]' order.

use super::slack::{self, Past};
use super::spec::{Entry, ParamError, Parsed};
use super::{oracle, Decision, Policy, View};
use crate::runtime::RequestId;

/// The readings of the paper's text a `lazy` policy runs under; each field's default is
/// `lazy`'s own reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Readings {
    /// Merge only at an identical (node, timestep) (`strict`).
    pub strict: bool,
    /// Never preempt an active sub-batch standing at a decoder node (`no-decoder-preempt`).
    pub keep_decoder: bool,
    /// Ask the gate again at every node after a refusal, instead of latching (`recheck`).
    pub recheck: bool,
    /// Admit every pending request that fits or none (`all`).
    pub all: bool,
    /// How a request past its predicted decoder length is priced (`past-again`, `past-max`).
    pub past: Past,
}

/// A reading's name in a policy string, and what it sets.
pub(crate) type Reading = (&'static str, fn(&mut Readings));

/// Each reading, in the order a policy's name lists them.
pub(crate) const READINGS: &[Reading] = &[
    ("strict", |r| r.strict = true),
    ("no-decoder-preempt", |r| r.keep_decoder = true),
    ("recheck", |r| r.recheck = true),
    ("all", |r| r.all = true),
    ("past-again", |r| r.past = Past::Again),
    ("past-max", |r| r.past = Past::Max),
];

impl Readings {
    /// The names of the readings that differ from `lazy`'s, in [`READINGS`]' order: those
    /// whose setting leaves these readings as they are.
    fn names(self) -> impl Iterator<Item = &'static str> {
        READINGS.iter().filter_map(move |&(name, set)| {
            let mut with = self;
            set(&mut with);
            (with == self).then_some(name)
        })
    }

    /// Reads `params` (each a reading's name, at most once; one `past-` reading).
    pub(crate) fn parse(params: &[&str]) -> std::result::Result<Readings, ParamError> {
        let mut r = Readings::default();
        for (i, p) in params.iter().enumerate() {
            let Some(&(_, set)) = READINGS.iter().find(|(name, _)| name == p) else {
                let known: Vec<&str> = READINGS.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "unknown reading '{p}' (readings: {}; or, for lazy, 'adaptive')",
                    known.join(", ")
                )
                .into());
            };
            if params[..i].contains(p) {
                return Err(format!("'{p}' given twice").into());
            }
            let before = r.past;
            set(&mut r);
            if before != Past::Step && r.past != before {
                return Err("takes one of 'past-again' and 'past-max'".into());
            }
        }
        Ok(r)
    }
}

/// LazyBatching with the conservative predictor, or the Oracle, under [`Readings`].
#[derive(Clone, Debug)]
pub struct Lazy {
    oracle: bool,
    readings: Readings,
    /// The members of the sub-batch that was active when the gate last refused, sorted: nobody
    /// is admitted until all have completed (empty: no refusal holds).
    latch: Vec<RequestId>,
    /// The Oracle's scratch: one group per BatchTable entry.
    groups: Vec<oracle::Group>,
    /// The entries below the active one, summed once per table generation.
    below: Below,
}

impl Lazy {
    fn with(oracle: bool, readings: Readings) -> Self {
        Lazy {
            oracle,
            readings,
            latch: Vec::new(),
            groups: Vec::new(),
            below: Below::default(),
        }
    }
    /// The paper's LazyB.
    pub(crate) fn conservative() -> Self {
        Lazy::with(false, Readings::default())
    }
    /// LazyB with exact batched latencies.
    pub fn oracle() -> Self {
        Lazy::with(true, Readings::default())
    }
    /// The same policy under other readings.
    pub(crate) fn reading(self, readings: Readings) -> Self {
        Lazy { readings, ..self }
    }
    /// The same policy merging only at an identical (node, timestep): the ablation of the merge
    /// rule.
    pub fn strict(self) -> Self {
        let readings = Readings {
            strict: true,
            ..self.readings
        };
        self.reading(readings)
    }
    /// The same policy never preempting an active sub-batch in its decoder: the GNMT ablation.
    pub fn keeping_decoder(self) -> Self {
        let readings = Readings {
            keep_decoder: true,
            ..self.readings
        };
        self.reading(readings)
    }

    /// Whether a refusal still holds: some member of the sub-batch active at the last refusal
    /// is still in flight. Clears the latch when none is.
    fn latched(&mut self, v: &View) -> bool {
        if self.latch.is_empty() {
            return false;
        }
        let holds = v
            .table
            .entries()
            .iter()
            .flat_map(|sb| sb.members.iter())
            .any(|r| self.latch.binary_search(r).is_ok());
        if !holds {
            self.latch.clear();
        }
        holds
    }

    /// Latches a refusal on the active sub-batch's members.
    fn refuse(&mut self, v: &View) {
        if let Some(top) = v.table.top() {
            self.latch.clear();
            self.latch.extend_from_slice(&top.members);
            self.latch.sort_unstable();
        }
    }
}

/// What the policy remembers of the entries below the active one: they do not move until the
/// table's generation changes, so their load is summed once per generation, not per decision.
#[derive(Clone, Debug, Default)]
struct Below {
    generation: Option<u64>,
    /// Σ remaining single-input latency and earliest deadline of the entries below the top.
    load: (u64, u64),
    /// The Oracle's groups for those entries, bottom first.
    groups: Vec<oracle::Group>,
}

impl Below {
    /// Brings the cache up to date with the table (`oracle`: also the groups).
    fn refresh(&mut self, v: &View, oracle: bool, past: Past) {
        let generation = v.table.generation();
        if self.generation == Some(generation) {
            return;
        }
        let entries = v.table.entries();
        let below = &entries[..entries.len().saturating_sub(1)];
        self.load = below.iter().fold((0, u64::MAX), |(t, d), sb| {
            let (et, ed) = slack::entry_load(v, sb, past);
            (t + et, d.min(ed))
        });
        self.groups.clear();
        if oracle {
            self.groups
                .extend(below.iter().map(|sb| oracle::entry_group(v, sb, past)));
        }
        self.generation = Some(generation);
    }
}

impl Policy for Lazy {
    fn name(&self) -> String {
        let base = if self.oracle { "oracle" } else { "lazy" };
        std::iter::once(base)
            .chain(self.readings.names())
            .collect::<Vec<_>>()
            .join(":")
    }

    /// The latch (the members of one sub-batch) and the Oracle's groups (one per entry): the
    /// table's at most `max_batch` each.
    fn reserve(&mut self, max_batch: usize) {
        self.latch.reserve(max_batch);
        if self.oracle {
            self.groups.reserve(max_batch);
            self.below.groups.reserve(max_batch);
        }
    }

    fn cell_nodes(&self, model: &crate::graph::Model) -> Vec<bool> {
        if self.readings.strict {
            Vec::new()
        } else {
            super::cellular::loop_cells(model)
        }
    }

    fn decide(&mut self, v: &View) -> Decision {
        if v.infq.is_empty() {
            return Decision::Run;
        }
        let k_max = v.infq.len().min(v.free_slots()).min(v.table.max_batch());
        if k_max == 0 {
            return Decision::Run;
        }
        if v.table.is_empty() {
            // no active batch to protect: whatever a refusal held is over
            self.latch.clear();
            return Decision::Admit {
                count: k_max,
                pad: false,
            };
        }
        if self.readings.keep_decoder && in_decoder(v) {
            return Decision::Run;
        }
        if !self.readings.recheck && self.latched(v) {
            return Decision::Run;
        }
        let past = self.readings.past;
        self.below.refresh(v, self.oracle, past);
        let k = if self.oracle {
            let below = (self.below.load, &self.below.groups[..]);
            oracle::admissible(v, k_max, below, past, &mut self.groups)
        } else {
            slack::admissible(v, k_max, self.below.load, past)
        };
        let k = if self.readings.all && k < k_max { 0 } else { k };
        if k > 0 {
            Decision::Admit {
                count: k,
                pad: false,
            }
        } else {
            if !self.readings.recheck {
                self.refuse(v);
            }
            Decision::Run
        }
    }
}

/// True when the active sub-batch stands at a decoder node.
fn in_decoder(v: &View) -> bool {
    v.table
        .top()
        .is_some_and(|top| v.model.node(top.next.node).class == crate::graph::Class::Decoder)
}

/// `lazy` and `oracle` with any of the [`READINGS`] (`lazy:strict`, `oracle:recheck:all`, …);
/// `lazy+cell` is the name cross-step merging had while it was an option. (`lazy:adaptive` has
/// its own entry, in `adaptive.rs`.)
pub(crate) const ENTRY: Entry = Entry {
    names: &["lazy", "oracle", "lazy+cell"],
    variant: None,
    usage: "lazy[:strict][:no-decoder-preempt][:recheck][:all][:past-again|:past-max], oracle[:the same readings]",
    examples: &["lazy", "oracle", "lazy:strict", "lazy:no-decoder-preempt", "lazy:recheck:all"],
    parse: parse_lazy,
};

fn parse_lazy(name: &str, params: &[&str], _: u32) -> std::result::Result<Parsed, ParamError> {
    if name == "lazy+cell" && !params.is_empty() {
        return Err("takes no parameters".into());
    }
    let readings = Readings::parse(params)?;
    let oracle = name == "oracle";
    Ok(Parsed {
        build: std::sync::Arc::new(move |_| {
            let l = if oracle {
                Lazy::oracle()
            } else {
                Lazy::conservative()
            };
            Box::new(l.reading(readings))
        }),
        uses_sla: true,
        // the Oracle's look-ahead assumes every entry merges as it catches up: not so for
        // sub-batches of different models
        one_model_only: oracle,
    })
}

#[cfg(test)]
mod tests;
