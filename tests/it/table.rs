//! The table device (`--device profile:FILE`) and `validate`: a table measured on the NPU model
//! reproduces the NPU model's runs (exactly for a CNN, within 1% for sequence models), a table
//! that does not fit the run is refused naming the file and field, and `validate` serves the
//! same arrivals on a real device and on its table.

use lazybatch::device::npu::NpuConfig;
use lazybatch::device::open::Opened;
use lazybatch::device::table::TableDevice;
use lazybatch::graph::zoo;
use lazybatch::metrics::{KeepRecords, Stats};
use lazybatch::policy;
use lazybatch::run::{RunSpec, Testbed, TestbedOptions};
use lazybatch::time::Nanos;

fn cfg(policy: &str, rate: f64, n: usize, seed: u64) -> RunSpec {
    RunSpec {
        policy: policy::Spec::parse(policy, 64).unwrap(),
        rate,
        arrivals: Default::default(),
        classes: None,
        shed: false,
        abandon_late: false,
        admit: Default::default(),
        requests: n,
        sla: crate::sla(100.0),
        seed,
        max_batch: crate::mb(64),
        max_pending: lazybatch::runtime::MaxPending::DEFAULT,
        colocated: None,
        replicas: lazybatch::engine::Replicas::ONE,
    }
}

/// The NPU model's bench for `model` and the bench of its own table as a device.
fn npu_and_table(model: &str) -> (Testbed, Testbed) {
    let m = zoo::load(model).unwrap();
    let npu = Testbed::new(m.clone(), NpuConfig::default(), crate::mb(64), 90.0).unwrap();
    let table = TableDevice::from_profile(npu.profile.clone(), "the NPU model's table");
    let opts = TestbedOptions {
        max_batch: crate::mb(64),
        coverage: 90.0,
        profile: None,
        sampling: lazybatch::device::measure::Sampling::default(),
    };
    let t = Testbed::open(m, Opened::Table(table), &opts).unwrap();
    (npu, t)
}

fn run(b: &Testbed, c: &RunSpec) -> Stats {
    b.run(c, KeepRecords::default()).unwrap().stats()
}

#[test]
fn a_table_of_the_npu_model_reproduces_a_cnns_runs_to_the_nanosecond() {
    let (npu, table) = npu_and_table("resnet50");
    assert!(table.is_virtual());
    for p in ["serial", "graph:5", "graph:25", "lazy", "oracle"] {
        for rate in [200.0, 2000.0] {
            let c = cfg(p, rate, 600, 3);
            let (a, b) = (run(&npu, &c), run(&table, &c));
            assert_eq!(a, b, "{p} at {rate}: the table drifted from the NPU model");
        }
    }
}

/// `table`'s device with one after-idle row: node `k` costs `1000 (k + 1)` ns more on its first
/// run after an idle gap of at least `gap`.
fn with_idle_row(table: &Testbed, gap: Nanos) -> (Testbed, Nanos) {
    let mut t = table.profile.clone();
    let extra: Vec<i64> = (0..t.nodes.len() as i64).map(|k| 1000 * (k + 1)).collect();
    let sum = Nanos(extra.iter().sum::<i64>() as u64);
    t.after_idle = vec![lazybatch::profile::AfterIdle {
        gap_ns: gap.0,
        extra_ns: extra,
    }];
    let opts = TestbedOptions {
        max_batch: crate::mb(64),
        coverage: 90.0,
        profile: None,
        sampling: lazybatch::device::measure::Sampling::default(),
    };
    let dev = TableDevice::from_profile(t, "a table with an after-idle row");
    let m = table.model.clone();
    (Testbed::open(m, Opened::Table(dev), &opts).unwrap(), sum)
}

#[test]
fn a_table_charges_its_after_idle_row_once_per_node_after_a_gap_that_long() {
    let (_, table) = npu_and_table("resnet50");
    let keep = KeepRecords {
        requests: true,
        ..KeepRecords::default()
    };
    // at 2 requests a second every request finds the device idle for far longer than 1 ms
    // (a pass takes a few ms): each one's latency is the plain table's plus the whole row, to
    // the nanosecond; the first request's too (the device idled since before the run)
    let c = cfg("serial", 2.0, 40, 7);
    let plain = table.run(&c, keep.clone()).unwrap().requests;
    let (woken, sum) = with_idle_row(&table, Nanos::from_ms(1.0));
    let charged = woken.run(&c, keep.clone()).unwrap().requests;
    assert_eq!(plain.len(), 40);
    for (p, q) in plain.iter().zip(&charged) {
        let lat = |r: &lazybatch::runtime::Request| r.completion.unwrap() - r.arrival;
        assert_eq!(lat(q), lat(p) + sum, "request {}", p.id.0);
    }
    // a row for gaps longer than any in the run is charged to the first request only (the
    // device idled since before the run)
    let (rarely, _) = with_idle_row(&table, Nanos::from_ms(60_000.0));
    let once = rarely.run(&c, keep).unwrap().requests;
    assert_eq!(once[0].completion, charged[0].completion);
    assert!(plain[1..] == once[1..], "a later request was charged");
}

#[test]
fn a_table_with_a_spread_gives_one_run_per_seed_and_a_slower_mean_than_its_median() {
    let (_, table) = npu_and_table("resnet50");
    let mut t = table.profile.clone();
    // a measured spread: 80 passes at the median, 20 at twice it (the median pass is the
    // table's own single-input latency, so the draws scale the table by 1 or 2)
    let median = t.nodes.iter().map(|n| n.latency_ns[0]).sum::<u64>();
    t.passes_ns = [vec![median; 80], vec![2 * median; 20]].concat();
    let opts = TestbedOptions {
        max_batch: crate::mb(64),
        coverage: 90.0,
        profile: None,
        sampling: lazybatch::device::measure::Sampling::default(),
    };
    let dev = TableDevice::from_profile(t, "a table with a spread");
    let spread = Testbed::open(table.model.clone(), Opened::Table(dev), &opts).unwrap();
    let c = cfg("serial", 20.0, 400, 11);
    let (a, b) = (run(&spread, &c), run(&spread, &c));
    assert_eq!(a, b, "the same seed, another run");
    let plain = run(&table, &c);
    // at 20 req/s a pass is rarely queued: about a fifth of the requests take twice as long
    let ratio = a.latency_ms.mean / plain.latency_ms.mean;
    assert!((1.1..1.35).contains(&ratio), "{ratio}");
    assert!(a.latency_ms.p50 >= plain.latency_ms.p50);
}

#[test]
fn a_table_of_the_npu_model_predicts_sequence_models_within_one_percent() {
    // the NPU model's cost of a length-dependent node is not a function of its work proxy
    // alone (array folds, per-member fill): the table interpolates between what it measured
    for model in ["gnmt", "transformer"] {
        let (npu, table) = npu_and_table(model);
        for p in ["serial", "graph:5", "lazy"] {
            for rate in [50.0, 400.0] {
                let c = cfg(p, rate, 400, 5);
                let (a, b) = (run(&npu, &c), run(&table, &c));
                let err = (b.latency_ms.mean - a.latency_ms.mean).abs() / a.latency_ms.mean;
                eprintln!(
                    "{model} {p} at {rate}: NPU {:.3} ms, table {:.3} ms mean ({:+.2}%)",
                    a.latency_ms.mean,
                    b.latency_ms.mean,
                    100.0 * err
                );
                assert!(err < 0.01, "{model} {p} at {rate}: {err}");
            }
        }
    }
}

#[test]
fn a_table_that_does_not_fit_the_run_is_refused_naming_the_file_and_field() {
    let dir = crate::fresh_dir("table-refused");
    let (npu, _) = npu_and_table("resnet50");
    let m = npu.model.clone();
    let good = dir.join("resnet50.json");
    npu.profile.save(&good).unwrap();
    let refuse = |p: &lazybatch::profile::Profile, mb: u32, model: &lazybatch::graph::Model| {
        let f = dir.join("edited.json");
        p.save(&f).unwrap();
        let mut d = TableDevice::load(&f).unwrap();
        use lazybatch::device::Device;
        d.prepare(model, mb).unwrap_err().to_string()
    };
    let e = refuse(&npu.profile, 64, &zoo::load("mobilenet").unwrap());
    assert!(
        e.contains(
            "edited.json: model: the table is for 'resnet50', the run's model is 'mobilenet_v1'"
        ),
        "{e}"
    );
    let e = refuse(&npu.profile, 128, &m);
    assert!(
        e.contains("max_batch: the table reaches batch 64, the run asks for max batch 128"),
        "{e}"
    );
    let mut renamed = npu.profile.clone();
    renamed.nodes[3].name = "other".into();
    let e = refuse(&renamed, 64, &m);
    assert!(
        e.contains("nodes[3].name: 'other' where the model's node 3 is"),
        "{e}"
    );
    let mut short = npu.profile.clone();
    short.nodes[5].latency_ns.pop();
    let e = refuse(&short, 64, &m);
    assert!(
        e.contains("nodes[5].latency_ns: 63 values, max_batch says 64"),
        "{e}"
    );
    let mut fewer = npu.profile.clone();
    fewer.nodes.pop();
    let e = refuse(&fewer, 64, &m);
    assert!(e.contains("nodes: 73 rows, the model has 74 nodes"), "{e}");
    // a level that is neither a number nor "passes": the file's line and the field
    let f = dir.join("bad-level.json");
    let text = serde_json::to_string_pretty(&npu.profile).unwrap();
    std::fs::write(
        &f,
        text.replacen("\"model\"", "\"level\": \"fast\",\n  \"model\"", 1),
    )
    .unwrap();
    let e = TableDevice::load(&f).unwrap_err().to_string();
    assert!(
        e.contains("bad-level.json")
            && e.contains("level: \"fast\" is neither a number nor \"passes\""),
        "{e}"
    );
    for level in [0.0, -1.0, 1e9] {
        let mut set = npu.profile.clone();
        set.level = Some(lazybatch::profile::Level::Factor(level));
        let e = refuse(&set, 64, &m);
        assert!(
            e.contains(&format!(
                "level: {level}: the factor every node is priced at must be in (0, 100]"
            )),
            "{e}"
        );
    }
    let idle = |gap_ns: u64, n: usize| lazybatch::profile::AfterIdle {
        gap_ns,
        extra_ns: vec![0; n],
    };
    let mut rows = npu.profile.clone();
    rows.after_idle = vec![idle(1_000_000, 74), idle(4_000_000, 70)];
    let e = refuse(&rows, 64, &m);
    assert!(
        e.contains("after_idle[1].extra_ns: 70 values, the table has 74 nodes"),
        "{e}"
    );
    rows.after_idle = vec![idle(4_000_000, 74), idle(4_000_000, 74)];
    let e = refuse(&rows, 64, &m);
    assert!(
        e.contains("after_idle[1].gap_ns: 4000000 after 4000000: the gaps must ascend"),
        "{e}"
    );
    // a truncated file: where JSON stops making sense
    let text = std::fs::read_to_string(&good).unwrap();
    let cut = dir.join("cut.json");
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    let e = TableDevice::load(&cut).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:", cut.display())), "{e}");
    // and through the command line, naming the flag's file
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args(["run", "--model", "gnmt", "--policy", "lazy", "--rate", "10"])
        .arg("--device")
        .arg(format!("profile:{}", good.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("model: the table is for 'resnet50', the run's model is 'gnmt'"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn the_command_line_runs_a_saved_table_as_a_device() {
    let dir = crate::fresh_dir("table-cli");
    let f = dir.join("resnet50.json");
    let lb = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_lazybatch"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let save = format!("{}", f.display());
    lb(&[
        "profile", "--device", "npu", "--model", "resnet50", "--save", &save,
    ]);
    let device = format!("profile:{save}");
    let run = |d: &str| {
        let out = lb(&[
            "run",
            "--model",
            "resnet50",
            "--device",
            d,
            "--policy",
            "lazy",
            "--rate",
            "800",
            "--requests",
            "500",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        (
            v["latency_ms"].clone(),
            v["merges"].clone(),
            v["device"].clone(),
        )
    };
    let (npu, table) = (run("npu"), run(&device));
    assert_eq!((&npu.0, &npu.1), (&table.0, &table.1));
    assert!(
        table
            .2
            .as_str()
            .unwrap()
            .starts_with(&format!("profile ({save}: npu")),
        "{table:?}"
    );
}

#[test]
fn validate_serves_the_same_arrivals_on_the_cpu_and_on_its_table() {
    let dir = crate::fresh_dir("validate-out");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args([
            "validate",
            "--model",
            "resnet50",
            "--width",
            "0.125",
            "--res",
            "0.25",
            "--device",
            "cpu",
            "--policies",
            "serial,lazy",
            "--load",
            "0.5",
            "--requests",
            "30",
            "--max-batch",
            "4",
            "--reps",
            "1",
            "--repeat",
            "--seed",
            "3",
            "--json",
        ])
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let points = v.as_array().unwrap();
    assert_eq!(points.len(), 2, "{v}");
    // the table the prediction read is kept beside the points, with its passes
    let t = lazybatch::profile::Profile::load(&dir.join("table.json")).unwrap();
    assert_eq!((t.model.as_str(), t.max_batch), ("resnet50@w0.125r0.25", 4));
    assert!(!t.passes_ns.is_empty() && !t.after_idle.is_empty());
    let text = std::fs::read_to_string(dir.join("validate.txt")).unwrap();
    assert!(text.contains("its passes ran"), "{text}");
    for p in points {
        for side in ["measured", "predicted", "repeat"] {
            // every side served (and completed) the same 30 requests
            assert_eq!(p[side]["requests"], 30, "{p}");
            assert_eq!(p[side]["completed"], 30, "{p}");
            assert!(p[side]["latency_ms"]["mean"].as_f64().unwrap() > 0.0, "{p}");
        }
        assert!(p["measured"]["device"].as_str().unwrap().starts_with("cpu"));
        assert!(p["predicted"]["device"]
            .as_str()
            .unwrap()
            .starts_with("profile"));
        // the error and the spread are each the other side against the measurement,
        // (other − measured) / measured, recomputed here from the JSON's own figures
        let fig = |side: &str, stat: &str| p[side]["latency_ms"][stat].as_f64().unwrap();
        for stat in ["mean", "p99"] {
            let (m, pr, again) = (
                fig("measured", stat),
                fig("predicted", stat),
                fig("repeat", stat),
            );
            let e = p["error"][stat].as_f64().unwrap();
            assert!((e - (pr - m) / m).abs() < 1e-9, "error.{stat} {e}: {p}");
            let r = p["run_to_run"][stat].as_f64().unwrap();
            assert!(
                (r - (again - m) / m).abs() < 1e-9,
                "run_to_run.{stat} {r}: {p}"
            );
        }
        assert!(p["repeat"]["device"].as_str().unwrap().starts_with("cpu"));
        // how late the machine delivered the requests: reported, whatever it was (a busy
        // machine delivers them late; that is a measurement, never a failure)
        let lag = &p["delivery_lag_ms"];
        let (mean, max) = (lag["mean"].as_f64().unwrap(), lag["max"].as_f64().unwrap());
        assert!(0.0 <= mean && mean <= max, "{p}");
        assert_eq!(lag["late"], max > 50.0, "{p}");
        assert!(p["repeat_delivery_lag_ms"]["max"].as_f64().unwrap() >= 0.0);
        // the instants the prediction served: one per request, in order
        let at: Vec<u64> = serde_json::from_value(p["delivered_ns"].clone()).unwrap();
        assert_eq!(at.len(), 30, "{p}");
        assert!(at.windows(2).all(|w| w[0] <= w[1]), "{p}");
    }
    // its measured runs replay offline on the table it kept: the same arrivals (seed 3, checked
    // by their fingerprint) on the same table predict exactly what the live prediction did
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args([
            "validate", "--model", "resnet50", "--width", "0.125", "--res", "0.25",
        ])
        .args(["--max-batch", "4", "--json", "--device"])
        .arg(format!("profile:{}", dir.join("table.json").display()))
        .arg("--measured")
        .arg(dir.join("validate.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("fingerprint"), "{err}");
    let replay: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let replay = replay.as_array().unwrap();
    assert_eq!(replay.len(), points.len(), "{replay:?}");
    for (r, p) in replay.iter().zip(points) {
        assert_eq!(r["seed"], 3, "{r}");
        assert_eq!(r["policy"], p["policy"]);
        assert_eq!(
            r["predicted"]["latency_ms"], p["predicted"]["latency_ms"],
            "{r}\n{p}"
        );
        assert_eq!(r["predicted"]["merges"], p["predicted"]["merges"]);
    }
    // the NPU model is not a real device: validate refuses it
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args(["validate", "--model", "resnet50", "--device", "npu"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("--device cpu or --device cuda"), "{err}");
}

#[test]
fn a_real_devices_table_measures_a_pass_after_each_idle_gap_and_passes_back_to_back() {
    use lazybatch::device::measure::{Order, Sampling, IDLE_GAPS_MS};
    use lazybatch::profile::Profile;
    let m = crate::small("mobilenet");
    let mut dev = lazybatch::device::cpu::CpuDevice::new(1);
    let how = Sampling {
        reps: 1,
        order: Order::InModelOrder,
        progress: lazybatch::progress::Mode::Off,
        variation: true,
    };
    let t = Profile::measure_sampled(&mut dev, &m, 2, &[m.ref_lengths()], how).unwrap();
    let gaps: Vec<u64> = t.after_idle.iter().map(|r| r.gap_ns).collect();
    let want: Vec<u64> = IDLE_GAPS_MS.iter().map(|g| g * 1_000_000).collect();
    assert_eq!(gaps, want);
    for r in &t.after_idle {
        assert_eq!(r.extra_ns.len(), m.nodes.len());
        // a difference of two medians of a node's runs, each far below a second
        assert!(r.extra_ns.iter().all(|e| e.abs() < 1_000_000_000), "{r:?}");
    }
    // passes back to back, sorted: at least 21, at most 101
    let n = t.passes_ns.len();
    assert!((21..=101).contains(&n), "{n} passes");
    assert!(t.passes_ns.windows(2).all(|w| w[0] <= w[1]));
    assert!(t.passes_ns[0] > 0);
    // what the table device reads back: the file fits the model
    let dir = crate::fresh_dir("table-idle");
    let f = dir.join("t.json");
    t.save(&f).unwrap();
    let mut d = TableDevice::load(&f).unwrap();
    use lazybatch::device::Device;
    d.prepare(&m, 2).unwrap();
    assert_eq!(d.table().after_idle, t.after_idle);
    // without idle rows asked for, none
    let how = Sampling {
        variation: false,
        ..how
    };
    let t = Profile::measure_sampled(&mut dev, &m, 2, &[m.ref_lengths()], how).unwrap();
    assert!(t.after_idle.is_empty() && t.passes_ns.is_empty());
}
