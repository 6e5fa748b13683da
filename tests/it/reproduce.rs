//! `reproduce --quick`: every figure, its data and the report are written and parse; the data
//! come from the same code path as `run`; rerunning gives identical files.

use crate::fresh_dir;
use lazybatch::device::npu::NpuConfig;
use lazybatch::graph::zoo;
use lazybatch::report::{experiment_names, reproduce, Options, Plan};
use lazybatch::run::{RunSpec, Testbed};
use std::path::Path;

fn both() -> Vec<(String, NpuConfig)> {
    vec![
        ("paper".into(), NpuConfig::resolve("paper").unwrap()),
        ("default".into(), NpuConfig::default()),
    ]
}

fn only_default() -> Vec<(String, NpuConfig)> {
    vec![("default".into(), NpuConfig::default())]
}

fn quick(dir: &Path) -> Vec<String> {
    reproduce(&Options {
        out: dir.to_path_buf(),
        quick: true,
        seeds: None,
        figures: Some(vec!["all".into()]),
        progress: lazybatch::progress::Mode::Off,
        npus: both(),
    })
    .unwrap()
}

fn csv(dir: &Path, name: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let mut lines = text.lines();
    let head: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    for r in &rows {
        assert_eq!(r.len(), head.len(), "{name}: ragged row {r:?}");
    }
    (head, rows)
}

/// From `<cfg>/eval.csv`: LazyB's mean-latency gain over the best GraphB window of the quick
/// plan (the window whose mean latencies sum lowest over the rates), and that window's policy.
fn latency_gain(dir: &Path, cfg: &str, model: &str) -> (f64, String) {
    let (head, rows) = csv(dir, &format!("{cfg}/eval.csv"));
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    let (m, p, r, lat) = (
        col("model"),
        col("policy"),
        col("rate_rps"),
        col("mean_latency_ms"),
    );
    let mean = |policy: &str, rate: &str| -> f64 {
        rows.iter()
            .find(|x| x[m] == model && x[p] == policy && x[r] == rate)
            .unwrap_or_else(|| panic!("{cfg} {model} {policy} at {rate}"))[lat]
            .parse()
            .unwrap()
    };
    // the averages' rates (the overload rates are tabled too, but kept out of the averages)
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(cfg).join("config.json")).unwrap())
            .unwrap();
    let averaged: Vec<f64> = config["plan"]["rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let rates: Vec<String> = {
        let mut v: Vec<String> = rows
            .iter()
            .filter(|x| x[m] == model && x[p] == "lazy")
            .filter(|x| averaged.contains(&x[r].parse::<f64>().unwrap()))
            .map(|x| x[r].clone())
            .collect();
        v.dedup();
        v
    };
    assert_eq!(
        rates.len(),
        3,
        "{cfg} {model}: the quick plan's three rates"
    );
    let best = ["graph:5", "graph:25", "graph:50", "graph:75", "graph:95"]
        .into_iter()
        .min_by(|a, b| {
            let sum = |g: &str| rates.iter().map(|x| mean(g, x)).sum::<f64>();
            sum(a).total_cmp(&sum(b))
        })
        .unwrap();
    let logs: f64 = rates
        .iter()
        .map(|x| (mean(best, x) / mean("lazy", x)).ln())
        .sum();
    ((logs / rates.len() as f64).exp(), best.to_string())
}

#[test]
fn quick_reproduce_writes_every_figure_and_is_deterministic() {
    let a = fresh_dir("repro-a");
    let files = quick(&a);
    // under each configuration, every experiment has a CSV, a JSON and at least one SVG, and
    // there is a report; the top level has the combined report and the configuration
    for cfg in ["paper", "default"] {
        for e in experiment_names() {
            let stem = format!("{cfg}/{e}");
            assert!(
                files.iter().any(|f| f == &format!("{stem}.csv")),
                "{stem}.csv"
            );
            assert!(
                files.iter().any(|f| f == &format!("{stem}.json")),
                "{stem}.json"
            );
            assert!(
                files
                    .iter()
                    .any(|f| f.starts_with(&stem) && f.ends_with(".svg")),
                "{stem} svg"
            );
        }
        assert!(files.contains(&format!("{cfg}/report.md")));
    }
    assert!(files.contains(&"report.md".to_string()) && files.contains(&"config.json".to_string()));
    for f in &files {
        let path = a.join(f);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.is_empty(), "{f} is empty");
        if f.ends_with(".svg") {
            let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert_eq!(doc.root_element().tag_name().name(), "svg");
            assert!(
                doc.descendants().filter(|n| n.has_tag_name("text")).count() > 5,
                "{f} has no labels"
            );
        } else if f.ends_with(".json") {
            serde_json::from_str::<serde_json::Value>(&text).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }
    let (head, rows) = csv(&a, "paper/eval.csv");
    for c in [
        "model",
        "policy",
        "rate_rps",
        "mean_latency_ms",
        "latency_p25",
        "latency_p75",
        "p99_ms",
        "throughput_rps",
        "sla_violation_100ms",
    ] {
        assert!(head.iter().any(|h| h == c), "eval.csv lacks {c}");
    }
    assert!(!rows.is_empty());
    // graph:0 and every reading of LazyB's rules are evaluated beside the paper's policies
    for p in [
        "graph:0",
        "lazy:strict",
        "lazy:recheck",
        "lazy:all",
        "lazy:past-max",
        "oracle",
    ] {
        assert!(rows.iter().any(|r| r[1] == p), "eval.csv lacks {p}");
    }
    // capacity at the SLA: every main model under 12 policies (Serial, GraphB(0/5/25/50), the
    // five LazyB readings, lazy:adaptive, the Oracle), the four co-located models under the 13
    // that serve them (GraphB's three windows also with a queue per model; neither the Oracle
    // nor lazy:adaptive); each capacity (where found) met p99 ≤ 100 ms at its rate
    let (head, rows) = csv(&a, "paper/capacity.csv");
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    assert_eq!(rows.len(), 3 * 12 + 13);
    let (cap, p99) = (col("capacity_rps"), col("p99_ms"));
    let found: Vec<&Vec<String>> = rows
        .iter()
        .filter(|r| r[cap] != "NaN" && !r[cap].is_empty())
        .collect();
    assert!(found.len() >= 20, "{rows:?}");
    for r in found {
        assert!(r[p99].parse::<f64>().unwrap() <= 100.0, "{r:?}");
    }
    // the eval sweep reaches past graph batching's saturation
    let (head, rows) = csv(&a, "paper/eval.csv");
    let rate = head.iter().position(|h| h == "rate_rps").unwrap();
    assert!(rows.iter().any(|r| r[rate] == "2000"), "no 2,000 req/s row");
    // bursty traffic: every model × policy × CV, and a serial server queues longer as the
    // gaps grow more variable (Kingman)
    let (head, rows) = csv(&a, "default/bursts.csv");
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    let (m, p, cv, lat) = (
        col("model"),
        col("policy"),
        col("cv"),
        col("mean_latency_ms"),
    );
    assert_eq!(rows.len(), 3 * 6 * 3);
    for model in ["resnet50", "gnmt", "transformer_base"] {
        let serial: Vec<f64> = rows
            .iter()
            .filter(|r| r[m] == model && r[p] == "serial")
            .map(|r| r[lat].parse().unwrap())
            .collect();
        let cvs: Vec<&str> = rows
            .iter()
            .filter(|r| r[m] == model && r[p] == "serial")
            .map(|r| r[cv].as_str())
            .collect();
        assert_eq!(cvs, ["1", "2", "4"], "{model}");
        assert!(
            serial[0] < serial[1] && serial[1] < serial[2],
            "{model}: {serial:?}"
        );
    }
    // goodput: every model × policy × (as served, shedding, letting late work go) × load;
    // nothing shed without --shed, nothing let go without --abandon-late, and at twice the
    // capacity and beyond, letting late work go gives more goodput than shedding
    let (head, rows) = csv(&a, "default/goodput.csv");
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    assert_eq!(rows.len(), 3 * 2 * 3 * 4);
    let (shed, count) = (col("shed"), col("shed_requests"));
    assert!(rows.iter().all(|r| r[shed] == "true" || r[count] == "0"));
    assert!(rows.iter().any(|r| r[shed] == "true" && r[count] != "0"));
    let (late, gone) = (col("abandon_late"), col("late_requests"));
    assert!(rows.iter().all(|r| r[late] == "true" || r[gone] == "0"));
    assert!(rows.iter().any(|r| r[late] == "true" && r[gone] != "0"));
    let (m, p, load, good) = (col("model"), col("policy"), col("load"), col("goodput_rps"));
    let goodput = |r: &Vec<String>, s: &str, l: &str| -> f64 {
        rows.iter()
            .find(|x| {
                x[m] == r[m] && x[p] == r[p] && x[load] == r[load] && x[shed] == s && x[late] == l
            })
            .map(|x| x[good].parse().unwrap())
            .unwrap()
    };
    for r in rows
        .iter()
        .filter(|r| r[m] == "resnet50" && r[load].parse::<f64>().unwrap() >= 2.0)
    {
        assert!(
            goodput(r, "false", "true") > goodput(r, "true", "false"),
            "{}: {:?}",
            r[p],
            r
        );
    }
    // each class's CDF: 101 quantiles per model × policy × shedding × class, latencies
    // non-decreasing along each
    let (head, rows) = csv(&a, "default/goodput_cdf.csv");
    assert_eq!(rows.len(), 3 * 2 * 2 * 2 * 101);
    let lat = head.iter().position(|h| h == "latency_ms").unwrap();
    for curve in rows.chunks(101) {
        let v: Vec<f64> = curve.iter().map(|r| r[lat].parse().unwrap()).collect();
        assert!(v.windows(2).all(|w| w[0] <= w[1]), "{:?}", &curve[0][..4]);
        assert!(v[100] > 0.0, "{:?} completed nothing", &curve[0][..4]);
    }
    assert!(files.contains(&"default/adaptive_heat.svg".to_string()));
    // the adaptive grid: every zoo model at six loads, each ratio to a named baseline
    let (head, rows) = csv(&a, "default/adaptive.csv");
    assert_eq!(rows.len(), 8 * 6);
    let best = head.iter().position(|h| h == "best_baseline").unwrap();
    assert!(rows
        .iter()
        .all(|r| !r[best].is_empty() && r[best] != "lazy:adaptive"));
    let (head, _) = csv(&a, "paper/sla.csv");
    assert_eq!(
        head,
        [
            "model",
            "policy",
            "sla_ms",
            "violation_rate",
            "violation_p25",
            "violation_p75"
        ]
    );
    // the top-level report: Table II under both configurations, and every claim with the
    // paper's figure, each configuration's and every other reading's in adjacent columns
    let report = std::fs::read_to_string(a.join("report.md")).unwrap();
    assert!(report.contains("| model | lengths | Table II (ms) | `paper` (ms) | `default` (ms) |"));
    assert!(report.contains(
        "| claim | paper | ours, `paper` | ours, `default` | `lazy:recheck` on `paper` | `lazy:all` on `paper` | `lazy:past-max` on `paper` | `oracle` on `paper` | `lazy:strict` on `paper` | command |"
    ));
    let row = report
        .lines()
        .find(|l| l.starts_with("| Transformer mean latency, best GraphB / LazyB | 2.5× |"))
        .expect("the Transformer's latency claim");
    assert_eq!(row.matches('|').count(), 11, "{row}");
    // which reading reproduces which claim, under each configuration
    for cfg in ["paper", "default"] {
        assert!(report.contains(&format!("### `{cfg}`\n\n| claim | paper | `lazy` | `lazy:recheck` | `lazy:all` | `lazy:past-max` | `oracle` | `lazy:strict` |")), "{cfg}");
    }
    assert!(report.contains("## Where `paper` differs from the paper by more than 30%, and why"));
    // the throughput claims where they can show: at 2,000 req/s and as capacity at the SLA,
    // and the averages read both ways
    for claim in [
        "| Transformer throughput at 2,000 req/s, LazyB / best GraphB",
        "| GNMT capacity at p99 ≤ 100 ms, LazyB / best GraphB",
        "| four co-located models: capacity at p99 ≤ 100 ms vs best GraphB | 1.8× |",
    ] {
        assert!(report.contains(claim), "{claim}");
    }
    let avg = report
        .lines()
        .find(|l| l.starts_with("| average latency improvement over graph batching | 15× |"))
        .expect("the average latency claim");
    assert!(avg.contains("arithmetic mean"), "{avg}");
    // the report's figures are computed from the runs: each latency-gain claim is recomputed
    // here from that configuration's eval.csv (best GraphB by summed mean latency, then the
    // geometric mean over rates of GraphB's mean latency over LazyB's)
    for (col, cfg) in [(3, "paper"), (4, "default")] {
        for (model, short) in [
            ("resnet50", "ResNet-50"),
            ("gnmt", "GNMT"),
            ("transformer_base", "Transformer"),
        ] {
            let (want, best) = latency_gain(&a, cfg, model);
            let row = report
                .lines()
                .find(|l| l.starts_with(&format!("| {short} mean latency, best GraphB / LazyB |")))
                .unwrap_or_else(|| panic!("{short}'s latency claim"));
            let cell = row.split('|').nth(col).unwrap().trim();
            let shown: f64 = cell.split('×').next().unwrap().parse().unwrap();
            assert!(
                (shown - want).abs() <= 0.006 * want.max(1.0),
                "{cfg} {model}: report says {cell}, eval.csv gives {want:.4}"
            );
            let best_label = format!("GraphB({})", &best["graph:".len()..]);
            assert!(
                cell.contains(&best_label),
                "{cfg} {model}: {cell} vs {best_label}"
            );
        }
    }
    // same arguments, identical files
    let b = fresh_dir("repro-b");
    quick(&b);
    for f in &files {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs between runs"
        );
    }
}

#[test]
fn the_sla_figure_counts_each_runs_own_violations() {
    // Every point of the SLA figure, every policy (LazyB included), is the violation rate the
    // recorder counts (completion after the deadline) in a direct run of that policy at that
    // SLA target: the figure's reading of its sorted latency list at the target agrees with it.
    let a = fresh_dir("repro-sla");
    let opts = Options {
        out: a.clone(),
        quick: true,
        seeds: Some(1),
        figures: Some(vec!["sla".into()]),
        progress: lazybatch::progress::Mode::Off,
        npus: only_default(),
    };
    reproduce(&opts).unwrap();
    let plan = Plan::new(&opts).unwrap();
    let (head, rows) = csv(&a, "default/sla.csv");
    assert_eq!(head[..4], ["model", "policy", "sla_ms", "violation_rate"]);
    let mut benches = std::collections::HashMap::new();
    let (mut checked, mut between) = (0, 0);
    for r in &rows {
        let (model, policy) = (r[0].as_str(), r[1].as_str());
        let (sla, v): (f64, f64) = (r[2].parse().unwrap(), r[3].parse().unwrap());
        let b = benches.entry(model.to_string()).or_insert_with(|| {
            Testbed::new(
                zoo::load(model).unwrap(),
                NpuConfig::default(),
                crate::mb(64),
                90.0,
            )
            .unwrap()
        });
        let c = RunSpec {
            policy: lazybatch::policy::Spec::parse(policy, 64).unwrap(),
            rate: plan.high_rate,
            arrivals: Default::default(),
            classes: None,
            shed: false,
            abandon_late: false,
            admit: Default::default(),
            requests: plan.requests(model),
            sla: crate::sla(sla),
            seed: 1,
            max_batch: crate::mb(64),
            max_pending: lazybatch::runtime::MaxPending::DEFAULT,
            colocated: None,
            replicas: lazybatch::engine::Replicas::ONE,
        };
        let want = b.run(&c, Default::default()).unwrap().stats();
        // the CSV keeps 7 significant digits; one request is at least 1/400
        assert!(
            (v - want.sla_violation_rate).abs() < 1e-6,
            "{model} {policy} at {sla} ms: figure {v}, run {}",
            want.sla_violation_rate
        );
        checked += 1;
        between += usize::from(v > 0.0 && v < 1.0);
    }
    assert_eq!(checked, rows.len());
    assert!(
        between >= 3,
        "only {between} points strictly between 0 and 1"
    );
}

#[test]
fn figure_data_come_from_the_run_code_path() {
    let a = fresh_dir("repro-eval");
    reproduce(&Options {
        out: a.clone(),
        quick: true,
        seeds: Some(2),
        figures: Some(vec!["eval".into()]),
        progress: lazybatch::progress::Mode::Off,
        npus: only_default(),
    })
    .unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("default/eval.json")).unwrap())
            .unwrap();
    let row = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == "resnet50" && r["policy"] == "lazy" && r["rate_rps"] == 256.0)
        .unwrap();
    let b = Testbed::new(
        zoo::load("resnet50").unwrap(),
        NpuConfig::default(),
        crate::mb(64),
        90.0,
    )
    .unwrap();
    let mean: f64 = (1..=2)
        .map(|seed| {
            let c = RunSpec {
                policy: lazybatch::policy::Spec::parse("lazy", 64).unwrap(),
                rate: 256.0,
                arrivals: Default::default(),
                classes: None,
                shed: false,
                abandon_late: false,
                admit: Default::default(),
                requests: 400,
                sla: crate::sla(100.0),
                seed,
                max_batch: crate::mb(64),
                max_pending: lazybatch::runtime::MaxPending::DEFAULT,
                colocated: None,
                replicas: lazybatch::engine::Replicas::ONE,
            };
            b.run(&c, Default::default())
                .unwrap()
                .stats()
                .latency_ms
                .mean
        })
        .sum::<f64>()
        / 2.0;
    let got = row["mean_latency_ms"].as_f64().unwrap();
    assert!((got - mean).abs() <= 1e-5 * mean, "{got} vs {mean}");
}

#[test]
fn unknown_experiment_is_an_error() {
    let e = reproduce(&Options {
        out: fresh_dir("repro-bad"),
        quick: true,
        seeds: None,
        figures: Some(vec!["latency".into()]),
        progress: lazybatch::progress::Mode::Off,
        npus: only_default(),
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("unknown experiment 'latency'"),
        "{e}"
    );
}

/// A few figures of the quick plan pinned exactly: the NPU model in virtual time is
/// deterministic, so any change to the simulator, a policy or the statistics that moves a
/// result shows here — update the pins only with a change that means to move them (and say so
/// in the CHANGELOG).
#[test]
fn quick_figures_are_pinned() {
    let dir = fresh_dir("repro-pinned");
    reproduce(&Options {
        out: dir.clone(),
        quick: true,
        seeds: None,
        figures: Some(vec!["eval".into(), "capacity".into()]),
        progress: lazybatch::progress::Mode::Off,
        npus: vec![("paper".into(), NpuConfig::resolve("paper").unwrap())],
    })
    .unwrap();
    let (head, rows) = csv(&dir, "paper/eval.csv");
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    let cell = |m: &str, p: &str, r: &str, c: &str| -> String {
        rows.iter()
            .find(|x| x[0] == m && x[1] == p && x[2] == r)
            .unwrap_or_else(|| panic!("{m} {p} {r}"))[col(c)]
        .clone()
    };
    // (model, policy, rate, column, value as eval.csv writes it)
    for (m, p, r, c, want) in [
        ("resnet50", "serial", "16", "mean_latency_ms", "0.6329939"),
        ("gnmt", "graph:5", "256", "mean_latency_ms", "19.43773"),
        ("gnmt", "graph:5", "256", "mean_batch", "3.094254"),
        (
            "transformer_base",
            "lazy",
            "1000",
            "mean_latency_ms",
            "3.981904",
        ),
        ("transformer_base", "lazy", "1000", "p99_ms", "9.587"),
    ] {
        assert_eq!(cell(m, p, r, c), want, "{m} {p} at {r} req/s: {c}");
    }
    let (head, rows) = csv(&dir, "paper/capacity.csv");
    let cap = head.iter().position(|h| h == "capacity_rps").unwrap();
    let lazy = rows
        .iter()
        .find(|x| x[0] == "gnmt" && x[1] == "lazy")
        .unwrap();
    // (since LazyB's refusals hold until the active batch completes, 2026-12; the quick
    // plan's runs are too short for the Transformer's LazyB to miss the bound at any rate)
    assert_eq!(
        lazy[cap], "5176.324",
        "GNMT's LazyB capacity (quick search)"
    );
}

#[test]
fn reproduce_holds_the_simulator_against_the_cpu_when_asked() {
    // wall time on this machine's CPU: what it says varies, its shape does not
    let dir = crate::fresh_dir("reproduce-validate-cpu");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args([
            "reproduce",
            "--quick",
            "--figures",
            "batching",
            "--validate-cpu",
        ])
        .arg("--out")
        .arg(&dir)
        .args(["--progress", "off"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("validation/validate.json")).unwrap(),
    )
    .unwrap();
    let points = v.as_array().unwrap();
    // 5 policies × 3 loads, each served twice for real and once on the table
    assert_eq!(points.len(), 15, "{v}");
    for p in points {
        for side in ["measured", "repeat", "predicted"] {
            assert_eq!(p[side]["completed"], 30, "{p}");
        }
        assert!(p["run_to_run"]["mean"].as_f64().unwrap().is_finite(), "{p}");
    }
    let svg = std::fs::read_to_string(dir.join("validation/validate.svg")).unwrap();
    roxmltree::Document::parse(&svg).unwrap();
    assert!(std::fs::read_to_string(dir.join("validation/validate.txt"))
        .unwrap()
        .contains("the device against itself"));
}
