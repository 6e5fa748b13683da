//! `lazy` (LazyBatching) and its variants. When requests are pending and the slack check
//! ([`super::slack`], the paper's Eq. 2) allows it, preempt the active sub-batch at the node
//! boundary, push the newcomers on the BatchTable, let them catch up and merge; otherwise let the
//! active batch run on and start the pending ones when the table empties. No time window
//! anywhere. The Oracle ([`super::oracle`]) is the same policy with an exact check.
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
//! until the table drains or the active entry is in an encoder or at a static node. On GNMT the
//! paper's LazyB lets a short prefix of the queue preempt a batch in its long decoder, run the
//! encoders in a small group and rejoin with fresh predicted work that closes the gate on the
//! rest of the queue (`docs/policies.md`, the GNMT ablation); this variant measures that cause.
//! On models without a decoder it is `lazy`.

use super::spec::{Entry, ParamError, Parsed};
use super::{oracle, slack};
use super::{Decision, Policy, View};

/// LazyBatching with the conservative predictor, or the Oracle; merging at a common loop node
/// whatever the timestep, or (`strict`) only at an identical (node, timestep).
#[derive(Clone, Debug)]
pub struct Lazy {
    oracle: bool,
    strict: bool,
    /// Never preempt an active sub-batch standing at a decoder node (the ablation).
    keep_decoder: bool,
    /// The Oracle's scratch: one group per BatchTable entry.
    groups: Vec<oracle::Group>,
    /// The entries below the active one, summed once per table generation.
    below: Below,
}

impl Lazy {
    /// The paper's LazyB.
    pub(crate) fn conservative() -> Self {
        Lazy {
            oracle: false,
            strict: false,
            keep_decoder: false,
            groups: Vec::new(),
            below: Below::default(),
        }
    }
    /// LazyB with exact batched latencies.
    pub fn oracle() -> Self {
        Lazy {
            oracle: true,
            strict: false,
            keep_decoder: false,
            groups: Vec::new(),
            below: Below::default(),
        }
    }
    /// The same policy merging only at an identical (node, timestep): the ablation of the merge
    /// rule.
    pub fn strict(self) -> Self {
        Lazy {
            strict: true,
            ..self
        }
    }
    /// The same policy never preempting an active sub-batch in its decoder: the GNMT ablation.
    pub fn keeping_decoder(self) -> Self {
        Lazy {
            keep_decoder: true,
            ..self
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
    fn refresh(&mut self, v: &View, oracle: bool) {
        let generation = v.table.generation();
        if self.generation == Some(generation) {
            return;
        }
        let entries = v.table.entries();
        let below = &entries[..entries.len().saturating_sub(1)];
        self.load = below.iter().fold((0, u64::MAX), |(t, d), sb| {
            let (et, ed) = slack::entry_load(v, sb);
            (t + et, d.min(ed))
        });
        self.groups.clear();
        if oracle {
            self.groups
                .extend(below.iter().map(|sb| oracle::entry_group(v, sb)));
        }
        self.generation = Some(generation);
    }
}

impl Policy for Lazy {
    fn name(&self) -> String {
        match (self.oracle, self.strict, self.keep_decoder) {
            (true, false, false) => "oracle",
            (true, true, false) => "oracle:strict",
            (false, false, false) => "lazy",
            (false, true, false) => "lazy:strict",
            (true, _, true) => "oracle:no-decoder-preempt",
            (false, _, true) => "lazy:no-decoder-preempt",
        }
        .into()
    }

    /// The Oracle's groups: one per entry, the table's at most `max_batch`.
    fn reserve(&mut self, max_batch: usize) {
        if self.oracle {
            self.groups.reserve(max_batch);
            self.below.groups.reserve(max_batch);
        }
    }

    fn cell_nodes(&self, model: &crate::graph::Model) -> Vec<bool> {
        if self.strict {
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
            return Decision::Admit {
                count: k_max,
                pad: false,
            };
        }
        if self.keep_decoder && in_decoder(v) {
            return Decision::Run;
        }
        self.below.refresh(v, self.oracle);
        let k = if self.oracle {
            let below = (self.below.load, &self.below.groups[..]);
            oracle::admissible(v, k_max, below, &mut self.groups)
        } else {
            slack::admissible(v, k_max, self.below.load)
        };
        if k > 0 {
            Decision::Admit {
                count: k,
                pad: false,
            }
        } else {
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

/// `lazy`, `oracle`, `lazy:strict`, `oracle:strict`, `lazy:no-decoder-preempt`,
/// `oracle:no-decoder-preempt`; `lazy+cell` is the name cross-step
/// merging had while it was an option.
/// (`lazy:adaptive` has its own entry, in `adaptive.rs`.)
pub(crate) const ENTRY: Entry = Entry {
    names: &["lazy", "oracle", "lazy+cell"],
    variant: None,
    usage: "lazy[:strict|:no-decoder-preempt], oracle[:strict|:no-decoder-preempt]",
    parse: parse_lazy,
};

fn parse_lazy(name: &str, params: &[&str], _: u32) -> std::result::Result<Parsed, ParamError> {
    let (strict, keep_decoder) = match (name, params) {
        ("lazy+cell", []) | (_, []) => (false, false),
        ("lazy+cell", _) => return Err("takes no parameters".into()),
        (_, ["strict"]) => (true, false),
        (_, ["no-decoder-preempt"]) => (false, true),
        _ => {
            return Err(
                "takes no parameter but 'strict' (lazy:strict), 'no-decoder-preempt' \
                 or, for lazy, 'adaptive'"
                    .into(),
            )
        }
    };
    let oracle = name == "oracle";
    Ok(Parsed {
        build: std::sync::Arc::new(move |_| {
            let l = if oracle {
                Lazy::oracle()
            } else {
                Lazy::conservative()
            };
            let l = if strict { l.strict() } else { l };
            Box::new(if keep_decoder { l.keeping_decoder() } else { l })
        }),
        uses_sla: true,
        // the Oracle's look-ahead assumes every entry merges as it catches up: not so for
        // sub-batches of different models
        one_model_only: oracle,
    })
}

#[cfg(test)]
mod tests;
