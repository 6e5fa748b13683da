#!/usr/bin/env python3
"""MLPerf LoadGen's Server scenario against `lazybatch serve`, beside `lazybatch load` at the
same rate, on loopback.

Starts `lazybatch serve` (ResNet-50 on the NPU model by default), runs LoadGen (PyPI
`mlcommons-loadgen`, module `mlperf_loadgen`) in PerformanceOnly mode with a SUT that turns each
sample into one `POST /v2/models/{m}/infer` (binary tensor extension, bodies encoded once, from
a pool of threads each with its own keep-alive connection) and completes it when the answer
arrives; then `lazybatch load` sends the same rate of Poisson arrivals to the same server.
Prints LoadGen's verdict (VALID/INVALID and why) and both sides' latencies, and the server's own
count; exits 1 when a request failed or the server's count differs from what was sent.

Usage: scripts/loadgen.py [--qps 100] [--duration-s 20] [--bound-ms 100] [--model resnet50]
                          [--device npu] [--bin target/release/lazybatch] [--log-dir DIR]
Exit 3: mlperf_loadgen is not installed (pip install mlcommons-loadgen).
"""
import argparse
import http.client
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import mlperf_loadgen as lg
except ImportError as e:
    print(f"loadgen: {e} (pip install mlcommons-loadgen)", file=sys.stderr)
    sys.exit(3)


def start_server(a):
    p = subprocess.Popen([a.bin, "serve", "--model", a.model, "--device", a.device,
                          "--policy", a.policy, "--sla-ms", str(a.bound_ms),
                          "--listen", "127.0.0.1:0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = ""
    while "serving" not in line:
        line = p.stderr.readline()
        if not line:
            raise SystemExit(f"serve did not start: {p.stderr.read()}")
    host, port = re.search(r"http://([\d.]+):(\d+)", line).groups()
    return p, host, int(port)


def bodies(host, port, model, n=16):
    """`n` pre-encoded requests (binary extension, seeded finite values) for the model."""
    c = http.client.HTTPConnection(host, port)
    c.request("GET", f"/v2/models/{model}")
    meta = json.loads(c.getresponse().read())
    i = meta["inputs"][0]
    shape = [1 if d < 0 else d for d in i["shape"]]
    count = 1
    for d in shape:
        count *= d
    out = []
    for k in range(n):
        if i["datatype"] == "INT64":
            raw = struct.pack(f"<{count}q", *[(k * 7 + j) % 100 for j in range(count)])
        else:
            raw = struct.pack(f"<{count}f", *[((k * 131 + j * 17) % 1000) / 1000.0 for j in range(count)])
        head = json.dumps({"inputs": [{"name": i["name"], "datatype": i["datatype"], "shape": shape,
                                       "parameters": {"binary_data_size": len(raw)}}]}).encode()
        out.append((head, raw))
    return out


def run_loadgen(a, host, port, outdir):
    reqs = bodies(host, port, a.model)
    local = threading.local()
    failures = []
    answered = []

    def send(sample):
        c = getattr(local, "c", None)
        if c is None:
            c = local.c = http.client.HTTPConnection(host, port, timeout=60)
        head, raw = reqs[sample.index % len(reqs)]
        try:
            c.request("POST", f"/v2/models/{a.model}/infer", body=head + raw,
                      headers={"Inference-Header-Content-Length": str(len(head)),
                               "Content-Type": "application/octet-stream"})
            r = c.getresponse()
            r.read()
            if r.status != 200:
                failures.append(r.status)
            else:
                answered.append(1)
        except OSError as e:
            failures.append(str(e))
            local.c = None
        lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0)])

    pool = ThreadPoolExecutor(max_workers=64)

    def issue(samples):
        for s in samples:
            pool.submit(send, s)

    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(1024, 1024, lambda _: None, lambda _: None)
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = a.qps
    settings.server_target_latency_ns = int(a.bound_ms * 1e6)
    settings.server_target_latency_percentile = 0.99
    settings.min_duration_ms = int(a.duration_s * 1000)
    settings.max_duration_ms = int(a.duration_s * 1500)
    settings.min_query_count = 1
    log = lg.LogSettings()
    log.log_output.outdir = outdir
    log.log_output.copy_summary_to_stdout = False
    lg.StartTestWithLogSettings(sut, qsl, settings, log)
    pool.shutdown(wait=True)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    with open(os.path.join(outdir, "mlperf_log_summary.txt")) as f:
        summary = f.read()
    return summary, failures, len(answered)


def field(summary, name):
    m = re.search(rf"^\s*{re.escape(name)}\s*:\s*(.+)$", summary, re.M)
    return m.group(1).strip() if m else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qps", type=float, default=100)
    ap.add_argument("--duration-s", type=float, default=20)
    ap.add_argument("--bound-ms", type=float, default=100)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--device", default="npu")
    ap.add_argument("--policy", default="lazy")
    ap.add_argument("--bin", default="target/release/lazybatch")
    ap.add_argument("--log-dir", help="keep LoadGen's logs here (default: a temporary folder)")
    a = ap.parse_args()
    server, host, port = start_server(a)
    try:
        if a.log_dir:
            os.makedirs(a.log_dir, exist_ok=True)
            summary, failures, ok_lg = run_loadgen(a, host, port, a.log_dir)
        else:
            with tempfile.TemporaryDirectory() as d:
                summary, failures, ok_lg = run_loadgen(a, host, port, d)
        ns = lambda k: float(field(summary, k)) / 1e6
        print(f"LoadGen Server scenario, {a.model} on {a.device} under {a.policy}, target {a.qps:g} QPS, "
              f"p99 bound {a.bound_ms:g} ms, {a.duration_s:g} s")
        print(f"  result: {field(summary, 'Result is')}; performance constraints satisfied: "
              f"{field(summary, 'Performance constraints satisfied')}; early stopping satisfied: "
              f"{field(summary, 'Early stopping satisfied')}")
        print(f"  {'':10} {'QPS':>8} {'mean_ms':>9} {'p50_ms':>9} {'p90_ms':>9} {'p99_ms':>9}")
        print(f"  {'loadgen':10} {float(field(summary, 'Completed samples per second')):8.1f} "
              f"{ns('Mean latency (ns)'):9.2f} {ns('50.00 percentile latency (ns)'):9.2f} "
              f"{ns('90.00 percentile latency (ns)'):9.2f} {ns('99.00 percentile latency (ns)'):9.2f}")
        n = max(1, int(a.qps * a.duration_s))
        load = subprocess.run([a.bin, "load", "--url", f"http://{host}:{port}", "--model", a.model,
                               "--rate", str(a.qps), "--requests", str(n), "--sla-ms", str(a.bound_ms),
                               "--json", "--progress", "off"],
                              capture_output=True, text=True, check=True)
        v = json.loads(load.stdout)
        lat = v["latency_ms"]
        print(f"  {'load':10} {v.get('throughput_rps', float('nan')):8.1f} {lat['mean']:9.2f} "
              f"{lat['p50']:9.2f} {lat.get('p90', float('nan')):9.2f} {lat['p99']:9.2f}")
    finally:
        server.terminate()
        out, _ = server.communicate(timeout=60)
    print(f"  server: {out.strip()[:400]}")
    if failures:
        print(f"FAILED: {len(failures)} LoadGen requests failed: {failures[:5]}", file=sys.stderr)
        return 1
    told = re.search(r"completed (\d+)", out)
    sent = ok_lg + v["completed"]
    if not told or int(told.group(1)) != sent:
        print(f"FAILED: the server counted {told and told.group(1)} completed, the clients {sent}",
              file=sys.stderr)
        return 1
    print(f"  counts agree: {sent} answered ({ok_lg} LoadGen, {v['completed']} load), the server's {sent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
