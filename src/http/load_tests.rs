//! Unit tests of [`super`] (`load.rs`), in a file of their own so that the module reads top to
//! bottom.
use super::*;

#[test]
fn samples_are_read_from_prometheus_text() {
    let text = "# HELP x y\nlazybatch_merges_total 12\nlazybatch_batch_size_sum 40.0\nlazybatch_requests_total{model=\"m\",outcome=\"a b\"} 3\nlazybatch_requests_total{model=\"n\"} 4\nlazybatch_requests_total_x 9\n";
    assert_eq!(sample(text, "lazybatch_merges_total"), Some(12.0));
    assert_eq!(sample(text, "lazybatch_batch_size_sum"), Some(40.0));
    // labelled: summed over the labels, a value with a space in it too; another metric
    // whose name begins the same is not counted
    assert_eq!(sample(text, "lazybatch_requests_total"), Some(7.0));
    let one = "lazybatch_requests_total{model=\"n\"}";
    assert_eq!(sample(text, one), Some(4.0));
    assert_eq!(sample(text, "lazybatch_preemptions_total"), None);
}

#[test]
fn the_engine_counters_and_a_models_latency_are_read_and_differenced() {
    let text = "lazybatch_node_executions_total 100\nlazybatch_batch_size_sum 250\n\
        lazybatch_preemptions_total 7\nlazybatch_merges_total 5\n\
        lazybatch_cross_step_executions_total 3\n\
        lazybatch_request_latency_seconds_sum{model=\"a\"} 1.5\n\
        lazybatch_request_latency_seconds_count{model=\"a\"} 10\n\
        lazybatch_request_latency_seconds_sum{model=\"b\"} 4\n\
        lazybatch_request_latency_seconds_count{model=\"b\"} 20\n";
    let (c, latency) = scraped(text, "a");
    let want = Counters {
        executions: 100,
        batch_sum: 250,
        preemptions: 7,
        merges: 5,
        cross_step: 3,
        ..Counters::default()
    };
    assert_eq!(c, want);
    assert_eq!(latency, (1.5, 10.0));
    // a server without the model label: the whole server's
    let older = "lazybatch_request_latency_seconds_sum 4\n\
        lazybatch_request_latency_seconds_count 20\n";
    assert_eq!(scraped(older, "a").1, (4.0, 20.0));
    // nothing exported: zeros
    assert_eq!(scraped("", "a"), (Counters::default(), (0.0, 0.0)));
    // the run's share: each counter's growth, never below zero
    let before = Counters {
        executions: 40,
        batch_sum: 50,
        preemptions: 2,
        merges: 1,
        cross_step: 1,
        ..Counters::default()
    };
    let grown = Counters {
        executions: 60,
        batch_sum: 200,
        preemptions: 5,
        merges: 4,
        cross_step: 2,
        ..Counters::default()
    };
    assert_eq!(delta(&before, &want), grown);
    // (a server restarted between the scrapes: counters lower than before count as 0)
    assert_eq!(delta(&want, &before), Counters::default());
}

#[test]
fn a_servers_batch_axis_of_minus_one_takes_one_request_per_call() {
    assert!(shape_fits(&[1, 3, 224, 224], &[1, 3, 224, 224]));
    assert!(shape_fits(&[-1, 3, 224, 224], &[1, 3, 224, 224]));
    // a variable length past the batch axis is the same -1 on both sides
    assert!(shape_fits(&[-1, -1], &[1, -1]));
    // -1 elsewhere than the batch axis, another size or another rank: not this model
    assert!(!shape_fits(&[1, -1, 224, 224], &[1, 3, 224, 224]));
    assert!(!shape_fits(&[2, 3, 224, 224], &[1, 3, 224, 224]));
    assert!(!shape_fits(&[-1, 3, 224], &[1, 3, 224, 224]));
}

#[test]
fn a_batch_axis_of_minus_one_is_the_first_axis_only_and_for_one_request_only() {
    // a variable axis on the server past the batch axis is not a fixed 1 of ours, and a
    // fixed size of the server's is not our 1
    assert!(!shape_fits(&[1, -1], &[1, 1]));
    assert!(!shape_fits(&[1, 5], &[1, 1]));
    assert!(!shape_fits(&[-1, 3], &[2, 3]));
}

#[test]
fn failures_total_every_kind() {
    let f = Failures {
        timed_out: 1,
        transport: 2,
        http_4xx: 4,
        http_5xx: 8,
        too_large: 16,
    };
    assert_eq!(f.total(), 31);
}

fn opts() -> LoadOptions {
    LoadOptions {
        url: "http://127.0.0.1:1".into(),
        concurrency: 4,
        sla: Nanos::from_ms(100.0),
        classes: 1,
        seed: 3,
        json_tensors: false,
        timeout: Duration::from_secs(1),
        max_response: 1 << 20,
    }
}

#[test]
fn each_request_is_tallied_once_under_how_it_left_in_arrival_order() {
    let at = |ms: f64| Arrival {
        time: Nanos::from_ms(ms),
        ..Arrival::default()
    };
    let failed = |k, e: &str| Seen::Failed(k, e.to_string());
    // handed over out of order (answers come back in any order)
    let seen = vec![
        (
            at(9.0),
            failed(Failure::Http5xx, "late"),
            Nanos::from_ms(9.5),
        ),
        (at(1.0), Seen::Answered, Nanos::from_ms(3.0)),
        (at(2.0), Seen::Refused(Rejection::Shed), Nanos::from_ms(2.5)),
        (at(3.0), Seen::NotSent, Nanos::from_ms(3.0)),
        (at(4.0), Seen::NotSent, Nanos::from_ms(4.0)),
        (
            at(5.0),
            failed(Failure::TimedOut, "first"),
            Nanos::from_ms(6.0),
        ),
        (
            at(6.0),
            failed(Failure::Transport, "b"),
            Nanos::from_ms(6.0),
        ),
        (
            at(6.5),
            failed(Failure::Transport, "c"),
            Nanos::from_ms(6.0),
        ),
        (at(7.0), failed(Failure::Http4xx, "d"), Nanos::from_ms(7.0)),
        (at(8.0), failed(Failure::TooLarge, "e"), Nanos::from_ms(8.0)),
        (
            at(8.5),
            Seen::Refused(Rejection::QueueFull),
            Nanos::from_ms(8.5),
        ),
        (at(10.0), Seen::Answered, Nanos::from_ms(10.0)),
    ];
    let out = tally(seen, &opts()).unwrap();
    assert_eq!(out.not_sent, 2);
    let want = Failures {
        timed_out: 1,
        transport: 2,
        http_4xx: 1,
        http_5xx: 1,
        too_large: 1,
    };
    assert_eq!(out.failed, want);
    assert_eq!(out.first_error.as_deref(), Some("first"));
    let s = out.record.stats(&Counters::default());
    assert_eq!((s.requests, s.completed), (4, 2));
    assert_eq!((s.rejected_shed, s.rejected_queue_full), (1, 1));
    // latency from the scheduled instant: 2 ms and 0 ms
    assert_eq!(s.latency_ms.max, 2.0);
}

#[test]
fn an_unreachable_server_is_said_so_in_words() {
    use std::io::{Error as Io, ErrorKind};
    #[derive(Debug)]
    struct Wrapped(Io);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "client error")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let why = |e: Io| unreachable_why(&Wrapped(e));
    assert_eq!(
        why(Io::from(ErrorKind::ConnectionRefused)),
        "connection refused: nothing listens there (is `lazybatch serve` running on that \
         address and port?)"
    );
    assert_eq!(why(Io::from(ErrorKind::TimedOut)), "timed out");
    // as the OS says it (ETIMEDOUT: "Connection timed out (os error 110)")
    assert_eq!(why(Io::from_raw_os_error(110)), "timed out");
    for text in [
        "failed to lookup address information",
        "Name or service not known",
    ] {
        let e = Io::other(text);
        assert_eq!(why(e), format!("host not found ({text})"));
    }
    assert_eq!(why(Io::other("broken")), "broken");
    // no I/O error in the chain: the deepest cause's text
    assert_eq!(unreachable_why(&Wrapped2), "inner");
    #[derive(Debug)]
    struct Wrapped2;
    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Wrapped2 {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "outer")
        }
    }
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "inner")
        }
    }
    impl std::error::Error for Inner {}
    impl std::error::Error for Wrapped2 {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&Inner)
        }
    }
}

/// A body's JSON part, and its binary part's values.
fn opened((body, json): (Bytes, Option<usize>)) -> (Value, Vec<f32>) {
    let n = json.unwrap_or(body.len());
    let v: Value = serde_json::from_slice(&body[..n]).unwrap();
    let values = body[n..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (v, values)
}

#[test]
fn a_fixed_shape_body_is_built_once_and_a_sequence_or_an_sla_per_request() {
    let image = Io {
        name: "image".into(),
        datatype: "FP32",
        shape: vec![1, 2, 3],
        vocab: None,
        max_len: 1,
        finite: true,
    };
    let b = Bodies::new(&image, false, &opts());
    let plain = Arrival::default();
    let (first, second) = (b.body(0, &plain), b.body(5, &plain));
    assert_eq!(first, second, "shared");
    let (v, values) = opened(first);
    assert_eq!(v["inputs"][0]["shape"], json!([1, 2, 3]));
    assert_eq!(v["inputs"][0]["parameters"]["binary_data_size"], 24);
    assert_eq!(v["parameters"], json!({"binary_data_output": true}));
    assert_eq!(values.len(), 6);
    assert!(values.iter().all(|x| (-1.0..1.0).contains(x)));
    // a class's SLA: built for that request
    let classed = Arrival {
        sla: Some(Nanos::from_ms(20.0)),
        ..Arrival::default()
    };
    let (v, _) = opened(b.body(5, &classed));
    assert_eq!(v["parameters"]["sla_ms"], 20.0);
    // a decoder's sequence of tokens, as JSON numbers: its own length, its decoder steps,
    // ids within the vocabulary
    let tokens = Io {
        name: "src".into(),
        datatype: "INT64",
        shape: vec![1, -1],
        vocab: Some(5),
        max_len: 80,
        finite: true,
    };
    let b = Bodies::new(
        &tokens,
        true,
        &LoadOptions {
            json_tensors: true,
            ..opts()
        },
    );
    let a = Arrival {
        len: crate::graph::Lengths { enc: 7, dec: 3 },
        ..Arrival::default()
    };
    let (body, json) = b.body(1, &a);
    assert_eq!(json, None);
    let (v, _) = opened((body, None));
    assert_eq!(v["inputs"][0]["shape"], json!([1, 7]));
    assert_eq!(v["parameters"], json!({"decode_steps": 3}));
    let data = v["inputs"][0]["data"].as_array().unwrap();
    assert_eq!(data.len(), 7);
    assert!(
        data.iter().all(|x| x.as_u64().is_some_and(|t| t < 5)),
        "{data:?}"
    );
}

#[test]
fn the_servers_mean_latency_is_over_the_run_and_none_when_it_counted_nothing() {
    // 0.5 s over 5 requests during the run, after 1 s over 10 before it
    assert_eq!(server_mean_ms((1.0, 10.0), (1.5, 15.0)), Some(100.0));
    assert_eq!(server_mean_ms((0.0, 0.0), (0.25, 1.0)), Some(250.0));
    assert_eq!(server_mean_ms((1.0, 10.0), (1.0, 10.0)), None);
    assert_eq!(server_mean_ms((0.0, 0.0), (0.0, 0.0)), None);
}

#[test]
fn a_models_bodies_ask_for_decoder_steps_only_where_it_decodes_and_keep_fixed_axes() {
    let arrival = Arrival {
        len: crate::graph::Lengths { enc: 7, dec: 3 },
        ..Arrival::default()
    };
    let json = LoadOptions {
        json_tensors: true,
        ..opts()
    };
    let params = |model: &str| {
        let m = crate::graph::zoo::load(model).unwrap();
        let b = Bodies::of(&describe(&m, 0).unwrap(), &json);
        opened(b.body(1, &arrival)).0
    };
    let v = params("gnmt");
    assert_eq!(v["parameters"], json!({"decode_steps": 3}));
    assert_eq!(v["inputs"][0]["shape"], json!([1, 7]));
    let v = params("bert");
    assert_eq!(v["parameters"], json!({}));
    // a fixed axis of any size stays as it is; only -1 takes the request's length
    let odd = Io {
        name: "x".into(),
        datatype: "FP32",
        shape: vec![1, 0, -1],
        vocab: None,
        max_len: 80,
        finite: true,
    };
    let (v, values) = opened(Bodies::new(&odd, false, &opts()).body(1, &arrival));
    assert_eq!(v["inputs"][0]["shape"], json!([1, 0, 7]));
    assert!(values.is_empty());
}

#[test]
fn an_answer_is_counted_by_its_status_its_error_and_whether_it_could_be_read() {
    let ok = |b: &str| Ok(Bytes::copy_from_slice(b.as_bytes()));
    assert!(matches!(verdict(200, ok("{}"), 100), Seen::Answered));
    assert!(matches!(
        verdict(503, ok(r#"{"error":"shed: its SLA cannot be met"}"#), 100),
        Seen::Refused(Rejection::Shed)
    ));
    assert!(matches!(
        verdict(503, ok(r#"{"error":"queue full (--max-queue)"}"#), 100),
        Seen::Refused(Rejection::QueueFull)
    ));
    assert!(matches!(
        verdict(429, ok(r#"{"error":"not admitted: behind the work"}"#), 100),
        Seen::Refused(Rejection::NotAdmitted(_))
    ));
    // a 503 for another reason, a 4xx and a 5xx: failures that quote the server
    for (status, kind) in [
        (503, "5xx"),
        (500, "5xx"),
        (404, "4xx"),
        (400, "4xx"),
        (499, "4xx"),
    ] {
        let seen = verdict(status, ok(r#"{"error":"stopping"}"#), 100);
        let Seen::Failed(f, why) = seen else {
            panic!("{status}: not a failure")
        };
        assert_eq!(format!("{f:?}"), format!("Http{kind}"), "{status}");
        assert_eq!(why, format!(r#"{status}: {{"error":"stopping"}}"#));
    }
    // an answer longer than the cap, and one broken off: each under its own name
    let over = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(http_body_util::Limited::new(Full::new(Bytes::from(vec![0u8; 10])), 5).collect())
        .map(|c| c.to_bytes());
    let Seen::Failed(Failure::TooLarge, why) = verdict(200, over, 5) else {
        panic!("not counted too large")
    };
    assert_eq!(why, "200: an answer over 5 bytes (--max-response-mib)");
    let broken = Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset").into());
    let Seen::Failed(Failure::Transport, why) = verdict(200, broken, 5) else {
        panic!("not counted a transport failure")
    };
    assert_eq!(why, "reset");
}

#[test]
fn the_server_must_describe_the_local_models_input_by_name_type_and_shape() {
    let input = Io {
        name: "src".into(),
        datatype: "INT64",
        shape: vec![-1, -1],
        vocab: Some(5),
        max_len: 80,
        finite: true,
    };
    let served = json!({"name": "src", "datatype": "INT64", "shape": [-1, -1]});
    assert!(serves_as(&served, &input));
    for (field, other) in [
        ("name", json!("input")),
        ("datatype", json!("FP32")),
        ("shape", json!([-1, 7])),
    ] {
        let mut v = served.clone();
        v[field] = other;
        assert!(!serves_as(&v, &input), "{field} differs");
    }
    assert!(!serves_as(&json!({}), &input));
}
