#!/usr/bin/env bash
# GPT-2 on a real device, real kernels in wall time (docs/llm.md): DEVICE=cpu (the default, this
# machine's CPU device) or DEVICE=cuda (an NVIDIA card; scripts/gpu-check.sh's `llm` part). The
# LLM policies' time to first token and per output token at two loads, and their capacity under
# a token SLO scaled from the model's own unloaded prefill and decode step, as
# `reproduce --figures llm` does on the NPU model.
#   1. one latency table (`profile --device DEVICE --save`), which every run below reads;
#   2. `compare --device DEVICE` at 0.5 and 2 x Serial's capacity on that table (its rate from
#      the table's single-input latency), SLA 5 s for the SLA-aware policies;
#   3. `capacity --device DEVICE` at p99 TTFT <= 10 x the reference prompt's prefill alone and
#      p99 TPOT <= 4 x a decode step alone, both read from the table: the loose SLO of the NPU
#      experiment (the tight one, 5x and 2x, is under the CPU's own noise: Serial alone at 2 req/s
#      has a p99 TPOT of 1.9x the table's median step).
# Writes OUT_DIR/{table.json,compare.txt,compare.json,capacity.txt,capacity.json,slo.txt}.
# Usage: scripts/llm-device.sh [OUT_DIR]   (default docs/llm/DEVICE; WIDTH=0.25, MAX_BATCH=16,
#        REQUESTS=120, CAP_REQUESTS=60; CAPACITY_ONLY=1 reuses OUT_DIR's table and comparison,
#        COMPARE_ONLY=1 stops before the capacity search;
#        BIN=PATH runs that lazybatch binary instead of building one, for a machine without a
#        Rust toolchain)
# About 25 minutes for the CPU device on this project's 2-core VM; run it on an otherwise idle
# machine (every figure is wall time).
set -euo pipefail
# a relative BIN names a path from where the script was called
[ -z "${BIN:-}" ] || BIN=$(realpath "$BIN")
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cpu}
case "$DEVICE" in
  cpu | cuda) ;;
  *) echo "llm-device.sh: DEVICE must be cpu or cuda, not '$DEVICE'" >&2; exit 2 ;;
esac
OUT=${1:-docs/llm/$DEVICE}
WIDTH=${WIDTH:-0.25}
MB=${MAX_BATCH:-16}
REQ=${REQUESTS:-120}
CAP_REQ=${CAP_REQUESTS:-60}
POLICIES=serial,continuous,chunked:2,lazy,lazy:adaptive
if [ -n "${BIN:-}" ]; then
  B=$BIN
else
  cargo build --release --quiet
  B=./target/release/lazybatch
fi
mkdir -p "$OUT"
common=(--device "$DEVICE" --model gpt2 --width "$WIDTH" --max-batch "$MB" --progress lines)
echo "== table" >&2
if [ "${CAPACITY_ONLY:-0}" != 1 ]; then
  "$B" profile "${common[@]}" --save "$OUT/table.json" > /dev/null
fi
# the unloaded figures the SLO is scaled from: every node before the decoder alone, and one
# decode step alone (batch 1, the table's middle step)
read -r PREFILL STEP < <(python3 - "$OUT/table.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
pre = sum(n["latency_ns"][0] for n in t["nodes"] if n["class"] != "decoder") / 1e6
step = sum(n["latency_ns"][0] for n in t["nodes"] if n["class"] == "decoder") / 1e6
print(f"{pre:.3f} {step:.4f}")
EOF
)
TTFT=$(python3 -c "print(round(10 * $PREFILL, 2))")
TPOT=$(python3 -c "print(round(4 * $STEP, 3))")
{
  echo "prefill alone (reference prompt) $PREFILL ms, decode step alone $STEP ms"
  echo "SLO: p99 TTFT <= $TTFT ms (10x), p99 TPOT <= $TPOT ms (4x)"
} | tee "$OUT/slo.txt" >&2
if [ "${CAPACITY_ONLY:-0}" != 1 ]; then
echo "== compare" >&2
"$B" compare "${common[@]}" --profile "$OUT/table.json" --policies "$POLICIES" --load 0.5,2 \
  --requests "$REQ" --sla-ms 5000 --json > "$OUT/compare.json"
python3 - "$OUT/compare.json" > "$OUT/compare.txt" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows["rows"] if isinstance(rows, dict) else rows
print("| policy | rate/s | TTFT mean / p99 (ms) | TPOT mean / p99 (ms) | tokens/s | p99 latency (ms) | mean batch |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    t, p = r["ttft_ms"], r["tpot_ms"]
    print(f"| {r['policy']} | {r['rate_rps']:.2f} | {t['mean']:.1f} / {t['p99']:.1f} | {p['mean']:.2f} / {p['p99']:.2f} "
          f"| {r['tokens_per_s']:.0f} | {r['latency_ms']['p99']:.0f} | {r['mean_batch_size']:.2f} |")
EOF
cat "$OUT/compare.txt" >&2
fi
if [ "${COMPARE_ONLY:-0}" = 1 ]; then
  echo "== capacity: not searched (COMPARE_ONLY=1)" >&2
  exit 0
fi
echo "== capacity" >&2
"$B" capacity "${common[@]}" --profile "$OUT/table.json" --policies continuous,chunked:2,lazy,lazy:adaptive \
  --ttft-p99-ms "$TTFT" --tpot-p99-ms "$TPOT" --sla-ms 5000 --requests "$CAP_REQ" --seeds 1 \
  --search-precision 10 --json > "$OUT/capacity.json"
python3 - "$OUT/capacity.json" > "$OUT/capacity.txt" <<'EOF'
import json, sys
print("| policy | capacity (req/s) | TTFT p99 (ms) | TPOT p99 (ms) | mean batch | probes |")
print("|---|---|---|---|---|---|")
for r in json.load(open(sys.argv[1])):
    at = r.get("at_capacity") or {}
    cap = r.get("capacity_rps")
    def f(k):
        v = at.get(k) if at else None
        return v.get("p99", float("nan")) if isinstance(v, dict) else (v if v is not None else float("nan"))
    print(f"| {r['policy']} | {cap if cap is None else round(cap, 2)} | {f('ttft_ms'):.1f} | {f('tpot_ms'):.2f} "
          f"| {at.get('mean_batch_size', float('nan')):.2f} | {len(r['probes'])} |")
EOF
cat "$OUT/capacity.txt" >&2
