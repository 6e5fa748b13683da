//! A sweep split into shards (`compare --shard I/N`) and merged (`lazybatch merge`) is the
//! unsharded sweep: every file the same byte for byte (the wall time aside), the same table;
//! shards of another sweep, a shard missing or given twice are refused, naming them.

use crate::cli::{fails_with as refused, lazybatch};
use crate::fresh_dir;
use std::path::Path;

fn ok(args: &[&str]) -> String {
    let o = lazybatch(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// A command's printed lines, its wall-time line left out.
fn table(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.contains("wall"))
        .map(str::to_string)
        .collect()
}

/// The run count a command's footer says (`(N runs in …`), from its wall-time line.
fn runs_said(text: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.contains("wall") && l.starts_with('('))
        .unwrap_or_else(|| panic!("no footer: {text}"));
    line.trim_start_matches('(')
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no run count: {line}"))
}

/// A file's text with its wall-time lines left out.
fn without_wall(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("wall"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_sharded_sweep_merges_into_the_unsharded_one() {
    let d = fresh_dir("shard");
    let at = |n: &str| d.join(n).to_string_lossy().to_string();
    let sweep = [
        "compare",
        "--device",
        "npu",
        "--model",
        "gnmt",
        "--rates",
        "100,400,800",
        "--policies",
        "serial,graph:5,lazy,oracle",
        "--seeds",
        "2",
        "--requests",
        "300",
        "--progress",
        "off",
    ];
    fn with<'a>(sweep: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [sweep, extra].concat()
    }
    let full = ok(&with(&sweep, &["--out", &at("full")]));
    // 12 rows in 5 shards: some shards run two rows, some three; merged in any order
    for i in 0..5 {
        ok(&with(
            &sweep,
            &["--shard", &format!("{i}/5"), "--out", &at(&format!("s{i}"))],
        ));
    }
    let shards: Vec<String> = [3, 0, 4, 1, 2]
        .iter()
        .map(|i| at(&format!("s{i}")))
        .collect();
    let shard_args: Vec<&str> = shards.iter().map(String::as_str).collect();
    let merged = ok(&[&["merge"][..], &shard_args, &["--out", &at("merged")]].concat());
    assert_eq!(table(&full), table(&merged));
    assert_eq!(table(&full).len(), 2 + 12, "{full}");
    // the footer: the merged sweep ran as many runs as the unsharded one (not each shard's
    // count of the whole sweep, added up)
    assert_eq!(runs_said(&merged), runs_said(&full), "{merged}");
    let mut names: Vec<String> = std::fs::read_dir(d.join("full"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert!(
        names.iter().filter(|n| n.ends_with(".hgrm")).count() == 12,
        "{names:?}"
    );
    for n in &names {
        let (a, b) = (d.join("full").join(n), d.join("merged").join(n));
        assert!(b.exists(), "merge did not write {n}");
        if n == "compare.json" {
            assert_eq!(without_wall(&a), without_wall(&b), "{n}");
        } else {
            assert_eq!(
                std::fs::read(&a).unwrap(),
                std::fs::read(&b).unwrap(),
                "{n}"
            );
        }
    }
    // --json prints the rows as the unsharded command does
    let j = ok(&[&["merge"][..], &shard_args, &["--out", &at("m2"), "--json"]].concat());
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 12);

    // refused: a shard missing, one given twice, one of another sweep
    refused(
        &[&["merge"][..], &shard_args[..4], &["--out", &at("x")]].concat(),
        "shard(s) 2 of 5 missing",
    );
    refused(
        &[
            &["merge"][..],
            &shard_args,
            &[shard_args[0], "--out", &at("x")],
        ]
        .concat(),
        "shard 3 in",
    );
    let mut other = sweep.to_vec();
    other[10] = "1"; // --seeds 1
    let other_dir = at("other");
    ok(&[&other[..], &["--shard", "0/5", "--out", &other_dir]].concat());
    let mut mixed = shard_args.clone();
    mixed[1] = &other_dir;
    refused(
        &[&["merge"][..], &mixed, &["--out", &at("x")]].concat(),
        "is a shard of another sweep",
    );
    // a shard run with another setting than the rest is of another sweep
    let coverage = at("coverage");
    ok(&with(
        &sweep,
        &["--coverage", "20", "--shard", "2/5", "--out", &coverage],
    ));
    let mut changed = shard_args.clone();
    changed[4] = &coverage;
    refused(
        &[&["merge"][..], &changed, &["--out", &at("x")]].concat(),
        "a setting, the model, the device or its latency table differs",
    );
    // a shard without --out, and shards out of range
    refused(&with(&sweep, &["--shard", "1/5"]), "give --out");
    refused(
        &with(&sweep, &["--shard", "5/5", "--out", &at("x")]),
        "the index must be in [0, 4]",
    );
}

#[test]
fn a_sharded_capacity_search_merges_into_the_unsharded_one() {
    let d = fresh_dir("shard-capacity");
    let at = |n: &str| d.join(n).to_string_lossy().to_string();
    let search = [
        "capacity",
        "--device",
        "npu",
        "--model",
        "gnmt",
        "--policies",
        "serial,graph:5,lazy,lazy:adaptive,oracle",
        "--p99-ms",
        "100",
        "--requests",
        "600",
        "--seeds",
        "1",
        "--progress",
        "off",
    ];
    let full = ok(&[&search[..], &["--out", &at("full")]].concat());
    // five policies in three shards (one each holds two, two and one)
    let mut dirs = Vec::new();
    for i in 0..3 {
        let dir = at(&format!("s{i}"));
        let said = ok(&[&search[..], &["--shard", &format!("{i}/3"), "--out", &dir]].concat());
        assert!(said.contains(&format!("shard {i} of 3")), "{said}");
        dirs.push(dir);
    }
    dirs.reverse();
    let args: Vec<&str> = dirs.iter().map(String::as_str).collect();
    let merged = ok(&[&["merge"][..], &args, &["--out", &at("merged")]].concat());
    assert_eq!(table(&full), table(&merged));
    for n in ["capacity.json", "capacity.svg"] {
        assert_eq!(
            std::fs::read(d.join("full").join(n)).unwrap(),
            std::fs::read(d.join("merged").join(n)).unwrap(),
            "{n}"
        );
    }
    // a search under another SLA is another sweep, though its header reads the same
    let sla = at("sla");
    ok(&[
        &search[..],
        &["--sla-ms", "50", "--shard", "0/3", "--out", &sla],
    ]
    .concat());
    let mut changed = args.clone();
    changed[2] = &sla;
    refused(
        &[&["merge"][..], &changed, &["--out", &at("x")]].concat(),
        "is a shard of another sweep",
    );
    // a compare shard is not a shard of this search
    let other = at("compare");
    ok(&[
        "compare",
        "--device",
        "npu",
        "--model",
        "gnmt",
        "--rates",
        "100",
        "--requests",
        "100",
        "--progress",
        "off",
        "--shard",
        "0/3",
        "--out",
        &other,
    ]);
    let mut mixed = args.clone();
    mixed[2] = &other;
    refused(
        &[&["merge"][..], &mixed, &["--out", &at("x")]].concat(),
        "is a shard of another sweep",
    );
}

#[test]
fn a_ray_sweep_on_a_local_ray_merges_into_the_unsharded_one() {
    // scripts/ray-sweep.py: three shards as Ray tasks on a local Ray the script starts and
    // stops, merged; needs `ray` in python3 (skipped, and said so, without it; CI installs it
    // and sets REQUIRE_RAY=1)
    let d = fresh_dir("ray-sweep");
    let at = |n: &str| d.join(n).to_string_lossy().to_string();
    let sweep = [
        "compare",
        "--device",
        "npu",
        "--model",
        "resnet50",
        "--rates",
        "100,400",
        "--policies",
        "serial,graph:5,lazy",
        "--requests",
        "200",
        "--progress",
        "off",
    ];
    let full = ok(&[&sweep[..], &["--out", &at("full")]].concat());
    let out = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ray-sweep.py"))
        .args(["--shards", "3", "--out", &at("ray")])
        .args(["--lazybatch", env!("CARGO_BIN_EXE_lazybatch"), "--"])
        .args(sweep)
        .output();
    let Some(out) = crate::python_check(out, "REQUIRE_RAY", "ray-sweep") else {
        return;
    };
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // the merged sweep is the unsharded one: its table and its files (wall time aside)
    assert_eq!(table(&full), table(&printed));
    for f in ["compare.json", "resnet50_lazy_400rps.hgrm"] {
        assert_eq!(
            without_wall(&d.join("full").join(f)),
            without_wall(&d.join("ray").join(f)),
            "{f}"
        );
    }
    // each task's shard, as the driver wrote it
    for i in 0..3 {
        assert!(d.join(format!("ray/shards/{i}/shard.json")).exists());
    }
}

/// Every file under `dir`, relative to it, sorted.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_sharded_reproduce_merges_into_the_unsharded_one_byte_for_byte() {
    // the quick evaluation's main figures, CDFs, SLA sweep and capacity on one configuration:
    // three shards of the runs, merged, write every file one reproduce writes, each the same
    let d = fresh_dir("shard-reproduce");
    let at = |n: &str| d.join(n).to_string_lossy().to_string();
    let sweep = [
        "reproduce",
        "--quick",
        "--figures",
        "eval,cdf,sla,capacity",
        "--npu-config",
        "default",
        "--progress",
        "off",
    ];
    ok(&[&sweep[..], &["--out", &at("full")]].concat());
    let mut runs = 0;
    for i in 0..3 {
        let said = ok(&[
            &sweep[..],
            &["--out", &at(&format!("s{i}")), "--shard", &format!("{i}/3")],
        ]
        .concat());
        runs += said
            .split_whitespace()
            .nth(5)
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or_else(|| panic!("a shard says its runs: {said}"));
    }
    let said = ok(&[
        "merge",
        &at("s0"),
        &at("s1"),
        &at("s2"),
        "--out",
        &at("merged"),
    ]);
    assert!(said.contains(&format!("{runs} runs")), "{said}");
    let names = files_under(&d.join("full"));
    assert!(names.len() > 10, "{names:?}");
    assert_eq!(names, files_under(&d.join("merged")));
    for n in &names {
        assert_eq!(
            std::fs::read(d.join("full").join(n)).unwrap(),
            std::fs::read(d.join("merged").join(n)).unwrap(),
            "{}",
            n.display()
        );
    }
    // a shard missing, another sweep's shard, or a shard that cannot be one, refused by name
    refused(
        &["merge", &at("s0"), &at("s2"), "--out", &at("x")],
        "shard(s) 1 of 3 missing",
    );
    ok(&[
        &sweep[..2],
        &[
            "--figures",
            "cdf",
            "--npu-config",
            "default",
            "--progress",
            "off",
            "--out",
            &at("o1"),
            "--shard",
            "1/3",
        ],
    ]
    .concat());
    refused(
        &["merge", &at("s0"), &at("o1"), &at("s2"), "--out", &at("x")],
        "is a shard of another sweep",
    );
    refused(
        &[
            &sweep[..],
            &["--out", &at("v"), "--shard", "0/2", "--validate-cpu"],
        ]
        .concat(),
        "--validate-cpu runs in wall time on this machine",
    );
    refused(
        &[&sweep[..], &["--out", &at("v"), "--shard", "2/2"]].concat(),
        "--shard",
    );
}
