//! The Open Inference Protocol over gRPC (KServe v2's `inference.GRPCInferenceService`, with
//! Triton's `ModelConfig` and `ModelStatistics`; `proto/grpc_service.proto`), served by tonic on
//! `serve --grpc-listen` beside HTTP: the same front ([`Front`]), engine and policy, the same
//! limits and the same counts. A request is turned into the JSON protocol's request (its typed
//! `contents` as values, its `raw_input_contents` as the binary part, its parameters as JSON
//! values) and checked by the same code, so both protocols accept and refuse alike; outputs
//! come back in `raw_output_contents`, as Triton sends them.
//!
//! Errors map to gRPC's codes: an unknown model or version `NOT_FOUND`, a request that does not
//! fit the model `INVALID_ARGUMENT`, a refusal (queue full, overloaded, shed, shutting down)
//! `UNAVAILABLE`, a failure `INTERNAL`.

use super::extensions::{config_parameters, dims, stats_of, EXTENSIONS};
use super::metrics::outcome;
use super::numbers::Numbers;
use super::protocol::{tensor, InferRequest, InputTensor, Io, RequestedOutput};
use super::served::{self, Served};
use super::state::{take_in, Front, Hosted, VERSION};
use serde_json::Value;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The generated protocol types, server and client (tests and tools use the client).
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_docs,
    rustdoc::all,
    unreachable_pub
)]
pub mod pb {
    tonic::include_proto!("inference");
}

use pb::grpc_inference_service_server::GrpcInferenceService;
pub use pb::grpc_inference_service_server::GrpcInferenceServiceServer;

/// The service: the HTTP front end's state, shared.
pub(super) struct Grpc(pub(super) Arc<Front>);

/// How much a gRPC request reserves of `--max-inflight-mib`: its encoded size twice (the message
/// as received, and its values once checked). tonic has decoded it (at most `--max-body-mib`)
/// before a handler runs, so gRPC admits after reading, not before.
const GRPC_FACTOR: usize = 2;

/// The model served as `name` (at `version`, when not empty), or `NOT_FOUND`.
fn known<'f>(f: &'f Front, name: &str, version: &str) -> Result<&'f Hosted, Status> {
    f.hosted(name, (!version.is_empty()).then_some(version))
        .map_err(Status::not_found)
}

/// A parameter as the JSON protocol's value.
fn value(p: &pb::InferParameter) -> Value {
    use pb::infer_parameter::ParameterChoice as P;
    match &p.parameter_choice {
        None => Value::Null,
        Some(P::BoolParam(b)) => Value::Bool(*b),
        Some(P::Int64Param(i)) => Value::from(*i),
        Some(P::StringParam(s)) => Value::from(s.as_str()),
        Some(P::DoubleParam(d)) => Value::from(*d),
        Some(P::Uint64Param(u)) => Value::from(*u),
    }
}

fn parameters(
    p: &std::collections::HashMap<String, pb::InferParameter>,
) -> Option<serde_json::Map<String, Value>> {
    (!p.is_empty()).then(|| p.iter().map(|(k, v)| (k.clone(), value(v))).collect())
}

/// `req` as the JSON protocol's request and its binary part: typed contents become the input's
/// values (FP32 and INT64, the datatypes models take; any other is refused by the check that
/// follows), raw contents the binary part.
fn as_json_request(req: pb::ModelInferRequest) -> Result<(InferRequest, Vec<u8>), String> {
    let raw = req.raw_input_contents;
    if !raw.is_empty() && raw.len() != req.inputs.len() {
        return Err(format!(
            "{} raw_input_contents for {} inputs: give one per input, or none",
            raw.len(),
            req.inputs.len()
        ));
    }
    let mut raw = raw.into_iter();
    let mut binary = Vec::new();
    let mut inputs = Vec::with_capacity(req.inputs.len());
    for t in req.inputs {
        let shape = t
            .shape
            .iter()
            .map(|&d| {
                usize::try_from(d).map_err(|_| format!("input '{}': shape {:?}", t.name, t.shape))
            })
            .collect::<Result<Vec<usize>, String>>()?;
        let mut params = parameters(&t.parameters).unwrap_or_default();
        let data = match (t.contents, raw.next()) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "input '{}': both contents and raw_input_contents: give the values once",
                    t.name
                ))
            }
            (Some(c), None) => Some(Numbers(if !c.int64_contents.is_empty() {
                c.int64_contents.iter().map(|&v| v as f32).collect()
            } else {
                c.fp32_contents
            })),
            (None, Some(bytes)) => {
                params.insert("binary_data_size".into(), Value::from(bytes.len()));
                // the one input's values are moved, not copied
                if binary.is_empty() {
                    binary = bytes;
                } else {
                    binary.extend_from_slice(&bytes);
                }
                None
            }
            (None, None) => None,
        };
        inputs.push(InputTensor {
            name: t.name,
            datatype: t.datatype,
            shape,
            data,
            parameters: (!params.is_empty()).then_some(params),
        });
    }
    let outputs = req
        .outputs
        .into_iter()
        .map(|o| RequestedOutput {
            name: o.name,
            parameters: None,
        })
        .collect::<Vec<_>>();
    let r = InferRequest {
        id: (!req.id.is_empty()).then_some(req.id),
        inputs,
        parameters: parameters(&req.parameters),
        outputs: (!outputs.is_empty()).then_some(outputs),
    };
    Ok((r, binary))
}

fn tensor_metadata(io: &Io) -> pb::model_metadata_response::TensorMetadata {
    pb::model_metadata_response::TensorMetadata {
        name: io.name.clone(),
        datatype: io.datatype.to_string(),
        shape: io.shape.clone(),
    }
}

fn data_type(io: &Io) -> i32 {
    match io.datatype {
        "INT64" => pb::DataType::TypeInt64 as i32,
        _ => pb::DataType::TypeFp32 as i32,
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Grpc {
    async fn server_live(
        &self,
        _: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        let ready = !self.0.closing_down();
        Ok(Response::new(pb::ServerReadyResponse { ready }))
    }

    async fn model_ready(
        &self,
        r: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        let r = r.into_inner();
        // a model the server does not serve is not ready (Triton answers so, not NOT_FOUND)
        let served = known(&self.0, &r.name, &r.version).is_ok();
        let ready = served && !self.0.closing_down();
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: "lazybatch".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        r: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        let r = r.into_inner();
        let f = &self.0;
        let h = known(f, &r.name, &r.version)?;
        Ok(Response::new(pb::ModelMetadataResponse {
            name: h.name.clone(),
            versions: vec![VERSION.into()],
            platform: "lazybatch".into(),
            inputs: vec![tensor_metadata(&h.input)],
            outputs: vec![tensor_metadata(&h.output)],
        }))
    }

    async fn model_config(
        &self,
        r: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        let r = r.into_inner();
        let f = &self.0;
        let h = known(f, &r.name, &r.version)?;
        let config = pb::ModelConfig {
            name: h.name.clone(),
            platform: "lazybatch".into(),
            backend: "lazybatch".into(),
            max_batch_size: 0,
            input: vec![pb::ModelInput {
                name: h.input.name.clone(),
                data_type: data_type(&h.input),
                dims: dims(&h.input, h.reference.0),
            }],
            output: vec![pb::ModelOutput {
                name: h.output.name.clone(),
                data_type: data_type(&h.output),
                dims: dims(&h.output, h.reference.1),
            }],
            dynamic_batching: None,
            parameters: config_parameters(f, h)
                .into_iter()
                .map(|(k, v)| (k.to_string(), pb::ModelParameter { string_value: v }))
                .collect(),
        };
        Ok(Response::new(pb::ModelConfigResponse {
            config: Some(config),
        }))
    }

    async fn model_statistics(
        &self,
        r: Request<pb::ModelStatisticsRequest>,
    ) -> Result<Response<pb::ModelStatisticsResponse>, Status> {
        let r = r.into_inner();
        let f = &self.0;
        // no name: every model's
        let models: Vec<&Hosted> = if r.name.is_empty() {
            f.models.iter().collect()
        } else {
            vec![known(f, &r.name, &r.version)?]
        };
        let d = |count, ns| Some(pb::StatisticDuration { count, ns });
        let stats = |h: &Hosted| {
            let s = stats_of(f, h);
            let done = s.success.0;
            pb::ModelStatistics {
                name: h.name.clone(),
                version: VERSION.into(),
                last_inference: s.last_ms,
                inference_count: done,
                execution_count: s.executions,
                inference_stats: Some(pb::InferStatistics {
                    success: d(done, s.success.1),
                    fail: d(s.fail, 0),
                    queue: d(done, s.queue_ns),
                    // as over HTTP: inputs and outputs move inside the node time
                    compute_input: d(done, 0),
                    compute_infer: d(done, s.compute_ns),
                    compute_output: d(done, 0),
                }),
                batch_stats: s
                    .by_size
                    .iter()
                    .map(|&(b, n, ns)| pb::InferBatchStatistics {
                        batch_size: b,
                        compute_input: d(n, 0),
                        compute_infer: d(n, ns),
                        compute_output: d(n, 0),
                    })
                    .collect(),
            }
        };
        Ok(Response::new(pb::ModelStatisticsResponse {
            model_stats: models.into_iter().map(stats).collect(),
        }))
    }

    async fn model_infer(
        &self,
        r: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        let f = &self.0;
        let r = r.into_inner();
        let h = known(f, &r.model_name, &r.model_version)?;
        let need = prost::Message::encoded_len(&r).saturating_mul(GRPC_FACTOR);
        let _held = take_in(f, need).map_err(|(why, msg)| {
            f.metrics.count(Some(h.part), why);
            Status::unavailable(msg)
        })?;
        let req = as_json_request(r).and_then(|(req, binary)| {
            req.check_outputs(&h.output)?;
            req.check(&h.input, h.max_dec, &binary)
        });
        let mut req = req.map_err(|msg| {
            f.metrics.count(Some(h.part), outcome::BAD_REQUEST);
            // at most 1 KiB, as over HTTP: a message that quotes a million-axis shape was
            // 3.6 MB, past what the gRPC clients read
            Status::invalid_argument(super::protocol::capped(msg))
        })?;
        let id = req.id.take();
        let (served, key) = served::serve(f, h, req).await;
        let (values, shape, latency) = match served {
            Served::Done {
                values,
                shape,
                latency,
            } => (values, shape, latency),
            Served::Refused(msg) => return Err(Status::unavailable(msg)),
            Served::NotAdmitted(msg, wait) => return Err(not_admitted(msg, wait)),
            Served::Failed(msg) => return Err(Status::internal(msg)),
        };
        let (_, raw) = tensor(&h.output, &shape, &values, true);
        let param = |p| pb::InferParameter {
            parameter_choice: Some(p),
        };
        use pb::infer_parameter::ParameterChoice as P;
        let mut parameters = std::collections::HashMap::new();
        parameters.insert(
            "latency_ms".to_string(),
            param(P::DoubleParam(latency.as_secs_f64() * 1e3)),
        );
        if f.emulated {
            parameters.insert(
                "timing_emulation".to_string(),
                param(P::StringParam(served::EMULATED.into())),
            );
        }
        Ok(Response::new(pb::ModelInferResponse {
            model_name: h.name.clone(),
            model_version: VERSION.into(),
            id: id.unwrap_or_else(|| key.to_string()),
            parameters,
            outputs: vec![pb::model_infer_response::InferOutputTensor {
                name: h.output.name.clone(),
                datatype: h.output.datatype.to_string(),
                shape: shape.iter().map(|&d| d as i64).collect(),
                parameters: Default::default(),
                contents: None,
            }],
            raw_output_contents: vec![raw],
        }))
    }
}

/// A request not admitted (`--admit predicted`): RESOURCE_EXHAUSTED, with `retry-after` in
/// seconds (the HTTP header's name) and gRPC's own retry pushback in milliseconds.
fn not_admitted(msg: String, wait: u64) -> Status {
    let mut s = Status::resource_exhausted(msg);
    let md = s.metadata_mut();
    md.insert("retry-after", wait.into());
    md.insert("grpc-retry-pushback-ms", (wait * 1000).into());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_not_admitted_is_resource_exhausted_with_when_to_retry() {
        let s = not_admitted("not admitted: …".into(), 2);
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert_eq!(s.metadata().get("retry-after").unwrap(), "2");
        assert_eq!(s.metadata().get("grpc-retry-pushback-ms").unwrap(), "2000");
    }

    use super::super::metrics::outcome;
    use super::super::state::{owned_front, test_front};
    use pb::infer_parameter::ParameterChoice as P;
    use pb::model_infer_request::InferInputTensor;

    fn input(
        name: &str,
        shape: &[i64],
        contents: Option<pb::InferTensorContents>,
    ) -> InferInputTensor {
        InferInputTensor {
            name: name.into(),
            datatype: "FP32".into(),
            shape: shape.to_vec(),
            contents,
            ..Default::default()
        }
    }

    fn fp32(v: &[f32]) -> Option<pb::InferTensorContents> {
        Some(pb::InferTensorContents {
            fp32_contents: v.to_vec(),
            ..Default::default()
        })
    }

    fn param(p: P) -> pb::InferParameter {
        pb::InferParameter {
            parameter_choice: Some(p),
        }
    }

    #[test]
    fn a_grpc_request_becomes_the_json_protocols_request_it_says() {
        // typed contents: FP32 as given, INT64 as the values they are; no id, no outputs and no
        // parameters asked: none
        let req = pb::ModelInferRequest {
            inputs: vec![input("x", &[1, 2], fp32(&[1.5, 2.5]))],
            ..Default::default()
        };
        let (r, binary) = as_json_request(req).unwrap();
        assert!(binary.is_empty());
        assert_eq!(
            (r.id, r.parameters.is_none(), r.outputs.is_none()),
            (None, true, true)
        );
        assert_eq!(r.inputs[0].shape, vec![1, 2]);
        assert_eq!(
            r.inputs[0].data.as_ref().map(|n| n.0.clone()),
            Some(vec![1.5, 2.5])
        );
        assert!(r.inputs[0].parameters.is_none());
        let ints = pb::InferTensorContents {
            int64_contents: vec![3, 7],
            ..Default::default()
        };
        let req = pb::ModelInferRequest {
            id: "a".into(),
            inputs: vec![input("x", &[1, 2], Some(ints))],
            outputs: vec![pb::model_infer_request::InferRequestedOutputTensor {
                name: "y".into(),
                ..Default::default()
            }],
            parameters: [
                ("b".to_string(), param(P::BoolParam(true))),
                ("i".to_string(), param(P::Int64Param(-2))),
                ("s".to_string(), param(P::StringParam("t".into()))),
                ("d".to_string(), param(P::DoubleParam(0.5))),
                ("u".to_string(), param(P::Uint64Param(9))),
                ("n".to_string(), pb::InferParameter::default()),
            ]
            .into(),
            ..Default::default()
        };
        let (r, _) = as_json_request(req).unwrap();
        assert_eq!(
            r.inputs[0].data.as_ref().map(|n| n.0.clone()),
            Some(vec![3.0, 7.0])
        );
        assert_eq!(r.id.as_deref(), Some("a"));
        assert_eq!(r.outputs.map(|o| o.len()), Some(1));
        let p = Value::Object(r.parameters.unwrap());
        assert_eq!(
            p,
            serde_json::json!({"b": true, "i": -2, "s": "t", "d": 0.5, "u": 9, "n": null})
        );
        // raw contents, one per input: the binary part, in order, each input's size its own
        let req = pb::ModelInferRequest {
            inputs: vec![input("x", &[1, 1], None), input("z", &[1, 2], None)],
            raw_input_contents: vec![vec![1, 2, 3, 4], vec![5; 8]],
            ..Default::default()
        };
        let (r, binary) = as_json_request(req).unwrap();
        assert_eq!(binary, [vec![1, 2, 3, 4], vec![5; 8]].concat());
        let size = |k: usize| r.inputs[k].parameters.as_ref().unwrap()["binary_data_size"].clone();
        assert_eq!((size(0), size(1)), (Value::from(4), Value::from(8)));
        assert!(r.inputs.iter().all(|t| t.data.is_none()));
    }

    #[test]
    fn a_grpc_request_that_cannot_be_one_says_why() {
        let refused = |req: pb::ModelInferRequest| as_json_request(req).err().unwrap();
        let two = pb::ModelInferRequest {
            inputs: vec![input("x", &[1, 1], None)],
            raw_input_contents: vec![vec![0; 4], vec![0; 4]],
            ..Default::default()
        };
        assert!(refused(two).contains("2 raw_input_contents for 1 inputs"));
        let both = pb::ModelInferRequest {
            inputs: vec![input("x", &[1, 1], fp32(&[1.0]))],
            raw_input_contents: vec![vec![0; 4]],
            ..Default::default()
        };
        assert!(refused(both).contains("input 'x': both contents and raw_input_contents"));
        let negative = pb::ModelInferRequest {
            inputs: vec![input("x", &[1, -1], fp32(&[1.0]))],
            ..Default::default()
        };
        assert!(refused(negative).contains("input 'x': shape [1, -1]"));
    }

    fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn each_call_answers_for_the_model_it_names_at_its_one_version() {
        let g = Grpc(test_front());
        let name = g.0.models[0].name.clone();
        let ready = |version: &str| {
            block_on(g.model_ready(Request::new(pb::ModelReadyRequest {
                name: name.clone(),
                version: version.into(),
            })))
        };
        assert!(ready("").unwrap().into_inner().ready);
        assert!(ready("1").unwrap().into_inner().ready);
        // a version it does not serve is not ready (Triton answers false, not NOT_FOUND)
        assert!(!ready("2").unwrap().into_inner().ready);
        let other = block_on(g.model_metadata(Request::new(pb::ModelMetadataRequest {
            name: "nope".into(),
            version: String::new(),
        })));
        assert_eq!(other.unwrap_err().code(), tonic::Code::NotFound);
        let live = block_on(g.server_live(Request::new(pb::ServerLiveRequest {})));
        assert!(live.unwrap().into_inner().live);
        let server_ready = || {
            block_on(g.server_ready(Request::new(pb::ServerReadyRequest {})))
                .unwrap()
                .into_inner()
                .ready
        };
        assert!(server_ready());
        let meta = block_on(g.server_metadata(Request::new(pb::ServerMetadataRequest {})))
            .unwrap()
            .into_inner();
        assert_eq!(meta.name, "lazybatch");
        assert_eq!(meta.extensions, EXTENSIONS);
        let h = &g.0.models[0];
        let m = block_on(g.model_metadata(Request::new(pb::ModelMetadataRequest {
            name: name.clone(),
            version: String::new(),
        })))
        .unwrap()
        .into_inner();
        assert_eq!(
            (m.name.as_str(), m.versions),
            (name.as_str(), vec![VERSION.to_string()])
        );
        assert_eq!(m.inputs[0].shape, h.input.shape);
        assert_eq!(m.inputs[0].datatype, "FP32");
        assert_eq!(m.outputs[0].name, h.output.name);
        let c = block_on(g.model_config(Request::new(pb::ModelConfigRequest {
            name: name.clone(),
            version: String::new(),
        })))
        .unwrap()
        .into_inner()
        .config
        .unwrap();
        assert_eq!(c.input[0].dims, dims(&h.input, h.reference.0));
        assert_eq!(c.input[0].data_type, pb::DataType::TypeFp32 as i32);
        assert_eq!(c.parameters["policy"].string_value, "serial");
        assert_eq!(c.parameters.len(), config_parameters(&g.0, h).len());
        let int64 = Io {
            datatype: "INT64",
            ..h.input.clone()
        };
        assert_eq!(data_type(&int64), pb::DataType::TypeInt64 as i32);
        // shutting down: neither the server nor its model is ready
        g.0.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(!server_ready());
        assert!(!ready("").unwrap().into_inner().ready);
    }

    #[test]
    fn statistics_are_every_models_or_the_named_ones_as_over_http() {
        let g = Grpc(test_front());
        let t = &g.0.metrics.totals[0];
        let set =
            |a: &std::sync::atomic::AtomicU64, v| a.store(v, std::sync::atomic::Ordering::Relaxed);
        set(&t.success.0, 2);
        set(&t.success.1, 90);
        set(&t.fail, 1);
        set(&t.queue_ns, 30);
        set(&t.compute_ns, 60);
        set(&t.executions, 1);
        set(&t.by_size[1].0, 1);
        set(&t.by_size[1].1, 55);
        let name = g.0.models[0].name.clone();
        for asked in [String::new(), name.clone()] {
            let s = block_on(g.model_statistics(Request::new(pb::ModelStatisticsRequest {
                name: asked.clone(),
                version: String::new(),
            })))
            .unwrap()
            .into_inner();
            assert_eq!(s.model_stats.len(), 1, "{asked:?}");
            let m = &s.model_stats[0];
            assert_eq!(
                (m.name.as_str(), m.inference_count, m.execution_count),
                (name.as_str(), 2, 1)
            );
            let i = m.inference_stats.as_ref().unwrap();
            let d = |x: &Option<pb::StatisticDuration>| x.as_ref().map(|x| (x.count, x.ns));
            assert_eq!(
                (d(&i.success), d(&i.fail), d(&i.queue), d(&i.compute_infer)),
                (Some((2, 90)), Some((1, 0)), Some((2, 30)), Some((2, 60)))
            );
            assert_eq!(m.batch_stats.len(), 1);
            assert_eq!(m.batch_stats[0].batch_size, 2);
            assert_eq!(d(&m.batch_stats[0].compute_infer), Some((1, 55)));
        }
        let unknown = block_on(g.model_statistics(Request::new(pb::ModelStatisticsRequest {
            name: "nope".into(),
            version: String::new(),
        })));
        assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
    }

    #[test]
    fn a_grpc_call_reserves_twice_its_encoded_size_and_a_refusal_is_counted_for_its_model() {
        let call = pb::ModelInferRequest {
            model_name: test_front().models[0].name.clone(),
            inputs: vec![input("in", &[1, 4], fp32(&[1.0; 4]))],
            ..Default::default()
        };
        let need = prost::Message::encoded_len(&call) * 2;
        let count = |f: &Front, o: &str| {
            f.metrics
                .by_outcome()
                .into_iter()
                .find(|(k, _)| *k == o)
                .map_or(0, |(_, n)| n)
        };
        for (budget, refused_as) in [
            (need - 1, outcome::OVERLOADED),
            (need, outcome::SHUTTING_DOWN),
        ] {
            let f = owned_front();
            let g = Grpc(Arc::new(Front {
                max_inflight: budget,
                ..f
            }));
            // nobody behind the front: one admitted is refused as the server shutting down
            let e = block_on(g.model_infer(Request::new(call.clone()))).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unavailable, "{budget}: {e}");
            assert_eq!(count(&g.0, refused_as), 1, "{budget}");
            assert_eq!(g.0.inflight.load(std::sync::atomic::Ordering::SeqCst), 0);
        }
    }

    #[test]
    fn a_completed_call_answers_the_devices_output_and_its_latency_in_ms() {
        use crate::engine::{Left, Observer};
        use crate::runtime::{Request as Q, RequestId};
        use crate::time::Nanos;
        let mut f = owned_front();
        f.emulated = false;
        let (tx, rx) = std::sync::mpsc::channel();
        f.tx = std::sync::Mutex::new(Some(tx));
        let g = Grpc(Arc::new(f));
        let h = &g.0.models[0];
        let call = pb::ModelInferRequest {
            model_name: h.name.clone(),
            inputs: vec![input(&h.input.name, &[1, 4], fp32(&[1.0; 4]))],
            ..Default::default()
        };
        let n: i64 = h.output.shape.iter().product();
        let answer = block_on(async {
            let engine = async {
                let a = loop {
                    if let Ok(crate::engine::Told::Arrived(a)) = rx.try_recv() {
                        break a;
                    }
                    tokio::task::yield_now().await;
                };
                let key = a.key.unwrap();
                g.0.exchange.put_output(key, vec![0.25; n as usize]);
                let mut q = Q::new(RequestId(0), Nanos(0), Nanos(1), a.len);
                q.key = key;
                // 2.5 ms after its arrival
                g.0.waiting.left(&q, Left::Completed(Nanos(2_500_000)));
                key
            };
            let (answer, key) = tokio::join!(g.model_infer(Request::new(call)), engine);
            (answer.unwrap().into_inner(), key)
        });
        let (r, key) = answer;
        assert_eq!(
            r.id,
            key.to_string(),
            "no id given: the key it was served under"
        );
        assert_eq!(
            (r.model_name.as_str(), r.model_version.as_str()),
            (h.name.as_str(), VERSION)
        );
        let ms = match r.parameters["latency_ms"].parameter_choice {
            Some(P::DoubleParam(ms)) => ms,
            ref other => panic!("{other:?}"),
        };
        assert!((ms - 2.5).abs() < 1e-9, "{ms}");
        assert!(
            !r.parameters.contains_key("timing_emulation"),
            "a computing device"
        );
        assert_eq!(r.outputs[0].shape, h.output.shape);
        assert_eq!(
            r.raw_output_contents,
            vec![0.25f32.to_le_bytes().repeat(n as usize)]
        );
    }
}
