//! The graph IR and the zoo: totals against the reference, validation errors with file/line/field.

use lazybatch::graph::loader::parse_model;
use lazybatch::graph::{zoo, Lengths, NodeStep};
use lazybatch::Error;
use std::path::Path;

#[test]
fn zoo_parameter_totals_match_the_reference() {
    // shared/reference/models.md (torchvision, BERT, MLPerf figures)
    let expect = [
        ("resnet50", 25_557_032u64),
        ("vgg16", 138_357_544),
        ("mobilenet_v1", 4_231_976),
        ("bert_base", 109_482_240),
        ("transformer_base", 61_362_176),
        ("gnmt", 210_880_513),
        ("las", 14_286_125),
    ];
    for (name, params) in expect {
        let m = zoo::load(name).unwrap();
        assert_eq!(m.params(), params, "{name}");
    }
}

#[test]
fn cnn_macs_match_the_reference() {
    let one = Lengths { enc: 1, dec: 1 };
    assert_eq!(zoo::load("resnet50").unwrap().macs(one), 4_089_184_256);
    assert_eq!(zoo::load("vgg16").unwrap().macs(one), 15_470_264_320);
    assert_eq!(zoo::load("mobilenet_v1").unwrap().macs(one), 568_740_352);
    // 11,173,625,856 for the 12 layers at S=128 plus the 768x768 pooler
    assert_eq!(
        zoo::load("bert").unwrap().macs(one),
        11_173_625_856 + 768 * 768
    );
}

#[test]
fn seq2seq_macs_follow_the_reference_formulas() {
    for (s, t) in [(30u64, 30u64), (7, 19), (52, 41)] {
        let len = Lengths {
            enc: s as u32,
            dec: t as u32,
        };
        // models.md §2: 47.19 M per source token + T x (88.81 M + 2·1024·S)
        let gnmt = 47_185_920 * s + t * (88_805_376 + 2048 * s);
        assert_eq!(
            zoo::load("gnmt").unwrap().macs(len),
            gnmt,
            "gnmt S={s} T={t}"
        );
        // models.md §3: S(18.87M + 3.15M) + 6144 S² + T·39.28M + 6144 (T·S + T(T+1)/2)
        let tr = s * (18_874_368 + 3_145_728)
            + 6144 * s * s
            + t * 39_278_592
            + 6144 * (t * s + t * (t + 1) / 2);
        assert_eq!(
            zoo::load("transformer").unwrap().macs(len),
            tr,
            "transformer S={s} T={t}"
        );
    }
}

#[test]
fn unrolling_visits_every_node_step_once_in_order() {
    let m = zoo::load("gnmt").unwrap();
    let len = Lengths { enc: 5, dec: 3 };
    let mut at = Some(m.first_step());
    let mut seen = Vec::new();
    while let Some(s) = at {
        seen.push(s);
        at = m.next_step(s, len);
    }
    assert_eq!(seen.len() as u64, m.unrolled_len(len));
    let mut dedup = seen.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), seen.len(), "a (node, step) repeats");
    // the decoder's first node runs at steps 0, 1, 2
    let tgt = m.find("tgt_emb").unwrap().id;
    let steps: Vec<u32> = seen
        .iter()
        .filter(|s| s.node == tgt)
        .map(|s| s.step)
        .collect();
    assert_eq!(steps, vec![0, 1, 2]);
    assert_eq!(
        seen.last(),
        Some(&NodeStep {
            node: m.find("next_token").unwrap().id,
            step: 2
        })
    );
}

fn parse_err(text: &str) -> String {
    match parse_model(text, Path::new("bad.toml")) {
        Err(e @ Error::ModelFile { .. }) => e.to_string(),
        Err(e) => panic!("wrong error kind: {e}"),
        Ok(_) => panic!("accepted a bad model"),
    }
}

const HEAD: &str = "name = \"t\"\n[[node]]\nname = \"x\"\nop = \"input\"\nshape = [4, 8, 8]\n";

#[test]
fn unknown_op_names_file_line_and_field() {
    let e = parse_err(&format!(
        "{HEAD}[[node]]\nname = \"c\"\nop = \"convolution\"\ninputs = [\"x\"]\n"
    ));
    assert!(e.starts_with("bad.toml:8:"), "{e}");
    assert!(
        e.contains("node 'c': op") && e.contains("unknown op 'convolution'"),
        "{e}"
    );
}

#[test]
fn unknown_field_is_rejected_with_its_line() {
    let e = parse_err(&format!(
        "{HEAD}[[node]]\nname = \"c\"\nop = \"conv2d\"\ninputs = [\"x\"]\nout_channels = 4\nkernel = 3\nhiden = 3\n"
    ));
    assert!(e.starts_with("bad.toml:12:") && e.contains("hiden"), "{e}");
}

#[test]
fn shapes_must_agree_along_every_edge() {
    let e = parse_err(&format!(
        "{HEAD}[[node]]\nname = \"c\"\nop = \"conv2d\"\ninputs = [\"x\"]\nout_channels = 6\nkernel = 1\n\
         [[node]]\nname = \"s\"\nop = \"add\"\ninputs = [\"x\", \"c\"]\n"
    ));
    assert!(
        e.contains("node 's'") && e.contains("differ in shape"),
        "{e}"
    );
}

#[test]
fn inputs_must_be_defined_earlier() {
    let e = parse_err(&format!(
        "{HEAD}[[node]]\nname = \"a\"\nop = \"act\"\nkind = \"relu\"\ninputs = [\"b\"]\n\
         [[node]]\nname = \"b\"\nop = \"act\"\nkind = \"relu\"\ninputs = [\"a\"]\n"
    ));
    assert!(e.contains("not defined before"), "{e}");
}

#[test]
fn bad_values_are_rejected() {
    let e = parse_err(&format!(
        "{HEAD}[[node]]\nname = \"c\"\nop = \"conv2d\"\ninputs = [\"x\"]\nout_channels = -4\nkernel = 3\n"
    ));
    assert!(
        e.starts_with("bad.toml:10:")
            && e.contains("out_channels: expected an integer in [1, 16777216]"),
        "{e}"
    );
    let e = parse_err("name = \"t\"\n[[node]\n");
    assert!(e.contains("bad.toml:2"), "{e}");
    let e = parse_err(&format!(
        "{HEAD}[[node]]\nname = \"x\"\nop = \"flatten\"\ninputs = [\"x\"]\n"
    ));
    assert!(e.contains("duplicate"), "{e}");
}

#[test]
fn unknown_model_and_missing_file_are_errors() {
    assert!(matches!(
        zoo::load("resnet51"),
        Err(Error::UnknownModel(..))
    ));
    assert!(matches!(
        zoo::load("/nonexistent/m.toml"),
        Err(Error::Io { .. })
    ));
}

#[test]
fn a_user_model_file_loads_by_path() {
    let m = zoo::load(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tiny_seq2seq.toml"
    ))
    .unwrap();
    assert!(m.is_seq2seq());
    assert_eq!(m.loops.len(), 2);
}

#[test]
fn every_model_has_a_valid_reduced_variant() {
    use lazybatch::graph::loader::Scale;
    let s = Scale {
        width: 0.125,
        resolution: 0.25,
    };
    for name in zoo::builtin_names() {
        let full = zoo::load(name).unwrap();
        let small = zoo::load_scaled(name, s).unwrap();
        assert_eq!(small.nodes.len(), full.nodes.len(), "{name}");
        assert!(small.name.ends_with("@w0.125r0.25"));
        let len = small.ref_lengths();
        assert!(
            small.macs(len) * 20 < full.macs(len),
            "{name}: the variant is much cheaper"
        );
    }
    assert!(zoo::load_scaled(
        "resnet50",
        Scale {
            width: 0.0,
            resolution: 1.0
        }
    )
    .is_err());
}

#[test]
fn composed_models_keep_their_tied_tables() {
    use lazybatch::graph::op::Op;
    let m = lazybatch::graph::Model::compose(vec![
        zoo::load("gnmt").unwrap(),
        zoo::load("transformer").unwrap(),
    ]);
    let mut tied = 0;
    for n in &m.nodes {
        if let Op::Linear { tied: Some(t), .. } | Op::Embedding { tied: Some(t), .. } = &n.op {
            let owner = m.find(t).unwrap_or_else(|| {
                panic!("{}: tied table '{t}' not in the composed model", n.name)
            });
            // the table belongs to the same part (model) as the node that reads it
            assert_eq!(
                m.node_part[owner.id.idx()],
                m.node_part[n.id.idx()],
                "{}",
                n.name
            );
            tied += 1;
        }
    }
    assert!(tied > 0, "Transformer ties its tables");
}
