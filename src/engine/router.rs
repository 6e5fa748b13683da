//! The load balancer in front of replicas ([`super::replicas`]): how many servers a run has
//! ([`Replicas`]) and how a request's server is picked ([`Router`]) from what a balancer can
//! count — each server's requests sent and not yet answered.

use crate::error::{Error, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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

/// Picks the replica of each request.
pub(crate) struct Picker {
    router: Router,
    /// Where round robin (and the shortest queue's tie-break) goes next.
    next: usize,
    rng: StdRng,
}

impl Picker {
    /// A router whose draws (`p2c`, `random`) `seed` fixes.
    pub(crate) fn new(router: Router, seed: u64) -> Picker {
        Picker {
            router,
            next: 0,
            rng: StdRng::seed_from_u64(seed ^ ROUTER_STREAM),
        }
    }

    /// The replica for the next request, given each replica's outstanding requests.
    pub(crate) fn pick(&mut self, loads: &[u64]) -> usize {
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
