//! `lazybatch load`: an open-loop load generator against a server speaking the Open Inference
//! Protocol (`lazybatch serve`, or any other), printing the same table, JSON and `.hgrm` as
//! `run`, so a served run and a simulated one compare line by line.

use super::serve::{run_json, text, RunId};
use super::{check_rate, emit, in_range, ModelArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use lazybatch::http::load::{drive, LoadOptions};
use lazybatch::metrics;
use lazybatch::traffic::{self, Classes, Process, MAX_REQUESTS};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub(super) struct LoadArgs {
    /// The server's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    url: String,
    /// The served model, as given to `serve` (its input shape and sequence lengths come from it).
    #[command(flatten)]
    model: ModelArgs,
    /// Arrival rate in requests/s.
    #[arg(long, allow_negative_numbers = true)]
    rate: f64,
    /// Number of requests, in [1, 10⁷].
    #[arg(long, default_value_t = 1000, allow_negative_numbers = true)]
    requests: i64,
    /// Arrival process: poisson, gamma:CV or onoff:ON_MS:OFF_MS (as `run`).
    #[arg(long, value_name = "PROCESS", default_value = "poisson")]
    arrivals: String,
    /// SLA classes NAME:SLA_MS:SHARE,... (as `run`): each request carries its class's SLA in
    /// the request's `sla_ms` parameter.
    #[arg(long, value_name = "CLASSES")]
    classes: Option<String>,
    /// The SLA, in ms, that SLA violations are counted against (requests without a class).
    #[arg(long, default_value_t = 100.0, allow_negative_numbers = true)]
    sla_ms: f64,
    /// Seed of the arrivals (the same arrivals as `run --seed`) and the input values.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The most requests in flight, in [1, 65536]; an arrival beyond them is not sent (counted).
    #[arg(long, default_value_t = 256, allow_negative_numbers = true)]
    concurrency: i64,
    /// Send tensors as JSON numbers instead of the binary tensor extension.
    #[arg(long)]
    json_tensors: bool,
    /// The most seconds a request may take, from sending to its whole answer (more: counted
    /// as timed out), in (0, 3600].
    #[arg(long, default_value_t = 60.0, allow_negative_numbers = true)]
    timeout_s: f64,
    /// The largest answer read, in MiB (more: counted as too large, the rest not read), in
    /// [1, 1024].
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    max_response_mib: i64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Write the latency histogram (HdrHistogram .hgrm text, ms) to FILE.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
}

pub(super) fn run(a: LoadArgs, progress: lazybatch::progress::Mode) -> Result<()> {
    let model = a.model.load()?;
    if model.parts.len() > 1 {
        bail!("load drives one model: against a server of co-located models, run one load per model (--model NAME, the server serves each under its own name)");
    }
    let rate = check_rate("--rate", a.rate)?;
    let requests = in_range(
        "--requests",
        a.requests,
        1,
        (MAX_REQUESTS as i64).min(10_000_000),
    )?;
    let sla = lazybatch::time::Sla::from_ms(a.sla_ms)?.nanos();
    let process: Process = a.arrivals.parse()?;
    let classes: Option<Classes> = a.classes.as_deref().map(str::parse).transpose()?;
    if !a.url.starts_with("http://") {
        bail!(
            "invalid --url {}: an http:// URL (https is not supported)",
            a.url
        );
    }
    let gen = traffic::generate(&model, (process, rate), requests as usize, a.seed)?;
    let gen = match &classes {
        Some(c) => gen.with_classes(c, a.seed),
        None => gen,
    };
    let opts = LoadOptions {
        url: a.url.clone(),
        concurrency: in_range("--concurrency", a.concurrency, 1, 65_536)? as usize,
        sla,
        classes: classes.as_ref().map_or(1, |c| c.names.len()),
        seed: a.seed,
        json_tensors: a.json_tensors,
        timeout: {
            if !(a.timeout_s > 0.0 && a.timeout_s <= 3600.0) {
                bail!(
                    "invalid --timeout-s: {} (seconds, in (0, 3600])",
                    a.timeout_s
                );
            }
            std::time::Duration::from_secs_f64(a.timeout_s)
        },
        max_response: (in_range("--max-response-mib", a.max_response_mib, 1, 1024)? as usize) << 20,
    };
    let traffic = gen.traffic(rate);
    let shown = progress.start(
        "load",
        lazybatch::run::grid::traffic_secs(&traffic),
        "s of traffic",
    );
    let out = drive(
        &model,
        lazybatch::run::grid::delivered(traffic, &shown, 0),
        &opts,
    );
    shown.finish();
    let out = out?;
    let st = out.record.stats(&out.counters);
    if let Some(p) = &a.hgrm {
        let mut f =
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
        metrics::write_hgrm(out.record.histogram(), &mut f)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    let id = RunId {
        model: &model.name,
        device: &out.device,
        policy: &out.policy,
        rate,
        seed: a.seed,
        sla_ms: a.sla_ms,
        traced: false,
        arrivals: process,
        classes: classes.as_ref().map(ToString::to_string),
        slas: None,
    };
    let per_class: Vec<(String, metrics::Stats)> = match &classes {
        Some(c) => c
            .names
            .iter()
            .zip(&c.slas)
            .map(|(n, s)| format!("{n} (SLA {} ms)", s.as_ms()))
            .zip(out.record.class_stats(&out.counters))
            .collect(),
        None => Vec::new(),
    };
    let mut o = String::new();
    if a.json {
        let mut v = run_json(&id, &st, out.wall_s);
        v["server_mean_ms"] = out.server_mean_ms.into();
        v["not_sent"] = out.not_sent.into();
        v["errors"] = out.failed.total().into();
        v["failed"] = serde_json::json!({
            "timed_out": out.failed.timed_out,
            "transport": out.failed.transport,
            "http_4xx": out.failed.http_4xx,
            "http_5xx": out.failed.http_5xx,
            "too_large": out.failed.too_large,
        });
        v["first_error"] = out.first_error.clone().into();
        v["measured_by"] = "client: scheduled arrival to answer".into();
        out!(o, "{}", serde_json::to_string_pretty(&v)?);
        emit(&o)?;
        return answered_any(&st, out.failed.total());
    }
    text(&mut o, &id, &st, out.wall_s, &per_class);
    out!(
        o,
        "  measured by the client (scheduled arrival to answer){}; not sent (--concurrency full) {}; no usable answer {} (timed out {}, transport {}, 4xx {}, 5xx {}, too large {}){}",
        out.server_mean_ms
            .map_or(String::new(), |m| format!("; the server's own mean {m:.3} ms")),
        out.not_sent,
        out.failed.total(),
        out.failed.timed_out,
        out.failed.transport,
        out.failed.http_4xx,
        out.failed.http_5xx,
        out.failed.too_large,
        out.first_error
            .as_ref()
            .map_or(String::new(), |e| format!(" (first: {e})"))
    );
    emit(&o)?;
    answered_any(&st, out.failed.total())
}

/// Fails (a non-zero exit, for a script or a CI gate) when requests were sent and not one got
/// a usable answer, a completion or a refusal with its reason: the server is not serving.
fn answered_any(st: &metrics::Stats, failed: u64) -> Result<()> {
    if st.completed + st.rejected == 0 && failed > 0 {
        anyhow::bail!(
            "no request got a usable answer ({failed} failed: see the line above): is the server at --url serving?"
        );
    }
    Ok(())
}
