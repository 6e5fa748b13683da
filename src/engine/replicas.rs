//! Replicas behind a router, in virtual time: N servers, each with its own device, policy,
//! queue and BatchTable, fed by a load balancer that sends each arriving request to one of
//! them by what it can see — how many requests each has outstanding (sent and not yet
//! answered), as nginx's `least_conn` and Envoy's least-request balancers count them.
//!
//! The servers run in lockstep on one thread ([`run_replicas`]): before the router places a
//! request arriving at `t`, every replica is advanced to `t` (or until it waits for an
//! arrival), so that what the router sees is each replica's state at `t` exactly; a replica's
//! source ([`Routed`]) holds what the router sent it and says when it cannot yet know what
//! comes next. Each replica runs the one engine loop ([`Server::step`]) unchanged, so one
//! replica behind any router is byte for byte the plain run, and a seed fixes every result
//! (the router's draws come from their own stream).

use super::{ArrivalSource, Left, Observer, Outcome, Server, Setup, Step};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::policy::Policy;
use crate::runtime::Request;
use crate::time::{Clock, Nanos, VirtualClock};
use crate::traffic::Arrival;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::sync::Mutex;

/// How the load balancer picks the replica of each request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Router {
    /// Round robin (`rr`): each replica in turn, whatever its load.
    RoundRobin,
    /// Join the shortest queue (`jsq`): the replica with the fewest requests outstanding
    /// (ties go to the first of them after the last replica picked, as nginx's `least_conn`
    /// breaks them by round robin).
    ShortestQueue,
    /// Power of two choices (`p2c`): two replicas drawn at random, the less loaded of them
    /// (the first drawn on a tie).
    PowerOfTwo,
    /// Uniformly at random (`random`), as a Kubernetes Service's iptables rules spread
    /// connections.
    Random,
}

impl Router {
    /// The routers' names, as `--router` takes them.
    pub const NAMES: &'static str = "rr, jsq, p2c, random";

    /// The router named `s` (`rr`, `jsq`, `p2c`, `random`).
    pub fn parse(s: &str) -> Result<Router> {
        match s {
            "rr" => Ok(Router::RoundRobin),
            "jsq" => Ok(Router::ShortestQueue),
            "p2c" => Ok(Router::PowerOfTwo),
            "random" => Ok(Router::Random),
            other => Err(Error::invalid(
                "router",
                format!("'{other}' is not one of {}", Router::NAMES),
            )),
        }
    }

    /// Its name, as [`Router::parse`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Router::RoundRobin => "rr",
            Router::ShortestQueue => "jsq",
            Router::PowerOfTwo => "p2c",
            Router::Random => "random",
        }
    }
}

/// How many servers serve a run, and the router in front of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replicas {
    count: u16,
    router: Router,
}

impl Replicas {
    /// One server, no router: the plain run.
    pub const ONE: Replicas = Replicas {
        count: 1,
        router: Router::RoundRobin,
    };
    /// The most replicas a run may have.
    pub const MAX: usize = 1024;

    /// `count` replicas, in [1, [`Replicas::MAX`]], behind `router`.
    pub fn new(count: usize, router: Router) -> Result<Replicas> {
        match u16::try_from(count) {
            Ok(c) if (1..=Replicas::MAX).contains(&count) => Ok(Replicas { count: c, router }),
            _ => Err(Error::invalid(
                "replicas",
                format!("must be an integer in [1, {}], got {count}", Replicas::MAX),
            )),
        }
    }
    /// How many servers.
    pub fn count(&self) -> usize {
        usize::from(self.count)
    }
    /// The router in front of them.
    pub fn router(&self) -> Router {
        self.router
    }
}

/// What the router has sent one replica: the arrivals it holds, and how far the router has
/// decided (every arrival before `decided_before` has been placed, here or elsewhere).
#[derive(Debug, Default)]
struct Routed {
    queue: VecDeque<Arrival>,
    decided_before: Nanos,
    /// No arrival is left to place.
    closed: bool,
    expected: usize,
}

impl ArrivalSource for Routed {
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        match self.queue.front() {
            Some(a) if a.time <= now => self.queue.pop_front(),
            _ => None,
        }
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        match (self.queue.front().map(|a| a.time), until) {
            (None, None) => false,
            (Some(t), None) | (None, Some(t)) => {
                clock.idle_until(t);
                true
            }
            (Some(a), Some(u)) => {
                clock.idle_until(a.min(u));
                true
            }
        }
    }
    fn expected(&self) -> usize {
        self.expected
    }
    fn next_due(&mut self) -> Option<Nanos> {
        Some(match self.queue.front() {
            Some(a) => a.time,
            None if self.closed => Nanos::MAX,
            None => self.decided_before,
        })
    }
    fn ready(&self, until: Option<Nanos>) -> bool {
        !self.queue.is_empty() || self.closed || until.is_some_and(|u| u < self.decided_before)
    }
}

/// Hears each request leave a replica: its completion time, or `None` for a rejection (which
/// happens at the time of the turn that made it).
#[derive(Debug, Default)]
struct Departures(Mutex<Vec<Option<Nanos>>>);

impl Observer for Departures {
    fn left(&self, _q: &Request, how: Left) {
        let at = match how {
            Left::Completed(t) => Some(t),
            Left::Rejected(_) => None,
        };
        if let Ok(mut v) = self.0.lock() {
            v.push(at);
        }
    }
}

/// One server of the run and what the router knows of it.
struct Replica<'s, D> {
    server: Server<'s>,
    device: D,
    policy: Box<dyn Policy>,
    clock: VirtualClock,
    source: Routed,
    departures: &'s Departures,
    done: bool,
    /// Requests sent to it, and answered by the time the router last looked.
    sent: u64,
    answered: u64,
    /// Departures the router has not yet counted (they happen after its last look).
    later: VecDeque<Nanos>,
    /// Each of its requests' index in the run's arrivals, by its own request id.
    global: Vec<u32>,
}

impl<D: Device> Replica<'_, D> {
    /// Runs turns of its engine loop until its clock reaches `t`, it waits for an arrival the
    /// router has yet to place, or (the router closed) its run ends.
    fn advance(&mut self, t: Nanos) -> Result<()> {
        while !self.done && (self.source.closed || self.clock.now() < t) {
            let start = self.clock.now();
            let step = self.server.step(
                &mut self.device,
                self.policy.as_mut(),
                &mut self.clock,
                &mut self.source,
            )?;
            let heard =
                std::mem::take(
                    &mut *self.departures.0.lock().map_err(|_| {
                        Error::Internal("a replica's departures were poisoned".into())
                    })?,
                );
            self.later
                .extend(heard.into_iter().map(|d| d.unwrap_or(start)));
            match step {
                Step::Went => {}
                Step::Blocked => break,
                Step::Done => self.done = true,
            }
        }
        Ok(())
    }

    /// Requests sent to it and not answered by `t`: what a load balancer sees.
    fn outstanding(&mut self, t: Nanos) -> u64 {
        while self.later.front().is_some_and(|&d| d <= t) {
            self.later.pop_front();
            self.answered += 1;
        }
        self.sent - self.answered
    }
}

/// Picks the replica of each request.
struct Picker {
    router: Router,
    /// Where round robin (and the shortest queue's tie-break) goes next.
    next: usize,
    rng: StdRng,
}

impl Picker {
    /// A router whose draws (`p2c`, `random`) `seed` fixes.
    fn new(router: Router, seed: u64) -> Picker {
        Picker {
            router,
            next: 0,
            rng: StdRng::seed_from_u64(seed ^ ROUTER_STREAM),
        }
    }

    fn pick(&mut self, loads: &[u64]) -> usize {
        let n = loads.len();
        match self.router {
            Router::RoundRobin => {
                let k = self.next % n;
                self.next = (k + 1) % n;
                k
            }
            Router::Random => self.rng.random_range(0..n),
            Router::PowerOfTwo if n == 1 => 0,
            Router::PowerOfTwo => {
                let a = self.rng.random_range(0..n);
                let b = (a + 1 + self.rng.random_range(0..n - 1)) % n;
                if loads[b] < loads[a] {
                    b
                } else {
                    a
                }
            }
            Router::ShortestQueue => {
                let least = loads.iter().copied().min().unwrap_or(0);
                let k = (0..n)
                    .map(|i| (self.next + i) % n)
                    .find(|&k| loads[k] == least)
                    .unwrap_or(0);
                self.next = (k + 1) % n;
                k
            }
        }
    }
}

/// The router's stream of draws, apart from the traffic's (which the same seed fixes).
const ROUTER_STREAM: u64 = 0x0a11_0ca7_e5ee_d5ed;

/// Serves `arrivals` (sorted by time, `expected` of them) on `replicas.count()` servers, each
/// with its own copy of `device` and its own policy from `policies`, behind the router; the
/// router's draws are fixed by `seed`. The outcome is the whole run's (every request,
/// renumbered in arrival order; counters summed), with each replica's statistics.
pub(crate) fn run_replicas<D: Device + Clone>(
    setup: &Setup,
    device: &D,
    policies: Vec<Box<dyn Policy>>,
    replicas: Replicas,
    seed: u64,
    arrivals: &mut dyn Iterator<Item = Arrival>,
    expected: usize,
) -> Result<Outcome> {
    let n = replicas.count();
    if policies.len() != n {
        return Err(Error::Internal(format!(
            "{} policies for {n} replicas",
            policies.len()
        )));
    }
    let departures: Vec<Departures> = (0..n).map(|_| Departures::default()).collect();
    let setups: Vec<Setup> = departures
        .iter()
        .map(|d| Setup {
            observer: Some(d),
            snapshots: false,
            ..setup.clone()
        })
        .collect();
    let share = expected.div_ceil(n);
    let mut reps = Vec::with_capacity(n);
    for ((s, d), policy) in setups.iter().zip(&departures).zip(policies) {
        reps.push(Replica {
            server: Server::new(s, policy.as_ref(), share)?,
            device: device.clone(),
            policy,
            clock: VirtualClock::new(),
            source: Routed {
                expected: share,
                ..Routed::default()
            },
            departures: d,
            done: false,
            sent: 0,
            answered: 0,
            later: VecDeque::new(),
            global: Vec::new(),
        });
    }
    let mut picker = Picker::new(replicas.router(), seed);
    let mut loads = vec![0u64; n];
    let mut next = arrivals.next();
    let mut index = 0u32;
    loop {
        let before = next.map_or(Nanos::MAX, |a| a.time);
        for r in &mut reps {
            r.source.decided_before = before;
            r.source.closed = next.is_none();
            r.advance(before)?;
        }
        let Some(a) = next else { break };
        for (l, r) in loads.iter_mut().zip(&mut reps) {
            *l = r.outstanding(a.time);
        }
        let r = &mut reps[picker.pick(&loads)];
        r.source.queue.push_back(a);
        r.sent += 1;
        r.global.push(index);
        index = index
            .checked_add(1)
            .ok_or_else(|| Error::invalid("requests", "more than 2^32 behind one router"))?;
        next = arrivals.next();
        if next.is_some_and(|b| b.time < a.time) {
            return Err(Error::Internal("arrivals out of time order".into()));
        }
    }
    merge(reps)
}

/// The whole run from its replicas' runs.
fn merge<D>(reps: Vec<Replica<'_, D>>) -> Result<Outcome> {
    let mut total: Option<Outcome> = None;
    let mut each = Vec::with_capacity(reps.len());
    for r in reps {
        let global = r.global;
        let mut out = r.server.finish()?;
        each.push(out.stats());
        for q in &mut out.requests {
            q.id.0 = *global
                .get(q.id.0 as usize)
                .ok_or_else(|| Error::Internal(format!("replica request {} unknown", q.id.0)))?;
        }
        match total.as_mut() {
            None => total = Some(out),
            Some(t) => {
                t.counters.absorb(&out.counters);
                t.record.absorb(out.record)?;
                t.requests.append(&mut out.requests);
            }
        }
    }
    let mut total = total.ok_or_else(|| Error::Internal("no replicas".into()))?;
    total.requests.sort_by_key(|q| q.id);
    total.replicas = each;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::npu::{Npu, NpuConfig};
    use crate::graph::{zoo, Model};
    use crate::metrics::KeepRecords;
    use crate::policy;
    use crate::profile::Profile;
    use crate::runtime::{MaxBatch, Predictor};
    use crate::time::Sla;

    /// A model on the NPU model, profiled to batch 8, and its predictor.
    fn bench(name: &str) -> (Model, Npu, Predictor) {
        let m = zoo::load(name).unwrap();
        let mut npu = Npu::new(NpuConfig::default()).unwrap();
        let prof = Profile::measure(&mut npu, &m, 8, m.ref_lengths()).unwrap();
        let pred = Predictor::new(&m, &prof, 20);
        npu.prepare(&m, 8).unwrap();
        (m, npu, pred)
    }

    fn arrivals(m: &Model, rate: f64, n: usize, seed: u64) -> Vec<Arrival> {
        crate::traffic::generate(m, (Default::default(), rate), n, seed)
            .unwrap()
            .collect()
    }

    fn setup<'a>(m: &'a Model, pred: &'a Predictor, sla_ms: f64) -> Setup<'a> {
        Setup {
            keep: KeepRecords {
                requests: true,
                latencies: true,
                ..KeepRecords::default()
            },
            ..Setup::new(
                m,
                pred,
                Sla::from_ms(sla_ms).unwrap(),
                MaxBatch::new(8).unwrap(),
            )
        }
    }

    /// `list` served by `n` replicas of `npu` under `policy` behind `router`.
    fn behind(
        s: &Setup,
        npu: &Npu,
        (policy, n, router): (&str, usize, Router),
        list: &[Arrival],
        seed: u64,
    ) -> Outcome {
        let policies = (0..n).map(|_| policy::parse(policy, 8).unwrap()).collect();
        let r = Replicas::new(n, router).unwrap();
        let mut it = list.iter().copied();
        run_replicas(s, npu, policies, r, seed, &mut it, list.len()).unwrap()
    }

    #[test]
    fn one_replica_behind_any_router_is_the_plain_run_byte_for_byte() {
        // the lockstep driver stops each replica wherever the router must look; alone, it
        // must still make every decision the plain loop makes, at the same instants
        for (name, sla, rates) in [
            ("resnet50", 30.0, [100.0, 3000.0]),
            ("gnmt", 100.0, [20.0, 300.0]),
        ] {
            let (m, npu, pred) = bench(name);
            let s = setup(&m, &pred, sla);
            for pol in [
                "serial",
                "graph:5",
                "lazy",
                "lazy:adaptive",
                "oracle",
                "continuous",
            ] {
                if policy::Spec::parse(pol, 8).unwrap().check_for(&m).is_err() {
                    continue;
                }
                for rate in rates {
                    let list = arrivals(&m, rate, 150, 7);
                    let mut p = policy::parse(pol, 8).unwrap();
                    let plain = super::super::run(
                        &s,
                        &mut npu.clone(),
                        p.as_mut(),
                        &mut VirtualClock::new(),
                        &list,
                    )
                    .unwrap();
                    for router in [
                        Router::RoundRobin,
                        Router::ShortestQueue,
                        Router::PowerOfTwo,
                        Router::Random,
                    ] {
                        let one = behind(&s, &npu, (pol, 1, router), &list, 3);
                        let what = format!("{name} {pol} at {rate}/s behind {router:?}");
                        assert_eq!(one.requests, plain.requests, "{what}");
                        assert_eq!(one.counters, plain.counters, "{what}");
                        assert_eq!(one.stats(), plain.stats(), "{what}");
                        assert_eq!(one.replicas, vec![plain.stats()], "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn round_robin_deals_in_turn_and_every_request_leaves_once() {
        let (m, npu, pred) = bench("resnet50");
        let s = setup(&m, &pred, 30.0);
        let list = arrivals(&m, 2000.0, 10, 1);
        let out = behind(&s, &npu, ("lazy", 3, Router::RoundRobin), &list, 1);
        let each: Vec<u64> = out.replicas.iter().map(|r| r.requests).collect();
        assert_eq!(each, vec![4, 3, 3]);
        // the whole run's records: each request once, in arrival order, at its own arrival
        assert_eq!(out.requests.len(), 10);
        for (i, (q, a)) in out.requests.iter().zip(&list).enumerate() {
            assert_eq!((q.id.0 as usize, q.arrival), (i, a.time));
            assert!(q.completion.is_some());
        }
        let st = out.stats();
        assert_eq!(st.completed, 10);
        assert_eq!(
            out.replicas.iter().map(|r| r.completed).sum::<u64>(),
            st.completed
        );
        let execs: u64 = out.counters.executions;
        assert!(execs > 0);
    }

    #[test]
    fn a_burst_is_split_evenly_by_the_routers_that_look() {
        // nine requests at one instant: a router that sees what it sent evens it out
        let (m, npu, pred) = bench("resnet50");
        let s = setup(&m, &pred, 1000.0);
        let list: Vec<Arrival> = arrivals(&m, 100.0, 9, 1)
            .into_iter()
            .map(|a| Arrival {
                time: Nanos::ZERO,
                ..a
            })
            .collect();
        for router in [Router::ShortestQueue, Router::PowerOfTwo] {
            let out = behind(&s, &npu, ("serial", 2, router), &list, 1);
            let mut each: Vec<u64> = out.replicas.iter().map(|r| r.requests).collect();
            each.sort_unstable();
            assert_eq!(each, vec![4, 5], "{router:?}");
        }
        let out = behind(&s, &npu, ("serial", 3, Router::ShortestQueue), &list, 1);
        let each: Vec<u64> = out.replicas.iter().map(|r| r.requests).collect();
        assert_eq!(each, vec![3, 3, 3]);
    }

    /// Serial replicas of a model whose every request takes `service`, by a reference a few
    /// lines long: each server first in, first out; the router shown, for each arrival, how
    /// many of each server's requests finish after it.
    fn reference(
        list: &[Arrival],
        n: usize,
        router: Router,
        seed: u64,
        service: Nanos,
    ) -> Vec<Nanos> {
        let mut picker = Picker::new(router, seed);
        let mut done: Vec<Vec<Nanos>> = vec![Vec::new(); n];
        let mut free = vec![Nanos::ZERO; n];
        let mut completions = Vec::new();
        for a in list {
            let loads: Vec<u64> = done
                .iter()
                .map(|d| d.iter().filter(|&&c| c > a.time).count() as u64)
                .collect();
            let k = picker.pick(&loads);
            free[k] = free[k].max(a.time) + service;
            done[k].push(free[k]);
            completions.push(free[k]);
        }
        completions
    }

    #[test]
    fn serial_replicas_finish_every_request_when_a_first_in_first_out_reference_does() {
        // ResNet-50 on the NPU model takes the same time for every request alone, so serial
        // servers are first-in-first-out queues of fixed service: what the router saw at each
        // arrival (each replica advanced to that instant, a completion at it counted as gone)
        // decides every completion, which must match the reference's to the nanosecond
        let (m, npu, pred) = bench("resnet50");
        let s = setup(&m, &pred, 30.0);
        let alone = behind(
            &s,
            &npu,
            ("serial", 1, Router::RoundRobin),
            &arrivals(&m, 1.0, 1, 1),
            1,
        );
        let service = alone.requests[0].latency().unwrap();
        // four servers at about 60% each
        let list = arrivals(&m, 0.6 * 4.0 * 1e9 / service.0 as f64, 3000, 2);
        let mut means = Vec::new();
        for router in [
            Router::RoundRobin,
            Router::ShortestQueue,
            Router::PowerOfTwo,
            Router::Random,
        ] {
            let out = behind(&s, &npu, ("serial", 4, router), &list, 5);
            let got: Vec<Nanos> = out.requests.iter().map(|q| q.completion.unwrap()).collect();
            assert_eq!(got, reference(&list, 4, router, 5, service), "{router:?}");
            means.push(out.stats().latency_ms.mean);
        }
        // seeing the queues beats guessing: the shortest queue waits less than two choices,
        // which wait less than a random pick (round robin, which smooths each server's
        // arrivals, beats even the shortest queue when every request takes the same time)
        let [rr, jsq, p2c, random] = means[..] else {
            unreachable!()
        };
        assert!(jsq < p2c && p2c < random && rr < random, "{means:?}");
        // the same seed draws the same routes; another seed others
        let a = behind(&s, &npu, ("serial", 4, Router::Random), &list, 5);
        let c = behind(&s, &npu, ("serial", 4, Router::Random), &list, 6);
        assert_ne!(a.replicas, c.replicas);
    }

    #[test]
    fn settings_out_of_range_are_refused_with_their_range() {
        assert!(Replicas::new(0, Router::RoundRobin).is_err());
        let e = Replicas::new(1025, Router::RoundRobin).unwrap_err();
        assert!(e.to_string().contains("[1, 1024]"), "{e}");
        assert_eq!(Replicas::new(1024, Router::Random).unwrap().count(), 1024);
        for r in [
            Router::RoundRobin,
            Router::ShortestQueue,
            Router::PowerOfTwo,
            Router::Random,
        ] {
            assert_eq!(Router::parse(r.name()).unwrap(), r);
        }
        let e = Router::parse("least").unwrap_err().to_string();
        assert!(e.contains("rr, jsq, p2c, random"), "{e}");
    }
}
