//! `capacity --target-rps R`'s report: each policy's fewest replicas behind the router that
//! serve R req/s within the bound, as a table, JSON and `replicas.json`
//! ([`lazybatch::run::replicas_needed`]).

use super::emit;
use anyhow::{Context, Result};
use lazybatch::run::replicas_needed::Need;
use serde_json::json;
use std::path::Path;

/// A finished search for the fewest replicas: what identifies it in its JSON and its table.
pub(super) struct Searched<'a> {
    pub(super) model: &'a str,
    pub(super) device: &'a str,
    pub(super) router: &'a str,
    pub(super) target_rps: f64,
    pub(super) bound: serde_json::Value,
    /// The table's first line.
    pub(super) head: &'a str,
    /// Wall seconds the search took.
    pub(super) wall: f64,
}

impl Searched<'_> {
    /// Each policy's replicas needed: with `out`, replicas.json; then the JSON array or the
    /// table.
    pub(super) fn report(&self, needs: &[Need], out: Option<&Path>, json: bool) -> Result<()> {
        let (id, head, wall) = (self, self.head, self.wall);
        let arr: Vec<serde_json::Value> = needs
        .iter()
        .map(|n| {
            let st = &n.at;
            json!({
                "model": id.model, "device": id.device, "policy": n.policy,
                "bound": id.bound, "target_rps": id.target_rps, "router": id.router,
                "replicas_needed": n.replicas, "note": n.note,
                "at_need": {
                    "latency_ms": st.latency_ms, "throughput_rps": st.throughput_rps,
                    "sla_violation_rate": st.sla_violation_rate,
                    "mean_batch_size": st.mean_batch_size, "rejected": st.rejected,
                },
                "probes": n.probes.iter().map(|p| json!({
                    "replicas": p.replicas, "ok": p.ok, "mean_ms": p.stats.latency_ms.mean,
                    "p99_ms": p.stats.latency_ms.p99, "throughput_rps": p.stats.throughput_rps,
                    "sla_violation_rate": p.stats.sla_violation_rate, "rejected": p.stats.rejected,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
        if let Some(dir) = out {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::write(
                dir.join("replicas.json"),
                serde_json::to_string_pretty(&arr)? + "\n",
            )?;
        }
        if json {
            return emit(&(serde_json::to_string_pretty(&arr)? + "\n"));
        }
        let mut o = String::new();
        out!(o, "{head}");
        let w = needs.iter().map(|n| n.policy.len()).fold(14, usize::max);
        out!(
            o,
            "{:<w$} {:>9} {:>10} {:>10} {:>9} {:>10} {:>7}",
            "policy",
            "replicas",
            "mean (ms)",
            "p99 (ms)",
            "SLA viol",
            "mean batch",
            "probes"
        );
        for n in needs {
            let st = &n.at;
            match n.replicas {
                Some(r) => out!(
                    o,
                    "{:<w$} {:>9} {:>10.3} {:>10.3} {:>8.2}% {:>10.2} {:>7}",
                    n.policy,
                    r,
                    st.latency_ms.mean,
                    st.latency_ms.p99,
                    100.0 * st.sla_violation_rate,
                    st.mean_batch_size,
                    n.probes.len()
                ),
                None => out!(
                    o,
                    "{:<w$} {:>9} {:>10} {:>10} {:>9} {:>10} {:>7}",
                    n.policy,
                    "none",
                    "–",
                    "–",
                    "–",
                    "–",
                    n.probes.len()
                ),
            }
        }
        for n in needs.iter().filter(|n| n.replicas.is_none()) {
            out!(o, "  {}: {}", n.policy, n.note.as_deref().unwrap_or(""));
        }
        out!(
            o,
            "({} probes in {wall:.2} s wall; each probe's figures are the mean over its seeds)",
            needs.iter().map(|n| n.probes.len()).sum::<usize>()
        );
        emit(&o)
    }
}
