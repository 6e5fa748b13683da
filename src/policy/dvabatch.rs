//! `dva:D:W[:B]`: a DVABatch-style policy (Cui et al., "DVABatch: Diversity-aware Multi-Entry
//! Multi-Exit Batching", USENIX ATC'22), our reading for the GNMT ablation, not the paper's
//! LazyB and not DVABatch's code. DVABatch adjusts a running batch with three operations:
//! *new* (start a batch), *stretch* (newcomers join the running batch, catching up with it at a
//! stage boundary) and *split* (members leave at their own lengths). On our engine:
//!
//! * **new**: on an idle server, wait until `B` requests are pending or the oldest has waited
//!   `W` ms, then start them as one unpadded sub-batch (graph batching's window, without the
//!   padding);
//! * **stretch**: with a batch running, release the pending requests on the same window (the
//!   oldest has waited `W` ms, or they fill the room left under `B`) and push them on the
//!   BatchTable, where they catch up with the running batch and merge at a common node — but
//!   only while the running batch is at most `D` % through a request's single-input latency
//!   (by the profile). Deeper, newcomers wait for the table to drain: stretching late would
//!   make the running batch wait for a long catch-up;
//! * **split**: members leave at their own lengths, as every unpadded sub-batch here does
//!   (merges ignore the timestep, as `lazy`'s do).
//!
//! Fixed limits — depth `D`, wait `W`, batch `B` — stand where LazyB consults its slack
//! predictor: the policy never reads a deadline.

use super::spec::{window_and_batch, Entry, ParamError, Parsed};
use super::{Decision, Policy, View};
use crate::graph::NodeStep;
use crate::time::Nanos;

/// DVABatch-style stretching under fixed limits.
#[derive(Clone, Debug)]
pub struct Dva {
    /// Deepest point (fraction of a request's single-input latency done) at which the running
    /// batch may still be stretched.
    depth: f64,
    window: Nanos,
    max_batch: u32,
    name: String,
}

impl Dva {
    /// Stretch up to `depth_pct` % deep, window `window`, at most `max_batch` requests.
    pub fn new(depth_pct: f64, window: Nanos, max_batch: u32, name: &str) -> Self {
        Dva {
            depth: depth_pct / 100.0,
            window,
            max_batch: max_batch.max(1),
            name: name.to_string(),
        }
    }

    /// True while the running (top) sub-batch is shallow enough to be stretched: its first
    /// member's remaining single-input latency is at least `1 − depth` of its whole.
    fn shallow(&self, v: &View) -> bool {
        let Some(top) = v.table.top() else {
            return true;
        };
        let Some(&first) = top.members.first() else {
            return true;
        };
        let len = top.padded.unwrap_or_else(|| v.predicted_len(first));
        let whole = v.predictor.remaining(None, len, 1).0 as f64;
        let at = NodeStep {
            node: top.next.node,
            step: top.steps.first().copied().unwrap_or(top.next.step),
        };
        let left = v.predictor.remaining(Some(at), len, 1).0 as f64;
        whole <= 0.0 || 1.0 - left / whole <= self.depth
    }
}

impl Policy for Dva {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn cell_nodes(&self, model: &crate::graph::Model) -> Vec<bool> {
        super::cellular::loop_cells(model)
    }

    fn decide(&mut self, v: &View) -> Decision {
        let Some(&oldest) = v.infq.front() else {
            return Decision::Run;
        };
        if v.table.is_empty() {
            // new
            return super::graph_batching::start_batch(v, self.window, self.max_batch, false);
        }
        // stretch, within the room left under B and only while the running batch is shallow
        let room = v.room(self.max_batch);
        if room == 0 || !self.shallow(v) {
            return Decision::Run;
        }
        let due = v.arrival(oldest) + self.window;
        if v.infq.len() >= room || v.now >= due {
            Decision::Admit {
                count: v.infq.len().min(room),
                pad: false,
            }
        } else {
            Decision::Run
        }
    }
}

/// `dva:D:W[:B]`.
pub(crate) const ENTRY: Entry = Entry {
    names: &["dva"],
    variant: None,
    usage: "dva:D:W[:B]",
    examples: &["dva:50:2:4"],
    parse: parse_dva,
};

fn parse_dva(_: &str, params: &[&str], max: u32) -> std::result::Result<Parsed, ParamError> {
    let usage = "use dva:D:W or dva:D:W:B (D stretch depth in % of a request's work, W ms, B max \
                 batch)";
    let Some((d, rest)) = params.split_first() else {
        return Err(usage.into());
    };
    let depth: f64 = d
        .parse()
        .ok()
        .filter(|x: &f64| (0.0..=100.0).contains(x))
        .ok_or_else(|| {
            format!("the stretch depth D must be a percentage in [0, 100], got '{d}'")
        })?;
    let (w, b) = window_and_batch(rest, max, "dva:D:W or dva:D:W:B")?;
    Ok(Parsed {
        build: std::sync::Arc::new(move |name| Box::new(Dva::new(depth, w, b, name))),
        uses_sla: false,
        // the depth reads one profile's times from the running batch's first member
        one_model_only: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{zoo, Lengths, NodeId};
    use crate::profile::Profile;
    use crate::runtime::{BatchTable, InfQ, Ledger, Predictor, Request, RequestId};

    fn ms(x: f64) -> Nanos {
        Nanos::from_ms(x)
    }

    /// Decides `policy` at `now` ms on the eight-node graph (1 ms a node; a request alone:
    /// 9 ms, input node included): request 0 in flight at node `at` (None: idle server),
    /// requests 1..=`waiting` pending, request i arrived at i ms.
    fn decide(policy: &str, at: Option<u32>, waiting: u32, now: f64) -> Decision {
        let m = zoo::fixture("eight_nodes.toml");
        let p = Predictor::new(&m, &Profile::uniform(&m, 8, ms(1.0)), 1);
        let len = Lengths { enc: 1, dec: 1 };
        let requests: Vec<Request> = (0..=waiting)
            .map(|i| Request::new(RequestId(i), ms(f64::from(i)), ms(100.0), len))
            .collect();
        let mut table = BatchTable::new(8);
        table.set_model(&m);
        if let Some(node) = at {
            let at = NodeStep {
                node: NodeId(node),
                step: 0,
            };
            table.push_from([RequestId(0)], at, None);
        }
        let mut queue = InfQ::with_capacity(8);
        (1..=waiting).for_each(|i| queue.push(RequestId(i)));
        let ledger = Ledger::of(&requests).unwrap();
        let v = View::new(ms(now), &m, &queue, &table, &p, 8, &ledger);
        crate::policy::parse(policy, 8).unwrap().decide(&v)
    }

    fn admit(count: usize) -> Decision {
        Decision::Admit { count, pad: false }
    }

    #[test]
    fn a_new_batch_waits_for_the_window_or_a_full_batch_and_is_not_padded() {
        // idle: requests 1 and 2 pending, the oldest arrived at 1 ms, window 5 ms
        assert_eq!(
            decide("dva:50:5", None, 2, 3.0),
            Decision::WaitUntil(ms(6.0))
        );
        assert_eq!(decide("dva:50:5", None, 2, 6.0), admit(2));
        assert_eq!(decide("dva:50:5:2", None, 3, 3.0), admit(2));
    }

    #[test]
    fn newcomers_stretch_a_shallow_batch_only() {
        // request 0 at node k has done k of its 9 ms: 3/9 = 33% at node 3, 6/9 = 67% at node 6
        assert_eq!(decide("dva:50:0", Some(3), 1, 3.0), admit(1));
        assert_eq!(decide("dva:50:0", Some(6), 1, 6.0), Decision::Run);
        assert_eq!(decide("dva:70:0", Some(6), 1, 6.0), admit(1));
        assert_eq!(decide("dva:0:0", Some(1), 1, 3.0), Decision::Run);
        // within the window the newcomers wait (the batch runs on) unless they fill the room
        assert_eq!(decide("dva:50:5", Some(3), 1, 3.0), Decision::Run);
        assert_eq!(decide("dva:50:5:2", Some(3), 1, 3.0), admit(1));
        // no room under B: the batch runs on
        assert_eq!(decide("dva:100:0:1", Some(3), 1, 3.0), Decision::Run);
        // at the boundaries: a batch that has done nothing is stretched even at depth 0, and
        // the oldest newcomer (arrived at 1 ms) is due at 1 + 5 ms to the nanosecond
        assert_eq!(decide("dva:0:0", Some(0), 1, 3.0), admit(1));
        assert_eq!(decide("dva:50:5", Some(3), 1, 5.999_999), Decision::Run);
        assert_eq!(decide("dva:50:5", Some(3), 1, 6.0), admit(1));
    }

    #[test]
    fn it_is_named_by_its_string_and_merges_in_the_decoder_loop_at_any_timestep() {
        let dva = crate::policy::parse("dva:50:5:4", 8).unwrap();
        assert_eq!(dva.name(), "dva:50:5:4");
        // the loop's cells, as cellular batching's: members of different timesteps merge there
        let m = zoo::fixture("tiny_seq2seq.toml");
        let cells = dva.cell_nodes(&m);
        assert_eq!(cells, crate::policy::cellular::loop_cells(&m));
        assert!(cells.contains(&true) && cells.contains(&false), "{cells:?}");
    }

    #[test]
    fn bad_parameters_name_what_is_wrong() {
        let err = |s: &str| crate::policy::Spec::parse(s, 8).err().unwrap().to_string();
        assert!(err("dva").contains("dva:D:W"), "{}", err("dva"));
        assert!(
            err("dva:150:5").contains("[0, 100]"),
            "{}",
            err("dva:150:5")
        );
        assert!(err("dva:50").contains("dva:D:W"), "{}", err("dva:50"));
        assert!(
            err("dva:50:5:99").contains("max batch"),
            "{}",
            err("dva:50:5:99")
        );
    }
}
