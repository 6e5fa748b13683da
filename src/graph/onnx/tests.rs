//! Unit tests of [`super`] (`mod.rs`): the fixtures cover every operator, external data, the
//! graph's one input and one output, operators outside the supported set, and weights of the
//! wrong size. In a file of their own so that the module reads top to bottom.
use super::*;
use proto::pb::tensor_proto::DataLocation;
use proto::pb::StringStringEntryProto;

#[test]
fn every_translated_operator_is_in_a_fixture_checked_against_onnxruntime() {
    // tests/it/onnx.rs checks every fixture that imports (all but bad_*) against
    // onnxruntime: together they must hold every operator the importer translates
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/onnx");
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("bad_") || !name.ends_with(".onnx") {
            continue;
        }
        let m = ModelProto::decode(&std::fs::read(&path).unwrap()[..]).unwrap();
        for n in &m.graph.unwrap().node {
            seen.insert(n.op_type().to_string());
        }
    }
    let missing: Vec<&str> = SUPPORTED
        .iter()
        .map(|(op, ..)| *op)
        .filter(|op| !seen.contains(*op))
        .collect();
    assert!(
        missing.is_empty(),
        "translated but in no fixture (scripts/onnx-fixtures.py): {missing:?}"
    );
}

/// A fresh directory of its own under the system's temporary one.
fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lazybatch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `mobilenet_style.onnx` with its largest initializer moved to the file `location` beside
/// it, written into `d`; returns the model's path and the moved bytes.
fn with_external(d: &Path, location: &str) -> (std::path::PathBuf, Vec<u8>) {
    let src = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/onnx/mobilenet_style.onnx"
    );
    let mut m = ModelProto::decode(&std::fs::read(src).unwrap()[..]).unwrap();
    let g = m.graph.as_mut().unwrap();
    let t = g
        .initializer
        .iter_mut()
        .max_by_key(|t| t.raw_data.as_ref().map_or(0, Vec::len))
        .unwrap();
    let bytes = t.raw_data.take().unwrap();
    t.data_location = Some(DataLocation::External as i32);
    t.external_data = vec![StringStringEntryProto {
        key: Some("location".into()),
        value: Some(location.into()),
    }];
    let path = d.join("model.onnx");
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    (path, bytes)
}

#[test]
fn external_data_is_read_from_the_models_directory_and_never_through_a_link_out_of_it() {
    let d = dir("onnx-external");
    let (path, bytes) = with_external(&d, "weights.bin");
    std::fs::write(d.join("weights.bin"), &bytes).unwrap();
    let plain = import(
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/onnx/mobilenet_style.onnx"
        )),
        &[],
    )
    .unwrap();
    let external = import(&path, &[]).unwrap();
    for n in &plain.nodes {
        assert_eq!(
            plain.imported.of(n),
            external.imported.of(n),
            "{}: the same weights either way",
            n.name
        );
    }
    // the same file reached through a link that leaves the directory: refused
    let outside = dir("onnx-external-outside");
    std::fs::write(outside.join("secret.bin"), &bytes).unwrap();
    std::fs::remove_file(d.join("weights.bin")).unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(outside.join("secret.bin"), d.join("weights.bin")).unwrap();
        let e = import(&path, &[]).unwrap_err().to_string();
        assert!(e.contains("leads outside the model's directory"), "{e}");
        std::fs::remove_file(d.join("weights.bin")).unwrap();
    }
    // a hard link to the file outside: nothing in its path shows where it leads, refused
    #[cfg(unix)]
    {
        std::fs::hard_link(outside.join("secret.bin"), d.join("weights.bin")).unwrap();
        let e = import(&path, &[]).unwrap_err().to_string();
        assert!(e.contains("2 hard links"), "{e}");
        std::fs::remove_file(d.join("weights.bin")).unwrap();
    }
    // not a regular file
    std::fs::create_dir(d.join("weights.bin")).unwrap();
    let e = import(&path, &[]).unwrap_err().to_string();
    assert!(e.contains("must be a regular file"), "{e}");
    // `..` and absolute locations, refused before anything is read
    for loc in ["../secret.bin", "/etc/passwd"] {
        let (path, _) = with_external(&d, loc);
        let e = import(&path, &[]).unwrap_err().to_string();
        assert!(e.contains("must be a relative path"), "{loc}: {e}");
    }
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn an_external_region_must_be_its_tensors_size_before_a_byte_is_copied() {
    // the largest initializer's region given a length past its tensor's size (the review's
    // amplification: 40 small tensors naming one 100 MB region were each copied whole),
    // and a file larger than the tensor with no length at all
    let d = dir("onnx-external-size");
    let (path, bytes) = with_external(&d, "weights.bin");
    let mut padded = bytes.clone();
    padded.extend_from_slice(&[0u8; 4096]);
    std::fs::write(d.join("weights.bin"), &padded).unwrap();
    let e = import(&path, &[]).unwrap_err().to_string();
    assert!(
        e.contains(&format!(
            "its external data is {} bytes, its tensor's shape",
            padded.len()
        )) && e.contains(&format!("take {}", bytes.len())),
        "{e}"
    );
    // with the region's offset and length given right, the same file imports
    let mut m = ModelProto::decode(&std::fs::read(&path).unwrap()[..]).unwrap();
    let g = m.graph.as_mut().unwrap();
    for t in &mut g.initializer {
        if !t.external_data.is_empty() {
            t.external_data.push(StringStringEntryProto {
                key: Some("length".into()),
                value: Some(bytes.len().to_string()),
            });
        }
    }
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    assert!(import(&path, &[]).is_ok());
    // a region past the file's end
    let mut m = ModelProto::decode(&std::fs::read(&path).unwrap()[..]).unwrap();
    let g = m.graph.as_mut().unwrap();
    for t in &mut g.initializer {
        if !t.external_data.is_empty() {
            t.external_data.push(StringStringEntryProto {
                key: Some("offset".into()),
                value: Some("8192".into()),
            });
        }
    }
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    let e = import(&path, &[]).unwrap_err().to_string();
    assert!(e.contains("lie outside weights.bin"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}

use proto::pb::tensor_proto::DataType;
use test_graph::{floats, graph, Built, W};

/// `x` through a ReLU: the smallest graph that imports.
fn relu(b: Built) -> Built {
    b.node("r", "Relu", &["x"], "y", vec![]).output("y")
}

#[test]
fn a_node_with_more_or_fewer_inputs_than_its_operator_takes_is_refused() {
    // the review's Relu of 200,001 inputs was imported, all but the first unread
    let e = floats(&[3])
        .node("r", "Relu", &["x", "x"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("node 'r' (Relu): 2 inputs, where the operator takes 1"),
        "{e}"
    );
    let e = floats(&[3])
        .node("m", "MatMul", &["x"], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("(MatMul): 1 inputs, where the operator takes 2"),
        "{e}"
    );
    // a variadic operator takes any number from its least
    let e = floats(&[3])
        .node("c", "Concat", &[], "y", vec![])
        .output("y")
        .refused();
    assert!(
        e.contains("(Concat): 0 inputs, where the operator takes at least 1"),
        "{e}"
    );
}

#[test]
fn the_graph_has_one_input_of_static_shape_with_a_batch_axis_first() {
    // an initializer listed among the inputs (as IR 3 files do) is not an input
    let m = relu(
        floats(&[3])
            .init("w", &[2], &[1.0, 2.0])
            .input("w", DataType::Float, &[2]),
    )
    .import();
    assert_eq!(m.nodes.len(), 2);
    assert_eq!(m.name, "built");
    assert_eq!(m.description, "imported from ONNX (opset 17, test_graph)");
    let e = relu(floats(&[3]).input("z", DataType::Float, &[3])).refused();
    assert!(
        e.contains("built.onnx")
            && e.contains("2 graph inputs besides initializers (x, z): exactly one"),
        "{e}"
    );
    let e = relu(floats(&[3]).untyped()).refused();
    assert!(e.contains("input 'x' is not a tensor"), "{e}");
    let e = relu(graph("x", DataType::Double, &[3])).refused();
    assert!(
        e.contains("input 'x': element type 11: float (values) or int64/int32"),
        "{e}"
    );
    for elem in [DataType::Int32, DataType::Int64] {
        let e = relu(graph("x", elem, &[4, 2])).refused();
        assert!(
            e.contains("token ids of shape [4, 2] per request: expected [seq]"),
            "{e}"
        );
    }
    let e = relu(floats(&[])).refused();
    assert!(
        e.contains("input 'x': shape of rank 1: expected a batch axis and at least one more"),
        "{e}"
    );
    let e = relu(floats(&[3, 0])).refused();
    assert!(
        e.contains("input 'x': axis 2 has no size: the graph's shapes must be static"),
        "{e}"
    );
    // the batch axis may be fixed or named anything
    let m = relu(floats(&[3]).named(0, "batch_size")).import();
    assert_eq!(m.nodes[0].out.feat, [3]);
    // a named axis takes its size from --dim, and --dim names an axis there is
    let seq = || relu(floats(&[3, 5]).named(1, "seq"));
    let m = seq().import_with(&[("seq", 7)]).unwrap();
    assert_eq!(m.nodes[0].out.feat, [7, 5]);
    let e = seq().refused();
    assert!(
        e.contains(
            "input 'x': axis 1 is named 'seq', not fixed: give its size with --dim seq=SIZE"
        ),
        "{e}"
    );
    let e = seq()
        .import_with(&[("seq", 7), ("len", 2)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "--dim len: input 'x' has no axis named 'len' besides its batch axis (named: seq)"
        ),
        "{e}"
    );
    let e = relu(floats(&[3]))
        .import_with(&[("N", 2)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--dim N: input 'x' has no axis named 'N' besides its batch axis (named: none)"),
        "{e}"
    );
    // sizes: an axis of at most 2^20, at most 2^32 values a request
    relu(floats(&[1 << 20])).import();
    let e = relu(floats(&[(1 << 20) + 1])).refused();
    assert!(
        e.contains("input 'x': axis 1 of 1048577: at most 1048576"),
        "{e}"
    );
    let e = relu(floats(&[1 << 16, (1 << 16) + 1])).refused();
    assert!(
        e.contains("[65536, 65537] per request: more than 2^32 values"),
        "{e}"
    );
    // exactly 2^32 is the most (the input read alone: imported, its buffers would take 16 GiB)
    let g = ModelProto::decode(&floats(&[1 << 16, 1 << 16]).encoded()[..])
        .unwrap()
        .graph
        .unwrap();
    let (name, per_request, tokens) = graph_input(&g, &HashMap::new(), &[]).unwrap();
    assert_eq!(
        (name.as_str(), per_request, tokens),
        ("x", vec![1 << 16, 1 << 16], false)
    );
}

#[test]
fn the_graph_has_one_output_the_last_node_computes() {
    let why = |b: Built| b.refused();
    let e = why(relu(floats(&[3])).output("x"));
    assert!(
        e.contains("2 graph outputs: exactly one is supported"),
        "{e}"
    );
    let e = why(floats(&[3]).output("x"));
    assert!(e.contains("output 'x' is the input itself"), "{e}");
    let e = why(floats(&[3])
        .node("r", "Relu", &["x"], "y", vec![])
        .node("s", "Sigmoid", &["x"], "z", vec![])
        .output("y"));
    assert!(
        e.contains("output 'y' is not the last node computed (other nodes follow it)"),
        "{e}"
    );
    let e = why(floats(&[3]).init("c", &[1], &[1.0]).output("c"));
    assert!(e.contains("output 'c' is a constant"), "{e}");
    let e = why(floats(&[3])
        .init("c", &[], &[2.0])
        .node("m", "Mul", &["x", "c"], "y", vec![])
        .output("y"));
    assert!(
        e.contains("output 'y' is a tensor scaled by a constant, not a complete layer"),
        "{e}"
    );
    let e = why(relu(floats(&[3])).output("q").output("y").output("y"));
    assert!(e.contains("4 graph outputs"), "{e}");
    let e = why(floats(&[3])
        .node("r", "Relu", &["x"], "y", vec![])
        .output("q"));
    assert!(e.contains("output 'q' is never computed"), "{e}");
    // the output a layer's, read by an activation too: the activation is not fused into the
    // layer the output names (the output counts as a reader), and follows it
    let e = why(floats(&[3])
        .init("w", &[3, 2], &W)
        .node("mm", "MatMul", &["x", "w"], "h", vec![])
        .node("r", "Relu", &["h"], "y", vec![])
        .output("h"));
    assert!(
        e.contains("output 'h' is not the last node computed (other nodes follow it)"),
        "{e}"
    );
}

#[test]
fn an_onnx_file_is_known_by_its_extension_in_any_case() {
    for (path, onnx) in [
        ("resnet50.onnx", true),
        ("models/BERT.ONNX", true),
        ("a.Onnx", true),
        ("resnet50.toml", false),
        ("onnx", false),
        ("model.onnx.data", false),
        ("", false),
    ] {
        assert_eq!(is_onnx(path), onnx, "{path}");
    }
}

#[test]
fn external_data_up_to_its_limit_is_read() {
    assert_eq!(within_external_limit(0), Ok(()));
    assert_eq!(within_external_limit(MAX_EXTERNAL), Ok(()));
    assert_eq!(
        within_external_limit(MAX_EXTERNAL + 1),
        Err("17179869185 bytes of external data, more than the 17179869184 read".into())
    );
}

#[test]
fn an_imported_model_is_named_for_its_file_and_described_by_its_onnx_opset_and_producer() {
    use proto::pb::OperatorSetIdProto;
    let set = |domain: &str, version: i64| OperatorSetIdProto {
        domain: Some(domain.into()),
        version: Some(version),
    };
    // ONNX's own operator set, by either of its names, wherever it is listed
    let model = ModelProto {
        opset_import: vec![set("com.microsoft", 1), set("ai.onnx", 17)],
        producer_name: Some("pytorch".into()),
        producer_version: Some("2.5.0".into()),
        ..Default::default()
    };
    assert_eq!(
        identity(Path::new("dir/bert.onnx"), &model),
        (
            "bert".to_string(),
            "imported from ONNX (opset 17, pytorch 2.5.0)".to_string()
        )
    );
    let model = ModelProto {
        opset_import: vec![set("ai.onnx.ml", 3), set("", 13)],
        ..Default::default()
    };
    assert_eq!(
        identity(Path::new("m.onnx"), &model).1,
        "imported from ONNX (opset 13)"
    );
    assert_eq!(
        identity(Path::new("/"), &ModelProto::default()).0,
        "onnx",
        "a path without a file name"
    );
}

#[test]
fn operators_outside_the_supported_set_are_listed_each_with_its_first_node() {
    let e = floats(&[3])
        .node("a", "Foo", &["x"], "y", vec![])
        .node("b", "Bar", &["y"], "z", vec![])
        .node("c", "Foo", &["z"], "u", vec![])
        .node("d", "Relu", &["u"], "v", vec![])
        .in_domain("com.microsoft")
        .output("v")
        .refused();
    assert!(
        e.contains("unsupported operators: Bar (node 'b'), Foo (node 'a'), Relu (node 'd') (supported: Conv, "),
        "{e}"
    );
    // ONNX's own domain by either name
    let m = floats(&[3])
        .node("d", "Relu", &["x"], "y", vec![])
        .in_domain("ai.onnx")
        .output("y")
        .import();
    assert_eq!(m.nodes.len(), 2);
}

#[test]
fn a_file_that_is_no_model_or_holds_no_graph_is_refused_naming_it() {
    let path = Path::new("built.onnx");
    let e = import_bytes(path, vec![0xff; 16], &[]).unwrap_err();
    assert!(matches!(e, Error::OnnxDecode { .. }), "{e}");
    let empty = ModelProto {
        ir_version: Some(8),
        ..Default::default()
    };
    let e = import_bytes(path, empty.encode_to_vec(), &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("built.onnx") && e.contains("the file holds no graph"),
        "{e}"
    );
    // the checker runs first
    let mut bytes = floats(&[3]).encoded();
    let mut m = ModelProto::decode(&bytes[..]).unwrap();
    m.ir_version = Some(2);
    bytes = m.encode_to_vec();
    let e = import_bytes(path, bytes, &[]).unwrap_err().to_string();
    assert!(e.contains("ir_version 2"), "{e}");
}

#[test]
fn weights_of_the_wrong_size_for_their_node_are_refused() {
    let built = floats(&[3])
        .init("w", &[3, 2], &[1.0; 6])
        .node("mm", "MatMul", &["x", "w"], "y", vec![])
        .output("y");
    let mut m = built.import();
    check_sizes(&m).unwrap();
    let wrong = |n: usize| Weights {
        w: vec![0.0; n],
        ..Weights::default()
    };
    for n in [5, 7] {
        m.imported = Imported::new(vec![None, Some(wrong(n))]);
        let e = check_sizes(&m).unwrap_err();
        assert_eq!(e, format!("node 'mm': {n} weights where its op needs 6"));
    }
    let conv = floats(&[2, 4, 4])
        .init("w", &[3, 1, 3, 3], &[0.5; 27])
        .node(
            "cv",
            "Conv",
            &["x", "w"],
            "y",
            vec![test_graph::int("group", 2)],
        )
        .output("y");
    let e = conv.refused();
    assert!(
        e.contains("group = 2 does not fit 2 input and 3 output channels"),
        "{e}"
    );
    let conv = floats(&[4, 4, 4])
        .init("w", &[6, 2, 3, 3], &[0.5; 108])
        .node(
            "cv",
            "Conv",
            &["x", "w"],
            "y",
            vec![test_graph::int("group", 2)],
        )
        .output("y");
    let mut m = conv.import();
    check_sizes(&m).unwrap();
    for n in [107, 109] {
        m.imported = Imported::new(vec![None, Some(wrong(n))]);
        let e = check_sizes(&m).unwrap_err();
        assert_eq!(e, format!("node 'cv': {n} weights where its op needs 108"));
    }
    // a node whose op takes no weights of a set size keeps what it has
    let ln = graph("ids", DataType::Int64, &[4])
        .init("t", &[5, 3], &[0.5; 15])
        .init("g", &[3], &[1.0; 3])
        .node("emb", "Gather", &["t", "ids"], "e", vec![])
        .node("ln", "LayerNormalization", &["e", "g"], "y", vec![])
        .output("y");
    let mut m = ln.import();
    m.imported = Imported::new(vec![None, Some(wrong(4)), Some(wrong(2))]);
    check_sizes(&m).unwrap();
}
