//! `lazybatch serve`'s front end, started on a loopback port inside the test and called over
//! plain HTTP/1.1: health, metadata, inference (outputs equal the in-process ones for the same
//! inputs), the protocol's errors, metrics, the bounded queue, and a shutdown that answers
//! every admitted request.

use lazybatch::device::cpu::CpuDevice;
use lazybatch::device::open::Opened;
use lazybatch::http::{start, ServeOptions};
use lazybatch::run::verify::inputs_and_outputs;
use lazybatch::run::{RunSpec, Testbed, TestbedOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

/// One HTTP/1.1 exchange: (status, body).
pub(crate) fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    // a server may answer and close before it reads a whole body (413 for one too large):
    // the write then fails, and its answer is still there to read
    let cut = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        )
    };
    if let Err(e) = s.write_all(req.as_bytes()) {
        assert!(cut(&e), "{method} {path}: {e}");
    }
    let mut raw = Vec::new();
    if let Err(e) = s.read_to_end(&mut raw) {
        assert!(cut(&e) && !raw.is_empty(), "{method} {path}: {e}");
    }
    let resp = String::from_utf8_lossy(&raw).into_owned();
    let status = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, mut rest) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (status, rest.to_string());
    }
    // chunked: sizes in hex, each chunk followed by CRLF, a zero size at the end
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        body.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    (status, body)
}

pub(crate) fn cfg(policy: &str) -> RunSpec {
    RunSpec {
        policy: lazybatch::policy::Spec::parse(policy, 8).unwrap(),
        rate: 1.0,
        arrivals: Default::default(),
        classes: None,
        shed: false,
        abandon_late: false,
        admit: Default::default(),
        requests: 1,
        sla: crate::sla(1000.0),
        seed: 1,
        max_batch: crate::mb(8),
        max_pending: lazybatch::runtime::MaxPending::new(1000).unwrap(),
        colocated: None,
        replicas: lazybatch::engine::Replicas::ONE,
    }
}

/// `m` on the CPU device (seed 99), 8 slots, profiled once.
pub(crate) fn cpu_bench(m: lazybatch::graph::Model) -> Testbed {
    let opts = TestbedOptions {
        max_batch: crate::mb(8),
        coverage: 90.0,
        profile: None,
        sampling: lazybatch::device::measure::Sampling::default(),
    };
    Testbed::open(m, Opened::Real(Box::new(CpuDevice::new(99))), &opts).unwrap()
}

/// A server's options on a loopback port the system picks: room for 64 requests, 1 MiB bodies,
/// 1 GiB in flight, 1,024 connections, the default time limits.
pub(crate) fn loopback() -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        grpc: None,
        max_queue: 64,
        max_body: 1 << 20,
        max_inflight: 1 << 30,
        max_connections: 1024,
        timeouts: Default::default(),
    }
}

fn infer_body(input: &[f32]) -> String {
    serde_json::json!({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32], "data": input}]})
        .to_string()
}

#[test]
fn the_front_end_answers_the_protocol_with_the_devices_outputs() {
    let m = crate::onnx::import("mobilenet_style");
    let io = inputs_and_outputs(&m, &mut CpuDevice::new(3), 3, 8, 7).unwrap();
    let bench = cpu_bench(m);
    let serve = loopback();
    let server = start(bench, cfg("lazy"), &serve).unwrap();
    let a = server.addr;
    assert_eq!(call(a, "GET", "/v2/health/live", "").0, 200);
    assert_eq!(call(a, "GET", "/v2/health/ready", "").0, 200);
    let (st, meta) = call(a, "GET", "/v2/models/mobilenet_style", "");
    assert_eq!(st, 200, "{meta}");
    let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(
        meta["inputs"][0]["shape"],
        serde_json::json!([1, 3, 32, 32])
    );
    assert_eq!(meta["outputs"][0]["shape"], serde_json::json!([1, 10]));
    // inference from several clients at once: each answer is what the device computes alone
    std::thread::scope(|s| {
        for r in &io {
            s.spawn(move || {
                let (st, body) = call(
                    a,
                    "POST",
                    "/v2/models/mobilenet_style/infer",
                    &infer_body(&r.input),
                );
                assert_eq!(st, 200, "{body}");
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                let got: Vec<f32> =
                    serde_json::from_value(v["outputs"][0]["data"].clone()).unwrap();
                assert_eq!(got, r.output);
            });
        }
    });
    // the protocol's errors
    let path = "/v2/models/mobilenet_style/infer";
    for (body, says) in [
        ("{not json", "malformed"),
        (r#"{"inputs": []}"#, "0 inputs"),
        (&infer_body(&[0.0; 5])[..], "5 values"),
        (
            &infer_body(&io[0].input).replace("FP32", "INT64")[..],
            "datatype",
        ),
        (
            &infer_body(&io[0].input).replace("[1,3,32,32]", "[1,3,16,64]")[..],
            "shape",
        ),
    ] {
        let (st, e) = call(a, "POST", path, body);
        assert_eq!(st, 400, "{e}");
        assert!(e.contains("\"error\"") && e.contains(says), "{e}");
    }
    let (st, e) = call(
        a,
        "POST",
        "/v2/models/nope/infer",
        &infer_body(&io[0].input),
    );
    assert!(st == 404 && e.contains("unknown model"), "{st} {e}");
    let big = format!("{{\"inputs\": [{}]}}", "0,".repeat(1 << 20));
    assert_eq!(call(a, "POST", path, &big).0, 413);
    let (st, text) = call(a, "GET", "/metrics", "");
    assert_eq!(st, 200);
    assert!(
        text.contains(
            "lazybatch_requests_total{model=\"mobilenet_style\",outcome=\"completed\"} 3"
        ),
        "{text}"
    );
    assert!(
        text.contains("lazybatch_request_latency_seconds_count{model=\"mobilenet_style\"} 3"),
        "{text}"
    );
    let out = server.shutdown().unwrap();
    assert_eq!(out.stats().completed, 3, "every admitted request answered");
}

#[test]
fn the_npu_model_answers_after_its_modelled_latency_and_says_so() {
    let m = lazybatch::graph::zoo::load("resnet50").unwrap();
    let bench = Testbed::new(m, Default::default(), crate::mb(8), 90.0).unwrap();
    let serve = ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        grpc: None,
        max_queue: 64,
        max_body: 4 << 20,
        max_inflight: 1 << 30,
        max_connections: 1024,
        timeouts: Default::default(),
    };
    let server = start(bench, cfg("lazy"), &serve).unwrap();
    let image = vec![0.5f32; 3 * 224 * 224];
    let body = serde_json::json!({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224], "data": image}]});
    let (st, resp) = call(
        server.addr,
        "POST",
        "/v2/models/resnet50/infer",
        &body.to_string(),
    );
    assert_eq!(st, 200, "{resp}");
    let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
    assert!(v["parameters"]["timing_emulation"].is_string());
    // at least the model's single-input latency passed (0.75 ms on the default configuration)
    assert!(
        v["parameters"]["latency_ms"].as_f64().unwrap() >= 0.7,
        "{v}"
    );
    assert_eq!(server.shutdown().unwrap().stats().completed, 1);
}

#[test]
fn the_server_speaks_what_tritons_tools_ask_for() {
    // GET /v2, the request id echoed, /versions/1/ forms, the model configuration and the
    // statistics extensions, and JSON errors on every unknown route or method
    let server = npu_server("graph:5", Default::default(), 4 << 20);
    let a = server.addr;
    let json = |(st, body): (u16, String)| -> (u16, serde_json::Value) {
        let v = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (st, v)
    };
    let (st, v) = json(call(a, "GET", "/v2", ""));
    assert_eq!(st, 200);
    assert_eq!(v["name"], "lazybatch");
    assert!(v["version"].as_str().is_some_and(|s| !s.is_empty()));
    let ext: Vec<&str> = v["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(ext.contains(&"model_configuration") && ext.contains(&"statistics"));
    // the versioned forms answer as the plain ones; another version is a 404 naming it
    for path in ["/v2/models/resnet50", "/v2/models/resnet50/versions/1"] {
        assert_eq!(call(a, "GET", path, "").0, 200, "{path}");
        assert_eq!(
            call(a, "GET", &format!("{path}/ready"), "").0,
            200,
            "{path}"
        );
    }
    let (st, v) = json(call(a, "GET", "/v2/models/resnet50/versions/2/ready", ""));
    assert_eq!(st, 404);
    assert!(v["error"].as_str().unwrap().contains("version '2'"), "{v}");
    // the configuration: a request's whole shape, one per call, the policy named
    let (st, c) = json(call(a, "GET", "/v2/models/resnet50/config", ""));
    assert_eq!(st, 200, "{c}");
    assert_eq!(c["name"], "resnet50");
    assert_eq!(c["max_batch_size"], 0);
    assert_eq!(c["input"][0]["name"], "image");
    assert_eq!(c["input"][0]["data_type"], "TYPE_FP32");
    assert_eq!(c["input"][0]["dims"], serde_json::json!([1, 3, 224, 224]));
    assert_eq!(c["parameters"]["server_max_batch"]["string_value"], "8");
    assert!(c["parameters"]["policy"]["string_value"]
        .as_str()
        .unwrap()
        .contains('5'));
    // two inferences, one with an id (echoed) and one without (the server's own)
    let image = vec![0.5f32; 3 * 224 * 224];
    let body = |id: Option<&str>| {
        let mut b = serde_json::json!({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224], "data": image}]});
        if let Some(id) = id {
            b["id"] = serde_json::json!(id);
        }
        b.to_string()
    };
    let infer = "/v2/models/resnet50/versions/1/infer";
    let (st, v) = json(call(a, "POST", infer, &body(Some("client-7"))));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["id"], "client-7");
    assert_eq!(v["model_version"], "1");
    let (st, v) = json(call(a, "POST", "/v2/models/resnet50/infer", &body(None)));
    assert_eq!(st, 200, "{v}");
    assert!(v["id"].as_str().is_some_and(|s| !s.is_empty()));
    // one malformed request: a failure in the statistics
    assert_eq!(call(a, "POST", infer, "{").0, 400);
    for path in ["/v2/models/stats", "/v2/models/resnet50/stats"] {
        let (st, s) = json(call(a, "GET", path, ""));
        assert_eq!(st, 200, "{s}");
        let m = &s["model_stats"][0];
        assert_eq!(m["name"], "resnet50");
        assert_eq!(m["inference_count"], 2, "{s}");
        let i = &m["inference_stats"];
        assert_eq!(i["success"]["count"], 2);
        assert_eq!(i["fail"]["count"], 1);
        // the two requests' latencies, split into their queueing and compute times
        let ns = |k: &str| i[k]["ns"].as_u64().unwrap();
        assert!(ns("success") > 0);
        assert_eq!(ns("success"), ns("queue") + ns("compute_infer"), "{s}");
        let execs = m["execution_count"].as_u64().unwrap();
        assert!((1..=2).contains(&execs), "{s}");
        assert!(m["last_inference"].as_u64().unwrap() > 0);
        // per batch size: the batches that entered the model add up to the executions and
        // their members to the inferences, and each size has device time
        let sizes = m["batch_stats"].as_array().unwrap();
        let field = |b: &serde_json::Value, k: &str| b["compute_infer"][k].as_u64().unwrap();
        let batches: u64 = sizes.iter().map(|b| field(b, "count")).sum();
        let members: u64 = sizes
            .iter()
            .map(|b| b["batch_size"].as_u64().unwrap() * field(b, "count"))
            .sum();
        assert_eq!((batches, members), (execs, 2), "{s}");
        assert!(sizes.iter().all(|b| field(b, "ns") > 0), "{s}");
    }
    // unknown routes and methods: the protocol's error object
    for (method, path, status) in [
        ("GET", "/v2/nothing", 404),
        ("GET", "/v2/repository/index", 404),
        ("GET", "/v2/models/resnet50/infer", 405),
        ("DELETE", "/v2/models/resnet50", 405),
    ] {
        let (st, v) = json(call(a, method, path, ""));
        assert_eq!(st, status, "{method} {path}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
    assert_eq!(server.shutdown().unwrap().stats().completed, 2);
}

#[test]
fn a_full_queue_answers_503_and_a_shutdown_answers_everyone_admitted() {
    // VGG-16 on the NPU model takes milliseconds a request: with room for one request in the
    // server, of six sent at once some are turned away with 503 and the rest complete; the
    // shutdown returns once every admitted one was answered
    let m = lazybatch::graph::zoo::load("vgg16").unwrap();
    let bench = Testbed::new(m, Default::default(), crate::mb(8), 90.0).unwrap();
    let serve = ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        grpc: None,
        max_queue: 1,
        max_body: 4 << 20,
        max_inflight: 1 << 30,
        max_connections: 1024,
        timeouts: Default::default(),
    };
    let server = start(bench, cfg("lazy"), &serve).unwrap();
    let a = server.addr;
    let body = serde_json::json!({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224], "data": vec![0.5f32; 3 * 224 * 224]}]}).to_string();
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..6)
            .map(|_| s.spawn(|| call(a, "POST", "/v2/models/vgg16/infer", &body).0))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    let full = statuses.iter().filter(|&&s| s == 503).count();
    assert_eq!(ok + full, 6, "{statuses:?}");
    assert!(ok >= 1 && full >= 1, "{statuses:?}");
    let (_, text) = call(a, "GET", "/metrics", "");
    assert!(
        text.contains(&format!("outcome=\"queue_full\"}} {full}")),
        "{text}"
    );
    assert_eq!(server.shutdown().unwrap().stats().completed, ok as u64);
}

/// A server of ResNet-50 on the NPU model under `policy`, with the time limits `t`.
fn npu_server(
    policy: &str,
    t: lazybatch::http::Timeouts,
    max_body: usize,
) -> lazybatch::http::Server {
    npu_server_with(
        policy,
        ServeOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            grpc: None,
            max_queue: 64,
            max_body,
            max_inflight: 1 << 30,
            max_connections: 1024,
            timeouts: t,
        },
    )
}

fn npu_server_with(policy: &str, serve: ServeOptions) -> lazybatch::http::Server {
    let m = lazybatch::graph::zoo::load("resnet50").unwrap();
    let bench = Testbed::new(m, Default::default(), crate::mb(8), 90.0).unwrap();
    start(bench, cfg(policy), &serve).unwrap()
}

/// The server's `/metrics` text and how many times it was refused first with 503 (counted
/// under `too_many_connections`): a connection closed by the client frees its place only once the
/// server has seen it go, which on a busy machine can take a while.
fn metrics_text(addr: SocketAddr) -> (String, u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut refused = 0;
    loop {
        match call(addr, "GET", "/metrics", "") {
            (200, text) => return (text, refused),
            (503, _) if std::time::Instant::now() < deadline => {
                refused += 1;
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            (status, text) => panic!("/metrics answered {status}: {text}"),
        }
    }
}

/// The count of `outcome` in a `/metrics` text.
fn count_in(text: &str, outcome: &str) -> u64 {
    let key = format!("outcome=\"{outcome}\"");
    text.lines()
        .find(|l| l.starts_with("lazybatch_requests_total") && l.contains(&key))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn admission_comes_before_buffering_connections_and_bodies_in_flight_are_bounded() {
    use std::time::Duration;
    let long = Duration::from_secs(600);
    let server = npu_server_with(
        "lazy",
        ServeOptions {
            listen: "127.0.0.1:0".parse().unwrap(),
            grpc: None,
            max_queue: 64,
            max_body: 1 << 20,
            // one declared 1 MiB body reserves 5 MiB: room for one, not two
            max_inflight: 8 << 20,
            max_connections: 2,
            timeouts: lazybatch::http::Timeouts {
                header: long,
                body: long,
                shutdown: Duration::from_millis(500),
            },
        },
    );
    let a = server.addr;
    // a stalled body that declared 1 MiB and sent one byte holds that byte's charge, not the
    // 5 MiB its declaration would (four such connections held a whole budget for 30 s)
    let mut first = TcpStream::connect(a).unwrap();
    first
        .write_all(b"POST /v2/models/resnet50/infer HTTP/1.1\r\nHost: t\r\nContent-Length: 1048576\r\n\r\n{")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // a legitimate inference (a 0.6 MB body: 3 MB of the 8 once charged) is served beside it
    let image = vec![0.5f32; 3 * 224 * 224];
    let body = serde_json::json!({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224], "data": image}]}).to_string();
    let (st, text) = call(a, "POST", "/v2/models/resnet50/infer", &body);
    assert_eq!(st, 200, "{text}");
    // a body declared over --max-body-mib is answered 413 at once, unread (the inference's
    // connection may still hold the second place for a moment: refused, counted, retried)
    let mut early = 0;
    let answer = loop {
        let mut big = TcpStream::connect(a).unwrap();
        big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        big.write_all(b"POST /v2/models/resnet50/infer HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000000\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        big.read_to_string(&mut answer).unwrap();
        if !answer.contains("too many connections") {
            break answer;
        }
        assert!(early < 100, "the inference's place was never freed");
        early += 1;
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("--max-body-mib"), "{answer}");
    assert!(
        answer.contains("\"error\""),
        "a JSON error object: {answer}"
    );
    // two connections are open (the stalled one, and one more): a third is refused at once
    // with the protocol's error object, before anything of it is read (the second's place is
    // free once the server has closed it; until then, the one more is refused and counted too)
    let mut refusals = 0;
    let hold = loop {
        let mut hold = TcpStream::connect(a).unwrap();
        hold.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        hold.write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 256];
        let n = hold.read(&mut buf).unwrap();
        let head = String::from_utf8_lossy(&buf[..n]).to_string();
        if head.starts_with("HTTP/1.1 200") {
            break hold;
        }
        assert!(head.starts_with("HTTP/1.1 503"), "{head}");
        assert!(
            refusals < 100,
            "the second connection's place was never freed"
        );
        refusals += 1;
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut over = TcpStream::connect(a).unwrap();
    over.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    over.write_all(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut refused = String::new();
    over.read_to_string(&mut refused).unwrap();
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("too many connections"), "{refused}");
    // the counts, read once a connection is free again: every refusal the clients saw
    drop(hold);
    let (text, waited) = metrics_text(a);
    assert_eq!(count_in(&text, "overloaded"), 0);
    assert_eq!(count_in(&text, "too_large"), 1);
    assert_eq!(
        count_in(&text, "too_many_connections"),
        1 + early + refusals + waited
    );
    drop(first);
    let out = server.shutdown().unwrap();
    assert_eq!(out.stats().completed, 1);
}

#[test]
fn a_request_that_is_not_http_is_answered_400_and_counted() {
    let server = npu_server("lazy", Default::default(), 1 << 20);
    let a = server.addr;
    for junk in [
        &b"NOT HTTP AT ALL\r\n\r\n"[..],
        b"GET /v2 HTTP/1.1\r\nBad Header Without Colon\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(a).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s.write_all(junk).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }
    // the counts are those of the connections' ends: read them once both are seen
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (text, _) = metrics_text(a);
        let n = count_in(&text, "malformed");
        if n == 2 || std::time::Instant::now() > deadline {
            assert_eq!(n, 2, "{text}");
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(server.shutdown().unwrap().stats().completed, 0);
}

#[test]
fn half_sent_headers_do_not_hold_a_shutdown_and_slow_clients_are_timed_out() {
    use std::time::{Duration, Instant};
    let ms = Duration::from_millis;
    // headers: a connection that sends part of them is closed after the header timeout
    let server = npu_server(
        "lazy",
        lazybatch::http::Timeouts {
            header: ms(300),
            body: ms(300),
            shutdown: ms(500),
        },
        1 << 20,
    );
    let a = server.addr;
    let mut half = TcpStream::connect(a).unwrap();
    half.write_all(b"POST /v2/models/resnet50/infer HTTP/1.1\r\nHost: t\r\n")
        .unwrap();
    half.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    let _ = half.read_to_end(&mut got);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    // a body that stops arriving: 408 with the protocol's error object, counted
    let mut slow = TcpStream::connect(a).unwrap();
    slow.write_all(b"POST /v2/models/resnet50/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"inputs\":")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut resp = String::new();
    let _ = slow.read_to_string(&mut resp);
    assert!(resp.starts_with("HTTP/1.1 408"), "{resp}");
    assert!(resp.contains("--body-timeout-s"), "{resp}");
    let (_, metrics) = call(a, "GET", "/metrics", "");
    assert!(
        metrics.contains("outcome=\"timed_out\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("requests_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // a body over the limit: 413 with the protocol's error object, counted
    let (st, e) = call(
        a,
        "POST",
        "/v2/models/resnet50/infer",
        &"x".repeat((1 << 20) + 1),
    );
    assert_eq!(st, 413, "{e}");
    assert!(
        e.contains("\"error\"") && e.contains("--max-body-mib"),
        "{e}"
    );
    let (_, metrics) = call(a, "GET", "/metrics", "");
    assert!(metrics.contains("outcome=\"too_large\"} 1"), "{metrics}");
    // a shutdown with a client holding half-sent headers open (and a header timeout too long
    // to close it first): the server still stops within its shutdown deadline
    server.shutdown().unwrap();
    let server = npu_server(
        "lazy",
        lazybatch::http::Timeouts {
            header: Duration::from_secs(600),
            body: Duration::from_secs(600),
            shutdown: ms(500),
        },
        1 << 20,
    );
    let mut hold = TcpStream::connect(server.addr).unwrap();
    hold.write_all(
        b"POST /v2/models/resnet50/infer HTTP/1.1\r\nHost: t\r\nContent-Length: 50\r\n\r\n{",
    )
    .unwrap();
    let mut idle = TcpStream::connect(server.addr).unwrap();
    idle.write_all(b"GET /v2/heal").unwrap();
    std::thread::sleep(ms(100));
    let t0 = Instant::now();
    let out = server.shutdown().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(out.stats().completed, 0);
}

/// What the device exchange holds while a request waits in the engine's queue: its input, and
/// nothing once it is answered.
#[test]
fn a_waiting_requests_input_is_held_until_it_is_answered() {
    use std::time::{Duration, Instant};
    let m = crate::onnx::import("mobilenet_style");
    let serve = loopback();
    // graph batching waits up to 1.5 s for a second request that never comes
    let server = start(cpu_bench(m), cfg("graph:1500"), &serve).unwrap();
    let a = server.addr;
    std::thread::scope(|s| {
        let answer = s.spawn(move || {
            call(
                a,
                "POST",
                "/v2/models/mobilenet_style/infer",
                &infer_body(&[0.5; 3 * 32 * 32]),
            )
        });
        let t0 = Instant::now();
        while server.held() != (1, 0) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "never held: {:?}",
                server.held()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let (st, body) = answer.join().unwrap();
        assert_eq!(st, 200, "{body}");
    });
    assert_eq!(server.held(), (0, 0));
    assert_eq!(server.shutdown().unwrap().stats().completed, 1);
}

/// A connection beyond `--max-connections` is told so (503) whatever it sends: a large request
/// is read and dropped behind the answer (closing with it unread would reset the connection: the
/// client's request would fail to send, and it might see the reset, not the answer), and each
/// refusal's place among the ones being told is free as soon as its client closes, whether it
/// sent a request or nothing — hundreds in a row are each told.
#[test]
fn a_refused_connection_is_told_so_whatever_it_sends_and_hundreds_in_a_row_are() {
    use std::time::Duration;
    let long = Duration::from_secs(600);
    let server = npu_server_with(
        "lazy",
        ServeOptions {
            max_connections: 1,
            timeouts: lazybatch::http::Timeouts {
                header: long,
                body: long,
                shutdown: Duration::from_millis(500),
            },
            ..loopback()
        },
    );
    let a = server.addr;
    // the one place, held by a connection that has sent nothing
    let hold = TcpStream::connect(a).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let told = |request: &[u8]| {
        let mut c = TcpStream::connect(a).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        let sent = c.write_all(request);
        let mut answer = Vec::new();
        let read = c.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert!(sent.is_ok(), "{sent:?} sending {} bytes", request.len());
        assert!(read.is_ok(), "{read:?} after {answer:?}");
        answer
    };
    // 4 MiB: more than the sockets buffer, so the server must read it for it to be sent
    let mut large =
        b"POST /v2/models/resnet50/infer HTTP/1.1\r\nHost: t\r\nContent-Length: 4194304\r\n\r\n"
            .to_vec();
    large.resize(large.len() + (4 << 20), b' ');
    let answer = told(&large);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too many connections"), "{answer}");
    for k in 0..200 {
        let request: &[u8] = if k % 2 == 0 {
            b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n"
        } else {
            b""
        };
        let answer = told(request);
        assert!(
            answer.starts_with("HTTP/1.1 503"),
            "connection {k}: {answer:?}"
        );
    }
    drop(hold);
    let (text, _) = metrics_text(a);
    assert!(count_in(&text, "too_many_connections") >= 201, "{text}");
    server.shutdown().unwrap();
}
