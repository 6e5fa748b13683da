#!/usr/bin/env python3
"""GraphB against Triton's own dynamic batcher, on the same arrivals and the same per-batch time.

A real Triton (PyPI `nvidia-pytriton`, which bundles tritonserver and runs on this machine's CPU)
serves a Python model whose batch of b takes BASE + PER * b ms (it sleeps that long and answers
zeros) under Triton's dynamic batcher (max_queue_delay = WINDOW, max_batch_size = B, one
instance). `lazybatch serve --policy graph:WINDOW:B` serves the same model (the ONNX fixture
op_relu.onnx, same input and output) on a latency table whose nodes take the same BASE + PER * b
ms a batch (`--device profile:TABLE`, slept in wall time). `lazybatch load` drives both with the
same Poisson arrivals (same seed, rate and count), the two servers interleaved rate by rate.
Each server's statistics extension (`/v2/models/{m}/stats`, read before and after each run)
gives the batches, their sizes (`batch_stats`), the queueing time and the compute time; `load`
gives the client's latency.

Triton also adds its own time to each batch (its core, the Python backend's stub, pytriton's
proxy): the batch's compute time it reports is longer than BASE + PER * b. So the comparison is
run twice for lazybatch: on the nominal table, and on a table priced at Triton's measured
per-batch time (its `batch_stats` over all its runs: the compute input, inference and output
times of each batch, a line a + c * b fitted by least squares):
the second isolates the batching decision from the per-batch overhead.

Usage: scripts/triton-vs-graphb.py [--rates 40,80,120] [--requests 600] [--window-ms 5]
           [--max-batch 8] [--base-ms 4] [--per-ms 1] [--seed 1] [--out DIR]
           [--triton-python PYTHON]
--triton-python: a Python with nvidia-pytriton installed (default: this one). Writes
DIR/results.json and DIR/summary.md (default out/triton-vs-graphb) and prints the summary.
Exit status 3: pytriton is not importable there (`pip install nvidia-pytriton`; its wheel needs
glibc >= 2.35).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "tests/fixtures/onnx/op_relu.onnx")
NAME = "op_relu"
# both servers are local: no proxy from the environment
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def triton_child(port, window_ms, max_batch, base_ms, per_ms):
    """Runs in the pytriton Python: serves NAME until killed."""
    import numpy as np
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    @batch
    def infer(input):
        b = input.shape[0]
        time.sleep((base_ms + per_ms * b) / 1e3)
        return {"gemm_7": np.zeros((b, 8), dtype=np.float32)}

    cfg = TritonConfig(http_port=port, grpc_port=port + 1, metrics_port=port + 2)
    # pytriton restricts the statistics extension to a token by default; this harness reads it
    open_stats = TritonSecurityConfig(
        restricted_endpoints=["shared-memory", "model-repository", "trace", "logging"])
    with Triton(config=cfg, security_config=open_stats) as t:
        t.bind(
            model_name=NAME,
            infer_func=infer,
            inputs=[Tensor(name="input", dtype=np.float32, shape=(16,))],
            outputs=[Tensor(name="gemm_7", dtype=np.float32, shape=(8,))],
            config=ModelConfig(
                max_batch_size=max_batch,
                batcher=DynamicBatcher(max_queue_delay_microseconds=int(window_ms * 1000)),
            ),
        )
        t.serve()


def get(url):
    with OPENER.open(url, timeout=5) as r:
        return json.loads(r.read() or b"null")


def wait_ready(url, proc, what, seconds=120):
    t0 = time.time()
    while time.time() - t0 < seconds:
        if proc.poll() is not None:
            sys.exit(f"triton-vs-graphb: {what} exited ({proc.returncode}) before it was ready")
        try:
            with OPENER.open(f"{url}/v2/models/{NAME}/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"triton-vs-graphb: {what} was not ready within {seconds} s")


def busy_ns(d):
    """A statistic's compute time: its input's, inference's and output's (Triton's instance is
    busy for all three; lazybatch counts its inputs and outputs inside the inference's)."""
    return sum(d.get(k, {}).get("ns", 0) for k in ("compute_input", "compute_infer", "compute_output"))


def stats(url):
    """The model's cumulative counts: inferences, batches, queue and compute ns, batches by size."""
    s = get(f"{url}/v2/models/{NAME}/stats")["model_stats"][0]
    i = s["inference_stats"]
    sizes = {b["batch_size"]: (b["compute_infer"]["count"], busy_ns(b))
             for b in s.get("batch_stats", [])}
    return {
        "inferences": s["inference_count"],
        "batches": s["execution_count"],
        "queue_ns": i["queue"]["ns"],
        "compute_ns": busy_ns(i),
        "sizes": sizes,
    }


def delta(a, b):
    sizes = {}
    for k in set(a["sizes"]) | set(b["sizes"]):
        n0, t0 = a["sizes"].get(k, (0, 0))
        n1, t1 = b["sizes"].get(k, (0, 0))
        if n1 - n0:
            sizes[k] = (n1 - n0, t1 - t0)
    d = {k: b[k] - a[k] for k in ("inferences", "batches", "queue_ns", "compute_ns")}
    d["sizes"] = dict(sorted(sizes.items()))
    return d


def table(lazybatch, path, max_batch, cost_ns):
    """A latency table of op_relu whose first computing node takes cost_ns(b) and the rest 0."""
    raw = path + ".npu"
    subprocess.run([lazybatch, "profile", "--model", MODEL, "--device", "npu", "--max-batch",
                    str(max_batch), "--save", raw], check=True, stdout=subprocess.DEVNULL)
    t = json.load(open(raw))
    first = True
    for n in t["nodes"]:
        zeros = [0] * max_batch
        n["compute_cycles"], n["memory_cycles"] = zeros, list(zeros)
        if n["op"] == "input":
            n["latency_ns"] = list(zeros)
        elif first:
            n["latency_ns"] = [int(round(cost_ns(b))) for b in range(1, max_batch + 1)]
            first = False
        else:
            n["latency_ns"] = list(zeros)
    t["device"] = f"{t['device']}, repriced by scripts/triton-vs-graphb.py"
    json.dump(t, open(path, "w"))
    os.remove(raw)
    return path


def load(lazybatch, url, rate, n, seed):
    out = subprocess.run([lazybatch, "load", "--url", url, "--model", MODEL, "--rate", str(rate),
                          "--requests", str(n), "--seed", str(seed), "--progress", "off", "--json"],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def fit(points):
    """Least-squares a + c*b through (b, ns per batch) points weighted by their counts."""
    sw = sx = sy = sxx = sxy = 0.0
    for b, (count, ns) in points:
        y = ns / count
        sw += count; sx += count * b; sy += count * y; sxx += count * b * b; sxy += count * b * y
    den = sw * sxx - sx * sx
    if sw == 0:
        sys.exit("triton-vs-graphb: Triton recorded no batches (its statistics are empty)")
    if den <= 0:  # one size only: a constant
        return sy / sw, 0.0
    c = (sw * sxy - sx * sy) / den
    return (sy - c * sx) / sw, c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="40,80,120")
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--window-ms", type=float, default=5.0)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--base-ms", type=float, default=4.0)
    ap.add_argument("--per-ms", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=8310, help="Triton's HTTP port (gRPC +1, metrics +2); lazybatch +10, +11")
    ap.add_argument("--out", default=os.path.join(ROOT, "out/triton-vs-graphb"))
    ap.add_argument("--triton-python", default=sys.executable)
    ap.add_argument("--serve-triton", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_triton:
        triton_child(a.port, a.window_ms, a.max_batch, a.base_ms, a.per_ms)
        return
    rates = [float(r) for r in a.rates.split(",")]
    for name, v, lo in [("--requests", a.requests, 1), ("--max-batch", a.max_batch, 1)]:
        if v < lo:
            sys.exit(f"triton-vs-graphb: {name} {v}: at least {lo}")
    if a.window_ms < 0 or a.base_ms < 0 or a.per_ms < 0 or any(r <= 0 for r in rates):
        sys.exit("triton-vs-graphb: --window-ms, --base-ms, --per-ms must be >= 0 and --rates > 0")
    probe = subprocess.run([a.triton_python, "-c", "import pytriton"], capture_output=True)
    if probe.returncode != 0:
        print(f"triton-vs-graphb: pytriton is not importable in {a.triton_python} "
              "(pip install nvidia-pytriton)", file=sys.stderr)
        sys.exit(3)
    lazybatch = os.environ.get("LAZYBATCH", os.path.join(ROOT, "target/release/lazybatch"))
    os.makedirs(a.out, exist_ok=True)
    nominal = lambda b: (a.base_ms + a.per_ms * b) * 1e6
    t_nominal = table(lazybatch, os.path.join(a.out, "table-nominal.json"), a.max_batch, nominal)

    env = dict(os.environ)
    # pytriton's stub links the Python's own libpython
    env["LD_LIBRARY_PATH"] = ":".join(filter(None, [
        subprocess.run([a.triton_python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
                       capture_output=True, text=True).stdout.strip(), env.get("LD_LIBRARY_PATH")]))
    procs = []

    def on_term(*_):
        # a SIGTERM (a timeout, say) ends the run through the cleanup below
        raise SystemExit("triton-vs-graphb: terminated")

    signal.signal(signal.SIGTERM, on_term)

    def lazy_server(tab, port):
        p = subprocess.Popen([lazybatch, "serve", "--device", f"profile:{tab}", "--model", MODEL,
                              "--policy", f"graph:{a.window_ms:g}:{a.max_batch}", "--max-batch",
                              str(a.max_batch), "--listen", f"127.0.0.1:{port}"],
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(a.out, f"lazybatch-{port}.log"), "w"))
        procs.append(p)
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, p, "lazybatch serve")
        return p, url

    try:
        tlog = open(os.path.join(a.out, "triton.log"), "w")
        triton = subprocess.Popen([a.triton_python, os.path.abspath(__file__), "--serve-triton",
                                   "--port", str(a.port), "--window-ms", str(a.window_ms),
                                   "--max-batch", str(a.max_batch), "--base-ms", str(a.base_ms),
                                   "--per-ms", str(a.per_ms)], env=env, stdout=tlog, stderr=tlog,
                                  start_new_session=True)
        procs.append(triton)
        turl = f"http://127.0.0.1:{a.port}"
        wait_ready(turl, triton, "Triton (pytriton)")
        _, lurl = lazy_server(t_nominal, a.port + 10)

        def run(server, url, rate):
            before = stats(url)
            c = load(lazybatch, url, rate, a.requests, a.seed)
            d = delta(before, stats(url))
            return {"server": server, "rate_rps": rate, "client": c, "server_stats": d}

        rows = []
        for k, rate in enumerate(rates):
            # interleaved, the order alternating, so a drift of this machine hits both alike
            pair = [("triton", turl), ("lazybatch", lurl)]
            for server, url in (pair if k % 2 == 0 else pair[::-1]):
                rows.append(run(server, url, rate))
                print(f"triton-vs-graphb: {server} at {rate:g} req/s done", file=sys.stderr)
        # Triton's measured per-batch time, all its runs together, as a line
        pooled = {}
        for r in rows:
            if r["server"] == "triton":
                for b, (n, ns) in r["server_stats"]["sizes"].items():
                    n0, t0 = pooled.get(b, (0, 0))
                    pooled[b] = (n0 + n, t0 + ns)
        base_ns, per_ns = fit(sorted(pooled.items()))
        t_triton = table(lazybatch, os.path.join(a.out, "table-triton-measured.json"), a.max_batch,
                         lambda b: max(0.0, base_ns + per_ns * b))
        _, lurl2 = lazy_server(t_triton, a.port + 11)
        for rate in rates:
            rows.append(run("lazybatch, Triton's per-batch time", lurl2, rate))
            print(f"triton-vs-graphb: lazybatch on Triton's per-batch time at {rate:g} req/s done", file=sys.stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                if p is procs[0]:
                    os.killpg(p.pid, signal.SIGTERM)
                else:
                    p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # Triton's whole session (tritonserver and the Python stub), or the server
                if p is procs[0]:
                    os.killpg(p.pid, signal.SIGKILL)
                else:
                    p.kill()

    result = {
        "per_batch_ms": {"base": a.base_ms, "per_member": a.per_ms},
        "window_ms": a.window_ms, "max_batch": a.max_batch, "requests": a.requests, "seed": a.seed,
        "triton_measured_per_batch_ms": {"base": base_ns / 1e6, "per_member": per_ns / 1e6,
                                         "by_size": {b: ns / n / 1e6 for b, (n, ns) in sorted(pooled.items())}},
        "runs": rows,
    }
    json.dump(result, open(os.path.join(a.out, "results.json"), "w"), indent=1)
    lines = [
        f"GraphB against Triton's dynamic batcher: a batch of b takes {a.base_ms:g} + {a.per_ms:g}*b ms, "
        f"window {a.window_ms:g} ms, max batch {a.max_batch}, {a.requests} Poisson requests a run, seed {a.seed}",
        f"Triton's measured time a batch: {base_ns / 1e6:.2f} + {per_ns / 1e6:.2f}*b ms "
        f"(by size: {', '.join(f'{b}: {ns / n / 1e6:.2f}' for b, (n, ns) in sorted(pooled.items()))})",
        "",
        "| server | rate/s | completed | mean batch | batches by size (1..B, % of batches) | queue ms | compute ms | client mean ms | client p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, c = r["server_stats"], r["client"]
        n = max(d["inferences"], 1)
        hist = " ".join(f"{100 * d['sizes'].get(b, (0, 0))[0] / max(d['batches'], 1):.0f}"
                        for b in range(1, a.max_batch + 1))
        lines.append(
            f"| {r['server']} | {r['rate_rps']:g} | {c['completed']}/{c['requests']} | "
            f"{d['inferences'] / max(d['batches'], 1):.2f} | {hist} | {d['queue_ns'] / n / 1e6:.2f} | "
            f"{d['compute_ns'] / n / 1e6:.2f} | {c['latency_ms']['mean']:.2f} | {c['latency_ms']['p99']:.2f} |")
    text = "\n".join(lines) + "\n"
    open(os.path.join(a.out, "summary.md"), "w").write(text)
    print(text)


if __name__ == "__main__":
    main()
