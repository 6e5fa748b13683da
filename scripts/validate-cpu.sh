#!/usr/bin/env bash
# The simulator held against the CPU device, with its own repeatability beside it and an
# ablation of the table device's variation terms (docs/validate.md):
#   for each model: one latency table (`profile --device cpu --save`), the same arrivals served
#   twice for real (`compare --device cpu --out`, run1 and run2: 5 policies x 0.3/0.6/0.9 of
#   Serial's capacity on the table), then run1 replayed on the table (`validate --measured`)
#   five ways: as measured, at the level of its passes (`"level": "passes"`), without its
#   after-idle rows, without its pass spread, without both.
#   Writes per model DIR/<model>/points.md (every point: measured, predicted, run2, and whether
#   the prediction is within the two real runs' distance) and the replay's figure
#   (replay-table/validate.svg); prints per model the median |error| of the mean and the p99 for
#   each table, and run1 against run2 (DIR/summary.md).
# Usage: scripts/validate-cpu.sh [OUT_DIR]   (default docs/validate/cpu; REQUESTS=200, SEEDS=1,
#        MODELS="mobilenet|resnet50 --width 0.5 --res 0.5|gnmt --width 0.25|transformer --width 0.25")
# Takes about 15 minutes on this project's 2-core VM; run it on an otherwise idle machine.
# REPLAY_ONLY=1 keeps the tables and runs in OUT_DIR and only replays them (seconds): for a
# change to the table device.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/validate/cpu}
REQ=${REQUESTS:-200}
SEEDS=${SEEDS:-1}
MODELS=${MODELS:-"mobilenet|resnet50 --width 0.5 --res 0.5|gnmt --width 0.25|transformer --width 0.25"}
POLICIES=serial,graph:5,graph:25,lazy,oracle
cargo build --release --quiet
B=./target/release/lazybatch
mkdir -p "$OUT"
summary="$OUT/summary.md"
{
  echo "| model | points | table device | median error of the mean | of the p99 |"
  echo "|---|---|---|---|---|"
} > "$summary"
IFS='|' read -ra ms <<< "$MODELS"
for spec in "${ms[@]}"; do
  read -ra m <<< "$spec"
  name=$(echo "$spec" | tr -d ' -' | tr '.' 'p')
  d="$OUT/$name"
  mkdir -p "$d"
  echo "== ${m[*]} -> $d" >&2
  if [ "${REPLAY_ONLY:-0}" != 1 ]; then
    $B profile --model "${m[@]}" --device cpu --max-batch 16 --save "$d/table.json" --json \
      --progress off > "$d/profile.json"
    rates=$(python3 -c "
import json; t = json.load(open('$d/profile.json'))['single_input_latency_us'] / 1e6
print(','.join('%.2f' % (l / t) for l in (0.3, 0.6, 0.9)))")
    for run in run1 run2; do
      $B compare --model "${m[@]}" --device cpu --profile "$d/table.json" --max-batch 16 \
        --policies "$POLICIES" --rates "$rates" --requests "$REQ" --seeds "$SEEDS" --out "$d/$run" \
        --progress off > "$d/$run.txt"
    done
  fi
  python3 - "$d" <<'EOF'
import json, sys
d = sys.argv[1]
t = json.load(open(f"{d}/table.json"))
for name, drop in [("no-idle", ["after_idle"]), ("no-spread", ["passes_ns"]),
                   ("no-variation", ["after_idle", "passes_ns"])]:
    u = {k: v for k, v in t.items() if k not in drop}
    json.dump(u, open(f"{d}/table-{name}.json", "w"))
# every node priced at the level its passes give (their median over the nodes' sum)
json.dump(dict(t, level="passes"), open(f"{d}/table-level.json", "w"))
EOF
  for variant in table table-level table-no-idle table-no-spread table-no-variation; do
    $B validate --model "${m[@]}" --device "profile:$d/$variant.json" --max-batch 16 \
      --measured "$d/run1/compare.json" --out "$d/replay-$variant" --progress off \
      > /dev/null 2>&1
    line=$(grep '^median |error|' "$d/replay-$variant/validate.txt")
    python3 - "$spec" "$variant" "$line" >> "$summary" <<'EOF'
import re, sys
spec, variant, line = sys.argv[1:]
n, mean, p99 = re.search(r"over (\d+) points: mean latency ([\d.]+)%, p99 ([\d.]+)%", line).groups()
print(f"| {spec} | {n} | {variant} | {mean}% | {p99}% |")
EOF
  done
  python3 - "$spec" "$d" >> "$summary" <<'EOF'
import json, statistics, sys
spec, d = sys.argv[1:]
a = json.load(open(f"{d}/run1/compare.json")); b = json.load(open(f"{d}/run2/compare.json"))
diff = lambda k: statistics.median(abs(y["latency_ms"][k] / x["latency_ms"][k] - 1) for x, y in zip(a, b))
print(f"| {spec} | {len(a)} | run2 against run1 (the device against itself) | {100 * diff('mean'):.1f}% | {100 * diff('p99'):.1f}% |")
EOF
  python3 scripts/validate_points.py "$d" > "$d/points.md"
done
cat "$summary"
