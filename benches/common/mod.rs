//! Pieces the benchmark harnesses share: a device that does nothing (what is left is the
//! scheduler), the scheduler's cost per node decision, and whole-graph passes on a device.
//! Each harness uses part of it.
#![allow(dead_code)]

use lazybatch::device::{Device, Member, Timing};
use lazybatch::engine;
use lazybatch::graph::{zoo, Model, NodeStep};
use lazybatch::policy;
use lazybatch::profile::Profile;
use lazybatch::runtime::Predictor;
use lazybatch::time::{Nanos, VirtualClock};
use lazybatch::traffic;
use std::time::Instant;

/// A device that does no work and takes a fixed modeled time: what is left is the scheduler.
pub struct Null(pub Nanos);
impl Device for Null {
    fn name(&self) -> &'static str {
        "null"
    }
    fn is_virtual(&self) -> bool {
        true
    }
    fn prepare(&mut self, _: &Model, _: u32) -> lazybatch::Result<()> {
        Ok(())
    }
    fn execute(&mut self, _: &Model, _: NodeStep, _: &[Member]) -> lazybatch::Result<Timing> {
        Ok(Timing {
            time: self.0,
            ..Timing::default()
        })
    }
}

/// The scheduler's cost per node decision (engine + policy + BatchTable) for `model` under
/// `policy` at `rate` requests/s, each node taking 0.1 ms of modeled time so that requests
/// overlap as on a real device: (decisions, nanoseconds per decision).
pub fn scheduler_cost(model: &str, rate: f64, policy: &str) -> (u64, f64) {
    let m = zoo::load(model).unwrap();
    let prof = Profile::uniform(&m, 64, Nanos::from_us(100.0));
    let pred = Predictor::new(&m, &prof, 31);
    let arrivals = traffic::generate(&m, (Default::default(), rate), 3000, 1)
        .unwrap()
        .collect::<Vec<_>>();
    let mut pol = policy::parse(policy, 64).unwrap();
    let t = Instant::now();
    let out = engine::run(
        &engine::Setup {
            snapshots: false,
            keep: lazybatch::metrics::KeepRecords {
                requests: true,
                ..Default::default()
            },
            ..engine::Setup::new(
                &m,
                &pred,
                lazybatch::time::Sla::from_ms(100.0).unwrap(),
                lazybatch::runtime::MaxBatch::new(64).unwrap(),
            )
        },
        &mut Null(Nanos::from_us(100.0)),
        pol.as_mut(),
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap();
    let ns = t.elapsed().as_nanos() as f64 / out.counters.executions as f64;
    (out.counters.executions, ns)
}

/// `b` requests in slots 0..b at the model's reference lengths.
pub fn members(m: &Model, b: u32) -> Vec<Member> {
    (0..b)
        .map(|slot| Member {
            slot,
            len: m.ref_lengths(),
            input: u64::from(slot),
            step: 0,
        })
        .collect()
}

/// Best of three whole-graph passes (every node at step 0) of `m` at batch `b`, in seconds.
pub fn whole_graph(dev: &mut dyn Device, m: &Model, b: u32) -> f64 {
    let members = members(m, b);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        for n in &m.nodes {
            dev.execute(
                m,
                NodeStep {
                    node: n.id,
                    step: 0,
                },
                &members,
            )
            .unwrap();
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}
