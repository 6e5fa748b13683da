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

    /// Takes request `r` out of the table at this node boundary (its client went away): its
    /// entry runs on without it, an entry left empty goes, and the two entries then on top
    /// merge if they can (the count of merges is returned). None: `r` is not in the table.
    pub(crate) fn remove(&mut self, r: RequestId) -> Option<u32> {
        let (i, j) = self
            .stack
            .iter()
            .enumerate()
            .find_map(|(i, sb)| sb.members.iter().position(|&m| m == r).map(|j| (i, j)))?;
        let sb = &mut self.stack[i];
        sb.members.remove(j);
        sb.steps.remove(j);
        sb.wraps = None;
        if let Some(&first) = sb.steps.first() {
            // an entry's unit is at its first member's step (members differ only at cells)
            sb.next.step = first;
        } else {
            let empty = self.stack.remove(i);
            self.recycle(empty.members, empty.steps);
        }
        self.generation += 1;
        let merges = self.merge_top();
        self.debug_check();
        Some(merges)
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
mod tests;
