//! Several models behind one server (`serve --model a,b`): one engine over the co-located
//! model, each model under its own name with its own metadata, configuration, statistics and
//! metric labels, and each answer what the model computes alone.

use crate::http::{call, cfg, cpu_bench};
use lazybatch::device::cpu::CpuDevice;
use lazybatch::graph::Model;
use lazybatch::http::{start, ServeOptions};
use lazybatch::run::spec::Colocation;
use lazybatch::run::verify::inputs_and_outputs;
use serde_json::{json, Value};

fn body(input: &[f32]) -> String {
    json!({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 32, 32], "data": input}]})
        .to_string()
}

fn get(addr: std::net::SocketAddr, path: &str) -> Value {
    let (st, b) = call(addr, "GET", path, "");
    assert_eq!(st, 200, "{path}: {b}");
    serde_json::from_str(&b).unwrap()
}

#[test]
fn colocated_models_are_each_served_under_their_name_with_what_they_compute_alone() {
    let names = ["mobilenet_style", "resnet_style"];
    let alone: Vec<Model> = names.iter().map(|n| crate::onnx::import(n)).collect();
    // each model's answers alone, in process (its weights are its file's)
    let io: Vec<_> = alone
        .iter()
        .enumerate()
        .map(|(k, m)| inputs_and_outputs(m, &mut CpuDevice::new(3), 3, 8, 7 + k as u64).unwrap())
        .collect();
    let bench = cpu_bench(Model::compose(alone));
    let sla = crate::sla(1000.0);
    let mut spec = cfg("lazy");
    spec.colocated = Some(Colocation::new(2, None, Some(&[sla, sla]), sla).unwrap());
    let serve = ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        grpc: Some("127.0.0.1:0".parse().unwrap()),
        max_queue: 64,
        max_body: 1 << 20,
        max_inflight: 1 << 30,
        max_connections: 1024,
        timeouts: Default::default(),
    };
    let server = start(bench, spec, &serve).unwrap();
    let a = server.addr;
    for n in names {
        // each under its own name, with its own tensors' names (not the composed `model/node`)
        let meta = get(a, &format!("/v2/models/{n}"));
        assert_eq!(meta["name"], n);
        assert_eq!(meta["inputs"][0]["name"], "input", "{meta}");
        assert!(!meta["outputs"][0]["name"].as_str().unwrap().contains('/'));
        assert_eq!(meta["parameters"]["colocated_with"], json!(names), "{meta}");
        let c = get(a, &format!("/v2/models/{n}/versions/1/config"));
        assert_eq!(c["name"], n);
        assert_eq!(c["input"][0]["dims"], json!([1, 3, 32, 32]));
    }
    let (st, e) = call(a, "GET", "/v2/models/nope", "");
    assert_eq!(st, 404);
    assert!(
        e.contains("'mobilenet_style', 'resnet_style'"),
        "the 404 names what is served: {e}"
    );
    // both models' requests at once: each answer is what its model computes alone
    std::thread::scope(|s| {
        for (k, n) in names.iter().enumerate() {
            for r in &io[k] {
                s.spawn(move || {
                    let path = format!("/v2/models/{n}/infer");
                    let (st, b) = call(a, "POST", &path, &body(&r.input));
                    assert_eq!(st, 200, "{b}");
                    let v: Value = serde_json::from_str(&b).unwrap();
                    assert_eq!(v["model_name"], *n);
                    let got: Vec<f32> =
                        serde_json::from_value(v["outputs"][0]["data"].clone()).unwrap();
                    assert_eq!(got, r.output, "{n}");
                });
            }
        }
    });
    // one malformed request for the second model: its failure, not the first's
    assert_eq!(call(a, "POST", "/v2/models/resnet_style/infer", "{").0, 400);
    let all = get(a, "/v2/models/stats");
    let stats = all["model_stats"].as_array().unwrap();
    assert_eq!(stats.len(), 2, "{all}");
    for (s, (n, fails)) in stats
        .iter()
        .zip([("mobilenet_style", 0), ("resnet_style", 1)])
    {
        assert_eq!(s["name"], n);
        assert_eq!(s["inference_count"], 3, "{s}");
        assert_eq!(s["inference_stats"]["fail"]["count"], fails, "{s}");
        // its batches entered at its own first node, and hold its three requests
        let members: u64 = s["batch_stats"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                b["batch_size"].as_u64().unwrap() * b["compute_infer"]["count"].as_u64().unwrap()
            })
            .sum();
        assert_eq!(members, 3, "{s}");
        assert_eq!(
            get(a, &format!("/v2/models/{n}/stats"))["model_stats"][0],
            *s
        );
    }
    // over gRPC too: each model by its name, the second one's answer its own
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use crate::grpc::{client, from_le, input, le_bytes};
        use lazybatch::http::grpc::pb;
        let mut c = client(server.grpc_addr.unwrap()).await;
        let r = &io[1][0];
        let answer = c
            .model_infer(pb::ModelInferRequest {
                model_name: "resnet_style".into(),
                inputs: vec![input("input", &[1, 3, 32, 32])],
                raw_input_contents: vec![le_bytes(&r.input)],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.model_name, "resnet_style");
        assert_eq!(from_le(&answer.raw_output_contents[0]), r.output);
        let all = c
            .model_statistics(pb::ModelStatisticsRequest::default())
            .await
            .unwrap()
            .into_inner();
        let counts: Vec<(String, u64)> = all
            .model_stats
            .iter()
            .map(|m| (m.name.clone(), m.inference_count))
            .collect();
        assert_eq!(
            counts,
            [("mobilenet_style".into(), 3), ("resnet_style".into(), 4)]
        );
        let err = c
            .model_metadata(pb::ModelMetadataRequest {
                name: "nope".into(),
                version: String::new(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound);
        assert!(err.message().contains("'resnet_style'"), "{err:?}");
    });
    let (_, text) = call(a, "GET", "/metrics", "");
    let done = |n: &str| if n == "resnet_style" { 4 } else { 3 };
    for n in names {
        for line in [
            format!(
                "lazybatch_requests_total{{model=\"{n}\",outcome=\"completed\"}} {}",
                done(n)
            ),
            format!(
                "lazybatch_request_latency_seconds_count{{model=\"{n}\"}} {}",
                done(n)
            ),
        ] {
            assert!(text.contains(&line), "{line}: {text}");
        }
    }
    let out = server.shutdown().unwrap();
    assert_eq!(out.stats().completed, 7);
    let parts: Vec<u64> = out.part_stats().iter().map(|s| s.completed).collect();
    assert_eq!(parts, [3, 4], "each model's requests counted as its own");
}

#[test]
fn serve_takes_slas_for_colocated_models_only_and_one_per_model() {
    use crate::cli::fails_with;
    let two = "tests/fixtures/onnx/mobilenet_style.onnx,tests/fixtures/onnx/resnet_style.onnx";
    fails_with(
        &["serve", "--model", two, "--device", "npu", "--slas", "50"],
        "2 models",
    );
    fails_with(
        &[
            "serve", "--model", "resnet50", "--device", "npu", "--slas", "50",
        ],
        "co-located",
    );
    fails_with(
        &["serve", "--model", two, "--device", "npu", "--slas", "50,0"],
        "--slas",
    );
    fails_with(
        &[
            "serve", "--model", two, "--device", "npu", "--shares", "1,2",
        ],
        "serve takes no --shares",
    );
    // a model listed twice (here once by its alias) could never be reached by its name
    fails_with(
        &[
            "serve",
            "--model",
            "transformer,transformer_base",
            "--device",
            "npu",
        ],
        "'transformer_base' is listed twice",
    );
}
