//! Hostile and extreme inputs, one row each: the command, the exit code and the text the
//! error must hold (or, for inputs that are now served, what the output must show). Every case
//! of the review that found silent wraps, hangs and unbounded memory is here.

use crate::fresh_dir;
use std::path::Path;
use std::process::{Command, Output};

fn lazybatch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args(args)
        .output()
        .expect("binary runs")
}

/// Runs `args` and checks its exit code and that stderr holds `needle`, once.
fn exits(args: &[&str], code: i32, needle: &str) {
    let o = lazybatch(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: stderr was {err}");
    assert!(err.contains(needle), "{args:?}: stderr was {err}");
    assert_eq!(
        err.matches(needle).count(),
        1,
        "{args:?} repeats itself: {err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

const RUN: &[&str] = &["run", "--device", "npu", "--model", "resnet50"];

fn run_with(extra: &[&str]) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = RUN.to_vec();
    for e in extra {
        v.push(Box::leak(e.to_string().into_boxed_str()));
    }
    v
}

#[test]
fn device_choices_name_what_is_wrong() {
    let dir = fresh_dir("hostile-devices");
    let garbage = write(&dir, "garbage.json", "{ \"model\": ");
    let rows: &[(&[&str], &str)] = &[
        (&["run", "--model", "resnet50", "--device", "profile:", "--policy", "lazy", "--rate", "10"], "profile:FILE needs the table's file"),
        (&["run", "--model", "resnet50", "--device", "profile:/nonexistent/t.json", "--policy", "lazy", "--rate", "10"], "/nonexistent/t.json"),
        (&["run", "--model", "resnet50", "--device", "npu", "--conv", "fft", "--policy", "lazy", "--rate", "10"], "invalid --conv: unknown convolution path 'fft' (allowed: auto, cudnn, cudnn-legacy, im2col)"),
        (&["run", "--model", "resnet50", "--device", "npu", "--conv", "cudnn", "--policy", "lazy", "--rate", "10"], "invalid --conv: applies to --device cuda, not npu"),
        (&["run", "--model", "resnet50", "--device", "npu", "--precision", "tf32", "--policy", "lazy", "--rate", "10"], "tf32 applies to --device cuda"),
        (&["run", "--model", "resnet50", "--device", "npu", "--profile-order", "sideways", "--policy", "lazy", "--rate", "10"], "invalid --profile-order: 'sideways' (isolated, model)"),
        (&["run", "--model", "resnet50", "--device", "npu", "--profile-variation", "maybe", "--policy", "lazy", "--rate", "10"], "invalid --profile-variation: 'maybe' (on, off)"),
        (&["validate", "--model", "resnet50", "--device", "npu"], "validate holds the simulator against a real device"),
        (&["validate", "--model", "resnet50", "--device", "cpu", "--rates", "10", "--load", "0.5"], "give --rates or --load, not both"),
        (&["serve", "--model", "resnet50", "--device", "npu", "--requests", "5"], "serve takes no --requests: its traffic comes over HTTP"),
        (&["compare", "--model", "resnet50", "--device", "npu", "--repeat"], "--repeat measures a real device's run-to-run spread: a simulated device"),
        (&["serve", "--model", "resnet50", "--device", "npu", "--arrivals", "gamma:2"], "serve takes no --arrivals"),
        (&["serve", "--model", "resnet50,gnmt", "--device", "npu", "--shares", "1,1"], "serve takes no --shares"),
        (&["serve", "--model", "resnet50", "--device", "npu", "--header-timeout-s", "0"], "invalid --header-timeout-s: 0 (seconds, in [0.1, 3600])"),
        // a timeout no request can meet: every one would be 408, health checks too
        (&["serve", "--model", "resnet50", "--device", "npu", "--header-timeout-s", "1e-308"], "invalid --header-timeout-s: 0.000"),
        (&["serve", "--model", "resnet50", "--device", "npu", "--body-timeout-s", "0.05"], "invalid --body-timeout-s: 0.05 (seconds, in [0.1, 3600])"),
        (&["serve", "--model", "resnet50", "--device", "npu", "--body-timeout-s", "nan"], "invalid --body-timeout-s: NaN"),
        (&["serve", "--model", "resnet50", "--device", "npu", "--shutdown-timeout-s", "1e9"], "invalid --shutdown-timeout-s: 1000000000"),
        (&["run", "--model", "resnet50", "--progress", "loud", "--policy", "lazy", "--rate", "10"], "'loud' is not one of auto, bar, lines, off"),
        (&["load", "--url", "http://127.0.0.1:1", "--model", "resnet50", "--rate", "10", "--requests", "5"], "cannot connect to http://127.0.0.1:1/v2/models/resnet50: connection refused"),
    ];
    for (args, needle) in rows {
        exits(args, 2, needle);
    }
    let args = [
        "run", "--model", "resnet50", "--policy", "lazy", "--rate", "10", "--device",
    ];
    let dev = format!("profile:{garbage}");
    let mut v: Vec<&str> = args.to_vec();
    v.push(&dev);
    exits(&v, 2, &format!("{garbage}:1:"));
}

#[test]
fn serve_on_a_busy_port_says_the_address_is_in_use() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let args = [
        "serve", "--model", "resnet50", "--device", "npu", "--listen", &addr,
    ];
    exits(
        &args,
        2,
        &format!("cannot listen on {addr}: the address is in use"),
    );
    drop(held);
}

#[test]
fn flags_out_of_range_name_the_flag_and_the_range() {
    let rows: &[(&[&str], &str)] = &[
        (&["--policy", "lazy", "--rate", "1000", "--sla-ms", "1e300"], "invalid --sla-ms: must be in (0, 86400000] ms (one day), at least 1 ns (1e-6 ms), got 1e300"),
        // an SLA that rounds to 0 ns is refused wherever an SLA is given
        (&["--policy", "lazy", "--rate", "1000", "--sla-ms", "1e-7"], "invalid --sla-ms: must be in (0, 86400000] ms (one day), at least 1 ns"),
        (&["--policy", "lazy", "--rate", "1000", "--classes", "a:1e-7:1"], "a's SLA must be in (0, 86400000] ms (one day), at least 1 ns"),
        (&["--policy", "graph:1e300", "--rate", "1000"], "the window must be in [0, 86400000] ms (one day), got 1e300"),
        (&["--policy", "lazy", "--rate", "1e-300"], "invalid --rate: must be in [1e-6, 1e9] requests/s, got 1e-300"),
        (&["--policy", "lazy", "--rate", "1e10"], "invalid --rate"),
        (&["--policy", "lazy", "--load", "1e300"], "invalid --load: must be in (0, 1000]"),
        (&["--policy", "lazy", "--rate", "1000", "--requests", "2000000000"], "invalid --requests: must be an integer in [1, 1000000000]"),
        (&["--policy", "lazy", "--rate", "1e-6", "--requests", "1000000000"], "longer than lazybatch measures"),
        (&["--policy", "lazy", "--rate", "1000", "--max-batch", "100000"], "exceeds the model's own max_batch 64"),
        (&["--policy", "lazy", "--rate", "1000", "--max-batch", "100000", "--force-max-batch"], "invalid --max-batch: must be an integer in [1, 4096]"),
        (&["--policy", "lazy", "--rate", "1000", "--max-pending", "0"], "invalid --max-pending"),
        (&["--policy", "lazy", "--rate", "1000", "--threads", "0"], "invalid --threads: must be an integer in [1, 1024], got 0"),
        (&["--policy", "lazy", "--rate", "1000", "--threads", "-3"], "invalid --threads: must be an integer in [1, 1024], got -3"),
        (&["--policy", "lazy", "--rate", "1000", "--cuda-graphs"], "invalid --cuda-graphs: applies to --device cuda, not npu"),
        (&["--policy", "lazy", "--rate", "1000", "--coverage", "50"], "--coverage sets the decoder length the predictor assumes, and 'resnet50' has no decoder"),
        (&["--policy", "lazy", "--rate", "1000", "--seed", "1", "--slas", "5"], "--shares and --slas apply to co-located models"),
    ];
    for (extra, needle) in rows {
        exits(&run_with(extra), 2, needle);
    }
    exits(
        &[
            "run", "--device", "npu", "--model", "gnmt", "--policy", "lazy", "--rate", "10",
            "--res", "0.5",
        ],
        2,
        "--res scales image inputs, and 'gnmt' has none",
    );
    // both ways of giving the rates: one would be dropped, so neither is taken
    exits(
        &[
            "compare", "--device", "npu", "--model", "resnet50", "--rates", "1000", "--load", "0.5",
        ],
        2,
        "give --rates or --load, not both",
    );
    exits(
        &[
            "profile",
            "--device",
            "npu",
            "--model",
            "resnet50",
            "--max-batch",
            "5000",
        ],
        2,
        "invalid --max-batch: must be an integer in [1, 4096]",
    );
    exits(
        &[
            "compare", "--device", "npu", "--model", "resnet50", "--seeds", "100000",
        ],
        2,
        "invalid --seeds: must be an integer in [1, 1000]",
    );
}

#[test]
fn files_out_of_range_name_the_file_line_field_and_range() {
    let dir = fresh_dir("hostile-files");
    // a trace line 10^14 s in, and one whose lengths exceed the model's
    let far = write(&dir, "far.trace", "0\n1e17\n");
    exits(
        &run_with(&["--policy", "lazy", "--trace", &far]),
        2,
        "far.trace:2: TIME_MS: must be in [0, 3155760000000] ms (100 years: the clock's horizon, which the run must also end within), got 1e17",
    );
    let long = write(&dir, "long.trace", "0 4294967295 4294967295\n");
    exits(
        &[
            "run", "--device", "npu", "--model", "gnmt", "--policy", "lazy", "--trace", &long,
        ],
        2,
        "long.trace:1: ENC: must be an integer in [1, 80] (the model's maximum), got '4294967295'",
    );
    exits(
        &run_with(&["--policy", "lazy", "--trace", &long, "--requests", "5"]),
        2,
        "--requests does not apply to --trace",
    );
    // an NPU configuration that would make the device five times faster by underflow
    let npu = write(
        &dir,
        "slow.toml",
        "base = \"default\"\nrows = 128\ndram_gbps = 1e-300\n",
    );
    exits(
        &run_with(&["--policy", "lazy", "--rate", "10", "--npu-config", &npu]),
        2,
        "slow.toml:3: dram_gbps: must be in [0.001, 1000000], got 1e-300",
    );
    // a model whose element count overflows, and one whose max_batch does not fit
    let head = "name = \"big\"\n[[node]]\nname = \"x\"\nop = \"input\"\n";
    let huge = write(
        &dir,
        "huge.toml",
        &format!("{head}shape = [16777216, 16777216, 16777216]\n"),
    );
    exits(
        &["profile", "--device", "npu", "--model", &huge],
        2,
        "huge.toml:2: node 'x': op input: too large",
    );
    let mb = write(
        &dir,
        "mb.toml",
        &format!("max_batch = 4294967296\n{head}shape = [4]\n"),
    );
    exits(
        &["profile", "--device", "npu", "--model", &mb],
        2,
        "mb.toml:1: max_batch: expected an integer in [1, 4096]",
    );
    // a missing file says so once
    exits(
        &run_with(&["--policy", "lazy", "--trace", "/nonexistent.trace"]),
        2,
        "No such file or directory (os error 2)",
    );
}

#[test]
fn verify_checks_its_arguments_before_any_work() {
    // the model does not exist: the argument errors must come first
    exits(
        &["verify", "--model", "no-such-model", "--ops"],
        2,
        "--ops compares a CUDA device with the CPU",
    );
    exits(
        &["verify", "--model", "no-such-model", "--tolerance", "-1"],
        2,
        "invalid --tolerance: must be in (0, 1), got -1",
    );
}

#[test]
fn extremes_that_are_served_give_correct_results() {
    // latencies beyond an hour (the histogram's initial range) under a day-long SLA
    let o = lazybatch(&[
        "run",
        "--device",
        "npu",
        "--model",
        "vgg16",
        "--policy",
        "serial",
        "--rate",
        "1e9",
        "--requests",
        "1500000",
        "--max-pending",
        "2000000",
        "--sla-ms",
        "86400000",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let l = &v["latency_ms"];
    assert!(l["max"].as_f64().unwrap() > 3_600_000.0, "{l}");
    assert_eq!(v["completed"], 1_500_000);
    // no percentile above the maximum
    for p in ["p50", "p90", "p95", "p99"] {
        assert!(
            l[p].as_f64().unwrap() <= l["max"].as_f64().unwrap(),
            "{p}: {l}"
        );
    }
    // overload: the pending queue's bound rejects, and says so
    let o = lazybatch(&run_with(&[
        "--policy",
        "lazy",
        "--rate",
        "1e6",
        "--requests",
        "20000",
        "--max-pending",
        "100",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (c, r) = (
        v["completed"].as_u64().unwrap(),
        v["rejected"].as_u64().unwrap(),
    );
    assert!(r > 0 && c + r == 20_000, "{v}");
    assert_eq!(v["rejected_queue_full"], v["rejected"]);
    // a traced run reports the trace's mean rate, not 0: its gaps' (four of 0.5 s over 2 s),
    // not its count over its last arrival (5 / 2 s), its gaps times its span (8) or its count
    // over its span (2.5), and the same when the trace starts late
    let dir = fresh_dir("hostile-trace");
    let t = write(&dir, "t.trace", "0\n500\n1000\n1500\n2000\n");
    let o = lazybatch(&run_with(&["--policy", "lazy", "--trace", &t]));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("trace (mean 2.0 req/s)"), "{out}");
    let late = write(&dir, "late.trace", "60000\n60500\n61000\n61500\n62000\n");
    let o = lazybatch(&run_with(&["--policy", "lazy", "--trace", &late]));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("trace (mean 2.0 req/s)"), "{out}");
}

#[test]
fn request_records_stream_to_a_file() {
    let dir = fresh_dir("hostile-records");
    let f = dir.join("r.csv");
    let o = lazybatch(&run_with(&[
        "--policy",
        "lazy",
        "--rate",
        "1e6",
        "--requests",
        "300",
        "--max-pending",
        "10",
        "--keep-records",
        f.to_str().unwrap(),
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&f).unwrap();
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with("id,model,arrival_ms"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 300, "one line per request");
    let mut ids: Vec<u32> = rows
        .iter()
        .map(|r| r.split(',').next().unwrap().parse().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..300).collect::<Vec<_>>(), "each id once");
    assert!(rows.iter().any(|r| r.ends_with("rejected:queue_full")));
    assert!(rows.iter().any(|r| r.ends_with(",completed")));
}

/// Bytes of memory this machine has available, from `/proc/meminfo` (None: not Linux).
fn available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

#[test]
fn a_plan_larger_than_the_machine_is_refused_before_it_is_allocated() {
    // ResNet-50 on the CPU at batch 4096: 73.6 GiB of activations and scratch; a linear layer
    // of 2^32 weights: 16 GiB drawn and packed, 32 GiB at the peak (each aborted the process)
    let dir = fresh_dir("hostile-plan-too-large");
    let huge = write(
        &dir,
        "huge.toml",
        "name = \"huge\"\nmax_batch = 8\n\n[[node]]\nname = \"x\"\nop = \"input\"\nshape = [65536]\n\n[[node]]\nname = \"fc\"\nop = \"linear\"\ninputs = [\"x\"]\nout_features = 65536\n",
    );
    let cases: [(&[&str], u64); 2] = [
        (
            &[
                "profile",
                "--model",
                "resnet50",
                "--device",
                "cpu",
                "--max-batch",
                "4096",
            ],
            79 << 30,
        ),
        (
            &[
                "verify",
                "--model",
                &huge,
                "--device",
                "cpu",
                "--requests",
                "1",
            ],
            32 << 30,
        ),
    ];
    for (args, need) in cases {
        match available_bytes() {
            Some(have) if have < need => {
                exits(args, 2, "this machine has available: lower the max batch");
            }
            Some(_) | None => crate::say_skipped(&format!(
                "skipped {args:?}: this machine has {:?} bytes available, enough for the plan",
                available_bytes()
            )),
        }
    }
}

#[test]
fn a_hostile_model_name_writes_nothing_outside_out_and_merge_refuses_a_tampered_shard() {
    let dir = fresh_dir("hostile-names");
    let text = std::fs::read_to_string("models/resnet50.toml").unwrap();
    for (name, why) in [
        ("../../ESCAPED", "name: must not start with '.'"),
        ("/tmp/ABSOLUTE", "name: use only [A-Za-z0-9_.+-], got \"/\""),
        ("", "name: must be 1 to 128 characters, got 0"),
        ("a\u{1b}[31m", "name: use only [A-Za-z0-9_.+-]"),
    ] {
        let escaped = name.replace('\u{1b}', "\\u001b");
        let m = text.replacen("name = \"resnet50\"", &format!("name = \"{escaped}\""), 1);
        let file = write(&dir, "m.toml", &m);
        let out = dir.join("out").join("x");
        exits(
            &[
                "compare",
                "--model",
                &file,
                "--device",
                "npu",
                "--requests",
                "50",
                "--rates",
                "100",
                "--policies",
                "lazy",
                "--out",
                out.to_str().unwrap(),
            ],
            2,
            why,
        );
    }
    // nothing was written anywhere: not beside the folder, not under it
    assert!(!dir.join("ESCAPED_lazy_100rps.hgrm").exists());
    assert!(!dir.join("out").exists());
    // a shard.json edited to name its model a path is refused, naming the field
    let shard = dir.join("s0");
    let o = lazybatch(&[
        "compare",
        "--model",
        "resnet50",
        "--device",
        "npu",
        "--requests",
        "50",
        "--rates",
        "100",
        "--policies",
        "lazy",
        "--shard",
        "0/1",
        "--out",
        shard.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = shard.join("shard.json");
    let json = std::fs::read_to_string(&f).unwrap();
    std::fs::write(
        &f,
        json.replacen("\"model\": \"resnet50\"", "\"model\": \"../escaped\"", 1),
    )
    .unwrap();
    let merged = dir.join("merged");
    exits(
        &[
            "merge",
            shard.to_str().unwrap(),
            "--out",
            merged.to_str().unwrap(),
        ],
        2,
        "model: must not start with '.' (the file was edited)",
    );
    assert!(!dir.join("escaped_lazy_100rps.hgrm").exists());
    // figures edited in one place and not the other, and a run count of none, are refused,
    // naming where they disagree (each passed straight through before)
    for (edit, says) in [
        (
            (|v: &mut serde_json::Value| v["entries"][0]["json"]["completed"] = 999_999.into())
                as fn(&mut serde_json::Value),
            "entries[0] (row 0): json.completed 999999 where stats.completed is 50",
        ),
        (
            |v| v["entries"][0]["policy"] = "graph:5".into(),
            "entries[0] (row 0): json.policy \"lazy\" where policy is 'graph:5'",
        ),
        (
            |v| v["entries"][0]["rate"] = 250.0.into(),
            "json.rate_rps 100.0 where rate is 250",
        ),
        (
            |v| {
                v["entries"][0]["stats"]["completed"] = 60.into();
                v["entries"][0]["json"]["completed"] = 60.into();
            },
            "stats: 60 completed and 0 rejected of 50 requests",
        ),
        (
            |v| v["runs"] = 0.into(),
            "runs: a sweep runs each of its rows at least once: 0 runs of 1 rows",
        ),
    ] {
        let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
        edit(&mut v);
        std::fs::write(&f, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        exits(
            &[
                "merge",
                shard.to_str().unwrap(),
                "--out",
                merged.to_str().unwrap(),
            ],
            2,
            says,
        );
    }
    assert!(!merged.exists(), "nothing merged from an edited shard");
}

#[test]
fn merge_refuses_a_shard_file_that_is_not_a_regular_file() {
    // a FIFO blocked merge for ever; /dev/zero was read into 2 GB
    let dir = fresh_dir("hostile-merge-fifo");
    let s = dir.join("s");
    std::fs::create_dir_all(&s).unwrap();
    let fifo = s.join("shard.json");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|st| st.success()) {
        eprintln!("SKIP: no mkfifo on this machine");
        return;
    }
    exits(
        &[
            "merge",
            s.to_str().unwrap(),
            "--out",
            dir.join("o").to_str().unwrap(),
        ],
        2,
        "not a regular file (a shard file must be one)",
    );
}

#[test]
fn a_plan_over_the_processs_own_memory_limit_is_refused_naming_it() {
    // under a 2 GiB address-space limit the host's free memory (tens of GiB) said yes and the
    // plan's 9.2 GiB allocation aborted the process (exit 134)
    let probe = Command::new("prlimit").arg("--version").output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIP: no prlimit on this machine (util-linux)");
        return;
    }
    let o = Command::new("prlimit")
        .args(["--as=2147483648", env!("CARGO_BIN_EXE_lazybatch")])
        .args([
            "run",
            "--device",
            "cpu",
            "--model",
            "resnet50",
            "--policy",
            "lazy",
            "--rate",
            "10",
            "--requests",
            "5",
            "--max-batch",
            "512",
            "--force-max-batch",
            "--reps",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the process's address-space limit still allows (RLIMIT_AS"),
        "{err}"
    );
}

#[test]
fn input_files_must_be_regular_files_below_their_kinds_limit() {
    // a device file or a directory was read forever, or into all memory
    let dir = fresh_dir("hostile-not-files");
    let d = dir.to_str().unwrap();
    let big = write(&dir, "big.toml", &"#".repeat((1 << 20) + 1));
    let cases: [(Vec<&str>, &str); 5] = [
        (
            run_with(&[
                "--policy",
                "lazy",
                "--rate",
                "10",
                "--npu-config",
                "/dev/zero",
            ]),
            "/dev/zero: not a regular file (an NPU configuration must be one)",
        ),
        (
            run_with(&["--policy", "lazy", "--rate", "10", "--npu-config", d]),
            "not a regular file (an NPU configuration must be one)",
        ),
        (
            run_with(&["--policy", "lazy", "--rate", "10", "--npu-config", &big]),
            "1048577 bytes, larger than an NPU configuration may be (1048576 bytes, 1.0 MiB)",
        ),
        (
            run_with(&["--policy", "lazy", "--trace", "/dev/zero"]),
            "/dev/zero: not a regular file (a trace must be one)",
        ),
        (
            vec![
                "run",
                "--device",
                "cpu",
                "--model",
                "resnet50",
                "--width",
                "0.25",
                "--res",
                "0.25",
                "--policy",
                "lazy",
                "--rate",
                "10",
                "--profile",
                d,
            ],
            "not a regular file (a latency table must be one)",
        ),
    ];
    for (args, needle) in cases {
        if args.contains(&"/dev/zero") && !Path::new("/dev/zero").exists() {
            continue;
        }
        exits(&args, 2, needle);
    }
}

#[test]
fn flags_a_device_would_ignore_are_refused() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["run", "--device", "npu", "--model", "resnet50", "--policy", "lazy", "--rate", "10", "--reps", "5"],
            "--reps applies to real devices (cpu, cuda); this run is on a model device (npu), which ignores it",
        ),
        (
            &["run", "--device", "npu", "--model", "resnet50", "--policy", "lazy", "--rate", "10", "--profile-variation", "off"],
            "--profile-variation applies to real devices",
        ),
        (
            &["run", "--device", "cpu", "--model", "resnet50", "--policy", "lazy", "--rate", "10", "--npu-config", "paper"],
            "invalid --npu-config: applies to --device npu (the NPU model), not cpu",
        ),
        (
            &["run", "--device", "npu", "--model", "resnet50", "--policy", "lazy", "--rate", "10", "--dim", "seq=128"],
            "invalid --dim: names an ONNX model's input axis ('seq'); 'resnet50' is not an ONNX model",
        ),
    ];
    for (args, needle) in cases {
        exits(args, 2, needle);
    }
}
