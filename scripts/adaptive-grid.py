#!/usr/bin/env python3
"""lazy:adaptive against the best of serial, graph:0, graph:5/25/50 and lazy, on every zoo
model, both NPU configurations, loads 0.1 to 0.95 (issue: "an adaptive LazyB"): for each point
the ratio of lazy:adaptive's mean latency to the best baseline's, and of its p99 to lazy's.

Usage: scripts/adaptive-grid.py [--requests 3000]   (run from the repository root after
`cargo build --release`; a few seconds, the NPU model runs in virtual time)
"""
import argparse
import json
import subprocess

MODELS = ["resnet50", "gnmt", "transformer_base", "vgg16", "mobilenet_v1", "bert_base", "las", "lstm_stack"]
CONFIGS = ["default", "paper"]
LOADS = "0.1,0.3,0.5,0.7,0.9,0.95"
BASELINES = ["serial", "graph:0", "graph:5", "graph:25", "graph:50", "lazy"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", default="3000")
    a = ap.parse_args()
    rows = []
    for cfg in CONFIGS:
        for m in MODELS:
            out = subprocess.run(
                ["target/release/lazybatch", "compare", "--device", "npu", "--npu-config", cfg,
                 "--model", m, "--policies", ",".join(BASELINES + ["lazy:adaptive"]),
                 "--load", LOADS, "--requests", a.requests, "--json"],
                capture_output=True, text=True, check=True)
            by = {}
            for r in json.loads(out.stdout):
                by.setdefault(r["rate_rps"], {})[r["policy"]] = r["latency_ms"]
            for rate in sorted(by):
                d = by[rate]
                best = min(d[p]["mean"] for p in BASELINES)
                rows.append((cfg, m, d["lazy:adaptive"]["mean"] / best,
                             d["lazy:adaptive"]["p99"] / d["lazy"]["p99"]))
    ok_mean = sum(r[2] <= 1.05 for r in rows)
    ok_p99 = sum(r[3] <= 1.05 for r in rows)
    print(f"{len(rows)} points: mean within 1.05x of the best baseline at {ok_mean}; "
          f"p99 within 1.05x of lazy's at {ok_p99}")
    print(f"| configuration | model | mean / best baseline at loads {LOADS} | p99 / lazy's |")
    print("|---|---|---|---|")
    for cfg in CONFIGS:
        for m in MODELS:
            rs = [r for r in rows if r[0] == cfg and r[1] == m]
            print(f"| {cfg} | {m} | " + " ".join(f"{r[2]:.2f}" for r in rs) + " | "
                  + " ".join(f"{r[3]:.2f}" for r in rs) + " |")


if __name__ == "__main__":
    main()
