//! `lazybatch merge DIR… --out DIR`: the shards of one `compare --shard I/N`, `capacity
//! --shard I/N` or `reproduce --shard I/N` sweep assembled into exactly what the unsharded
//! command writes (`compare.json`, the `.hgrm` files and pictures; `capacity.json` and its
//! picture; every experiment's files and `report.md`) and prints. Shards of another sweep, a shard missing or given twice, and rows
//! that do not add up are refused, naming the directories.

use super::capacity::Report;
use super::compare::{table, write_out, Row};
use super::emit;
use anyhow::{bail, Context, Result};
use clap::Args;
use lazybatch::run::shard::{histogram, CapacitySearch, ShardFile};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub(super) struct MergeArgs {
    /// The shards' --out directories (each holds a shard.json).
    #[arg(required = true, value_name = "DIR")]
    shards: Vec<PathBuf>,
    /// Directory for what the unsharded command writes there.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Print the JSON array instead of the table.
    #[arg(long)]
    json: bool,
}

/// Reads, checks and assembles the shards.
pub(super) fn run(a: MergeArgs) -> Result<()> {
    let mut files: Vec<(PathBuf, ShardFile)> = Vec::new();
    for dir in &a.shards {
        let f = ShardFile::load(dir).with_context(|| {
            format!(
                "{} is not the --out of a `compare --shard`, `capacity --shard` or `reproduce --shard`",
                dir.display()
            )
        })?;
        files.push((dir.clone(), f));
    }
    let (first_dir, first) = (&files[0].0, &files[0].1);
    for (dir, f) in &files[1..] {
        if f.sweep != first.sweep
            || f.of != first.of
            || f.rows != first.rows
            || f.runs != first.runs
            || f.header != first.header
            || f.model != first.model
            || f.title != first.title
        {
            let command = |f: &ShardFile| match (&f.search, &f.reproduce) {
                (Some(_), _) => "capacity",
                (None, Some(_)) => "reproduce",
                (None, None) => "compare",
            };
            bail!(
                "{} is a shard of another sweep than {}: {} of {} shards, \"{}\", against {} of {} shards, \"{}\" (sweeps {} and {}: a setting, the model, the device or its latency table differs); merge the shards of one command",
                dir.display(),
                first_dir.display(),
                command(f),
                f.of,
                f.header,
                command(first),
                first.of,
                first.header,
                f.sweep,
                first.sweep
            );
        }
    }
    let mut by_shard: Vec<Vec<&PathBuf>> = vec![Vec::new(); first.of as usize];
    for (dir, f) in &files {
        let Some(slot) = by_shard.get_mut(f.shard as usize) else {
            bail!("{}: shard {} of {}", dir.display(), f.shard, f.of);
        };
        slot.push(dir);
    }
    let twice: Vec<String> = by_shard
        .iter()
        .enumerate()
        .filter(|(_, d)| d.len() > 1)
        .map(|(i, d)| {
            let dirs: Vec<String> = d.iter().map(|p| p.display().to_string()).collect();
            format!("shard {i} in {}", dirs.join(" and "))
        })
        .collect();
    if !twice.is_empty() {
        bail!("a shard given twice: {}", twice.join("; "));
    }
    let missing: Vec<String> = by_shard
        .iter()
        .enumerate()
        .filter(|(_, d)| d.is_empty())
        .map(|(i, _)| i.to_string())
        .collect();
    if !missing.is_empty() {
        bail!(
            "shard(s) {} of {} missing (given: {})",
            missing.join(", "),
            first.of,
            a.shards
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(search) = &first.search {
        return capacities(&a, &files, search);
    }
    if first.reproduce.is_some() {
        if a.json {
            bail!("--json applies to merging `compare` and `capacity` shards: `reproduce` writes files");
        }
        let t0 = std::time::Instant::now();
        let written = lazybatch::report::shard::merge(&files, &a.out)?;
        let wall: f64 = files.iter().map(|(_, f)| f.wall_s).sum();
        return emit(&format!(
            "{}\n({} runs in {wall:.1} s wall over {} shards; {} files written in {:.1} s into {}; start with {})\n",
            first.header,
            first.runs,
            first.of,
            written.len(),
            t0.elapsed().as_secs_f64(),
            a.out.display(),
            a.out.join("report.md").display()
        ));
    }
    let mut entries: Vec<_> = files
        .iter()
        .flat_map(|(dir, f)| f.entries.iter().map(move |e| (dir, e)))
        .collect();
    entries.sort_by_key(|(_, e)| e.row);
    every_row_once(entries.iter().map(|(_, e)| e.row), first.rows)?;
    let rows: Vec<Row> = entries
        .into_iter()
        .map(|(dir, e)| {
            Ok(Row {
                policy: e.policy.clone(),
                rate: e.rate,
                stats: e.stats.clone(),
                json: e.json.clone(),
                per_model: e.per_model.clone(),
                histogram: match &e.histogram {
                    Some(b) => Some(histogram(b).with_context(|| {
                        format!("{}: row {}'s histogram", dir.display(), e.row)
                    })?),
                    None => None,
                },
                run_to_run: None,
            })
        })
        .collect::<Result<_>>()?;
    write_out(&a.out, &first.model, &first.title, &rows)?;
    if a.json {
        let arr: Vec<&serde_json::Value> = rows.iter().map(|r| &r.json).collect();
        return emit(&(serde_json::to_string_pretty(&arr)? + "\n"));
    }
    let mut o = String::new();
    out!(o, "{}", first.header);
    table(&mut o, &rows);
    let wall: f64 = files.iter().map(|(_, f)| f.wall_s).sum();
    out!(
        o,
        "({} runs in {:.2} s wall over {} shards; merged into {})",
        first.runs,
        wall,
        first.of,
        a.out.display()
    );
    emit(&o)
}

/// A `capacity` sweep's shards, checked as one sweep each once: its report.
fn capacities(
    a: &MergeArgs,
    files: &[(PathBuf, ShardFile)],
    search: &CapacitySearch,
) -> Result<()> {
    let first = &files[0].1;
    let mut rows: Vec<_> = files
        .iter()
        .flat_map(|(_, f)| f.capacities.iter())
        .collect();
    rows.sort_by_key(|r| r.row);
    every_row_once(rows.iter().map(|r| r.row), first.rows)?;
    let rows: Vec<_> = rows
        .into_iter()
        .map(|r| (r.capacity.clone(), r.json.clone()))
        .collect();
    let report = Report {
        header: &first.header,
        title: &first.title,
        bound: search.bound,
        bound_words: &search.bound_words,
        serial: search.serial,
        wall: files.iter().map(|(_, f)| f.wall_s).sum(),
    };
    report.write(Some(&a.out), &rows, a.json)
}

/// Refuses rows (in ascending order) that are not each of the sweep's `total` rows once.
fn every_row_once(seen: impl Iterator<Item = usize>, total: usize) -> Result<()> {
    let seen: Vec<usize> = seen.collect();
    if !seen.iter().copied().eq(0..total) {
        bail!(
            "the shards hold rows {seen:?}, the sweep has rows 0..{total}: a shard file was edited or cut short"
        );
    }
    Ok(())
}
