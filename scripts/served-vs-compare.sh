#!/usr/bin/env bash
# The same experiment twice on the CPU device: in process (`lazybatch compare`) and served over
# HTTP (`lazybatch serve` driven by `lazybatch load`, the same arrivals: model, rate, requests,
# seed). Prints one table per model and policy: mean and p99 latency both ways, and the spread
# of the in-process figures over two repeats (the wall-clock noise the served figures are read
# against); "(engine)" is the server's own mean, arrival in its engine to completion, so the
# rest of the served mean is the network and HTTP's share. Loopback only; a few minutes on a
# 2-core machine.
#
# Usage: scripts/served-vs-compare.sh [--requests N] [--load X] [--threads T] [--quick]
#   --quick: one model (the reduced ResNet-50), 120 requests: a smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS=300 LOAD=0.6 THREADS=1 QUICK=0 PORT=${PORT:-18431}
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) REQUESTS=$2; shift 2 ;;
    --load) LOAD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --quick) QUICK=1; REQUESTS=120; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
cargo build --release --quiet
B=target/release/lazybatch
TMP=$(mktemp -d)
trap 'pkill -INT -f "lazybatch serve .*--listen 127.0.0.1:$PORT" 2>/dev/null || true; rm -rf "$TMP"' EXIT
POLICIES="lazy graph:5"
# each: the model's flags | the server's extra flags
MODELS=("resnet50 --width 0.25 --res 0.5|--max-batch 16" "gnmt --width 0.125|--max-batch 16")
[ "$QUICK" = 1 ] && MODELS=("resnet50 --width 0.25 --res 0.5|--max-batch 16")

echo "served vs in-process, CPU device, --threads $THREADS, load $LOAD × serial capacity, $REQUESTS requests, seed 1 ($(date -u +%F), $(nproc) cores)"
for spec in "${MODELS[@]}"; do
  read -r -a M <<<"${spec%%|*}"
  read -r -a X <<<"${spec#*|}"
  name=${M[0]}
  prof="$TMP/$name.json"
  $B profile --device cpu --model "${M[@]}" "${X[@]}" --threads "$THREADS" --save "$prof" >/dev/null
  for rep in 1 2; do
    $B compare --device cpu --model "${M[@]}" "${X[@]}" --threads "$THREADS" --profile "$prof" \
      --load "$LOAD" --requests "$REQUESTS" --policies "${POLICIES// /,}" --json >"$TMP/$name-compare-$rep.json"
  done
  for pol in $POLICIES; do
    rate=$(python3 -c "import json,sys; print([r for r in json.load(open(sys.argv[1])) if r['policy']==sys.argv[2]][0]['rate_rps'])" "$TMP/$name-compare-1.json" "$pol")
    $B serve --device cpu --model "${M[@]}" "${X[@]}" --threads "$THREADS" --profile "$prof" --policy "$pol" \
      --listen "127.0.0.1:$PORT" 2>"$TMP/serve.err" &
    spid=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break; sleep 0.1; done
    $B load --url "http://127.0.0.1:$PORT" --model "${M[@]}" --rate "$rate" --requests "$REQUESTS" \
      --seed 1 --json >"$TMP/$name-served-${pol//:/_}.json"
    kill -INT $spid; wait $spid
  done
  python3 - "$TMP" "$name" "$POLICIES" <<'EOF'
import json, sys
tmp, name, policies = sys.argv[1], sys.argv[2], sys.argv[3].split()
runs = [json.load(open(f"{tmp}/{name}-compare-{r}.json")) for r in (1, 2)]
pick = lambda rows, p: [r for r in rows if r["policy"] == p][0]
print(f"\n{name}: {pick(runs[0], policies[0])['model']}, {pick(runs[0], policies[0])['rate_rps']:.1f} req/s")
print(f"{'policy':<10} {'in-process mean':>16} {'(repeat)':>9} {'served mean':>12} {'(engine)':>9} {'in-process p99':>15} {'(repeat)':>9} {'served p99':>11} {'served/in-process mean':>23}")
for p in policies:
    a, b = pick(runs[0], p), pick(runs[1], p)
    s = json.load(open(f"{tmp}/{name}-served-{p.replace(':', '_')}.json"))
    la, lb, ls = a["latency_ms"], b["latency_ms"], s["latency_ms"]
    print(f"{p:<10} {la['mean']:>16.2f} {lb['mean']:>9.2f} {ls['mean']:>12.2f} {s['server_mean_ms'] or float('nan'):>9.2f} {la['p99']:>15.2f} {lb['p99']:>9.2f} {ls['p99']:>11.2f} {ls['mean'] / la['mean']:>22.2f}×"
          + ("" if s["completed"] == s["requests"] else f"  (served: {s['requests'] - s['completed']} not completed)"))
l0 = [pick(runs[0], p)["latency_ms"]["mean"] for p in policies]
s0 = [json.load(open(f"{tmp}/{name}-served-{p.replace(':', '_')}.json"))["latency_ms"]["mean"] for p in policies]
print(f"{policies[1]} / {policies[0]} mean: in process {l0[1] / l0[0]:.2f}×, served {s0[1] / s0[0]:.2f}×")
EOF
done
