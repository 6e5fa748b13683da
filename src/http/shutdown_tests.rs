//! A server's shutdown is bounded by `--shutdown-timeout-s` whatever its engine holds: on a
//! table that prices every node at 60 s, a request in flight and others queued, the server
//! stops within the limit and counts each of them `abandoned`.

use super::*;
use crate::device::open::Opened;
use crate::device::table::TableDevice;
use crate::graph::zoo;
use crate::profile::Profile;
use crate::run::TestbedOptions;
use crate::runtime::{MaxBatch, MaxPending};
use crate::time::{Nanos, Sla};
use std::io::{Read, Write};
use std::time::Duration;

/// The eight-node fixture on a table of `each` a node, served under Serial with a shutdown
/// limit of `limit`.
fn serve_slow(each: Nanos, limit: Duration) -> Server {
    let m = zoo::fixture("eight_nodes.toml");
    let table = TableDevice::from_profile(Profile::uniform(&m, 8, each), "a slow table");
    let opts = TestbedOptions {
        max_batch: MaxBatch::new(8).unwrap(),
        coverage: 90.0,
        profile: None,
        sampling: Default::default(),
    };
    let bench = Testbed::open(m, Opened::Table(table), &opts).unwrap();
    let cfg = RunSpec {
        policy: crate::policy::Spec::parse("serial", 8).unwrap(),
        rate: 1.0,
        arrivals: Default::default(),
        classes: None,
        shed: false,
        abandon_late: false,
        admit: Default::default(),
        requests: 1,
        sla: Sla::from_ms(1e3).unwrap(),
        seed: 1,
        max_batch: MaxBatch::new(8).unwrap(),
        max_pending: MaxPending::new(1000).unwrap(),
        colocated: None,
        replicas: crate::engine::Replicas::ONE,
    };
    let opts = ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        grpc: None,
        max_queue: 64,
        max_body: 1 << 20,
        max_inflight: 1 << 30,
        max_connections: 64,
        timeouts: Timeouts {
            shutdown: limit,
            ..Timeouts::default()
        },
    };
    start(bench, cfg, &opts).unwrap()
}

/// Sends one inference on a connection of its own and keeps the connection open, waiting.
fn send_one(addr: SocketAddr) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let body = r#"{"inputs":[{"name":"in","datatype":"FP32","shape":[1,4],"data":[0.5,0.5,0.5,0.5]}]}"#;
        let Ok(mut s) = std::net::TcpStream::connect(addr) else {
            return;
        };
        let _ = write!(
            s,
            "POST /v2/models/eight_nodes/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        // the server drops the connection at its limit
        let _ = s.read_to_end(&mut Vec::new());
    })
}

/// The server's count of `outcome`.
fn counted(t: &Tally, outcome: &str) -> u64 {
    t.by_outcome()
        .iter()
        .find(|(o, _)| *o == outcome)
        .map_or(0, |&(_, n)| n)
}

#[test]
fn a_server_stops_within_its_limit_while_a_node_takes_a_minute() {
    let server = serve_slow(Nanos::from_secs(60.0), Duration::from_secs(2));
    let clients: Vec<_> = (0..3).map(|_| send_one(server.addr)).collect();
    // every request in: one in its first node, two queued
    let t0 = std::time::Instant::now();
    while server.metrics.in_server.get() < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the requests never came in"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let tally = server.tally();
    let stopping = std::time::Instant::now();
    let out = server.stop_within_limit().unwrap();
    let took = stopping.elapsed();
    // within the 2 s limit, give or take a busy machine's scheduling; a minute's node is
    // not waited for (the bound here is the hang's, far under the node's 60 s)
    assert!(took < Duration::from_secs(30), "stopped after {took:?}");
    assert!(out.is_none(), "the engine was inside its minute-long node");
    assert_eq!(counted(&tally, "abandoned"), 3, "{:?}", tally.by_outcome());
    assert_eq!(counted(&tally, "completed"), 0);
    for c in clients {
        c.join().unwrap();
    }
}

#[test]
fn a_server_whose_engine_reaches_a_node_boundary_gives_up_what_it_holds_there() {
    // nodes of 20 ms (180 ms a request): the 2 s limit passes with one request part-served
    // and most still queued; the engine gives them up at its next boundary
    let server = serve_slow(Nanos::from_ms(20.0), Duration::from_secs(2));
    let clients: Vec<_> = (0..40).map(|_| send_one(server.addr)).collect();
    let t0 = std::time::Instant::now();
    while server.metrics.in_server.get() < 40 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the requests never came in"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let tally = server.tally();
    let out = server.stop_within_limit().unwrap();
    // each request once: completed before the limit, or abandoned
    let (done, gone) = (counted(&tally, "completed"), counted(&tally, "abandoned"));
    assert_eq!(done + gone, 40, "{:?}", tally.by_outcome());
    assert!(gone > 0, "{:?}", tally.by_outcome());
    // the engine reached a boundary within its share of the limit (a busy machine may
    // keep it past that: then the front end closed the books, as the other test shows)
    if let Some(out) = out {
        let st = out.stats();
        assert_eq!(st.requests, 40);
        assert_eq!(st.completed + st.rejected_abandoned, done + gone, "{st:?}");
        // a request the engine completed at the boundary where it gave up, or after the
        // server dropped its connection, had nobody to answer: the front end counts it
        // abandoned, the engine completed (seen once in eight runs of the unit tests at
        // once: the engine's 10 completed against the front end's 9)
        assert!(
            st.completed >= done && st.rejected_abandoned <= gone,
            "{st:?} against {:?}",
            tally.by_outcome()
        );
    }
    for c in clients {
        c.join().unwrap();
    }
}
