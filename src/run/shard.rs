//! A sweep split across machines: shard `I` of `N` runs every `N`th row of a grid (a row is one
//! policy at one rate with all its seeds for `compare`, so each row's averages come from one
//! place; one policy's whole search for `capacity`), and
//! writes what it ran to a [`ShardFile`]; `lazybatch merge` checks that the files are the
//! shards of one sweep, each once, and assembles exactly what the unsharded run writes. Which
//! shard a process is comes from its flag, or from the job array that started it: Slurm's
//! `SLURM_ARRAY_TASK_ID` (less `SLURM_ARRAY_TASK_MIN`, over `SLURM_ARRAY_TASK_STEP`) of
//! `SLURM_ARRAY_TASK_COUNT`, or a
//! Kubernetes Indexed Job's `JOB_COMPLETION_INDEX`. A schedule of its own is not written here:
//! the cluster's is used.

use crate::error::{Error, Result};
use crate::metrics::Stats;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One shard of a sweep: rows `index`, `index + count`, `index + 2 count`, …
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, from 0.
    pub index: u32,
    /// How many.
    pub count: u32,
}

/// The most shards a sweep may be split into.
pub const MAX_SHARDS: u32 = 100_000;

impl Shard {
    /// The shard `text` names, read from `flag`: `I/N` (0 ≤ I < N), `slurm` (the job array's
    /// task id and count) or `k8s/N` (an Indexed Job's completion index, of N); `var` reads
    /// the environment.
    pub fn parse(flag: &str, text: &str, var: impl Fn(&str) -> Option<String>) -> Result<Shard> {
        let bad = |msg: String| Error::invalid(flag, msg);
        let number = |what: &str, s: &str| -> Result<u32> {
            s.trim().parse::<u32>().map_err(|_| {
                bad(format!(
                    "{what} '{s}' is not a whole number (give I/N, slurm or k8s/N)"
                ))
            })
        };
        let env = |name: &str| -> Result<u32> {
            let v = var(name).ok_or_else(|| bad(format!("{name} is not set")))?;
            number(name, &v)
        };
        let (index, count) = match text.split_once('/') {
            _ if text == "slurm" => {
                let min = match var("SLURM_ARRAY_TASK_MIN") {
                    Some(_) => env("SLURM_ARRAY_TASK_MIN")?,
                    None => 0,
                };
                let step = match var("SLURM_ARRAY_TASK_STEP") {
                    Some(_) => env("SLURM_ARRAY_TASK_STEP")?.max(1),
                    None => 1,
                };
                let id = env("SLURM_ARRAY_TASK_ID")?;
                let index = id.checked_sub(min).ok_or_else(|| {
                    bad(format!(
                        "SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}"
                    ))
                })?;
                (index / step, env("SLURM_ARRAY_TASK_COUNT")?)
            }
            Some(("k8s", n)) => (env("JOB_COMPLETION_INDEX")?, number("N", n)?),
            Some((i, n)) => (number("I", i)?, number("N", n)?),
            None => {
                return Err(bad(format!(
                    "'{text}': give I/N (shard I of N, from 0), slurm or k8s/N"
                )))
            }
        };
        if count == 0 || count > MAX_SHARDS {
            return Err(bad(format!(
                "{count} shards: the count must be in [1, {MAX_SHARDS}]"
            )));
        }
        if index >= count {
            return Err(bad(format!(
                "shard {index} of {count}: the index must be in [0, {}]",
                count - 1
            )));
        }
        Ok(Shard { index, count })
    }

    /// The shard `--shard` names (`text`; None without the flag), the environment read for
    /// `slurm` and `k8s/N`; refused without `--out` (`out`), where its file goes.
    pub fn from_flag(text: Option<&str>, out: Option<&Path>) -> Result<Option<Shard>> {
        let Some(t) = text else {
            return Ok(None);
        };
        if out.is_none() {
            return Err(Error::invalid(
                "--shard",
                "a shard writes its rows to --out DIR/shard.json: give --out",
            ));
        }
        Shard::parse("--shard", t, |k| std::env::var(k).ok()).map(Some)
    }

    /// True when row `row` of the sweep is this shard's.
    pub fn owns(&self, row: usize) -> bool {
        row % self.count as usize == self.index as usize
    }
}

/// What one shard ran, as `merge` reads it (`DIR/shard.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShardFile {
    /// The sweep's fingerprint: every run's settings and the bench they ran on
    /// ([`fingerprint`]); shards of different sweeps do not merge.
    pub sweep: String,
    /// Which shard this is, from 0.
    pub shard: u32,
    /// Of how many.
    pub of: u32,
    /// The rows of the whole sweep.
    pub rows: usize,
    /// The runs of the whole sweep.
    pub runs: usize,
    /// The command's first line of output (the bench and the settings).
    pub header: String,
    /// The model's name (the `.hgrm` files are named for it).
    pub model: String,
    /// The pictures' title.
    pub title: String,
    /// This shard's wall time, in seconds.
    pub wall_s: f64,
    /// This shard's rows, by ascending row: `compare`'s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<ShardRow>,
    /// This shard's rows, by ascending row: `capacity`'s (a row is one policy's search).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacities: Vec<CapacityRow>,
    /// `capacity`'s search, as its report needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<CapacitySearch>,
    /// `reproduce`'s options and runs ([`crate::report::shard::ReproduceShard`], as JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reproduce: Option<serde_json::Value>,
}

/// What a `capacity` sweep's report needs beyond its rows.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CapacitySearch {
    /// The bound, and in words.
    pub bound: crate::run::capacity::Bound,
    /// The bound in words, as the command prints it.
    pub bound_words: String,
    /// The serial capacity (req/s).
    pub serial: f64,
}

/// One policy's capacity search a shard ran.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CapacityRow {
    /// Its place in the sweep.
    pub row: usize,
    /// The search's result and every probe.
    pub capacity: crate::run::capacity::Capacity,
    /// The row as the command's JSON reports it.
    pub json: serde_json::Value,
}

impl ShardFile {
    /// The file a shard writes into its `--out` directory.
    pub const NAME: &'static str = "shard.json";

    /// Writes the file into `dir` (made if missing); its path.
    pub fn save(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let path = dir.join(Self::NAME);
        let text =
            serde_json::to_string_pretty(self).map_err(|e| Error::Internal(e.to_string()))?;
        std::fs::write(&path, text + "\n").map_err(|e| Error::io(&path, e))?;
        Ok(path)
    }

    /// Reads the file a shard wrote into `dir`: a regular file of at most
    /// [`crate::files::SHARD`]'s size, whose model name is one a model file may have
    /// ([`crate::files::check_name`]: it starts the merged files' names) and whose wall time
    /// is a finite count of seconds; its header and title are made printable
    /// ([`crate::files::printable`]: a title cannot hold a terminal's escape sequence).
    pub fn load(dir: &Path) -> Result<ShardFile> {
        let path = dir.join(Self::NAME);
        let text = crate::files::read_text(&path, crate::files::SHARD)?;
        let mut f: ShardFile = serde_json::from_str(&text).map_err(|e| Error::ConfigFile {
            file: path.clone(),
            line: e.line(),
            msg: e.to_string(),
        })?;
        let bad = |field: &str, msg: String| Error::ConfigFile {
            file: path.clone(),
            line: 0,
            msg: format!("{field}: {msg} (the file was edited)"),
        };
        // a reproduce sweep names no one model
        if !f.model.is_empty() {
            crate::files::check_name(&f.model).map_err(|m| bad("model", m))?;
        }
        if !(f.wall_s.is_finite() && (0.0..=1e9).contains(&f.wall_s)) {
            return Err(bad(
                "wall_s",
                format!("must be in [0, 1e9] s, got {}", f.wall_s),
            ));
        }
        if f.rows == 0 || f.runs < f.rows {
            return Err(bad(
                "runs",
                format!(
                    "a sweep runs each of its rows at least once: {} runs of {} rows",
                    f.runs, f.rows
                ),
            ));
        }
        for (k, e) in f.entries.iter().enumerate() {
            e.agrees()
                .map_err(|m| bad(&format!("entries[{k}] (row {})", e.row), m))?;
        }
        f.header = crate::files::printable(&f.header);
        f.title = crate::files::printable(&f.title);
        Ok(f)
    }
}

impl ShardRow {
    /// Whether the row's figures agree with each other: its JSON's policy, rate and counts
    /// are its own, and it completed and refused no more requests than it offered. A row
    /// edited in one place and not the other is refused, saying where.
    fn agrees(&self) -> std::result::Result<(), String> {
        let j = &self.json;
        if j["policy"].as_str() != Some(self.policy.as_str()) {
            return Err(format!(
                "json.policy {} where policy is '{}'",
                j["policy"], self.policy
            ));
        }
        if j["rate_rps"].as_f64() != Some(self.rate) {
            return Err(format!(
                "json.rate_rps {} where rate is {}",
                j["rate_rps"], self.rate
            ));
        }
        let s = &self.stats;
        for (field, own) in [
            ("requests", s.requests),
            ("completed", s.completed),
            ("rejected", s.rejected),
        ] {
            if j[field].as_u64() != Some(own) {
                return Err(format!(
                    "json.{field} {} where stats.{field} is {own}",
                    j[field]
                ));
            }
        }
        if s.completed
            .checked_add(s.rejected)
            .is_none_or(|n| n > s.requests)
        {
            return Err(format!(
                "stats: {} completed and {} rejected of {} requests",
                s.completed, s.rejected, s.requests
            ));
        }
        Ok(())
    }
}

/// One row a shard ran.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShardRow {
    /// Its place in the sweep.
    pub row: usize,
    /// The policy, as given.
    pub policy: String,
    /// The arrival rate, requests/s.
    pub rate: f64,
    /// The means over its seeds.
    pub stats: Stats,
    /// The row as the command's JSON reports it.
    pub json: serde_json::Value,
    /// Co-located models: each model's mean latency, p99, throughput and violation rate.
    pub per_model: Vec<(String, [f64; 4])>,
    /// Its first seed's latency histogram, as (value, count) per recorded bucket.
    pub histogram: Option<Vec<(u64, u64)>>,
}

/// A sweep's fingerprint: FNV-1a (64 bits) of every run's settings (`runs`, their Debug
/// text), what else the command read (`more`), and the bench's latency table (which holds the
/// device, its NPU configuration or measured table, and the model's shapes), in hex.
pub fn sweep(runs: &str, more: &str, table: &crate::profile::Profile) -> String {
    let table = serde_json::to_string(table).unwrap_or_default();
    fingerprint(&format!("{runs}\n{more}\n{table}"))
}

/// FNV-1a (64 bits) of `text`, in hex.
pub fn fingerprint(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `h`'s recorded buckets, each as the highest value it holds and its count.
pub fn buckets(h: &Histogram<u64>) -> Vec<(u64, u64)> {
    h.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// The histogram of `buckets` at the bounds every latency histogram has
/// ([`crate::metrics`]): the same buckets, so the same percentiles, mean and maximum.
pub fn histogram(buckets: &[(u64, u64)]) -> Result<Histogram<u64>> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
        .map_err(|e| Error::Internal(format!("histogram: {e}")))?;
    for &(v, n) in buckets {
        h.record_n(v, n)
            .map_err(|e| Error::Internal(format!("histogram value {v}: {e}")))?;
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn shards_parse_from_the_flag_slurm_and_kubernetes_and_say_what_is_wrong() {
        let none = env(&[]);
        let s = |t: &str| Shard::parse("--shard", t, &none);
        assert_eq!(s("2/5").unwrap(), Shard { index: 2, count: 5 });
        assert_eq!(s("0/1").unwrap(), Shard { index: 0, count: 1 });
        for (t, says) in [
            ("5/5", "the index must be in [0, 4]"),
            ("0/0", "the count must be in [1, 100000]"),
            ("a/2", "I 'a' is not a whole number"),
            ("-1/2", "I '-1' is not a whole number"),
            ("3", "'3': give I/N"),
            ("slurm", "SLURM_ARRAY_TASK_ID is not set"),
            ("k8s/4", "JOB_COMPLETION_INDEX is not set"),
        ] {
            let e = s(t).unwrap_err().to_string();
            assert!(e.contains("--shard") && e.contains(says), "{t}: {e}");
        }
        // Slurm numbers its tasks from the array's first index
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "7"),
            ("SLURM_ARRAY_TASK_MIN", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        let got = Shard::parse("--shard", "slurm", &slurm).unwrap();
        assert_eq!(got, Shard { index: 2, count: 4 });
        // a stepped array (--array=0-14:5): tasks 0, 5, 10 are shards 0, 1, 2 of 3
        let stepped = env(&[
            ("SLURM_ARRAY_TASK_ID", "10"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ]);
        let got = Shard::parse("--shard", "slurm", &stepped).unwrap();
        assert_eq!(got, Shard { index: 2, count: 3 });
        let k8s = env(&[("JOB_COMPLETION_INDEX", "3")]);
        let got = Shard::parse("--shard", "k8s/4", &k8s).unwrap();
        assert_eq!(got, Shard { index: 3, count: 4 });
        let e = Shard::parse("--shard", "k8s/3", &k8s)
            .unwrap_err()
            .to_string();
        assert!(e.contains("shard 3 of 3"), "{e}");
    }

    #[test]
    fn every_row_belongs_to_exactly_one_shard() {
        for count in 1..6u32 {
            for row in 0..40 {
                let owners = (0..count)
                    .filter(|&index| Shard { index, count }.owns(row))
                    .count();
                assert_eq!(owners, 1, "row {row} of {count} shards");
            }
        }
    }

    #[test]
    fn a_histogram_round_trips_through_its_buckets() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for v in [1, 999, 1_000, 1_001, 123_456, 9_999_999, 3_000_000_000] {
            h.record_n(v, v % 7 + 1).unwrap();
        }
        let back = histogram(&buckets(&h)).unwrap();
        assert_eq!(back.len(), h.len());
        assert_eq!(
            (back.max(), back.min(), back.mean()),
            (h.max(), h.min(), h.mean())
        );
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(back.value_at_quantile(q), h.value_at_quantile(q), "{q}");
        }
        assert_ne!(fingerprint("a sweep"), fingerprint("a sweep "));
    }
}
