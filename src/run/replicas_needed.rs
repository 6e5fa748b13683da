//! How many replicas a rate needs: the fewest servers behind a router that serve a target
//! Poisson rate within a p99 or SLA-violation bound — the question an operator sizes a
//! deployment by (`capacity --target-rps R`). A bracket-and-bisect search over the count: from
//! one replica, double until a count meets the bound, then bisect between the last count that
//! failed and the first that met it, down to one. Each probe is the mean over seeds of runs
//! through the same runner as `compare` and `capacity`, and a probe that rejects a request
//! fails the bound. The search assumes that another replica never hurts, and reports every
//! probe.

use super::capacity::Search;
use crate::engine::Replicas;
use crate::error::Result;
use crate::metrics::Stats;
use crate::progress::Mode;
use crate::run::grid::{mean_stats, run_one, Keep};
use crate::run::{RunSpec, Testbed};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// One count of replicas tried.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CountProbe {
    /// How many replicas.
    pub replicas: usize,
    /// The mean over the seeds.
    pub stats: Stats,
    /// Whether it met the bound.
    pub ok: bool,
}

/// One policy's need.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Need {
    /// The policy string.
    pub policy: String,
    /// The fewest replicas found to meet the bound; None when even the most allowed do not
    /// (then `note` says so).
    pub replicas: Option<usize>,
    /// Why there is no count.
    pub note: Option<String>,
    /// The statistics at that count.
    pub at: Stats,
    /// Every probe, in the order tried.
    pub probes: Vec<CountProbe>,
}

/// The search for one policy: `probe(n)` gives the mean statistics with `n` replicas.
pub fn search_count(
    policy: &str,
    how: &Search,
    mut probe: impl FnMut(usize) -> Result<Stats>,
) -> Result<Need> {
    let mut probes: Vec<CountProbe> = Vec::new();
    let mut try_count = |n: usize, probes: &mut Vec<CountProbe>| -> Result<bool> {
        let stats = probe(n)?;
        let ok = how.bound.met_by(&stats);
        probes.push(CountProbe {
            replicas: n,
            stats,
            ok,
        });
        Ok(ok)
    };
    // bracket: `lo` replicas fail (0: none tried below `hi`), `hi` meet the bound
    let (mut lo, mut hi) = (0, 1);
    while !try_count(hi, &mut probes)? {
        if hi == Replicas::MAX {
            let best = probes
                .iter()
                .min_by(|a, b| {
                    how.bound
                        .value(&a.stats)
                        .total_cmp(&how.bound.value(&b.stats))
                })
                .map_or(String::new(), |p| {
                    format!(
                        "; the closest was {} replicas at {:.3}{}",
                        p.replicas,
                        how.bound.value(&p.stats),
                        match how.bound {
                            crate::run::capacity::Bound::P99Ms(_) => " ms p99",
                            crate::run::capacity::Bound::Violations(_) => " of requests late",
                            crate::run::capacity::Bound::TtftP99Ms(_) => " ms p99 to first token",
                            crate::run::capacity::Bound::TpotP99Ms(_) => " ms p99 per output token",
                            crate::run::capacity::Bound::TokenSlo { .. } =>
                                " of the tighter token bound",
                        }
                    )
                });
            return Ok(Need {
                policy: policy.to_string(),
                replicas: None,
                note: Some(format!(
                    "no count up to {} replicas (the most a run may have) meets the bound{best} (a policy that waits to fill a batch waits longer as each replica's share of the traffic thins)",
                    Replicas::MAX
                )),
                at: Stats::default(),
                probes,
            });
        }
        lo = hi;
        hi = (hi * 2).min(Replicas::MAX);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if try_count(mid, &mut probes)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let at = probes
        .iter()
        .rev()
        .find(|p| p.replicas == hi)
        .map(|p| p.stats.clone())
        .unwrap_or_default();
    Ok(Need {
        policy: policy.to_string(),
        replicas: Some(hi),
        note: None,
        at,
        probes,
    })
}

/// Every policy of `templates` (their rate set to `target_rps`, their replicas to each count
/// tried, behind their router; seeds 1..=`how.seeds`) searched on `bench`, a model device: the
/// policies in parallel, each probe's seeds too. Progress counts finished policies.
pub fn need_all(
    bench: &Testbed,
    templates: &[RunSpec],
    target_rps: f64,
    how: &Search,
    progress: Mode,
) -> Result<Vec<Need>> {
    let shown = progress.start("replicas", templates.len() as u64, "policies");
    let out = templates
        .par_iter()
        .map(|t| {
            let need = search_count(&t.policy.text, how, |n| {
                let replicas = Replicas::new(n, t.replicas.router())?;
                let runs = (1..=how.seeds)
                    .into_par_iter()
                    .map(|seed| {
                        let spec = RunSpec {
                            rate: target_rps,
                            seed,
                            replicas,
                            ..t.clone()
                        };
                        run_one(bench, &spec, Keep::default())
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(mean_stats(
                    &runs.iter().map(|r| &r.stats).collect::<Vec<_>>(),
                ))
            });
            shown.inc(1);
            need
        })
        .collect::<Result<Vec<_>>>();
    shown.finish();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::LatencyMs;
    use crate::run::capacity::Bound;

    /// A probe whose p99 is `work / n` ms with `n` replicas.
    fn spread(work: f64) -> impl FnMut(usize) -> Result<Stats> {
        move |n| {
            Ok(Stats {
                latency_ms: LatencyMs {
                    p99: work / n as f64,
                    ..LatencyMs::default()
                },
                ..Stats::default()
            })
        }
    }

    fn how(p99: f64) -> Search {
        Search {
            bound: Bound::P99Ms(p99),
            precision: 0.02,
            seeds: 1,
            lowest_share: crate::run::capacity::lowest_share(true),
        }
    }

    #[test]
    fn the_search_finds_the_fewest_replicas_exactly() {
        // p99 = 100/n ms under a 10 ms bound: 10 replicas meet it (10 ms), 9 do not (11.1 ms)
        let need = search_count("lazy", &how(10.0), spread(100.0)).unwrap();
        assert_eq!(need.replicas, Some(10));
        assert_eq!(need.at.latency_ms.p99, 10.0);
        let tried: Vec<usize> = need.probes.iter().map(|p| p.replicas).collect();
        // doubling to the bracket (8 fails, 16 meets), then bisecting it: 12, 10, 9
        assert_eq!(tried, vec![1, 2, 4, 8, 16, 12, 10, 9]);
        // a bound one replica meets needs one, in one probe
        let one = search_count("lazy", &how(200.0), spread(100.0)).unwrap();
        assert_eq!((one.replicas, one.probes.len()), (Some(1), 1));
        // exactly at a power of two: 4 meet 25 ms, 3 do not
        let four = search_count("lazy", &how(25.0), spread(100.0)).unwrap();
        assert_eq!(four.replicas, Some(4));
    }

    #[test]
    fn a_bound_no_count_meets_ends_with_a_note_and_rejections_fail() {
        let never = search_count("serial", &how(1e-9), spread(100.0)).unwrap();
        assert_eq!(never.replicas, None);
        // the note names the closest count: the most replicas, at 100/1024 ms
        let note = never.note.unwrap();
        assert!(
            note.contains("no count up to 1024 replicas")
                && note.contains("the closest was 1024 replicas at 0.098 ms p99"),
            "{note}"
        );
        assert_eq!(never.probes.last().unwrap().replicas, Replicas::MAX);
        // a probe that rejects a request fails however fast it was
        let rejecting = |n: usize| {
            Ok(Stats {
                rejected: u64::from(n < 3),
                ..Stats::default()
            })
        };
        let need = search_count("lazy", &how(10.0), rejecting).unwrap();
        assert_eq!(need.replicas, Some(3));
    }
}
