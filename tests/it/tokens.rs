//! Time to first token and time per output token: `run --json` reports `ttft_ms`, `tpot_ms`
//! and `tokens_per_s` for a model with a decoder, and a model without one has none.

use crate::cli::lazybatch;
use serde_json::Value;

fn run_json(model: &str, policy: &str) -> Value {
    let o = lazybatch(&[
        "run",
        "--model",
        model,
        "--device",
        "npu",
        "--policy",
        policy,
        "--rate",
        "60",
        "--requests",
        "300",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_decoder_models_run_reports_its_tokens_and_a_cnns_does_not() {
    for policy in ["serial", "lazy", "continuous"] {
        let v = run_json("gnmt", policy);
        let (ttft, tpot, lat) = (&v["ttft_ms"], &v["tpot_ms"], &v["latency_ms"]);
        let f = |x: &Value, k: &str| x[k].as_f64().unwrap();
        // the first token comes before the request ends, and the tokens after it take less
        // than the whole request
        assert!(
            f(ttft, "mean") > 0.0 && f(ttft, "mean") < f(lat, "mean"),
            "{policy}: {v}"
        );
        assert!(f(ttft, "max") <= f(lat, "max"), "{policy}");
        assert!(
            f(tpot, "mean") > 0.0 && f(tpot, "p99") < f(lat, "p99"),
            "{policy}"
        );
        // GNMT's WMT outputs average about 30 words: tokens/s well above requests/s
        let tokens = v["tokens_per_s"].as_f64().unwrap();
        let rps = v["throughput_rps"].as_f64().unwrap();
        assert!(
            tokens > 5.0 * rps,
            "{policy}: {tokens} tokens/s at {rps} req/s"
        );
    }
    let cnn = run_json("resnet50", "lazy");
    for k in ["ttft_ms", "tpot_ms", "tokens_per_s"] {
        assert!(cnn.get(k).is_none(), "{k} in {cnn}");
    }
}

#[test]
fn the_tokens_experiment_writes_every_point_and_serial_queues_only_before_the_first_token() {
    let dir = crate::fresh_dir("tokens");
    let out = dir.to_string_lossy().to_string();
    let o = lazybatch(&[
        "reproduce",
        "--quick",
        "--figures",
        "tokens",
        "--npu-config",
        "default",
        "--out",
        &out,
        "--progress",
        "off",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(dir.join("default/tokens.csv")).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    // 2 models × 6 policies × 4 loads
    assert_eq!(rows.len(), 48, "{text}");
    let col = |r: &[&str], k: usize| r[k].parse::<f64>().unwrap();
    for m in ["gnmt", "transformer_base"] {
        let serial: Vec<&Vec<&str>> = rows
            .iter()
            .filter(|r| r[0] == m && r[1] == "serial")
            .collect();
        assert_eq!(serial.len(), 4);
        // a serial server's queue delays the first token more as the load rises, and never a
        // token after it (columns: ttft mean 4, tpot p99 7)
        for w in serial.windows(2) {
            assert!(col(w[1], 4) > col(w[0], 4), "{m}: {w:?}");
            assert_eq!(col(w[1], 7), col(w[0], 7), "{m}: {w:?}");
        }
        for r in rows.iter().filter(|r| r[0] == m) {
            // the first token's p99 is within the whole request's
            assert!(col(r, 5) <= col(r, 9), "{r:?}");
        }
    }
    assert!(dir.join("default/tokens.svg").exists());
}
