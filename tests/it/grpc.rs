//! `lazybatch serve --grpc-listen`: the Open Inference Protocol over gRPC, called with the
//! generated tonic client: outputs equal the in-process ones for raw and typed tensors, the
//! request's id and parameters are honoured, and each bad request gets its gRPC code and is
//! counted as HTTP counts it. (Triton's own gRPC client is in `http_load.rs`.)

use crate::http::{cfg, cpu_bench};
use lazybatch::device::cpu::CpuDevice;
use lazybatch::http::grpc::pb;
use lazybatch::http::{start, ServeOptions};
use lazybatch::run::verify::inputs_and_outputs;
use pb::grpc_inference_service_client::GrpcInferenceServiceClient as Client;
use tonic::Code;

fn options(max_queue: usize) -> ServeOptions {
    ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        grpc: Some("127.0.0.1:0".parse().unwrap()),
        max_queue,
        max_body: 4 << 20,
        max_inflight: 1 << 30,
        max_connections: 1024,
        timeouts: Default::default(),
    }
}

pub(crate) async fn client(addr: std::net::SocketAddr) -> Client<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    Client::new(channel)
}

pub(crate) fn input(name: &str, shape: &[i64]) -> pb::model_infer_request::InferInputTensor {
    pb::model_infer_request::InferInputTensor {
        name: name.into(),
        datatype: "FP32".into(),
        shape: shape.to_vec(),
        parameters: Default::default(),
        contents: None,
    }
}

pub(crate) fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(crate) fn from_le(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn grpc_answers_the_devices_outputs_and_each_bad_request_its_code() {
    let m = crate::onnx::import("mobilenet_style");
    let io = inputs_and_outputs(&m, &mut CpuDevice::new(3), 2, 8, 7).unwrap();
    let server = start(cpu_bench(m), cfg("lazy"), &options(64)).unwrap();
    let addr = server.grpc_addr.unwrap();
    let shape = [1, 3, 32, 32];
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(addr).await;
        // raw tensors (Triton's default), with an id and an SLA parameter
        let sla = pb::InferParameter {
            parameter_choice: Some(pb::infer_parameter::ParameterChoice::DoubleParam(60_000.0)),
        };
        let req = pb::ModelInferRequest {
            model_name: "mobilenet_style".into(),
            id: "mine".into(),
            parameters: [("sla_ms".to_string(), sla)].into(),
            inputs: vec![input("input", &shape)],
            raw_input_contents: vec![le_bytes(&io[0].input)],
            ..Default::default()
        };
        let r = c.model_infer(req.clone()).await.unwrap().into_inner();
        assert_eq!(r.id, "mine");
        assert_eq!(from_le(&r.raw_output_contents[0]), io[0].output);
        // typed contents, no id: the server's key
        let mut typed = input("input", &shape);
        typed.contents = Some(pb::InferTensorContents {
            fp32_contents: io[1].input.clone(),
            ..Default::default()
        });
        let r = c
            .model_infer(pb::ModelInferRequest {
                model_name: "mobilenet_style".into(),
                model_version: "1".into(),
                inputs: vec![typed.clone()],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!r.id.is_empty());
        assert_eq!(from_le(&r.raw_output_contents[0]), io[1].output);
        // gzip-compressed, the same answer; a message that inflates past --max-body-mib (4 MiB
        // here) is refused while it inflates
        use tonic::codec::CompressionEncoding::Gzip;
        let mut zipped = c.clone().send_compressed(Gzip);
        let r = zipped.model_infer(req.clone()).await.unwrap().into_inner();
        assert_eq!(from_le(&r.raw_output_contents[0]), io[0].output);
        let mut bomb = req.clone();
        bomb.raw_input_contents = vec![vec![0; 5 << 20]];
        let e = zipped.model_infer(bomb.clone()).await.unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        // and the same message sent as it is: refused for its size before any handler
        let e = c.clone().model_infer(bomb).await.unwrap_err();
        assert!(
            matches!(e.code(), Code::OutOfRange | Code::ResourceExhausted),
            "{e:?}"
        );
        // the bad ones: each its code and a message that says what is wrong
        let mut both = req.clone();
        both.inputs = vec![typed];
        let mut nan = req.clone();
        nan.raw_input_contents = vec![le_bytes(&vec![f32::NAN; io[0].input.len()])];
        let mut short = req.clone();
        short.raw_input_contents = vec![le_bytes(&io[0].input[..100])];
        let mut bad_sla = req.clone();
        bad_sla.parameters.insert(
            "sla_ms".into(),
            pb::InferParameter {
                parameter_choice: Some(pb::infer_parameter::ParameterChoice::DoubleParam(-1.0)),
            },
        );
        let mut other_model = req.clone();
        other_model.model_name = "resnet50".into();
        let mut other_version = req.clone();
        other_version.model_version = "2".into();
        for (r, code, says) in [
            (both, Code::InvalidArgument, "give the values once"),
            (nan, Code::InvalidArgument, "not a finite 32-bit float"),
            (short, Code::InvalidArgument, "values for shape"),
            (bad_sla, Code::InvalidArgument, "sla_ms"),
            (other_model, Code::NotFound, "unknown model 'resnet50'"),
            (other_version, Code::NotFound, "unknown version '2'"),
        ] {
            let e = c.model_infer(r).await.unwrap_err();
            assert_eq!(e.code(), code, "{e:?}");
            assert!(e.message().contains(says), "{says}: {e:?}");
        }
        // metadata and readiness as over HTTP
        let meta = c
            .model_metadata(pb::ModelMetadataRequest {
                name: "mobilenet_style".into(),
                version: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(meta.inputs[0].shape, shape);
        let ready = c
            .model_ready(pb::ModelReadyRequest {
                name: "mobilenet_style".into(),
                version: "1".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(ready.ready);
        // a model it does not serve: not ready, as Triton answers (not NOT_FOUND)
        let unknown = c
            .model_ready(pb::ModelReadyRequest {
                name: "no_such_model".into(),
                version: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!unknown.ready);
        let stats = c
            .model_statistics(pb::ModelStatisticsRequest::default())
            .await
            .unwrap()
            .into_inner();
        let m = &stats.model_stats[0];
        assert_eq!(m.inference_count, 3);
        // per batch size, as over HTTP: the batches that entered add up to the executions,
        // their members to the inferences
        let batches: u64 = m
            .batch_stats
            .iter()
            .map(|b| b.compute_infer.as_ref().unwrap().count)
            .sum();
        let members: u64 = m
            .batch_stats
            .iter()
            .map(|b| b.batch_size * b.compute_infer.as_ref().unwrap().count)
            .sum();
        assert_eq!((batches, members), (m.execution_count, 3), "{m:?}");
    });
    // counted as HTTP counts: three completed, four bad requests (the unknown model and version
    // are not requests of the model served, as over HTTP), and the two messages tonic refused
    // for their size before any handler ran (the bomb while it inflated) as too large
    let (_, text) = crate::http::call(server.addr, "GET", "/metrics", "");
    for (outcome, n) in [("completed", 3), ("bad_request", 4), ("too_large", 2)] {
        let line = format!("outcome=\"{outcome}\"}} {n}");
        assert!(text.contains(&line), "{line}: {text}");
    }
    assert_eq!(server.shutdown().unwrap().stats().completed, 3);
}

#[test]
fn grpc_refusals_are_unavailable_and_counted_and_a_shutdown_ends_grpc_too() {
    // VGG-16 on the NPU model takes milliseconds a request: with room for one in the server,
    // of eight sent at once some are refused UNAVAILABLE (queue full), the rest complete
    let m = lazybatch::graph::zoo::load("vgg16").unwrap();
    let bench = lazybatch::run::Testbed::new(m, Default::default(), crate::mb(8), 90.0).unwrap();
    let server = start(bench, cfg("lazy"), &options(1)).unwrap();
    let addr = server.grpc_addr.unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let codes: Vec<Code> = rt.block_on(async {
        let c = client(addr).await;
        let req = pb::ModelInferRequest {
            model_name: "vgg16".into(),
            inputs: vec![input("image", &[1, 3, 224, 224])],
            raw_input_contents: vec![le_bytes(&vec![0.5; 3 * 224 * 224])],
            ..Default::default()
        };
        let calls = (0..8).map(|_| {
            let mut c = c.clone();
            let req = req.clone();
            tokio::spawn(async move {
                c.model_infer(req)
                    .await
                    .map_or_else(|e| e.code(), |_| Code::Ok)
            })
        });
        let mut codes = Vec::new();
        for h in calls.collect::<Vec<_>>() {
            codes.push(h.await.unwrap());
        }
        codes
    });
    let ok = codes.iter().filter(|&&c| c == Code::Ok).count();
    let refused = codes.iter().filter(|&&c| c == Code::Unavailable).count();
    assert_eq!(ok + refused, 8, "{codes:?}");
    assert!(ok >= 1 && refused >= 1, "{codes:?}");
    let (_, text) = crate::http::call(server.addr, "GET", "/metrics", "");
    let line = format!("outcome=\"queue_full\"}} {refused}");
    assert!(text.contains(&line), "{line}: {text}");
    let t0 = std::time::Instant::now();
    assert_eq!(server.shutdown().unwrap().stats().completed, ok as u64);
    assert!(t0.elapsed() < std::time::Duration::from_secs(20));
    // the gRPC port is closed with the server
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// A gRPC call still waiting in the engine when the shutdown's deadline passes is dropped, the
/// server says so, and the request is counted (abandoned) all the same.
#[test]
fn a_grpc_call_still_waiting_at_the_shutdown_deadline_is_dropped_said_and_counted() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    // graph batching waits up to 3 s for a second request: the one call outlasts a 0.3 s
    // shutdown deadline
    let mut child = Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args(["serve", "--model", "resnet50", "--device", "npu"])
        .args(["--policy", "graph:3000", "--shutdown-timeout-s", "0.3"])
        .args(["--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let (http, grpc) = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "serve ended early");
        let after = |key: &str| {
            let at = line.split(key).nth(1)?;
            at.split(|c: char| c == ',' || c.is_whitespace())
                .next()
                .map(str::to_string)
        };
        if let (Some(h), Some(g)) = (after(" at http://"), after("gRPC at ")) {
            break (h.parse().unwrap(), g.parse().unwrap());
        }
    };
    let call = std::thread::spawn(move || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let req = pb::ModelInferRequest {
                model_name: "resnet50".into(),
                inputs: vec![input("image", &[1, 3, 224, 224])],
                raw_input_contents: vec![le_bytes(&vec![0.5; 3 * 224 * 224])],
                ..Default::default()
            };
            client(grpc).await.model_infer(req).await.err()
        })
    });
    // the call is in the server, waiting for its batch
    let t0 = Instant::now();
    while !crate::http::call(http, "GET", "/metrics", "")
        .1
        .contains("lazybatch_requests_in_server 1")
    {
        assert!(t0.elapsed() < Duration::from_secs(10), "never admitted");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{status:?}: {rest}");
    assert!(
        rest.contains("were dropped (--shutdown-timeout-s)"),
        "{rest}"
    );
    assert!(
        call.join().unwrap().is_some(),
        "the dropped call got no answer"
    );
    let mut summary = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut summary)
        .unwrap();
    assert!(
        summary.contains("stopped: completed 0, abandoned 1,"),
        "{summary}"
    );
}

/// The standard gRPC health service (`grpc.health.v1`, what `grpc_health_probe` and
/// Kubernetes' gRPC probes call): the server and the inference service SERVING, an unknown
/// service NOT_FOUND, and a watcher told NOT_SERVING as the shutdown begins (tonic then turns
/// new calls away), while a request in flight is still answered.
#[test]
fn the_standard_grpc_health_service_serves_until_the_shutdown_begins() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    // graph batching holds a lone request for its 1.5-s window: the shutdown waits for it
    let bench = lazybatch::run::Testbed::new(
        lazybatch::graph::zoo::load("resnet50").unwrap(),
        Default::default(),
        crate::mb(8),
        90.0,
    )
    .unwrap();
    let server = start(bench, cfg("graph:1500"), &options(64)).unwrap();
    let (http, grpc) = (server.addr, server.grpc_addr.unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let health = || async move {
        let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        HealthClient::new(channel)
    };
    let check = |service: &str| {
        let service = service.to_string();
        rt.block_on(async {
            health()
                .await
                .check(HealthCheckRequest { service })
                .await
                .map(|r| r.into_inner().status)
        })
    };
    assert_eq!(check("").unwrap(), ServingStatus::Serving as i32);
    assert_eq!(
        check("inference.GRPCInferenceService").unwrap(),
        ServingStatus::Serving as i32
    );
    assert_eq!(check("nothing.Here").unwrap_err().code(), Code::NotFound);
    // a watcher of the server's status hears SERVING now
    let mut watch = rt.block_on(async {
        health()
            .await
            .watch(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
    });
    let first = rt.block_on(watch.message()).unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    // a request waits in the batching window; the shutdown begins and waits for it
    let body = serde_json::json!({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 224, 224], "data": vec![0.5f32; 3 * 224 * 224]}]}).to_string();
    let waiting = std::thread::spawn(move || {
        crate::http::call(http, "POST", "/v2/models/resnet50/infer", &body)
    });
    let t0 = std::time::Instant::now();
    while !crate::http::call(http, "GET", "/metrics", "")
        .1
        .contains("lazybatch_requests_in_server 1")
    {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "never admitted"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let stopping = std::thread::spawn(move || server.shutdown().unwrap().stats().completed);
    // the watcher hears NOT_SERVING as the shutdown begins
    let next = rt.block_on(watch.message()).unwrap().unwrap();
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    // a watch never ends by itself: a watcher that stays holds the drain to the shutdown's
    // limit like any open call (30 s here); this one goes
    drop(watch);
    assert_eq!(
        waiting.join().unwrap().0,
        200,
        "the request in flight was answered"
    );
    assert_eq!(stopping.join().unwrap(), 1);
}
