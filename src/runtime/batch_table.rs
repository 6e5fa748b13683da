//! The paper's BatchTable: a stack of sub-batches, the top one active. After each node the top
//! sub-batch advances; requests that finished leave; members whose next unit differs split
//! (members of a seq2seq sub-batch with different encoder lengths leave the encoder at different
//! steps); and the two top entries merge while their next unit is identical and the merged
//! sub-batch stays within the maximum batch.
//!
//! Cell merging (cellular batching, `lazy+cell`): at nodes marked as cells — loop nodes whose
//! weights every timestep shares — "identical" ignores the timestep, so requests at different
//! steps of the same layer run together; each member then keeps its own step.

use super::request::RequestId;
use crate::graph::{Lengths, Model, NodeStep};

/// One stack entry: requests that execute together, and the unit they execute next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubBatch {
    /// Members, in admission order.
    pub members: Vec<RequestId>,
    /// Each member's step at `next.node` (all equal to `next.step` unless cells merged).
    pub steps: Vec<u32>,
    /// The next (node, step) the sub-batch executes (the step of its first member).
    pub next: NodeStep,
    /// Graph batching: every member runs to these lengths (the longest member's) and all
    /// complete together at the end; None for node-level batching.
    pub padded: Option<Lengths>,
    /// At the end of loop `.0`: how many more times every member runs it again (the least of
    /// the members' remaining iterations), so that wrapping does not visit every member each
    /// time. None: not known (recomputed at the next loop end).
    pub wraps: Option<(u32, u32)>,
}

/// What one `advance` did (the requests that completed go to the caller's buffer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advance {
    /// Merges performed.
    pub merges: u32,
    /// Splits performed (members diverging to different next units).
    pub splits: u32,
    /// Every member of the active sub-batch ran its loop again: each member's step went up by
    /// one, nobody joined or left (the table's generation did not change for it).
    pub wrapped: bool,
}

/// The stack. The top (the active sub-batch) is the last element. Member lists come from a
/// pool sized at creation, so pushing, advancing, splitting and merging allocate nothing.
#[derive(Clone, Debug, Default)]
pub struct BatchTable {
    stack: Vec<SubBatch>,
    max_batch: usize,
    pool: Vec<Vec<RequestId>>,
    step_pool: Vec<Vec<u32>>,
    groups: Vec<SubBatch>,
    /// Per node: merge across timesteps (empty: never).
    cells: Vec<bool>,
    /// Per node: true when every member moves on to the next node at its own step whatever
    /// its lengths (a node that ends neither its loop nor its model).
    straight: Vec<bool>,
    /// Per node: how many consecutive straight nodes start there.
    straight_len: Vec<u32>,
    /// Bumped whenever the active sub-batch's members or their steps may have changed (so the
    /// engine rebuilds its member list only then).
    generation: u64,
    /// Scratch for the invariant check (every member once, sorted), so that checking after
    /// every change allocates nothing once warm.
    seen: Vec<RequestId>,
}

impl BatchTable {
    /// An empty table for sub-batches of at most `max_batch` requests.
    pub fn new(max_batch: u32) -> Self {
        let mb = max_batch as usize;
        BatchTable {
            stack: Vec::with_capacity(mb + 1),
            max_batch: mb,
            pool: (0..mb + 2).map(|_| Vec::with_capacity(mb)).collect(),
            step_pool: (0..mb + 2).map(|_| Vec::with_capacity(mb)).collect(),
            groups: Vec::with_capacity(mb),
            cells: Vec::new(),
            straight: Vec::new(),
            straight_len: Vec::new(),
            generation: 0,
            // as many members as the pool can hold: checking never allocates while serving
            seen: Vec::with_capacity(if Self::CHECKED { (mb + 2) * mb } else { 0 }),
        }
    }

    /// Prepares for `model`: which nodes every member leaves for the next node at its own step
    /// (so that advancing past them touches no member), and whose running tells the engine
    /// nothing (not a prefill's first token).
    pub(crate) fn set_model(&mut self, model: &Model) {
        self.straight = model
            .nodes
            .iter()
            .map(|n| {
                let ends_loop = n
                    .loop_id
                    .is_some_and(|l| model.loops[l.0 as usize].last == n.id);
                let ends_part = n.id.0 + 1 >= model.parts[model.part_of(n.id)].end;
                // (the engine records a prefill's first token as its argmax runs)
                !ends_loop && !ends_part && !model.emits_first_token(n.id)
            })
            .collect();
        // runs of straight nodes of one class (so that device time can be told by class)
        self.straight_len = vec![0; self.straight.len() + 1];
        for i in (0..self.straight.len()).rev() {
            if self.straight[i] {
                let same = model.nodes.get(i + 1).map(|n| n.class) == Some(model.nodes[i].class);
                self.straight_len[i] = 1 + if same { self.straight_len[i + 1] } else { 0 };
            }
        }
    }

    /// How many nodes the active sub-batch can run straight on before anything can happen to
    /// the table: nodes of one class that end neither a loop nor the model, and not past the
    /// node where the entry below stands (where they could merge).
    pub(crate) fn straight_ahead(&self) -> u32 {
        let Some(top) = self.stack.last() else {
            return 0;
        };
        let i = top.next.node.0;
        let mut k = self.straight_len.get(i as usize).copied().unwrap_or(0);
        if let [.., below, _] = self.stack.as_slice() {
            let b = below.next.node.0;
            if b > i {
                k = k.min(b - i);
            }
        }
        k
    }

    /// Moves the active sub-batch `k` straight nodes on ([`BatchTable::straight_ahead`] or
    /// fewer) and merges it with the entry below if they then meet. Returns the merges.
    pub(crate) fn advance_straight(&mut self, k: u32) -> u32 {
        let Some(top) = self.stack.last_mut() else {
            return 0;
        };
        top.next.node.0 += k;
        let merges = if top.padded.is_none() {
            self.merge_top()
        } else {
            0
        };
        self.debug_check();
        merges
    }

    /// Changes whenever the active sub-batch's members or their steps may have changed.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Marks the nodes at which sub-batches merge across timesteps (one flag per node).
    pub(crate) fn set_cells(&mut self, cells: Vec<bool>) {
        self.cells = cells;
    }

    /// True when node-level identity ignores the step at `n`.
    pub(crate) fn is_cell(&self, n: NodeStep) -> bool {
        self.cells.get(n.node.idx()).copied().unwrap_or(false)
    }

    /// The merge key of a unit: the node, and the step unless the node is a cell.
    fn key(&self, n: NodeStep) -> (u32, Option<u32>) {
        (n.node.0, (!self.is_cell(n)).then_some(n.step))
    }

    /// The entries, bottom first.
    pub fn entries(&self) -> &[SubBatch] {
        &self.stack
    }

    /// The active sub-batch.
    pub fn top(&self) -> Option<&SubBatch> {
        self.stack.last()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.stack.is_empty()
    }

    /// Requests in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.stack.iter().map(|s| s.members.len()).sum()
    }

    /// The maximum sub-batch size.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    fn take_vecs(&mut self) -> (Vec<RequestId>, Vec<u32>) {
        let mb = self.max_batch;
        (
            self.pool.pop().unwrap_or_else(|| Vec::with_capacity(mb)),
            self.step_pool
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(mb)),
        )
    }

    fn recycle(&mut self, mut m: Vec<RequestId>, mut s: Vec<u32>) {
        m.clear();
        s.clear();
        self.pool.push(m);
        self.step_pool.push(s);
    }

    /// Pushes a new active sub-batch of `ids` at `next` (preempting the current top, if any),
    /// with member lists from the pool.
    pub fn push_from(
        &mut self,
        ids: impl IntoIterator<Item = RequestId>,
        next: NodeStep,
        padded: Option<Lengths>,
    ) {
        let (mut members, mut steps) = self.take_vecs();
        members.extend(ids);
        steps.extend(std::iter::repeat_n(next.step, members.len()));
        self.stack.push(SubBatch {
            members,
            steps,
            next,
            padded,
            wraps: None,
        });
        self.generation += 1;
        self.merge_top();
        self.debug_check();
    }

    /// Puts the entry below the active one on top, the active one beneath it where it stands
    /// (the chunked-prefill peer interleaving a prefill with its decode batch's iterations:
    /// outside the paper, whose table is a stack). Two adjacent entries never stand where
    /// they could merge (the invariant), so swapped they do not either. False, and nothing
    /// changed, with fewer than two entries.
    pub(crate) fn swap_top(&mut self) -> bool {
        let n = self.stack.len();
        if n < 2 {
            return false;
        }
        self.stack.swap(n - 2, n - 1);
        self.generation += 1;
        self.debug_check();
        true
    }

    /// Advances the top sub-batch past the unit it just executed. `lengths(r)` gives a member's
    /// lengths (actual ones in the engine, predicted ones in a policy's look-ahead); requests
    /// that completed are appended to `finished`.
    pub fn advance(
        &mut self,
        model: &Model,
        lengths: impl Fn(RequestId) -> Lengths,
        finished: &mut Vec<RequestId>,
    ) -> Advance {
        let mut out = Advance::default();
        let node = match self.stack.last_mut() {
            None => return out,
            Some(top)
                if self
                    .straight
                    .get(top.next.node.idx())
                    .copied()
                    .unwrap_or(false) =>
            {
                // the usual case: everyone moves to the next node at their own steps
                top.next.node.0 += 1;
                if top.padded.is_none() {
                    out.merges += self.merge_top();
                }
                self.debug_check();
                return out;
            }
            Some(top) => top.next.node,
        };
        if self.wrap_in_place(model, &lengths) {
            out.wrapped = true;
            out.merges += self.merge_top();
            self.debug_check();
            return out;
        }
        self.generation += 1;
        let Some(mut top) = self.stack.pop() else {
            return out;
        };
        if let Some(pad) = top.padded {
            match model.next_step(top.next, pad) {
                Some(next) => {
                    top.steps.iter_mut().for_each(|s| *s = next.step);
                    self.stack.push(SubBatch { next, ..top });
                }
                None => {
                    finished.extend_from_slice(&top.members);
                    self.recycle(top.members, top.steps);
                }
            }
        } else if let Some(next) = Self::common_next(model, &top, &lengths) {
            // the usual case: the whole sub-batch moves on together
            top.steps.iter_mut().for_each(|s| *s = next.step);
            self.stack.push(SubBatch { next, ..top });
        } else {
            // group members by their next unit (its node only, at cells), keeping admission
            // order within a group
            let mut groups = std::mem::take(&mut self.groups);
            for (j, &r) in top.members.iter().enumerate() {
                let at = NodeStep {
                    node,
                    step: top.steps[j],
                };
                match model.next_step(at, lengths(r)) {
                    None => finished.push(r),
                    Some(next) => {
                        let key = self.key(next);
                        match groups.iter_mut().find(|g| self.key(g.next) == key) {
                            Some(g) => {
                                g.members.push(r);
                                g.steps.push(next.step);
                            }
                            None => {
                                let (mut members, mut steps) = self.take_vecs();
                                members.push(r);
                                steps.push(next.step);
                                groups.push(SubBatch {
                                    members,
                                    steps,
                                    next,
                                    padded: None,
                                    wraps: None,
                                });
                            }
                        }
                    }
                }
            }
            self.recycle(top.members, top.steps);
            out.splits = groups.len().saturating_sub(1) as u32;
            // the group furthest behind in the node order runs first (it is on top) so that the
            // others, preempted, can be caught up with and merged again; a group that stands
            // where the entry below it does merges with it at once
            groups.sort_by_key(|g| std::cmp::Reverse(g.next));
            for g in groups.drain(..) {
                self.stack.push(g);
                out.merges += self.merge_top();
            }
            self.groups = groups;
        }
        out.merges += self.merge_top();
        self.debug_check();
        out
    }

    /// At the last node of a loop that every member of the active sub-batch runs again (its own
    /// step + 1 within its own step count): moves each member to its next step at the loop's
    /// first node, in place, and returns true.
    fn wrap_in_place(&mut self, model: &Model, lengths: &impl Fn(RequestId) -> Lengths) -> bool {
        let Some(top) = self.stack.last_mut() else {
            return false;
        };
        let node = model.node(top.next.node);
        let Some(l) = node.loop_id else {
            return false;
        };
        let lp = &model.loops[l.0 as usize];
        if lp.last != node.id {
            return false;
        }
        let left = match top.wraps {
            Some((id, left)) if id == l.0 => left,
            _ => top
                .members
                .iter()
                .zip(&top.steps)
                .map(|(&r, &s)| {
                    let len = top.padded.unwrap_or_else(|| lengths(r));
                    lp.steps(len).saturating_sub(s + 1)
                })
                .min()
                .unwrap_or(0),
        };
        if left == 0 {
            top.wraps = None;
            return false;
        }
        top.wraps = Some((l.0, left - 1));
        top.steps.iter_mut().for_each(|s| *s += 1);
        top.next = NodeStep {
            node: lp.first,
            step: top.next.step + 1,
        };
        true
    }

    /// The next unit of every member when they all have one and it is the same.
    fn common_next(
        model: &Model,
        sb: &SubBatch,
        lengths: &impl Fn(RequestId) -> Lengths,
    ) -> Option<NodeStep> {
        let node = sb.next.node;
        let mut it = sb.members.iter().zip(&sb.steps);
        let (&r0, &s0) = it.next()?;
        let first = model.next_step(NodeStep { node, step: s0 }, lengths(r0))?;
        it.all(|(&r, &s)| model.next_step(NodeStep { node, step: s }, lengths(r)) == Some(first))
            .then_some(first)
    }

    fn mergeable(&self, a: &SubBatch, b: &SubBatch) -> bool {
        self.key(a.next) == self.key(b.next)
            && a.padded.is_none()
            && b.padded.is_none()
            && a.members.len() + b.members.len() <= self.max_batch
    }

    /// Merges the two top entries while their next unit is identical and the result fits.
    fn merge_top(&mut self) -> u32 {
        let mut merges = 0;
        while self.stack.len() >= 2 {
            let n = self.stack.len();
            if !self.mergeable(&self.stack[n - 2], &self.stack[n - 1]) {
                break;
            }
            let Some(mut top) = self.stack.pop() else {
                break;
            };
            if let Some(below) = self.stack.last_mut() {
                below.members.append(&mut top.members);
                below.steps.append(&mut top.steps);
                below.wraps = None;
            }
            self.recycle(top.members, top.steps);
            self.generation += 1;
            merges += 1;
        }
        merges
    }

    /// Checks the invariants: no empty entry, no entry over the maximum batch, one step per
    /// member, no request twice, and no two adjacent entries that should have merged. The
    /// error describes the first violation.
    pub fn check(&self) -> crate::Result<()> {
        self.violation(&mut Vec::new()).map_or(Ok(()), |e| {
            Err(crate::Error::Internal(format!(
                "BatchTable invariant broken: {e}"
            )))
        })
    }

    /// The first broken invariant, described (`seen`: scratch for the members).
    fn violation(&self, seen: &mut Vec<RequestId>) -> Option<String> {
        seen.clear();
        for (i, sb) in self.stack.iter().enumerate() {
            if sb.members.is_empty() {
                return Some(format!("entry {i} is empty"));
            }
            if sb.members.len() > self.max_batch {
                return Some(format!(
                    "entry {i} holds {} > max batch {}",
                    sb.members.len(),
                    self.max_batch
                ));
            }
            if sb.steps.len() != sb.members.len() {
                return Some(format!(
                    "entry {i} has {} steps for {} members",
                    sb.steps.len(),
                    sb.members.len()
                ));
            }
            if !self.is_cell(sb.next) && sb.steps.iter().any(|&s| s != sb.next.step) {
                return Some(format!(
                    "entry {i} mixes steps at a node that is not a cell"
                ));
            }
            seen.extend_from_slice(&sb.members);
        }
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Some(format!("request {} is in two entries", w[0].0));
        }
        if let [.., a, b] = self.stack.as_slice() {
            if self.mergeable(a, b) {
                return Some("the two top entries stand at the same unit but did not merge".into());
            }
        }
        None
    }

    /// Checks the invariants after every change in debug builds and with the `check` feature
    /// (the test command turns it on, so the property tests check them in release builds too);
    /// compiled out otherwise.
    fn debug_check(&mut self) {
        if Self::CHECKED {
            let mut seen = std::mem::take(&mut self.seen);
            let broken = self.violation(&mut seen);
            self.seen = seen;
            if let Some(e) = broken {
                panic!("BatchTable invariant broken: {e}");
            }
        }
    }

    /// True when the invariants are checked after every change (debug builds, or the `check`
    /// feature).
    pub const CHECKED: bool = cfg!(any(debug_assertions, feature = "check"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{zoo, NodeId};

    fn at(node: u32, step: u32) -> NodeStep {
        NodeStep {
            node: NodeId(node),
            step,
        }
    }

    fn ids(v: &[u32]) -> Vec<RequestId> {
        v.iter().map(|&i| RequestId(i)).collect()
    }

    const LEN: Lengths = Lengths { enc: 1, dec: 1 };

    #[test]
    fn a_newcomer_catches_up_and_merges_where_the_batch_below_stands() {
        // the paper's example: Req1 at C, Req2 pushed at A merges when it reaches C
        let m = zoo::fixture("eight_nodes.toml");
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        t.push_from(ids(&[1]), at(3, 0), None);
        t.push_from(ids(&[2]), at(1, 0), None);
        assert_eq!(t.entries().len(), 2);
        let mut done = Vec::new();
        let a = t.advance(&m, |_| LEN, &mut done);
        assert_eq!((a.merges, t.entries().len()), (0, 2), "at B: not yet");
        let a = t.advance(&m, |_| LEN, &mut done);
        assert_eq!(a.merges, 1, "at C: merged");
        assert_eq!(t.entries().len(), 1);
        assert_eq!(t.top().unwrap().members, ids(&[1, 2]));
        assert_eq!(t.top().unwrap().next, at(3, 0));
        assert!(t.check().is_ok() && done.is_empty());
    }

    #[test]
    fn entries_that_would_exceed_the_maximum_batch_stay_apart() {
        let m = zoo::fixture("eight_nodes.toml");
        let mut t = BatchTable::new(3);
        t.set_model(&m);
        t.push_from(ids(&[1, 2]), at(2, 0), None);
        t.push_from(ids(&[3, 4]), at(1, 0), None);
        let mut done = Vec::new();
        let a = t.advance(&m, |_| LEN, &mut done);
        assert_eq!(a.merges, 0);
        assert_eq!(t.entries().len(), 2, "2 + 2 > 3");
        assert!(t.check().is_ok());
    }

    #[test]
    fn at_cells_sub_batches_merge_across_timesteps_and_keep_their_steps() {
        let m = zoo::fixture("tiny_seq2seq.toml");
        let dec = m
            .loops
            .iter()
            .find(|l| l.class == crate::graph::Class::Decoder)
            .unwrap();
        let first = dec.first.0;
        let len = Lengths { enc: 3, dec: 6 };
        for cells in [true, false] {
            let mut t = BatchTable::new(8);
            t.set_model(&m);
            if cells {
                t.set_cells(m.nodes.iter().map(|n| n.loop_id.is_some()).collect());
            }
            t.push_from(ids(&[1]), at(first, 4), None);
            t.push_from(ids(&[2]), at(first, 0), None);
            assert_eq!(
                t.entries().len(),
                if cells { 1 } else { 2 },
                "cells: {cells}"
            );
            if cells {
                let top = t.top().unwrap();
                assert_eq!(top.steps, [4, 0], "each member keeps its own step");
                // the loop's end: both run it again, each one step on
                let mut done = Vec::new();
                for _ in dec.first.0..=dec.last.0 {
                    t.advance(&m, |_| len, &mut done);
                }
                assert_eq!(t.top().unwrap().steps, [5, 1]);
            }
            assert!(t.check().is_ok());
        }
    }

    #[test]
    fn members_that_part_ways_split_and_merge_again_where_they_meet() {
        // the tiny seq2seq model's encoder (node 2, a one-node loop) with encoder lengths 1
        // and 3: after step 0 request 1 leaves for the decoder (node 3) and request 2 runs the
        // encoder again; the one behind runs first and, standing at another node, does not
        // merge until it reaches the decoder's first unit
        let m = zoo::fixture("tiny_seq2seq.toml");
        let len = |r: RequestId| Lengths {
            enc: if r.0 == 1 { 1 } else { 3 },
            dec: 2,
        };
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        t.push_from(ids(&[1, 2]), at(2, 0), None);
        let mut done = Vec::new();
        let a = t.advance(&m, len, &mut done);
        assert_eq!((a.splits, a.merges), (1, 0));
        let view = |t: &BatchTable| -> Vec<(Vec<RequestId>, NodeStep)> {
            t.entries()
                .iter()
                .map(|e| (e.members.clone(), e.next))
                .collect()
        };
        assert_eq!(
            view(&t),
            [(ids(&[1]), at(3, 0)), (ids(&[2]), at(2, 1))],
            "split: the one behind on top"
        );
        let a = t.advance(&m, len, &mut done);
        assert_eq!((a.splits, a.merges), (0, 0), "another node: no merge");
        assert_eq!(view(&t)[1], (ids(&[2]), at(2, 2)));
        let a = t.advance(&m, len, &mut done);
        assert_eq!(a.merges, 1, "met at the decoder's first unit");
        assert_eq!(view(&t), [(ids(&[1, 2]), at(3, 0))]);
        assert!(done.is_empty() && t.check().is_ok());
    }

    #[test]
    fn a_graph_batch_never_merges() {
        // a padded sub-batch (graph batching) runs to its end on its own, even through the
        // node where the entry below stands
        let m = zoo::fixture("eight_nodes.toml");
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        t.push_from(ids(&[1]), at(3, 0), None);
        t.push_from(ids(&[2]), at(1, 0), Some(LEN));
        let mut done = Vec::new();
        for _ in 0..3 {
            assert_eq!(t.advance(&m, |_| LEN, &mut done).merges, 0);
            assert_eq!(t.entries().len(), 2);
        }
        assert_eq!(t.top().unwrap().next, at(4, 0), "past C, still apart");
    }

    #[test]
    fn check_names_a_broken_invariant() {
        let m = zoo::fixture("eight_nodes.toml");
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        t.push_from(ids(&[1]), at(3, 0), None);
        t.push_from(ids(&[2]), at(1, 0), None);
        // the same request in two entries
        t.stack[1].members[0] = RequestId(1);
        assert!(t.check().unwrap_err().to_string().contains("two entries"));
    }

    /// With the checks compiled in (debug builds, the `check` feature of the test command), a
    /// change that leaves the table broken panics at once, naming the invariant.
    #[test]
    #[cfg_attr(
        any(debug_assertions, feature = "check"),
        should_panic(expected = "request 1 is in two entries")
    )]
    fn a_broken_table_panics_at_the_next_change_when_checked() {
        let m = zoo::fixture("eight_nodes.toml");
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        t.push_from(ids(&[1]), at(3, 0), None);
        t.push_from(ids(&[2]), at(1, 0), None);
        t.stack[1].members[0] = RequestId(1);
        t.advance_straight(1);
        // reached only where the checks are compiled out
        let checked = std::hint::black_box(BatchTable::CHECKED);
        assert!(!checked, "a checked build must have panicked");
    }

    #[test]
    fn a_straight_run_ends_before_a_loop_end_the_model_end_the_entry_below_or_a_class_change() {
        // a table on `m` with one request per entry at `entries` (bottom first)
        let ahead = |m: &Model, entries: &[u32]| {
            let mut t = BatchTable::new(8);
            t.set_model(m);
            for (r, &n) in entries.iter().enumerate() {
                t.push_from(ids(&[r as u32]), at(n, 0), None);
            }
            t.straight_ahead()
        };
        // eight_nodes: in, A..H, one class, no loops: from node i, 8 - i nodes (H ends it)
        let m = zoo::fixture("eight_nodes.toml");
        for i in 0..=8 {
            assert_eq!(ahead(&m, &[i]), 8 - i, "eight_nodes from {i}");
        }
        // an entry below at E (5): a newcomer at B (2) runs 3 nodes and meets it
        assert_eq!(ahead(&m, &[5, 2]), 3);
        // tiny_seq2seq: src, emb, enc (the encoder loop, ends it), dec_emb, dec, ctx, logits,
        // tok (the decoder loop's last)
        let m = zoo::fixture("tiny_seq2seq.toml");
        for (i, w) in [2, 1, 0, 4, 3, 2, 1, 0].into_iter().enumerate() {
            assert_eq!(ahead(&m, &[i as u32]), w, "tiny_seq2seq from {i}");
        }
        // the Transformer's last encoder layer runs straight into the decoder's first: the run
        // stops at the class change (device time is counted by class)
        let m = zoo::load("transformer").unwrap();
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        let change = (0..m.nodes.len() - 1)
            .find(|&i| {
                t.straight[i] && t.straight[i + 1] && m.nodes[i].class != m.nodes[i + 1].class
            })
            .expect("a class change between straight nodes");
        assert_eq!(ahead(&m, &[change as u32]), 1);
    }

    /// The table's entries as (members, next unit), bottom first.
    fn view(t: &BatchTable) -> Vec<(Vec<RequestId>, NodeStep)> {
        t.entries()
            .iter()
            .map(|e| (e.members.clone(), e.next))
            .collect()
    }

    #[test]
    fn a_group_that_splits_onto_the_entry_below_merges_with_it_at_once() {
        // tiny_seq2seq, encoder lengths 1 and 3 for requests 1 and 2 (at the encoder, node 2),
        // request 0 waiting at the decoder's first unit: request 1 leaves for it and merges
        // there in the same advance; request 2 runs the encoder again, on top
        let m = zoo::fixture("tiny_seq2seq.toml");
        let len = |r: RequestId| Lengths {
            enc: if r.0 == 2 { 3 } else { 1 },
            dec: 2,
        };
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        t.push_from(ids(&[0]), at(3, 0), None);
        t.push_from(ids(&[1, 2]), at(2, 0), None);
        let a = t.advance(&m, len, &mut Vec::new());
        assert_eq!((a.splits, a.merges), (1, 1));
        assert_eq!(view(&t), [(ids(&[0, 1]), at(3, 0)), (ids(&[2]), at(2, 1))]);
    }

    #[test]
    fn a_loop_that_wraps_onto_the_entry_below_merges_with_it() {
        // tiny_seq2seq's decoder loop (nodes 3..=7), three steps each: request 1 at its last
        // node (tok, step 0) wraps to its first node at step 1, where request 0 stands
        let m = zoo::fixture("tiny_seq2seq.toml");
        let len = |_| Lengths { enc: 1, dec: 3 };
        let mut t = BatchTable::new(8);
        t.set_model(&m);
        t.push_from(ids(&[0]), at(3, 1), None);
        t.push_from(ids(&[1]), at(7, 0), None);
        let a = t.advance(&m, len, &mut Vec::new());
        assert!(a.wrapped);
        assert_eq!(a.merges, 1);
        assert_eq!(view(&t), [(ids(&[0, 1]), at(3, 1))]);
    }

    #[test]
    fn a_full_sub_batch_takes_no_one_more() {
        // eight_nodes, maximum batch 8: a newcomer reaching C where 8 requests stand stays
        // apart; where 7 stand it merges
        let m = zoo::fixture("eight_nodes.toml");
        for (below, merged) in [(8u32, false), (7, true)] {
            let mut t = BatchTable::new(8);
            t.set_model(&m);
            t.push_from((0..below).map(RequestId), at(3, 0), None);
            t.push_from(ids(&[100]), at(2, 0), None);
            let a = t.advance(&m, |_| LEN, &mut Vec::new());
            assert_eq!(
                (a.merges == 1, t.entries().len() == 1),
                (merged, merged),
                "{below} below"
            );
        }
    }
}
