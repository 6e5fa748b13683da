//! The binary: bad input gets a one-line error and a non-zero exit, never a panic.

use crate::fresh_dir;
use lazybatch::device::npu::NpuConfig;
use lazybatch::graph::zoo;
use lazybatch::run::{RunSpec, Testbed};
use std::process::{Command, Output};

pub(crate) fn lazybatch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args(args)
        .output()
        .expect("binary runs")
}

pub(crate) fn fails_with(args: &[&str], needle: &str) {
    let o = lazybatch(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} should fail");
    assert!(err.contains(needle), "{args:?}: stderr was {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

#[test]
fn bad_input_is_a_clear_error() {
    fails_with(
        &["profile", "--model", "resnet51"],
        "unknown model 'resnet51'",
    );
    fails_with(
        &["profile", "--model", "resnet50", "--max-batch", "0"],
        "--max-batch",
    );
    fails_with(
        &["profile", "--model", "resnet50", "--max-batch", "-3"],
        "--max-batch",
    );
    fails_with(
        &["profile", "--model", "gnmt", "--dec-steps", "0"],
        "--dec-steps",
    );
    fails_with(
        &["profile", "--model", "resnet50", "--enc-steps", "3"],
        "static",
    );
    fails_with(
        &["profile", "--model", "resnet50", "--device", "tpu"],
        "unknown device",
    );
    fails_with(
        &["profile", "--model", "/nonexistent.toml"],
        "/nonexistent.toml",
    );
}

#[test]
fn bad_npu_config_names_the_line() {
    let dir = fresh_dir("cli");
    let f = dir.join("npu.toml");
    std::fs::write(&f, "base = \"default\"\nrows = 128\nfrequency = 9\n").unwrap();
    fails_with(
        &[
            "profile",
            "--device",
            "npu",
            "--model",
            "resnet50",
            "--npu-config",
            f.to_str().unwrap(),
        ],
        "npu.toml:3:",
    );
}

#[test]
fn models_and_profile_json_parse() {
    let o = lazybatch(&["models", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v.as_array().unwrap().len(),
        10,
        "the seven paper models, lstm_stack, gpt2 and gpt2_medium"
    );
    let class = |name: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap()["class"]
            .clone()
    };
    assert_eq!(
        [class("resnet50"), class("gnmt"), class("gpt2")],
        ["static", "seq2seq", "decoder-only"]
    );
    let o = lazybatch(&[
        "profile",
        "--device",
        "npu",
        "--model",
        "gnmt",
        "--max-batch",
        "4",
        "--json",
    ]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in [
        "model",
        "device",
        "max_batch",
        "single_input_latency_us",
        "batch_curve",
        "nodes",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    let n = &v["nodes"][0];
    assert_eq!(n["latency_us"].as_array().unwrap().len(), 4);
    assert_eq!(n["compute_cycles"].as_array().unwrap().len(), 4);
    assert_eq!(v["batch_curve"].as_array().unwrap().len(), 4);
    // the input nodes' share is reported apart: their table times at that batch (GNMT's one
    // input node runs once a request)
    let nodes = v["nodes"].as_array().unwrap();
    for p in v["batch_curve"].as_array().unwrap() {
        let b = p["batch"].as_u64().unwrap() as usize;
        let want: f64 = nodes
            .iter()
            .filter(|n| n["op"] == "input")
            .map(|n| n["latency_us"][b - 1].as_f64().unwrap())
            .sum();
        let input = p["input_us"].as_f64().unwrap();
        assert!((input - want).abs() < 1e-9, "{p}: {want}");
        assert!(input < p["latency_us"].as_f64().unwrap(), "{p}");
    }
}

#[test]
fn run_rejects_bad_serving_arguments() {
    let base = ["run", "--model", "resnet50", "--policy", "lazy"];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let check = |extra: &[&str], needle: &str| {
        let args = with(extra);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&refs, needle);
    };
    check(&["--rate", "10", "--arrivals", "gamma:0"], "--arrivals");
    check(
        &["--rate", "10", "--classes", "gold:60"],
        "expected NAME:SLA_MS:SHARE",
    );
    check(
        &["--rate", "10", "--classes", "gold:60:1,gold:70:1"],
        "distinct",
    );
    check(
        &["--rate", "10", "--arrivals", "weibull:2"],
        "expected poisson, gamma:CV or onoff",
    );
    check(&["--rate", "0"], "--rate");
    check(&["--rate", "-5"], "--rate");
    check(&["--rate", "10", "--requests", "0"], "--requests");
    check(&["--rate", "10", "--sla-ms", "0"], "--sla-ms");
    check(&["--rate", "10", "--max-batch", "0"], "--max-batch");
    check(&["--load", "0"], "--load");
    fails_with(
        &[
            "run",
            "--model",
            "resnet50",
            "--policy",
            "graph:abc",
            "--rate",
            "10",
        ],
        "graph:abc",
    );
    fails_with(
        &[
            "run", "--model", "resnet50", "--policy", "lazy:1", "--rate", "10",
        ],
        "lazy:1",
    );
    let dir = fresh_dir("trace");
    let f = dir.join("trace.txt");
    std::fs::write(&f, "# ms\n0.5\n1.0\nabc\n").unwrap();
    fails_with(
        &[
            "run",
            "--model",
            "resnet50",
            "--policy",
            "lazy",
            "--trace",
            f.to_str().unwrap(),
        ],
        "trace.txt:4:",
    );
    std::fs::write(&f, "0.5\n1.0\n").unwrap();
    fails_with(
        &[
            "run",
            "--model",
            "resnet50",
            "--policy",
            "lazy",
            "--trace",
            f.to_str().unwrap(),
            "--arrivals",
            "gamma:2",
        ],
        "--arrivals does not apply to --trace",
    );
}

#[test]
fn run_json_is_deterministic_and_is_the_library_run() {
    let args = [
        "run",
        "--device",
        "npu",
        "--model",
        "gnmt",
        "--policy",
        "lazy",
        "--rate",
        "100",
        "--requests",
        "300",
        "--max-batch",
        "8",
        "--coverage",
        "90",
        "--json",
    ];
    let a = lazybatch(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let mut va: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    let mut vb: serde_json::Value = serde_json::from_slice(&lazybatch(&args).stdout).unwrap();
    for k in [
        "model", "device", "policy", "rate_rps", "seed", "sla_ms", "wall_s",
    ] {
        assert!(va.get(k).is_some(), "missing {k}");
    }
    assert_eq!(va["device"], "npu (default)");
    // every statistic the command prints is the library's run of the same configuration
    let b = Testbed::new(
        zoo::load("gnmt").unwrap(),
        NpuConfig::default(),
        crate::mb(8),
        90.0,
    )
    .unwrap();
    let c = RunSpec {
        policy: lazybatch::policy::Spec::parse("lazy", 8).unwrap(),
        rate: 100.0,
        arrivals: Default::default(),
        classes: None,
        shed: false,
        abandon_late: false,
        admit: Default::default(),
        requests: 300,
        sla: crate::sla(va["sla_ms"].as_f64().unwrap()),
        seed: va["seed"].as_u64().unwrap(),
        max_batch: crate::mb(8),
        max_pending: lazybatch::runtime::MaxPending::DEFAULT,
        colocated: None,
        replicas: lazybatch::engine::Replicas::ONE,
    };
    let want = serde_json::to_value(b.run(&c, Default::default()).unwrap().stats()).unwrap();
    for (k, v) in want.as_object().unwrap() {
        same_json(&va[k], v, k);
    }
    assert_eq!(va["completed"], 300);
    assert_eq!(va["rejected"], 0);
    assert!(
        va["preemptions"].as_u64().unwrap() > 0,
        "lazy batched nothing"
    );
    va["wall_s"] = 0.into();
    vb["wall_s"] = 0.into();
    assert_eq!(va, vb);
}

/// `a` and `b` are the same JSON, numbers to 12 significant digits (the JSON writer rounds).
fn same_json(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value::*;
    match (a, b) {
        (Number(x), Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                "{at}: {x} vs {y}"
            );
        }
        (Array(x), Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                same_json(x, y, &format!("{at}[{i}]"));
            }
        }
        (Object(x), Object(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: {x:?} vs {y:?}");
            for (k, v) in y {
                same_json(&x[k], v, &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// The rows of an `.hgrm` file: (value, percentile, total count).
fn hgrm_rows(text: &str) -> Vec<(f64, f64, u64)> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#') && !l.contains("Percentile"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

/// A `#[Name = value` field of an `.hgrm` footer.
fn hgrm_field(text: &str, name: &str) -> f64 {
    let at = text.find(name).unwrap_or_else(|| panic!("no {name}")) + name.len();
    let rest = text[at..].trim_start().trim_start_matches('=').trim_start();
    rest.split([',', ']'])
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn compare_writes_hgrm_files() {
    let dir = fresh_dir("cmp");
    let o = lazybatch(&[
        "compare",
        "--device",
        "npu",
        "--model",
        "resnet50",
        "--rates",
        "100",
        "--policies",
        "serial,lazy",
        "--requests",
        "200",
        "--seeds",
        "2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("compare.json")).unwrap()).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["seeds"], 2);
    for policy in ["serial", "lazy"] {
        // the .hgrm is the first seed's histogram: the same as `run --seed 1 --hgrm`
        let hgrm =
            std::fs::read_to_string(dir.join(format!("resnet50_{policy}_100rps.hgrm"))).unwrap();
        let rows = hgrm_rows(&hgrm);
        assert!(rows.len() > 5, "{policy}: {} rows", rows.len());
        for w in rows.windows(2) {
            assert!(
                w[0].0 <= w[1].0 && w[0].1 <= w[1].1 && w[0].2 <= w[1].2,
                "{policy}: {w:?}"
            );
        }
        let last = rows.last().unwrap();
        assert_eq!((last.1, last.2), (1.0, 200), "{policy}");
        let one = run_json(&[
            "run",
            "--device",
            "npu",
            "--model",
            "resnet50",
            "--policy",
            policy,
            "--rate",
            "100",
            "--requests",
            "200",
            "--seed",
            "1",
            "--json",
        ]);
        // the histogram keeps µs buckets at 3 significant digits (< 0.1% apart)
        let (mean, max) = (
            one["latency_ms"]["mean"].as_f64().unwrap(),
            one["latency_ms"]["max"].as_f64().unwrap(),
        );
        assert!(
            (hgrm_field(&hgrm, "#[Mean") / mean - 1.0).abs() < 2e-3,
            "{policy} mean"
        );
        assert!(
            (hgrm_field(&hgrm, "#[Max") / max - 1.0).abs() < 2e-3,
            "{policy} max"
        );
        assert_eq!(hgrm_field(&hgrm, "Total count"), 200.0);
    }
}

#[test]
fn cpu_compare_runs_for_real_from_a_saved_table() {
    let dir = fresh_dir("cpu");
    let prof = dir.join("prof.json");
    let model = ["--model", "resnet50", "--width", "0.125", "--res", "0.25"];
    let mut args = vec![
        "profile",
        "--device",
        "cpu",
        "--max-batch",
        "8",
        "--save",
        prof.to_str().unwrap(),
    ];
    args.extend(model);
    let o = lazybatch(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // the saved table is used as is (no profiling message), and the table has every row
    let mut args = vec![
        "compare",
        "--device",
        "cpu",
        "--load",
        "0.1,0.9",
        "--policies",
        "serial,graph:20,lazy",
        "--requests",
        "60",
        "--max-batch",
        "8",
        "--profile",
        prof.to_str().unwrap(),
        "--json",
        "--repeat",
    ];
    args.extend(model);
    let o = lazybatch(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!String::from_utf8_lossy(&o.stderr).contains("profiling the CPU"));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for r in rows {
        // --repeat: the second pass's figures and their spread against the first's, whatever
        // they are on this machine (the spread is a measurement, not a bound)
        let again = r["repeat"]["mean_latency_ms"].as_f64().unwrap();
        let spread = r["run_to_run"]["mean"].as_f64().unwrap();
        let first = r["latency_ms"]["mean"].as_f64().unwrap();
        assert!(again > 0.0 && spread.is_finite(), "{r}");
        assert!(((again - first) / first - spread).abs() < 1e-9, "{r}");
        assert!(r["run_to_run"]["p99"].as_f64().unwrap().is_finite(), "{r}");
    }
    for r in rows {
        let dev = r["device"].as_str().unwrap();
        assert!(
            dev.starts_with("cpu (") && dev.ends_with(" threads)") || dev == "cpu (1 thread)",
            "{dev}"
        );
        assert_eq!(r["completed"], 60);
    }
    let mean = |p: &str, i: usize| {
        rows.iter().filter(|r| r["policy"] == p).nth(i).unwrap()["latency_ms"]["mean"]
            .as_f64()
            .unwrap()
    };
    // graph batching holds a lone request for its 20 ms window, and at 0.1 of the device's
    // capacity a window rarely fills: its mean is well above 5 ms on any machine (a busy one
    // only adds to it). That LazyB does not wait is checked in virtual time, where times are
    // exact (runtime::a_lone_request_starts_at_once_under_lazy_and_after_the_window_under_graph):
    // a wall-clock margin between two policies lost on a busy machine
    assert!(
        mean("graph:20", 0) > 5.0,
        "graph:20 {}",
        mean("graph:20", 0)
    );
    assert!(mean("lazy", 0) > 0.0);
    // a table for another model is refused
    let o = lazybatch(&[
        "run",
        "--device",
        "cpu",
        "--model",
        "mobilenet",
        "--width",
        "0.125",
        "--res",
        "0.25",
        "--policy",
        "lazy",
        "--rate",
        "10",
        "--profile",
        prof.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not for model"));
    // a table measured on another kind of device is refused too
    let text = std::fs::read_to_string(&prof).unwrap();
    let threads = rayon_threads_in(&text);
    let other = dir.join("gpu.json");
    std::fs::write(
        &other,
        text.replace(&threads, "\"device\": \"cuda (some GPU)\""),
    )
    .unwrap();
    let mut args = vec![
        "run",
        "--device",
        "cpu",
        "--policy",
        "lazy",
        "--rate",
        "10",
        "--max-batch",
        "8",
        "--profile",
        other.to_str().unwrap(),
    ];
    args.extend(model);
    let o = lazybatch(&args);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("--profile was measured on 'cuda (some GPU)', but this run is on 'cpu ("),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn verify_command_reports_bit_identical_outputs() {
    let o = lazybatch(&[
        "verify",
        "--model",
        "gnmt",
        "--width",
        "0.125",
        "--requests",
        "5",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("bit-identical: OK") && out.contains("forced preemptions"),
        "{out}"
    );
    fails_with(
        &["verify", "--model", "gnmt", "--device", "npu"],
        "real device",
    );
    // `--device cuda` without a card: tests/it/cuda.rs (without_a_gpu_cuda_is_a_clear_error)
}

#[test]
fn colocation_arguments_are_checked() {
    fails_with(
        &[
            "run",
            "--model",
            "resnet50,gnmtx",
            "--policy",
            "lazy",
            "--rate",
            "10",
        ],
        "unknown model 'gnmtx'",
    );
    fails_with(
        &[
            "run",
            "--model",
            "resnet50,gnmt",
            "--policy",
            "lazy",
            "--rate",
            "10",
            "--shares",
            "1,2,3",
        ],
        "invalid --shares: 3 values for 2 models",
    );
    fails_with(
        &[
            "run",
            "--model",
            "resnet50,gnmt",
            "--policy",
            "lazy",
            "--rate",
            "10",
            "--slas",
            "50",
        ],
        "invalid --slas: 1 value for 2 models",
    );
    fails_with(
        &[
            "run",
            "--model",
            "resnet50,gnmt",
            "--policy",
            "oracle",
            "--rate",
            "10",
        ],
        "co-located",
    );
    fails_with(
        &[
            "run", "--model", "resnet50", "--policy", "lazy", "--rate", "10", "--shares", "1",
        ],
        "co-located",
    );
    let o = lazybatch(&[
        "run",
        "--device",
        "npu",
        "--model",
        "resnet50,gnmt",
        "--policy",
        "lazy",
        "--rate",
        "50",
        "--requests",
        "200",
        "--shares",
        "3,1",
        "--slas",
        "20,150",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let per = v["per_model"].as_array().unwrap();
    assert_eq!(per.len(), 2);
    let total: u64 = per.iter().map(|p| p["completed"].as_u64().unwrap()).sum();
    assert_eq!(total, 200);
    assert!(
        per[0]["completed"].as_u64().unwrap() > per[1]["completed"].as_u64().unwrap(),
        "shares 3:1"
    );
    // each model's figures name the SLA they were counted against (the probe's T13: the header
    // said "SLA 100 ms" whatever --slas said, and the model lines said nothing)
    assert_eq!(per[0]["sla_ms"], 20.0);
    assert_eq!(per[1]["sla_ms"], 150.0);
    let o = lazybatch(&[
        "run",
        "--device",
        "npu",
        "--model",
        "resnet50,gnmt",
        "--policy",
        "lazy",
        "--rate",
        "50",
        "--requests",
        "200",
        "--slas",
        "20,150",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && !text.contains("SLA 100 ms"), "{text}");
    for line in ["resnet50 (SLA 20 ms)", "gnmt (SLA 150 ms)"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(line)),
            "{line}: {text}"
        );
    }
}

#[test]
fn colocation_runs_on_the_cpu_device() {
    // two reduced models served together in wall time: every request of each completes, with
    // its own model's figures
    let o = lazybatch(&[
        "compare",
        "--device",
        "cpu",
        "--model",
        "resnet50,gnmt",
        "--width",
        "0.125",
        "--res",
        "0.25",
        "--rates",
        "40",
        "--shares",
        "1,1",
        "--requests",
        "40",
        "--max-batch",
        "4",
        "--policies",
        "graph:5,lazy",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let dev = r["device"].as_str().unwrap();
        assert!(
            dev.starts_with("cpu (") && dev.ends_with(" threads)") || dev == "cpu (1 thread)",
            "{dev}"
        );
        assert_eq!(r["completed"], 40, "{r}");
        let per = r["per_model"]
            .as_array()
            .unwrap_or_else(|| panic!("no per-model figures: {r}"));
        assert_eq!(per.len(), 2, "{r}");
        // both models got traffic, and GNMT's requests take longer than ResNet's
        let f = |i: usize, k: &str| per[i][k].as_f64().unwrap();
        assert!(
            f(0, "throughput_rps") > 0.0 && f(1, "throughput_rps") > 0.0,
            "{r}"
        );
        let mean = |i: usize| f(i, "mean_latency_ms");
        assert!(mean(1) > mean(0), "{r}");
    }
}

fn run_json(args: &[&str]) -> serde_json::Value {
    let o = lazybatch(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn lazy_merges_across_timesteps_and_the_json_counts_it() {
    for model in ["gnmt", "transformer"] {
        let base = [
            "run",
            "--device",
            "npu",
            "--npu-config",
            "paper",
            "--model",
            model,
            "--rate",
            "400",
            "--requests",
            "300",
            "--json",
            "--policy",
        ];
        let lazy = run_json(&[&base[..], &["lazy"]].concat());
        assert!(lazy["merges"].as_u64().unwrap() > 0, "{model}: {lazy}");
        assert!(
            lazy["cross_step_executions"].as_u64().unwrap() > 0,
            "{model}: {lazy}"
        );
        assert!(lazy["device"].as_str().unwrap().contains("paper"));
        let strict = run_json(&[&base[..], &["lazy:strict"]].concat());
        assert_eq!(strict["cross_step_executions"].as_u64(), Some(0), "{model}");
        // device time by node class: encoder (GNMT) and decoder are told apart
        let classes: Vec<&str> = lazy["by_class"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["class"].as_str().unwrap())
            .collect();
        assert!(classes.contains(&"decoder"), "{model}: {classes:?}");
    }
}

#[test]
fn compare_lists_graph_0_and_draws_the_comparison() {
    let dir = fresh_dir("compare-svg");
    let o = lazybatch(&[
        "compare",
        "--device",
        "npu",
        "--model",
        "resnet50",
        "--rates",
        "100,800",
        "--requests",
        "300",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.lines().any(|l| l.starts_with("graph:0 ")), "{table}");
    for f in [
        "resnet50_100rps_spectrum.svg",
        "resnet50_800rps_spectrum.svg",
        "resnet50_vs_rate.svg",
    ] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap();
        let labels: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text())
            .map(str::trim)
            .collect();
        // every policy in the legend (a line equal to another says so: "graph:0 (= serial)");
        // the spectrum's axis in percentiles
        for p in ["serial", "graph:0", "lazy", "oracle"] {
            let entry = |l: &&str| *l == p || l.starts_with(&format!("{p} (= "));
            assert!(labels.iter().any(entry), "{f}: no {p} in {labels:?}");
        }
        if f.contains("spectrum") {
            assert!(labels.iter().any(|l| l.ends_with("99%")), "{f}: {labels:?}");
        }
    }
}

#[test]
fn npu_configurations_by_name() {
    let o = lazybatch(&["npu-config", "paper"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("weight_fill_gbps = 360.0"),
        "{text}"
    );
    fails_with(
        &["npu-config", "fastest"],
        "unknown NPU configuration 'fastest'",
    );
    fails_with(
        &[
            "profile",
            "--model",
            "resnet50",
            "--device",
            "npu",
            "--npu-config",
            "nonesuch.toml",
        ],
        "nonesuch.toml",
    );
}

/// The `"device": "cpu (N threads)"` line of a saved profile.
fn rayon_threads_in(profile: &str) -> String {
    let line = profile
        .lines()
        .find(|l| l.contains("\"device\": \"cpu ("))
        .unwrap_or_else(|| panic!("no cpu device in {profile}"));
    line.trim().trim_end_matches(',').to_string()
}

#[test]
fn bursty_arrivals_are_named_in_the_output_and_fixed_by_the_seed() {
    let run = |arrivals: &str, seed: &str| {
        let out = lazybatch(&[
            "run",
            "--model",
            "resnet50",
            "--policy",
            "lazy",
            "--load",
            "0.7",
            "--requests",
            "3000",
            "--arrivals",
            arrivals,
            "--seed",
            seed,
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let a = run("onoff:5:45", "3");
    assert_eq!(a["arrivals"], "onoff:5:45");
    assert_eq!(a["completed"], 3000);
    // a seed fixes every arrival: the same run twice gives the same figures, another seed not
    let strip = |mut v: serde_json::Value| {
        v["wall_s"] = serde_json::Value::Null;
        v
    };
    assert_eq!(strip(a.clone()), strip(run("onoff:5:45", "3")));
    assert_ne!(a["latency_ms"], run("onoff:5:45", "4")["latency_ms"]);
    assert_eq!(run("poisson", "3")["arrivals"], "poisson");
}

#[test]
fn sla_classes_are_reported_apart() {
    let out = lazybatch(&[
        "run",
        "--device",
        "npu",
        "--model",
        "gnmt",
        "--policy",
        "lazy",
        "--load",
        "0.9",
        "--requests",
        "2000",
        "--classes",
        "gold:60:1,bronze:400:3",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["classes"], "gold:60:0.25,bronze:400:0.75");
    let per = v["per_class"].as_array().unwrap();
    assert_eq!(
        (per[0]["class"].as_str(), per[1]["sla_ms"].as_f64()),
        (Some("gold"), Some(400.0))
    );
    let total: u64 = per.iter().map(|c| c["completed"].as_u64().unwrap()).sum();
    assert_eq!(total, v["completed"].as_u64().unwrap());
    // the tighter deadline is missed more often by the same requests' latencies
    assert!(per[0]["sla_violation_rate"].as_f64() > per[1]["sla_violation_rate"].as_f64());
    assert_eq!(v["rejected_shed"], 0);
    // GNMT at three times its capacity in two classes, with `flag`: what a lost deadline gives,
    // each rejection counted under `field`, in all and per class, all of the run's rejections
    let gnmt_at_3x = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "run",
            "--device",
            "npu",
            "--model",
            "gnmt",
            "--policy",
            "lazy",
            "--load",
            "3",
            "--requests",
            "2000",
            "--classes",
            "gold:60:1,bronze:400:3",
            "--json",
        ];
        args.extend(extra);
        let out = lazybatch(&args);
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let overloaded = |flag: &str, field: &str| -> serde_json::Value {
        let v = gnmt_at_3x(&[flag]);
        let n = v[field].as_u64().unwrap();
        assert!(n > 0 && n == v["rejected"].as_u64().unwrap(), "{flag}: {v}");
        let per = v["per_class"].as_array().unwrap();
        assert_eq!(
            per.iter().map(|c| c[field].as_u64().unwrap()).sum::<u64>(),
            n,
            "{flag}"
        );
        v
    };
    // with --shed, lost deadlines are rejected and counted, per class too
    let v = overloaded("--shed", "rejected_shed");
    assert!(v["goodput_rps"].as_f64().unwrap() <= v["throughput_rps"].as_f64().unwrap());
    // with --abandon-late, requests past their deadline are let go at the next node boundary,
    // queued or part-served, and counted, per class too: the slots they held serve requests
    // that can still make it, and goodput rises above shedding's
    let l = overloaded("--abandon-late", "rejected_late");
    assert!(
        l["goodput_rps"].as_f64().unwrap() > v["goodput_rps"].as_f64().unwrap(),
        "abandoning late work: {l}; shedding: {v}"
    );
    // with --admit predicted, requests predicted to miss their deadline behind the work in
    // the server are refused at arrival and counted, per class too; fewer of those admitted
    // miss it than without any control
    let a = overloaded("--admit=predicted", "rejected_not_admitted");
    let plain = gnmt_at_3x(&[]);
    assert!(
        a["sla_violation_rate"].as_f64() < plain["sla_violation_rate"].as_f64(),
        "admitted by prediction: {a}; all admitted: {plain}"
    );
    fails_with(
        &[
            "run", "--model", "gnmt", "--policy", "lazy", "--rate", "10", "--admit", "some",
        ],
        "invalid --admit: must be `all` or `predicted`, got 'some'",
    );
}

#[test]
fn load_rejects_bad_arguments_and_says_which_server_is_unreachable() {
    let base = ["load", "--model", "resnet50", "--requests", "2"];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        base.iter().chain(extra).copied().collect()
    }
    fails_with(&with(&base, &["--rate", "-1"]), "--rate");
    fails_with(
        &with(&base, &["--rate", "10", "--url", "https://127.0.0.1:9"]),
        "https is not supported",
    );
    fails_with(
        &with(&base, &["--rate", "10", "--concurrency", "0"]),
        "--concurrency",
    );
    fails_with(
        &with(&base, &["--rate", "10", "--url", "http://127.0.0.1:9"]),
        "http://127.0.0.1:9/v2/models/resnet50",
    );
}

/// `serve` as a newcomer starts it (port 0: it prints the address), `load` against it, and a
/// SIGINT that answers everyone admitted and exits 0.
#[test]
fn serve_and_load_end_to_end_with_a_graceful_sigint() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args(["serve", "--model", "mobilenet", "--device", "npu"])
        .args(["--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "serve ended early");
        if let Some(at) = line.split(" at http://").nth(1) {
            break at.split_whitespace().next().unwrap().to_string();
        }
    };
    let o = lazybatch(&[
        "load",
        "--url",
        &format!("http://{addr}"),
        "--model",
        "mobilenet",
        "--rate",
        "200",
        "--requests",
        "50",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["requests"].as_u64(), v["completed"].as_u64()),
        (Some(50), Some(50))
    );
    // serve's default for one model
    assert_eq!(v["policy"], "lazy:adaptive");
    assert!(v["server_mean_ms"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["mean_batch_size"].as_f64().unwrap() >= 1.0, "{v}");
    // one malformed request, turned away by the front end before the engine sees it
    let (st, _) = crate::http::call(
        addr.parse().unwrap(),
        "POST",
        "/v2/models/mobilenet_v1/infer",
        "{",
    );
    assert_eq!(st, 400);
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "{status:?}: {rest}");
    // every connection finished within the shutdown's deadline: nothing said of dropping any
    assert!(!rest.contains("were dropped"), "{rest}");
    // the summary, on stdout: every request by how it left, the front end's turn-aways too
    let mut summary = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut summary).unwrap();
    assert!(
        summary.contains(
            "stopped: completed 50, abandoned 0, cancelled 0, late 0, malformed 0, bad_request 1, timed_out 0"
        ),
        "{summary}"
    );
}

#[test]
fn an_sla_no_request_can_meet_is_said_and_a_token_bound_sets_the_deadline() {
    let err = |o: &Output| String::from_utf8_lossy(&o.stderr).to_string();
    let run = |sla: &str| {
        lazybatch(&[
            "run",
            "--device",
            "npu",
            "--model",
            "gnmt",
            "--policy",
            "lazy",
            "--rate",
            "5",
            "--requests",
            "20",
            "--sla-ms",
            sla,
        ])
    };
    // GNMT takes 45.5 ms alone on the default NPU configuration
    let o = run("5");
    assert!(o.status.success(), "{}", err(&o));
    assert!(
        err(&o).contains("warning: the SLA (5 ms) is below gnmt's single-input latency (45.547 ms"),
        "{}",
        err(&o)
    );
    assert!(!err(&run("100")).contains("single-input latency ("));
    // under a token bound the SLA-aware policies' deadline comes from it, unless --sla-ms says
    let cap = |extra: &[&str]| {
        let mut args = vec![
            "capacity",
            "--device",
            "npu",
            "--model",
            "gnmt",
            "--ttft-p99-ms",
            "200",
            "--policies",
            "lazy",
            "--requests",
            "500",
            "--seeds",
            "1",
            "--json",
        ];
        args.extend_from_slice(extra);
        lazybatch(&args)
    };
    let derived = cap(&[]);
    assert!(derived.status.success(), "{}", err(&derived));
    assert!(
        err(&derived).contains("deadline, from the token bound:"),
        "{}",
        err(&derived)
    );
    let given = cap(&["--sla-ms", "300"]);
    assert!(given.status.success(), "{}", err(&given));
    assert!(
        !err(&given).contains("from the token bound"),
        "{}",
        err(&given)
    );
}

#[test]
fn every_policy_flags_help_lists_every_policy_of_the_registry() {
    // derived from the registry: a policy added there appears in every command's help
    for cmd in ["run", "compare", "capacity", "validate", "serve"] {
        let o = lazybatch(&[cmd, "--help"]);
        assert!(o.status.success(), "{cmd}");
        let text = String::from_utf8_lossy(&o.stdout);
        // clap may wrap the help at any space
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for e in lazybatch::policy::REGISTRY {
            assert!(
                flat.contains(e.usage),
                "{cmd} --help lacks {}: {flat}",
                e.usage
            );
        }
    }
}
