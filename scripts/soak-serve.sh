#!/usr/bin/env bash
# Soak test of `lazybatch serve`, loopback only and bounded in time and count: one server,
# `lazybatch load` rounds back to back for DURATION seconds, then a graceful shutdown. Reports
# each round's latency and errors, the server's resident memory (VmRSS) after the first round
# and at the end, and the count of requests sent, answered by the server and lost: a request
# is lost when the client neither got an answer nor a counted rejection, or when the server's
# own count of completed requests differs from the client's.
#
# Usage: scripts/soak-serve.sh [--duration S] [--rate R] [--device npu|cpu] [--model M ...]
#   defaults: 600 s, ResNet-50 on the NPU model's timing emulation at 300 req/s, 20 s rounds.
#   e.g. scripts/soak-serve.sh --duration 60 --device cpu --rate 200 --model resnet50 --width 0.25 --res 0.5
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=600 RATE=300 DEVICE=npu ROUND=20 PORT=${PORT:-18432}
MODEL=(resnet50)
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --round) ROUND=$2; shift 2 ;;
    --model) shift; MODEL=(); while [ $# -gt 0 ] && [ "$1" != "--duration" ] && [ "$1" != "--rate" ] && [ "$1" != "--device" ] && [ "$1" != "--round" ]; do MODEL+=("$1"); shift; done ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
cargo build --release --quiet
B=target/release/lazybatch
TMP=$(mktemp -d)
trap 'kill -INT ${SPID:-0} 2>/dev/null || true; rm -rf "$TMP"' EXIT
$B serve --model "${MODEL[@]}" --device "$DEVICE" --policy lazy --listen "127.0.0.1:$PORT" 2>"$TMP/serve.err" &
SPID=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/v2/health/ready" >/dev/null && break; sleep 0.1; done
rss() { awk '/VmRSS/ {print $2}' "/proc/$SPID/status"; }
per_round=$(python3 -c "print(max(1, int($RATE * $ROUND)))")
echo "soak: ${MODEL[*]} on $DEVICE under lazy, $RATE req/s, ${ROUND}-s rounds for ${DURATION} s ($(date -u +%FT%TZ), $(nproc) cores)"
printf '%5s %8s %9s %9s %9s %8s %7s %10s\n' round sent completed mean_ms p99_ms rejected errors rss_kib
start=$(date +%s) round=0 sent=0 done_=0 rejected=0 errors=0 first_rss=
while [ $(( $(date +%s) - start )) -lt "$DURATION" ]; do
  round=$((round + 1))
  $B load --url "http://127.0.0.1:$PORT" --model "${MODEL[@]}" --rate "$RATE" --requests "$per_round" \
    --seed "$round" --json >"$TMP/round.json"
  read -r s c m p r e < <(python3 -c "import json; v = json.load(open('$TMP/round.json')); print(v['requests'], v['completed'], v['latency_ms']['mean'], v['latency_ms']['p99'], v['rejected'], v['errors'])")
  now_rss=$(rss)
  [ -n "$first_rss" ] || first_rss=$now_rss
  # a leak shows long before it hurts the machine
  if [ "$now_rss" -gt $((first_rss * 4 + 1048576)) ]; then echo "FAILED: resident memory $now_rss KiB" >&2; exit 1; fi
  printf '%5d %8d %9d %9.3f %9.3f %8d %7d %10d\n' "$round" "$s" "$c" "$m" "$p" "$r" "$e" "$now_rss"
  sent=$((sent + s)) done_=$((done_ + c)) rejected=$((rejected + r)) errors=$((errors + e))
done
metrics=$(curl -s "http://127.0.0.1:$PORT/metrics")
server_completed=$(awk '/^lazybatch_requests_total\{.*outcome="completed"\}/ {print $2}' <<<"$metrics")
held=$(awk '/^lazybatch_exchange_held/ {s += $2} END {print s + 0}' <<<"$metrics")
end_rss=$(rss)
kill -INT $SPID
wait $SPID
SPID=
lost=$((sent - done_ - rejected))
echo "sent $sent, completed $done_ (the server counted ${server_completed:-0}), rejected $rejected, errors $errors, lost $lost"
echo "server resident memory: $first_rss KiB after the first round, $end_rss KiB at the end; requests still held by the exchange: $held"
tail -1 "$TMP/serve.err"
if [ "$lost" -ne 0 ] || [ "${server_completed:-0}" != "$done_" ] || [ "$errors" -ne 0 ]; then
  echo "FAILED: requests lost or miscounted" >&2
  exit 1
fi
# flat: at most a quarter (plus 64 MiB of allocator slack) above the first round's
if [ "$end_rss" -gt $((first_rss * 5 / 4 + 65536)) ] || [ "$held" -ne 0 ]; then
  echo "FAILED: memory grew (or the exchange kept requests)" >&2
  exit 1
fi
