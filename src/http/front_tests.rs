//! Unit tests of [`super`] (`front.rs`), in a file of their own so that the module reads top to
//! bottom.
use super::*;
use std::sync::atomic::Ordering;

fn front() -> Arc<Front> {
    super::super::state::test_front()
}

#[test]
fn a_request_is_taken_in_before_its_body_and_charged_as_its_bytes_arrive() {
    let f = front();
    let declared = |n: &str| {
        let mut h = axum::http::HeaderMap::new();
        h.insert(axum::http::header::CONTENT_LENGTH, n.parse().unwrap());
        h
    };
    // a body declared over --max-body-mib (1 MiB here) is refused before a byte is read
    assert_eq!(declared_too_large(&f, &declared("1048576")), None);
    let msg = declared_too_large(&f, &declared("1048577")).unwrap();
    assert!(
        msg.contains("declared 1048577 bytes") && msg.contains("--max-body-mib"),
        "{msg}"
    );
    assert!(declared_too_large(&f, &declared("99999999999999999999999")).is_some());
    assert_eq!(declared_too_large(&f, &axum::http::HeaderMap::new()), None);
    // --max-queue (4) places, each taken before a byte is read and holding no budget; the
    // fifth is refused
    let held: Vec<_> = (0..4).map(|_| take_in(&f, 0).ok().unwrap()).collect();
    assert_eq!(f.admitted.load(Ordering::SeqCst), 4);
    assert_eq!(
        f.inflight.load(Ordering::SeqCst),
        0,
        "nothing arrived, nothing held"
    );
    let refused = take_in(&f, 0).err().unwrap();
    assert_eq!(refused.0, outcome::QUEUE_FULL);
    drop(held);
    assert_eq!(
        (
            f.admitted.load(Ordering::SeqCst),
            f.inflight.load(Ordering::SeqCst)
        ),
        (0, 0)
    );
    // the bytes, charged as they arrive: 64 MiB hold twelve bodies of 1 MiB (5 MiB each),
    // not thirteen
    let f = Arc::new(Front {
        max_queue: 100,
        ..super::super::state::owned_front()
    });
    let mut held: Vec<_> = (0..13).map(|_| take_in(&f, 0).ok().unwrap()).collect();
    for (_, r) in held.iter_mut().take(12) {
        for _ in 0..4 {
            r.grow((1 << 18) * PARSE_FACTOR).unwrap();
        }
        assert_eq!(r.held(), (1 << 20) * PARSE_FACTOR);
    }
    let refused = held[12].1.grow((1 << 20) * PARSE_FACTOR).err().unwrap();
    assert_eq!(refused.0, outcome::OVERLOADED);
    assert!(refused.1.contains("--max-inflight-mib"), "{}", refused.1);
    assert_eq!(held[12].1.held(), 0, "a refused growth holds nothing more");
    drop(held);
    assert_eq!(f.inflight.load(Ordering::SeqCst), 0);
    assert_eq!(f.admitted.load(Ordering::SeqCst), 0);
    // one request alone may hold the whole budget, never more
    let (_t, mut one) = take_in(&f, 0).ok().unwrap();
    one.grow(usize::MAX).unwrap();
    assert_eq!(one.held(), f.max_inflight);
    one.grow(1).unwrap();
    assert_eq!(f.inflight.load(Ordering::SeqCst), f.max_inflight);
}

fn ready_now(f: &Arc<Front>) -> StatusCode {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(ready(State(f.clone())))
}

#[test]
fn gzip_and_deflate_bodies_inflate_within_the_body_limit() {
    use std::io::Write;
    let headers = |enc: &str| {
        let mut h = axum::http::HeaderMap::new();
        h.insert(axum::http::header::CONTENT_ENCODING, enc.parse().unwrap());
        h
    };
    let text = br#"{"inputs": []}"#.repeat(50);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();
    let mut zl = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    zl.write_all(&text).unwrap();
    let zl = zl.finish().unwrap();
    for (enc, body) in [("gzip", &gz), ("deflate", &zl), ("GZIP", &gz)] {
        let got = decoded(&headers(enc), body.clone().into(), 1 << 20).unwrap();
        assert_eq!(&got[..], &text[..], "{enc}");
    }
    // none, or identity: as sent
    let plain = decoded(&axum::http::HeaderMap::new(), text.clone().into(), 10).unwrap();
    assert_eq!(plain.len(), text.len());
    // a body that inflates past the limit: 413, however small it was sent
    let bomb = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![0u8; 8 << 20]).unwrap();
        e.finish().unwrap()
    };
    assert!(bomb.len() < 64 << 10);
    let (st, msg) = decoded(&headers("gzip"), bomb.into(), 1 << 20).unwrap_err();
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{msg}");
    assert!(msg.contains("inflates past 1048576 bytes"), "{msg}");
    // not gzip at all, and an encoding this server does not take
    let (st, msg) = decoded(&headers("gzip"), text.clone().into(), 1 << 20).unwrap_err();
    assert_eq!(st, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("does not inflate"), "{msg}");
    let (st, msg) = decoded(&headers("br"), text.into(), 1 << 20).unwrap_err();
    assert_eq!(st, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{msg}");
    assert!(msg.contains("'br'"), "{msg}");
}

#[test]
fn readiness_is_withdrawn_while_shutting_down_and_after_the_engine_stopped() {
    let f = front();
    assert_eq!(ready_now(&f), StatusCode::OK);
    // a shutdown began: load balancers must stop sending here
    f.closing.store(true, Ordering::SeqCst);
    assert_eq!(ready_now(&f), StatusCode::SERVICE_UNAVAILABLE);
    let g = front();
    // the engine stopped (an error): nothing would be answered
    g.waiting.stopped.store(true, Ordering::SeqCst);
    assert_eq!(ready_now(&g), StatusCode::SERVICE_UNAVAILABLE);
}

/// (input name, datatype, shape, vocab, longest input; output name, datatype, shape,
/// longest output; most and default decoder steps; reference lengths) of a model served.
type Described = (
    (&'static str, &'static str, Vec<i64>, Option<usize>, usize),
    (&'static str, &'static str, Vec<i64>, usize),
    (u32, u32, (i64, i64)),
);

fn described(h: &Hosted) -> Described {
    let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    let (i, o) = (&h.input, &h.output);
    (
        (
            leak(&i.name),
            i.datatype,
            i.shape.clone(),
            i.vocab,
            i.max_len,
        ),
        (leak(&o.name), o.datatype, o.shape.clone(), o.max_len),
        (h.max_dec, h.default_dec, h.reference),
    )
}

#[test]
fn each_zoo_model_is_described_as_its_file_gives_it() {
    // checked against models/*.toml: an image's [3, 224, 224]; a token input's vocabulary
    // (its embedding's) and a variable length up to max_enc; a seq2seq output of argmax
    // tokens, one a decoder step up to max_dec; frames of 40 features (LAS); BERT's fixed
    // 128 tokens read as one row of 128
    let table: Vec<(&str, Described)> = vec![
        (
            "resnet50",
            (
                ("image", "FP32", vec![1, 3, 224, 224], None, 1),
                ("fc", "FP32", vec![1, 1000], 0),
                (0, 0, (1, 1)),
            ),
        ),
        (
            "gnmt",
            (
                ("src", "INT64", vec![1, -1], Some(36548), 80),
                ("next_token", "INT64", vec![1, -1], 80),
                (80, 30, (30, 30)),
            ),
        ),
        (
            "las",
            (
                ("frames", "FP32", vec![1, -1, 40], None, 3200),
                ("next_char", "INT64", vec![1, -1], 480),
                (480, 120, (800, 120)),
            ),
        ),
        (
            "gpt2",
            (
                ("prompt", "INT64", vec![1, -1], Some(50257), 1022),
                ("next_token", "INT64", vec![1, -1], 1022),
                (1022, 94, (388, 94)),
            ),
        ),
        (
            "bert_base",
            (
                ("tokens", "INT64", vec![1, 128], Some(30522), 1),
                ("pooler", "FP32", vec![1, 768], 0),
                (0, 0, (1, 1)),
            ),
        ),
        (
            "lstm_stack",
            (
                ("frames", "FP32", vec![1, -1, 512], None, 80),
                ("dec2", "FP32", vec![1, -1, 1024], 80),
                (80, 30, (30, 30)),
            ),
        ),
    ];
    for (name, expected) in table {
        let m = crate::graph::zoo::load(name).unwrap();
        assert_eq!(described(&describe(&m, 0).unwrap()), expected, "{name}");
    }
    // co-located, each model as it is alone, under its own node names, whichever part it is
    let load = |n: &str| crate::graph::zoo::load(n).unwrap();
    let both = Model::compose(vec![load("gnmt"), load("resnet50")]);
    for (p, name) in [(0, "gnmt"), (1, "resnet50")] {
        let h = describe(&both, p).unwrap();
        assert_eq!((h.name.as_str(), h.part), (name, p as u16));
        assert_eq!(
            described(&h),
            described(&describe(&load(name), 0).unwrap()),
            "{name}"
        );
    }
    // a model alone keeps its nodes' names whole, also one that looks prefixed
    let mut m = load("resnet50");
    m.nodes[0].name = "resnet50/image".into();
    assert_eq!(describe(&m, 0).unwrap().input.name, "resnet50/image");
}

#[test]
fn a_body_inflates_to_exactly_the_limit_and_not_a_byte_past_it() {
    use std::io::Write;
    let gzip = |n: usize| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&vec![7u8; n]).unwrap();
        axum::body::Bytes::from(e.finish().unwrap())
    };
    let mut h = axum::http::HeaderMap::new();
    h.insert(
        axum::http::header::CONTENT_ENCODING,
        "x-gzip".parse().unwrap(),
    );
    let got = decoded(&h, gzip(1000), 1000).unwrap();
    assert_eq!(&got[..], &[7u8; 1000][..]);
    let (st, msg) = decoded(&h, gzip(1001), 1000).unwrap_err();
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{msg}");
}

#[test]
fn the_binary_part_starts_where_the_header_says_within_the_body() {
    let with = |v: &str| {
        let mut h = axum::http::HeaderMap::new();
        h.insert(HEADER_LENGTH, v.parse().unwrap());
        h
    };
    let body = b"abcdef";
    assert_eq!(
        split(&axum::http::HeaderMap::new(), body),
        Ok((&body[..], &b""[..]))
    );
    assert_eq!(split(&with("3"), body), Ok((&b"abc"[..], &b"def"[..])));
    assert_eq!(split(&with(" 6 "), body), Ok((&body[..], &b""[..])));
    assert_eq!(split(&with("0"), body), Ok((&b""[..], &body[..])));
    for bad in ["7", "-1", "x"] {
        let msg = split(&with(bad), body).unwrap_err();
        assert!(
            msg.contains("a byte count within the body's 6"),
            "{bad}: {msg}"
        );
    }
    // given twice (even twice the same): refused, one would be dropped unseen
    let mut twice = with("3");
    twice.append(HEADER_LENGTH, "3".parse().unwrap());
    let msg = split(&twice, body).unwrap_err();
    assert!(msg.contains("given more than once"), "{msg}");
}

/// A response's status and body, read.
fn read(r: Response) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    let status = r.status();
    let headers = r.headers().clone();
    let body = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(axum::body::to_bytes(r.into_body(), usize::MAX))
        .unwrap();
    (status, headers, body.to_vec())
}

#[test]
fn an_answer_is_json_or_its_output_follows_the_json_as_bytes() {
    let f = front();
    let h = &f.models[0];
    let latency = std::time::Duration::from_micros(1500);
    let (st, _, body) = read(respond(
        &f,
        h,
        ("q", false),
        (&[1, 2], &[0.5, 1.0], latency),
    ));
    assert_eq!(st, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["id"], "q");
    assert_eq!(v["model_name"], h.name.as_str());
    assert_eq!(v["outputs"][0]["data"], json!([0.5, 1.0]));
    assert_eq!(v["parameters"]["latency_ms"], 1.5);
    assert_eq!(v["parameters"]["timing_emulation"], served::EMULATED);
    let (_, headers, body) = read(respond(&f, h, ("q", true), (&[1, 2], &[0.5, 1.0], latency)));
    let n: usize = headers[HEADER_LENGTH].to_str().unwrap().parse().unwrap();
    let (head, bytes) = body.split_at(n);
    let v: serde_json::Value = serde_json::from_slice(head).unwrap();
    assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 8);
    assert_eq!(bytes, [0.5f32.to_le_bytes(), 1.0f32.to_le_bytes()].concat());
    assert_eq!(
        headers[axum::http::header::CONTENT_TYPE],
        "application/octet-stream"
    );
}

#[test]
fn the_metadata_names_decode_steps_and_co_located_models_only_where_there_are_some() {
    let meta = |f: Front, name: &str| {
        let path = HashMap::from([("name".to_string(), name.to_string())]);
        let r = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(metadata(State(Arc::new(f)), Path(path)));
        let (st, _, body) = read(r);
        (
            st,
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
        )
    };
    let f = super::super::state::owned_front();
    let name = f.models[0].name.clone();
    let (st, v) = meta(f, &name);
    assert_eq!(st, StatusCode::OK);
    let keys: Vec<&String> = v["parameters"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["device", "max_input_length", "policy"]);
    assert_eq!(v["inputs"][0]["shape"], json!([1, 4]));
    let mut f = super::super::state::owned_front();
    f.models[0].max_dec = 1;
    f.models[0].default_dec = 1;
    let mut other = f.models[0].clone();
    other.name = "other".into();
    f.models.push(other);
    let (_, v) = meta(f, "other");
    assert_eq!(v["name"], "other");
    assert_eq!(v["parameters"]["max_decode_steps"], 1);
    assert_eq!(v["parameters"]["default_decode_steps"], 1);
    assert_eq!(v["parameters"]["colocated_with"], json!([name, "other"]));
    let (st, v) = meta(super::super::state::owned_front(), "nope");
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(v["error"].as_str().unwrap().contains("nope"), "{v}");
}

#[test]
fn a_fixed_number_of_rows_is_an_axis_in_and_out_and_a_coarser_input_is_not_served() {
    // frames of 512 features, made a fixed 3 rows (not variable): an axis of 3
    let mut m = crate::graph::zoo::load("lstm_stack").unwrap();
    m.nodes[0].out.rows = Rows::Fixed(3);
    assert_eq!(describe(&m, 0).unwrap().input.shape, vec![1, 3, 512]);
    // one row: no axis for it
    m.nodes[0].out.rows = Rows::Fixed(1);
    assert_eq!(describe(&m, 0).unwrap().input.shape, vec![1, 512]);
    // an output of 3 rows (not a decoder's): an axis of 3 too
    let mut r = crate::graph::zoo::load("resnet50").unwrap();
    let last = r.nodes.len() - 1;
    r.nodes[last].out.rows = Rows::Fixed(3);
    assert_eq!(describe(&r, 0).unwrap().output.shape, vec![1, 3, 1000]);
    // read at half the time resolution: refused, saying so
    m.nodes[0].out.rows = Rows::Src { div: 2 };
    let e = describe(&m, 0).err().unwrap().to_string();
    assert!(e.contains("coarser time resolution is not served"), "{e}");
}

/// A body sent as `chunks` and then, when `fails`, broken off (a reset connection reads so), or
/// left open forever when `stalls`.
struct Sent {
    chunks: Vec<axum::body::Bytes>,
    fails: bool,
    stalls: bool,
}

impl hyper::body::Body for Sent {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<std::result::Result<hyper::body::Frame<Self::Data>, Self::Error>>>
    {
        use std::task::Poll;
        if !self.chunks.is_empty() {
            let c = self.chunks.remove(0);
            return Poll::Ready(Some(Ok(hyper::body::Frame::data(c))));
        }
        match (self.fails, self.stalls) {
            (true, _) => Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset mid-body",
            )))),
            (false, true) => Poll::Pending,
            (false, false) => Poll::Ready(None),
        }
    }
}

#[test]
fn a_body_is_read_whole_or_refused_as_too_large_too_slow_or_broken_off() {
    let f = Front {
        max_body: 10,
        body_timeout: std::time::Duration::from_millis(50),
        ..super::super::state::owned_front()
    };
    let read = |chunks: &[&[u8]], fails: bool, stalls: bool| {
        let body = axum::body::Body::new(Sent {
            chunks: chunks
                .iter()
                .map(|c| axum::body::Bytes::copy_from_slice(c))
                .collect(),
            fails,
            stalls,
        });
        let (_taken, mut held) = take_in(&f, 0).ok().unwrap();
        let got = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(received(&f, body, &mut held));
        (got, held.held())
    };
    // whole, at exactly the limit, in two parts, charged its bytes times the parse factor
    let (got, held) = read(&[b"01234", b"56789"], false, false);
    assert_eq!(&got.unwrap()[..], b"0123456789");
    assert_eq!(held, 10 * PARSE_FACTOR);
    let read = |chunks: &[&[u8]], fails: bool, stalls: bool| read(chunks, fails, stalls).0;
    // a byte past the limit: 413, naming the flag
    let (st, msg) = read(&[b"01234", b"567890"], false, false).unwrap_err();
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{msg}");
    assert!(msg.contains("--max-body-mib"), "{msg}");
    // broken off after five bytes: 400 saying why, not counted too large
    let (st, msg) = read(&[b"01234"], true, false).unwrap_err();
    assert_eq!(st, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("connection reset mid-body"), "{msg}");
    // never finished: 408 at the body timeout, naming the flag
    let (st, msg) = read(&[b"01234"], false, true).unwrap_err();
    assert_eq!(st, StatusCode::REQUEST_TIMEOUT, "{msg}");
    assert!(msg.contains("--body-timeout-s"), "{msg}");
    // a body that would take the bodies in flight past --max-inflight-mib: 503, naming it
    let f = Front {
        max_inflight: 8 * PARSE_FACTOR,
        ..f
    };
    let body = axum::body::Body::new(Sent {
        chunks: vec![
            axum::body::Bytes::from_static(b"01234"),
            axum::body::Bytes::from_static(b"567"),
        ],
        fails: false,
        stalls: false,
    });
    // another body already holds 3 bytes' charge: the first chunk (5) fits, the second does
    // not
    let (_other_place, mut other) = take_in(&f, 0).ok().unwrap();
    other.grow(3 * PARSE_FACTOR).unwrap();
    let (_taken, mut held) = take_in(&f, 0).ok().unwrap();
    let got = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(received(&f, body, &mut held));
    let (st, msg) = got.unwrap_err();
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{msg}");
    assert!(msg.contains("--max-inflight-mib"), "{msg}");
    // the first chunk's charge stays held until the handler returns, then is released
    assert_eq!(held.held(), 5 * PARSE_FACTOR);
    drop((held, other));
    assert_eq!(f.inflight.load(Ordering::SeqCst), 0);
}

#[test]
fn a_request_not_admitted_is_told_429_and_when_to_retry() {
    let r = not_admitted("not admitted: …".into(), 3);
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()[axum::http::header::RETRY_AFTER], "3");
}
