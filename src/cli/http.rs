//! `lazybatch serve`: the engine behind an HTTP front end (Open Inference Protocol), until
//! SIGINT or SIGTERM; then every admitted request is answered and the run's summary printed.

use super::{emit, in_range, open_bench, positive, serve_args, DeviceArgs, ModelArgs, ServeArgs};
use anyhow::{bail, Result};
use clap::Args;
use lazybatch::http::{start, ServeOptions, Timeouts};
use lazybatch::policy::Spec;
use lazybatch::progress::Mode;

/// `serve`'s policy when `--policy` is not given: `lazy:adaptive`, which met the 1.05× goal at
/// the most points of the dominance grid of any policy that decides without pausing the engine
/// (`auto` met a few more, but each of its choices serves a window of requests again on the
/// engine's thread); `lazy` for co-located models, which `lazy:adaptive` does not serve.
fn default_policy(model: &lazybatch::graph::Model) -> &'static str {
    if model.parts.len() > 1 {
        "lazy"
    } else {
        "lazy:adaptive"
    }
}

#[derive(Args, Debug)]
pub(super) struct HttpArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    dev: DeviceArgs,
    // the help lists every policy of the registry
    #[arg(long, help = super::policies_help(
        "Policy:",
        ". [default: lazy:adaptive, the safest to leave on that serves without pausing (it met the goal at the most points of the dominance grid after `auto`, whose choices pause the engine on a real device: docs/serve.md); co-located models: lazy]"
    ))]
    policy: Option<String>,
    /// Address to listen on (port 0: any free port, printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: std::net::SocketAddr,
    /// Also serve the protocol over gRPC (KServe v2's GRPCInferenceService, with Triton's
    /// ModelConfig and ModelStatistics) on this address (port 0: any free port, printed), e.g.
    /// 127.0.0.1:8001.
    #[arg(long)]
    grpc_listen: Option<std::net::SocketAddr>,
    /// The most requests admitted and not yet answered; more are answered 503, in [1, 10⁶].
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true)]
    max_queue: i64,
    /// The largest request body accepted, in MiB (more: 413), in [1, 1024].
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    max_body_mib: i64,
    /// The most memory the request bodies in flight may take, in MiB, in [1, 65536]: each
    /// reserves its declared length (`--max-body-mib` when it declares none) times 5 (a JSON
    /// body's parse) before it is read; one that does not fit is answered 503, unread.
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true)]
    max_inflight_mib: i64,
    /// The most connections open at once, in [1, 65536]; one more is answered 503 and closed.
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true)]
    max_connections: i64,
    /// The most seconds a client may take to send a request's headers, from when the server
    /// waits for them (an idle keep-alive connection too; then it is closed), in [0.1, 3600].
    #[arg(long, default_value_t = 10.0, allow_negative_numbers = true)]
    header_timeout_s: f64,
    /// The most seconds a request's body may take to arrive once its headers are in (more:
    /// 408), in [0.1, 3600].
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
    body_timeout_s: f64,
    /// After SIGINT or SIGTERM, the most seconds the server waits for the requests in flight
    /// and its open connections before it drops them and exits, in (0, 3600].
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
    shutdown_timeout_s: f64,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Serves until a signal, then prints what happened.
pub(super) fn run(a: HttpArgs, progress: Mode) -> Result<()> {
    // a server's traffic comes over HTTP: a run's traffic flags would be silently ignored
    let s = &a.serve;
    let traffic = [
        ("--requests", s.requests.is_some()),
        ("--arrivals", s.arrivals.is_some()),
        ("--classes", s.classes.is_some()),
        ("--shares", s.shares.is_some()),
    ];
    if let Some((flag, _)) = traffic.iter().find(|(_, given)| *given) {
        bail!(
            "serve takes no {flag}: its traffic comes over HTTP, so it shapes none (`lazybatch load` takes --requests, --arrivals and --classes; a request sets its own SLA with `sla_ms`, and --slas gives co-located models each their default)"
        );
    }
    let model = a.model.load()?;
    let sv = serve_args(&a.serve, &model, false)?;
    if sv.spec.replicas.count() > 1 {
        bail!("--replicas applies to the simulator's run, compare and capacity; `serve` serves one device (run one process per replica behind your load balancer)");
    }
    let policy = a
        .policy
        .clone()
        .unwrap_or_else(|| default_policy(&model).to_string());
    let spec = Spec::parse(&policy, sv.max_batch())?;
    spec.check_for(&model)?;
    let max_queue = positive("--max-queue", a.max_queue)?.min(1_000_000) as usize;
    let max_body = (positive("--max-body-mib", a.max_body_mib)?.min(1024) as usize) << 20;
    let max_inflight =
        (in_range("--max-inflight-mib", a.max_inflight_mib, 1, 65536)? as usize) << 20;
    let max_connections = in_range("--max-connections", a.max_connections, 1, 65536)? as usize;
    // a client's headers or body cannot cross a network in less than a tenth of a second
    // reliably: a shorter timeout would answer every request 408, health checks too
    let seconds = |flag: &str, s: f64, floor: f64| -> Result<std::time::Duration> {
        let within = if floor > 0.0 {
            (floor..=3600.0).contains(&s)
        } else {
            s > 0.0 && s <= 3600.0
        };
        if !within {
            let range = if floor > 0.0 {
                format!("[{floor}, 3600]")
            } else {
                "(0, 3600]".into()
            };
            bail!("invalid {flag}: {s} (seconds, in {range})");
        }
        Ok(std::time::Duration::from_secs_f64(s))
    };
    let timeouts = Timeouts {
        header: seconds("--header-timeout-s", a.header_timeout_s, 0.1)?,
        body: seconds("--body-timeout-s", a.body_timeout_s, 0.1)?,
        shutdown: seconds("--shutdown-timeout-s", a.shutdown_timeout_s, 0.0)?,
    };
    let name = model.name.clone();
    let parts: Vec<String> = model.parts.iter().map(|p| p.name.clone()).collect();
    let bench = open_bench(model, &a.dev, &sv, progress)?;
    super::warn_slas_below(&bench, &sv.spec);
    let device = bench.description();
    // the traffic comes over HTTP: the spec's rate, seed and request count shape none of it
    let cfg = sv.spec(spec, 1.0, 1);
    let opts = ServeOptions {
        listen: a.listen,
        grpc: a.grpc_listen,
        max_queue,
        max_body,
        max_inflight,
        max_connections,
        timeouts,
    };
    let server = start(bench, cfg, &opts)?;
    let grpc = server
        .grpc_addr
        .map_or(String::new(), |g| format!(", and gRPC at {g}"));
    let routes: Vec<String> = parts
        .iter()
        .map(|m| format!("/v2/models/{m}/infer"))
        .collect();
    eprintln!(
        "serving {name} on {device} under {} at http://{}{grpc} (Open Inference Protocol: {}; /metrics); Ctrl-C stops",
        policy,
        server.addr,
        routes.join(", ")
    );
    let tally = server.tally();
    let out = server.wait_within_limit()?;
    // every request the server heard, by how it left (the front end's turn-aways included,
    // which the engine never saw)
    let by: Vec<String> = tally
        .by_outcome()
        .iter()
        .map(|(o, n)| format!("{o} {n}"))
        .collect();
    let mut o = String::new();
    match out {
        Some(out) => {
            let st = out.stats();
            out!(
                o,
                "stopped: {}; the engine's completed requests: mean {:.3} ms, p99 {:.3} ms, mean batch {:.2}",
                by.join(", "),
                st.latency_ms.mean,
                st.latency_ms.p99,
                st.mean_batch_size
            );
        }
        None => out!(
            o,
            "stopped: {}; the engine was still inside a node at the shutdown limit: the requests it held are counted abandoned, and its latency summary is not known",
            by.join(", ")
        ),
    }
    emit(&o)
}
