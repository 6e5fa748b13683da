//! Replicas behind a router, in virtual time: N servers, each with its own device, policy,
//! queue and BatchTable, fed by a load balancer that sends each arriving request to one of
//! them by what it can see — how many requests each has outstanding (sent and not yet
//! answered), as nginx's `least_conn` and Envoy's least-request balancers count them.
//!
//! The servers run in lockstep on one thread ([`run_replicas`]): before the router places a
//! request arriving at `t`, every replica is advanced to `t` (or until it waits for an
//! arrival), so that what the router sees is each replica's state at `t` — a request that
//! completed at `t` counts as answered; one the replica would shed at `t` itself is still
//! outstanding, since a replica's turn at `t` receives that instant's arrivals and so waits for
//! the router. Each replica has its own pending queue (its own `--max-pending`). A replica's
//! source ([`Routed`]) holds what the router sent it and says when it cannot yet know what
//! comes next. Each replica runs the one engine loop ([`Server::step`]) unchanged, so one
//! replica behind any router is byte for byte the plain run, and a seed fixes every result
//! (the router's draws come from their own stream).

use super::router::{Picker, Replicas};
use super::{ArrivalSource, Left, Observer, Outcome, Server, Setup, Step};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::policy::Policy;
use crate::runtime::Request;
use crate::time::{Clock, Nanos, VirtualClock};
use crate::traffic::Arrival;
use std::collections::VecDeque;
use std::sync::Mutex;

/// What the router has sent one replica: the arrivals it holds, and how far the router has
/// decided (every arrival before `decided_before` has been placed, here or elsewhere). It
/// says nothing of how many will come (`expected`): the replica's server is sized for its share
/// of the run when it is made.
#[derive(Debug, Default)]
struct Routed {
    queue: VecDeque<Arrival>,
    decided_before: Nanos,
    /// No arrival is left to place.
    closed: bool,
}

impl ArrivalSource for Routed {
    fn poll(&mut self, now: Nanos) -> Option<Arrival> {
        match self.queue.front() {
            Some(a) if a.time <= now => self.queue.pop_front(),
            _ => None,
        }
    }
    fn idle(&mut self, clock: &mut dyn Clock, until: Option<Nanos>) -> bool {
        super::source::idle_until_next(clock, self.queue.front().map(|a| a.time), until)
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
    if setup.observer.is_some() || setup.snapshots {
        return Err(Error::Internal(
            "replicas behind a router tell no observer and keep no BatchTable snapshots".into(),
        ));
    }
    if policies.len() != n {
        return Err(Error::Internal(format!(
            "{} policies for {n} replicas",
            policies.len()
        )));
    }
    let departures: Vec<Departures> = (0..n).map(|_| Departures::default()).collect();
    let setups: Vec<Setup> = departures
        .iter()
        // (the setup keeps no snapshots: refused above)
        .map(|d| Setup {
            observer: Some(d),
            ..setup.clone()
        })
        .collect();
    let share = expected.div_ceil(n);
    let mut reps = Vec::with_capacity(n);
    for ((s, d), mut policy) in setups.iter().zip(&departures).zip(policies) {
        reps.push(Replica {
            server: Server::new(s, policy.as_mut(), share)?,
            device: device.clone(),
            policy,
            clock: VirtualClock::new(),
            source: Routed::default(),
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
        // a request without a key of its own is keyed by its index in the run, as in a
        // plain run (a replica numbers its requests from 0)
        r.source.queue.push_back(Arrival {
            key: Some(a.key.unwrap_or(u64::from(index))),
            ..a
        });
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
            let local = q.id.0;
            q.id.0 = *global
                .get(local as usize)
                .ok_or_else(|| Error::Internal(format!("replica request {local} unknown")))?;
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
    use super::super::router::Router;
    use super::*;
    use crate::device::npu::{Npu, NpuConfig};
    use crate::graph::{zoo, Model};
    use crate::metrics::KeepRecords;
    use crate::metrics::Stats;
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

    /// A replica's source keeps the arrival source's contract with what the router has decided
    /// so far: it gives a request only once due, says no arrival comes before the time up to
    /// which the router has decided (and never, once closed), and can say what comes next before
    /// a time only if that time is strictly before the router's decisions or a request waits.
    #[test]
    fn a_routed_source_says_only_what_the_router_has_decided() {
        let at = |ns: u64| Arrival {
            time: Nanos(ns),
            ..Arrival::default()
        };
        let mut r = Routed::default();
        // nothing decided: an arrival may come at once
        assert_eq!(r.next_due(), Some(Nanos(0)));
        assert!(!r.ready(None) && !r.ready(Some(Nanos(0))));
        // decided up to 100 ns, nothing for this replica: it may wait until before 100
        r.decided_before = Nanos(100);
        assert_eq!(r.next_due(), Some(Nanos(100)));
        assert!(r.ready(Some(Nanos(99))));
        assert!(!r.ready(Some(Nanos(100))) && !r.ready(None));
        // a request routed for 150: due then, and given not before
        r.queue.push_back(at(150));
        assert!(r.ready(None) && r.ready(Some(Nanos(500))));
        assert_eq!(r.next_due(), Some(Nanos(150)));
        assert_eq!(r.poll(Nanos(149)), None);
        let mut clock = VirtualClock::new();
        assert!(r.idle(&mut clock, Some(Nanos(120))));
        assert_eq!(clock.now(), Nanos(120));
        assert!(r.idle(&mut clock, None));
        assert_eq!(clock.now(), Nanos(150));
        assert_eq!(r.poll(Nanos(150)), Some(at(150)));
        assert_eq!(r.poll(Nanos(150)), None);
        // closed with nothing left: nothing will ever come
        r.closed = true;
        assert_eq!(r.next_due(), Some(Nanos::MAX));
        assert!(r.ready(None));
        assert!(!r.idle(&mut clock, None));
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
    fn one_replica_sees_a_request_arriving_exactly_as_its_node_ends() {
        // every node takes 50 µs at every batch size and requests arrive on multiples of it,
        // so nodes end exactly as requests arrive: the replica must receive such a request
        // before it decides, as the plain loop does (stepping it once more at that instant,
        // before the router has placed the request, decides without it)
        let m = zoo::load("resnet50").unwrap();
        let prof = Profile::uniform(&m, 8, Nanos::from_us(50.0));
        let pred = Predictor::new(&m, &prof, 20);
        let mut dev = crate::device::table::TableDevice::from_profile(prof, "uniform");
        dev.prepare(&m, 8).unwrap();
        let s = setup(&m, &pred, 30.0);
        // 1 ms apart and a few nodes more or less: k(i) = 20 i + (i² mod 7) nodes, increasing
        let list: Vec<Arrival> = arrivals(&m, 1000.0, 150, 7)
            .into_iter()
            .zip(0u64..)
            .map(|(a, i)| Arrival {
                time: Nanos(50_000 * (20 * i + i * i % 7)),
                ..a
            })
            .collect();
        for pol in [
            "serial",
            "graph:5",
            "lazy",
            "lazy:adaptive",
            "oracle",
            "continuous",
        ] {
            let plain = super::super::run(
                &s,
                &mut dev.clone(),
                policy::parse(pol, 8).unwrap().as_mut(),
                &mut VirtualClock::new(),
                &list,
            )
            .unwrap();
            assert!(
                plain.counters.preemptions > 0 || !pol.starts_with("lazy"),
                "{pol}"
            );
            for router in [Router::RoundRobin, Router::ShortestQueue] {
                let r = Replicas::new(1, router).unwrap();
                let one = run_replicas(
                    &s,
                    &dev,
                    vec![policy::parse(pol, 8).unwrap()],
                    r,
                    3,
                    &mut list.iter().copied(),
                    list.len(),
                )
                .unwrap();
                assert_eq!(one.requests, plain.requests, "{pol} behind {router:?}");
                assert_eq!(one.counters, plain.counters, "{pol} behind {router:?}");
            }
        }
    }

    #[test]
    fn round_robin_deals_in_turn_and_every_request_leaves_once() {
        let (m, npu, pred) = bench("resnet50");
        let s = setup(&m, &pred, 30.0);
        // every other request keyed by a front end, with the key its replica's own numbering
        // gives it (the 3rd request of replica 0 is its request 1, keyed 1); the others
        // keyed by their index in the run, as a plain run keys them
        let key = |i: usize| i.is_multiple_of(2).then_some((i / 3) as u64);
        let list: Vec<Arrival> = arrivals(&m, 2000.0, 10, 1)
            .into_iter()
            .enumerate()
            .map(|(i, a)| Arrival { key: key(i), ..a })
            .collect();
        let out = behind(&s, &npu, ("lazy", 3, Router::RoundRobin), &list, 1);
        let each: Vec<u64> = out.replicas.iter().map(|r| r.requests).collect();
        assert_eq!(each, vec![4, 3, 3]);
        // the whole run's records: each request once, in arrival order, at its own arrival
        assert_eq!(out.requests.len(), 10);
        for (i, (q, a)) in out.requests.iter().zip(&list).enumerate() {
            assert_eq!((q.id.0 as usize, q.arrival), (i, a.time));
            assert_eq!(q.key, key(i).unwrap_or(i as u64), "request {i}'s key");
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
    /// many of each server's requests finish after it. Round robin and the shortest queue pick
    /// by the reference's own rule; the random routers draw as the run's router does (the same
    /// seed), so that their runs can be held to the reference too.
    fn reference(
        list: &[Arrival],
        n: usize,
        router: Router,
        seed: u64,
        service: Nanos,
    ) -> Vec<Nanos> {
        let mut drawn = Picker::new(router, seed);
        let mut turn = 0;
        let mut pick = |loads: &[u64]| match router {
            Router::RoundRobin => {
                turn += 1;
                (turn - 1) % n
            }
            Router::ShortestQueue => {
                let least = *loads.iter().min().unwrap();
                let k = (turn..turn + n)
                    .map(|i| i % n)
                    .find(|&k| loads[k] == least)
                    .unwrap();
                turn = k + 1;
                k
            }
            Router::PowerOfTwo | Router::Random => drawn.pick(loads),
        };
        let mut done: Vec<Vec<Nanos>> = vec![Vec::new(); n];
        let mut free = vec![Nanos::ZERO; n];
        let mut completions = Vec::new();
        for a in list {
            let loads: Vec<u64> = done
                .iter()
                .map(|d| d.iter().filter(|&&c| c > a.time).count() as u64)
                .collect();
            let k = pick(&loads);
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
        // arrivals on whole multiples of the service time, where every completion lands
        // exactly on an arrival: the router must count a request answered at that instant
        // as gone (as the reference does), not as still outstanding
        let lattice: Vec<Arrival> = list[..1000]
            .iter()
            .map(|a| Arrival {
                time: Nanos(a.time.0 / service.0 * service.0),
                ..*a
            })
            .collect();
        for router in [Router::ShortestQueue, Router::PowerOfTwo] {
            let out = behind(&s, &npu, ("serial", 4, router), &lattice, 5);
            let got: Vec<Nanos> = out.requests.iter().map(|q| q.completion.unwrap()).collect();
            let want = reference(&lattice, 4, router, 5, service);
            assert_eq!(got, want, "{router:?} on the lattice");
        }
    }

    #[test]
    fn replicas_dealt_in_turn_run_as_plain_servers_and_add_up_to_the_whole() {
        // round robin's routes do not depend on the replicas, so each replica must serve its
        // share exactly as a plain server would, rejections (a short queue, shedding) and SLA
        // classes included; the whole run is then every request's record added up (a decoder
        // model's first tokens and tokens too)
        dealt_in_turn("resnet50", 12_000.0, [2.0, 5.0, 30.0]);
        dealt_in_turn("gnmt", 600.0, [20.0, 60.0, 300.0]);
    }

    fn dealt_in_turn(name: &str, rate: f64, slas: [f64; 3]) {
        let (m, npu, pred) = bench(name);
        let s = Setup {
            classes: 3,
            shed: true,
            max_pending: crate::runtime::MaxPending::new(4).unwrap(),
            ..setup(&m, &pred, 30.0)
        };
        let list: Vec<Arrival> = arrivals(&m, rate, 900, 3)
            .into_iter()
            .enumerate()
            .map(|(i, a)| Arrival {
                class: (i % 3) as u8,
                sla: Some(Nanos::from_ms(slas[i % 3])),
                ..a
            })
            .collect();
        let n = 3;
        let out = behind(&s, &npu, ("lazy", n, Router::RoundRobin), &list, 1);
        let mut counters = super::super::Counters::default();
        let mut want = crate::metrics::Recorder::new((1, 3), KeepRecords::default()).unwrap();
        let (mut qfull, mut shed) = (0, 0);
        let mut class_rejected = [(0u64, 0u64); 3];
        for r in 0..n {
            let mine: Vec<Arrival> = list.iter().skip(r).step_by(n).copied().collect();
            let mut p = policy::parse("lazy", 8).unwrap();
            let plain = super::super::run(
                &s,
                &mut npu.clone(),
                p.as_mut(),
                &mut VirtualClock::new(),
                &mine,
            )
            .unwrap();
            assert_eq!(out.replicas[r], plain.stats(), "replica {r}");
            let c = &plain.counters;
            counters.executions += c.executions;
            counters.batch_sum += c.batch_sum;
            counters.preemptions += c.preemptions;
            counters.merges += c.merges;
            counters.splits += c.splits;
            counters.cross_step += c.cross_step;
            counters.busy += c.busy;
            for k in 0..3 {
                counters.by_class[k].executions += c.by_class[k].executions;
                counters.by_class[k].batch_sum += c.by_class[k].batch_sum;
                counters.by_class[k].busy += c.by_class[k].busy;
            }
            let st = plain.stats();
            (qfull, shed) = (qfull + st.rejected_queue_full, shed + st.rejected_shed);
            for (k, cs) in plain.class_stats().iter().enumerate() {
                class_rejected[k].0 += cs.rejected_queue_full;
                class_rejected[k].1 += cs.rejected_shed;
            }
            for q in plain.requests {
                want.arrive(&q);
                if q.completion.is_some() {
                    want.complete(q).unwrap();
                }
            }
        }
        assert!(
            qfull > 0 && shed > 0,
            "{qfull} {shed}: the test wants both rejections"
        );
        assert_eq!(out.counters, counters);
        let patch = |mut st: Stats, (q, sh): (u64, u64)| {
            (st.rejected_queue_full, st.rejected_shed, st.rejected) = (q, sh, q + sh);
            st
        };
        assert_eq!(out.stats(), patch(want.stats(&counters), (qfull, shed)));
        let classes: Vec<Stats> = want
            .class_stats(&counters)
            .into_iter()
            .zip(class_rejected)
            .map(|(st, r)| patch(st, r))
            .collect();
        assert_eq!(out.class_stats(), classes);
        assert_eq!(out.requests.len(), list.len());
    }

    #[test]
    fn no_arrivals_and_the_most_replicas_run_to_the_end() {
        let (m, npu, pred) = bench("resnet50");
        let s = setup(&m, &pred, 30.0);
        let none = behind(&s, &npu, ("lazy", 4, Router::ShortestQueue), &[], 1);
        assert_eq!(none.stats().requests, 0);
        assert_eq!(none.replicas.len(), 4);
        let list = arrivals(&m, 5000.0, 50, 1);
        let most = behind(
            &s,
            &npu,
            ("serial", Replicas::MAX, Router::RoundRobin),
            &list,
            1,
        );
        assert_eq!(most.stats().completed, 50);
        let busy = most.replicas.iter().filter(|r| r.requests > 0).count();
        assert_eq!(busy, 50);
        // nobody waited: fifty servers for fifty requests
        let service = most.requests[0].latency().unwrap();
        assert!(most.requests.iter().all(|q| q.latency() == Some(service)));
        // a setup that asks for what replicas do not keep is refused
        let snap = Setup {
            snapshots: true,
            ..setup(&m, &pred, 30.0)
        };
        let policies = vec![policy::parse("lazy", 8).unwrap()];
        let one = Replicas::new(1, Router::RoundRobin).unwrap();
        let mut it = list.iter().copied();
        assert!(run_replicas(&snap, &npu, policies, one, 1, &mut it, 50).is_err());
        // as are a policy short and arrivals out of time order (equal times are in order)
        let two = Replicas::new(2, Router::RoundRobin).unwrap();
        let policies = vec![policy::parse("lazy", 8).unwrap()];
        let mut it = list.iter().copied();
        let e = run_replicas(&s, &npu, policies, two, 1, &mut it, 50).unwrap_err();
        assert!(e.to_string().contains("1 policies for 2 replicas"), "{e}");
        let at = |ms: f64| Arrival {
            time: Nanos::from_ms(ms),
            ..list[0]
        };
        for (times, ok) in [([1.0, 1.0, 2.0], true), ([1.0, 2.0, 1.5], false)] {
            let list = times.map(at);
            let policies = (0..2).map(|_| policy::parse("lazy", 8).unwrap()).collect();
            let mut it = list.iter().copied();
            let run = run_replicas(&s, &npu, policies, two, 1, &mut it, 3);
            match run {
                Ok(out) => assert!(ok && out.stats().completed == 3, "{times:?}"),
                Err(e) => assert!(!ok && e.to_string().contains("out of time order"), "{e}"),
            }
        }
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
