//! `lazybatch serve` beyond single static requests, on a loopback port: a seq2seq model whose
//! requests choose their lengths (the served tokens equal the in-process ones), the binary
//! tensor extension, per-request SLAs and the engine's metrics, a client that goes away
//! mid-request, Triton's own Python client (`scripts/tritonclient-check.py`; skipped without
//! tritonclient unless `REQUIRE_TRITONCLIENT=1`, which CI sets), and the load generator
//! (`lazybatch::http::load`), whose count of requests must match the server's.

use crate::http::{call, cfg, cpu_bench};
use lazybatch::device::cpu::CpuDevice;
use lazybatch::graph::loader::Scale;
use lazybatch::graph::{zoo, Model, Op};
use lazybatch::http::load::{drive, sample, LoadOptions};
use lazybatch::http::{start, ServeOptions, Server};
use lazybatch::run::verify::inputs_and_outputs;
use lazybatch::run::Testbed;
use lazybatch::time::Nanos;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

fn on_cpu(m: Model, policy: &str) -> Server {
    start(cpu_bench(m), cfg(policy), &options()).unwrap()
}

fn on_npu(name: &str, policy: &str) -> Server {
    let bench = Testbed::new(
        zoo::load(name).unwrap(),
        Default::default(),
        crate::mb(8),
        90.0,
    )
    .unwrap();
    start(bench, cfg(policy), &options()).unwrap()
}

fn options() -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        grpc: Some("127.0.0.1:0".parse().unwrap()),
        max_queue: 64,
        max_body: 4 << 20,
        max_inflight: 1 << 30,
        max_connections: 1024,
        timeouts: Default::default(),
    }
}

/// A GNMT an eighth of its width, small enough to decode on the CPU in a test.
fn small_gnmt() -> Model {
    let scale = Scale {
        width: 0.125,
        resolution: 1.0,
    };
    zoo::load_with("gnmt", scale, &Vec::new()).unwrap()
}

fn metric(text: &str, name: &str) -> f64 {
    sample(text, name).unwrap_or_else(|| panic!("{name} not in {text}"))
}

#[test]
fn seq2seq_requests_choose_their_lengths_and_get_the_devices_tokens() {
    let m = small_gnmt();
    let vocab = match m.nodes[1].op {
        Op::Embedding { vocab, .. } => vocab,
        ref op => panic!("{op:?}"),
    };
    // in process: each request alone; its captured outputs are, per decoder step, the logits
    // and then the token they choose
    let io = inputs_and_outputs(&m, &mut CpuDevice::new(99), 3, 8, 5).unwrap();
    let server = on_cpu(m.clone(), "lazy");
    let a = server.addr;
    let (_, meta) = call(a, "GET", &format!("/v2/models/{}", m.name), "");
    let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
    assert_eq!(meta["inputs"][0]["shape"], serde_json::json!([1, -1]));
    assert_eq!(meta["outputs"][0]["datatype"], "INT64");
    assert_eq!(meta["parameters"]["max_decode_steps"], 80);
    let path = format!("/v2/models/{}/infer", m.name);
    // served together: each answer is the tokens it decodes alone
    std::thread::scope(|s| {
        for r in &io {
            let path = &path;
            s.spawn(move || {
                let tokens: Vec<i64> = r
                    .output
                    .chunks_exact(vocab + 1)
                    .map(|c| c[vocab] as i64)
                    .collect();
                // the device reads a token id modulo the vocabulary; the protocol takes it reduced
                let ids: Vec<i64> = r.input.iter().map(|&v| v as i64 % vocab as i64).collect();
                let body = serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, ids.len()], "data": ids}], "parameters": {"decode_steps": tokens.len()}});
                let (st, resp) = call(a, "POST", path, &body.to_string());
                assert_eq!(st, 200, "{resp}");
                let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
                assert_eq!(
                    v["outputs"][0]["shape"],
                    serde_json::json!([1, tokens.len()])
                );
                let got: Vec<i64> =
                    serde_json::from_value(v["outputs"][0]["data"].clone()).unwrap();
                assert_eq!(got, tokens);
            });
        }
    });
    let in_vocab = format!("integers in [0, {vocab})");
    for (body, says) in [
        (
            serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 81], "data": vec![1; 81]}]}),
            "a length in [1, 80]",
        ),
        (
            serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 2], "data": [1, vocab]}]}),
            &in_vocab[..],
        ),
        (
            serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 2], "data": [1, 2]}], "parameters": {"decode_steps": 81}}),
            "decode_steps 81",
        ),
    ] {
        let (st, e) = call(a, "POST", &path, &body.to_string());
        assert!(st == 400 && e.contains(says), "{st} {e}");
    }
    let out = server.shutdown().unwrap();
    assert_eq!(out.stats().completed, 3);
    // graph batching pads a batch to its longest member: each answer still has the request's
    // own length (its input padded with zero rows, its padded decoder steps dropped)
    let server = on_cpu(m.clone(), "graph:200");
    let a = server.addr;
    std::thread::scope(|s| {
        for (enc, dec) in [(3usize, 5usize), (9, 2), (6, 12)] {
            let path = &path;
            s.spawn(move || {
                let body = serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, enc], "data": vec![7; enc]}], "parameters": {"decode_steps": dec}});
                let (st, resp) = call(a, "POST", path, &body.to_string());
                assert_eq!(st, 200, "{resp}");
                let v: serde_json::Value = serde_json::from_str(&resp).unwrap();
                assert_eq!(v["outputs"][0]["shape"], serde_json::json!([1, dec]));
            });
        }
    });
    let out = server.shutdown().unwrap();
    assert_eq!(out.stats().completed, 3);
    assert!(
        out.stats().mean_batch_size > 1.0,
        "the three ran as one padded batch"
    );
}

/// One HTTP/1.1 exchange with the binary tensor extension: (status, JSON part, binary part).
fn call_binary(addr: SocketAddr, path: &str, json: &str, bin: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        json.len(),
        json.len() + bin.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(json.as_bytes()).unwrap();
    s.write_all(bin).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&resp[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = &resp[end + 4..];
    let n = head
        .lines()
        .find_map(|l| l.strip_prefix("inference-header-content-length: "))
        .map_or(body.len(), |n| n.trim().parse().unwrap());
    (
        status,
        String::from_utf8_lossy(&body[..n]).into(),
        body[n..].to_vec(),
    )
}

/// The server's metrics once its engine holds nothing (an empty batch table, no request
/// pending), read again until then; fails after 30 s.
fn settled(a: std::net::SocketAddr) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, text) = call(a, "GET", "/metrics", "");
        let depth = metric(&text, "lazybatch_batch_table_depth");
        let pending = metric(&text, "lazybatch_pending_requests");
        if depth == 0.0 && pending == 0.0 {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "depth {depth}, pending {pending}: {text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn binary_tensors_and_per_request_slas_are_served_and_counted() {
    let m = crate::onnx::import("mobilenet_style");
    let io = inputs_and_outputs(&m, &mut CpuDevice::new(3), 2, 8, 7).unwrap();
    let server = on_cpu(m, "lazy");
    let a = server.addr;
    let path = "/v2/models/mobilenet_style/infer";
    let bytes: Vec<u8> = io[0].input.iter().flat_map(|v| v.to_le_bytes()).collect();
    // a deadline no request can meet: completed, and counted as a violation
    let json = serde_json::json!({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32], "parameters": {"binary_data_size": bytes.len()}}], "outputs": [{"name": "softmax_80", "parameters": {"binary_data": true}}], "parameters": {"sla_ms": 0.000001}}).to_string();
    let (st, head, bin) = call_binary(a, path, &json, &bytes);
    assert_eq!(st, 200, "{head}");
    let v: serde_json::Value = serde_json::from_str(&head).unwrap();
    assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], bin.len());
    let got: Vec<f32> = bin
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, io[0].output);
    // a wrong size is the client's error
    let (st, e, _) = call_binary(a, path, &json, &bytes[..100]);
    assert!(st == 400 && e.contains("binary_data_size"), "{st} {e}");
    // JSON again, with a generous deadline
    let body = serde_json::json!({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32], "data": io[1].input}], "parameters": {"sla_ms": 60000}});
    let (st, resp) = call(a, "POST", path, &body.to_string());
    assert_eq!(st, 200, "{resp}");
    // the engine answers a request before it pops the batch table: read the metrics once it has
    let text = settled(a);
    assert_eq!(metric(&text, "lazybatch_sla_violations_total"), 1.0);
    assert_eq!(metric(&text, "lazybatch_queue_seconds_count"), 2.0);
    assert_eq!(metric(&text, "lazybatch_compute_seconds_count"), 2.0);
    let execs = metric(&text, "lazybatch_node_executions_total");
    assert!(execs > 0.0, "{text}");
    // every execution's batch size observed; two requests served alone: a sum equal to the count
    assert_eq!(metric(&text, "lazybatch_batch_size_count"), execs);
    assert!(metric(&text, "lazybatch_batch_size_sum") >= execs);
    assert!(text.contains("lazybatch_preemptions_total 0"), "{text}");
    assert_eq!(server.shutdown().unwrap().stats().completed, 2);
}

#[test]
fn a_client_that_goes_away_is_counted_once_and_leaves_nothing_behind() {
    // graph batching with a 300 ms window holds a lone request long enough for its client to
    // hang up first
    let server = on_npu("resnet50", "graph:300");
    let a = server.addr;
    let body = serde_json::json!({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224], "data": vec![0.25f32; 3 * 224 * 224]}]}).to_string();
    {
        let mut s = TcpStream::connect(a).unwrap();
        let req = format!(
            "POST /v2/models/resnet50/infer HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // gone, mid-request
    }
    // the server goes on serving
    let (st, resp) = call(a, "POST", "/v2/models/resnet50/infer", &body);
    assert_eq!(st, 200, "{resp}");
    std::thread::sleep(Duration::from_millis(100));
    let (_, text) = call(a, "GET", "/metrics", "");
    let count = |o: &str| {
        sample(
            &text,
            &format!("lazybatch_requests_total{{model=\"resnet50\",outcome=\"{o}\"}}"),
        )
        .unwrap_or(0.0)
    };
    // each request counted exactly once: the one whose client left is let go of, queued, at
    // the engine's next turn (cancelled), never computed
    assert_eq!(
        (count("completed"), count("cancelled")),
        (1.0, 1.0),
        "{text}"
    );
    assert_eq!(count("abandoned"), 0.0, "{text}");
    assert_eq!(metric(&text, "lazybatch_requests_in_server"), 0.0);
    let out = server.shutdown();
    let st = out.unwrap().stats();
    assert_eq!((st.completed, st.rejected_cancelled), (1, 1), "{st:?}");
}

#[test]
fn the_exchange_holds_nothing_once_every_request_is_answered() {
    let m = crate::onnx::import("mobilenet_style");
    let server = on_cpu(m, "lazy");
    let body = serde_json::json!({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32], "data": vec![0.5f32; 3 * 32 * 32]}]}).to_string();
    for _ in 0..3 {
        let (st, _) = call(
            server.addr,
            "POST",
            "/v2/models/mobilenet_style/infer",
            &body,
        );
        assert_eq!(st, 200);
    }
    assert_eq!(server.held(), (0, 0));
    server.shutdown().unwrap();
}

#[test]
fn tritonclient_gets_the_in_process_outputs_as_json_binary_and_over_grpc() {
    let m = crate::onnx::import("mobilenet_style");
    let io = inputs_and_outputs(&m, &mut CpuDevice::new(3), 1, 8, 7).unwrap();
    let server = on_cpu(m, "lazy");
    let input = std::env::temp_dir().join(format!(
        "lazybatch-triton-input-{}.json",
        std::process::id()
    ));
    std::fs::write(&input, serde_json::to_string(&io[0].input).unwrap()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/tritonclient-check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(server.addr.to_string())
        .arg("mobilenet_style")
        .arg("--input")
        .arg(&input)
        .arg("--grpc")
        .arg(server.grpc_addr.unwrap().to_string())
        .output();
    std::fs::remove_file(&input).ok();
    server.shutdown().unwrap();
    let Some(out) = crate::python_check(out, "REQUIRE_TRITONCLIENT", "tritonclient-check") else {
        return;
    };
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in ["live", "ready", "model_ready", "model_ready_v1"] {
        assert_eq!(v[k], true, "{k}: {v}");
    }
    assert_eq!(v["server_metadata"]["name"], "lazybatch", "{v}");
    assert_eq!(v["config"]["max_batch_size"], 0, "{v}");
    assert_eq!(
        v["config"]["input"][0]["dims"],
        v["metadata"]["inputs"][0]["shape"]
    );
    // each asynchronous answer carries its own request's id
    assert_eq!(
        v["async_ids"],
        serde_json::json!(["req-0", "req-1", "req-2", "req-3"]),
        "{v}"
    );
    // over gRPC: the same answers, ids echoed, a wrong input INVALID_ARGUMENT
    let g = &v["grpc"];
    for k in ["live", "ready", "model_ready", "model_ready_v1"] {
        assert_eq!(g[k], true, "grpc {k}: {v}");
    }
    assert_eq!(g["server_metadata"]["name"], "lazybatch", "{g}");
    // the same tensors and dims over both (protobuf's JSON writes 64-bit integers as strings)
    let text = |v: &serde_json::Value| v.to_string().replace('"', "");
    for k in ["inputs", "outputs"] {
        assert_eq!(text(&g["metadata"][k]), text(&v["metadata"][k]), "{k}");
    }
    assert_eq!(
        text(&g["config"]["input"][0]["dims"]),
        text(&v["config"]["input"][0]["dims"]),
        "{g}"
    );
    assert_eq!(g["id"], "one", "{g}");
    assert_eq!(g["gzip_equal"], true, "{g}");
    assert_eq!(
        g["async_ids"],
        serde_json::json!(["req-0", "req-1", "req-2", "req-3"]),
        "{g}"
    );
    assert_eq!(
        g["wrong_input"]["status"], "StatusCode.INVALID_ARGUMENT",
        "{g}"
    );
    let got: Vec<f32> = serde_json::from_value::<Vec<f64>>(g["output"].clone())
        .unwrap()
        .into_iter()
        .map(|x| x as f32)
        .collect();
    assert_eq!(got, io[0].output, "grpc");
    // the two inferences and the four asynchronous ones over HTTP, counted by the server (the
    // six over gRPC came after); over gRPC, all twelve
    let stats = &v["statistics"]["model_stats"][0];
    assert_eq!(stats["inference_count"], 6, "{v}");
    assert_eq!(
        g["statistics"]["model_stats"][0]["inference_count"], "12",
        "{g}"
    );
    for how in ["json", "binary"] {
        let got: Vec<f32> = serde_json::from_value::<Vec<f64>>(v["outputs"][how].clone())
            .unwrap()
            .into_iter()
            .map(|x| x as f32)
            .collect();
        assert_eq!(got, io[0].output, "{how}");
    }
}

#[test]
fn the_load_generator_counts_what_the_server_counts() {
    let server = on_npu("resnet50", "lazy");
    let m = zoo::load("resnet50").unwrap();
    let traffic = lazybatch::traffic::generate(&m, (Default::default(), 200.0), 40, 3)
        .unwrap()
        .traffic(200.0);
    let opts = LoadOptions {
        url: format!("http://{}", server.addr),
        concurrency: 64,
        sla: Nanos::from_ms(100.0),
        classes: 1,
        seed: 1,
        json_tensors: false,
        timeout: std::time::Duration::from_secs(60),
        max_response: 1 << 20,
    };
    let out = drive(&m, traffic, &opts).unwrap();
    let st = out.record.stats(&out.counters);
    assert_eq!((st.requests, st.completed, out.failed.total()), (40, 40, 0));
    assert!(out.counters.executions >= 40 * m.nodes.len() as u64 / 8);
    assert_eq!(out.policy, "lazy");
    // nothing of the requests stays behind
    assert_eq!(server.held(), (0, 0));
    // the client's latency includes the server's
    let served = server.shutdown().unwrap().stats();
    assert_eq!(served.completed, 40);
    assert!(
        st.latency_ms.mean >= served.latency_ms.mean,
        "{st:?} {served:?}"
    );
    // a model the server does not serve is refused before anything is sent
    let other = on_npu("mobilenet_v1", "lazy");
    let opts = LoadOptions {
        url: format!("http://{}", other.addr),
        ..opts
    };
    let traffic = lazybatch::traffic::generate(&m, (Default::default(), 200.0), 4, 3)
        .unwrap()
        .traffic(200.0);
    let e = drive(&m, traffic, &opts).unwrap_err().to_string();
    assert!(e.contains("unknown model 'resnet50'"), "{e}");
    other.shutdown().unwrap();
}

/// A server that answers `/v2/models/resnet50`'s metadata, and then for each inference either
/// never answers (`silent`) or answers 200 with an endless body: what `load` must not wait on or
/// buffer for ever.
fn bad_server(silent: bool) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || loop {
                let mut head = Vec::new();
                let mut b = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if s.read(&mut b).unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(b[0]);
                }
                let text = String::from_utf8_lossy(&head).into_owned();
                let len: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap_or(0))
                    })
                    .unwrap_or(0);
                let mut body = vec![0u8; len];
                if s.read_exact(&mut body).is_err() {
                    return;
                }
                if text.starts_with("GET /v2/models/resnet50 ") {
                    let meta = r#"{"name":"resnet50","inputs":[{"name":"image","datatype":"FP32","shape":[-1,3,224,224]}],"outputs":[],"parameters":{"device":"fake","policy":"none"}}"#;
                    let r = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{meta}", meta.len());
                    if s.write_all(r.as_bytes()).is_err() {
                        return;
                    }
                } else if text.starts_with("GET ") {
                    if s.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                        .is_err()
                    {
                        return;
                    }
                } else if silent {
                    std::thread::sleep(std::time::Duration::from_secs(30));
                    return;
                } else {
                    // an answer that never ends
                    let _ = s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
                    let chunk = format!("{:x}\r\n{}\r\n", 1 << 16, "x".repeat(1 << 16));
                    while s.write_all(chunk.as_bytes()).is_ok() {}
                    return;
                }
            });
        }
    });
    addr
}

#[test]
fn load_times_out_a_silent_server_and_caps_an_endless_answer_each_counted_by_name() {
    let m = zoo::load("resnet50").unwrap();
    for silent in [true, false] {
        let addr = bad_server(silent);
        let traffic = lazybatch::traffic::generate(&m, (Default::default(), 200.0), 3, 3)
            .unwrap()
            .traffic(200.0);
        let opts = LoadOptions {
            url: format!("http://{addr}"),
            concurrency: 64,
            sla: Nanos::from_ms(100.0),
            classes: 1,
            seed: 1,
            json_tensors: false,
            timeout: std::time::Duration::from_millis(500),
            max_response: 1 << 20,
        };
        let t0 = std::time::Instant::now();
        // a -1 batch axis in the server's metadata (Triton's) is taken as one request a call
        let out = drive(&m, traffic, &opts).unwrap();
        assert!(t0.elapsed() < std::time::Duration::from_secs(20));
        let st = out.record.stats(&out.counters);
        // none of the three reached the record as a rejection by the server
        assert_eq!((st.requests, st.rejected, out.not_sent), (0, 0, 0));
        let want = if silent { (3, 0) } else { (0, 3) };
        assert_eq!(
            (out.failed.timed_out, out.failed.too_large),
            want,
            "{:?} {:?}",
            out.failed,
            out.first_error
        );
    }
}
