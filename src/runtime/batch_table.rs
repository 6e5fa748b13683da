//! The paper's BatchTable: a stack of sub-batches, the top one active. After each node the top
//! sub-batch advances; requests that finished leave; members whose next unit differs split
//! (members of a seq2seq sub-batch with different encoder lengths leave the encoder at different
//! steps); and the two top entries merge while their next unit is identical and the merged
//! sub-batch stays within the maximum batch.

use super::request::RequestId;
use crate::graph::{Lengths, Model, NodeStep};

/// One stack entry: requests that execute together, and the unit they execute next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubBatch {
    /// Members, in admission order.
    pub members: Vec<RequestId>,
    /// The next (node, step) the whole sub-batch executes.
    pub next: NodeStep,
    /// Graph batching: every member runs to these lengths (the longest member's) and all
    /// complete together at the end; None for node-level batching.
    pub padded: Option<Lengths>,
}

/// What one `advance` did (the requests that completed go to the caller's buffer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Advance {
    /// Merges performed.
    pub merges: u32,
    /// Splits performed (members diverging to different next units).
    pub splits: u32,
}

/// The stack. The top (the active sub-batch) is the last element. Member lists come from a
/// pool sized at creation, so pushing, advancing, splitting and merging allocate nothing.
#[derive(Clone, Debug, Default)]
pub struct BatchTable {
    stack: Vec<SubBatch>,
    max_batch: usize,
    pool: Vec<Vec<RequestId>>,
    groups: Vec<SubBatch>,
}

impl PartialEq for BatchTable {
    fn eq(&self, o: &Self) -> bool {
        self.stack == o.stack && self.max_batch == o.max_batch
    }
}

impl BatchTable {
    /// An empty table for sub-batches of at most `max_batch` requests.
    pub fn new(max_batch: u32) -> Self {
        let mb = max_batch as usize;
        BatchTable {
            stack: Vec::with_capacity(mb + 1),
            max_batch: mb,
            pool: (0..mb + 2).map(|_| Vec::with_capacity(mb)).collect(),
            groups: Vec::with_capacity(mb),
        }
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
    pub fn in_flight(&self) -> usize {
        self.stack.iter().map(|s| s.members.len()).sum()
    }

    /// The maximum sub-batch size.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    fn take_vec(&mut self) -> Vec<RequestId> {
        self.pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.max_batch))
    }

    fn recycle(&mut self, mut v: Vec<RequestId>) {
        v.clear();
        self.pool.push(v);
    }

    /// Pushes a new active sub-batch of `ids` at `next` (preempting the current top, if any),
    /// with a member list from the pool.
    pub fn push_from(
        &mut self,
        ids: impl IntoIterator<Item = RequestId>,
        next: NodeStep,
        padded: Option<Lengths>,
    ) {
        let mut members = self.take_vec();
        members.extend(ids);
        self.push(SubBatch {
            members,
            next,
            padded,
        });
    }

    /// Pushes a new active sub-batch (preempting the current top, if any).
    pub fn push(&mut self, sb: SubBatch) {
        self.stack.push(sb);
        self.merge_top();
        self.debug_check();
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
        let Some(mut top) = self.stack.pop() else {
            return out;
        };
        if let Some(pad) = top.padded {
            match model.next_step(top.next, pad) {
                Some(next) => self.stack.push(SubBatch { next, ..top }),
                None => {
                    finished.extend_from_slice(&top.members);
                    self.recycle(top.members);
                }
            }
        } else if let Some(next) = self.common_next(model, &top, &lengths) {
            // the usual case: the whole sub-batch moves on together
            self.stack.push(SubBatch { next, ..top });
        } else {
            // group members by their next unit, keeping admission order within a group
            let mut groups = std::mem::take(&mut self.groups);
            for &r in &top.members {
                match model.next_step(top.next, lengths(r)) {
                    None => finished.push(r),
                    Some(next) => match groups.iter_mut().find(|g| g.next == next) {
                        Some(g) => g.members.push(r),
                        None => {
                            let mut members = self.take_vec();
                            members.push(r);
                            groups.push(SubBatch {
                                members,
                                next,
                                padded: None,
                            });
                        }
                    },
                }
            }
            top.members.clear();
            self.recycle(top.members);
            out.splits = groups.len().saturating_sub(1) as u32;
            // the group furthest behind in the node order runs first (it is on top) so that the
            // others, preempted, can be caught up with and merged again
            groups.sort_by_key(|g| std::cmp::Reverse(g.next));
            self.stack.append(&mut groups);
            self.groups = groups;
        }
        out.merges = self.merge_top();
        self.debug_check();
        out
    }

    /// The next unit of every member when they all have one and it is the same.
    fn common_next(
        &self,
        model: &Model,
        sb: &SubBatch,
        lengths: &impl Fn(RequestId) -> Lengths,
    ) -> Option<NodeStep> {
        let mut it = sb.members.iter();
        let first = model.next_step(sb.next, lengths(*it.next()?))?;
        it.all(|&r| model.next_step(sb.next, lengths(r)) == Some(first))
            .then_some(first)
    }

    /// Merges the two top entries while their next unit is identical and the result fits.
    fn merge_top(&mut self) -> u32 {
        let mut merges = 0;
        while self.stack.len() >= 2 {
            let n = self.stack.len();
            let (a, b) = (&self.stack[n - 2], &self.stack[n - 1]);
            if a.next != b.next
                || a.padded.is_some()
                || b.padded.is_some()
                || a.members.len() + b.members.len() > self.max_batch
            {
                break;
            }
            let Some(mut top) = self.stack.pop() else {
                break;
            };
            if let Some(below) = self.stack.last_mut() {
                below.members.append(&mut top.members);
            }
            self.recycle(top.members);
            merges += 1;
        }
        merges
    }

    /// Checks the invariants: no empty entry, no entry over the maximum batch, no request twice,
    /// and no two adjacent entries that should have merged. Returns a description of the first
    /// violation.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for (i, sb) in self.stack.iter().enumerate() {
            if sb.members.is_empty() {
                return Err(format!("entry {i} is empty"));
            }
            if sb.members.len() > self.max_batch {
                return Err(format!(
                    "entry {i} holds {} > max batch {}",
                    sb.members.len(),
                    self.max_batch
                ));
            }
            for r in &sb.members {
                if !seen.insert(*r) {
                    return Err(format!("request {} is in two entries", r.0));
                }
            }
        }
        if let [.., a, b] = self.stack.as_slice() {
            if a.next == b.next
                && a.padded.is_none()
                && b.padded.is_none()
                && a.members.len() + b.members.len() <= self.max_batch
            {
                return Err("the two top entries stand at the same unit but did not merge".into());
            }
        }
        Ok(())
    }

    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if let Err(e) = self.check() {
            panic!("BatchTable invariant broken: {e}");
        }
    }
}
