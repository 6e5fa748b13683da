//! Fuzzing the three parsers users feed files to — the model-file loader, the NPU
//! configuration and the arrival trace — with `proptest` (cargo-fuzz needs a nightly
//! toolchain; this runs on the pinned stable one). Inputs are mutations of a corpus seeded from
//! `models/`, `configs/npu/` and a sample trace: bytes flipped, inserted and deleted, lines
//! duplicated and dropped, and numbers replaced by extremes. Every input must give a model (a
//! configuration, a trace) or an error, never a panic; a model that loads is also profiled on
//! the NPU model. CI runs a few dozen cases per target (`FUZZ_CASES`, default 48);
//! `scripts/fuzz.sh` runs the long campaign. What a campaign found is kept below as regression
//! tests.

use lazybatch::device::npu::{Npu, NpuConfig};
use lazybatch::graph::loader::parse_model;
use lazybatch::graph::zoo;
use lazybatch::profile::Profile;
use lazybatch::run::{RunSpec, Testbed};
use lazybatch::traffic::parse_trace;
use proptest::prelude::*;
use std::path::Path;

const MODELS: &[&str] = &[
    include_str!("../../models/resnet50.toml"),
    include_str!("../../models/gnmt.toml"),
    include_str!("../../models/transformer_base.toml"),
    include_str!("../../models/mobilenet_v1.toml"),
    include_str!("../../models/las.toml"),
    include_str!("../../models/lstm_stack.toml"),
    include_str!("../../tests/fixtures/tiny_seq2seq.toml"),
    include_str!("../../tests/fixtures/eight_nodes.toml"),
];
const NPU: &[&str] = &[
    include_str!("../../configs/npu/default.toml"),
    include_str!("../../configs/npu/paper.toml"),
];
const TRACE: &str = "# time_ms [enc dec]\n0\n0.5 12 14\n3 80 80\n3\n17.25 1 1 # a comment\n";

/// Numbers a hostile user would try.
const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1e300",
    "-1e300",
    "1e-300",
    "nan",
    "inf",
    "4294967296",
    "18446744073709551615",
    "9223372036854775807",
    "16777217",
    "0.0",
    "2",
    "65536",
];

/// One edit of a text.
#[derive(Clone, Debug)]
enum Mutation {
    FlipByte(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    DuplicateLine(usize),
    DropLine(usize),
    Extreme(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::FlipByte(i, b)),
        (
            any::<usize>(),
            proptest::collection::vec(
                prop_oneof![
                    Just(b'['),
                    Just(b']'),
                    Just(b'"'),
                    Just(b'='),
                    Just(b'\n'),
                    any::<u8>()
                ],
                1..8
            )
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        any::<usize>().prop_map(Mutation::DropLine),
        (any::<usize>(), any::<usize>()).prop_map(|(i, k)| Mutation::Extreme(i, k)),
    ]
}

/// Applies `ms` to `text` (lossily back to UTF-8: the parsers read text).
fn mutate(text: &str, ms: &[Mutation]) -> String {
    let mut b = text.as_bytes().to_vec();
    for m in ms {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
        match m {
            Mutation::FlipByte(i, x) if !b.is_empty() => {
                let k = at(*i, b.len());
                b[k] ^= x;
            }
            Mutation::Insert(i, v) => {
                let k = at(*i, b.len() + 1);
                b.splice(k..k, v.iter().copied());
            }
            Mutation::Delete(i, n) if !b.is_empty() => {
                let k = at(*i, b.len());
                b.drain(k..(k + n).min(b.len()));
            }
            Mutation::DuplicateLine(i) | Mutation::DropLine(i) => {
                let s = String::from_utf8_lossy(&b).into_owned();
                let mut lines: Vec<&str> = s.lines().collect();
                if !lines.is_empty() {
                    let k = at(*i, lines.len());
                    if matches!(m, Mutation::DropLine(_)) {
                        lines.remove(k);
                    } else {
                        lines.insert(k, lines[k]);
                    }
                }
                b = (lines.join("\n") + "\n").into_bytes();
            }
            Mutation::Extreme(i, k) => {
                // replace the i-th number of the text by an extreme
                let s = String::from_utf8_lossy(&b).into_owned();
                let spans: Vec<(usize, usize)> = number_spans(&s);
                if !spans.is_empty() {
                    let (lo, hi) = spans[at(*i, spans.len())];
                    let e = EXTREMES[at(*k, EXTREMES.len())];
                    b = format!("{}{e}{}", &s[..lo], &s[hi..]).into_bytes();
                }
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

/// Byte ranges of the digit runs of `s`.
fn number_spans(s: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        match (c.is_ascii_digit(), start) {
            (true, None) => start = Some(i),
            (false, Some(st)) => {
                out.push((st, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(st) = start {
        out.push((st, s.len()));
    }
    out
}

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

/// A model file: loads or errs; a model that loads is profiled on the NPU model and serves a
/// short burst under LazyB — an error is fine, a panic or a lost request is not.
fn model_case(text: &str) {
    let Ok(m) = parse_model(text, Path::new("fuzz.toml")) else {
        return;
    };
    let mb = m.max_batch.clamp(1, 4);
    let Ok(b) = Testbed::new(m, NpuConfig::default(), crate::mb(mb), 90.0) else {
        return;
    };
    let cfg = RunSpec {
        policy: lazybatch::policy::Spec::parse("lazy", mb).unwrap(),
        rate: 1e5,
        arrivals: Default::default(),
        classes: None,
        shed: false,
        abandon_late: false,
        admit: Default::default(),
        requests: 12,
        sla: crate::sla(100.0),
        seed: 1,
        max_batch: crate::mb(mb),
        max_pending: lazybatch::runtime::MaxPending::new(8).unwrap(),
        colocated: None,
        replicas: lazybatch::engine::Replicas::ONE,
    };
    match b.run(&cfg, Default::default()) {
        Ok(out) => {
            let st = out.stats();
            assert_eq!(st.completed + st.rejected, 12);
        }
        // a model that loads may still be refused by a check the loader does not make, but
        // never by a broken invariant of our own
        Err(e @ lazybatch::Error::Internal(_)) => panic!("internal error on a loaded model: {e}"),
        Err(_) => {}
    }
}

proptest! {
    #![proptest_config(crate::proptest_config(cases()))]

    #[test]
    fn fuzz_model_files(k in 0usize..MODELS.len(), ms in proptest::collection::vec(mutation(), 1..6)) {
        model_case(&mutate(MODELS[k], &ms));
    }

    #[test]
    fn fuzz_npu_configurations(k in 0usize..NPU.len(), ms in proptest::collection::vec(mutation(), 1..6)) {
        if let Ok(cfg) = NpuConfig::from_toml(&mutate(NPU[k], &ms), Path::new("fuzz.toml")) {
            // a configuration that parses is in range: the NPU model times a model with it, the
            // whole graph in more than nothing and less than the horizon
            let m = zoo::load("resnet50").unwrap();
            let mut npu = Npu::new(cfg).unwrap();
            let p = Profile::measure(&mut npu, &m, 2, m.ref_lengths()).unwrap();
            let total: u64 = p.nodes.iter().map(|n| n.latency_ns[0]).sum();
            prop_assert!(total > 0 && total < lazybatch::time::Nanos::HORIZON.0, "{total}");
        }
    }

    #[test]
    fn fuzz_traces(ms in proptest::collection::vec(mutation(), 1..6), gnmt in any::<bool>()) {
        let m = zoo::load(if gnmt { "gnmt" } else { "resnet50" }).unwrap();
        if let Ok(t) = parse_trace(&mutate(TRACE, &ms), Path::new("fuzz.trace"), &m, 1) {
            let seq = m.seq.clone();
            let mut last = lazybatch::time::Nanos::ZERO;
            for a in t.arrivals {
                prop_assert!(a.time >= last && a.time <= lazybatch::time::Nanos::HORIZON);
                last = a.time;
                let (me, md) = seq.as_ref().map_or((1, 1), |s| (s.max_enc, s.max_dec));
                prop_assert!(a.len.enc >= 1 && a.len.enc <= me && a.len.dec >= 1 && a.len.dec <= md);
            }
        }
    }
}

#[test]
fn the_unmutated_corpus_loads() {
    for t in MODELS {
        parse_model(t, Path::new("corpus.toml")).unwrap();
    }
    for t in NPU {
        NpuConfig::from_toml(t, Path::new("corpus.toml")).unwrap();
    }
    let m = zoo::load("gnmt").unwrap();
    assert_eq!(
        parse_trace(TRACE, Path::new("t"), &m, 1).unwrap().expected,
        5
    );
}
