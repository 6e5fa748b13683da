#!/usr/bin/env bash
# The CPU device against onnxruntime on the same architectures, interleaved in one run:
# builds the `cpu` bench, installs onnx/onnxruntime/numpy if missing (PyPI), and prints the
# table (scripts/bench_vs_onnxruntime.py says how the graphs are built).
# Usage: scripts/bench-vs-onnxruntime.sh [--threads 1,2] [--rounds 3] [--reps 3] [--only resnet50,bert]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import onnx, onnxruntime, numpy' 2>/dev/null || pip install --quiet onnx onnxruntime numpy
bin=$(cargo bench --bench cpu --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "cpu" and m.get("executable"):
        print(m["executable"])')
exec python3 scripts/bench_vs_onnxruntime.py --ours "$bin" "$@"
