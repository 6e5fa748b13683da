//! `lazybatch models`: the zoo, or the models named (built in, model files, ONNX files).

use super::emit;
use anyhow::{Context, Result};
use lazybatch::graph::zoo;
use serde_json::json;

/// Lists the built-in models (or `names`): class, nodes, parameters, MACs at batch 1.
pub(super) fn run(names: &[String], dims: &[(String, usize)], json_out: bool) -> Result<()> {
    let mut o = String::new();
    let mut rows = Vec::new();
    let names: Vec<&str> = if names.is_empty() {
        zoo::all_names()
    } else {
        names.iter().map(String::as_str).collect()
    };
    for name in names {
        let m = zoo::load_with(name, Default::default(), dims)
            .with_context(|| format!("loading model {name}"))?;
        let len = m.ref_lengths();
        rows.push(json!({
            "name": m.name,
            "class": m.architecture(),
            "nodes": m.nodes.len(),
            "params": m.params(),
            "macs": m.macs(len),
            "enc_steps": m.seq.as_ref().map(|_| len.enc),
            "dec_steps": m.seq.as_ref().map(|_| len.dec),
            "max_batch": m.max_batch,
            "description": m.description,
        }));
    }
    if json_out {
        out!(o, "{}", serde_json::to_string_pretty(&rows)?);
        return emit(&o);
    }
    out!(
        o,
        "{:<18} {:<12} {:>6} {:>13} {:>16}  {}",
        "model",
        "class",
        "nodes",
        "params",
        "MACs (batch 1)",
        "reference lengths (seq2seq: source/target steps; decoder-only: prompt/output)"
    );
    for r in &rows {
        let lens = match (r["enc_steps"].as_u64(), r["dec_steps"].as_u64()) {
            (Some(e), Some(d)) => format!("{e}/{d}"),
            _ => "-".into(),
        };
        out!(
            o,
            "{:<18} {:<12} {:>6} {:>13} {:>16}  {}",
            r["name"].as_str().unwrap_or(""),
            r["class"].as_str().unwrap_or(""),
            r["nodes"].as_u64().unwrap_or(0),
            lazybatch::report::table::grouped(r["params"].as_u64().unwrap_or(0)),
            lazybatch::report::table::grouped(r["macs"].as_u64().unwrap_or(0)),
            lens
        );
    }
    emit(&o)
}
