#!/usr/bin/env bash
# Admission by predicted latency against a static queue cap and shedding, on the NPU model
# (docs/traffic.md, "Admission by predicted latency"): for each model, policy and load (times
# Serial's capacity), 20,000 Poisson arrivals under the model's default SLA (100 ms) with no
# admission control, `--max-pending 64`, `--max-pending 256`, `--shed` and `--admit predicted`;
# prints one Markdown row each: completed, refused, goodput (req/s meeting the SLA) and the share
# of completed requests that missed it. Deterministic (seed 1). About a minute.
# Usage: scripts/admission-grid.sh [MODELS] [POLICIES] [LOADS]
#        (default "resnet50 gnmt" "serial graph:0 lazy lazy:adaptive" "2 4 8")
set -euo pipefail
cd "$(dirname "$0")/.."
B=./target/release/lazybatch
[ -x "$B" ] || cargo build --release --quiet
echo "| model | policy | load | control | completed | refused | goodput (req/s) | SLA missed |"
echo "|---|---|---|---|---|---|---|---|"
for m in ${1:-resnet50 gnmt}; do
  for p in ${2:-serial graph:0 lazy lazy:adaptive}; do
    for l in ${3:-2 4 8}; do
      for c in none --max-pending=64 --max-pending=256 --shed --admit=predicted; do
        flag=()
        [ "$c" = none ] || flag=("$c")
        "$B" run --device npu --model "$m" --policy "$p" --load "$l" --requests 20000 "${flag[@]}" --json |
          python3 -c "
import json, sys
v = json.load(sys.stdin)
print(f\"| $m | $p | $l | ${c#--} | {v['completed']} | {v['rejected']} | {v['goodput_rps']:.0f} | {100 * v['sla_violation_rate']:.1f}% |\")"
      done
    done
  done
done
