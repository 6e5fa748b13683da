//! One driver for every run ([`Testbed::drive`]): the same engine loop and policies whatever
//! the device and the clock. A model device (the NPU model, a saved table) runs in virtual time
//! on a copy of itself, so many runs can go at once; a real device serves in wall time, its
//! requests delivered by a generator thread at their real instants; a network front end feeds
//! any device through a channel on the wall clock (a model device then takes its modelled time,
//! slept: [`Emulated`]). Node latencies are whatever the device says (modelled) or measures
//! (real).

use super::testbed::{Backend, Testbed};
use super::RunSpec;
use crate::device::emulated::Emulated;
use crate::device::exchange::Exchange;
use crate::device::Device;
use crate::engine::{self, ArrivalSource, ChannelArrivals, Observer, Outcome, ThreadArrivals};
use crate::error::{Error, Result};
use crate::metrics::KeepRecords;
use crate::policy::Policy;
use crate::time::Nanos;
use crate::time::{VirtualClock, WallClock};
use crate::traffic::{Arrival, Traffic};
use std::sync::Arc;

/// Where a run's requests come from, and so which clock it runs on.
pub enum Arrivals<'a> {
    /// The spec's own traffic ([`Testbed::traffic`]), generated once the spec is checked, then
    /// served as a schedule.
    Generated,
    /// A schedule: on a model device replayed in virtual time, on a real device delivered at
    /// its real instants by a generator thread (wall time).
    Scheduled(Traffic),
    /// Any source on the virtual clock (a model device only).
    Virtual(&'a mut dyn ArrivalSource),
    /// A network front end: requests through a channel on the wall clock, each departure told
    /// to `observer`, the data exchanged through `exchange` (a real device computes on the
    /// front end's inputs; a model device computes nothing and takes its modelled time).
    FrontEnd {
        /// The channel the front end's handlers send through.
        channel: &'a mut ChannelArrivals,
        /// Told of each request as it leaves.
        observer: &'a dyn Observer,
        /// Inputs in, outputs out.
        exchange: Arc<Exchange>,
    },
}

impl Testbed {
    /// Serves `spec` on its own traffic ([`Testbed::traffic`]) through the driver: in virtual
    /// time on a model device (any number of these can go at once: each runs on a copy), in
    /// wall time on a real device (one at a time).
    pub fn run(&self, spec: &RunSpec, keep: KeepRecords) -> Result<engine::Outcome> {
        self.drive(spec, keep, Arrivals::Generated)
    }

    /// Serves `arrivals` under `spec` and returns what happened: the one entry point of every
    /// run, whatever the device and the clock.
    pub fn drive(
        &self,
        spec: &RunSpec,
        keep: KeepRecords,
        arrivals: Arrivals<'_>,
    ) -> Result<Outcome> {
        let mut setup = self.setup(spec, keep)?;
        let mut pol = spec.policy.build();
        let pol = pol.as_mut();
        let arrivals = match arrivals {
            Arrivals::Generated => Arrivals::Scheduled(self.traffic(spec)?),
            given => given,
        };
        if spec.replicas.count() > 1 {
            return self.replicated(spec, &setup, arrivals);
        }
        match (&self.backend, arrivals) {
            (Backend::Npu(npu, _), Arrivals::Scheduled(t)) => {
                let mut src = engine::Stream::new(t.arrivals, t.expected);
                virtual_time(&setup, &mut npu.clone(), pol, &mut src)
            }
            (Backend::Table(tb), Arrivals::Scheduled(t)) => {
                let mut src = engine::Stream::new(t.arrivals, t.expected);
                virtual_time(&setup, &mut tb.clone(), pol, &mut src)
            }
            (Backend::Npu(npu, _), Arrivals::Virtual(src)) => {
                virtual_time(&setup, &mut npu.clone(), pol, src)
            }
            (Backend::Table(tb), Arrivals::Virtual(src)) => {
                virtual_time(&setup, &mut tb.clone(), pol, src)
            }
            (Backend::Real(_), Arrivals::Virtual(_)) => Err(Error::Internal(
                "a real device serves in wall time, not from a virtual-time source".into(),
            )),
            (_, Arrivals::Generated) => Err(Error::Internal(
                "generated traffic is a schedule by now".into(),
            )),
            (Backend::Real(d), Arrivals::Scheduled(t)) => {
                in_wall_time(&setup, lock(d)?.as_mut(), pol, t)
            }
            (
                backend,
                Arrivals::FrontEnd {
                    channel,
                    observer,
                    exchange,
                },
            ) => {
                setup.observer = Some(observer);
                let mut clock = WallClock::starting_at(channel.origin());
                match backend {
                    Backend::Npu(npu, _) => {
                        let mut dev = Emulated::new(npu.clone());
                        engine::run_source(&setup, &mut dev, pol, &mut clock, channel)
                    }
                    Backend::Table(tb) => {
                        let mut dev = Emulated::new(tb.clone());
                        engine::run_source(&setup, &mut dev, pol, &mut clock, channel)
                    }
                    Backend::Real(d) => {
                        let mut device = lock(d)?;
                        device.set_exchange(Some(exchange));
                        let out =
                            engine::run_source(&setup, device.as_mut(), pol, &mut clock, channel);
                        device.set_exchange(None);
                        out
                    }
                }
            }
        }
    }
}

impl Testbed {
    /// `spec`'s replicas behind its router, each a copy of this model device, in virtual time.
    fn replicated(
        &self,
        spec: &RunSpec,
        setup: &engine::Setup,
        arrivals: Arrivals<'_>,
    ) -> Result<Outcome> {
        let n = spec.replicas.count();
        if setup.keep.csv.is_some() {
            return Err(Error::invalid(
                "replicas",
                "per-request records are kept for one server only: drop --keep-records, or run one replica",
            ));
        }
        let policies = (0..n).map(|_| spec.policy.build()).collect();
        let (r, seed) = (spec.replicas, spec.seed);
        let mut traffic;
        let mut polled;
        let (list, expected): (&mut dyn Iterator<Item = Arrival>, usize) =
            match arrivals {
                Arrivals::Scheduled(t) => {
                    traffic = t.arrivals;
                    (&mut traffic, t.expected)
                }
                Arrivals::Virtual(src) => {
                    let expected = src.expected();
                    polled = std::iter::from_fn(move || src.poll(Nanos::MAX));
                    (&mut polled, expected)
                }
                Arrivals::FrontEnd { .. } | Arrivals::Generated => return Err(Error::invalid(
                    "replicas",
                    "several replicas run in the simulator only (a network front end serves one)",
                )),
            };
        match &self.backend {
            Backend::Npu(npu, _) => {
                engine::run_replicas(setup, npu, policies, r, seed, list, expected)
            }
            Backend::Table(tb) => engine::run_replicas(setup, tb, policies, r, seed, list, expected),
            Backend::Real(_) => Err(Error::invalid(
                "replicas",
                "several replicas run on a model device (npu, or a saved table): a real device is one server",
            )),
        }
    }
}

/// A real device, locked for one run.
fn lock(
    d: &std::sync::Mutex<Box<dyn Device + Send>>,
) -> Result<std::sync::MutexGuard<'_, Box<dyn Device + Send>>> {
    d.lock()
        .map_err(|_| Error::Internal("a real device's earlier run panicked".into()))
}

/// `device` (a model device's copy) on the virtual clock.
fn virtual_time(
    setup: &engine::Setup,
    device: &mut dyn Device,
    policy: &mut dyn Policy,
    arrivals: &mut dyn ArrivalSource,
) -> Result<Outcome> {
    let mut clock = VirtualClock::new();
    engine::run_source(setup, device, policy, &mut clock, arrivals)
}

/// Serves `schedule` on `device` in real time: a generator thread delivers each request at its
/// instant on the wall clock.
pub(crate) fn in_wall_time(
    setup: &engine::Setup,
    device: &mut dyn Device,
    policy: &mut dyn Policy,
    schedule: Traffic,
) -> Result<Outcome> {
    let mut clock = WallClock::start();
    let mut src = ThreadArrivals::spawn(schedule, clock.origin());
    engine::run_source(setup, device, policy, &mut clock, &mut src)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Member, Timing};
    use crate::engine::stamped;
    use crate::graph::{zoo, Lengths, Model, NodeStep};
    use crate::profile::Profile;
    use crate::runtime::{MaxBatch, Predictor};
    use crate::time::watchdog::within;
    use crate::time::{Nanos, Sla};
    use crate::traffic::Arrival;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn sla_ms(ms: f64) -> Sla {
        Sla::from_ms(ms).unwrap()
    }

    /// A real-time device: every node sleeps 1 ms (the input node none), whatever the batch.
    struct Sleeper;
    impl Device for Sleeper {
        fn name(&self) -> &'static str {
            "sleeper"
        }
        fn is_virtual(&self) -> bool {
            false
        }
        fn prepare(&mut self, _: &Model, _: u32) -> Result<()> {
            Ok(())
        }
        fn execute(&mut self, _: &Model, at: NodeStep, _: &[Member]) -> Result<Timing> {
            let t = Instant::now();
            if at.node.0 != 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(Timing {
                time: Nanos(t.elapsed().as_nanos() as u64),
                ..Timing::default()
            })
        }
    }

    fn arrival(ms: f64) -> Arrival {
        Arrival {
            time: Nanos::from_ms(ms),
            len: Lengths { enc: 1, dec: 1 },
            ..Arrival::default()
        }
    }

    /// Serves `arrivals` on the eight-node graph (8 ms a request alone) under `policy`, on a
    /// watchdog thread: a driver that never wakes fails the test instead of hanging it.
    fn serve_on_sleeper(policy: &str, arrivals: Vec<Arrival>, max_pending: usize) -> Outcome {
        let policy = policy.to_string();
        let hang = "the wall-clock driver did not finish within 30 s";
        within(Duration::from_secs(30), hang, move || {
            let m = zoo::fixture("eight_nodes.toml");
            let pred = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
            let setup = engine::Setup {
                max_pending: crate::runtime::MaxPending::new(max_pending).unwrap(),
                keep: KeepRecords {
                    requests: true,
                    ..KeepRecords::default()
                },
                ..engine::Setup::new(&m, &pred, sla_ms(1000.0), MaxBatch::new(8).unwrap())
            };
            let mut pol = crate::policy::parse(&policy, 8).unwrap();
            let t = Traffic::from_list(arrivals);
            in_wall_time(&setup, &mut Sleeper, pol.as_mut(), t).unwrap()
        })
    }

    #[test]
    fn a_run_that_fails_returns_at_once_with_its_schedule_unfinished() {
        // the device fails the first request; the second is an hour away: the run must end
        // with the error, not wait out the hour for the generator thread to finish
        struct Failing;
        impl Device for Failing {
            fn name(&self) -> &'static str {
                "failing"
            }
            fn is_virtual(&self) -> bool {
                false
            }
            fn prepare(&mut self, _: &Model, _: u32) -> Result<()> {
                Ok(())
            }
            fn execute(&mut self, _: &Model, _: NodeStep, _: &[Member]) -> Result<Timing> {
                Err(Error::Internal("the device failed".into()))
            }
        }
        let hang = "the failed run did not return within a minute: it waits for its schedule";
        let got = within(Duration::from_secs(60), hang, || {
            let m = zoo::fixture("eight_nodes.toml");
            let pred = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
            let setup = engine::Setup::new(&m, &pred, sla_ms(1000.0), MaxBatch::new(8).unwrap());
            let mut pol = crate::policy::parse("serial", 8).unwrap();
            let t = Traffic::from_list(vec![arrival(0.0), arrival(3_600_000.0)]);
            in_wall_time(&setup, &mut Failing, pol.as_mut(), t).map(|_| ())
        });
        let err = got.expect_err("the device's error");
        assert!(err.to_string().contains("the device failed"), "{err}");
    }

    #[test]
    fn a_graph_window_expires_on_the_wall_clock() {
        // one request alone under graph:20: nothing else arrives, so the driver must wake at
        // the window's end (20 ms) and run it (8 ms); a driver that waited for another arrival
        // would hang
        let out = serve_on_sleeper("graph:20", vec![arrival(0.0)], 100);
        let r = &out.requests[0];
        let (issued, done) = (r.first_issue.unwrap(), r.completion.unwrap());
        assert!(
            issued - r.arrival >= Nanos::from_ms(20.0),
            "issued after {:?}",
            issued - r.arrival
        );
        assert!(done - issued >= Nanos::from_ms(8.0));
    }

    #[test]
    fn overload_rejects_by_count_and_loses_nothing() {
        // 40 requests at once into a 3-deep queue on a device that takes 8 ms each: most are
        // refused as the queue is full, the rest complete in arrival order, each exactly once
        let out = serve_on_sleeper("serial", (0..40).map(|_| arrival(0.0)).collect(), 3);
        let st = out.stats();
        assert_eq!(st.requests, 40);
        assert_eq!(st.completed + st.rejected, 40);
        assert_eq!(st.rejected, st.rejected_queue_full);
        assert!(st.rejected >= 30, "{} rejected", st.rejected);
        let done: Vec<&crate::runtime::Request> = out
            .requests
            .iter()
            .filter(|r| r.completion.is_some())
            .collect();
        assert_eq!(done.len() as u64, st.completed);
        for w in done.windows(2) {
            assert!(w[1].completion.unwrap() >= w[0].completion.unwrap() + Nanos::from_ms(8.0));
        }
    }

    /// Counts each request as it leaves (the engine's observer).
    #[derive(Debug, Default)]
    struct Tally(std::sync::Mutex<Vec<(u32, engine::Left)>>);
    impl engine::Observer for Tally {
        fn left(&self, q: &crate::runtime::Request, how: engine::Left) {
            self.0.lock().unwrap().push((q.id.0, how));
        }
    }

    #[test]
    fn a_front_end_feeds_the_engine_through_a_channel_and_hears_of_every_request_once() {
        // a sender stands in for a network front end: 30 requests, a millisecond apart, each
        // stamped as it arrives; dropping the sender drains the server and ends the run, and
        // the observer heard of every request exactly once, as the run's statistics did
        let m = zoo::fixture("eight_nodes.toml");
        let pred = Predictor::new(&m, &Profile::uniform(&m, 8, Nanos::from_ms(1.0)), 1);
        let tally = Tally::default();
        let setup = engine::Setup {
            observer: Some(&tally),
            ..engine::Setup::new(&m, &pred, sla_ms(1000.0), MaxBatch::new(8).unwrap())
        };
        let mut clock = WallClock::start();
        let origin = clock.origin();
        let (tx, rx) = mpsc::channel();
        let sender = std::thread::spawn(move || {
            for _ in 0..30 {
                std::thread::sleep(Duration::from_millis(1));
                tx.send(engine::Told::Arrived(stamped(arrival(0.0), origin)))
                    .unwrap();
            }
        });
        let mut src = ChannelArrivals::new(rx, origin, 0);
        let mut pol = crate::policy::parse("lazy", 8).unwrap();
        let out =
            engine::run_source(&setup, &mut Sleeper, pol.as_mut(), &mut clock, &mut src).unwrap();
        sender.join().unwrap();
        let heard = tally.0.lock().unwrap().clone();
        assert_eq!(heard.len(), 30);
        let mut ids: Vec<u32> = heard.iter().map(|h| h.0).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 30, "each request heard of once");
        assert!(heard
            .iter()
            .all(|h| matches!(h.1, engine::Left::Completed(_))));
        assert_eq!(out.stats().completed, 30);
    }
}
