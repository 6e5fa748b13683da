//! `reproduce --shard I/N` and its merge: a shard runs every `N`th of the sweep's runs (a run
//! is one job: a model, policy, rate, seed, SLA, … on one NPU configuration; the jobs in their
//! sorted order, so every shard numbers them alike) and writes each run's result into the
//! shard's `shard.json`; `lazybatch merge` checks the shards are one sweep's, each once, and
//! writes every experiment's files from the runs exactly as one `reproduce` does. A run's
//! result is kept whole — its statistics and every latency (as integer nanoseconds, from which
//! the milliseconds come back bit for bit) — because the experiments read CDFs and SLA sweeps
//! from them. The capacity experiment searches while it writes (each probe's rate depends on
//! the ones before), so its searches run at the merge.

use super::{run_sweep, write_all, Job, Options, Results, RunOut, Sweep};
use crate::device::npu::NpuConfig;
use crate::error::{Error, Result};
use crate::metrics::Stats;
use crate::run::shard::{Shard, ShardFile};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// What a `reproduce` shard holds besides what every shard file says: the options that fix
/// the sweep (so that the merge rebuilds it) and its runs' results.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct ReproduceShard {
    /// `--quick`.
    pub quick: bool,
    /// `--seeds`.
    pub seeds: Option<u32>,
    /// `--figures`.
    pub figures: Option<Vec<String>>,
    /// The NPU configurations, by name.
    pub npus: Vec<(String, NpuConfig)>,
    /// This shard's runs, by ascending row.
    pub runs: Vec<JobOut>,
}

/// One run's result.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) struct JobOut {
    /// Its place among the sweep's jobs.
    pub row: usize,
    /// Its statistics.
    pub stats: Stats,
    /// Its completed requests' latencies in ns, ascending, each as its step from the one
    /// before (the first from zero), comma-separated (one line of the file, not one a number).
    pub latency_ns_steps: String,
    /// Co-located models' statistics.
    pub parts: Vec<Stats>,
    /// SLA classes' statistics.
    pub classes: Vec<Stats>,
    /// SLA classes' latency quantiles.
    pub class_cdf: Vec<Vec<f64>>,
}

impl JobOut {
    /// Run `row`'s result; fails if a latency would not come back bit for bit.
    fn new(row: usize, out: &RunOut) -> Result<JobOut> {
        let mut steps = String::with_capacity(8 * out.lat_ms.len());
        let mut last = 0u64;
        for &ms in &out.lat_ms {
            let ns = (ms * 1e6).round() as u64;
            if ns < last || crate::time::Nanos(ns).as_ms() != ms {
                return Err(Error::Internal(format!(
                    "run {row}'s latency {ms} ms does not round-trip through nanoseconds"
                )));
            }
            if !steps.is_empty() {
                steps.push(',');
            }
            steps.push_str(&(ns - last).to_string());
            last = ns;
        }
        Ok(JobOut {
            row,
            stats: out.stats.clone(),
            latency_ns_steps: steps,
            parts: out.parts.clone(),
            classes: out.classes.clone(),
            class_cdf: out.class_cdf.clone(),
        })
    }

    /// The run's result again; fails on a latency that is not a number.
    fn run_out(&self) -> Result<RunOut> {
        let mut ns = 0u64;
        let lat_ms = self
            .latency_ns_steps
            .split(',')
            .filter(|d| !d.is_empty())
            .map(|d| {
                let step: u64 = d.parse().map_err(|_| {
                    Error::invalid(
                        "shards",
                        format!(
                            "run {}'s latency step '{d}' is not a whole number",
                            self.row
                        ),
                    )
                })?;
                ns = ns.saturating_add(step);
                Ok(crate::time::Nanos(ns).as_ms())
            })
            .collect::<Result<Vec<f64>>>()?;
        Ok(RunOut {
            stats: self.stats.clone(),
            lat_ms,
            parts: self.parts.clone(),
            histogram: None,
            classes: self.classes.clone(),
            class_cdf: self.class_cdf.clone(),
        })
    }
}

/// The first line of a shard's report: the sweep in words.
fn header(opts: &Options, sweep: &Sweep) -> String {
    let npus: Vec<&str> = opts.npus.iter().map(|(n, _)| n.as_str()).collect();
    format!(
        "reproduce{}: {} runs on NPU configuration(s) {}, {} seed(s)",
        if opts.quick { " --quick" } else { "" },
        sweep.jobs.len(),
        npus.join(", "),
        sweep.plan.seeds
    )
}

/// Runs shard `shard` of the sweep `opts` asks for and writes its `shard.json` into
/// `opts.out`; its path and how many runs it ran.
pub fn reproduce_shard(opts: &Options, shard: Shard) -> Result<(PathBuf, usize)> {
    let t0 = std::time::Instant::now();
    let sweep = Sweep::new(opts)?;
    let mine: BTreeSet<Job> = sweep
        .jobs
        .iter()
        .enumerate()
        .filter(|(row, _)| shard.owns(*row))
        .map(|(_, j)| j.clone())
        .collect();
    let (results, _) = run_sweep(opts, &sweep, &mine)?;
    let mut runs = Vec::with_capacity(mine.len());
    for (row, job) in sweep.jobs.iter().enumerate() {
        if let Some(out) = results.get(job) {
            runs.push(JobOut::new(row, out)?);
        }
    }
    let payload = ReproduceShard {
        quick: opts.quick,
        seeds: opts.seeds,
        figures: opts.figures.clone(),
        npus: opts.npus.clone(),
        runs,
    };
    let count = payload.runs.len();
    let file = ShardFile {
        sweep: sweep.fingerprint(opts),
        shard: shard.index,
        of: shard.count,
        rows: sweep.jobs.len(),
        runs: sweep.jobs.len(),
        header: header(opts, &sweep),
        model: String::new(),
        title: String::new(),
        wall_s: t0.elapsed().as_secs_f64(),
        entries: Vec::new(),
        capacities: Vec::new(),
        search: None,
        reproduce: Some(
            serde_json::to_value(&payload).map_err(|e| Error::Internal(e.to_string()))?,
        ),
    };
    Ok((file.save(&opts.out)?, count))
}

/// Writes into `out` what one `reproduce` writes, from the runs of `shards` (each with the
/// directory it came from; already checked to be one sweep's shards, each once); the files
/// written, relative to `out`.
pub fn merge(shards: &[(PathBuf, ShardFile)], out: &Path) -> Result<Vec<String>> {
    let mut payloads = Vec::with_capacity(shards.len());
    for (dir, f) in shards {
        let value = f.reproduce.clone().ok_or_else(|| {
            Error::invalid(
                "shards",
                format!("{} is not a `reproduce --shard`'s", dir.display()),
            )
        })?;
        let p: ReproduceShard = serde_json::from_value(value).map_err(|e| Error::ConfigFile {
            file: dir.join(ShardFile::NAME),
            line: 0,
            msg: format!("its reproduce runs: {e}"),
        })?;
        payloads.push((dir, p));
    }
    let first = &payloads[0].1;
    let opts = Options {
        out: out.to_path_buf(),
        quick: first.quick,
        seeds: first.seeds,
        figures: first.figures.clone(),
        progress: crate::progress::Mode::Off,
        npus: first.npus.clone(),
    };
    let sweep = Sweep::new(&opts)?;
    let (first_dir, file) = (&shards[0].0, &shards[0].1);
    if sweep.fingerprint(&opts) != file.sweep || sweep.jobs.len() != file.rows {
        return Err(Error::invalid(
            "shards",
            format!(
                "{} holds a sweep of {} runs (fingerprint {}) that this lazybatch {} plans as {} runs (fingerprint {}): merge with the version that ran the shards",
                first_dir.display(),
                file.rows,
                file.sweep,
                env!("CARGO_PKG_VERSION"),
                sweep.jobs.len(),
                sweep.fingerprint(&opts)
            ),
        ));
    }
    let jobs: Vec<&Job> = sweep.jobs.iter().collect();
    let mut results: Results = HashMap::with_capacity(jobs.len());
    for (dir, p) in &payloads {
        for r in &p.runs {
            let job = jobs.get(r.row).ok_or_else(|| {
                Error::invalid(
                    "shards",
                    format!(
                        "{} holds run {} of a sweep of {}",
                        dir.display(),
                        r.row,
                        jobs.len()
                    ),
                )
            })?;
            let run = r
                .run_out()
                .map_err(|e| Error::invalid("shards", format!("{}: {e}", dir.display())))?;
            if results.insert((*job).clone(), run).is_some() {
                return Err(Error::invalid(
                    "shards",
                    format!(
                        "run {} is in two shards ({} among them)",
                        r.row,
                        dir.display()
                    ),
                ));
            }
        }
    }
    if results.len() != jobs.len() {
        let missing: Vec<usize> = (0..jobs.len())
            .filter(|&k| !results.contains_key(jobs[k]))
            .take(10)
            .collect();
        return Err(Error::invalid(
            "shards",
            format!(
                "{} of the sweep's {} runs are missing (the first: {missing:?}): a shard file was edited or cut short",
                jobs.len() - results.len(),
                jobs.len()
            ),
        ));
    }
    write_all(&opts, &sweep, &results, &HashMap::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_latencies_come_back_bit_for_bit() {
        let lat_ms: Vec<f64> = [1u64, 754_321, 754_321, 99_999_999_999, 3_600_000_000_123]
            .iter()
            .map(|&ns| crate::time::Nanos(ns).as_ms())
            .collect();
        let out = RunOut {
            stats: Stats::default(),
            lat_ms: lat_ms.clone(),
            parts: Vec::new(),
            histogram: None,
            classes: Vec::new(),
            class_cdf: vec![vec![0.1, 2.5]],
        };
        let back = JobOut::new(7, &out).unwrap().run_out().unwrap();
        assert_eq!(back.lat_ms, lat_ms);
        assert_eq!(back.class_cdf, out.class_cdf);
        // a latency that is not a whole number of nanoseconds is refused, not rounded
        let odd = RunOut {
            lat_ms: vec![0.123_456_789_1],
            ..out
        };
        assert!(JobOut::new(1, &odd).is_err());
        // nothing completed: no latencies, and none invented
        let none = RunOut {
            lat_ms: Vec::new(),
            ..odd
        };
        assert!(JobOut::new(2, &none)
            .unwrap()
            .run_out()
            .unwrap()
            .lat_ms
            .is_empty());
    }
}
