//! A client that goes away: `serve` lets its request go at the engine's next node boundary,
//! queued or in the middle of a sub-batch, frees its slot, counts it `cancelled`, and its
//! batch-mates run on without it, their outputs bit for bit those of an undisturbed run.

use crate::http::{call, cfg, cpu_bench, loopback};
use lazybatch::graph::{zoo, Model};
use lazybatch::http::load::sample;
use lazybatch::http::{start, ServeOptions, Server};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The tiny seq2seq fixture 16 times as wide, with a vocabulary of 4,000, allowed 4,096
/// decoder steps: four requests of that many run for a good fraction of a second, long enough
/// to see batched while they run and to leave in the middle of.
fn long_decoder() -> Model {
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tiny_seq2seq.toml"
    );
    let text = std::fs::read_to_string(src).unwrap();
    assert!(text.contains("max_dec = 12"), "the fixture changed");
    let dir = crate::fresh_dir("long-decoder");
    let f = dir.join("long_decoder.toml");
    let text = text
        .replace("name = \"tiny_seq2seq\"", "name = \"long_decoder\"")
        .replace("max_dec = 12", "max_dec = 4096")
        .replace("= 16", "= 256")
        .replace("vocab = 50", "vocab = 4000")
        .replace("out_features = 50", "out_features = 4000");
    std::fs::write(&f, text).unwrap();
    zoo::load(f.to_str().unwrap()).unwrap()
}

const STEPS: usize = 4096;

/// Request `k`'s body: a source of its own, decoded for [`STEPS`] steps.
fn body(k: usize) -> String {
    let ids: Vec<i64> = (0..4).map(|j| ((k * 7 + j * 3) % 50) as i64).collect();
    serde_json::json!({"inputs": [{"name": "src", "datatype": "INT64", "shape": [1, 4], "data": ids}], "parameters": {"decode_steps": STEPS}}).to_string()
}

const PATH: &str = "/v2/models/long_decoder/infer";

/// The tokens a 200 answer carries.
fn tokens(status: u16, resp: &str) -> Vec<i64> {
    assert_eq!(status, 200, "{resp}");
    let v: serde_json::Value = serde_json::from_str(resp).unwrap();
    serde_json::from_value(v["outputs"][0]["data"].clone()).unwrap()
}

/// A server metric's value (0 when absent).
fn metric(a: SocketAddr, name: &str) -> f64 {
    sample(&call(a, "GET", "/metrics", "").1, name).unwrap_or(0.0)
}

/// Waits (a minute at most: a hang's bound, not a timing) until `ok` holds.
fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < Duration::from_secs(60), "never: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn serve() -> Server {
    start(cpu_bench(long_decoder()), cfg("lazy"), &loopback()).unwrap()
}

#[test]
fn a_client_that_leaves_mid_sub_batch_frees_its_slot_at_the_next_node_and_spares_its_batch_mates() {
    // undisturbed: four requests served together, every one to its end
    let server = serve();
    let a = server.addr;
    let alone: Vec<Vec<i64>> = std::thread::scope(|s| {
        let calls: Vec<_> = (0..4)
            .map(|k| s.spawn(move || tokens_of(call(a, "POST", PATH, &body(k)))))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    assert!(alone.iter().all(|t| t.len() == STEPS));
    assert_eq!(server.shutdown().unwrap().stats().completed, 4);

    // the same four; request 1's client hangs up once all four run as one sub-batch
    let server = serve();
    let a = server.addr;
    let tally = server.tally();
    let answered = AtomicUsize::new(0);
    let kept: Vec<Vec<i64>> = std::thread::scope(|s| {
        let calls: Vec<_> = [0, 2, 3]
            .into_iter()
            .map(|k| {
                let answered = &answered;
                s.spawn(move || {
                    let t = tokens_of(call(a, "POST", PATH, &body(k)));
                    answered.fetch_add(1, Ordering::SeqCst);
                    t
                })
            })
            .collect();
        let mut leaving = TcpStream::connect(a).unwrap();
        let b = body(1);
        let req = format!(
            "POST {PATH} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        );
        leaving.write_all(req.as_bytes()).unwrap();
        // four in the server, nobody queued, one entry on the BatchTable: one sub-batch
        until("the four requests batched together", || {
            let text = call(a, "GET", "/metrics", "").1;
            let v = |n: &str| sample(&text, n).unwrap_or(-1.0);
            v("lazybatch_requests_in_server") == 4.0
                && v("lazybatch_pending_requests") == 0.0
                && v("lazybatch_batch_table_depth") == 1.0
        });
        drop(leaving);
        // it leaves at the engine's next node boundary: counted cancelled while its
        // batch-mates, thousands of decoder steps from their end, are still being served
        until("the request let go", || {
            metric(
                a,
                "lazybatch_requests_total{model=\"long_decoder\",outcome=\"cancelled\"}",
            ) == 1.0
        });
        let still = answered.load(Ordering::SeqCst);
        assert_eq!(still, 0, "the batch-mates finished before it was let go");
        assert_eq!(metric(a, "lazybatch_requests_in_server"), 3.0);
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    // the batch-mates' tokens are bit for bit the undisturbed run's
    assert_eq!(kept, [alone[0].clone(), alone[2].clone(), alone[3].clone()]);
    let by: std::collections::HashMap<_, _> = tally.by_outcome().into_iter().collect();
    assert_eq!(
        (by["completed"], by["cancelled"], by["abandoned"]),
        (3, 1, 0)
    );
    let st = server.shutdown().unwrap().stats();
    assert_eq!(
        (st.requests, st.completed, st.rejected_cancelled),
        (4, 3, 1),
        "{st:?}"
    );
}

fn tokens_of((status, resp): (u16, String)) -> Vec<i64> {
    tokens(status, &resp)
}

#[test]
fn a_cancelled_grpc_call_is_let_go_of_and_counted_cancelled() {
    use crate::grpc::{client, input, le_bytes};
    use lazybatch::http::grpc::pb;
    // graph batching waits up to 3 s for a second request: the one call waits in the queue
    let bench = lazybatch::run::Testbed::new(
        zoo::load("resnet50").unwrap(),
        Default::default(),
        crate::mb(8),
        90.0,
    )
    .unwrap();
    let opts = ServeOptions {
        grpc: Some("127.0.0.1:0".parse().unwrap()),
        ..loopback()
    };
    let server = start(bench, cfg("graph:3000"), &opts).unwrap();
    let (a, grpc) = (server.addr, server.grpc_addr.unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = client(grpc).await;
        let req = pb::ModelInferRequest {
            model_name: "resnet50".into(),
            inputs: vec![input("image", &[1, 3, 224, 224])],
            raw_input_contents: vec![le_bytes(&vec![0.5; 3 * 224 * 224])],
            ..Default::default()
        };
        let call = c.model_infer(req);
        tokio::pin!(call);
        // the call reaches the server, then the client gives up on it (the future dropped:
        // the stream is reset)
        let t0 = Instant::now();
        loop {
            tokio::select! {
                r = &mut call => panic!("answered inside the batching window: {r:?}"),
                _ = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            if metric(a, "lazybatch_requests_in_server") == 1.0 {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "never admitted");
        }
    });
    until("the cancelled call let go", || {
        metric(
            a,
            "lazybatch_requests_total{model=\"resnet50\",outcome=\"cancelled\"}",
        ) == 1.0
    });
    assert_eq!(metric(a, "lazybatch_requests_in_server"), 0.0);
    let st = server.shutdown().unwrap().stats();
    assert_eq!(
        (st.requests, st.completed, st.rejected_cancelled),
        (1, 0, 1),
        "{st:?}"
    );
}
