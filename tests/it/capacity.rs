//! `capacity`: the search against a queue whose answer is known in closed form, and the command
//! line's table, JSON, picture and refusals.

use lazybatch::device::measure::Sampling;
use lazybatch::device::open::Opened;
use lazybatch::device::table::TableDevice;
use lazybatch::graph::zoo;
use lazybatch::policy::Spec;
use lazybatch::profile::Profile;
use lazybatch::progress::Mode;
use lazybatch::run::capacity::{search_all, Bound, Search};
use lazybatch::run::{RunSpec, Testbed, TestbedOptions};
use lazybatch::time::Nanos;
use std::process::Command;

/// P(W ≤ t) for the waiting time of an M/D/1 queue (arrival rate `lam` per ms, service `d` ms):
/// Erlang's formula, (1 − ρ) Σ_{k=0}^{⌊t/d⌋} (λ(kd − t))^k / k! · e^{−λ(kd − t)}.
fn md1_wait_cdf(lam: f64, d: f64, t: f64) -> f64 {
    let mut sum = 0.0;
    let mut fact = 1.0;
    for k in 0..=(t / d).floor() as i32 {
        if k > 0 {
            fact *= f64::from(k);
        }
        let x = lam * (f64::from(k) * d - t);
        sum += x.powi(k) / fact * (-x).exp();
    }
    (1.0 - lam * d) * sum
}

/// The highest rate (req/s) at which an M/D/1 queue's p99 sojourn time is at most `p99_ms`.
fn md1_capacity(d: f64, p99_ms: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1.0 / d);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if md1_wait_cdf(mid, d, p99_ms - d) >= 0.99 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo * 1e3
}

#[test]
fn the_erlang_formula_here_is_right_where_it_is_easy_to_check() {
    // no wait with probability 1 − ρ; below one service time the sum is its first term
    assert!((md1_wait_cdf(0.05, 9.0, 0.0) - 0.55).abs() < 1e-12);
    assert!((md1_wait_cdf(0.05, 9.0, 4.0) - 0.55 * (0.05f64 * 4.0).exp()).abs() < 1e-12);
    // its mean is Pollaczek–Khinchine's ρD / (2(1 − ρ)) (3.68 ms here): ∫ (1 − F) over 15 D,
    // where the formula is still stable and F is within 1e-9 of 1
    let (lam, d, n) = (0.05, 9.0, 13_500);
    let h = 15.0 * d / f64::from(n);
    let mean: f64 = (0..n)
        .map(|i| (1.0 - md1_wait_cdf(lam, d, (f64::from(i) + 0.5) * h)) * h)
        .sum();
    let pk = lam * d * d / (2.0 * (1.0 - lam * d));
    assert!((mean / pk - 1.0).abs() < 1e-6, "{mean} against {pk}");
}

/// Nine nodes of 1 ms at any batch (`tests/fixtures/eight_nodes.toml` on a uniform table), and
/// a template of `requests` under serial: one request at a time is an M/D/1 queue, D = 9 ms.
fn nine_ms(requests: usize) -> (Testbed, RunSpec) {
    let m = zoo::load(&format!(
        "{}/tests/fixtures/eight_nodes.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert_eq!(m.nodes.len(), 9);
    let table = TableDevice::from_profile(
        Profile::uniform(&m, 8, Nanos::from_ms(1.0)),
        "one ms a node",
    );
    let opts = TestbedOptions {
        max_batch: crate::mb(8),
        coverage: 90.0,
        profile: None,
        sampling: Sampling::default(),
    };
    let bench = Testbed::open(m, Opened::Table(table), &opts).unwrap();
    let template = RunSpec {
        policy: Spec::parse("serial", 8).unwrap(),
        rate: 1.0,
        arrivals: lazybatch::traffic::Process::Poisson,
        classes: None,
        shed: false,
        abandon_late: false,
        admit: Default::default(),
        requests,
        sla: crate::sla(100.0),
        seed: 1,
        max_batch: crate::mb(8),
        max_pending: lazybatch::runtime::MaxPending::new(100_000).unwrap(),
        colocated: None,
        replicas: lazybatch::engine::Replicas::ONE,
    };
    (bench, template)
}

#[test]
fn the_search_finds_an_md1_queues_capacity_within_its_precision_and_the_noise() {
    // an M/D/1 queue with D = 9 ms, whose p99 sojourn is 45 ms at 62.3 req/s (ρ = 0.56)
    let (bench, template) = nine_ms(20_000);
    let how = Search {
        bound: Bound::P99Ms(45.0),
        precision: 0.02,
        seeds: 4,
        lowest_share: lazybatch::run::capacity::lowest_share(true),
    };
    let caps = search_all(&bench, &[template], &how, Mode::Off).unwrap();
    let want = md1_capacity(9.0, 45.0);
    assert!((want - 62.3).abs() < 0.1, "{want}");
    let got = caps[0].capacity_rps.unwrap();
    eprintln!("M/D/1 capacity at p99 45 ms: found {got:.2} req/s, theory {want:.2}");
    // the search stops within 2%; four seeds of 20,000 requests estimate a p99 to a few
    // percent, which moves the rate that meets it by about as much
    assert!(
        (got / want - 1.0).abs() < 0.05,
        "capacity {got:.2} req/s against M/D/1's {want:.2}"
    );
    // what it reports holds: the capacity's probe meets the bound, and a probe above it fails
    let c = &caps[0];
    assert!(c.at.latency_ms.p99 <= 45.0 && c.at.rejected == 0);
    assert!(c
        .probes
        .iter()
        .any(|p| !p.ok && p.rate > got && p.rate <= got * 1.02 + 1e-9));
}

#[test]
fn each_probe_is_the_mean_over_its_seeds_and_replicas_start_at_their_serial_capacity() {
    let (bench, one) = nine_ms(2_000);
    let how = |seeds| Search {
        bound: Bound::P99Ms(45.0),
        precision: 0.1,
        seeds,
        lowest_share: lazybatch::run::capacity::lowest_share(true),
    };
    let serial = bench.serial_capacity();
    assert!((serial - 1000.0 / 9.0).abs() < 1e-6, "{serial}");
    let first = |template: &RunSpec, seeds| {
        let caps = search_all(
            &bench,
            std::slice::from_ref(template),
            &how(seeds),
            Mode::Off,
        );
        caps.unwrap().remove(0).probes.remove(0)
    };
    // the search starts at the serial capacity, and a probe of two seeds is not one seed's run
    // twice: seed 2's arrivals differ from seed 1's (its template says seed 1)
    let p1 = first(&one, 1);
    let p2 = first(&one, 2);
    assert_eq!(p1.rate, serial);
    assert_eq!(p2.rate, serial);
    assert_ne!(p1.stats, p2.stats, "a second seed changed nothing");
    // … its seeds are 1..=seeds, whatever the template's
    let seed9 = RunSpec {
        seed: 9,
        ..one.clone()
    };
    assert_eq!(first(&seed9, 1).stats, p1.stats);
    // N replicas start from N × one server's serial capacity
    let three = RunSpec {
        replicas: lazybatch::engine::Replicas::new(3, lazybatch::engine::Router::RoundRobin)
            .unwrap(),
        ..one.clone()
    };
    assert_eq!(first(&three, 1).rate, 3.0 * serial);
}

fn lazybatch(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn capacity_prints_every_policy_as_a_table_json_and_a_picture() {
    let dir = std::env::temp_dir().join(format!("lazybatch-capacity-{}", std::process::id()));
    let args = [
        "capacity",
        "--model",
        "resnet50",
        "--device",
        "npu",
        "--policies",
        "serial,graph:5,lazy",
        "--p99-ms",
        "20",
        "--requests",
        "2000",
        "--json",
        "--out",
    ];
    let mut v: Vec<&str> = args.to_vec();
    let d = dir.to_str().unwrap().to_string();
    v.push(&d);
    let o = lazybatch(&v);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let arr: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let arr = arr.as_array().unwrap();
    let policies: Vec<&str> = arr.iter().map(|c| c["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["serial", "graph:5", "lazy"]);
    for c in arr {
        let cap = c["capacity_rps"].as_f64().unwrap();
        assert!(cap > 0.0, "{c}");
        assert!(c["at_capacity"]["latency_ms"]["p99"].as_f64().unwrap() <= 20.0);
        // the capacity is a probe that met the bound
        let probes = c["probes"].as_array().unwrap();
        assert!(probes
            .iter()
            .any(|p| p["rate_rps"].as_f64() == Some(cap) && p["ok"] == true));
    }
    let svg = std::fs::read_to_string(dir.join("capacity.svg")).unwrap();
    roxmltree::Document::parse(&svg).unwrap();
    assert!(svg.contains("the bound"));
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("capacity.json")).unwrap()).unwrap();
    assert_eq!(saved.as_array().unwrap().len(), 3);
    std::fs::remove_dir_all(&dir).unwrap();
    // the table: a header, a row per policy
    let o = lazybatch(&[
        "capacity",
        "--model",
        "resnet50",
        "--device",
        "npu",
        "--policies",
        "serial,lazy",
        "--violations",
        "1",
        "--sla-ms",
        "10",
        "--requests",
        "2000",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("capacity at SLA violations ≤ 1% at 10 ms"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("serial ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("lazy ")), "{text}");
}

#[test]
fn a_token_bound_searches_a_decoder_models_first_token_and_refuses_a_model_without_one() {
    // GNMT's first token under a 100 ms p99: every probe's own p99 time to first token decides
    let o = lazybatch(&[
        "capacity",
        "--model",
        "gnmt",
        "--device",
        "npu",
        "--policies",
        "serial,lazy",
        "--ttft-p99-ms",
        "100",
        "--requests",
        "400",
        "--seeds",
        "1",
        "--json",
        "--progress",
        "off",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for row in v.as_array().unwrap() {
        assert_eq!(row["bound"]["ttft_p99_ms"].as_f64(), Some(100.0));
        let cap = row["capacity_rps"].as_f64().expect("a capacity");
        assert!(cap > 0.0);
        // the bounded figure is the first token's, not the whole request's
        let at = &row["at_capacity"];
        let ttft = at["ttft_ms"]["p99"].as_f64().unwrap();
        assert!(ttft <= 100.0, "{row}");
        assert!(at["latency_ms"]["p99"].as_f64().unwrap() > ttft, "{row}");
        // and each probe is judged by it
        for p in row["probes"].as_array().unwrap() {
            let ok = p["ttft_ms"].as_f64().unwrap() <= 100.0 && p["rejected"] == 0;
            assert_eq!(p["ok"].as_bool(), Some(ok), "{p}");
        }
    }
    let o = lazybatch(&[
        "capacity",
        "--model",
        "resnet50",
        "--device",
        "npu",
        "--tpot-p99-ms",
        "3",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("bound a model with a decoder"),
        "{err}"
    );
    let o = lazybatch(&[
        "capacity",
        "--model",
        "gnmt",
        "--device",
        "npu",
        "--ttft-p99-ms",
        "0",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("invalid --ttft-p99-ms/--tpot-p99-ms: must be a positive number"),
        "{err}"
    );
}

#[test]
fn bounds_no_rate_can_meet_are_refused_naming_the_flag() {
    let rows: &[(&[&str], &str)] = &[
        (
            &["--p99-ms", "0.1"],
            "invalid --p99-ms: 0.1 ms is not above the single-input latency",
        ),
        (
            &["--violations", "100"],
            "invalid --violations: must be in [0, 100) %",
        ),
        (
            &["--violations", "1", "--sla-ms", "0.1"],
            "invalid --sla-ms: 0.1 ms is not above the single-input latency",
        ),
        (
            &["--p99-ms", "20", "--search-precision", "0"],
            "invalid --search-precision: must be in [0.001, 50] %",
        ),
        (
            // a bracket narrower than a double can tell apart: it searched for ever
            &["--p99-ms", "20", "--search-precision", "1e-15"],
            "invalid --search-precision: must be in [0.001, 50] %, got 0.000000000000001",
        ),
        (
            &["--p99-ms", "20", "--violations", "1"],
            "cannot be used with",
        ),
        (&[], "--p99-ms"),
    ];
    for (extra, needle) in rows {
        let mut args = vec!["capacity", "--model", "resnet50", "--device", "npu"];
        args.extend_from_slice(extra);
        let o = lazybatch(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_token_slo_bounds_both_the_first_token_and_the_tokens_after_it() {
    // GPT-2 under an LLM service's SLO: every probe meets it when both its p99 time to first
    // token and its p99 time per output token are within their bounds, and nothing is rejected
    let o = lazybatch(&[
        "capacity",
        "--model",
        "gpt2",
        "--device",
        "npu",
        "--policies",
        "continuous,chunked:2,lazy",
        "--ttft-p99-ms",
        "60",
        "--tpot-p99-ms",
        "4",
        "--sla-ms",
        "5000",
        "--requests",
        "400",
        "--seeds",
        "1",
        "--json",
        "--progress",
        "off",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (mut met, mut missed) = (0, 0);
    for row in v.as_array().unwrap() {
        assert_eq!(row["bound"]["ttft_p99_ms"].as_f64(), Some(60.0));
        assert_eq!(row["bound"]["tpot_p99_ms"].as_f64(), Some(4.0));
        assert!(
            row["capacity_rps"].as_f64().expect("a capacity") > 0.0,
            "{row}"
        );
        for p in row["probes"].as_array().unwrap() {
            let (ttft, tpot) = (
                p["ttft_ms"].as_f64().unwrap(),
                p["tpot_ms"].as_f64().unwrap(),
            );
            let ok = ttft <= 60.0 && tpot <= 4.0 && p["rejected"] == 0;
            assert_eq!(p["ok"].as_bool(), Some(ok), "{p}");
            (met, missed) = if ok {
                (met + 1, missed)
            } else {
                (met, missed + 1)
            };
        }
    }
    assert!(met > 0 && missed > 0, "{met} {missed}");
    // the table shows both figures
    let o = lazybatch(&[
        "capacity",
        "--model",
        "gpt2",
        "--device",
        "npu",
        "--policies",
        "continuous",
        "--ttft-p99-ms",
        "60",
        "--tpot-p99-ms",
        "4",
        "--requests",
        "300",
        "--seeds",
        "1",
        "--progress",
        "off",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("TTFT p99") && text.contains("TPOT p99"),
        "{text}"
    );
    assert!(text.contains("per output token ≤ 4 ms"), "{text}");
}
