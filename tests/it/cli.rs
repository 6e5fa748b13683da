//! The binary: bad input gets a one-line error and a non-zero exit, never a panic.

use std::process::{Command, Output};

fn lazybatch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazybatch"))
        .args(args)
        .output()
        .expect("binary runs")
}

fn fails_with(args: &[&str], needle: &str) {
    let o = lazybatch(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?} should fail");
    assert!(err.contains(needle), "{args:?}: stderr was {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
}

#[test]
fn bad_input_is_a_clear_error() {
    fails_with(
        &["profile", "--model", "resnet51"],
        "unknown model 'resnet51'",
    );
    fails_with(
        &["profile", "--model", "resnet50", "--max-batch", "0"],
        "--max-batch",
    );
    fails_with(
        &["profile", "--model", "resnet50", "--max-batch", "-3"],
        "--max-batch",
    );
    fails_with(
        &["profile", "--model", "gnmt", "--dec-steps", "0"],
        "--dec-steps",
    );
    fails_with(
        &["profile", "--model", "resnet50", "--enc-steps", "3"],
        "static",
    );
    fails_with(
        &["profile", "--model", "resnet50", "--device", "tpu"],
        "unknown device",
    );
    fails_with(
        &["profile", "--model", "/nonexistent.toml"],
        "/nonexistent.toml",
    );
}

#[test]
fn bad_npu_config_names_the_line() {
    let dir = std::env::temp_dir().join(format!("lazybatch-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("npu.toml");
    std::fs::write(&f, "rows = 128\nfrequency = 9\n").unwrap();
    fails_with(
        &[
            "profile",
            "--model",
            "resnet50",
            "--npu-config",
            f.to_str().unwrap(),
        ],
        "npu.toml:2:",
    );
}

#[test]
fn models_and_profile_json_parse() {
    let o = lazybatch(&["models", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 7);
    let o = lazybatch(&["profile", "--model", "gnmt", "--max-batch", "4", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in [
        "model",
        "device",
        "max_batch",
        "single_input_latency_us",
        "batch_curve",
        "nodes",
    ] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    let n = &v["nodes"][0];
    assert_eq!(n["latency_us"].as_array().unwrap().len(), 4);
    assert_eq!(n["compute_cycles"].as_array().unwrap().len(), 4);
    assert_eq!(v["batch_curve"].as_array().unwrap().len(), 4);
}
