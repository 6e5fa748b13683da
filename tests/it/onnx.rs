//! ONNX import: the committed fixtures (`scripts/onnx-fixtures.py`) import with their weights,
//! serve bit-identically alone and batched, and match onnxruntime (`scripts/onnx-check.py`,
//! through Python) within 1e-4 of the output's scale in f32. Without onnxruntime the
//! comparison says so on stderr and passes, or fails when `REQUIRE_ONNXRUNTIME=1` (CI sets
//! it). Bad files give a clear error naming the file, and never a panic.

use lazybatch::device::cpu::CpuDevice;
use lazybatch::device::Device;
use lazybatch::graph::{zoo, Model, Op};
use lazybatch::run::verify::{inputs_and_outputs, verify_cpu};
use std::path::PathBuf;
use std::process::Command;

/// The committed fixtures that import (the BERT-style one with its sequence axis fixed).
pub(crate) const FIXTURES: &[&str] = &[
    "resnet_style",
    "mobilenet_style",
    "bert_style",
    "bert_sdpa_style",
];

/// The `--dim` sizes a fixture needs.
pub(crate) fn dims(name: &str) -> Vec<(String, usize)> {
    match name {
        "bert_style" | "bert_sdpa_style" => vec![("seq".to_string(), 16)],
        _ => Vec::new(),
    }
}

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/onnx/{name}.onnx"))
}

pub(crate) fn import(name: &str) -> Model {
    zoo::load_with(
        fixture(name).to_str().unwrap(),
        Default::default(),
        &dims(name),
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The largest difference between `dev`'s outputs and onnxruntime's on the same four inputs,
/// relative to the largest reference output; None (said on stderr) without onnxruntime.
pub(crate) fn against_onnxruntime(name: &str, dev: &mut dyn Device) -> Option<f64> {
    let m = import(name);
    let io = inputs_and_outputs(&m, dev, 4, 8, 7).unwrap();
    assert_eq!(io.len(), 4, "{name}: every request captured");
    // the Rust side's own outputs, checked whether or not onnxruntime is there to compare:
    // each request answered with finite values, and the same inputs on a fresh device of the
    // same seed give the same bits
    for (k, r) in io.iter().enumerate() {
        assert!(
            !r.output.is_empty() && r.output.iter().all(|x| x.is_finite()),
            "{name}: request {k}'s output is empty or not finite"
        );
    }
    if dev.name() == "cpu" {
        let again = inputs_and_outputs(&m, &mut CpuDevice::new(3), 4, 8, 7).unwrap();
        for (k, (a, b)) in io.iter().zip(&again).enumerate() {
            assert_eq!(a.input, b.input, "{name}: request {k}'s input");
            assert_eq!(
                a.output, b.output,
                "{name}: request {k}'s output, run again"
            );
        }
    }
    let json = serde_json::json!({
        "inputs": io.iter().map(|r| &r.input).collect::<Vec<_>>(),
        "outputs": io.iter().map(|r| &r.output).collect::<Vec<_>>(),
    });
    let path =
        std::env::temp_dir().join(format!("lazybatch-onnx-{name}-{}.json", std::process::id()));
    std::fs::write(&path, json.to_string()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/onnx-check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(fixture(name))
        .arg(&path)
        .output();
    std::fs::remove_file(&path).ok();
    let out = crate::python_check(out, "REQUIRE_ONNXRUNTIME", name)?;
    assert!(
        out.status.success(),
        "{name}: onnx-check failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["values"].as_u64().unwrap() > 0, "{name}: {v}");
    Some(v["rel_diff"].as_f64().unwrap())
}

#[test]
fn onnx_fixtures_match_onnxruntime_on_the_cpu_device() {
    for name in FIXTURES {
        let Some(rel) = against_onnxruntime(name, &mut CpuDevice::new(3)) else {
            continue;
        };
        eprintln!("{name}: relative difference {rel:e} against onnxruntime");
        assert!(
            rel <= 1e-4,
            "{name}: relative difference {rel:e} against onnxruntime"
        );
    }
}

/// The one-operator fixtures (`op_*.onnx`, `scripts/onnx-fixtures.py`), by name.
fn operator_fixtures() -> Vec<String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/onnx");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("op_") && n.ends_with(".onnx"))
        .map(|n| n.trim_end_matches(".onnx").to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn every_operator_fixture_matches_onnxruntime_and_serves_alone_as_batched() {
    let names = operator_fixtures();
    assert!(names.len() >= 10, "{names:?}");
    for name in &names {
        // alone and batched on the CPU device, bit for bit
        let m = import(name);
        let r = verify_cpu(&m, 8, 4, 3).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(r.ok && r.bit_identical, "{name}: {r:?}");
        let Some(rel) = against_onnxruntime(name, &mut CpuDevice::new(3)) else {
            continue;
        };
        eprintln!("{name}: relative difference {rel:e} against onnxruntime");
        assert!(
            rel <= 1e-5,
            "{name}: relative difference {rel:e} against onnxruntime"
        );
    }
}

#[test]
fn imported_weights_replace_the_generated_ones() {
    // the same graph with generated weights computes something else: the file's weights are used
    for name in FIXTURES {
        let m = import(name);
        assert!(!m.imported.is_empty());
        let mut generated = m.clone();
        generated.imported = Default::default();
        let a = inputs_and_outputs(&m, &mut CpuDevice::new(3), 1, 8, 7).unwrap();
        let b = inputs_and_outputs(&generated, &mut CpuDevice::new(3), 1, 8, 7).unwrap();
        assert_eq!(a[0].input, b[0].input);
        assert_ne!(a[0].output, b[0].output, "{name}");
    }
}

#[test]
fn imported_models_serve_bit_identically_alone_and_batched() {
    for name in FIXTURES {
        let r = verify_cpu(&import(name), 12, 8, 5).unwrap();
        assert!(r.ok && r.bit_identical, "{name}: {r:?}");
        assert!(r.preemptions > 0 && r.merges > 0, "{name}: {r:?}");
    }
}

#[test]
fn batch_norm_and_activations_fold_into_the_convolutions() {
    // resnet_style: 6 convolutions (BN folded, ReLU fused), 2 adds with their ReLU, a max pool,
    // a global pool, a flatten and the Gemm as one linear layer with its bias
    let m = import("resnet_style");
    let ops: Vec<&str> = m.nodes.iter().map(|n| n.op.kind_name()).collect();
    assert_eq!(ops.iter().filter(|o| **o == "conv2d").count(), 6, "{ops:?}");
    assert!(
        !ops.contains(&"batchnorm") && !ops.contains(&"act"),
        "{ops:?}"
    );
    assert_eq!(m.nodes.len(), 13, "{ops:?}");
    // mobilenet_style: depthwise convolutions stay depthwise
    let m = import("mobilenet_style");
    let dw = m
        .nodes
        .iter()
        .filter(|n| matches!(n.op, Op::Conv2d { groups, .. } if groups > 1 && groups == n.in_shapes[0].feat[0]))
        .count();
    assert_eq!(dw, 3);
    // both BERT exports become the same 27 nodes: per layer Q, K, V, their concat, attention,
    // the output projection, the residual add, layer norm, the FFN (GELU fused), FFN out, add,
    // layer norm; and compute the same thing (same weights, seed 6 in the script)
    let kinds = |m: &Model| -> Vec<String> {
        m.nodes
            .iter()
            .map(|n| format!("{}{:?}", n.op.kind_name(), n.out.feat))
            .collect()
    };
    let (a, b) = (import("bert_style"), import("bert_sdpa_style"));
    assert_eq!(a.nodes.len(), 27);
    assert_eq!(kinds(&a), kinds(&b));
    let gelu = a
        .nodes
        .iter()
        .filter(|n| {
            matches!(
                n.op,
                Op::Linear {
                    act: lazybatch::graph::op::Act::GeluErf,
                    ..
                }
            )
        })
        .count();
    assert_eq!(gelu, 2);
    let outs = |m: &Model| inputs_and_outputs(m, &mut CpuDevice::new(3), 1, 8, 7).unwrap();
    let (oa, ob) = (outs(&a), outs(&b));
    let diff = oa[0]
        .output
        .iter()
        .zip(&ob[0].output)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    assert!(diff < 1e-5, "the two exports differ by {diff}");
}

/// The error importing `path`, as the command line prints it.
fn import_error(path: &std::path::Path) -> String {
    match zoo::load(path.to_str().unwrap()) {
        Ok(_) => panic!("{} imported", path.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_onnx_files_are_refused_with_the_file_and_the_node() {
    // a truncated file: the protobuf does not decode
    let bytes = std::fs::read(fixture("resnet_style")).unwrap();
    let cut = std::env::temp_dir().join(format!("lazybatch-truncated-{}.onnx", std::process::id()));
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let e = import_error(&cut);
    std::fs::remove_file(&cut).ok();
    assert!(
        e.contains("truncated") && e.contains("protobuf does not decode"),
        "{e}"
    );
    // every unsupported operator, once each, with a node that uses it
    let e = import_error(&fixture("bad_unknown_ops"));
    assert!(e.contains("bad_unknown_ops.onnx"), "{e}");
    assert!(
        e.contains("Floor (node 'floor_4')") && e.contains("Resize (node 'resize_3')"),
        "{e}"
    );
    assert_eq!(e.matches("Floor (").count(), 1, "{e}");
    // a weight that is not there
    let e = import_error(&fixture("bad_missing_initializer"));
    assert!(
        e.contains("node 'conv_1' (Conv): input 1 'missing_weight'"),
        "{e}"
    );
    // a named axis without --dim, then with it
    let e = import_error(&fixture("bad_dynamic_shape"));
    assert!(
        e.contains("axis 2 is named 'height'") && e.contains("--dim height=SIZE"),
        "{e}"
    );
    let dims = [("height".to_string(), 8)];
    let path = fixture("bad_dynamic_shape");
    let m = zoo::load_with(path.to_str().unwrap(), Default::default(), &dims).unwrap();
    assert_eq!(m.nodes[0].out.feat, [3, 8, 8]);
    // a --dim naming no axis is a mistake, not ignored
    let typo = [("hieght".to_string(), 8)];
    let e = zoo::load_with(path.to_str().unwrap(), Default::default(), &typo).unwrap_err();
    assert!(e.to_string().contains("--dim hieght: input 'input' has no axis named 'hieght' besides its batch axis (named: height)"), "{e}");
}

#[test]
fn the_command_line_refuses_a_bad_onnx_file_with_a_non_zero_exit() {
    let bin = env!("CARGO_BIN_EXE_lazybatch");
    for (f, says) in [
        ("bad_unknown_ops", "unsupported operators"),
        ("bad_missing_initializer", "neither an initializer"),
        ("bad_dynamic_shape", "--dim height=SIZE"),
    ] {
        let out = Command::new(bin)
            .args(["profile", "--device", "npu", "--model"])
            .arg(fixture(f))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{f}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(says),
            "{f}: {err}"
        );
    }
}

#[test]
fn imported_models_run_under_every_policy_on_the_npu_model_and_the_cpu() {
    let bin = env!("CARGO_BIN_EXE_lazybatch");
    let policies =
        "serial,graph:0,graph:5,cellular:5,continuous,lazy,lazy:strict,lazy:adaptive,oracle";
    for name in FIXTURES {
        for (device, requests) in [("npu", "400"), ("cpu", "60")] {
            let out = Command::new(bin)
                .args([
                    "compare",
                    "--device",
                    device,
                    "--rates",
                    "300",
                    "--requests",
                    requests,
                ])
                .args(["--policies", policies, "--json", "--model"])
                .arg(fixture(name))
                .args(dims(name).iter().map(|(k, v)| format!("--dim={k}={v}")))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{name} on {device}: {err}");
            let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let rows = rows.as_array().unwrap();
            assert_eq!(
                rows.len(),
                policies.split(',').count(),
                "{name} on {device}"
            );
            for r in rows {
                let done = r["completed"].as_u64().unwrap();
                assert_eq!(done.to_string(), requests, "{name} on {device}: {r}");
            }
        }
    }
}

#[test]
fn damaged_onnx_files_give_errors_never_panics() {
    // each fixture with bytes overwritten or cut at seeded places: an import that succeeds or
    // fails with an error, never a panic (a damaged weight still decodes; a damaged structure
    // must not crash the importer)
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let path = std::env::temp_dir().join(format!("lazybatch-damaged-{}.onnx", std::process::id()));
    let (mut ok, mut refused) = (0, 0);
    for name in FIXTURES {
        let bytes = std::fs::read(fixture(name)).unwrap();
        for _ in 0..150 {
            let mut b = bytes.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % b.len();
                b[at] = next() as u8;
            }
            if next() % 4 == 0 {
                b.truncate((next() as usize) % b.len());
            }
            std::fs::write(&path, &b).unwrap();
            match zoo::load_with(path.to_str().unwrap(), Default::default(), &dims(name)) {
                Ok(_) => ok += 1,
                Err(_) => refused += 1,
            }
        }
    }
    std::fs::remove_file(&path).ok();
    eprintln!("damaged files: {ok} imported, {refused} refused");
    assert!(refused > 0);
}

/// Serves `inputs` (plus one input of the wrong length) on `dev` through an exchange, as a
/// front end would, batched under GraphB(0): each request's outputs, and the inputs refused.
pub(crate) fn through_an_exchange(
    m: &Model,
    dev: &mut dyn Device,
    inputs: &[Vec<f32>],
) -> (Vec<Vec<f32>>, u64) {
    use lazybatch::device::exchange::Exchange;
    use lazybatch::engine;
    use lazybatch::profile::Profile;
    use lazybatch::runtime::Predictor;
    use lazybatch::time::{Nanos, VirtualClock};
    use lazybatch::traffic::Arrival;
    use std::sync::Arc;
    let x = Arc::new(Exchange::new());
    let n = inputs.len() as u64;
    for (k, v) in inputs.iter().enumerate() {
        x.put_input(1000 + k as u64, v.clone());
    }
    x.put_input(1000 + n, vec![0.0; 5]);
    dev.prepare(m, 8).unwrap();
    dev.set_exchange(Some(x.clone()));
    let pred = Predictor::new(m, &Profile::uniform(m, 8, Nanos(1)), 1);
    let setup = engine::Setup::new(m, &pred, crate::sla(1.0 * 1e3), crate::mb(8));
    let arrivals: Vec<Arrival> = (0..=n)
        .map(|k| Arrival {
            key: Some(1000 + k),
            ..Arrival::default()
        })
        .collect();
    let mut pol = lazybatch::policy::parse("graph:0", 8).unwrap();
    let out = engine::run(
        &setup,
        dev,
        pol.as_mut(),
        &mut VirtualClock::new(),
        &arrivals,
    )
    .unwrap();
    dev.set_exchange(None);
    assert!(out.stats().mean_batch_size > 1.0, "served batched");
    let outs = (0..n)
        .map(|k| {
            x.take_output(1000 + k)
                .expect("an output for every request")
        })
        .collect();
    assert!(
        x.take_output(1000 + n).is_some(),
        "the misfit is served too"
    );
    assert_eq!(x.held(), (0, 0), "nothing left behind");
    (outs, x.misfits())
}

#[test]
fn a_front_end_exchanges_inputs_and_outputs_with_the_cpu_device() {
    // what three requests compute on their generated inputs (seed 3) is what a device with
    // another seed computes when a front end hands it those inputs under its own keys (the
    // weights are the file's), batched, bit for bit; the misfit input is counted
    let m = import("mobilenet_style");
    let io = inputs_and_outputs(&m, &mut CpuDevice::new(3), 3, 8, 7).unwrap();
    let inputs: Vec<Vec<f32>> = io.iter().map(|r| r.input.clone()).collect();
    let (outs, misfits) = through_an_exchange(&m, &mut CpuDevice::new(99), &inputs);
    for (k, (got, r)) in outs.iter().zip(&io).enumerate() {
        assert!(
            got.iter()
                .zip(&r.output)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "request {k}"
        );
    }
    assert_eq!(misfits, 1);
}

/// `dev`'s outputs on a decoder export (`gpt2_style`: every step's logits and token) against
/// onnxruntime's run of the same file step by step with its key/value cache, on four
/// requests: (relative difference of the logits, tokens onnxruntime would have chosen
/// otherwise, decode steps compared); None (said on stderr) without onnxruntime.
pub(crate) fn decoder_against_onnxruntime(dev: &mut dyn Device) -> Option<(f64, u64, u64)> {
    let name = "gpt2_style";
    let m = import(name);
    let io = inputs_and_outputs(&m, dev, 4, 8, 7).unwrap();
    assert_eq!(io.len(), 4, "{name}: every request captured");
    let json = serde_json::json!({
        "inputs": io.iter().map(|r| &r.input).collect::<Vec<_>>(),
        "outputs": io.iter().map(|r| &r.output).collect::<Vec<_>>(),
    });
    let path =
        std::env::temp_dir().join(format!("lazybatch-onnx-{name}-{}.json", std::process::id()));
    std::fs::write(&path, json.to_string()).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/onnx-decoder-check.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(fixture(name))
        .arg(&path)
        .output();
    std::fs::remove_file(&path).ok();
    let out = crate::python_check(out, "REQUIRE_ONNXRUNTIME", name)?;
    assert!(
        out.status.success(),
        "{name}: onnx-decoder-check failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Some((
        v["rel_diff"].as_f64().unwrap(),
        v["tokens_differ"].as_u64().unwrap(),
        v["steps"].as_u64().unwrap(),
    ))
}

/// A GPT-2-style export with its key/value cache (what torch.onnx.export writes for Hugging
/// Face's GPT2LMHeadModel with use_cache) imports as our decoder-only graph: a prefill and
/// decode steps sharing its weights, which serve bit-identically alone and batched across
/// steps, and give onnxruntime's logits at every step, the same tokens.
#[test]
fn a_decoder_export_matches_onnxruntime_step_by_step() {
    let m = import("gpt2_style");
    let s = m.seq.as_ref().unwrap();
    assert!(s.prefill_token && s.max_context == Some(128), "{s:?}");
    // the file's parameters once (the decode steps share them): wte and wpe, per layer two
    // norms and four linear layers, ln_f; the logits are tied to wte
    let (d, v, p, ffn) = (32u64, 97u64, 128u64, 128u64);
    let layer = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * ffn + ffn) + (ffn * d + d);
    assert_eq!(m.params(), v * d + p * d + 2 * layer + 2 * d);
    let r = verify_cpu(&m, 6, 4, 3).unwrap();
    assert!(r.ok && r.bit_identical && r.cross_step > 0, "{r:?}");
    let Some((rel, differ, steps)) = decoder_against_onnxruntime(&mut CpuDevice::new(3)) else {
        return;
    };
    eprintln!("gpt2_style: relative difference {rel:e} over {steps} steps, {differ} tokens differ");
    assert!(
        steps > 4 && rel <= 1e-4 && differ == 0,
        "{rel} {differ} {steps}"
    );
}
