//! Replicas behind a router from the command line: `run`, `compare` and `capacity` with
//! `--replicas N --router …`, and `capacity --target-rps` (the fewest replicas for a rate).

use crate::cli::{fails_with, lazybatch};
use serde_json::Value;

fn json_of(args: &[&str]) -> Value {
    let o = lazybatch(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

const RUN: [&str; 12] = [
    "run",
    "--model",
    "resnet50",
    "--device",
    "npu",
    "--policy",
    "lazy",
    "--rate",
    "4000",
    "--requests",
    "3000",
    "--json",
];

#[test]
fn run_reports_each_replica_and_the_whole_and_a_seed_fixes_them() {
    let args = [&RUN[..], &["--replicas", "3", "--router", "jsq"]].concat();
    let v = json_of(&args);
    assert_eq!(
        (v["replicas"].as_u64(), v["router"].as_str()),
        (Some(3), Some("jsq"))
    );
    let each = v["per_replica"].as_array().unwrap();
    assert_eq!(each.len(), 3);
    let sum = |k: &str| each.iter().map(|r| r[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!(sum("requests"), 3000);
    assert_eq!(sum("completed"), v["completed"].as_u64().unwrap());
    // the whole run's slowest request is some replica's slowest
    let max = each
        .iter()
        .map(|r| r["latency_ms"]["max"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(max, v["latency_ms"]["max"].as_f64().unwrap());
    // every figure again from the same seed (wall time aside)
    let mut again = json_of(&args);
    let mut first = v.clone();
    first["wall_s"] = Value::Null;
    again["wall_s"] = Value::Null;
    assert_eq!(first, again);
}

#[test]
fn compare_and_capacity_say_their_replicas() {
    let v = json_of(&[
        "compare",
        "--model",
        "resnet50",
        "--device",
        "npu",
        "--policies",
        "serial,lazy",
        "--rates",
        "3000",
        "--requests",
        "1000",
        "--replicas",
        "2",
        "--router",
        "p2c",
        "--json",
        "--progress",
        "off",
    ]);
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(
            (r["replicas"].as_u64(), r["router"].as_str()),
            (Some(2), Some("p2c"))
        );
    }
    // the fewest replicas for 8000 req/s at p99 ≤ 3 ms: the count before it fails, it meets
    let v = json_of(&[
        "capacity",
        "--model",
        "resnet50",
        "--device",
        "npu",
        "--policies",
        "serial",
        "--p99-ms",
        "3",
        "--target-rps",
        "8000",
        "--router",
        "jsq",
        "--requests",
        "2000",
        "--seeds",
        "1",
        "--json",
        "--progress",
        "off",
    ]);
    let row = &v[0];
    let n = row["replicas_needed"].as_u64().expect("a count");
    // one server serves about 1327 req/s: fewer than 8000/1327 cannot keep up
    assert!(n >= 7, "{n}");
    let probes = row["probes"].as_array().unwrap();
    let at = |k: u64| probes.iter().find(|p| p["replicas"].as_u64() == Some(k));
    assert_eq!(at(n).unwrap()["ok"], Value::Bool(true));
    assert_eq!(
        at(n - 1).expect("the count below was tried")["ok"],
        Value::Bool(false)
    );
    assert!(at(n).unwrap()["p99_ms"].as_f64().unwrap() <= 3.0);
}

#[test]
fn replica_settings_out_of_place_or_range_are_refused_naming_the_flag() {
    let run = &RUN[..RUN.len() - 1];
    fails_with(
        &[run, &["--router", "jsq"]].concat(),
        "--router picks among --replicas",
    );
    fails_with(
        &[run, &["--replicas", "0"]].concat(),
        "invalid --replicas: must be an integer in [1, 1024], got 0",
    );
    fails_with(
        &[run, &["--replicas", "1025"]].concat(),
        "invalid --replicas: must be an integer in [1, 1024], got 1025",
    );
    fails_with(
        &[run, &["--replicas", "2", "--router", "least"]].concat(),
        "invalid --router: 'least' is not one of rr, jsq, p2c, random",
    );
    let kept = crate::fresh_dir("replicas").join("records.csv");
    let kept_arg = kept.to_string_lossy().to_string();
    fails_with(
        &[run, &["--replicas", "2", "--keep-records", &kept_arg]].concat(),
        "invalid --replicas: per-request records are kept for one server only",
    );
    assert!(!kept.exists(), "the refusal came before the file was made");
    fails_with(
        &[
            "run",
            "--model",
            "resnet50",
            "--device",
            "cpu",
            "--policy",
            "serial",
            "--rate",
            "10",
            "--requests",
            "5",
            "--replicas",
            "2",
        ],
        "invalid --replicas: several replicas run on a model device",
    );
    fails_with(
        &[
            "serve",
            "--model",
            "resnet50",
            "--device",
            "npu",
            "--policy",
            "lazy",
            "--replicas",
            "2",
        ],
        "`serve` serves one device",
    );
    fails_with(
        &[
            "capacity",
            "--model",
            "resnet50",
            "--device",
            "npu",
            "--p99-ms",
            "3",
            "--target-rps",
            "8000",
            "--replicas",
            "2",
        ],
        "--target-rps searches the number of replicas: drop --replicas",
    );
    fails_with(
        &[
            "capacity",
            "--model",
            "resnet50",
            "--device",
            "npu",
            "--p99-ms",
            "3",
            "--target-rps",
            "-1",
        ],
        "--target-rps",
    );
}

#[test]
fn each_count_tried_is_the_mean_over_the_seeds_of_plain_replicated_runs() {
    // `capacity --target-rps` with two seeds: the probe at the count found is the mean of
    // `run` at that count with seed 1 and with seed 2 (each seed draws its own arrivals)
    let v = json_of(&[
        "capacity",
        "--model",
        "resnet50",
        "--device",
        "npu",
        "--policies",
        "lazy",
        "--p99-ms",
        "3",
        "--sla-ms",
        "10",
        "--target-rps",
        "8000",
        "--router",
        "jsq",
        "--requests",
        "1000",
        "--seeds",
        "2",
        "--json",
        "--progress",
        "off",
    ]);
    let row = &v[0];
    let n = row["replicas_needed"].as_u64().expect("a count");
    let probe = row["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["replicas"].as_u64() == Some(n))
        .unwrap();
    let p99 = |seed: &str| {
        let r = json_of(&[
            "run",
            "--model",
            "resnet50",
            "--device",
            "npu",
            "--policy",
            "lazy",
            "--sla-ms",
            "10",
            "--rate",
            "8000",
            "--requests",
            "1000",
            "--replicas",
            &n.to_string(),
            "--router",
            "jsq",
            "--seed",
            seed,
            "--json",
        ]);
        assert_eq!(r["replicas"].as_u64(), Some(n));
        r["latency_ms"]["p99"].as_f64().unwrap()
    };
    let (one, two) = (p99("1"), p99("2"));
    assert_ne!(one, two, "two seeds, two draws of arrivals");
    // (the reports round to the microsecond: the mean of two rounded figures is within one
    // rounding of the rounded mean)
    let mean = probe["p99_ms"].as_f64().unwrap();
    assert!(
        (mean - (one + two) / 2.0).abs() <= 1e-3,
        "probe {mean} against the runs' {one} and {two}"
    );
}
