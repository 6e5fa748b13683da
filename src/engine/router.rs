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

#[cfg(test)]
mod tests {
    //! Each router's picks, exactly: round robin's turn, the shortest queue's tie-break after
    //! its last pick, and two choices that are always two distinct replicas, the first drawn
    //! winning a tie.

    use super::*;

    #[test]
    fn round_robin_deals_in_turn_whatever_the_loads() {
        let mut p = Picker::new(Router::RoundRobin, 1);
        let picks: Vec<usize> = (0..7).map(|_| p.pick(&[9, 0, 5])).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
        // the turn is kept as a replica's index, not a count that grows with the run
        assert_eq!(p.next, 1);
        assert_eq!(p.pick(&[4]), 0);
    }

    #[test]
    fn the_shortest_queue_breaks_ties_by_turn_after_its_last_pick() {
        let mut p = Picker::new(Router::ShortestQueue, 1);
        let loads = [2, 1, 1, 3];
        // the least loaded (1 and 2), the first of them at or after the one past the last pick
        let picks: Vec<usize> = (0..3).map(|_| p.pick(&loads)).collect();
        assert_eq!(picks, [1, 2, 1]);
        // after 1 the turn is 2: the only empty queue wins wherever it is
        assert_eq!(p.pick(&[0, 4, 4, 4]), 0);
        let even: Vec<usize> = (0..5).map(|_| p.pick(&[0, 0, 0, 0])).collect();
        assert_eq!(even, [1, 2, 3, 0, 1]);
        assert_eq!(p.next, 2);
        assert_eq!(p.pick(&[7]), 0);
    }

    #[test]
    fn two_choices_are_two_distinct_replicas_and_the_first_drawn_wins_a_tie() {
        // with two replicas both are always drawn: the less loaded one, every time
        for (loads, want) in [([1, 0], 1), ([0, 1], 0)] {
            let mut p = Picker::new(Router::PowerOfTwo, 5);
            assert!((0..200).all(|_| p.pick(&loads) == want), "{loads:?}");
        }
        // of three, the most loaded is never taken and the others each about half the time
        let mut p = Picker::new(Router::PowerOfTwo, 5);
        let mut count = [0; 3];
        for _ in 0..3000 {
            count[p.pick(&[1, 9, 2])] += 1;
        }
        // 0 wins whenever drawn (2/3), 2 otherwise (1/3)
        assert_eq!(count[1], 0, "{count:?}");
        assert!((1900..2100).contains(&count[0]), "{count:?}");
        // on a tie the first of the two draws (the router's own stream, two draws a pick)
        for n in [2usize, 3, 8] {
            let seed = 40 + n as u64;
            let mut p = Picker::new(Router::PowerOfTwo, seed);
            let mut draws = StdRng::seed_from_u64(seed ^ ROUTER_STREAM);
            for _ in 0..100 {
                let first = draws.random_range(0..n);
                let _second = draws.random_range(0..n - 1);
                assert_eq!(p.pick(&vec![3; n]), first, "{n} replicas");
            }
        }
        assert_eq!(Picker::new(Router::PowerOfTwo, 5).pick(&[6]), 0);
    }

    #[test]
    fn random_picks_spread_over_every_replica_and_a_seed_fixes_them() {
        let picks = |seed| {
            let mut p = Picker::new(Router::Random, seed);
            (0..4000).map(|_| p.pick(&[0, 9, 0, 9])).collect::<Vec<_>>()
        };
        let a = picks(1);
        assert_eq!(a, picks(1));
        assert_ne!(a, picks(2));
        for k in 0..4 {
            let share = a.iter().filter(|&&x| x == k).count();
            assert!((900..1100).contains(&share), "replica {k}: {share} of 4000");
        }
    }
}
