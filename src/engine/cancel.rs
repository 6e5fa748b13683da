//! A request let go at the next node boundary, because its client went away or (with
//! `--abandon-late`) its deadline passed: what a layer-granular server can do and a
//! graph-granular one cannot (Triton's TensorRT backend runs a batch to its end). The front end
//! tells the engine a leaving client's key ([`ArrivalSource::cancelled`]); at its next turn the
//! engine takes the request out of the queue or out of its sub-batch on the BatchTable, frees
//! its slot (its activations, its KV cache) for the next request at once, and counts it
//! [`Rejection::Cancelled`] (or [`Rejection::Late`]); its batch-mates run on without it, their
//! slots and values untouched. A key whose request already left (it completed while the news
//! travelled) is ignored: every request still leaves exactly once.
//!
//! [`ArrivalSource::cancelled`]: super::ArrivalSource::cancelled

use super::{Left, Server};
use crate::device::Device;
use crate::error::Result;
use crate::runtime::{Rejection, RequestId};
use crate::time::Nanos;

impl Server<'_> {
    /// Lets go of every request told cancelled that is still in the server (the source is
    /// asked after the arrivals are received, so each has arrived).
    pub(super) fn let_go<D: Device + ?Sized>(&mut self, device: &mut D, now: Nanos) -> Result<()> {
        let mut keys = std::mem::take(&mut self.cancels);
        for &key in &keys {
            if let Some(id) = self.holding(key) {
                self.let_go_of(device, id, Rejection::Cancelled)?;
            }
        }
        keys.clear();
        self.cancels = keys;
        self.snap(now);
        self.check()
    }

    /// `--abandon-late`: lets go of every request in the server whose deadline has passed by
    /// `now`, part-served or queued.
    pub(super) fn let_go_late<D: Device + ?Sized>(
        &mut self,
        device: &mut D,
        now: Nanos,
    ) -> Result<()> {
        let late = |r: &&RequestId| self.requests.get(**r).deadline < now;
        let on_table = self.table.entries().iter().flat_map(|e| e.members.iter());
        let mut ids = std::mem::take(&mut self.late);
        ids.extend(on_table.chain(self.infq.iter()).filter(late));
        for &id in &ids {
            self.let_go_of(device, id, Rejection::Late)?;
        }
        let changed = !ids.is_empty();
        ids.clear();
        self.late = ids;
        if changed {
            self.snap(now);
        }
        self.check()
    }

    /// The request in the server under `key`, on the table or queued.
    fn holding(&self, key: u64) -> Option<RequestId> {
        let held = |r: &&RequestId| self.requests.get(**r).key == key;
        let on_table = self.table.entries().iter().flat_map(|e| e.members.iter());
        on_table.chain(self.infq.iter()).find(held).copied()
    }

    /// Takes `id` out of the table (its sub-batch runs on without it) or out of the queue,
    /// frees its slot and counts it as `why` says.
    fn let_go_of<D: Device + ?Sized>(
        &mut self,
        device: &mut D,
        id: RequestId,
        why: Rejection,
    ) -> Result<()> {
        match self.table.remove(id) {
            Some(merges) => self.counters.merges += u64::from(merges),
            None => {
                self.infq.remove(id);
            }
        }
        let mut q = self.requests.reject(id)?;
        // what the device keeps for the request (its captured outputs) goes with it; the front
        // end drops what nobody will take
        super::release_slot(device, &mut self.free_slots, &mut q);
        if let Some(o) = self.setup.observer {
            o.left(&q, Left::Rejected(why));
        }
        self.record.reject(q, why)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{kept, Scripted};
    use super::super::*;
    use crate::graph::zoo;
    use crate::profile::Profile;
    use crate::runtime::Predictor;
    use crate::time::VirtualClock;

    #[test]
    fn a_cancelled_request_leaves_its_sub_batch_at_the_next_boundary_and_its_slot_serves_at_once() {
        // the eight-node fixture (an input and eight layers: nine nodes) at 1 ms a node, 8
        // slots, LazyB: ten requests at 0 (keys 10..=19); eight are admitted and run nodes 0
        // and 1; at the third look (2 ms) the clients of 11 (in the sub-batch) and 18 (queued)
        // go away, and 99 (never sent, or long gone) is ignored
        let m = zoo::fixture("eight_nodes.toml");
        let prof = Profile::uniform(&m, 8, Nanos::from_ms(1.0));
        let pred = Predictor::new(&m, &prof, 1);
        let setup = kept(&m, &pred);
        let mut dev = crate::device::table::TableDevice::from_profile(prof, "1 ms a node");
        dev.prepare(&m, 8).unwrap();
        let arrivals: Vec<Arrival> = (10..20)
            .map(|k| Arrival {
                len: Lengths { enc: 1, dec: 1 },
                key: Some(k),
                ..Arrival::default()
            })
            .collect();
        let mut src = Scripted::new(&arrivals).leaving_at(3, vec![11, 18, 99]);
        let mut pol = crate::policy::parse("lazy", 8).unwrap();
        let out = run_source(
            &setup,
            &mut dev,
            pol.as_mut(),
            &mut VirtualClock::new(),
            &mut src,
        )
        .unwrap();
        let st = out.stats();
        assert_eq!(
            (
                st.requests,
                st.completed,
                st.rejected,
                st.rejected_cancelled
            ),
            (10, 8, 2, 2)
        );
        // at 2 ms the sub-batch runs on without 11 (seven members at node 2), and the slot it
        // freed takes 19 at once: its sub-batch runs nodes 0 and 1 (to 4 ms) and merges there
        let snaps = out.snapshots.as_ref().unwrap();
        let at2: Vec<_> = snaps
            .iter()
            .filter(|s| s.0 == Nanos::from_ms(2.0))
            .collect();
        let tables: Vec<Vec<(Vec<u32>, u32)>> = at2
            .iter()
            .map(|s| s.1.iter().map(|e| (e.0.clone(), e.1.node.0)).collect())
            .collect();
        assert_eq!(
            tables,
            [
                vec![((0..8).collect(), 2)],
                vec![(vec![0, 2, 3, 4, 5, 6, 7], 2)],
                vec![(vec![0, 2, 3, 4, 5, 6, 7], 2), (vec![9], 0)],
            ],
            "ran node 1; 11 (id 1) let go; 19 (id 9) admitted"
        );
        // the eight survivors complete together: nodes 2..8 of the merged batch after 4 ms
        let done: Vec<(u64, Nanos)> = out
            .requests
            .iter()
            .filter_map(|q| q.completion.map(|c| (q.key, c)))
            .collect();
        assert_eq!(done.len(), 8);
        assert!(
            done.iter().all(|&(_, c)| c == Nanos::from_ms(11.0)),
            "{done:?}"
        );
        let keys: Vec<u64> = done.iter().map(|d| d.0).collect();
        assert!(!keys.contains(&11) && !keys.contains(&18) && keys.contains(&19));
        assert_eq!(out.counters.executions, 2 + 2 + 7);
    }

    #[test]
    fn with_abandon_late_a_request_past_its_deadline_leaves_at_the_next_boundary() {
        // nine nodes of 1 ms, Serial, a 12 ms SLA, three requests at 0: the first completes at
        // 9 ms; the second runs from 9 ms and is past its deadline at the boundary at 13 ms
        // (at 12 ms it is due, not past), where the third, queued, goes too
        let m = zoo::fixture("eight_nodes.toml");
        let prof = Profile::uniform(&m, 8, Nanos::from_ms(1.0));
        let pred = Predictor::new(&m, &prof, 1);
        let setup = Setup {
            abandon_late: true,
            keep: crate::metrics::KeepRecords {
                requests: true,
                ..Default::default()
            },
            ..Setup::new(
                &m,
                &pred,
                Sla::from_ms(12.0).unwrap(),
                MaxBatch::new(8).unwrap(),
            )
        };
        let mut dev = crate::device::table::TableDevice::from_profile(prof, "1 ms a node");
        dev.prepare(&m, 8).unwrap();
        let arrivals: Vec<Arrival> = (0..3)
            .map(|_| Arrival {
                len: Lengths { enc: 1, dec: 1 },
                ..Arrival::default()
            })
            .collect();
        let mut pol = crate::policy::parse("serial", 8).unwrap();
        let out = run(
            &setup,
            &mut dev,
            pol.as_mut(),
            &mut VirtualClock::new(),
            &arrivals,
        )
        .unwrap();
        let st = out.stats();
        assert_eq!(
            (st.completed, st.rejected, st.rejected_late),
            (1, 2, 2),
            "{st:?}"
        );
        assert_eq!(out.requests[0].completion, Some(Nanos::from_ms(9.0)));
        assert!(out.requests[1..].iter().all(|q| q.completion.is_none()));
        // the second ran four nodes (9 to 13 ms); nothing ran after
        assert_eq!(out.counters.executions, 9 + 4);
        assert_eq!(out.counters.busy, Nanos::from_ms(13.0));
        // without the rule, all three complete, the last two late
        let plain = Setup {
            abandon_late: false,
            ..setup
        };
        let mut pol = crate::policy::parse("serial", 8).unwrap();
        let st = run(
            &plain,
            &mut dev,
            pol.as_mut(),
            &mut VirtualClock::new(),
            &arrivals,
        )
        .unwrap()
        .stats();
        assert_eq!((st.completed, st.rejected_late), (3, 0));
    }
}
