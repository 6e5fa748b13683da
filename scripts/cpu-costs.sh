#!/usr/bin/env bash
# What each zoo model costs on this machine's CPU device: single-input latency (Algorithm 1 over
# the measured per-node table, batch 1, reference lengths) for the full model and for the reduced
# variant the tests use (--width 0.125, and --res 0.25 for the CNNs).
# Usage: scripts/cpu-costs.sh [--full-only|--small-only]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/lazybatch
lat() { "$bin" profile --device cpu --max-batch 1 --reps "${REPS:-3}" --json "$@" 2>/dev/null | python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["single_input_latency_us"]/1e3))'; }
printf '%-18s %16s %22s\n' model "full (ms)" "reduced (ms)"
for m in resnet50 gnmt transformer vgg16 mobilenet bert las; do
  # --res scales image inputs only: the CNNs
  case "$m" in resnet50|vgg16|mobilenet) small="--width 0.125 --res 0.25" ;; *) small="--width 0.125" ;; esac
  full=-; red=-
  [ "${1:-}" != "--small-only" ] && full=$(lat --model "$m")
  [ "${1:-}" != "--full-only" ] && red=$(lat --model "$m" $small)
  printf '%-18s %16s %22s\n' "$m" "$full" "$red ($small)"
done
