//! The paper's InfQ: requests that have arrived and wait to be admitted, oldest first. Policies
//! read it (through their `View`); the engine appends arrivals and, when a policy admits `count`
//! requests, takes them from the front with [`InfQ::next_batch`]; with `--shed` the engine
//! also drops a hopeless request from the front ([`InfQ::shed_front`]), and one whose client
//! went away from wherever it waits ([`InfQ::remove`]). Those are the only ways out, so a
//! request leaves the queue exactly once.

use super::request::RequestId;
use std::collections::VecDeque;

/// The InfQ: the pending queue.
#[derive(Clone, Debug, Default)]
pub struct InfQ {
    ids: VecDeque<RequestId>,
}

impl InfQ {
    /// An empty queue with room for `capacity` requests.
    pub fn with_capacity(capacity: usize) -> Self {
        InfQ {
            ids: VecDeque::with_capacity(capacity),
        }
    }

    /// Appends a request that has just arrived.
    pub fn push(&mut self, id: RequestId) {
        self.ids.push_back(id);
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when nobody waits.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The oldest waiting request.
    pub(crate) fn front(&self) -> Option<&RequestId> {
        self.ids.front()
    }

    /// The waiting requests, oldest first.
    pub fn iter(&self) -> std::collections::vec_deque::Iter<'_, RequestId> {
        self.ids.iter()
    }

    /// Removes the oldest request (shed: its deadline can no longer be met).
    pub(crate) fn shed_front(&mut self) -> Option<RequestId> {
        self.ids.pop_front()
    }

    /// Removes request `r` wherever it waits (its client went away); false when it does not
    /// wait here.
    pub(crate) fn remove(&mut self, r: RequestId) -> bool {
        match self.ids.iter().position(|&q| q == r) {
            Some(k) => self.ids.remove(k).is_some(),
            None => false,
        }
    }

    /// Moves the `count` oldest requests for which `pick` holds (all of them if fewer wait)
    /// into `out`, oldest first; the others keep their order: the batch of one model a policy
    /// with a queue per model admitted.
    pub(crate) fn take_where(
        &mut self,
        count: usize,
        mut pick: impl FnMut(RequestId) -> bool,
        out: &mut Vec<RequestId>,
    ) {
        let mut taken = 0;
        self.ids.retain(|&r| {
            if taken < count && pick(r) {
                out.push(r);
                taken += 1;
                false
            } else {
                true
            }
        });
    }

    /// Removes the `count` oldest requests (all of them if fewer wait) and yields them, oldest
    /// first: the batch a policy admitted.
    pub(crate) fn next_batch(
        &mut self,
        count: usize,
    ) -> std::collections::vec_deque::Drain<'_, RequestId> {
        self.ids.drain(..count.min(self.ids.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_leave_from_the_front_once() {
        let mut q = InfQ::with_capacity(4);
        for i in 0..5 {
            q.push(RequestId(i));
        }
        let first: Vec<u32> = q.next_batch(2).map(|r| r.0).collect();
        assert_eq!(first, [0, 1]);
        assert_eq!(q.front(), Some(&RequestId(2)));
        let rest: Vec<u32> = q.next_batch(10).map(|r| r.0).collect();
        assert_eq!(rest, [2, 3, 4]);
        assert!(q.is_empty() && q.next_batch(1).next().is_none());
        // the oldest two even ids leave; the rest keep their order
        (0..7).for_each(|i| q.push(RequestId(i)));
        let mut even = Vec::new();
        q.take_where(2, |r| r.0 % 2 == 0, &mut even);
        assert_eq!(even, [RequestId(0), RequestId(2)]);
        let left: Vec<u32> = q.iter().map(|r| r.0).collect();
        assert_eq!(left, [1, 3, 4, 5, 6]);
        q.take_where(9, |r| r.0 > 3, &mut even);
        assert_eq!(even.len(), 5, "only as many as there are");
    }
}
